"""Shared-memory tiling of contractions: which stages are tiled (matmul with sizes that are not
multiples of the tile, batched, transposed operands, two reduction axes, a 1-D convolution, a
matmul gradient, a fused bias), which keep the thread-per-element mapping, the CUDA they produce,
and their results on the threaded CPU emulation against ``tc.evaluate``; the sources compile
with nvcc (one call)."""

from __future__ import annotations

import numpy as np
import pytest
from block_harness import Prog, assert_matches, build, f32, kinds
from cuda_emulator import EmulatedDevice, emulated_fixture

import tecomp as tc
from tecomp import gpuir
from tecomp.codegen.cuda.compile import compile_many_nvcc, nvcc_path
from tecomp.passes.schedule.gpu import blocks

PROGS: dict[str, Prog] = {}


def prog(p: Prog) -> None:
    PROGS[p.name] = p


n = tc.var("n")
A = tc.placeholder((n, 40), name="A")
B = tc.placeholder((40, 37), name="B")
k = tc.reduce_axis(40, name="k")
C = tc.compute((n, 37), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
prog(Prog("matmul_ragged", [C], [A, B], lambda r: [f32(r, 45, 40), f32(r, 40, 37)],
          atol=1e-4))
A2, B2 = tc.placeholder((64, 32), name="A2"), tc.placeholder((32, 64), name="B2")
k2 = tc.reduce_axis(32, name="k2")
prog(Prog("matmul_exact", [tc.compute((64, 64), lambda i, j: tc.sum(A2[i, k2] * B2[k2, j],
                                                                   axis=k2), name="C2")],
          [A2, B2], lambda r: [f32(r, 64, 32), f32(r, 32, 64)], atol=1e-4))
BA, BB = tc.placeholder((3, 33, 20), name="BA"), tc.placeholder((3, 20, 18), name="BB")
kb = tc.reduce_axis(20, name="kb")
prog(Prog("batched", [tc.compute((3, 33, 18), lambda b, i, j: tc.sum(
    BA[b, i, kb] * BB[b, kb, j], axis=kb), name="BC")], [BA, BB],
    lambda r: [f32(r, 3, 33, 20), f32(r, 3, 20, 18)], atol=1e-4))
AT, BT = tc.placeholder((40, 35), name="AT"), tc.placeholder((33, 40), name="BT")
prog(Prog("transposed", [tc.compute((35, 33), lambda i, j: tc.sum(BT[j, k] * AT[k, i], axis=k),
                                    name="CT")], [AT, BT],
          lambda r: [f32(r, 40, 35), f32(r, 33, 40)], atol=1e-4))
AD, BD = tc.placeholder((17, 18), name="AD", dtype="float64"), tc.placeholder(
    (18, 19), name="BD", dtype="float64")
kd = tc.reduce_axis(18, name="kd")
prog(Prog("float64", [tc.compute((17, 19), lambda i, j: tc.sum(AD[i, kd] * BD[kd, j], axis=kd),
                                 name="CD")], [AD, BD],
          lambda r: [r.standard_normal((17, 18)), r.standard_normal((18, 19))],
          rtol=1e-12, atol=1e-12))
A3, B3 = tc.placeholder((20, 5, 4), name="A3"), tc.placeholder((5, 4, 21), name="B3")
ka, kc = tc.reduce_axis(5, name="ka"), tc.reduce_axis(4, name="kc")
prog(Prog("two_axes", [tc.compute((20, 21), lambda i, j: tc.sum(A3[i, ka, kc] * B3[ka, kc, j],
                                                               axis=[ka, kc]), name="C3")],
          [A3, B3], lambda r: [f32(r, 20, 5, 4), f32(r, 5, 4, 21)], atol=1e-4))
# 1-D convolution: output (batch, channel, position); W does not use the position, X does not
# use the output channel, so (channel, position) is tiled with the flattened (c, r) as k
XC, WC = tc.placeholder((2, 4, 40), name="XC"), tc.placeholder((17, 4, 5), name="WC")
rc, rr = tc.reduce_axis(4, name="rc"), tc.reduce_axis(5, name="rr")
prog(Prog("conv1d", [tc.compute((2, 17, 36), lambda b, co, x: tc.sum(
    WC[co, rc, rr] * XC[b, rc, x + rr], axis=[rc, rr]), name="Y1")], [XC, WC],
    lambda r: [f32(r, 2, 4, 40), f32(r, 17, 4, 5)], atol=1e-4))
# 2-D convolution (after its padding stage): rows f, columns (b, y, x), k = (c, ry, rx); its
# weight gradient has one tile of outputs and a long reduction: a block reduction instead
X4, W4 = tc.placeholder((2, 3, 9, 8), name="X4"), tc.placeholder((16, 3, 3, 3), name="W4")
Y4 = tc.ops.conv2d(X4, W4, padding=1)
H4 = tc.placeholder((2, 16, 9, 8), name="H4")
prog(Prog("conv2d", [Y4], [X4, W4], lambda r: [f32(r, 2, 3, 9, 8), f32(r, 16, 3, 3, 3)],
          atol=1e-4))
prog(Prog("conv2d_grad", tc.gradient(Y4, [X4, W4], head=H4), [X4, W4, H4],
          lambda r: [f32(r, 2, 3, 9, 8), f32(r, 16, 3, 3, 3), f32(r, 2, 16, 9, 8)],
          atol=1e-4))
G = tc.placeholder((n, 37), name="G")
prog(Prog("matmul_grad", tc.gradient(C, [A, B], head=G), [A, B, G],
          lambda r: [f32(r, 45, 40), f32(r, 40, 37), f32(r, 45, 37)], atol=1e-4))
bias = tc.placeholder((37,), name="bias")
prog(Prog("bias", [tc.compute((n, 37), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k) + bias[j],
                              name="CB")], [A, B, bias],
          lambda r: [f32(r, 45, 40), f32(r, 40, 37), f32(r, 37)], atol=1e-4))
# not tiled: too narrow, not a product, a condition inside the reduction
BN = tc.placeholder((40, 8), name="BN")
prog(Prog("narrow", [tc.compute((n, 8), lambda i, j: tc.sum(A[i, k] * BN[k, j], axis=k),
                                name="CN")], [A, BN], lambda r: [f32(r, 45, 40), f32(r, 40, 8)],
          atol=1e-4))
prog(Prog("not_a_product", [tc.compute((n, 37), lambda i, j: tc.sum(A[i, k] + B[k, j], axis=k),
                                       name="CS")], [A, B],
          lambda r: [f32(r, 45, 40), f32(r, 40, 37)], atol=1e-4))
prog(Prog("masked", [tc.compute((n, 37), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k,
                                                            where=k <= j), name="CM")],
          [A, B], lambda r: [f32(r, 45, 40), f32(r, 40, 37)], atol=1e-4))

KERNELS = {name: build(p) for name, p in PROGS.items()}
EXPECTED = {"matmul_ragged": ["T"], "matmul_exact": ["T"], "batched": ["T"],
            "transposed": ["T"], "float64": ["T"], "two_axes": ["T"], "conv1d": ["T"],
            # dB = A^T G: 2 x 2 tiles, a reduction over the symbolic n: block reduction
            "matmul_grad": ["T", "B"], "narrow": ["g"], "not_a_product": ["g"],
            "masked": ["g"]}


emulated = emulated_fixture(KERNELS)


def test_schedules():
    got = {name: kinds(kk) for name, kk in KERNELS.items()}
    assert got.pop("bias")[0] == "T"  # the bias may be fused into the tile's store or not
    # the convolutions' padding and input-gradient stages are the lowering's business
    assert got.pop("conv2d")[-1] == "T"
    conv_grad = got.pop("conv2d_grad")
    assert conv_grad[-1] == "B" and "T" not in conv_grad
    assert got == EXPECTED
    def names(loops):
        return [lp.var.name for lp in loops]

    tl = KERNELS["batched"].program.stages[0].tiling
    assert (names(tl.batch), names(tl.rows), names(tl.cols)) == (["b"], ["i"], ["j"])
    tl = KERNELS["transposed"].program.stages[0].tiling  # the factor using j is the columns'
    assert (names(tl.rows), names(tl.cols)) == (["i"], ["j"]) and tl.b.buffer.name == "BT"
    tl = KERNELS["conv1d"].program.stages[0].tiling
    assert (names(tl.batch), names(tl.rows), names(tl.cols)) == ([], ["co"], ["b", "x"])
    assert names(tl.kloops) == ["rc", "rr"]
    tl = KERNELS["conv2d"].program.stages[-1].tiling
    assert (names(tl.batch), names(tl.rows), names(tl.cols)) == ([], ["f"], ["b", "y", "x"])
    assert blocks.tile_count(tl) == 5 < blocks.TILE_MIN_BLOCKS


def test_source_stages_tiles_in_shared_memory():
    src = KERNELS["matmul_ragged"].source
    assert f"__shared__ float tc_sa[{gpuir.TILE_M}][{gpuir.TILE_K + 1}];" in src
    assert f"__shared__ float tc_sb[{gpuir.TILE_K}][{gpuir.TILE_N}];" in src
    assert src.count("__syncthreads();") == 2
    assert "tc_c[1][1] += tc_sa[tc_ty + 16][tc_q] * tc_sb[tc_q][tc_tx + 16];" in src
    assert "if (tc_ii < tc_ni && tc_jj < tc_nj) {" in src  # boundary tiles guarded
    assert "double tc_sa" in KERNELS["float64"].source
    assert "__shared__" not in KERNELS["narrow"].source


@pytest.mark.parametrize("name", list(PROGS))
def test_matches_the_evaluator(emulated, name):
    p, kernel = PROGS[name], KERNELS[name]
    args = p.args(np.random.default_rng(5))
    dev = EmulatedDevice()
    assert_matches(p, args, kernel.launch(args, device=dev))
    assert not dev.mem
    for (kname, grid, block), st in zip(dev.launches, kernel.program.stages):
        assert kname == st.name
        if st.tiling is not None:
            assert block == gpuir.TILE_THREADS and grid <= 3


def test_many_tiles_per_block(emulated):
    """One block walks over all tiles (grid-stride over tiles), with a symbolic row count
    that leaves a partial last tile."""
    p, kernel = PROGS["matmul_ragged"], KERNELS["matmul_ragged"]
    r = np.random.default_rng(9)
    args = [f32(r, 71, 40), f32(r, 40, 37)]
    dev = EmulatedDevice(max_blocks=1)
    assert_matches(p, args, kernel.launch(args, device=dev))
    assert dev.launches[0][1:] == (1, gpuir.TILE_THREADS)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_sources_compile_with_nvcc():
    bins = compile_many_nvcc([kk.source for kk in KERNELS.values()], "sm_90")
    assert all(b.image[:4] == b"\x7fELF" for b in bins)
