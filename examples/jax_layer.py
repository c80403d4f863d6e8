"""A tecomp layer inside a JAX model, trained with ``jax.jit(jax.grad(...))`` and plain SGD.

The same "swish dense" block as ``torch_layer.py``, wrapped with ``tc.interop.jax_function``:
a ``jax.custom_vjp`` function whose forward and backward passes are tecomp kernels, called
through the XLA FFI on XLA's own buffers (no copies).  The read-out and the loss are plain
JAX; the update is SGD on a dict of parameters, with no optimiser library.

    python examples/jax_layer.py
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import tecomp as tc

FEATURES, HIDDEN, CLASSES = 16, 32, 2


def program() -> tuple[list[tc.Tensor], list[tc.Tensor]]:
    """The layer's tensor program, ``([Y], [X, W])`` (``tecomp show`` reads this function)."""
    n = tc.var("n")
    X = tc.placeholder((n, FEATURES), name="X")
    W = tc.placeholder((HIDDEN, FEATURES), name="W")
    Z = tc.ops.dense(X, W)
    Y = tc.compute(Z.shape, lambda i, j: Z[i, j] * tc.sigmoid(Z[i, j]), name="swish_dense")
    return [Y], [X, W]


def swish_dense_layer() -> tc.interop.JaxFunction:
    (Y,), inputs = program()
    return tc.interop.jax_function(Y, inputs)


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args(argv)
    layer = swish_dense_layer()
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((256, FEATURES)), jnp.float32)
    y = jnp.asarray((x[:, 0] * x[:, 1] + x[:, 2] > 0).astype(jnp.int32))
    params = {
        "w": jnp.asarray(rng.standard_normal((HIDDEN, FEATURES)) / FEATURES ** 0.5, jnp.float32),
        "head": jnp.asarray(rng.standard_normal((HIDDEN, CLASSES)) / HIDDEN ** 0.5, jnp.float32),
        "bias": jnp.zeros(CLASSES, jnp.float32),
    }

    def logits(params: dict, x: jax.Array) -> jax.Array:
        return layer(x, params["w"]) @ params["head"] + params["bias"]

    def loss(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(logits(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def step(params: dict, x: jax.Array, y: jax.Array) -> tuple[dict, jax.Array]:
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.5 * g, params, grads), value

    first = value = None
    for k in range(args.steps):
        params, value = step(params, x, y)
        first = float(value) if first is None else first
        if k % 20 == 0 or k == args.steps - 1:
            print(f"step {k:3d}  loss {float(value):.4f}")
    acc = float(jnp.mean(jnp.argmax(logits(params, x), 1) == y))
    print(f"jax.jit(jax.value_and_grad(loss)): loss {first:.4f} -> {float(value):.4f}, "
          f"train accuracy {acc:.2f}")
    return float(value)


if __name__ == "__main__":
    main()
