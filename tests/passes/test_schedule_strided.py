"""Unit-stride inner loops for strided, dilated and transposed convolutions
(passes/schedule/cpu/strided.py, exact_div.py; the strided rules of passes/loop_order.py):
exact divisions folded (checked by brute force), strided reads redirected to a polyphase copy,
no short innermost loop in the scheduled kernels, and results equal to the evaluator's on odd
sizes, in the loop-IR interpreter and compiled."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cpu_order import lower  # lowering in the CPU loop order (the schedule's first step)
from loop_interp import random_inputs, run

import tecomp as tc
from tecomp import expr as E
from tecomp.host import describe
from tecomp.loopir import Allocate, BufferLoad, For, IfThenElse, LetStmt, Seq, Store
from tecomp.passes.exact_div import fold_index
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.strided import stride_of
from tecomp.passes.window_shift import shift_strided_windows
from tecomp.stmt_functor import eval_int, stmt_exprs, walk_expr, walk_stmt


def _var(name):
    return E.Var(name, "int64")


def _c(v):
    return E.Const(v, "int64")


X_, U_, T_ = _var("x"), _var("u"), _var("t")
# (expression, whether every division in it must fold)
FOLD_CASES = [
    # (2*x + 1 - (2*x - 2*(x + u) + 1)) // 2 -> x + u  (a phase of a transposed convolution)
    (E.floordiv(E.sub(E.add(E.mul(_c(2), X_), _c(1)),
                      E.add(E.sub(E.mul(_c(2), X_), E.mul(_c(2), E.add(X_, U_))), _c(1))),
                _c(2)), True),
    (E.floordiv(E.add(E.mul(_c(3), X_), _c(-7)), _c(3)), True),       # (3x - 7) // 3 -> x - 3
    (E.mod(E.add(E.mul(_c(4), U_), _c(5)), _c(2)), True),             # (4u + 5) % 2 -> 1
    (E.add(T_, E.floordiv(E.sub(E.mul(_c(2), T_), E.mul(_c(6), U_)), _c(2))), True),
    (E.floordiv(E.add(X_, _c(1)), _c(2)), False),                     # not exact: kept
    (E.mod(E.add(E.mul(_c(2), X_), U_), _c(2)), False),
]


@pytest.mark.parametrize("n", range(len(FOLD_CASES)))
def test_exact_divisions_fold_and_keep_their_values(n):
    e, folds = FOLD_CASES[n]
    out = fold_index(e)
    divisions = [x for x in walk_expr(out) if isinstance(x, (E.FloorDiv, E.Mod))]
    assert (not divisions) == folds, str(out)
    if not folds:
        assert out is e
    for x, u, t in itertools.product(range(-7, 8), repeat=3):
        env = {X_: x, U_: u, T_: t}
        assert eval_int(out, env) == eval_int(e, env), (str(e), str(out), env)


def _sliding(rows=3, cols=17, s=2):
    """``G[i, j] = sum(H[i, k] * W[k - s*j + 1], k in [max(0, s*j - 1), min(n, s*j + 2)
    + 1))``: a window that slides ``s`` per output (a transposed convolution's gradient)."""
    n = s * (cols - 1) + 1
    H = tc.placeholder((rows, n), name="H")
    W = tc.placeholder((s + 2,), name="W")

    def body(i, j):
        k = tc.reduce_axis((tc.maximum(0, s * j - 1), tc.minimum(n - 1, s * j + 2) + 1),
                           name="k")
        return tc.sum(H[i, k] * W[k - s * j + 1], axis=k)

    return H, W, tc.compute((rows, cols), body, name="G")


@pytest.mark.parametrize("s,cols", [(2, 17), (3, 19), (2, 5)])
def test_sliding_windows_are_rewritten_relative_to_the_output(s, cols):
    H, W, G = _sliding(cols=cols, s=s)
    shifted = shift_strided_windows(G.op.axes, G.op.body, set())
    (u,) = shifted.axes
    assert all(not isinstance(x, E.FloorDiv) for x in walk_expr(shifted.body))
    func = lower([G], [H, W])
    inner = [x for x in walk_stmt(func.body) if isinstance(x, For)
             and not any(isinstance(y, For) for y in walk_stmt(x.body))
             and any(getattr(y, "buffer", None) is not None and y.buffer.name == "G"
                     for y in walk_stmt(x.body))]  # G's loops (not a padded copy's)
    if cols >= 16:  # the output row runs innermost; short rows keep the window innermost
        assert all(x.var.name == "j" for x in inner), str(func)
    rng = np.random.default_rng(s)
    arrays = random_inputs([H, W], rng)
    want = tc.evaluate([G], dict(zip([H, W], arrays)))[0]
    np.testing.assert_allclose(run(func, arrays)[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tc.build(G, [H, W])(*arrays), want, rtol=1e-5, atol=1e-5)


def _conv(kind, n=1, c=8, k=3, hw=13, r=3, **kw):
    X = tc.placeholder((n, c, hw, hw), name="X")
    if kind == "conv_transpose2d":
        W = tc.placeholder((c, k, r, r), name="W")
    else:
        W = tc.placeholder((k, c, r, r), name="W")
    return X, W, getattr(tc.ops, kind)(X, W, **kw)


# odd sizes everywhere: rows of 17-19 outputs leave tails for every vector width and phase
CASES = {
    "conv3x3/2": dict(kind="conv2d", hw=33, stride=2, padding=1),
    "conv1x1/2": dict(kind="conv2d", hw=35, r=1, k=5, stride=2),  # reuse 5 >= REUSE
    "conv3x3 d2": dict(kind="conv2d", hw=17, padding=2, dilation=2),
    "conv3x3/2 d2": dict(kind="conv2d", hw=35, stride=2, padding=2, dilation=2),
    "conv3x3/3": dict(kind="conv2d", hw=50, stride=3, padding=1),
    "conv_transpose4x4/2": dict(kind="conv_transpose2d", hw=17, r=4, stride=2, padding=1),
    "conv_transpose3x3/2": dict(kind="conv_transpose2d", hw=17, stride=2, padding=1,
                                output_padding=1),
}
#: the cases whose forward program reads a polyphase copy
PHASED = ["conv3x3/2", "conv3x3/2 d2"]


def _programs(name):
    X, W, Y = _conv(**CASES[name])
    H = tc.placeholder(Y.shape, name="H")
    yield "fwd", [Y], [X, W]
    yield "grad", tc.gradient(Y, [X, W], head=H), [X, W, H]


def _strided_inner_reads(func, skip=()):
    """Loads with a constant stride >= 2 along their innermost loop, except in loops that
    store only to the buffers ``skip`` (the polyphase copies)."""
    out = []
    for s in walk_stmt(func.body):
        stores = {x.buffer for x in walk_stmt(s) if isinstance(x, Store)}
        if stores and stores <= set(skip):
            continue
        if isinstance(s, For) and not any(isinstance(x, For) for x in walk_stmt(s.body)):
            for st in walk_stmt(s.body):
                for e in stmt_exprs(st):
                    out += [ld for ld in walk_expr(e) if isinstance(ld, BufferLoad)
                            and stride_of(ld, s.var) is not None]
    return out


@pytest.mark.parametrize("name", PHASED)
def test_strided_reads_come_from_a_polyphase_copy(name):
    X, W, Y = _conv(**CASES[name])
    func = lower([Y], [X, W])
    assert _strided_inner_reads(func)  # the strided convolution reads with stride s
    old = schedule_cpu(func, strided=False)
    new = schedule_cpu(func)
    assert _strided_inner_reads(old)
    before = {s.buffer for s in walk_stmt(old.body) if isinstance(s, Allocate)}
    phased = [s.buffer for s in walk_stmt(new.body) if isinstance(s, Allocate)
              and s.buffer not in before]
    assert len(phased) == 1 and int(phased[0].shape[-2]) == CASES[name]["stride"]
    assert not _strided_inner_reads(new, skip=phased)


def _arith(loop):
    return any(isinstance(x, (E.Mul, E.Add)) and x.dtype.startswith("float")
               for st in walk_stmt(loop.body) for e in stmt_exprs(st) for x in walk_expr(e))


def _inner_work(s, env, lanes, work):
    """Add to ``work`` (long, all) the iterations of the innermost loops that do float
    arithmetic, running every enclosing loop (``long``: those of loops of at least ``lanes``
    iterations)."""
    if isinstance(s, Seq):
        for x in s.stmts:
            _inner_work(x, env, lanes, work)
    elif isinstance(s, (Allocate, IfThenElse)):
        _inner_work(s.body if isinstance(s, Allocate) else s.then, env, lanes, work)
    elif isinstance(s, LetStmt):
        if s.var.dtype.startswith("int"):
            env = {**env, s.var: eval_int(s.value, env)}
        _inner_work(s.body, env, lanes, work)
    elif isinstance(s, For):
        lo, hi = eval_int(s.lo, env), eval_int(s.hi, env)
        if not any(isinstance(x, For) for x in walk_stmt(s.body)):
            trips = max(0, -(-(hi - lo) // s.step))
            if _arith(s):
                work[0] += trips if trips >= lanes else 0
                work[1] += trips
            return
        for v in range(lo, hi, s.step):
            _inner_work(s.body, {**env, s.var: v}, lanes, work)


# the test: no innermost loop in these kernels shorter than the vector width unless the
# problem is (rows of 40 outputs, longer than any vector; the edges of an index-set split are
# the problem's: at most 10% of the work may run in loops shorter than a vector).  The weight
# gradient of the stride-2 convolution ran all its work in 3-iteration loops before.
@pytest.mark.parametrize("name,grad", [("conv3x3/2", True), ("conv3x3 d2", True),
                                       ("conv3x3/2 d2", False), ("conv_transpose4x4/2", True)])
def test_no_innermost_loop_shorter_than_the_vector_width(name, grad):
    spec = dict(CASES[name], hw=40 if name.startswith("conv_transpose") else 80)
    X, W, Y = _conv(**spec)
    H = tc.placeholder(Y.shape, name="H")
    lanes = describe().lanes(4)
    programs = [("fwd", [Y], [X, W])]
    if grad:
        programs.append(("grad", tc.gradient(Y, [X, W], head=H), [X, W, H]))
    for kind, outs, ins in programs:
        func = tc.lower(outs, ins, target="llvm").func
        work = [0, 0]
        _inner_work(func.body, {}, lanes, work)
        assert work[1] > 0, kind
        assert work[0] >= 0.9 * work[1], (
            f"{name} {kind}: {work[1] - work[0]} of {work[1]} innermost iterations in loops "
            f"shorter than {lanes} lanes")


@pytest.mark.parametrize("name", sorted(CASES))
def test_scheduled_programs_match_the_evaluator_in_the_interpreter(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    for kind, outs, ins in _programs(name):
        arrays = random_inputs(ins, rng)
        func = schedule_cpu(lower(outs, ins), threads=False)
        got = run(func, arrays)
        want = tc.evaluate(outs, dict(zip(ins, arrays)))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name} {kind}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_kernels_match_the_evaluator(name):
    rng = np.random.default_rng(sum(map(ord, name)) + 1)
    for kind, outs, ins in _programs(name):
        arrays = random_inputs(ins, rng)
        got = tc.build(outs, ins)(*arrays)
        got = got if isinstance(got, tuple) else (got,)
        want = tc.evaluate(outs, dict(zip(ins, arrays)))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name} {kind}")


def test_symbolic_sizes_deinterleave_and_match_the_evaluator():
    n, w = tc.var("n"), tc.var("w")
    X = tc.placeholder((n, 8, 37, w), name="X")
    W = tc.placeholder((4, 8, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 37, 35)).astype(np.float32)
    wv = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    h = rng.standard_normal((2, 4, 19, 18)).astype(np.float32)
    for outs, ins, arrays in (([Y], [X, W], [x, wv]),
                              (tc.gradient(Y, [X, W], head=H), [X, W, H], [x, wv, h])):
        func = schedule_cpu(lower(outs, ins), threads=False)
        assert any(isinstance(s, Allocate) and s.buffer.name == "X_pad_s2"
                   for s in walk_stmt(func.body))
        want = tc.evaluate(outs, dict(zip(ins, arrays)))
        got = tc.build(outs, ins)(*arrays)
        got = got if isinstance(got, tuple) else (got,)
        for g, v, r in zip(got, want, run(func, arrays)):
            np.testing.assert_allclose(g, v, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(r, v, rtol=1e-4, atol=1e-4)


def test_later_window_bounds_lose_the_output_axis_after_the_shift():
    """The shift ``t = 2*j0 + t_u`` leaves ``max(t - 2*j0, 0)`` as ``max(t_u, 0)`` in the next
    axis's bounds; kept as ``2*j0 + t_u - 2*j0``, the loop order moved ``j0`` inside a loop
    whose bound still named it (a soak program: its gradient did not build)."""
    X1 = tc.placeholder((4,), name="X1", dtype="float64")
    X2 = tc.placeholder((3,), name="X2", dtype="float64")
    S3 = tc.compute((4, 3), lambda i0, i1: (0.5 + X1[(i1 + i0) // 2]) * X2[(i0 + 2) % 3]
                    + X2[(i0 + 2) % 3] * X2[(i0 + 2) % 3], name="S3")
    (G,) = tc.gradient(S3, [X1])
    func = lower([G], [X1, X2])
    for loop in (s for s in walk_stmt(func.body) if isinstance(s, For)):
        inner = {x.var for x in walk_stmt(loop.body) if isinstance(x, For)}
        used = {v for b in (loop.lo, loop.hi) for v in walk_expr(b) if isinstance(v, E.Var)}
        assert not used & inner, str(loop)
    rng = np.random.default_rng(3)
    x1, x2 = rng.standard_normal(4), rng.standard_normal(3)
    want = tc.evaluate([G], {X1: x1, X2: x2})[0]
    np.testing.assert_allclose(tc.build(G, [X1, X2])(x1, x2), want, rtol=1e-12)
    by_hand = np.zeros(4)  # d S3[i0, i1] / d X1[(i1 + i0) // 2] = X2[(i0 + 2) % 3]
    for i0 in range(4):
        for i1 in range(3):
            by_hand[(i1 + i0) // 2] += x2[(i0 + 2) % 3]
    np.testing.assert_allclose(want, by_hand, rtol=1e-12)


def test_one_by_one_strided_weight_gradients_take_register_tiles():
    """``W_grad[o, c, 0, 0] = sum H[n, o, y, x] * X[n, c, 2*y, 2*x]``: its last data axis has
    one iteration, so the "i, k, j" order (which accumulated straight into ``W_grad`` over a
    one-iteration ``j``) is not taken; the plain-order sum then gets the contraction's
    register tiles, as a 1x1 convolution's weight gradient at stride 1 does."""
    X, W, Y = _conv(kind="conv2d", n=4, c=40, k=24, hw=15, r=1, stride=2)  # rows of 8
    H = tc.placeholder(Y.shape, name="H")
    gW = tc.gradient(Y, [W], head=H)[0]
    func = lower([gW], [X, H])
    scheduled = schedule_cpu(func, host=describe())
    tiles = [s.buffer for s in walk_stmt(scheduled.body) if isinstance(s, Allocate)
             and s.buffer.scope == "local" and len(s.buffer.shape) == 2]
    assert tiles, str(scheduled)
    rng = np.random.default_rng(3)
    arrays = random_inputs([X, H], rng)
    want = tc.evaluate([gW], dict(zip([X, H], arrays)))[0]
    np.testing.assert_allclose(run(scheduled, arrays)[0], want, rtol=1e-4, atol=1e-4)


def test_dilated_implicit_gemm_columns_are_packed_without_a_polyphase_copy():
    """A stride-1 dilated convolution flattened in place reads ``X_pad[b, c, p // 20 + 2*ry,
    p % 20 + 2*rx]``: strided along ``rx`` but unit-stride along the columns ``p``, which the
    register tiles pack by image rows; a polyphase copy would make that packing a gather."""
    from tecomp.lowering_api import lower as lower_for

    X, W, Y = _conv(kind="conv2d", n=2, c=16, k=24, hw=20, padding=2, dilation=2)
    func = lower_for([Y], [X, W], target="llvm").func
    copies = [s.buffer.name for s in walk_stmt(func.body) if isinstance(s, Allocate)]
    assert any(name.endswith("_panel") for name in copies), copies
    assert not any("_s2" in name for name in copies), copies
    rng = np.random.default_rng(4)
    arrays = random_inputs([X, W], rng)
    want = tc.evaluate([Y], dict(zip([X, W], arrays)))[0]
    np.testing.assert_allclose(tc.build(Y, [X, W])(*arrays), want, rtol=1e-4, atol=1e-4)
