"""``tc.gradient(..., checkpoint=k)``: the checkpointed lowering of a scan's gradient gives the
results of the plain one (float64, to rounding) and of the reference evaluator, agrees with
central finite differences, allocates O(T/k + k) rows for the scan's values instead of T,
and refuses what it cannot lower with a clear error."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp.loopir import Allocate, For, IfThenElse, LetStmt, Seq
from tests.passes.autodiff.scan_cases import CASES

# T: cumsum 6, fibonacci 8 (two lags), elman 5, lstm 5 (two states), euler 12, rk4 8
NAMES = ["cumsum", "cumprod_zeros", "fibonacci", "elman", "lstm", "euler", "rk4"]
KS = [1, 2, 3, 5, 100]  # 1, T not a multiple of k, k >= T


def _steps(c) -> int:
    return int(c.output.shape[0])


def _run(c, grads, head_t, head):
    ins = list(c.arrays) + [head_t]
    kernel = tc.build(list(grads), ins)
    got = kernel(*[c.arrays[t] for t in c.arrays], head)
    return [np.asarray(g) for g in (got if isinstance(got, (list, tuple)) else [got])]


def _head(c, rng):
    h = tc.placeholder(tuple(c.output.shape), name="head", dtype="float64")
    return h, rng.standard_normal(c.reference().shape)


@pytest.mark.parametrize("name", NAMES)
def test_checkpointed_gradient_equals_plain_and_evaluator(name, rng):
    c = CASES[name](rng)
    h, head = _head(c, rng)
    plain = tc.gradient(c.output, c.inputs, h)
    want = _run(c, plain, h, head)
    ref = tc.evaluate(plain, {**c.arrays, h: head})
    for g, r in zip(want, ref):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)
    for k in KS:
        got = _run(c, tc.gradient(c.output, c.inputs, h, checkpoint=k), h, head)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"k={k}")


@pytest.mark.parametrize("name", ["cumsum", "fibonacci", "elman", "lstm"])
def test_checkpointed_gradient_matches_finite_differences(name, rng):
    c = CASES[name](rng)
    h, head = _head(c, rng)
    grads = _run(c, tc.gradient(c.output, c.inputs, h, checkpoint=2), h, head)
    dirs = {x: rng.standard_normal(c.arrays[x].shape) for x in c.inputs}

    def f(eps: float) -> float:
        moved = {t: (a + eps * dirs[t] if t in dirs else a) for t, a in c.arrays.items()}
        (y,) = tc.evaluate([c.output], moved)
        return float(np.sum(head * y))

    eps = 1e-5
    fd = (f(eps) - f(-eps)) / (2 * eps)
    an = sum(float(np.sum(g * dirs[x])) for g, x in zip(grads, c.inputs))
    assert abs(fd - an) <= 1e-6 * max(1.0, abs(fd)), (fd, an)


def _allocations(stmt, out):
    if isinstance(stmt, Allocate):
        out.append(stmt.buffer)
        _allocations(stmt.body, out)
    elif isinstance(stmt, Seq):
        for s in stmt.stmts:
            _allocations(s, out)
    elif isinstance(stmt, (For, LetStmt)):
        _allocations(stmt.body, out)
    elif isinstance(stmt, IfThenElse):
        _allocations(stmt.then, out)
        if stmt.else_ is not None:
            _allocations(stmt.else_, out)
    return out


def _elman_rows(T: int, k: int | None) -> tuple[set[str], int]:
    """The temp buffers of the Elman gradient with T rows or more, and the rows of the
    others that have a time axis of their own (windows, carries, checkpoints)."""
    c = CASES["elman"](np.random.default_rng(0), T=T)
    h = tc.placeholder(tuple(c.output.shape), name="head", dtype="float64")
    grads = tc.gradient(c.output, c.inputs, h, checkpoint=k)
    low = tc.lower(grads, list(c.arrays) + [h])
    temps = [b for b in _allocations(low.func.body, []) if b.scope == "temp" and b.shape]
    long = {b.name for b in temps if int(b.shape[0]) >= T}
    rows = sum(int(b.shape[0]) for b in temps if b.ndim == 3 and int(b.shape[0]) < T)
    return long, rows


def test_state_buffers_are_O_T_over_k_plus_k():
    T, k = 60, 6
    long, rows = _elman_rows(T, k)
    assert long == {"xin"}  # the input projection, computed from the inputs before the scan
    # checkpoints T/k rows; about ten windows of k + 2 rows and their one-row carries
    assert rows <= 2 * T // k + 12 * (k + 3), rows
    long_plain, _ = _elman_rows(T, None)
    assert len(long_plain - {"xin"}) >= 4  # without checkpointing every state is kept
    _, rows_k3 = _elman_rows(T, 3)
    _, rows_k12 = _elman_rows(T, 12)
    assert rows_k3 < rows and rows_k12 > rows  # the windows grow with k


def test_forward_output_and_symbolic_time():
    m, n = tc.var("m"), tc.var("n")
    X = tc.placeholder((m, n), name="X", dtype="float64")
    st = tc.placeholder((m, n), name="state", dtype="float64")
    init = tc.compute((1, n), lambda _, i: X[0, i], name="init")
    upd = tc.compute((m, n), lambda t, i: tc.sin(st[t - 1, i]) * X[t, i] + X[t, i],
                     name="update")
    S = tc.scan(init, upd, st, inputs=[X], name="sinrec")
    x = np.random.default_rng(1).standard_normal((7, 3))
    want = tc.evaluate([S, *tc.gradient(S, [X])], {X: x})
    for k in (1, 3, 9):
        got = tc.build([S, *tc.gradient(S, [X], checkpoint=k)], [X])(x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_cuda_target_refuses_a_checkpointed_gradient(rng):
    c = CASES["elman"](rng)
    grads = tc.gradient(c.output, c.inputs, checkpoint=2)
    with pytest.raises(tc.TecompError, match="checkpoint=k runs on the CPU"):
        tc.build(grads, list(c.arrays), target="cuda")
    with pytest.raises(tc.TecompError, match="checkpoint=k runs on the CPU"):
        tc.lower(grads, list(c.arrays), target="cuda")
    plain = tc.gradient(c.output, c.inputs)  # the plain gradient still lowers for CUDA
    assert "for" in str(tc.lower(plain, list(c.arrays), target="cuda"))


@pytest.mark.parametrize("k", [0, -2, True, 2.5, "3"])
def test_checkpoint_must_be_a_positive_int(k, rng):
    c = CASES["cumsum"](rng)
    with pytest.raises(tc.DifferentiationError, match="checkpoint must be a positive int"):
        tc.gradient(c.output, c.inputs, checkpoint=k)


def test_checkpoint_needs_a_scan():
    X = tc.placeholder((4,), name="X", dtype="float64")
    Y = tc.compute((4,), lambda i: X[i] * X[i], name="Y")
    with pytest.raises(tc.DifferentiationError, match="needs a tc.scan"):
        tc.gradient(Y, [X], checkpoint=2)


@pytest.mark.parametrize("name, why", [
    ("state_gather", "step scatter"),          # a gather from the state
    ("reduce_gather", "scatter 'E_grad'"),     # an embedding gradient: a scatter over t
    ("cumsum_axis1", "neither step by step"),  # the time is not the first axis of dX
])
def test_programs_outside_the_class_raise(name, why, rng):
    c = CASES[name](rng)
    grads = tc.gradient(c.output, c.inputs, checkpoint=2)
    with pytest.raises(tc.LoweringError, match=why):
        tc.build(grads, list(c.arrays))
    # the same gradient without checkpointing builds
    tc.build(tc.gradient(c.output, c.inputs), list(c.arrays))


def test_a_sum_over_t_read_inside_the_steps_raises():
    """``y[t] = S[t] * Σ_r S[r]``: the adjoint's head needs a sum over every step of the
    forward values, which the segment-by-segment sweep does not have when it needs it (the
    plain gradient builds, and the checkpointed one does not fall back to keeping T rows)."""
    X = tc.placeholder((6, 3), name="X", dtype="float64")
    st = tc.placeholder((6, 3), name="st", dtype="float64")
    S = tc.scan(tc.compute((1, 3), lambda _, i: X[0, i], name="i0"),
                tc.compute((6, 3), lambda t, i: tc.sin(st[t - 1, i]) + X[t, i], name="u"),
                st, name="sc")
    r = tc.reduce_axis(6, name="r")
    m = tc.compute((3,), lambda i: tc.sum(S[r, i], axis=r), name="m")
    y = tc.compute((6, 3), lambda t, i: S[t, i] * m[i], name="y")
    with pytest.raises(tc.LoweringError, match="needs a sum over all the steps"):
        tc.build(tc.gradient(y, [X], checkpoint=2), [X])
    tc.build(tc.gradient(y, [X]), [X])


@pytest.mark.parametrize("symbolic", [False, True])
def test_loss_on_the_last_state(symbolic):
    """``loss = Σ_i S[T - 1, i]²``: the head reads one row (``select(t == T - 1, S[T - 1])``),
    recomputed in the segment that holds it; T a constant or a size variable."""
    T = tc.var("m") if symbolic else 7
    X = tc.placeholder((T, 3), name="X", dtype="float64")
    st = tc.placeholder((T, 3), name="st", dtype="float64")
    S = tc.scan(tc.compute((1, 3), lambda _, i: X[0, i], name="i0"),
                tc.compute((T, 3), lambda t, i: tc.sin(st[t - 1, i]) + X[t, i], name="u"),
                st, name="sc")
    r = tc.reduce_axis(3, name="r")
    loss = tc.compute((), lambda: tc.sum(S[T - 1, r] * S[T - 1, r], axis=r), name="loss")
    x = np.random.default_rng(2).standard_normal((7, 3))
    (want,) = tc.evaluate(tc.gradient(loss, [X]), {X: x})
    for k in (2, 3, 7):
        (got,) = tc.build(tc.gradient(loss, [X], checkpoint=k), [X])(x)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
