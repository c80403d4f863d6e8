"""Scans: forward values against NumPy, compiled kernels against the reference evaluator, and
gradients against central finite differences (float64)."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tests.gradcheck import check_gradient
from tests.passes.autodiff.scan_cases import CASES


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_numpy(name, rng):
    c = CASES[name](rng)
    (got,) = tc.evaluate([c.output], c.arrays)
    np.testing.assert_allclose(got, c.reference(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, rng):
    c = CASES[name](rng)
    head = rng.standard_normal(c.reference().shape)
    check_gradient(c.output, c.inputs, c.arrays, head=head, optimize=True, convergence=True)


@pytest.mark.parametrize("name", ["cumsum", "cumprod_zeros", "fibonacci", "elman"])
def test_naive_gradient_matches_finite_differences(name, rng):
    c = CASES[name](rng)
    check_gradient(c.output, c.inputs, c.arrays, optimize=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_llvm_forward_and_gradient_match_evaluator(name, rng):
    c = CASES[name](rng)
    grads = tc.gradient(c.output, c.inputs)
    ins = list(c.arrays)
    kernel = tc.build([c.output, *grads], ins)
    got = kernel(*[c.arrays[t] for t in ins])
    want = tc.evaluate([c.output, *grads], c.arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_cumprod_gradient_exact_with_zeros(rng):
    c = CASES["cumprod_zeros"](rng)
    (X,) = c.inputs
    x = c.arrays[X]
    (dX,) = tc.gradient(c.output, [X])
    (got,) = tc.evaluate([dX], c.arrays)
    want = np.zeros_like(x)  # d/dx[s, j] of sum_t prod_{r<=t} x[r, j]
    for j in range(x.shape[1]):
        for s in range(x.shape[0]):
            for t in range(s, x.shape[0]):
                want[s, j] += np.prod(np.delete(x[:t + 1, j], s))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(got))


def test_cumsum_gradient_cost_is_linear_in_time():
    m, n = tc.var("m"), tc.var("n")
    X = tc.placeholder((m, n), name="X")
    (dX,) = tc.gradient(tc.ops.cumsum(X, 0), [X])
    f1 = tc.cost([dX], [X], sizes={m: 1000, n: 16}).flops
    f2 = tc.cost([dX], [X], sizes={m: 2000, n: 16}).flops
    assert f1 > 0
    assert abs(f2 / f1 - 2.0) <= 0.1  # doubling T doubles the flops (within 5%)
    fwd = tc.cost([tc.ops.cumsum(X, 0)], [X], sizes={m: 2000, n: 16}).flops
    assert fwd <= 2000 * 16


def test_symbolic_cumsum_builds_and_runs(rng):
    m, n = tc.var("m"), tc.var("n")
    X = tc.placeholder((m, n), name="X", dtype="float64")
    S = tc.ops.cumsum(X, 0)
    (dX,) = tc.gradient(S, [X])
    k = tc.build([S, dX], [X])
    for shape in ((1, 3), (9, 4)):
        x = rng.standard_normal(shape)
        s, d = k(x)
        np.testing.assert_allclose(s, np.cumsum(x, 0), rtol=1e-12)
        np.testing.assert_allclose(d, np.arange(shape[0], 0, -1)[:, None] * np.ones(shape))


def test_show_and_lower_describe_the_scan():
    m, n = tc.var("m"), tc.var("n")
    X = tc.placeholder((m, n), name="X")
    S = tc.ops.cumsum(X, 0)
    text = tc.show(S)
    assert "scan 'X_cumsum'" in text and "steps t = 1 .. m - 1" in text
    assert "| X_cumsum_step[t, i1] = X_cumsum_state[t - 1, i1] + X[t, i1]" in text
    low = str(tc.lower(S, [X]))
    assert "for (t_step, 1, m)" in low
    (dX,) = tc.gradient(S, [X])
    assert "down to 0" in tc.show(dX)
    assert "let t_step" in str(tc.lower(dX, [X]))


def test_several_states_evaluate_together(rng):
    c = CASES["lstm"](rng)
    sc = c.output.op.scan
    h, cell = sc.outputs
    got_h, got_c = tc.evaluate([h, cell], c.arrays)
    np.testing.assert_allclose(got_h, c.reference(), rtol=1e-12, atol=1e-12)
    k = tc.build([cell, h], list(c.arrays))
    bc, bh = k(*[c.arrays[t] for t in c.arrays])
    np.testing.assert_allclose(bh, got_h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(bc, got_c, rtol=1e-12, atol=1e-12)


def test_large_steps_run_threaded_and_match(rng):
    from tests.passes.autodiff.scan_cases import elman

    c = elman(rng, T=3, B=64, H=64, I=2)  # rows of 64 x 64: the step's loop is threaded
    outs = [c.output, *tc.gradient(c.output, c.inputs)]
    ins = list(c.arrays)
    from tecomp.loopir import Allocate, For, IfThenElse, LetStmt, Seq

    def loops(s, inside):
        if isinstance(s, For):
            yield s, inside
            yield from loops(s.body, inside or s.var.name.startswith(("t_step", "u_step")))
        elif isinstance(s, Seq):
            for x in s.stmts:
                yield from loops(x, inside)
        elif isinstance(s, (Allocate, LetStmt)):
            yield from loops(s.body, inside)
        elif isinstance(s, IfThenElse):
            yield from loops(s.then, inside)

    func = tc.lower(outs, ins).func
    threaded = [f for f, inside in loops(func.body, False) if inside and f.kind == "parallel"]
    assert len(threaded) >= 2  # the forward step's and the adjoint step's matrix products
    got = tc.build(outs, ins)(*[c.arrays[t] for t in ins])
    for g, w in zip(got, tc.evaluate(outs, c.arrays)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_chained_scans_and_a_reduction_of_the_result(rng):
    X = tc.placeholder((6, 3), name="X", dtype="float64")
    S1 = tc.ops.cumsum(X, 0)
    S2 = tc.ops.cumprod(tc.compute((6, 3), lambda t, i: 0.3 * S1[t, i] + 1.0, name="a"), 1)
    r = tc.reduce_axis(3, name="r")
    out = tc.compute((6,), lambda t: tc.sum(S2[t, r] * S1[t, r], axis=r), name="out")
    x = rng.standard_normal((6, 3))
    s1 = np.cumsum(x, 0)
    want = np.sum(np.cumprod(0.3 * s1 + 1.0, 1) * s1, 1)
    np.testing.assert_allclose(tc.evaluate([out], {X: x})[0], want, rtol=1e-12)
    check_gradient(out, [X], {X: x}, optimize=True)


def test_step_reading_an_outer_tensor_and_its_input(rng):
    """The step reads both ``xin = U x`` and ``x``: x's gradient counts the path through xin
    once (the scan's contribution to x is its direct one only)."""
    B, n, H, T = 2, 2, 3, 4
    X = tc.placeholder((B, n), name="x", dtype="float64")
    U = tc.placeholder((H, n), name="U", dtype="float64")
    st = tc.placeholder((T, B, H), name="h", dtype="float64")
    k = tc.reduce_axis(n, "k")
    xin = tc.compute((B, H), lambda b, i: tc.sum(U[i, k] * X[b, k], axis=k), name="xin")
    upd = tc.compute((T, B, H), lambda t, b, i: xin[b, i] * st[t - 1, b, i] + X[b, i % n],
                     name="upd")
    init = tc.compute((1, B, H), lambda s, b, i: tc.sin(X[b, i % n]) * xin[b, i], name="init")
    S = tc.scan(init, upd, st, name="rnn")
    a = {X: rng.standard_normal((B, n)), U: rng.standard_normal((H, n))}
    check_gradient(S, [X, U], a, head=rng.standard_normal((T, B, H)), optimize=True,
                   convergence=True)
    check_gradient(S, [X], a, optimize=False)
