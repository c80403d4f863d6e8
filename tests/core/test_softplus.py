"""tc.softplus end to end on a small layer ``u = sum_j w_j softplus(W x + b)_j``: the
evaluator without overflow, the LLVM kernel, the gradient against finite differences (naive
and zero-eliminated, built), the JVP, and the DOF Laplacian against the Hessian method and
second differences.  (Every op of the table gets the per-op checks of test_intrinsics.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc

F = "float64"


def layer():
    x = tc.placeholder((3, 4), name="x", dtype=F)
    W = tc.placeholder((5, 4), name="W", dtype=F)
    b = tc.placeholder((5,), name="b", dtype=F)
    w = tc.placeholder((5,), name="w", dtype=F)
    k, r = tc.reduce_axis(4, "k"), tc.reduce_axis(5, "r")
    H = tc.compute((3, 5), lambda i, j: tc.softplus(tc.sum(W[j, k] * x[i, k], axis=k) + b[j]),
                   name="H")
    u = tc.compute((3,), lambda i: tc.sum(w[r] * H[i, r], axis=r), name="u")
    return (x, W, b, w), H, u


def values(rng, scale=1.0):
    """x, W, b, w (W scaled: saturated units on both sides when large)."""
    return [rng.standard_normal((3, 4)), scale * rng.standard_normal((5, 4)),
            rng.standard_normal(5), rng.standard_normal(5)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_without_overflow(dtype):
    x = tc.placeholder((10,), name="x", dtype=dtype)
    Y = tc.compute((10,), lambda i: tc.softplus(x[i]), name="Y")
    v = np.array([-1e4, -800.0, -100.0, -20.0, -1e-9, 0.0, 1e-9, 20.0, 100.0, 1e4], dtype)
    want = np.logaddexp(0.0, v.astype(np.longdouble)).astype(dtype)
    got_eval = tc.evaluate([Y], {x: v})[0]
    got_llvm = tc.build(Y, [x])(v)
    tol = 1e-6 if dtype == "float32" else 1e-14
    for got in (got_eval, got_llvm):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=tol, atol=0)


def test_layer_kernel_matches_the_evaluator(rng):
    ins, H, u = layer()
    vals = values(rng, scale=30.0)  # saturated units on both sides
    ref = tc.evaluate([H, u], dict(zip(ins, vals)))
    got = tc.build([H, u], list(ins))(*vals)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("optimize", [False, True])
def test_gradient_matches_finite_differences(optimize, rng):
    ins, _, u = layer()
    vals = dict(zip(ins, values(rng)))
    check_gradient(u, list(ins), vals, optimize=optimize, rtol=1e-6, atol=1e-9,
                   convergence=not optimize)
    grads = tc.gradient(u, list(ins))
    built = tc.build(grads, list(ins))(*vals.values())
    for g, r in zip(built, tc.evaluate(grads, vals)):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)


def test_jvp_matches_finite_differences(rng):
    ins, _, u = layer()
    vals = dict(zip(ins, values(rng)))
    x, W = ins[0], ins[1]
    tx, tW = (tc.placeholder(t.shape, name=f"t_{t.name}", dtype=F) for t in (x, W))
    dirs = {tx: rng.standard_normal((3, 4)), tW: rng.standard_normal((5, 4))}
    J = tc.jvp(u, [x, W], [tx, tW])
    (j,) = tc.evaluate([J], {**vals, **dirs})

    def f(h):
        return tc.evaluate([u], {**vals, x: vals[x] + h * dirs[tx],
                                 W: vals[W] + h * dirs[tW]})[0]
    h = 1e-6
    np.testing.assert_allclose(j, (f(h) - f(-h)) / (2 * h), rtol=1e-6, atol=1e-8)
    got = tc.build(J, [*ins, tx, tW])(*vals.values(), dirs[tx], dirs[tW])
    np.testing.assert_allclose(got, j, rtol=1e-12, atol=1e-12)


def test_laplacian_matches_hessian_and_second_differences(rng):
    ins, _, u = layer()
    vals = dict(zip(ins, values(rng)))
    x = ins[0]
    L = tc.laplacian(u, x)
    dof = tc.evaluate([L], vals)[0]
    hess = tc.evaluate([tc.laplacian(u, x, method="hessian")], vals)[0]
    np.testing.assert_allclose(dof, hess, rtol=1e-10, atol=1e-12)

    def f(xv):
        return tc.evaluate([u], {**vals, x: xv})[0]
    h, lap = 1e-3, np.zeros(3)
    for d in range(4):
        e = np.zeros((3, 4))
        e[:, d] = h
        lap += (f(vals[x] + e) - 2 * f(vals[x]) + f(vals[x] - e)) / h**2
    np.testing.assert_allclose(dof, lap, rtol=1e-5, atol=1e-6)
    built = tc.build(L, list(ins))(*vals.values())
    np.testing.assert_allclose(built, dof, rtol=1e-12, atol=1e-12)
