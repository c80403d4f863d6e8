"""A Laplacian of a graph holding a scatter that depends on x (the gradient of a gather):
DOF has no scatter rule, so ``method="dof"`` uses the Hessian method (it used to give zeros)
and the DOF pass itself refuses such a graph."""

from __future__ import annotations

import numpy as np
import pytest
from dof_nets import ph

import tecomp as tc
from tecomp.passes.dof import decompose, dof_operator

B, n = 2, 3


def _grad_norm():
    x = ph((B, n), "x")
    idx = tc.placeholder((4,), name="idx", dtype="int64")
    i = tc.reduce_axis(4, "i")
    u = tc.compute((B,), lambda b: tc.sum(tc.sin(x[b, idx[i]]) * x[b, idx[i]], axis=i),
                   name="u")
    (g,) = tc.gradient(u, [x])                        # holds dx[b, idx[i]] += ...
    k = tc.reduce_axis(n, "k")
    v = tc.compute((B,), lambda b: tc.sum(g[b, k] * g[b, k], axis=k), name="v")
    return x, idx, v


def test_laplacian_through_a_scatter_matches_second_differences(rng):
    x, idx, v = _grad_norm()
    a = {x: rng.standard_normal((B, n)), idx: np.array([0, 2, 2, 1])}
    (got,) = tc.evaluate([tc.laplacian(v, x)], a)

    def f(xv):
        return tc.evaluate([v], {**a, x: xv})[0]
    h = 1e-4
    fd = sum((f(a[x] + h * e[None]) - 2 * f(a[x]) + f(a[x] - h * e[None])) / h ** 2
             for e in np.eye(n))
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-6)


def test_dof_pass_refuses_a_scatter_that_depends_on_x():
    x, _, v = _grad_norm()
    with pytest.raises(tc.DifferentiationError, match="no rule for the scatter"):
        dof_operator(v, x, decompose(np.eye(n)))
