"""Scans against JAX: forward values and gradients equal ``jax.lax.scan`` + ``jax.grad``
(float64).  Skipped when JAX is not installed."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tests.passes.autodiff.scan_cases import CASES

jax = pytest.importorskip("jax", reason="jax is not installed (pip install jax)")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)
lax = jax.lax


def _cumsum(a):
    (x,) = a
    return lax.scan(lambda c, xt: (c + xt, c + xt), jnp.zeros_like(x[0]), x)[1]


def _cumprod(a):
    (x,) = a
    return lax.scan(lambda c, xt: (c * xt, c * xt), jnp.ones_like(x[0]), x)[1]


def _fibonacci(a):
    (x,) = a

    def step(c, xt):
        s2, s1 = c
        s = s1 + s2 * xt
        return (s1, s), s

    _, rest = lax.scan(step, (x[0], x[1]), x[2:])
    return jnp.concatenate([x[:2], rest])


def _elman(a):
    x, W, U, b, h0 = a

    def step(h, xt):
        h = jnp.tanh(h @ W.T + xt @ U.T + b)
        return h, h

    _, hs = lax.scan(step, h0[0], x[1:])
    return jnp.concatenate([h0, hs])


def _lstm(a):
    x, Wh, Wx = a
    H = Wh.shape[1]
    c0 = x[0][:, jnp.arange(H) % x.shape[2]]
    h0 = jnp.zeros_like(c0)

    def step(carry, xt):
        h, c = carry
        g = h @ Wh.T + xt @ Wx.T
        c = (jax.nn.sigmoid(g[:, H:2 * H]) * c
             + jax.nn.sigmoid(g[:, :H]) * jnp.tanh(g[:, 2 * H:3 * H]))
        h = jax.nn.sigmoid(g[:, 3 * H:]) * jnp.tanh(c)
        return (h, c), h

    _, hs = lax.scan(step, (h0, c0), x[1:])
    return jnp.concatenate([h0[None], hs])


def _euler(a, T=12, dt=0.1):
    th, y0 = a

    def step(y, _):
        y = y + dt * (th[0] * y - th[1] * y ** 3 + th[2] * jnp.sin(y))
        return y, y

    _, ys = lax.scan(step, y0[0], None, length=T - 1)
    return jnp.concatenate([y0, ys])


def _state_gather(a):
    x, W = a
    perm = jnp.array([2, 0, 0, 1])  # as in scan_cases.state_gather

    def step(s, xt):
        g = s[perm]
        s = jnp.tanh(W @ g) + g * xt
        return s, s

    _, ss = lax.scan(step, x[0], x[1:])
    return jnp.concatenate([x[:1], ss])


JAX = {"cumsum": _cumsum, "cumprod_zeros": _cumprod, "fibonacci": _fibonacci,
       "elman": _elman, "lstm": _lstm, "euler": _euler, "state_gather": _state_gather}


@pytest.mark.parametrize("name", sorted(JAX))
def test_forward_and_gradient_equal_jax(name, rng):
    c = CASES[name](rng)
    fn = JAX[name]
    args = [jnp.asarray(c.arrays[x]) for x in c.inputs]
    want = np.asarray(fn(args))
    (got,) = tc.evaluate([c.output], c.arrays)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    head = rng.standard_normal(want.shape)
    jgrads = jax.grad(lambda *a: jnp.sum(fn(list(a)) * head), argnums=tuple(range(len(args))))(
        *args)
    H = tc.placeholder(c.output.shape, name="head", dtype=c.output.dtype)
    grads = tc.gradient(c.output, c.inputs, H)
    kernel = tc.build(grads, list(c.arrays) + [H])
    got_grads = kernel(*[c.arrays[x] for x in c.arrays], head)
    got_grads = got_grads if isinstance(got_grads, tuple) else (got_grads,)
    for x, g, w in zip(c.inputs, got_grads, jgrads):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-9, atol=1e-11,
                                   err_msg=f"gradient of {x.name}")
