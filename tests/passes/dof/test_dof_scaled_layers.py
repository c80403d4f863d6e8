"""DOF's tangent layouts (direction axis before the width for narrow networks, last for wide
ones) and its scaled layers (seed eq. 23: ``g_T = f'(z) * sum(...)`` as one stage, second-order
term ``(f''/f') Q(g_T, g_T) / f'``), checked in float64 against the Hessian method and second
differences: every activation of the scaled form, saturated units where ``f' = 0``, a large
rank, built kernels, float32, reverse mode through the result, and the rank-last layout forced
on every test network."""

from __future__ import annotations

import numpy as np
import pytest
from dof_nets import NETS, matrices, mlp, operator_fd, ph
from gradcheck import check_gradient

import tecomp as tc
import tecomp.passes.dof.propagate as dof_propagate
from tecomp import expr as E
from tecomp.functor import topo_order
from tecomp.intrinsics import INTRINSICS


def _net(act, rng, n=4, widths=(5, 4, 3), b=3):
    x = ph((b, n), "x")
    vals = {}
    u = mlp(x, list(widths), rng, vals, act=act)
    vals[x] = rng.uniform(-1.0, 1.0, (b, n))
    return x, u, vals


def _mlp32(rng, n=4, widths=(5, 4, 3), b=3):
    """A float32 tanh MLP (weights and points float32)."""
    f32 = "float32"
    x = ph((b, n), "x", f32)
    vals = {x: rng.uniform(-1.0, 1.0, (b, n)).astype(np.float32)}
    h, nin = x, n
    for layer, w in enumerate(widths):
        W = ph((w, nin), f"W{layer}", f32)
        vals[W] = (rng.standard_normal((w, nin)) / np.sqrt(nin)).astype(np.float32)
        k = tc.reduce_axis(nin, f"k{layer}")
        h = tc.compute((b, w), lambda i, j, h=h, W=W, k=k: tc.tanh(
            tc.sum(W[j, k] * h[i, k], axis=k)), name=f"h{layer}")
        nin = w
    k = tc.reduce_axis(nin, "r")
    u = tc.compute((b,), lambda i: tc.sum(h[i, k], axis=k), name="u")
    return x, u, vals


def _stages(op):
    return {t.name: t for t in topo_order([op])}


def _shape(t):
    return tuple(int(d.value) for d in t.shape)


# the activations of the scaled form: the op-table entries that give f''/f'
SCALED = sorted(name for name, op in INTRINSICS.items() if op.d2_over_d1 is not None)


@pytest.mark.parametrize("act", SCALED)
@pytest.mark.parametrize("kind", ["laplacian", "indefinite"])
def test_scaled_layers_match_hessian_and_fd(act, kind, rng):
    x, u, vals = _net(getattr(tc, act), rng)
    A = matrices(rng, 4)[kind]
    op = tc.diff_operator(u, x, A)
    st = _stages(op)
    # the middle layer is scaled: its g is one stage, with no g_z ("_arg") buffer
    assert {"g_h1", "q_h1", "g_h2_arg"} <= set(st) and "g_h1_arg" not in st, sorted(st)
    got = tc.evaluate([op], vals)[0]
    ref = tc.evaluate([tc.diff_operator(u, x, A, method="hessian")], vals)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)

    def f(xv):
        return tc.evaluate([u], {**vals, x: xv})[0]
    fd = operator_fd(f, vals[x], A)
    np.testing.assert_allclose(got, fd, rtol=0, atol=2e-6 * (np.abs(fd).max() + 1.0))


def test_tangent_layout_puts_the_direction_axis_before_the_width(rng):
    x, u, _ = _net(tc.tanh, rng, n=4, widths=(5, 6, 3), b=2)
    st = _stages(tc.laplacian(u, x))
    assert _shape(st["g_h0_arg"]) == (4, 5)        # batch-invariant: (r, width)
    assert _shape(st["g_h0"]) == (2, 4, 5)         # (batch, r, width)
    assert _shape(st["g_h1"]) == (2, 4, 6)
    assert _shape(st["g_h2_arg"]) == (2, 4, 3)
    # g_h1 = f'(z) * sum_n W[j, n] g_h0[b, k, n]: the scale outside the sum
    body = st["g_h1"].op.body
    while isinstance(body, E.Cast):
        body = body.value
    assert isinstance(body, E.Mul) and any(isinstance(e, E.Reduce) for e in (body.a, body.b))


def test_saturated_units_where_the_derivative_vanishes(rng):
    """Large pre-activations: tanh' = 1 - tanh^2 is exactly 0 there (the guarded branch), and
    the operator must stay finite and equal to the Hessian method's."""
    x, u, vals = _net(tc.tanh, rng)
    W1 = next(t for t in vals if t.name == "W1")
    big = vals[W1].copy()
    big[:2] *= 400.0                                # two saturated units in layer 1
    vals = {**vals, W1: big}
    h1 = next(t for t in topo_order([u]) if t.name == "h1")
    (z,) = tc.evaluate([h1], vals)
    assert np.any(1.0 - z * z == 0.0)
    got = tc.evaluate([tc.laplacian(u, x)], vals)[0]
    ref = tc.evaluate([tc.laplacian(u, x, method="hessian")], vals)[0]
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_last_layer_before_a_linear_readout_keeps_the_plain_form(rng):
    x, u, _ = _net(tc.tanh, rng, widths=(5, 4))
    st = _stages(tc.laplacian(u, x))
    assert "g_h1_arg" in st and "g_h1" not in st, sorted(st)


def test_large_rank_built_kernel_and_float32(rng):
    """A rank-40 indefinite operator (built kernel against the Hessian method), and the
    scaled form in float32."""
    n = 40
    x, u, vals = _net(tc.tanh, rng, n=n, widths=(8, 7, 3))
    A = matrices(rng, n)["indefinite"]
    op = tc.diff_operator(u, x, A)
    assert "q_h1" in _stages(op)
    inputs = list(vals)
    (got,) = tc.build([op], inputs)(*[vals[t] for t in inputs])
    ref = tc.evaluate([tc.diff_operator(u, x, A, method="hessian")], vals)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-11)
    x32, u32, v32 = _mlp32(rng)
    lap32 = tc.laplacian(u32, x32)
    assert "q_h1" in _stages(lap32)
    got32 = tc.evaluate([lap32], v32)[0]
    ref32 = tc.evaluate([tc.laplacian(u32, x32, method="hessian")], v32)[0]
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, ref32, rtol=1e-4, atol=1e-4 * np.abs(ref32).max())


def test_gradient_through_scaled_layers(rng):
    """Reverse mode through the scaled form (the PINN path): d loss / d W1 against central
    differences in one random direction."""
    x, u, vals = _net(tc.tanh, rng)
    lap = tc.laplacian(u, x)
    assert "q_h1" in _stages(lap)
    i = tc.reduce_axis(3, "i")
    loss = tc.compute((), lambda: tc.sum(lap[i] * lap[i], axis=i), name="loss")
    W1 = next(t for t in vals if t.name == "W1")
    check_gradient(loss, [W1], vals, optimize=True, rtol=1e-6, atol=1e-6)


@pytest.fixture
def rank_last(monkeypatch):
    """The layout of wide networks (rank axis last, plain layer form), forced on small ones."""
    monkeypatch.setattr(dof_propagate, "WIDTH_LAST_MAX_BYTES", 0)


@pytest.mark.parametrize("net", sorted(NETS))
def test_rank_last_layout_matches_hessian_method(net, rng, rank_last):
    n, b = 4, 3
    x = ph((b, n), "x")
    vals = {}
    u = NETS[net](x, rng, vals)
    vals[x] = rng.uniform(0.2, 1.0, (b, n)) * rng.choice([-1.0, 1.0], (b, n))
    for kind, A in matrices(rng, n).items():
        op = tc.diff_operator(u, x, A)
        got = tc.evaluate([op], vals)[0]
        ref = tc.evaluate([tc.diff_operator(u, x, A, method="hessian")], vals)[0]
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12, err_msg=kind)


def test_rank_last_layout_shapes_and_built_kernel(rng, rank_last):
    x, u, vals = _net(tc.tanh, rng, n=4, widths=(5, 6, 3), b=2)
    op = tc.laplacian(u, x)
    st = _stages(op)
    assert _shape(st["g_h0_arg"]) == (5, 4)        # (width, r)
    assert _shape(st["g_h1_arg"]) == (2, 6, 4)     # (batch, width, r): the plain form
    assert _shape(st["g_h1"]) == (2, 6, 4)
    inputs = list(vals)
    (got,) = tc.build([op], inputs)(*[vals[t] for t in inputs])
    ref = tc.evaluate([tc.laplacian(u, x, method="hessian")], vals)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def _one_layer_g_shape(width):
    x = ph((2, 3), "x")
    W = ph((width, 3), "W")
    k = tc.reduce_axis(3, "k")
    h = tc.compute((2, width), lambda b, j: tc.tanh(tc.sum(W[j, k] * x[b, k], axis=k)),
                   name="h")
    m = tc.reduce_axis(width, "m")
    u = tc.compute((2,), lambda b: tc.sum(h[b, m], axis=m), name="u")
    return _shape(_stages(tc.laplacian(u, x))["g_h_arg"])


def test_layout_follows_the_width():
    """Width-last up to WIDTH_LAST_MAX_BYTES of width^2 float64 entries, rank-last above;
    a large batch (the output's only axis) is no width."""
    limit = int(np.sqrt(dof_propagate.WIDTH_LAST_MAX_BYTES / 8))
    assert _one_layer_g_shape(limit) == (3, limit)
    assert _one_layer_g_shape(limit + 1) == (limit + 1, 3)
    x = ph((2 * limit, 3), "x")
    W = ph((4, 3), "W")
    k = tc.reduce_axis(3, "k")
    h = tc.compute((2 * limit, 4), lambda b, j: tc.tanh(tc.sum(W[j, k] * x[b, k], axis=k)),
                   name="h")
    m = tc.reduce_axis(4, "m")
    u = tc.compute((2 * limit,), lambda b: tc.sum(h[b, m], axis=m), name="u")
    assert _shape(_stages(tc.laplacian(u, x))["g_h_arg"]) == (3, 4)
