"""Steps that gather from their state (``state[t - d, idx[i]]``): the adjoint step scatters
into the state's adjoint row.  Gradients against central finite differences (float64),
compiled kernels against the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tests.gradcheck import check_gradient

F = "float64"


def gather_lag1(rng, T=6, n=4):
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    X = tc.placeholder((T, n), name="X", dtype=F)
    st = tc.placeholder((T, n), name="st", dtype=F)
    init = tc.compute((1, n), lambda s, i: X[0, i], name="init")
    upd = tc.compute((T, n), lambda t, i: tc.sin(st[t - 1, idx[i]]) + X[t, i] * st[t - 1, i],
                     name="upd")
    S = tc.scan(init, upd, st, inputs=[X], name="gather1")
    a = {X: rng.standard_normal((T, n)), idx: np.array([1, 1, 3, 0])}   # a repeated index
    return S, [X], a


def gather_in_matvec(rng, T=5, B=2, H=4):
    perm = tc.placeholder((H,), name="perm", dtype="int64")
    X = tc.placeholder((T, B, H), name="X", dtype=F)
    W = tc.placeholder((H, H), name="W", dtype=F)
    H0 = tc.placeholder((1, B, H), name="H0", dtype=F)
    st = tc.placeholder((T, B, H), name="h", dtype=F)
    j = tc.reduce_axis(H, name="j")
    upd = tc.compute((T, B, H), lambda t, b, i: tc.tanh(
        tc.sum(W[i, j] * st[t - 1, b, perm[j]], axis=j) + X[t, b, i]), name="upd")
    init = tc.compute((1, B, H), lambda s, b, i: H0[s, b, i], name="init")
    S = tc.scan(init, upd, st, inputs=[X], name="gather_rnn")
    a = {X: rng.standard_normal((T, B, H)), W: 0.5 * rng.standard_normal((H, H)),
         H0: rng.standard_normal((1, B, H)), perm: np.array([2, 0, 3, 1])}
    return S, [X, W, H0], a


def gather_lag2(rng, T=7, n=3):
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    X = tc.placeholder((T, n), name="X", dtype=F)
    st = tc.placeholder((T, n), name="st", dtype=F)
    init = tc.compute((2, n), lambda s, i: X[s, i], name="init")
    upd = tc.compute((T, n), lambda t, i: 0.5 * st[t - 2, idx[i]] * st[t - 2, i]
                     + st[t - 1, i] * X[t, i], name="upd")
    S = tc.scan(init, upd, st, inputs=[X], name="gather2")
    a = {X: 0.7 * rng.standard_normal((T, n)), idx: np.array([2, 0, 0])}
    return S, [X], a


CASES = {"lag1": gather_lag1, "matvec": gather_in_matvec, "lag2": gather_lag2}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, rng):
    S, ins, a = CASES[name](rng)
    head = rng.standard_normal(tuple(int(s) for s in S.shape))
    check_gradient(S, ins, a, head=head, optimize=True, convergence=True)
    check_gradient(S, ins, a, head=head, optimize=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_kernel_matches_evaluator(name, rng):
    S, ins, a = CASES[name](rng)
    grads = tc.gradient(S, ins)
    inputs = sorted(a, key=lambda t: t.name)
    got = tc.build(grads, inputs)(*[a[t] for t in inputs])
    got = got if isinstance(got, tuple) else (got,)
    for g, want in zip(got, tc.evaluate(grads, a)):
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


def test_symbolic_time_extent(rng):
    T, n = tc.var("T"), 3
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    X = tc.placeholder((T, n), name="X", dtype=F)
    st = tc.placeholder((T, n), name="st", dtype=F)
    init = tc.compute((1, n), lambda s, i: X[0, i], name="init")
    upd = tc.compute((T, n), lambda t, i: st[t - 1, idx[i]] * X[t, i], name="upd")
    S = tc.scan(init, upd, st, inputs=[X], name="sym")
    a = {X: rng.standard_normal((6, n)), idx: np.array([2, 2, 0]), T: 6}
    check_gradient(S, [X], a, optimize=True)
    (dX,) = tc.gradient(S, [X])
    (got,) = tc.build([dX], [X, idx])(a[X], a[idx])
    np.testing.assert_allclose(got, tc.evaluate([dX], a)[0], rtol=1e-12, atol=1e-12)


def test_forward_mode_and_jacobian_through_a_state_gather(rng):
    S, (X,), a = gather_lag1(rng)
    V = tc.placeholder(X.shape, name="V", dtype=F)
    v = rng.standard_normal(tuple(int(s) for s in X.shape))
    (jv,) = tc.evaluate([tc.jvp(S, [X], [V])], {**a, V: v})
    h = 1e-6
    fp = tc.evaluate([S], {**a, X: a[X] + h * v})[0]
    fm = tc.evaluate([S], {**a, X: a[X] - h * v})[0]
    np.testing.assert_allclose(jv, (fp - fm) / (2 * h), rtol=1e-6, atol=1e-8)
    (J,) = tc.evaluate([tc.jacobian(S, X)], a)
    np.testing.assert_allclose(np.einsum("tiuj,uj->ti", J, v), jv, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hessian_through_a_state_gather(name, rng):
    """Forward over reverse: the tangent of the adjoint's step scatter is a step scatter."""
    S, ins, a = CASES[name](rng)
    x = ins[0]
    axes = [tc.reduce_axis(int(s), f"r{m}") for m, s in enumerate(S.shape)]
    loss = tc.compute((), lambda: tc.sum(S[tuple(axes)] * S[tuple(axes)], axis=axes),
                      name="loss")
    hess = tc.hessian(loss, x)
    (H,) = tc.evaluate([hess], a)
    (g,) = tc.gradient(loss, [x])
    x0 = a[x]
    n = x0.size
    h = 1e-6
    cols = []
    for m in range(n):
        e = (h * np.eye(n)[m]).reshape(x0.shape)
        gp = tc.evaluate([g], {**a, x: x0 + e})[0]
        gm = tc.evaluate([g], {**a, x: x0 - e})[0]
        cols.append(((gp - gm) / (2 * h)).ravel())
    np.testing.assert_allclose(H.reshape(n, n), np.stack(cols, 1), rtol=1e-6, atol=1e-8)
    inputs = sorted(a, key=lambda t: t.name)
    (got,) = tc.build([hess], inputs)(*[a[t] for t in inputs])
    np.testing.assert_allclose(got, H, rtol=1e-10, atol=1e-12)
