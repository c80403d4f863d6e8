"""Loop order (passes/schedule/cpu/loop_order.py): floor-division window bounds inverted
exactly (brute force over a box), and strided/dilated convolution gradients against the
evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import run

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import Allocate, For
from tecomp.passes.affine_forms import coefficient
from tecomp.passes.lower import lower_program
from tecomp.passes.schedule.cpu.loop_order import invert_bounds
from tecomp.passes.schedule.cpu.sum_order import order_sums
from tecomp.stmt_functor import walk_stmt

I64 = "int64"


def cpu_ordered(outputs, inputs):
    """The lowered program in the CPU loop order (what these tests look at) and its
    constants."""
    func, consts = lower_program(outputs, inputs)
    return order_sums(func), consts


def _c(v: int) -> E.Const:
    return E.Const(v, I64)


def _value(e: E.Expr, env: dict[str, int]) -> int:
    """Evaluate an integer index expression (Python floor semantics, as the IR defines)."""
    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        return env[e.name]
    ops = {E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
           E.FloorDiv: lambda a, b: a // b, E.Max: max, E.Min: min}
    if isinstance(e, E.Neg):
        return -_value(e.a, env)
    return ops[type(e)](_value(e.a, env), _value(e.b, env))


@pytest.mark.parametrize("seed", range(40))
def test_floor_division_bounds_invert_exactly(seed):
    rng = np.random.default_rng(seed)
    j, k = E.Var("j", I64), E.Var("k", I64)
    jlo, jhi = int(rng.integers(-3, 3)), int(rng.integers(4, 14))

    def term():
        a, c = int(rng.choice([1, -1])), int(rng.integers(1, 4))
        r, d = int(rng.integers(-6, 7)), int(rng.integers(-2, 3))
        t = E.floordiv(E.add(E.mul(_c(a), j) if a < 0 else j, _c(r)), _c(c))
        return E.add(t, _c(d)) if d else t

    lo = E.maximum(term(), _c(int(rng.integers(-3, 1))))
    hi = E.minimum(E.add(term(), _c(1)), _c(int(rng.integers(2, 6))))
    ax = E.IterVar(k, lo, E.sub(hi, lo), "reduce")
    (kb,), jl, jh = invert_bounds((ax,), j, _c(jlo), _c(jhi))
    want = {(jv, kv) for jv in range(jlo, jhi)
            for kv in range(_value(lo, {"j": jv}), _value(hi, {"j": jv}))}
    got = set()
    for kv in range(_value(kb[0], {}), _value(kb[1], {})):
        env = {"k": kv}
        a = max([jlo] + [_value(t, env) for t in jl])
        b = min([jhi] + [_value(t, env) for t in jh])
        got |= {(jv, kv) for jv in range(a, b)}
    assert got == want, f"seed {seed}: k in [{lo}, {hi}), j in [{jlo}, {jhi})"


def _loops(s):
    if isinstance(s, For):
        yield s
        yield from _loops(s.body)
    elif hasattr(s, "stmts"):
        for x in s.stmts:
            yield from _loops(x)
    elif hasattr(s, "body"):
        yield from _loops(s.body)


@pytest.mark.parametrize("stride,dilation,pad", [(1, 2, 2), (1, 3, 1), (2, 1, 1), (2, 2, 0)])
def test_strided_and_dilated_convolution_gradients(stride, dilation, pad):
    rng = np.random.default_rng(stride * 10 + dilation)
    X = tc.placeholder((1, 2, 9, 11), name="X")
    W = tc.placeholder((3, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dilation)
    H = tc.placeholder(Y.shape, name="H")
    grads = tc.gradient(Y, [X, W], head=H)
    func, consts = cpu_ordered(grads, [X, W, H])
    arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
              for t in (X, W, H)]
    got = run(func, arrays, constants=consts)
    want = tc.evaluate(grads, dict(zip([X, W, H], arrays)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    if stride == 1:  # the input gradient's column loop runs innermost, under the window
        inner = [x for x in _loops(func.body) if x.var.name == "j3"]
        assert any(isinstance(x.body, tc.loopir.Store) and x.body.reduce == "sum"
                   for x in inner)



def test_strided_convolution_puts_the_output_column_innermost():
    rng = np.random.default_rng(5)
    X = tc.placeholder((1, 2, 40, 40), name="X")
    W = tc.placeholder((3, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    func, consts = cpu_ordered([Y], [X, W])
    acc = [x for x in _loops(func.body) if isinstance(x.body, tc.loopir.Store)
           and x.body.reduce == "sum"]
    assert [x.var.name for x in acc] == ["x"]
    arrays = [rng.standard_normal((1, 2, 40, 40)).astype(np.float32),
              rng.standard_normal((3, 2, 3, 3)).astype(np.float32)]
    (got,) = run(func, arrays, constants=consts)
    (want,) = tc.evaluate([Y], dict(zip([X, W], arrays)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_depthwise_weight_gradient_sums_along_rows():
    """The depthwise weight gradient sums over (column, row) in differentiation's order; the
    column (unit stride in both reads) becomes the innermost reduction loop."""
    rng = np.random.default_rng(6)
    X = tc.placeholder((1, 4, 12, 12), name="X")
    W = tc.placeholder((4, 1, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1, groups=4)
    H = tc.placeholder(Y.shape, name="H")
    (gw,) = tc.gradient(Y, [W], head=H)
    func, consts = cpu_ordered([gw], [X, W, H])
    acc = [x for x in _loops(func.body) if isinstance(x.body, tc.loopir.Store)
           and x.body.reduce == "sum" and x.body.buffer.name.startswith("W_grad")]
    assert acc and all(x.body.indices == () for x in acc)  # a dot product, not "i, k, j"
    loads = [e for e in _exprs(acc[0].body.value) if isinstance(e, tc.loopir.BufferLoad)]
    assert loads and all(coefficient(e.indices[-1], acc[0].var) == 1 for e in loads)
    arrays = [rng.standard_normal((1, 4, 12, 12)), rng.standard_normal((4, 1, 3, 3)),
              rng.standard_normal((1, 4, 12, 12))]
    arrays = [a.astype(np.float32) for a in arrays]
    (got,) = run(func, arrays, constants=consts)
    (want,) = tc.evaluate([gw], dict(zip([X, W, H], arrays)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_triangular_reduction_keeps_its_axis_order():
    """Reduction axes whose bounds use each other are never reordered."""
    from tecomp.passes.schedule.cpu.loop_order import contiguous_reduction_last

    A = tc.placeholder((8, 8), name="A")
    r = tc.reduce_axis(8, name="r")
    body = tc.compute((8,), lambda i: tc.sum(A[r, i], axis=r), name="S").op.body
    s = tc.reduce_axis(8, name="s")
    t = tc.reduce_axis((0, s + 1), name="t")  # t <= s: a triangle
    tri = tc.compute((1,), lambda i: tc.sum(A[s, t], axis=[t, s]), name="T").op.body
    assert contiguous_reduction_last(body) is body  # one axis
    assert contiguous_reduction_last(tri) is tri
    box = tc.compute((1,), lambda i: tc.sum(A[s, r], axis=[r, s]), name="B").op.body
    assert [ax.var.name for ax in contiguous_reduction_last(box).axes] == ["s", "r"]


def _exprs(e):
    """``e`` and every expression below it (loop-IR loads included)."""
    yield e
    for name in getattr(e, "__dataclass_fields__", {}):
        v = getattr(e, name)
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, E.Expr) or isinstance(x, tc.loopir.BufferLoad):
                yield from _exprs(x)


def test_max_pool_window_runs_along_the_output_row():
    """A strided max window takes the "i, k, j" order (x innermost, vectorisable); NaN and
    infinities still propagate as in the evaluator."""
    rng = np.random.default_rng(7)
    X = tc.placeholder((1, 3, 32, 32), name="X")
    Y = tc.ops.max_pool2d(X, 2, 2)
    func, consts = cpu_ordered([Y], [X])
    acc = [x for x in _loops(func.body) if isinstance(x.body, tc.loopir.Store)
           and x.body.reduce == "max"]
    assert [x.var.name for x in acc] == ["x"]
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    x[0, 0, 0, 1] = np.nan
    x[0, 1, 5, 5] = np.inf
    x[0, 2, 7, 6] = -np.inf
    x[0, 2, 9, 9] = np.nan
    x[0, 2, 8, 8] = np.inf
    (want,) = tc.evaluate([Y], {X: x})
    (got,) = run(func, [x], constants=consts)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(tc.build(Y, [X])(x), want)
    assert np.isnan(want[0, 0, 0, 0]) and np.isnan(want[0, 2, 4, 4])


def test_row_argmax_keeps_rows_innermost():
    """A row maximum's argmax (a min over k of a select reading m[i]) keeps k innermost: the
    score rule alone would walk A by columns."""
    A = tc.placeholder((64, 48), name="A")
    k = tc.reduce_axis(48, name="k")
    Y = tc.compute((64,), lambda i: tc.max(A[i, k], axis=k), name="m")
    H = tc.placeholder((64,), name="H")
    (g,) = tc.gradient(Y, [A], head=H)
    func, consts = cpu_ordered([g], [A, H])
    assert not [x for x in _loops(func.body) if isinstance(x.body, tc.loopir.Store)
                and x.body.reduce in ("max", "min") and x.body.indices]
    rng = np.random.default_rng(8)
    a, h = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal(64).astype(
        np.float32)
    (got,) = run(func, [a, h], constants=consts)
    (want,) = tc.evaluate([g], {A: a, H: h})
    np.testing.assert_array_equal(got, want)


def test_row_sum_with_a_per_row_term_keeps_rows_outermost():
    """``sum_k exp(X[i, k] - m[i])`` (log-softmax): ``m[i]`` does not move with ``k``, so it
    does not vote for ``i`` innermost; the sum stays in rows (a parallel row loop), not a walk
    of ``X`` by columns."""
    X = tc.placeholder((64, 48), name="X")
    Y = tc.ops.log_softmax(X)
    func, consts = cpu_ordered([Y], [X])
    sums = [x for x in _loops(func.body) if isinstance(x.body, tc.loopir.Store)
            and x.body.reduce == "sum"]
    assert sums and all(x.var.name == "k" and not x.body.indices for x in sums)
    x = np.random.default_rng(9).standard_normal((64, 48)).astype(np.float32)
    (got,) = run(func, [x], constants=consts)
    (want,) = tc.evaluate([Y], {X: x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_lowering_keeps_the_declaration_order_the_cpu_schedule_reorders(rng):
    """Lowering emits the plain order for every target (a local accumulator per element);
    the CPU schedule's first step turns it into "i, k, j" (the accumulator becomes the output
    row), and applying that step again changes nothing."""
    A = tc.placeholder((6, 5), name="A")
    B = tc.placeholder((5, 7), name="B")
    k = tc.reduce_axis(5, name="k")
    C = tc.compute((6, 7), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    plain, _ = lower_program([C], [A, B])
    locals_ = [s.buffer.name for s in walk_stmt(plain.body) if isinstance(s, Allocate)]
    assert locals_ == ["C_sum"]
    ordered = order_sums(plain)
    assert not any(isinstance(s, Allocate) for s in walk_stmt(ordered.body))
    assert [s.var.name for s in walk_stmt(ordered.body) if isinstance(s, For)] == [
        "i", "j", "k", "j"]
    assert order_sums(ordered) is ordered
    arrays = [rng.standard_normal((6, 5)).astype(np.float32),
              rng.standard_normal((5, 7)).astype(np.float32)]
    want = tc.evaluate([C], dict(zip([A, B], arrays)))[0]
    for func in (plain, ordered):
        np.testing.assert_allclose(run(func, arrays)[0], want, rtol=1e-5, atol=1e-5)


def test_sums_without_a_better_order_are_left_as_lowered():
    """A dot product over the unit-stride axis (``A @ B.T``) and an element-wise stage keep
    the lowered nest itself."""
    A = tc.placeholder((6, 5), name="A")
    B = tc.placeholder((7, 5), name="B")
    k = tc.reduce_axis(5, name="k")
    C = tc.compute((6, 7), lambda i, j: tc.sum(A[i, k] * B[j, k], axis=k), name="C")
    D = tc.compute((6, 5), lambda i, j: A[i, j] * 2.0, name="D")
    for out in (C, D):
        func, _ = lower_program([out], [A, B])
        assert order_sums(func) is func


def test_sum_inside_an_epilogue_is_reordered_with_the_epilogue_after_it(rng):
    """``C = 0.5 * sum_k A[i, k] B[k, j] + b[j]`` (a scaled gradient, a biased layer) takes
    the "i, k, j" order too: the bare totals accumulate in ``C``'s row, then a nest of its own
    applies the epilogue to each element once.  A triangular sum (``k <= i``, the causal
    attention gradient's) is reordered the same way."""
    A = tc.placeholder((6, 5), name="A")
    B = tc.placeholder((5, 7), name="B")
    b = tc.placeholder((7,), name="b")
    k = tc.reduce_axis(5, name="k")
    C = tc.compute((6, 7), lambda i, j: 0.5 * tc.sum(A[i, k] * B[k, j], axis=k) + b[j],
                   name="C")
    t = tc.reduce_axis((0, 5), name="t")
    T = tc.compute((5, 7), lambda i, j: tc.exp(tc.sum(A[i, t] * B[t, j], axis=t,
                                                      where=t <= i)), name="T")
    for out, loops in ((C, ["i", "j", "k", "j", "i", "j"]), (T, None)):
        plain, _ = lower_program([out], [A, B, b])
        ordered = order_sums(plain)
        assert ordered is not plain
        assert not any(isinstance(s, Allocate) for s in walk_stmt(ordered.body))
        if loops:
            assert [s.var.name for s in walk_stmt(ordered.body) if isinstance(s, For)] == loops
        assert order_sums(ordered) is ordered
        arrays = [rng.standard_normal(x.shape).astype(np.float32) for x in (A, B, b)]
        want = tc.evaluate([out], dict(zip([A, B, b], arrays)))[0]
        for func in (plain, ordered):
            np.testing.assert_allclose(run(func, arrays)[0], want, rtol=1e-5, atol=1e-5)


def test_an_epilogue_may_read_the_total_twice(rng):
    """``C = s * s`` of one sum ``s``: the epilogue reads the reordered total twice, from the
    element of ``C`` it then overwrites."""
    A = tc.placeholder((6, 5), name="A")
    B = tc.placeholder((5, 7), name="B")
    k = tc.reduce_axis(5, name="k")
    D = tc.compute((6, 7), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k)
                   * tc.sum(A[i, k] * B[k, j], axis=k), name="D")
    func, _ = lower_program([D], [A, B])
    ordered = order_sums(func)
    assert ordered is not func
    arrays = [rng.standard_normal(x.shape).astype(np.float32) for x in (A, B)]
    want = tc.evaluate([D], dict(zip([A, B], arrays)))[0]
    np.testing.assert_allclose(run(ordered, arrays)[0], want, rtol=1e-5, atol=1e-5)
