"""Block reductions (warp shuffles and shared memory): which stages get a block per output or
block-combined private accumulators, the CUDA they produce, and their results on the threaded
CPU emulation against ``tc.evaluate`` (sum, max, min, float and int, NaN inputs, several block
sizes); the sources compile with nvcc (one call).  The emulator's threaded mode itself is
checked on a hand-written kernel."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from block_harness import Prog, assert_matches, build, f32, kinds
from cuda_emulator import (
    _LIBS,
    EmulatedDevice,
    _digest,
    compile_emulated,
    emulated_fixture,
    gxx_available,
    threaded_kernels,
)

import tecomp as tc
from tecomp.codegen.cuda.compile import compile_many_nvcc, nvcc_path
from tecomp.passes.schedule.gpu import blocks


def _with_nans(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a[1, 7] = np.nan  # one NaN in row 1
    a[3, :] = np.nan  # a row of NaN
    return a


PROGS: dict[str, Prog] = {}


def prog(p: Prog) -> None:
    PROGS[p.name] = p


R, D = 6, 200
X = tc.placeholder((R, D), name="X")
k = tc.reduce_axis(D, name="k")
prog(Prog("row_sum", [tc.compute((R,), lambda i: tc.sum(X[i, k] * 2.0, axis=k), name="rs")],
          [X], lambda r: [f32(r, R, D)], rtol=1e-5, atol=1e-4))
prog(Prog("row_max_nan", [tc.compute((R,), lambda i: tc.max(X[i, k], axis=k), name="rmax")],
          [X], lambda r: [_with_nans(f32(r, R, D))], rtol=0, atol=0))
X64 = tc.placeholder((R, D), name="X64", dtype="float64")
prog(Prog("row_min_nan_f64",
          [tc.compute((R,), lambda i: tc.min(X64[i, k], axis=k), name="rmin")], [X64],
          lambda r: [_with_nans(r.standard_normal((R, D)))], rtol=0, atol=0))
prog(Prog("row_prod_f64",
          [tc.compute((R,), lambda i: tc.prod(X64[i, k], axis=k), name="rprod")], [X64],
          lambda r: [1.0 + 0.01 * r.standard_normal((R, D))], rtol=1e-12, atol=0))
XI = tc.placeholder((R, D), name="XI", dtype="int32")
prog(Prog("row_sum_int32",
          [tc.compute((R,), lambda i: tc.sum(XI[i, k], axis=k), name="isum")], [XI],
          lambda r: [r.integers(-10**6, 10**6, (R, D)).astype(np.int32)]))
XL = tc.placeholder((R, D), name="XL", dtype="int64")
prog(Prog("row_max_int64",
          [tc.compute((R,), lambda i: tc.max(XL[i, k] * 3, axis=k), name="imax")], [XL],
          lambda r: [r.integers(-10**12, 10**12, (R, D))]))
# a reduction over two collapsed loops, and one whose length is symbolic
k2 = tc.reduce_axis(D // 2, name="k2")
X3 = tc.placeholder((3, D // 2, 4), name="X3")
kb = tc.reduce_axis(4, name="kb")
prog(Prog("two_axes", [tc.compute((3,), lambda i: tc.sum(X3[i, k2, kb], axis=[k2, kb]),
                                  name="s2")], [X3], lambda r: [f32(r, 3, D // 2, 4)],
          atol=1e-4))
m = tc.var("m")
XM = tc.placeholder((4, m), name="XM")
km = tc.reduce_axis(m, name="km")
prog(Prog("symbolic_length", [tc.compute((4,), lambda i: tc.min(XM[i, km], axis=km),
                                         name="smin")], [XM], lambda r: [f32(r, 4, 77)],
          rtol=0, atol=0))
# a reduction whose length depends on the output (cumsum through where=)
XT = tc.placeholder((200,), name="XT")
kt = tc.reduce_axis(200, name="kt")
prog(Prog("triangular", [tc.compute((200,), lambda i: tc.sum(XT[kt], axis=kt, where=kt <= i),
                                    name="csum")], [XT], lambda r: [f32(r, 200)], atol=1e-4))
# full reductions into a scalar: private accumulators combined per block, one atomic a block
XS = tc.placeholder((9, 70), name="XS")
ra, rb = tc.reduce_axis(9, name="ra"), tc.reduce_axis(70, name="rb")
prog(Prog("scalar_sum", [tc.compute((), lambda: tc.sum(XS[ra, rb] * XS[ra, rb],
                                                       axis=[ra, rb]), name="ss")],
          [XS], lambda r: [f32(r, 9, 70)], rtol=1e-5, atol=1e-4))
prog(Prog("scalar_max_nan", [tc.compute((), lambda: tc.max(XS[ra, rb], axis=[ra, rb]),
                                        name="smax")],
          [XS], lambda r: [_with_nans(f32(r, 9, 70))], rtol=0, atol=0))
prog(Prog("scalar_max", [tc.compute((), lambda: tc.max(XS[ra, rb], axis=[ra, rb]),
                                    name="smax2")],
          [XS], lambda r: [f32(r, 9, 70)], rtol=0, atol=0))
XSI = tc.placeholder((9, 70), name="XSI", dtype="int32")
prog(Prog("scalar_min_int32", [tc.compute((), lambda: tc.min(XSI[ra, rb], axis=[ra, rb]),
                                          name="smini")],
          [XSI], lambda r: [r.integers(-1000, 1000, (9, 70)).astype(np.int32)]))
# softmax and layer norm with few long rows (the row reductions get a block each)
XR = tc.placeholder((4, 150), name="XR")
prog(Prog("softmax_rows", [tc.ops.softmax(XR)], [XR], lambda r: [f32(r, 4, 150)],
          rtol=1e-5, atol=1e-6))
gam, bet = tc.placeholder((150,), name="gam"), tc.placeholder((150,), name="bet")
prog(Prog("layer_norm_rows", [tc.ops.layer_norm(XR, gam, bet)], [XR, gam, bet],
          lambda r: [f32(r, 4, 150), f32(r, 150), f32(r, 150)], rtol=1e-4, atol=1e-4))

KERNELS = {name: build(p) for name, p in PROGS.items()}

EXPECTED = {"row_sum": ["B"], "row_max_nan": ["B"], "row_min_nan_f64": ["B"], "row_prod_f64": ["B"],
            "row_sum_int32": ["B"], "row_max_int64": ["B"], "two_axes": ["B"],
            "symbolic_length": ["B"], "triangular": ["B"], "scalar_sum": ["S", "P", "S"],
            "scalar_max_nan": ["S", "P", "S"], "scalar_max": ["S", "P", "S"],
            "scalar_min_int32": ["S", "P", "S"]}


emulated = emulated_fixture(KERNELS)


def test_schedules():
    got = {name: kinds(kk) for name, kk in KERNELS.items()}
    # softmax: max and sum per row; layer norm: mean and variance per row (the element-wise
    # stages around them are the lowering's business)
    for name in ("softmax_rows", "layer_norm_rows"):
        k = got.pop(name)
        assert k.count("B") == 2 and set(k) <= {"B", "g"}, (name, k)
    assert got == EXPECTED
    # the two loops of two_axes are collapsed into one strided loop over the block's threads
    br = KERNELS["two_axes"].program.stages[0].block_reduce
    assert [lp.var.name for lp in br.inner] == ["k2", "kb"] and br.reduce == "sum"
    assert KERNELS["row_max_nan"].program.stages[0].block_reduce.reduce == "max"


def test_source_has_shuffles_and_shared_memory():
    for name, kk in KERNELS.items():
        src = kk.source
        assert "__shfl_down_sync(0xffffffffu" in src and "__syncthreads();" in src, name
        assert "__shared__" in src and "tc_block_" in src, name
    src = KERNELS["row_sum"].source
    assert "tc_t = blockIdx.x; tc_t < tc_total; tc_t += gridDim.x" in src  # block per row
    assert "tc_u = threadIdx.x; tc_u < tc_inner; tc_u += blockDim.x" in src
    assert "tc_atomic" not in src  # one plain store per row
    src = KERNELS["scalar_sum"].source
    assert "tc_acc0 = tc_block_sum(tc_acc0, tc_red, 0.0f);" in src
    assert "if (threadIdx.x == 0 && (long long)blockIdx.x * blockDim.x < tc_total)" in src
    assert src.count("tc_atomic_sum(&") == 1


@pytest.mark.parametrize("name", list(PROGS))
def test_matches_the_evaluator(emulated, name):
    p, kernel = PROGS[name], KERNELS[name]
    args = p.args(np.random.default_rng(11))
    dev = EmulatedDevice()
    assert_matches(p, args, kernel.launch(args, device=dev))
    assert not dev.mem
    for (kname, grid, block), st in zip(dev.launches, kernel.program.stages):
        assert kname == st.name
        if st.block_reduce is not None:  # a block per output, at most the device's 3
            assert block == 64
            assert grid == min(3, blocks._const_trips(st.block_reduce.outer))


@pytest.mark.parametrize("block", [32, 96, 256])
def test_block_sizes(emulated, block):
    """Any multiple of 32 threads works: one warp, a partial last round of warps in shared
    memory (3 warps), full-size blocks; and more blocks than outputs (the grid is capped)."""
    for name in ("row_max_nan", "scalar_sum", "row_sum_int32", "layer_norm_rows"):
        p, kernel = PROGS[name], KERNELS[name]
        args = p.args(np.random.default_rng(block))
        assert_matches(p, args, kernel.launch(args, device=EmulatedDevice(block, 5)))


def test_block_sizes_are_whole_warps(emulated):
    """A device asking for 50 threads a block gets 32 for the stages that combine across the
    block (whole warps), and 50 for the others."""
    p, kernel = PROGS["softmax_rows"], KERNELS["softmax_rows"]
    args = p.args(np.random.default_rng(2))
    dev = EmulatedDevice(50, 2)
    assert_matches(p, args, kernel.launch(args, device=dev))
    blocked = [st.block_reduce is not None for st in kernel.program.stages]
    assert any(blocked) and not all(blocked)
    assert [b for _, _, b in dev.launches] == [32 if x else 50 for x in blocked]


def test_rule_keeps_short_and_wide_reductions_on_threads():
    """Rows shorter than BLOCK_REDUCE_MIN_LENGTH, or more outputs than
    BLOCK_REDUCE_MAX_OUTPUTS, keep a thread per output."""
    short = tc.placeholder((1000, blocks.BLOCK_REDUCE_MIN_LENGTH - 1), name="short")
    ks = tc.reduce_axis(blocks.BLOCK_REDUCE_MIN_LENGTH - 1, name="ks")
    s1 = tc.compute((1000,), lambda i: tc.sum(short[i, ks], axis=ks), name="s1")
    wide = tc.placeholder((blocks.BLOCK_REDUCE_MAX_OUTPUTS + 1, 100), name="wide")
    kw = tc.reduce_axis(100, name="kw")
    s2 = tc.compute((blocks.BLOCK_REDUCE_MAX_OUTPUTS + 1,),
                    lambda i: tc.sum(wide[i, kw], axis=kw), name="s2")
    just = tc.placeholder((blocks.BLOCK_REDUCE_MAX_OUTPUTS, 64), name="just")
    kj = tc.reduce_axis(64, name="kj")
    s3 = tc.compute((blocks.BLOCK_REDUCE_MAX_OUTPUTS,), lambda i: tc.sum(just[i, kj], axis=kj),
                    name="s3")
    assert kinds(build(Prog("short", [s1], [short], None))) == ["g"]
    assert kinds(build(Prog("wide", [s2], [wide], None))) == ["g"]
    assert kinds(build(Prog("just", [s3], [just], None))) == ["B"]
    # the longest row of a triangular reduction decides
    n_short = blocks.BLOCK_REDUCE_MIN_LENGTH - 1
    xt = tc.placeholder((n_short,), name="xt")
    kt2 = tc.reduce_axis(n_short, name="kt2")
    s4 = tc.compute((n_short,), lambda i: tc.sum(xt[kt2], axis=kt2, where=kt2 <= i), name="s4")
    assert kinds(build(Prog("tri_short", [s4], [xt], None))) == ["g"]


EMU_SOURCE = r"""
extern "C" __global__ void emu_reverse(const float* __restrict__ x, float* __restrict__ y) {
    __shared__ float sh[1024];
    sh[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    y[blockIdx.x * blockDim.x + threadIdx.x] = sh[blockDim.x - 1 - threadIdx.x];
}

extern "C" __global__ void emu_butterfly(const int* __restrict__ x, int* __restrict__ y) {
    int v = x[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int d = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 3);
    y[threadIdx.x] = v * 1000 + d;
}
"""


def test_threaded_emulation_of_barriers_and_shuffles():
    """Shared-memory reversal needs every thread's write before any read (__syncthreads);
    an xor butterfly gives every lane its warp's sum; shfl_down reads lane + 3 or keeps its own
    value past the warp's end."""
    if not gxx_available():
        pytest.skip("g++ is not available")
    assert threaded_kernels(EMU_SOURCE) == {"emu_reverse", "emu_butterfly"}
    compile_emulated([EMU_SOURCE])
    lib = _LIBS[_digest(EMU_SOURCE)]

    def launch(fn, grid, block, *arrays):
        ptrs = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
        argv = (ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs])
        getattr(lib, f"tc_emu_{fn}")(ctypes.c_uint(grid), ctypes.c_uint(block), argv)

    x = np.arange(2 * 96, dtype=np.float32)
    y = np.zeros_like(x)
    launch("emu_reverse", 2, 96, x, y)
    np.testing.assert_array_equal(y, np.concatenate([x[:96][::-1], x[96:][::-1]]))
    xi = np.arange(64, dtype=np.int32) * 7 % 23
    yi = np.zeros_like(xi)
    launch("emu_butterfly", 1, 64, xi, yi)
    sums = np.repeat([xi[:32].sum(), xi[32:].sum()], 32)
    lane = np.arange(64) % 32
    down = np.where(lane + 3 < 32, np.roll(xi, -3), xi)
    np.testing.assert_array_equal(yi, sums * 1000 + down)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_sources_compile_with_nvcc():
    bins = compile_many_nvcc([kk.source for kk in KERNELS.values()], "sm_90")
    assert all(b.image[:4] == b"\x7fELF" for b in bins)
