"""DOF against the Hessian method in static cost, and reverse mode through a Laplacian."""

from __future__ import annotations

import numpy as np
import pytest
from dof_nets import mlp, ph

import tecomp as tc


def _mlp(n, widths, batch, rng):
    x = ph((batch, n), "x")
    vals = {}
    u = mlp(x, widths, rng, vals)
    return x, u, vals


@pytest.mark.parametrize("n, r, bound", [(4, 4, 0.55), (20, 2, 0.10)])
def test_dof_flops_against_hessian_method(n, r, bound, rng):
    x, u, _ = _mlp(n, [16, 16], 32, rng)
    M = rng.standard_normal((r, n))
    A = M.T @ M
    dof = tc.cost([tc.diff_operator(u, x, A)])
    hess = tc.cost([tc.diff_operator(u, x, A, method="hessian")])
    assert dof.flops <= bound * hess.flops, (dof, hess)
    assert dof.iterations < hess.iterations


@pytest.mark.parametrize("kind, bound", [("dense", 0.55), ("laplacian", 0.55), ("rank", 0.10)])
def test_dof_flops_on_depth4_tanh_mlp(kind, bound, rng):
    """The issue's first MLP config: N = 100, four tanh layers of width 256, batch 64.

    Static counts only (no evaluation), so the full size is cheap.  At toy sizes (N = 10,
    width 16) the forward pass dominates DOF's count and the rank-N/10 ratio is ~0.13: the
    targets are stated for the issue's configurations."""
    n = 100
    x, u, _ = _mlp(n, [256] * 4, 64, rng)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    M = rng.standard_normal((n // 10, n))
    A = {"dense": Q @ np.diag(np.linspace(-2.0, 2.0, n) + 0.05) @ Q.T, "laplacian": np.eye(n),
         "rank": M.T @ M}[kind]
    dof = tc.cost([tc.diff_operator(u, x, A)])
    hess = tc.cost([tc.diff_operator(u, x, A, method="hessian")])
    assert dof.flops <= bound * hess.flops, (dof, hess)


def _laplacian_loss(rng):
    x, u, vals = _mlp(2, [4, 3], 5, rng)
    vals[x] = rng.uniform(-1, 1, (5, 2))
    f = ph((5,), "f")
    vals[f] = rng.standard_normal(5)
    lap = tc.laplacian(u, x)
    b = tc.reduce_axis(5, "b")
    loss = tc.compute((), lambda: tc.sum((lap[b] - f[b]) * (lap[b] - f[b]), axis=b),
                      name="loss")
    weights = [t for t in vals if t is not x and t is not f]
    return x, f, lap, loss, weights, vals


def test_gradient_of_laplacian_loss_wrt_weights(rng):
    x, f, lap, loss, weights, vals = _laplacian_loss(rng)
    grads = tc.gradient(loss, weights)
    gv = tc.evaluate(grads, vals)
    dirs = [rng.standard_normal(np.shape(vals[w])) for w in weights]
    dot = sum(float(np.sum(g * d)) for g, d in zip(gv, dirs))

    def L(h):
        v = dict(vals)
        for w, d in zip(weights, dirs):
            v[w] = vals[w] + h * d
        return float(tc.evaluate([loss], v)[0])
    h = 1e-5
    fd = (L(h) - L(-h)) / (2 * h)
    assert abs(dot - fd) <= 1e-6 * (abs(fd) + 1.0), (dot, fd)


def test_built_kernel_matches_evaluator(rng):
    x, f, lap, loss, weights, vals = _laplacian_loss(rng)
    outs = [lap, loss, *tc.gradient(loss, weights)]
    kernel = tc.build(outs, [x, f, *weights])
    got = kernel(vals[x], vals[f], *[vals[w] for w in weights])
    for g, ref in zip(got, tc.evaluate(outs, vals)):
        np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-12)
