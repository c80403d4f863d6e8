"""Jacobians, second order, intermediate inputs, tie rules and the optimisation hook."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc
from tecomp.tensor import ScatterOp, Tensor

F = "float64"


def ph(shape, name, dtype=F):
    return tc.placeholder(shape, name=name, dtype=dtype)


def fd_jacobian(out, x, arrays, h=1e-6):
    base = np.asarray(arrays[x], dtype=np.float64)
    cols = []
    for idx in np.ndindex(base.shape):
        plus, minus = base.copy(), base.copy()
        plus[idx] += h
        minus[idx] -= h
        yp = tc.evaluate(out, {**arrays, x: plus})[0]
        ym = tc.evaluate(out, {**arrays, x: minus})[0]
        cols.append((yp - ym) / (2 * h))
    return np.moveaxis(np.array(cols).reshape(base.shape + cols[0].shape),
                       list(range(base.ndim)), list(range(-base.ndim, 0)))


def test_jacobian_shape_and_values_multistage(rng):
    X = ph((4,), "X")
    W = ph((2, 3, 4), "W")
    k = tc.reduce_axis(4, "k")
    H = tc.compute((2, 3), lambda a, b: tc.sum(W[a, b, k] * tc.tanh(X[k]), axis=k), name="H")
    r = tc.reduce_axis(3, "r")
    Y = tc.compute((2, 3), lambda a, b: H[a, b] * tc.max(H[a, r], axis=r) + X[b + 1],
                   name="Y")
    J = tc.jacobian(Y, X, optimize=False)
    assert tuple(int(s.value) for s in J.shape) == (2, 3, 4)
    arrays = {X: rng.standard_normal(4), W: rng.standard_normal((2, 3, 4))}
    got = tc.evaluate(J, arrays)[0]
    np.testing.assert_allclose(got, fd_jacobian(Y, X, arrays), rtol=1e-6, atol=1e-8)


def test_jacobian_of_scalar_and_with_symbolic_sizes(rng):
    n = tc.var("n")
    X = ph((n, 3), "X")
    r, c = tc.reduce_axis(n, "r"), tc.reduce_axis(3, "c")
    S = tc.compute((), lambda: tc.sum(X[r, c] * X[r, c] * X[r, c], axis=[r, c]), name="S")
    J = tc.jacobian(S, X, optimize=False)
    assert J.shape == X.shape
    x = rng.standard_normal((5, 3))
    np.testing.assert_allclose(tc.evaluate(J, {X: x})[0], 3 * x * x, rtol=1e-12)
    V = tc.compute((n, 3), lambda i, j: tc.exp(X[i, j]) * X[n - 1 - i, j], name="V")
    J2 = tc.jacobian(V, X, optimize=False)
    assert len(J2.shape) == 4
    np.testing.assert_allclose(tc.evaluate(J2, {X: x})[0], fd_jacobian(V, X, {X: x}),
                               rtol=1e-6, atol=1e-8)


def _cubic_program(n):
    X, A = ph((n,), "X"), ph((n, n), "A")
    i, j = tc.reduce_axis(n, "i"), tc.reduce_axis(n, "j")
    f = tc.compute((), lambda: tc.sum(X[i] * X[i] * X[i] + tc.exp(X[i]), axis=i)
                   + tc.sum(X[i] * A[i, j] * X[j], axis=[i, j]), name="f")
    return X, A, f


def test_hessian_via_jacobian_of_gradient(rng):
    X, A, f = _cubic_program(5)
    (g,) = tc.gradient(f, [X], optimize=False)
    H = tc.jacobian(g, X, optimize=False)
    x, a = rng.standard_normal(5), rng.standard_normal((5, 5))
    want = np.diag(6 * x + np.exp(x)) + a + a.T
    np.testing.assert_allclose(tc.evaluate(H, {X: x, A: a})[0], want, rtol=1e-10, atol=1e-12)


def test_hessian_vector_product_via_gradient_of_gradient(rng):
    X, A, f = _cubic_program(6)
    V = ph((6,), "V")
    (g,) = tc.gradient(f, [X], optimize=False)
    (hv,) = tc.gradient(g, [X], V, optimize=False)
    x, a, v = rng.standard_normal(6), rng.standard_normal((6, 6)), rng.standard_normal(6)
    want = (np.diag(6 * x + np.exp(x)) + a + a.T) @ v
    np.testing.assert_allclose(tc.evaluate(hv, {X: x, A: a, V: v})[0], want, rtol=1e-10)


def test_second_order_through_max_and_tanh_matches_finite_differences(rng):
    X = ph((3, 4), "X")
    k = tc.reduce_axis(4, "k")
    M = tc.compute((3,), lambda i: tc.max(tc.tanh(X[i, k]) * X[i, k], axis=k), name="M")
    r = tc.reduce_axis(3, "r")
    L = tc.compute((), lambda: tc.sum(M[r] * M[r] * M[r], axis=r), name="L")
    (g,) = tc.gradient(L, [X], optimize=False)
    x = rng.standard_normal((3, 4))
    check_gradient(g, [X], {X: x}, head=rng.standard_normal((3, 4)), seed=3)


def test_gradient_with_respect_to_an_intermediate(rng):
    X = ph((5,), "X")
    H = tc.compute((5,), lambda i: tc.sin(X[i]), name="H")
    k = tc.reduce_axis(5, "k")
    Y = tc.compute((5,), lambda i: tc.sum(H[k] * X[i] * H[i], axis=k), name="Y")
    dH, dX = tc.gradient(Y, [H, X], optimize=False)
    x = rng.standard_normal(5)
    h = np.sin(x)
    Hp = ph((5,), "Hp")
    Yp = tc.compute((5,), lambda i: tc.sum(Hp[k] * X[i] * Hp[i], axis=k), name="Yp")
    dHp, dXp = tc.gradient(Yp, [Hp, X], optimize=False)
    got = tc.evaluate([dH, dX], {X: x})
    ref = tc.evaluate([dHp, dXp], {X: x, Hp: h})
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12)
    s = h.sum()
    np.testing.assert_allclose(got[0], x @ h + x * s, rtol=1e-12)  # d/dH_m: Σ_i x_i h_i + x_m s
    np.testing.assert_allclose(got[1], h * s + np.cos(x) * (x @ h + x * s), rtol=1e-12)
    assert tc.gradient(Y, [Y], optimize=False)[0].name == "Y_head"


def test_float32_input_through_a_float64_computation(rng):
    X = ph((4,), "X", "float32")
    Y = tc.compute((4,), lambda i: tc.cast(X[i], F) * tc.cast(X[i], F), name="Y")
    (dX,) = tc.gradient(Y, [X], optimize=False)
    assert dX.dtype == "float32"
    x = rng.standard_normal(4).astype(np.float32)
    got = tc.evaluate(dX, {X: x})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, 2 * x, rtol=1e-6)


def test_take_with_duplicates_accumulates_like_scatter_add(rng):
    E = ph((6, 3), "E")
    idx = ph((100,), "idx", "int32")
    Y = tc.compute((100, 3), lambda i, j: E[idx[i], j] * 3.0, name="Y")
    Hd = ph((100, 3), "Hd")
    (dE,) = tc.gradient(Y, [E], Hd, optimize=False)
    ix, hd = rng.integers(0, 6, 100).astype(np.int32), rng.standard_normal((100, 3))
    want = np.zeros((6, 3))
    np.add.at(want, ix, 3 * hd)
    got = tc.evaluate(dE, {E: np.zeros((6, 3)), idx: ix, Hd: hd})[0]
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("combiner", ["max", "min"])
def test_extremum_ties_route_the_gradient_to_the_first_index(combiner):
    A = ph((3, 2, 3), "A")
    k, q = tc.reduce_axis(2, "k"), tc.reduce_axis(3, "q")
    red = tc.max if combiner == "max" else tc.min
    Y = tc.compute((3,), lambda i: red(A[i, k, q], axis=[k, q]), name="Y")
    (dA,) = tc.gradient(Y, [A], optimize=False)
    s = 1 if combiner == "max" else -1
    a = s * np.array([[[1, 5, 5], [5, 0, 2]],      # first of three ties: (0, 1)
                      [[0, 0, 0], [0, 0, 0]],      # all tied: (0, 0)
                      [[1, 2, 3], [4, 7, 7]]], dtype=float)  # ties in the last row: (1, 1)
    want = np.zeros_like(a)
    want[0, 0, 1] = want[1, 0, 0] = want[2, 1, 1] = 1.0
    np.testing.assert_array_equal(tc.evaluate(dA, {A: a})[0], want)


def test_elementwise_min_max_ties_pick_the_first_argument():
    A, B = ph((3,), "A"), ph((3,), "B")
    Y = tc.compute((3,), lambda i: tc.maximum(A[i], B[i]) + 10.0 * tc.minimum(B[i], A[i]),
                   name="Y")
    dA, dB = tc.gradient(Y, [A, B], optimize=False)
    a = np.array([1.0, 2.0, 0.0])
    got = tc.evaluate([dA, dB], {A: a, B: a.copy()})
    np.testing.assert_array_equal(got[0], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(got[1], [10.0, 10.0, 10.0])


def test_singular_points_give_finite_derivatives():
    X, P = ph((3,), "X"), ph((3,), "P")
    Y = tc.compute((3,), lambda i: X[i] ** 2.0 + tc.pow(X[i], P[i]) + tc.abs(X[i])
                   + tc.maximum(X[i], 0.0), name="Y")
    dX, dP = tc.gradient(Y, [X, P], optimize=False)
    x, p = np.array([0.0, 0.0, 2.0]), np.array([2.0, 0.0, 3.0])
    gx, gp = tc.evaluate([dX, dP], {X: x, P: p})
    # x = 0: d(x^2) = 0, d(x^p) = 0 (p = 2) / 0 (p = 0 by convention), abs' = 0, relu' = 1
    np.testing.assert_array_equal(gx, [1.0, 1.0, 4.0 + 3 * 4.0 + 1.0 + 1.0])
    np.testing.assert_allclose(gp, [0.0, 0.0, 8.0 * np.log(2.0)])


def test_scatter_stages_are_differentiable(rng):
    X = ph((4, 3), "X")
    idx = ph((4,), "idx", "int64")
    Z = ph((5, 3), "Z")
    init = tc.compute((5, 3), lambda a, b: Z[a, b] * Z[a, b], name="init")
    i = tc.reduce_axis(4, "i")
    j = tc.reduce_axis(3, "j")
    S = Tensor("S", init.shape, F, ScatterOp((i, j), (idx[i.var], j.var),
                                              tc.exp(X[i.var, j.var]), i.var < 3, init))
    arrays = {X: rng.standard_normal((4, 3)), idx: np.array([1, 3, 1, 0]),
              Z: rng.standard_normal((5, 3))}
    check_gradient(S, [X, Z], arrays, head=rng.standard_normal((5, 3)), seed=7)


def test_optimize_calls_the_pipeline_optimizer(monkeypatch):
    import tecomp.pipeline as pipeline

    seen = []

    def optimize_tensors(tensors):
        seen.append(list(tensors))
        return list(tensors)

    monkeypatch.setattr(pipeline, "optimize_tensors", optimize_tensors)
    X = ph((3,), "X")
    Y = tc.compute((3,), lambda i: X[i] * X[i], name="Y")
    (dX,) = tc.gradient(Y, [X])
    assert len(seen) == 1 and seen[0] == [dX]
    tc.gradient(Y, [X], optimize=False)
    J = tc.jacobian(Y, X)
    assert len(seen) == 2 and seen[1] == [J]
