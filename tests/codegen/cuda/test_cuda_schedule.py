"""GPU scheduling on hand-built loop IR: which loops map onto the grid, which stores become
atomic or thread-private, which stages stay serial; every program also runs on the CPU
emulation (one g++ call for the module) and is compared with NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_emulator import EmulatedDevice, emulated_fixture

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.cuda.compile import compile_many_nvcc, nvcc_path
from tecomp.codegen.cuda.kernel import CudaKernel
from tecomp.errors import CompileError
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LetStmt,
    LoweredFunc,
    Seq,
    Store,
)
from tecomp.passes.schedule.gpu import schedule_gpu
from tecomp.passes.schedule.gpu.schedule import schedule

n, m = E.Var("n"), E.Var("m")
i, j, k, t = E.Var("i"), E.Var("j"), E.Var("k"), E.Var("t")


def c(v, dtype="int64"):
    return E.Const(v, dtype)


def f32(v):
    return E.Const(float(v), "float32")


def ld(buf, *idx):
    return BufferLoad(buf, tuple(idx), buf.dtype)


def inp(name, shape, dtype="float32"):
    return Buffer(name, tuple(shape), dtype, "input")


def outb(name, shape, dtype="float32"):
    return Buffer(name, tuple(shape), dtype, "output")


PROGRAMS: dict[str, tuple] = {}  # name -> (func, make_args(rng), reference(*args))


def program(name, func, args, ref):
    PROGRAMS[name] = (func, args, ref)


# -------------------------------------------------------------------- matmul, plain order
A, B = inp("A", (n, c(16))), inp("B", (c(16), c(8)))
C = outb("C", (n, c(8)))
acc = Buffer("acc", (), "float32", "local")
program("matmul", LoweredFunc("matmul", (A, B), (C,), (n,), For(
    i, c(0), n, For(j, c(0), c(8), Allocate(acc, Seq((
        Store(acc, (), f32(0)),
        For(k, c(0), c(16), Store(acc, (), ld(A, i, k) * ld(B, k, j), "sum")),
        Store(C, (i, j), ld(acc)))))), kind="parallel")),
    lambda r, nn=37: [r.standard_normal((nn, 16), np.float32),
                      r.standard_normal((16, 8), np.float32)],
    lambda a, b: a @ b)

# ------------------------- matmul in the "i, k, j" order, accumulating in place (as written)
C2 = outb("C2", (n, c(8)))
program("matmul_ikj", LoweredFunc("matmul_ikj", (A, B), (C2,), (n,), For(i, c(0), n, Seq((
    For(j, c(0), c(8), Store(C2, (i, j), f32(0))),
    For(k, c(0), c(16), For(j, c(0), c(8), Store(C2, (i, j), ld(A, i, k) * ld(B, k, j),
                                                 "sum"))))), kind="parallel")),
    lambda r: [r.standard_normal((29, 16), np.float32), r.standard_normal((16, 8), np.float32)],
    lambda a, b: a @ b)

# ---------------------------------------- column sums in "k, j" order with no outer loop
X = inp("X", (n, m))
S = outb("S", (m,))
program("colsum_kj", LoweredFunc("colsum_kj", (X,), (S,), (n, m), Seq((
    For(j, c(0), m, Store(S, (j,), f32(0))),
    For(k, c(0), n, For(j, c(0), m, Store(S, (j,), ld(X, k, j), "sum")))))),
    lambda r: [r.standard_normal((13, 300), np.float32)],
    lambda x: x.sum(0))

# --------------- a padded 1-D correlation after zero elimination: the j range is clamped by k
XA, WK = inp("XA", (n,)), inp("WK", (c(3),))
CO = outb("CO", (n,))
program("clamped_kj", LoweredFunc("clamped_kj", (XA, WK), (CO,), (n,), Seq((
    For(j, c(0), n, Store(CO, (j,), f32(0))),
    For(k, c(0), c(3), For(j, E.Max(c(0), k - c(1), "int64"),
                           E.Min(n, n + k - c(1), "int64"),
                           Store(CO, (j,), ld(XA, j + c(1) - k) * ld(WK, k), "sum")))))),
    lambda r: [r.standard_normal(37, np.float32), r.standard_normal(3, np.float32)],
    lambda x, w: np.convolve(x, w, "same").astype(np.float32))
# a j range that is not a clamp of the init's (it may leave it)
CB = outb("CB", (c(8),))
program("unclamped_kj", LoweredFunc("unclamped_kj", (XA,), (CB,), (n,), Seq((
    For(j, c(0), c(8), Store(CB, (j,), f32(0))),
    For(k, c(0), c(3), For(j, k, k + c(6), Store(CB, (j,), ld(XA, j - k), "sum")))))),
    lambda r: [r.standard_normal(9, np.float32)],
    lambda x: np.array([sum(x[jj - kk] for kk in range(3) if kk <= jj < kk + 6)
                        for jj in range(8)], np.float32))

# ------------------------------------------- a scalar sum, not marked parallel: privatised
T = outb("T", ())
program("total", LoweredFunc("total", (X,), (T,), (n, m), Seq((
    Store(T, (), f32(0)),
    For(i, c(0), n, For(j, c(0), m, Store(T, (), ld(X, i, j) * ld(X, i, j), "sum")))))),
    lambda r: [r.standard_normal((23, 41), np.float32)],
    lambda x: np.float32((x.astype(np.float64) ** 2).sum()))

# ------------------------------- scatter-add from a gather gradient: atomics (float and int)
G = inp("G", (n, c(4)))
IDX = inp("IDX", (n,), "int64")
DX = outb("DX", (m, c(4)))
CNT = outb("CNT", (m,), "int32")
program("scatter_add", LoweredFunc("scatter_add", (G, IDX), (DX, CNT), (n, m), Seq((
    For(i, c(0), m, Seq((For(j, c(0), c(4), Store(DX, (i, j), f32(0))),
                        Store(CNT, (i,), c(0, "int32")))), kind="parallel"),
    For(i, c(0), n, Seq((
        For(j, c(0), c(4), Store(DX, (ld(IDX, i), j), ld(G, i, j), "sum")),
        Store(CNT, (ld(IDX, i),), c(1, "int32"), "sum"))), kind="parallel")))),
    lambda r: [r.standard_normal((300, 4), np.float32), r.integers(0, 5, 300), 6],
    lambda g, idx, rows: _scatter_ref(g, idx, rows))


def _scatter_ref(g, idx, rows):
    dx = np.zeros((rows, 4), np.float32)
    np.add.at(dx, idx, g)
    return dx, np.bincount(idx, minlength=rows).astype(np.int32)


# ------------------------------------------------------ max / min / prod through CAS loops
Y = inp("Y", (n,))
YI = inp("YI", (n,), "int64")
MX = outb("MX", (c(3),))
MN = outb("MN", (c(3),), "int64")
PR = outb("PR", (c(3),), "float64")
YD = inp("YD", (n,), "float64")
program("cas_ops", LoweredFunc("cas_ops", (Y, YI, YD), (MX, MN, PR), (n,), Seq((
    For(i, c(0), c(3), Seq((Store(MX, (i,), E.Const(float("-inf"), "float32")),
                           Store(MN, (i,), c(2**62)), Store(PR, (i,), E.Const(1.0, "float64")))),
        kind="parallel"),
    For(i, c(0), n, Seq((
        Store(MX, (i % 3,), ld(Y, i), "max"),
        Store(MN, (i % 3,), ld(YI, i), "min"),
        Store(PR, (i % 3,), ld(YD, i), "prod"))), kind="parallel")))),
    lambda r: [r.standard_normal(200).astype(np.float32), r.integers(-10**6, 10**6, 200),
               r.uniform(0.9, 1.1, 200)],
    lambda y, yi, yd: (np.array([y[q::3].max() for q in range(3)], np.float32),
                       np.array([yi[q::3].min() for q in range(3)], np.int64),
                       np.array([yd[q::3].prod() for q in range(3)], np.float64)))

# ------------------------------------------- a scan: loop-carried, must stay on one thread
CS = outb("CS", (n,))
program("scan", LoweredFunc("scan", (Y,), (CS,), (n,), IfThenElse(n > 0, Seq((
    Store(CS, (c(0),), ld(Y, c(0))),
    For(i, c(1), n, Store(CS, (i,), ld(CS, i - 1) + ld(Y, i))))))),
    lambda r: [r.standard_normal(100).astype(np.float32)],
    lambda y: np.cumsum(y, dtype=np.float32))

# --------------------------------- temporaries with symbolic shapes, top-level let and if
TMP = Buffer("tmp", (n,), "float32", "temp")
R = outb("R", (n,))
half = E.Var("h")
_tail = IfThenElse(n > 3, For(i, c(0), half, LetStmt(t, n - 1 - i, Store(
    R, (i,), ld(TMP, t) + E.cast(t, "float32")))))
_body = Seq((For(i, c(0), n, Store(TMP, (i,), ld(Y, i) * f32(2)), kind="parallel"),
             LetStmt(half, n // 2, Seq((For(i, c(0), n, Store(R, (i,), f32(0))), _tail)))))


def _temps_ref(y):
    h = len(y) // 2
    r = np.zeros(len(y), np.float32)
    r[:h] = 2 * y[::-1][:h] + np.arange(len(y) - 1, len(y) - 1 - h, -1)
    return r


program("temps_lets", LoweredFunc("temps_lets", (Y,), (R,), (n,), Allocate(TMP, _body)),
        lambda r: [r.standard_normal(57).astype(np.float32)], _temps_ref)

# ----------------------------- strided loop, int32 indices, unrolled loop, a local array
n32 = E.Var("q", "int32")
i32 = E.Var("ii", "int32")
V = inp("V", (n,))
W = outb("W", (n,))
LOC = Buffer("loc", (c(3),), "float32", "temp")
program("strided", LoweredFunc("strided", (V,), (W,), (n, n32), Seq((
    For(i, c(0), n, Store(W, (i,), f32(-1))),
    For(i32, E.Const(2, "int32"), n32, Allocate(LOC, Seq((
        For(k, c(0), c(3), Store(LOC, (k,), ld(V, E.cast(i32, "int64")) * E.cast(k, "float32")),
            kind="unrolled"),
        Store(W, (E.cast(i32, "int64"),), ld(LOC, c(1)) + ld(LOC, c(2)))))), step=3)))),
    lambda r: [r.standard_normal(40).astype(np.float32), np.int32(35)],
    lambda v, q: np.where((np.arange(len(v)) >= 2) & (np.arange(len(v)) < q)
                          & ((np.arange(len(v)) - 2) % 3 == 0), 3 * v, -1).astype(np.float32))

# ------------------------------------- float16 storage with a float16 scatter, and bf16 temp
H = inp("H", (n,), "float16")
HO = outb("HO", (c(4),), "float16")
BT = Buffer("bt", (n,), "bfloat16", "temp")
BO = outb("BO", (n,), "bfloat16")
program("half_types", LoweredFunc("half_types", (H,), (HO, BO), (n,), Seq((
    For(i, c(0), c(4), Store(HO, (i,), E.Const(0.0, "float16")), kind="parallel"),
    For(i, c(0), n, Store(HO, (i % 4,), ld(H, i), "sum"), kind="parallel"),
    Allocate(BT, Seq((
        For(i, c(0), n, Store(BT, (i,), E.cast(ld(H, i), "bfloat16") * E.Const(3.0, "bfloat16")),
            kind="parallel"),
        For(i, c(0), n, Store(BO, (i,), ld(BT, i)), kind="parallel"))))))),
    lambda r: [r.uniform(-2, 2, 64).astype(np.float16)],
    lambda h: (np.array([h[q::4].astype(np.float32).sum() for q in range(4)], np.float16),
               (h.astype(np.float32) * 3)))


KERNELS = {name: CudaKernel(schedule_gpu(f), check=False) for name, (f, _, _) in PROGRAMS.items()}
SEED = 2024


emulated = emulated_fixture(KERNELS)


def _run(name, size_args=None):
    func, make, ref = PROGRAMS[name]
    args = make(np.random.default_rng(SEED)) if size_args is None else size_args
    dev = EmulatedDevice()
    got = KERNELS[name].launch(args, device=dev)
    assert not dev.mem, "device memory leaked"
    return args, got, ref(*args), dev


# half_types: HO sums 16 float16 values with float16 atomics (rounding at every addition)
TOL = {"half_types": [0.15, 1e-2], "total": [1e-4], "cas_ops": [1e-12] * 3,
       "scatter_add": [1e-5, 0]}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_like_numpy(emulated, name):
    _, got, want, _ = _run(name)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    tols = TOL.get(name, [1e-5] * len(want))
    assert len(got) == len(want) == len(tols)
    for g, w, tol in zip(got, want, tols):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                   atol=tol)


@pytest.mark.parametrize("rows", [0, 1, 7, 300])
def test_matmul_sizes_and_grid_stride(emulated, rows):
    r = np.random.default_rng(rows)
    a, b = r.standard_normal((rows, 16), np.float32), r.standard_normal((16, 8), np.float32)
    _, got, want, dev = _run("matmul", [a, b])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if rows == 300:  # 2400 elements on at most 3 blocks of 64 threads: 13 rounds each
        assert dev.launches == [("matmul_k0", 3, 64)]
    if rows == 0:
        assert dev.launches == []  # nothing to do: no launch


def _stage(name, n_):
    return schedule(PROGRAMS[name][0]).stages[n_]


def test_parallel_nest_collapses_onto_grid():
    st = _stage("matmul", 0)
    assert [x.var.name for x in st.mapped] == ["i", "j"]
    assert not st.atomic and not st.private


def _lowered_stages(outs, ins):
    """The GPU schedule's stages of ``outs`` as the pipeline lowers them (plain order) and
    the CUDA source."""
    func = tc.lower(outs, ins).func
    return schedule(func).stages, CudaKernel(schedule_gpu(func), check=False).source


def test_lowered_sums_accumulate_in_a_register_per_thread():
    # lowering emits the declaration order: every output element a thread, its sum local
    An, Bn = tc.placeholder((29, 16), name="A"), tc.placeholder((16, 8), name="B")
    r = tc.reduce_axis(16, name="r")
    Cn = tc.compute((29, 8), lambda a, b: tc.sum(An[a, r] * Bn[r, b], axis=r), name="C")
    (st,), src = _lowered_stages([Cn], [An, Bn])
    assert [x.var.name for x in st.mapped] == ["a", "b"] and not st.atomic
    assert "C_sum = (C_sum + " in src and "= C_sum;" in src
    Xn = tc.placeholder((13, 300), name="X")  # column sums: no outer loop
    rr = tc.reduce_axis(13, name="rr")
    Sn = tc.compute((300,), lambda b: tc.sum(Xn[rr, b], axis=rr), name="S")
    (st0,), _ = _lowered_stages([Sn], [Xn])
    assert [x.var.name for x in st0.mapped] == ["b"] and not st0.atomic


def test_convolution_input_gradient_maps_one_thread_per_element():
    # the conv2d input gradient (padding 1): the window's bounds stay on the sum's loops
    Xn, Wn = tc.placeholder((1, 2, 8, 8), name="X"), tc.placeholder((3, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(Xn, Wn, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    dX = tc.gradient(Y, [Xn], head=H)[0]
    stages, src = _lowered_stages([dX], [Xn, Wn, H])
    st = stages[-1]
    assert len(st.mapped) == 4 and not st.atomic
    assert "X_grad_sum" in src


def test_in_place_sums_in_k_j_order_keep_their_order():
    # hand-written loop IR that accumulates in place (j inside k) is left as written
    for name in ("matmul_ikj", "colsum_kj", "clamped_kj", "unclamped_kj"):
        assert "_acc" not in KERNELS[name].source
    assert len(schedule(PROGRAMS["unclamped_kj"][0]).stages) == 2


def test_scalar_sum_is_privatised():
    prog = schedule(PROGRAMS["total"][0])
    assert prog.stages[0].serial
    st = prog.stages[1]
    assert [x.var.name for x in st.mapped] == ["i", "j"]
    assert [p.buffer.name for p in st.private] == ["T"] and not st.atomic
    src = KERNELS["total"].source
    assert src.count("tc_atomic_sum(&T[0], tc_acc0);") == 1


def test_scatter_uses_atomics():
    st = _stage("scatter_add", 1)
    assert [x.var.name for x in st.mapped] == ["i"]
    assert {s.buffer.name for s in st.atomic} == {"DX", "CNT"}
    src = KERNELS["scatter_add"].source
    assert "tc_atomic_sum(&DX[" in src and "tc_atomic_sum(&CNT[" in src
    assert "atomicAdd" in src


def test_scan_stays_serial():
    prog = schedule(PROGRAMS["scan"][0])
    assert all(st.serial for st in prog.stages)
    assert "if (blockIdx.x != 0 || threadIdx.x != 0) return;" in KERNELS["scan"].source


def test_temps_and_lets():
    prog = schedule(PROGRAMS["temps_lets"][0])
    assert [b.name for b in prog.temps] == ["tmp"]
    assert len(prog.stages) == 3
    assert [v.name for v, _ in prog.stages[2].lets] == ["h"]
    assert [x.var.name for x in prog.stages[2].mapped] == ["i"]


def test_strided_and_half_sources():
    src = KERNELS["strided"].source
    assert "tc_extent(tc_lo0, ((long long)(q)), 3)" in src and "#pragma unroll" in src
    assert "float loc[3];" in src
    hsrc = KERNELS["half_types"].source
    assert "#include <cuda_fp16.h>" in hsrc and "#include <cuda_bf16.h>" in hsrc
    assert "__nv_bfloat16* __restrict__ bt" in hsrc and "float* __restrict__ BO" in hsrc
    assert "tc_atomic_sum(&HO[" in hsrc


def test_non_parallel_owned_loop_is_mapped():
    f = LoweredFunc("own", (Y,), (R,), (n,), For(i, c(0), n, Store(R, (i,), ld(Y, i) + f32(1))))
    (st,) = schedule(f).stages
    assert [x.var.name for x in st.mapped] == ["i"]


def test_symbolic_temp_inside_a_kernel_is_an_error():
    tb = Buffer("scratch", (n,), "float32", "temp")
    f = LoweredFunc("bad", (Y,), (R,), (n,), For(i, c(0), n, Allocate(tb, Seq((
        Store(tb, (c(0),), ld(Y, i)), Store(R, (i,), ld(tb, c(0)))))), kind="parallel"))
    with pytest.raises(CompileError, match="scratch.*constant shape"):
        CudaKernel(schedule_gpu(f), check=False)


def test_let_reading_a_buffer_written_in_its_scope_is_an_error():
    tb = Buffer("tb", (c(1),), "float32", "temp")
    v = E.Var("v", "float32")
    f = LoweredFunc("badlet", (Y,), (R,), (n,), Allocate(tb, LetStmt(v, ld(tb, c(0)), Seq((
        Store(tb, (c(0),), f32(1)), For(i, c(0), n, Store(R, (i,), v), kind="parallel"))))))
    with pytest.raises(CompileError, match="value of v reads buffer 'tb'"):
        CudaKernel(schedule_gpu(f), check=False)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_sources_compile_with_nvcc():
    bins = compile_many_nvcc([kern.source for kern in KERNELS.values()], "sm_90")
    assert len(bins) == len(KERNELS) and all(b.image[:4] == b"\x7fELF" for b in bins)
