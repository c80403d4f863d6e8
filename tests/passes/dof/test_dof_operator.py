"""diff_operator / laplacian by DOF, checked in float64 against second differences and the
Hessian method, for every operator kind (Laplacian, diagonal, SPD, indefinite, low rank) on
MLPs, a residual net, a product of two networks and a mix of element-wise ops."""

from __future__ import annotations

import numpy as np
import pytest
from dof_nets import NETS, matrices, net_mlp2, operator_fd, ph

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import topo_order, walk

B = 3


def points(rng, n):
    """Sample points with every coordinate away from 0 (a select switches there)."""
    return rng.uniform(0.2, 1.0, (B, n)) * rng.choice([-1.0, 1.0], (B, n))


def build(net, n, rng):
    x = ph((B, n), "x")
    vals = {}
    u = net(x, rng, vals)
    vals[x] = points(rng, n)
    return x, u, vals


def evaluate_fn(u, x, vals):
    def f(xv):
        return tc.evaluate([u], {**vals, x: xv})[0]
    return f


@pytest.mark.parametrize("net", sorted(NETS))
@pytest.mark.parametrize("kind", ["laplacian", "diagonal", "spd", "indefinite"])
def test_operator_matches_fd_and_hessian(net, kind, rng):
    n = 3
    x, u, vals = build(NETS[net], n, rng)
    A = matrices(rng, n)[kind]
    op = tc.laplacian(u, x) if kind == "laplacian" else tc.diff_operator(u, x, A)
    assert op.shape == u.shape and op.dtype == u.dtype
    got = tc.evaluate([op], vals)[0]
    ref = operator_fd(evaluate_fn(u, x, vals), vals[x], A)
    scale = np.abs(ref).max() + 1.0
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * scale)
    hess = tc.diff_operator(u, x, A, method="hessian")
    np.testing.assert_allclose(got, tc.evaluate([hess], vals)[0], rtol=1e-10, atol=1e-12)
    for t in topo_order([op]):  # no symbolic zero; the seed's deltas are optimised away
        if isinstance(t.op, tc.tensor.ComputeOp):
            assert not any(isinstance(e, E.Zero) for e in walk(t.op.body)), t.name
    for t in topo_order([tc.optimize(op)]):
        if isinstance(t.op, tc.tensor.ComputeOp):
            assert not any(isinstance(e, E.Delta) for e in walk(t.op.body)), t.name


def test_low_rank_operator(rng):
    n, r = 20, 2
    x, u, vals = build(net_mlp2, n, rng)
    M = rng.standard_normal((r, n))
    A = M.T @ np.diag([1.0, -1.0]) @ M
    op = tc.diff_operator(u, x, A)
    got = tc.evaluate([op], vals)[0]
    ref = operator_fd(evaluate_fn(u, x, vals), vals[x], A)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * (np.abs(ref).max() + 1.0))
    hess = tc.evaluate([tc.diff_operator(u, x, A, method="hessian")], vals)[0]
    np.testing.assert_allclose(got, hess, rtol=1e-10, atol=1e-12)
    # every tangent stage carries r = 2 components, none carries N = 20
    g_shapes = [tuple(int(d.value) for d in t.shape) for t in topo_order([op])
                if t.name.startswith("g_")]
    assert g_shapes and all(r in s and n not in s for s in g_shapes), g_shapes


def test_first_layer_tangent_is_batch_invariant(rng):
    x, u, vals = build(net_mlp2, 3, rng)
    op = tc.laplacian(u, x)
    stages = {t.name: t for t in topo_order([op])}
    # g of the first layer's pre-activation, sum_n W[j, n] L[k, n]: one (r, width) stage
    inv = [t for name, t in stages.items() if name.startswith("g_h0")
           and tuple(int(d.value) for d in t.shape) == (3, 5)]
    assert inv, sorted(stages)
    assert all(r.tensor is not x for r in walk(inv[0].op.body) if isinstance(r, E.TensorRead))


def test_output_with_trailing_axes_and_float32(rng):
    n = 2
    x = ph((B, n), "x", "float32")
    W = ph((3, n), "W", "float32")
    k = tc.reduce_axis(n, "k")
    Y = tc.compute((B, 3), lambda b, j: tc.tanh(tc.sum(W[j, k] * x[b, k], axis=k)) * x[b, 0],
                   name="Y")
    vals = {x: points(rng, n).astype(np.float32), W: rng.standard_normal((3, n))}
    A = np.array([[2.0, 0.5], [0.5, -1.0]])
    got = tc.evaluate([tc.diff_operator(Y, x, A)], vals)[0]
    assert got.shape == (B, 3) and got.dtype == np.float32
    hess = tc.evaluate([tc.diff_operator(Y, x, A, method="hessian")], vals)[0]
    np.testing.assert_allclose(got, hess, rtol=1e-4, atol=1e-5)
    x64 = ph((B, n), "x64")
    Y64 = tc.compute((B, 3), lambda b, j: tc.tanh(tc.sum(W[j, k] * tc.cast(x64[b, k],
                                                                             "float32"),
                                                         axis=k)) * tc.cast(x64[b, 0],
                                                                            "float32"), name="Y")
    ref = operator_fd(lambda xv: tc.evaluate([tc.compute((B, 3), lambda b, j: tc.cast(
        Y64[b, j], "float64"))], {W: vals[W], x64: xv})[0], vals[x].astype(np.float64), A,
        h=0.05)
    np.testing.assert_allclose(got, ref, rtol=0, atol=5e-3)


def test_linear_output_and_zero_matrix(rng):
    x = ph((B, 3), "x")
    k = tc.reduce_axis(3, "k")
    Y = tc.compute((B,), lambda b: tc.sum(x[b, k] * 2.0, axis=k), name="Y")
    for method in ("dof", "hessian"):
        (z,) = tc.evaluate([tc.laplacian(Y, x, method=method)], {x: np.ones((B, 3))})
        np.testing.assert_array_equal(z, np.zeros(B))
    Q = tc.compute((B,), lambda b: x[b, 0] * x[b, 1], name="Q")
    (z,) = tc.evaluate([tc.diff_operator(Q, x, np.zeros((3, 3)))], {x: np.ones((B, 3))})
    np.testing.assert_array_equal(z, np.zeros(B))
    (c,) = tc.evaluate([tc.diff_operator(Q, x, np.ones((3, 3)))], {x: np.ones((B, 3))})
    np.testing.assert_allclose(c, np.full(B, 2.0), rtol=1e-12)


def test_product_reduction_with_zero_factors(rng):
    """Samples with 0, 1, 2 and 3 zero factors; the second differences are exact there
    (the product is a polynomial in each factor)."""
    b_, n, k = 5, 3, 6
    x, c, q = ph((b_, n), "x"), ph((k,), "c"), ph((k,), "q")
    m = tc.reduce_axis(k, "m")
    Y = tc.compute((b_,), lambda b: tc.prod((x[b, 0] - c[m]) * (
        1.0 + q[m] * x[b, 1] + x[b, 2] * x[b, 2]), axis=m), name="Y")
    xv = rng.standard_normal((b_, n))
    xv[:, 0] = [0.1, 0.3, -0.4, 0.7, 0.5]          # zero factors: 0, 1, 2, 3, 0
    vals = {x: xv, c: np.array([0.3, -0.4, -0.4, 0.7, 0.7, 0.7]), q: rng.standard_normal(k)}
    M = rng.standard_normal((n, n))
    A = M + M.T
    got = tc.evaluate([tc.diff_operator(Y, x, A)], vals)[0]
    ref = operator_fd(evaluate_fn(Y, x, vals), xv, A)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * (np.abs(ref).max() + 1.0))
    assert np.all(np.abs(got[:3]) > 1e-3) and got[3] == 0.0
