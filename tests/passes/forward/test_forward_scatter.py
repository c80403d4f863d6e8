"""Forward mode through scatter stages (the adjoints of gathers in optimised gradients):
Hessians by forward over reverse mode and JVPs of gradients against central differences of
the gradient, in float64."""

from __future__ import annotations

import numpy as np

import tecomp as tc
from tecomp.functor import topo_order
from tecomp.tensor import ScatterOp

F = "float64"


def _embedding_loss():
    V, n, H = 4, 5, 3
    E = tc.placeholder((V, H), name="E", dtype=F)
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    i, h = tc.reduce_axis(n, "i"), tc.reduce_axis(H, "h")
    loss = tc.compute((), lambda: tc.sum(tc.sin(E[idx[i], h]) * E[idx[i], (h + 1) % H],
                                         axis=[i, h]), name="loss")
    return E, idx, loss


def _fd_jacobian(fn, x, h=1e-6):
    cols = []
    for m in range(x.size):
        e = np.zeros(x.size)
        e[m] = h
        e = e.reshape(x.shape)
        cols.append(((fn(x + e) - fn(x - e)) / (2 * h)).ravel())
    return np.stack(cols, 1)


def test_the_gradient_holds_a_scatter():
    E, idx, loss = _embedding_loss()
    (g,) = tc.gradient(loss, [E])
    assert any(isinstance(t.op, ScatterOp) for t in topo_order([g]))


def test_hessian_through_a_gather_matches_differences_of_the_gradient(rng):
    E, idx, loss = _embedding_loss()
    a = {E: rng.standard_normal((4, 3)), idx: np.array([0, 2, 2, 3, 0])}   # repeats
    (H,) = tc.evaluate([tc.hessian(loss, E)], a)
    (g,) = tc.gradient(loss, [E])

    def grad(e):
        return tc.evaluate([g], {**a, E: e})[0]
    want = _fd_jacobian(grad, a[E])
    np.testing.assert_allclose(H.reshape(12, 12), want, rtol=1e-6, atol=1e-8)
    (got,) = tc.build([tc.hessian(loss, E)], [E, idx])(a[E], a[idx])
    np.testing.assert_allclose(got, H, rtol=1e-12, atol=1e-12)


def test_jvp_of_a_gradient_with_a_scatter(rng):
    E, idx, loss = _embedding_loss()
    a = {E: rng.standard_normal((4, 3)), idx: np.array([1, 1, 3, 0, 2])}
    (g,) = tc.gradient(loss, [E])
    Vt = tc.placeholder((4, 3), name="V", dtype=F)
    v = rng.standard_normal((4, 3))
    (got,) = tc.evaluate([tc.jvp(g, [E], [Vt])], {**a, Vt: v})
    h = 1e-6
    gp = tc.evaluate([g], {**a, E: a[E] + h * v})[0]
    gm = tc.evaluate([g], {**a, E: a[E] - h * v})[0]
    np.testing.assert_allclose(got, (gp - gm) / (2 * h), rtol=1e-6, atol=1e-8)
