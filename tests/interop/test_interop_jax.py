"""tc.interop.jax_function: jax.jit(jax.grad(...)) and jax.vmap against pure JAX, through the
XLA FFI handler and through pure_callback; integer inputs; run-time errors."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc

jax = pytest.importorskip("jax", reason="JAX is not installed (the jax extra)")
jnp = jax.numpy


@pytest.fixture(autouse=True)
def x64():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


def _swish_dense():
    n = tc.var("n")
    X = tc.placeholder((n, 8), name="X", dtype="float64")
    W = tc.placeholder((3, 8), name="W", dtype="float64")
    Z = tc.ops.dense(X, W)
    return X, W, tc.compute(Z.shape, lambda i, j: Z[i, j] * tc.sigmoid(Z[i, j]), name="swish")


def _reference(x, w):
    z = x @ w.T
    return z * jax.nn.sigmoid(z)


def _loss(f):
    return lambda x, w: jnp.sum(f(x, w) * jnp.cos(x[:, :3]))


@pytest.mark.parametrize("via", ["ffi", "callback"])
def test_jit_grad_and_vmap_equal_pure_jax(rng, via):
    X, W, Y = _swish_dense()
    f = tc.interop.jax_function(Y, [X, W], via=via)
    x, w = jnp.asarray(rng.standard_normal((6, 8))), jnp.asarray(rng.standard_normal((3, 8)))
    np.testing.assert_allclose(f(x, w), _reference(x, w), rtol=1e-12, atol=1e-12)
    grad = jax.jit(jax.grad(_loss(f), argnums=(0, 1)))
    ref = jax.grad(_loss(_reference), argnums=(0, 1))
    for rows in (6, 9):
        xr = jnp.asarray(rng.standard_normal((rows, 8)))
        for a, b in zip(grad(xr, w), ref(xr, w)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    xb = jnp.asarray(rng.standard_normal((4, 5, 8)))
    batched = jax.jit(jax.vmap(jax.grad(_loss(f), argnums=1), in_axes=(0, None)))(xb, w)
    loop = np.stack([jax.grad(_loss(_reference), argnums=1)(xb[k], w) for k in range(4)])
    np.testing.assert_allclose(batched, loop, rtol=1e-10, atol=1e-10)
    values = jax.vmap(f, in_axes=(0, None))(xb, w)
    np.testing.assert_allclose(values, np.stack([_reference(xb[k], w) for k in range(4)]),
                               rtol=1e-12, atol=1e-12)


def test_second_derivative_equals_pure_jax(rng):
    X, W, Y = _swish_dense()
    f = tc.interop.jax_function(Y, [X, W])
    x, w = jnp.asarray(rng.standard_normal((5, 8))), jnp.asarray(rng.standard_normal((3, 8)))

    def second(fn):
        return jax.grad(lambda w: jnp.sum(jax.grad(_loss(fn))(x, w) ** 2))(w)

    np.testing.assert_allclose(jax.jit(lambda: second(f))(), second(_reference), rtol=1e-10,
                               atol=1e-10)


def test_integer_inputs_get_no_cotangent_and_bad_indices_raise(rng):
    E = tc.placeholder((10, 4), name="E", dtype="float64")
    idx = tc.placeholder((6,), name="idx", dtype="int64")
    f = tc.interop.jax_function(tc.ops.take(E, idx), [E, idx])
    e = jnp.asarray(rng.standard_normal((10, 4)))
    ix = jnp.asarray([1, 3, 3, 0, 9, 1])
    g = jax.jit(jax.grad(lambda e, i: jnp.sum(f(e, i) ** 2)))(e, ix)
    np.testing.assert_allclose(g, jax.grad(lambda e: jnp.sum(e[ix] ** 2))(e), rtol=1e-12)
    with pytest.raises(Exception, match="tecomp: IndexBoundsError"):
        jax.block_until_ready(jax.jit(f)(e, jnp.asarray([1, 3, 3, 0, 10, 1])))


def test_errors_at_trace_time():
    X, W, Y = _swish_dense()
    f = tc.interop.jax_function(Y, [X, W])
    with pytest.raises(tc.ArgumentError, match="takes 2 array"):
        f(jnp.zeros((5, 8)))
    with pytest.raises(tc.ArgumentError, match="'X' must have dtype float64, got float32"):
        f(jnp.zeros((5, 8), jnp.float32), jnp.zeros((3, 8)))
    with pytest.raises(tc.ArgumentError, match="'W', axis 0: expected extent 3"):
        jax.jit(f)(jnp.zeros((5, 8)), jnp.zeros((4, 8)))
    with pytest.raises(tc.TecompError, match="via="):
        tc.interop.jax_function(Y, [X, W], via="gpu")


SHARDED = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np, tecomp as tc
from jax.sharding import NamedSharding, PartitionSpec as P
n = tc.var("n")
X, W = tc.placeholder((n, 16), name="X"), tc.placeholder((32, 16), name="W")
Z = tc.ops.dense(X, W)
layer = tc.interop.jax_function(
    tc.compute(Z.shape, lambda i, j: Z[i, j] * tc.sigmoid(Z[i, j]), name="swish"), [X, W])
mesh = jax.make_mesh((2,), ("data",))
rng = np.random.default_rng(0)
x = jax.device_put(jnp.asarray(rng.standard_normal((64, 16)), jnp.float32),
                   NamedSharding(mesh, P("data")))
w = jnp.asarray(rng.standard_normal((32, 16)), jnp.float32)
grads = []
for f in (layer, lambda x, w: (x @ w.T) * jax.nn.sigmoid(x @ w.T)):
    grad = jax.grad(lambda w, x: jnp.sum(f(x, w) ** 2))
    step = jax.jit(jax.shard_map(grad, mesh=mesh, in_specs=(P(), P("data")), out_specs=P()))
    grads.append(np.asarray(step(w, x)))
assert len(jax.devices()) == 2
np.testing.assert_allclose(grads[0], grads[1], rtol=2e-5, atol=2e-4)
print("sharded ok")
"""


def test_data_parallel_under_shard_map_equals_pure_jax():
    import subprocess
    import sys

    if not hasattr(jax, "shard_map"):
        pytest.skip("this JAX has no jax.shard_map")
    got = subprocess.run([sys.executable, "-c", SHARDED], capture_output=True, text=True,
                         timeout=300)
    assert got.returncode == 0 and "sharded ok" in got.stdout, got.stderr[-3000:]
