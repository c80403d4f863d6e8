"""tc.hessian (forward over reverse) against second differences and closed forms."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc

F = "float64"


def numeric_hessian(f, x0, h=2e-4):
    flat = x0.ravel()
    n = flat.size
    H = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            def at(si, sj, i=i, j=j):
                v = flat.copy()
                v[i] += si * h
                v[j] += sj * h
                return f(v.reshape(x0.shape))
            H[i, j] = (at(1, 1) - at(1, -1) - at(-1, 1) + at(-1, -1)) / (4 * h * h)
    return H.reshape(x0.shape + x0.shape)


def test_quadratic_form_closed_form(rng):
    X, M = tc.placeholder((4,), "X", F), tc.placeholder((4, 4), "M", F)
    i, j = tc.reduce_axis(4, "i"), tc.reduce_axis(4, "j")
    Y = tc.compute((), lambda: tc.sum(X[i] * M[i, j] * X[j], axis=[i, j]), name="Y")
    m = rng.standard_normal((4, 4))
    H = tc.hessian(Y, X)
    assert H.shape == X.shape + X.shape
    (h,) = tc.evaluate([H], {X: rng.standard_normal(4), M: m})
    np.testing.assert_allclose(h, m + m.T, rtol=1e-12, atol=1e-12)


def test_matrix_input_network(rng):
    X, W = tc.placeholder((2, 3), "X", F), tc.placeholder((3, 4), "W", F)
    k, a, b = tc.reduce_axis(3, "k"), tc.reduce_axis(2, "a"), tc.reduce_axis(4, "b")
    Hd = tc.compute((2, 4), lambda p, q: tc.tanh(tc.sum(X[p, k] * W[k, q], axis=k)), name="Hd")
    Y = tc.compute((), lambda: tc.sum(tc.exp(Hd[a, b]) * Hd[a, 0], axis=[a, b])
                   + tc.max(X[a, 1] * X[a, 2], axis=a), name="Y")
    x, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    (h,) = tc.evaluate([tc.hessian(Y, X)], {X: x, W: w})
    ref = numeric_hessian(lambda v: tc.evaluate([Y], {X: v, W: w})[0], x)
    np.testing.assert_allclose(h, ref, rtol=0, atol=1e-6 * (1 + np.abs(ref).max()))
    flat = h.reshape(6, 6)
    np.testing.assert_allclose(flat, flat.T, rtol=1e-10, atol=1e-12)


def prod_hessian(v):
    """``d2 prod(v) / dv_i dv_j``: the product of all factors but ``i`` and ``j`` (0 on the
    diagonal)."""
    n = len(v)
    return np.array([[0.0 if i == j else np.prod([v[m] for m in range(n) if m not in (i, j)])
                      for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("xv", [[2.0, 0.0, 3.0, 5.0], [2.0, 0.0, 0.0, 5.0], [0.0, 0.0, 0.0, 5.0],
                                [2.0, -1.0, 3.0, 5.0]])
def test_hessian_of_product_through_zero_factors(xv):
    """Forward over reverse at 0, 1, 2 and 3 zero factors: H[0, 1] = 3 * 5 at [2, 0, 3, 5]
    (reverse mode's zero-safe rule used to lose the entries H[k, z] for k != z)."""
    x = tc.placeholder((4,), "x", F)
    k = tc.reduce_axis(4, "k")
    y = tc.compute((), lambda: tc.prod(x[k], axis=k), name="y")
    H = tc.hessian(y, x)
    xv = np.array(xv)
    ref = prod_hessian(xv)
    np.testing.assert_allclose(tc.evaluate([H], {x: xv})[0], ref, rtol=1e-13, atol=1e-13)
    (built,) = tc.build([H], [x])(xv)
    np.testing.assert_allclose(built, ref, rtol=1e-13, atol=1e-13)


def test_hessian_method_operator_through_a_zero_factor(rng):
    """diff_operator(method="hessian") of a per-sample product with a zero factor equals the
    closed form and DOF (the same forward-over-reverse path as tc.hessian)."""
    x = tc.placeholder((2, 4), "x", F)
    k = tc.reduce_axis(4, "k")
    y = tc.compute((2,), lambda b: tc.prod(x[b, k], axis=k), name="y")
    xv = np.array([[2.0, 0.0, 3.0, 5.0], [1.5, -2.0, 0.0, 0.0]])
    A = rng.standard_normal((4, 4))
    A = A + A.T
    ref = [float(np.sum(A * prod_hessian(v))) for v in xv]
    for method in ("hessian", "dof"):
        got = tc.evaluate([tc.diff_operator(y, x, A, method=method)], {x: xv})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_hessian_errors():
    X = tc.placeholder((3,), "X", F)
    Y = tc.compute((3,), lambda i: X[i] * X[i], name="Y")
    with pytest.raises(tc.TecompError, match="'Y' has shape \\(3\\).*scalar"):
        tc.hessian(Y, X)
    N = tc.placeholder((3,), "N", "int64")
    Z = tc.compute((), lambda: X[0] * tc.cast(N[0], F), name="Z")
    with pytest.raises(tc.DifferentiationError, match="'N'"):
        tc.hessian(Z, N)
