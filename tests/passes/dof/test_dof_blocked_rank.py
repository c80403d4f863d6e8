"""DOF with a blocked rank axis (``k = kb * block + ki``, used for large ranks in the rank-last
layout of wide networks), forced on small problems by lowering the thresholds: every operator
kind against the Hessian method, including ranks that leave padding in the last block, and the
stage layout."""

from __future__ import annotations

import numpy as np
import pytest
from dof_nets import NETS, matrices, ph
from gradcheck import check_gradient

import tecomp as tc
import tecomp.passes.dof.propagate as dof_propagate
from tecomp.functor import topo_order


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(dof_propagate, "WIDTH_LAST_MAX_BYTES", 0)
    monkeypatch.setattr(dof_propagate, "BLOCK_OVER", 2)
    monkeypatch.setattr(dof_propagate, "BLOCK", 2)


def _matrices(rng, n):
    out = matrices(rng, n)
    M = rng.standard_normal((3, n))
    out["low rank 3"] = M.T @ np.diag([1.0, -1.0, 2.0]) @ M       # 2 blocks, one padded
    out["scaled identity"] = 2.5 * np.eye(n)
    return out


@pytest.mark.parametrize("net", ["mlp3", "residual", "product", "ops"])
def test_blocked_operator_matches_hessian_method(net, rng, small_blocks):
    n, b = 5, 3
    x = ph((b, n), "x")
    vals = {}
    u = NETS[net](x, rng, vals)
    vals[x] = rng.uniform(0.2, 1.0, (b, n)) * rng.choice([-1.0, 1.0], (b, n))
    for kind, A in _matrices(rng, n).items():
        got = tc.evaluate([tc.diff_operator(u, x, A)], vals)[0]
        ref = tc.evaluate([tc.diff_operator(u, x, A, method="hessian")], vals)[0]
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12, err_msg=kind)


def test_blocked_layout_and_built_kernel(rng, small_blocks):
    n, b = 5, 4
    x = ph((b, n), "x")
    vals = {}
    u = NETS["mlp3"](x, rng, vals)
    vals[x] = rng.uniform(-1.0, 1.0, (b, n))
    op = tc.laplacian(u, x)
    # tangents of per-sample stages: (batch, blocks, width, block) with 3 blocks of 2 >= 5
    shapes = {t.name: tuple(int(d.value) for d in t.shape) for t in topo_order([op])
              if t.name.startswith("g_")}
    assert shapes["g_h1"] == (b, 3, 5, 2), shapes
    ref = tc.evaluate([tc.laplacian(u, x, method="hessian")], vals)[0]
    (got,) = tc.build([op], [x] + [t for t in vals if t is not x])(
        vals[x], *[vals[t] for t in vals if t is not x])
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def _two_layer_g_ndim(n):
    x = ph((2, n), "x")
    W = ph((3, n), "W")
    k = tc.reduce_axis(n, "k")
    y = tc.compute((2, 3), lambda b, j: tc.tanh(tc.sum(W[j, k] * x[b, k], axis=k)), name="y")
    m = tc.reduce_axis(3, "m")
    z = tc.compute((2,), lambda b: tc.tanh(tc.sum(y[b, m], axis=m)), name="z")
    return {t.ndim for t in topo_order([tc.laplacian(z, x)]) if t.name == "g_y"}


def test_large_rank_is_blocked_small_rank_is_not(monkeypatch):
    assert _two_layer_g_ndim(250) == {3}    # width-last (narrow net): (batch, r, width)
    monkeypatch.setattr(dof_propagate, "WIDTH_LAST_MAX_BYTES", 0)
    assert _two_layer_g_ndim(8) == {3}      # (batch, width, r)
    assert _two_layer_g_ndim(250) == {4}    # (batch, blocks, width, block)


def test_gradient_through_blocked_laplacian(rng, small_blocks):
    """Reverse mode through the blocked layout (the PINN path): d loss / d W0 against
    central differences in one random direction."""
    n, b = 5, 3
    x = ph((b, n), "x")
    vals = {}
    u = NETS["mlp2"](x, rng, vals)
    vals[x] = rng.uniform(-1.0, 1.0, (b, n))
    lap = tc.laplacian(u, x)
    i = tc.reduce_axis(b, "i")
    loss = tc.compute((), lambda: tc.sum(lap[i] * lap[i], axis=i), name="loss")
    W0 = next(t for t in vals if t.name == "W0")
    check_gradient(loss, [W0], vals, optimize=True, rtol=1e-6, atol=1e-6)
