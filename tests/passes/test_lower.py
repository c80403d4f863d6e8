"""Lowering to loop IR, checked against the reference evaluator with a loop-IR interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import run
from lower_cases import CASES

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import Allocate, For, IfThenElse, LoweredFunc, Seq, Stmt, Store
from tecomp.passes.lower import lower, lower_program
from tecomp.tensor import ScatterOp, Tensor


def stmts(s: Stmt):
    """Every statement of ``s`` in pre-order."""
    yield s
    if isinstance(s, Seq):
        for x in s.stmts:
            yield from stmts(x)
    elif isinstance(s, (For, Allocate)):
        yield from stmts(s.body)
    elif isinstance(s, IfThenElse):
        yield from stmts(s.then)
        if s.else_ is not None:
            yield from stmts(s.else_)


def allocs(func: LoweredFunc, scope: str) -> list[str]:
    return [s.buffer.name for s in stmts(func.body)
            if isinstance(s, Allocate) and s.buffer.scope == scope]


def check(outs, ins, arrays, scalars=None, func=None, constants=None, rtol=1e-5):
    scalars = scalars or {}
    if func is None:
        func, constants = lower_program(outs, ins)
    got = run(func, arrays, scalars, constants)
    tensors = [t for t in ins if isinstance(t, Tensor)]
    want = tc.evaluate(outs, {**dict(zip(tensors, arrays)), **scalars})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
    return func


@pytest.mark.parametrize("case", sorted(CASES))
def test_case_matches_evaluator(case, rng):
    outs, ins, arrays, scalars = CASES[case](rng)
    check(outs, ins, arrays, scalars)


@pytest.mark.parametrize("case", sorted(CASES))
def test_case_in_cpu_loop_order_matches_evaluator(case, rng):
    """The same programs after the CPU schedule's loop order of reductions."""
    from tecomp.passes.schedule.cpu.sum_order import order_sums

    outs, ins, arrays, scalars = CASES[case](rng)
    func, constants = lower_program(outs, ins)
    check(outs, ins, arrays, scalars, func=order_sums(func), constants=constants)


@pytest.mark.parametrize("case", ["matmul", "softmax", "conv2d", "triangular"])
def test_public_lower_matches_evaluator(case, rng):
    outs, ins, arrays, scalars = CASES[case](rng)
    low = tc.lower(outs, ins)
    assert isinstance(low, tc.Lowered) and isinstance(low.func, LoweredFunc)
    check(outs, ins, arrays, scalars, func=low.func, constants=low.constants)


def test_matmul_symbolic_rows_any_size(rng):
    outs, ins, _, _ = CASES["matmul"](rng)
    func = lower(outs, ins)
    assert [p.name for p in func.params] == ["n"]
    for n in (0, 1, 4):
        check(outs, ins, [rng.standard_normal((n, 4)), rng.standard_normal((4, 5))], func=func)


def test_conv_padding_read_by_a_window_keeps_its_buffer(rng):
    outs, ins, arrays, _ = CASES["conv2d"](rng)
    func = check(outs, ins, arrays)
    assert allocs(func, "temp") == ["Xp"]
    # the window reads the padded copy: no bounds test per term of the reduction
    text = str(tc.Lowered(func))
    assert text.count("select(") == 1  # only where Xp is written


def test_padding_read_element_wise_is_inlined(rng):
    X = tc.placeholder((3, 4), name="X")
    Xp = tc.compute((3, 6), lambda i, j: tc.if_then_else(
        tc.all(j >= 1, j < 5), X[i, tc.maximum(j - 1, 0)], 0.0), name="Xp")
    Y = tc.compute((3, 6), lambda i, j: Xp[i, j] * 2.0, name="Y")
    func = check([Y], [X], [rng.standard_normal((3, 4))])
    assert allocs(func, "temp") == []


def test_softmax_stages_and_temps(rng):
    outs, ins, arrays, _ = CASES["softmax"](rng)
    func = check(outs, ins, arrays)
    # mx, s are reductions; e has flops and two readers: all three stay buffers
    assert allocs(func, "temp") == ["mx", "e", "s"]
    assert [b.scope for b in func.inputs] == ["input"]
    assert [b.scope for b in func.outputs] == ["output"]


def test_parallel_marks_outermost_data_loop(rng):
    outs, ins, _, _ = CASES["softmax"](rng)
    func = lower(outs, ins)
    loops = [s for s in stmts(func.body) if isinstance(s, For)]
    par = [s for s in loops if s.kind == "parallel"]
    assert len(par) == 4 and all(s.var.name == "i" for s in par)
    for p in par:  # no parallel loop nested in another
        assert not any(isinstance(x, For) and x.kind == "parallel" for x in stmts(p.body))


def test_output_read_by_other_output_computed_once(rng):
    X = tc.placeholder((4,), name="X")
    A = tc.compute((4,), lambda i: tc.exp(X[i]), name="A")
    B = tc.compute((4,), lambda i: A[i] * 2.0 + A[3 - i], name="B")
    func = check([A, B], [X], [rng.standard_normal(4)])
    writes = [s.buffer.name for s in stmts(func.body) if isinstance(s, Store)]
    assert writes == ["A", "B"]
    assert allocs(func, "temp") == []
    assert "exp" not in str(tc.Lowered(func)).split("B[i] =")[1]


def test_input_as_output_and_duplicate_outputs_are_copies(rng):
    X = tc.placeholder((2, 3), name="X")
    Y = tc.compute((2, 3), lambda i, j: X[i, j] + 1.0, name="Y")
    func = check([X, Y, Y], [X], [rng.standard_normal((2, 3))])
    assert [b.name for b in func.outputs] == ["X_1", "Y", "Y_1"]
    assert len({b.name for b in func.inputs + func.outputs}) == 4


def test_scalar_var_input_and_params_order(rng):
    n, m, s = tc.var("n"), tc.var("m"), tc.var("s")
    A = tc.placeholder((n, m), name="A")
    B = tc.placeholder((m,), name="B")
    Y = tc.compute((n, m), lambda i, j: A[i, j] * B[j] + tc.cast(s, "float32"), name="Y")
    func = lower([Y], [B, s, A])
    assert [p.name for p in func.params] == ["m", "s", "n"]
    check([Y], [B, s, A], [rng.standard_normal(3), rng.standard_normal((2, 3))], {s: 5},
          func=func)


def test_empty_reduction_gives_identity(rng):
    n = tc.var("n")
    X = tc.placeholder((n,), name="X")

    def body(combiner):
        def f(i):
            k = tc.reduce_axis((0, i), name="k")
            return getattr(tc, combiner)(X[k], axis=k)
        return f

    outs = [tc.compute((n,), body(c), name=c.upper()) for c in ("sum", "prod", "max", "min")]
    got = run(lower(outs, [X]), [rng.standard_normal(3)])
    assert [g[0] for g in got] == [0.0, 1.0, -np.inf, np.inf]
    check(outs, [X], [rng.standard_normal(3)])


def test_reduction_hoisted_out_of_inner_data_loop(rng):
    X = tc.placeholder((3, 4), name="X")
    k = tc.reduce_axis(4, name="k")
    Y = tc.compute((3, 4), lambda i, j: tc.exp(X[i, j] - tc.max(X[i, k], axis=k)), name="Y")
    func = check([Y], [X], [rng.standard_normal((3, 4))])
    (outer,) = [s for s in stmts(func.body) if isinstance(s, For) and s.var.name == "i"]
    (kloop,) = [s for s in stmts(outer) if isinstance(s, For) and s.var.name == "k"]
    (jloop,) = [s for s in stmts(outer) if isinstance(s, For) and s.var.name == "j"]
    assert kloop not in list(stmts(jloop))  # max computed once per row, not per element


def test_invariant_reduction_hoisted_to_top_under_nonempty_guard(rng):
    n = tc.var("n")
    X = tc.placeholder((n,), name="X")
    k = tc.reduce_axis(n, name="k")
    Y = tc.compute((n,), lambda i: X[i] / tc.sum(X[k], axis=k), name="Y")
    func = check([Y], [X], [rng.standard_normal(5)])
    top = func.body.body if isinstance(func.body, Allocate) else func.body
    assert isinstance(top, Seq) and isinstance(top.stmts[1], IfThenElse)  # if (n > 0) {...}
    check([Y], [X], [np.zeros(0)], func=func)


def test_reduction_under_select_keeps_its_guard(rng):
    X = tc.placeholder((4, 3), name="X")
    k = tc.reduce_axis(3, name="k")
    Y = tc.compute((4,), lambda i: tc.if_then_else(
        i > 0, tc.sum(X[i - 1, k], axis=k), 0.0), name="Y")
    # the interpreter raises on the out-of-bounds read X[-1, k] if the guard were dropped
    func = check([Y], [X], [rng.standard_normal((4, 3))])
    assert any(isinstance(s, IfThenElse) for s in stmts(func.body))


def test_shared_reduction_computed_once(rng):
    X = tc.placeholder((3, 4), name="X")
    k = tc.reduce_axis(4, name="k")
    Y = tc.compute((3,), lambda i: tc.sum(X[i, k], axis=k) * tc.sum(X[i, k], axis=k), name="Y")
    func = check([Y], [X], [rng.standard_normal((3, 4))])
    assert allocs(func, "local") == ["Y_sum"]


def test_axis_names_never_shadow(rng):
    """A reduce axis named like a size variable, and nested reductions reusing a name: the
    interpreter rejects shadowing loops, and the values still match."""
    n = tc.var("n")
    X = tc.placeholder((n,), name="X")
    kn = tc.reduce_axis(n, name="n")
    A = tc.compute((n,), lambda i: tc.sum(X[kn] * tc.cast(kn, "float32"), axis=kn), name="A")

    def body(i):
        k = tc.reduce_axis((0, i + 1), name="k")
        k2 = tc.reduce_axis((0, k + 1), name="k")  # same name; its bound is the outer k
        return tc.sum(X[k] * tc.sum(X[k2], axis=k2), axis=k)

    B = tc.compute((n,), body, name="B")
    check([A, B], [X], [rng.standard_normal(4)])


def test_scatter_stage(rng):
    idx = tc.placeholder((5,), name="idx", dtype="int64")
    V = tc.placeholder((5, 3), name="V")
    init = tc.compute((4, 3), lambda a, b: tc.cast(a + b, "float32"), name="init")
    i = E.IterVar(E.Var("i"), E.Const(0, "int64"), E.Const(5, "int64"), "reduce")
    j = E.IterVar(E.Var("j"), E.Const(0, "int64"), E.Const(3, "int64"), "reduce")
    op = ScatterOp((i, j), (idx[i.var], j.var), V[i.var, j.var] * 2.0,
                   where=E.compare(E.NE, j.var, E.Const(1, "int64")), init=init)
    S = Tensor("S", (E.Const(4, "int64"), E.Const(3, "int64")), "float32", op)
    func = check([S], [idx, V], [np.array([0, 3, 0, 2, 3]), rng.standard_normal((5, 3))])
    assert "+=" in str(tc.Lowered(func))


def _scatter(idx, V, init):
    i = E.IterVar(E.Var("i"), E.Const(0, "int64"), E.Const(5, "int64"), "reduce")
    j = E.IterVar(E.Var("j"), E.Const(0, "int64"), E.Const(3, "int64"), "reduce")
    op = ScatterOp((i, j), (idx[i.var], j.var), V[i.var, j.var] * 2.0, init=init)
    return Tensor("S", (E.Const(4, "int64"), E.Const(3, "int64")), "float32", op)


def test_element_wise_init_is_computed_in_the_scatter_buffer(rng):
    """An element-wise init read by nothing else is stored straight into the scatter's
    buffer: no temporary, no copy, the same values (here with an input it reads)."""
    idx = tc.placeholder((5,), name="idx", dtype="int64")
    V = tc.placeholder((5, 3), name="V")
    X = tc.placeholder((4, 3), name="X")
    init = tc.compute((4, 3), lambda a, b: X[a, b] * 3.0 + tc.cast(b, "float32"), name="init")
    S = _scatter(idx, V, init)
    arrays = [np.array([0, 3, 0, 2, 3]), rng.standard_normal((5, 3)), rng.standard_normal((4, 3))]
    func = check([S], [idx, V, X], arrays)
    assert allocs(func, "temp") == []
    assert "X[" in str(tc.Lowered(func)) and "init[" not in str(tc.Lowered(func))


def test_shared_or_output_init_keeps_its_buffer(rng):
    """An init another stage reads, or that is an output itself, is computed once into its
    own buffer and copied (the scatter must not change it)."""
    idx = tc.placeholder((5,), name="idx", dtype="int64")
    V = tc.placeholder((5, 3), name="V")
    X = tc.placeholder((4, 3), name="X")
    arrays = [np.array([1, 3, 1, 2, 0]), rng.standard_normal((5, 3)), rng.standard_normal((4, 3))]
    init = tc.compute((4, 3), lambda a, b: tc.exp(X[a, b]), name="init")
    S = _scatter(idx, V, init)
    R = tc.compute((4, 3), lambda a, b: S[a, b] * init[a, b], name="R")
    func = check([R], [idx, V, X], arrays)
    assert "init" in allocs(func, "temp")
    init2 = tc.compute((4, 3), lambda a, b: X[a, b] + 1.0, name="init2")
    S2 = _scatter(idx, V, init2)
    func = check([S2, init2], [idx, V, X], arrays)
    assert "init2[" in str(tc.Lowered(func))


def test_direct_init_switch_gives_the_same_values(rng, monkeypatch):
    """The gradient of a gather (zeros, then a scatter) with and without the direct init."""
    from tecomp.passes import lower as lower_module

    E_ = tc.placeholder((6, 4), name="E")
    idx = tc.placeholder((9,), name="idx", dtype="int64")
    Y = tc.ops.take(E_, idx)
    H = tc.placeholder(Y.shape, name="H")
    (G,) = tc.gradient(Y, [E_], head=H)
    arrays = [np.array([0, 5, 5, 2, 0, 1, 3, 5, 4]), rng.standard_normal((9, 4))]
    direct = check([G], [idx, H], arrays)
    assert allocs(direct, "temp") == []
    monkeypatch.setattr(lower_module, "DIRECT_INITS", False)
    copied = check([G], [idx, H], arrays)
    assert len(allocs(copied, "temp")) == 1


def test_constant_tensor_is_hidden_input(rng):
    C = tc.constant(np.arange(6, dtype=np.float32).reshape(2, 3), name="C")
    X = tc.placeholder((2, 3), name="X")
    Y = tc.compute((2, 3), lambda i, j: X[i, j] * C[i, j], name="Y")
    func, data = lower_program([Y], [X])
    assert [b.name for b in func.inputs] == ["X", "C"]
    np.testing.assert_array_equal(data[func.inputs[1]], C.op.data)
    check([Y], [X], [rng.standard_normal((2, 3))], func=func, constants=data)


def test_deterministic_text(rng):
    texts = []
    for _ in range(2):
        outs, ins, _, _ = CASES["layer_norm"](rng)  # fresh objects each time
        texts.append(str(tc.lower(outs, ins)))
    assert texts[0] == texts[1]


# ------------------------------------------------------------------------------ errors
def test_missing_placeholder_is_named():
    A = tc.placeholder((3,), name="A")
    Bx = tc.placeholder((3,), name="Bx")
    C = tc.compute((3,), lambda i: A[i] + Bx[i], name="C")
    with pytest.raises(tc.LoweringError, match="'Bx'.*read by 'C'.*not in inputs"):
        lower([C], [A])
    with pytest.raises(tc.LoweringError, match="'A'.*not in inputs"):
        lower([A], [])


def test_unavailable_variable_is_named():
    n, s = tc.var("n"), tc.var("shift")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[(i + s) % n], name="C")
    with pytest.raises(tc.LoweringError, match="'shift' in the body of 'C'"):
        lower([C], [A])
    lower([C], [A, s])  # given as a scalar input it is fine
    m = tc.var("m")
    B = tc.placeholder((2 * m,), name="B")
    with pytest.raises(tc.LoweringError, match="'m' in the shape of input 'B'"):
        lower([tc.compute((2 * m,), lambda i: B[i], name="D")], [B])


def test_bad_inputs_rejected():
    A = tc.placeholder((3,), name="A")
    C = tc.compute((3,), lambda i: A[i], name="C")
    with pytest.raises(tc.LoweringError, match="listed twice"):
        lower([C], [A, A])
    with pytest.raises(tc.LoweringError, match="placeholders or tc.var"):
        lower([C], [A, 3])
    with pytest.raises(tc.LoweringError, match="no outputs"):
        lower([], [A])
