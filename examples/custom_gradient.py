"""A custom layer with a custom gradient: fake quantisation with a straight-through estimator.

Quantisation-aware training rounds activations to a grid in the forward pass,
``q(x) = floor(x·s + 0.5) / s``, whose true derivative is zero almost everywhere -- useless
for training.  The straight-through estimator (Bengio et al. 2013) passes the incoming
gradient through unchanged where ``|x|`` is inside the clipping range and zeroes it outside.

tecomp lets a layer declare its own derivative: ``tc.gradient(..., overrides={tag: fn})``
uses ``fn(out, inputs, head) -> [contribution per input]`` for every tensor declared with
``tag=``, and differentiates the rest of the graph as usual.  (A tensor can be given as the
key instead of a tag, for a single stage.)

    python examples/custom_gradient.py
"""

from __future__ import annotations

import numpy as np

import tecomp as tc

SCALE, CLIP = 4.0, 1.0


def fake_quantize(X: tc.Tensor, name: str = "fq") -> tc.Tensor:
    """``clip(floor(x·s + 0.5) / s, -CLIP, CLIP)``, element-wise; tagged for its gradient."""
    return tc.compute(X.shape, lambda *i: tc.minimum(tc.maximum(
        tc.floor(X[i] * SCALE + 0.5) / SCALE, -CLIP), CLIP), name=name, tag="fake_quantize")


def straight_through(out: tc.Tensor, inputs: list[tc.Tensor], head: tc.Tensor) -> list:
    """d fq / dX ≈ 1 inside the clipping range, 0 outside (the head passes through)."""
    (X,) = inputs
    zero = tc.const(0.0, X.dtype)
    dX = tc.compute(X.shape, lambda *i: tc.if_then_else(
        (X[i] >= -CLIP) & (X[i] <= CLIP), head[i], zero), name=f"{out.name}_ste")
    return [dX]


def program() -> tuple[list[tc.Tensor], list[tc.Tensor]]:
    """``sum(fq(X Wᵀ)²)`` and its inputs (also for ``tecomp show examples/custom_gradient.py``)."""
    n = tc.var("n")
    X = tc.placeholder((n, 8), name="X", dtype="float64")
    W = tc.placeholder((4, 8), name="W", dtype="float64")
    Q = fake_quantize(tc.ops.dense(X, W, name="z"))
    r, c = tc.reduce_axis(n, "r"), tc.reduce_axis(4, "c")
    loss = tc.compute((), lambda: tc.sum(Q[r, c] * Q[r, c], axis=[r, c]), name="loss")
    return [loss], [X, W]


def main() -> None:
    (loss,), (X, W) = program()

    (dW_true,) = tc.gradient(loss, [W])
    (dW,) = tc.gradient(loss, [W], overrides={"fake_quantize": straight_through})
    kernel = tc.build([loss, dW, dW_true], [X, W])

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 8)), rng.standard_normal((4, 8)) / 3
    value, dw, dw_true = kernel(x, w)

    z = x @ w.T
    q = np.clip(np.floor(z * SCALE + 0.5) / SCALE, -CLIP, CLIP)
    ref = ((2 * q) * (np.abs(z) <= CLIP)).T @ x  # the STE gradient, by hand
    print(f"loss {float(value):.4f} (NumPy {float((q * q).sum()):.4f})")
    print(f"true gradient through floor: max |dW| = {np.abs(dw_true).max():.1f} (zero a.e.)")
    print(f"straight-through gradient:   max |dW| = {np.abs(dw).max():.3f}, "
          f"max error vs hand-written {np.abs(dw - ref).max():.2e}")
    assert np.allclose(dw, ref, atol=1e-12) and np.allclose(value, (q * q).sum())
    assert np.all(dw_true == 0)


if __name__ == "__main__":
    main()
