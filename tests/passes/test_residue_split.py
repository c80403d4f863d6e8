"""Residue splitting of sliding sum windows (passes/schedule/cpu/residue_split.py): convolution
gradients for strides, dilations and paddings against the evaluator (loop interpreter and LLVM),
the split visible in the loop IR, symbolic sizes, and the cases that keep the loop-order form;
with the passes that shape the same gradients: crop absorption (passes/absorb_crop.py),
flattened strided weight sums (passes/flatten_sum.py), flattened rows of a strided forward
(passes/flatten_rows.py) and the parallel collapsing of the split stage
(passes/schedule/cpu/schedule.py)."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import run

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import walk
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LoweredFunc, Seq, Store
from tecomp.lowering_api import Lowered
from tecomp.passes.affine_forms import coefficient
from tecomp.passes.schedule.cpu import fuse_parallel, schedule_cpu
from tecomp.passes.schedule.cpu.residue_split import find_window
from tecomp.passes.schedule.cpu.sum_order import order_sums

I64 = "int64"


def cpu_lower(outs, ins) -> Lowered:
    """``tc.lower``, then the CPU schedule's loop order of reductions, which residue-splits
    (the form these tests look at)."""
    low = tc.lower(outs, ins)
    return Lowered(order_sums(low.func), low.constants)


def _loops(s, outer=()):
    """``(loop, enclosing loops)`` for every ``For`` in ``s``."""
    if isinstance(s, For):
        yield s, outer
        yield from _loops(s.body, outer + (s,))
    elif hasattr(s, "stmts"):
        for x in s.stmts:
            yield from _loops(x, outer)
    elif hasattr(s, "body"):
        yield from _loops(s.body, outer)
    if hasattr(s, "then"):
        yield from _loops(s.then, outer)


def _accumulating(func, buffer: str):
    """The innermost loops that accumulate into ``buffer``, with their enclosing loops."""
    return [(x, outer) for x, outer in _loops(func.body)
            if isinstance(x.body, Store) and x.body.reduce == "sum"
            and x.body.buffer.name == buffer]


def _moves_with(loop: For, outer: tuple[For, ...], stride: int) -> bool:
    """Whether a bound of ``loop`` steps by ``stride`` with an enclosing loop variable (the
    short window loop that residue splitting removes)."""
    for bound in (loop.lo, loop.hi):
        for o in outer:
            for t in _terms(bound):
                if coefficient(t, o.var) == stride:
                    return True
    return False


def _terms(e: E.Expr):
    if isinstance(e, (E.Max, E.Min)):
        yield from _terms(e.a)
        yield from _terms(e.b)
    else:
        yield e


def _conv_grads(shape, wshape, stride, pad, dil):
    X = tc.placeholder(shape, name="X")
    W = tc.placeholder(wshape, name="W")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dil)
    H = tc.placeholder(Y.shape, name="H")
    return X, W, H, tc.gradient(Y, [X, W], head=H)


CASES = [(s, d, p) for s in (1, 2, 3) for d in (1, 2, 3) for p in (0, 1, 2)]


@pytest.mark.parametrize("stride,dil,pad", CASES)
def test_convolution_gradients_match_the_evaluator(stride, dil, pad):
    rng = np.random.default_rng(100 * stride + 10 * dil + pad)
    size = (11, 10) if (stride + dil + pad) % 2 else (10, 13)   # odd and even extents
    X, W, H, grads = _conv_grads((1, 2) + size, (3, 2, 3, 3), stride, pad, dil)
    low = cpu_lower(grads, [X, W, H])
    arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
              for t in (X, W, H)]
    want = tc.evaluate(grads, dict(zip([X, W, H], arrays)))
    got = run(low.func, arrays, constants=low.constants)
    compiled = tc.build(grads, [X, W, H])(*arrays)
    for g, c, w in zip(got, compiled, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(c, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride,kernel,pad", [(2, 3, 0), (2, 3, 1), (2, 3, 2), (2, 4, 1),
                                               (2, 5, 2), (3, 4, 1), (3, 4, 2), (3, 5, 2)])
def test_strided_input_gradient_accumulates_phases_with_unit_stride(stride, kernel, pad):
    X, W, H, grads = _conv_grads((1, 2, 21, 20), (3, 2, kernel, kernel), stride, pad, 1)
    func = cpu_lower(grads[:1], [X, W, H]).func
    phases = [b for b in _allocated(func.body) if b.name.endswith("_phases")]
    assert len(phases) == 1, "no phase-major temporary"
    (ph,) = phases
    assert ph.shape[-2] == E.Const(stride, I64)
    stores = [(x, outer) for x, outer in _loops(func.body)
              if isinstance(x.body, Store) and x.body.buffer == ph]
    updates = [(x, outer) for x, outer in stores if x.body.reduce == "sum"]
    folded = [(x, outer) for x, outer in stores if x.body.reduce is None
              and any(isinstance(n, BufferLoad) and n.buffer == ph for n in walk(x.body.value))]
    assert updates and folded, "no window update, or no folded window"
    for loop, outer in updates + folded:
        assert not _moves_with(loop, outer, stride), f"{loop.var.name} moves with the stride"
        assert coefficient(loop.body.indices[-1], loop.var) == 1   # unit stride in the phase
    # no store into the gradient itself inside the reduction: only the copy back
    direct = [x for x, _ in _loops(func.body) if isinstance(x.body, Store)
              and x.body.buffer.name == "X_grad"]
    assert len(direct) == 1 and direct[0].body.reduce is None


def _allocated(s):
    if isinstance(s, Allocate):
        yield s.buffer
    for x in getattr(s, "stmts", ()):
        yield from _allocated(x)
    if hasattr(s, "body"):
        yield from _allocated(s.body)


def _transposed(n: E.Expr | int, stride: int, width: int, name: str = "G"):
    """``G[j] = sum(H[k] * W[j - stride*k])`` over the ``k`` with ``0 <= j - stride*k <
    width``: a 1-D transposed convolution written as a gather with floor-division bounds."""
    H = tc.placeholder((n,), name="H")
    W = tc.placeholder((width,), name="W")

    def body(j):
        lo = E.maximum(0, (j - (width - 1) + stride - 1) // stride)
        hi = E.minimum(n - 1, j // stride) + 1
        k = tc.reduce_axis((lo, hi), name="k")
        return tc.sum(H[k] * W[j - stride * k], axis=k)

    G = tc.compute((stride * (n - 1) + width,), body, name=name)
    return H, W, G


@pytest.mark.parametrize("stride,width", [(1, 2), (2, 3), (2, 4), (3, 3), (3, 7), (4, 5)])
def test_symbolic_size_transposed_convolution(stride, width):
    n = tc.var("n")
    H, W, G = _transposed(n, stride, width)
    func = cpu_lower([G], [H, W]).func
    assert any(x.var.name == "j_q" for x, _ in _loops(func.body))   # the split fired
    kernel = tc.build([G], [H, W])
    rng = np.random.default_rng(stride * 10 + width)
    for size in (1, 2, 5, 8):
        h = rng.standard_normal(size).astype(np.float32)
        w = rng.standard_normal(width).astype(np.float32)
        (want,) = tc.evaluate([G], {H: h, W: w, n: size})
        (got,) = run(func, [h, w])
        (compiled,) = kernel(h, w)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-5)


def test_float_sums_are_bit_identical_to_the_plain_order():
    """Each element receives its terms in the original order (module docstring)."""
    H, W, G = _transposed(9, 2, 3)
    rng = np.random.default_rng(3)
    h = (rng.standard_normal(9) * 1e3).astype(np.float32)
    w = rng.standard_normal(3).astype(np.float32)
    func = cpu_lower([G], [H, W]).func
    (got,) = run(func, [h, w])
    want = np.zeros(19, np.float32)
    for j in range(19):
        for k in range(max(0, (j - 1) // 2), min(8, j // 2) + 1):
            want[j] = np.float32(want[j] + np.float32(h[k] * w[j - 2 * k]))
    np.testing.assert_array_equal(got, want)


def _axis(j: E.Var, lo: E.Expr, hi: E.Expr, name: str = "k") -> E.IterVar:
    return E.IterVar(E.Var(name, I64), lo, E.sub(hi, lo), "reduce")


def test_window_found_for_a_narrow_strided_window():
    j = E.Var("j", I64)
    ax = _axis(j, E.maximum(0, (j - 1) // 2), E.minimum(15, j // 2) + 1)
    win = find_window((ax,), j)
    assert win is not None and win.stride == 2 and win.index == 0


@pytest.mark.parametrize("why,lo,hi", [
    # a dilated kernel-offset window: 3 fixed offsets, wide in j -> the loop-order form
    ("wide", lambda j: E.maximum((j - 30) // 2, 0), lambda j: E.minimum(j // 2, 2) + 1),
    # different divisors on the two sides: no single residue split
    ("mixed", lambda j: E.maximum(0, (j - 1) // 2), lambda j: E.minimum(15, j // 3) + 1),
    # a window term with coefficient -1
    ("flipped", lambda j: E.maximum(0, 5 - j), lambda j: E.minimum(15, 8 - j)),
    # only one side follows j
    ("one side", lambda j: E.maximum(0, (j - 1) // 2), lambda j: E.Const(15, I64)),
])
def test_window_not_split(why, lo, hi):
    j = E.Var("j", I64)
    assert find_window((_axis(j, lo(j), hi(j)),), j) is None, why


def test_two_axes_on_the_window_are_left_alone():
    j = E.Var("j", I64)
    a = _axis(j, E.maximum(0, (j - 1) // 2), E.minimum(15, j // 2) + 1, "a")
    b = _axis(j, E.maximum(0, (j - 1) // 2), E.minimum(15, j // 2) + 1, "b")
    assert find_window((a, b), j) is None


# ------------------------------------------------------------- the schedule around the split
def test_phase_rows_read_back_by_their_own_iteration_are_collapsed():
    """fuse_parallel: a load of the stored buffer at another element of the iteration's own
    slice (the copy back from the phases) keeps the loops independent."""
    b, c, r, x = (E.Var(n, I64) for n in ("b", "c", "r", "x"))
    c16, c2, c8 = (E.Const(v, I64) for v in (16, 2, 8))
    P = Buffer("P", (E.Const(1, I64), c16, c2, c8), "float32", "temp")
    Y = Buffer("Y", (E.Const(1, I64), c16, E.Const(16, I64)), "float32", "output")
    fill = For(r, E.Const(0, I64), c2, For(x, E.Const(0, I64), c8, Store(
        P, (b, c, r, x), E.Const(1.0, "float32"))))
    back = For(x, E.Const(0, I64), E.Const(16, I64), Store(Y, (b, c, x), BufferLoad(
        P, (b, c, E.mod(x, 2), E.floordiv(x, 2)), "float32")))
    body = For(b, E.Const(0, I64), E.Const(1, I64), For(c, E.Const(0, I64), c16, Seq((
        fill, back))), kind="parallel")
    func = LoweredFunc("f", (), (Y,), (), Allocate(P, body))
    out = fuse_parallel(func, min_trips=16).body.body
    assert isinstance(out, For) and out.kind == "parallel" and out.hi == c16
    # the same read of another row (c + 1 when c < 15) is a cross-iteration dependence
    other = For(x, E.Const(0, I64), E.Const(16, I64), Store(Y, (b, c, x), BufferLoad(
        P, (b, E.minimum(c + 1, 15), E.mod(x, 2), E.floordiv(x, 2)), "float32")))
    body2 = For(b, E.Const(0, I64), E.Const(1, I64), For(c, E.Const(0, I64), c16, Seq((
        fill, other))), kind="parallel")
    func2 = LoweredFunc("f", (), (Y,), (), Allocate(P, body2))
    assert fuse_parallel(func2, min_trips=16).body.body is body2


def test_strided_gradient_runs_on_many_parallel_iterations():
    X, W, H, grads = _conv_grads((1, 4, 16, 16), (8, 4, 3, 3), 2, 1, 1)
    func = schedule_cpu(tc.lower(grads[:1], [X, W, H]).func)
    par = [x for x, _ in _loops(func.body) if x.kind == "parallel"]
    assert par and all(isinstance(x.hi, E.Const) and x.hi.value >= 64 for x in par)


# ---------------------------------------------------------------------------- crop absorption
def test_padded_gradient_is_computed_inside_the_crop():
    """The padded input gradient is absorbed into its crop: no padded buffer, no copy."""
    X, W, H, grads = _conv_grads((1, 2, 9, 10), (3, 2, 3, 3), 1, 1, 1)
    func = cpu_lower(grads[:1], [X, W, H]).func
    assert not [b for b in _allocated(func.body) if "pad" in b.name]
    X2, W2, H2, grads2 = _conv_grads((1, 2, 9, 10), (3, 2, 3, 3), 1, 1, 1)
    # read twice (the crop and a second output): the padded gradient keeps its buffer
    Xp = grads2[0].op.body.tensor
    both = cpu_lower([grads2[0], Xp], [X2, W2, H2]).func
    assert any(b.name == Xp.name for b in both.outputs)


@pytest.mark.parametrize("offsets", [(0, 0), (1, 2), (2, 0)])
def test_crop_of_a_reduction_matches_the_evaluator(offsets):
    rng = np.random.default_rng(sum(offsets))
    A = tc.placeholder((6, 7), name="A")
    B = tc.placeholder((7, 9), name="B")
    k = tc.reduce_axis(7, name="k")
    C = tc.compute((6, 9), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = offsets
    D = tc.compute((4, 7), lambda i, j: C[i + a, j + b], name="D")
    func = cpu_lower([D], [A, B]).func
    assert not list(_allocated(func.body)), "the product was not absorbed into the crop"
    arrays = [rng.standard_normal((6, 7)).astype(np.float32),
              rng.standard_normal((7, 9)).astype(np.float32)]
    (want,) = tc.evaluate([D], dict(zip([A, B], arrays)))
    (got,) = run(func, arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (compiled,) = tc.build([D], [A, B])(*arrays)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------- flattened strided weight sums
@pytest.mark.parametrize("stride,dil,pad", [(2, 1, 1), (2, 2, 0), (3, 1, 2)])
def test_strided_weight_gradient_is_a_flat_dot_over_staged_columns(stride, dil, pad):
    rng = np.random.default_rng(7 * stride + dil + pad)
    X, W, H, grads = _conv_grads((1, 3, 20, 21), (5, 3, 3, 3), stride, pad, dil)
    low = cpu_lower(grads[1:], [X, W, H])
    cols = [b for b in _allocated(low.func.body) if b.name.endswith("_cols")]
    assert len(cols) == 1, "the strided read of the weight gradient was not staged"
    acc = [x for x, _ in _loops(low.func.body) if isinstance(x.body, Store)
           and x.body.reduce == "sum"]
    assert len(acc) == 1 and isinstance(acc[0].hi, E.Const) and acc[0].hi.value >= 64
    arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
              for t in (X, W, H)]
    (want,) = tc.evaluate(grads[1:], dict(zip([X, W, H], arrays)))
    (got,) = run(low.func, arrays, constants=low.constants)
    (compiled,) = tc.build(grads[1:], [X, W, H])(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-4)


def test_unit_stride_weight_gradient_is_not_staged():
    X, W, H, grads = _conv_grads((1, 3, 20, 21), (5, 3, 3, 3), 1, 1, 1)
    low = cpu_lower(grads[1:], [X, W, H])
    assert not [b for b in _allocated(low.func.body) if b.name.endswith("_cols")]


@pytest.mark.parametrize("stride,kernel,dil,pad", [(2, 1, 1, 0), (2, 2, 1, 1), (3, 2, 1, 0),
                                                   (3, 1, 1, 1), (2, 2, 2, 1), (4, 3, 1, 1)])
def test_residues_that_no_term_reaches(stride, kernel, dil, pad):
    """Kernels no wider than the stride leave some phases without terms (they stay zero)."""
    rng = np.random.default_rng(stride * 100 + kernel * 10 + dil + pad)
    X, W, H, grads = _conv_grads((1, 2, 14, 15), (3, 2, kernel, kernel), stride, pad, dil)
    arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
              for t in (X, W, H)]
    want = tc.evaluate(grads, dict(zip([X, W, H], arrays)))
    low = cpu_lower(grads, [X, W, H])
    got = run(low.func, arrays, constants=low.constants)
    compiled = tc.build(grads, [X, W, H])(*arrays)
    for g, c, w in zip(got, compiled, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(c, w, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------- flattened rows of a strided forward
def _conv(shape, wshape, stride, pad, dil):
    X = tc.placeholder(shape, name="X")
    W = tc.placeholder(wshape, name="W")
    return X, W, tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dil)


@pytest.mark.parametrize("stride,dil,pad,size", [(2, 1, 1, (20, 21)), (2, 2, 0, (24, 19)),
                                                 (3, 1, 2, (30, 26))])
def test_strided_convolution_is_a_product_with_long_rows(stride, dil, pad, size):
    rng = np.random.default_rng(stride + 10 * dil + 100 * pad)
    X, W, Y = _conv((1, 3) + size, (6, 3, 3, 3), stride, pad, dil)
    low = cpu_lower([Y], [X, W])
    names = [b.name for b in _allocated(low.func.body)]
    assert "conv2d_cols" in names and "conv2d_rows" in names
    acc = [x for x, _ in _loops(low.func.body) if isinstance(x.body, Store)
           and x.body.reduce == "sum"]
    rows = int(Y.shape[2].value) * int(Y.shape[3].value)
    assert acc and all(x.hi == E.Const(rows, I64) for x in acc)   # one long row per sum
    arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
              for t in (X, W)]
    (want,) = tc.evaluate([Y], dict(zip([X, W], arrays)))
    (got,) = run(low.func, arrays, constants=low.constants)
    (compiled,) = tc.build([Y], [X, W])(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("stride,channels", [(1, 6), (2, 2)])
def test_unit_stride_or_unshared_convolution_is_not_flattened(stride, channels):
    """Stride 1 has no strided read; two output channels reuse the columns too little."""
    X, W, Y = _conv((1, 3, 20, 21), (channels, 3, 3, 3), stride, 1, 1)
    names = [b.name for b in _allocated(cpu_lower([Y], [X, W]).func.body)]
    assert "conv2d_cols" not in names and "conv2d_rows" not in names


def test_blocked_rows_join_the_parallel_loop():
    """fuse_parallel: a loop of step 4 whose iterations write rows v .. v + 3 joins; one that
    writes v + 4 (the next block's row) does not."""
    b, f, p = (E.Var(n, I64) for n in ("b", "f", "p"))
    T = Buffer("T", (E.Const(1, I64), E.Const(32, I64), E.Const(8, I64)), "float32", "output")

    def nest(offsets):
        rows = Seq(tuple(Store(T, (b, f + c if c else f, p), BufferLoad(
            T, (b, f + c if c else f, p), "float32")) for c in offsets))
        return For(b, E.Const(0, I64), E.Const(1, I64), For(
            f, E.Const(0, I64), E.Const(32, I64), For(p, E.Const(0, I64), E.Const(8, I64),
                                                      rows), step=4), kind="parallel")

    out = fuse_parallel(LoweredFunc("f", (), (T,), (), nest((0, 1, 2, 3))), min_trips=8).body
    assert isinstance(out, For) and out.kind == "parallel" and out.hi == E.Const(8, I64)
    bad = nest((0, 4))
    assert fuse_parallel(LoweredFunc("f", (), (T,), (), bad), min_trips=8).body is bad


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_window_with_a_where_keeps_its_guard(stride):
    n = 9
    H = tc.placeholder((n,), name="H")
    W = tc.placeholder((stride + 2,), name="W")
    width = stride + 2

    def body(j):
        lo = E.maximum(0, (j - (width - 1) + stride - 1) // stride)
        k = tc.reduce_axis((lo, E.minimum(n - 1, j // stride) + 1), name="k")
        return tc.sum(H[k] * W[j - stride * k], axis=k, where=tc.ne(k, 3))

    G = tc.compute((stride * (n - 1) + width,), body, name="G")
    func = cpu_lower([G], [H, W]).func
    assert any(x.var.name == "j_q" for x, _ in _loops(func.body))
    rng = np.random.default_rng(stride)
    h = rng.standard_normal(n).astype(np.float32)
    w = rng.standard_normal(width).astype(np.float32)
    (want,) = tc.evaluate([G], {H: h, W: w})
    (got,) = run(func, [h, w])
    (compiled,) = tc.build([G], [H, W])(h, w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-5)


def test_flat_sum_with_the_reduction_axes_outside_reads():
    """A term that uses the reduction axes directly (not through a read) takes them from the
    flat index too."""
    rng = np.random.default_rng(11)
    Xp = tc.placeholder((1, 4, 34, 34), name="Xp")
    H = tc.placeholder((1, 8, 16, 16), name="H")
    y, x = tc.reduce_axis(16, name="y"), tc.reduce_axis(16, name="x")
    G = tc.compute((8, 4, 3, 3), lambda co, ci, ky, kx: tc.sum(
        H[0, co, y, x] * Xp[0, ci, 2 * y + ky, 2 * x + kx] * tc.cast(y - x, "float32"),
        axis=[y, x]), name="G")
    func = cpu_lower([G], [Xp, H]).func
    assert [b for b in _allocated(func.body) if b.name.endswith("_cols")]
    arrays = [rng.standard_normal((1, 4, 34, 34)).astype(np.float32),
              rng.standard_normal((1, 8, 16, 16)).astype(np.float32)]
    (want,) = tc.evaluate([G], dict(zip([Xp, H], arrays)))
    (got,) = run(func, arrays)
    (compiled,) = tc.build([G], [Xp, H])(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-3)
