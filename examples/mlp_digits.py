"""Train a small MLP classifier on scikit-learn's bundled digits with tecomp gradients.

The 8x8 digit images (1797 of them, bundled with scikit-learn: no download) are split into
training and test sets; the model is ``64 → 32 (tanh) → 10`` with a softmax cross-entropy
loss, written in tecomp's DSL.  ``tc.gradient`` gives the weight gradients, zero elimination
makes them as cheap as hand-written backprop, and ``tc.build`` compiles loss + gradients into
one kernel, compiled once for any batch size (the batch is a symbolic size ``n``).  The
optimiser (plain SGD with momentum) is NumPy.

    python examples/mlp_digits.py                # 30 epochs, test accuracy ~98%
    python examples/mlp_digits.py --epochs 3     # a quick run

Needs scikit-learn (``pip install scikit-learn``, or the ``examples`` extra).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tecomp as tc

HIDDEN, CLASSES = 32, 10


def model(X: tc.Tensor, params: list[tc.Tensor]) -> tc.Tensor:
    """Logits ``tanh(X W1ᵀ + b1) W2ᵀ + b2``."""
    W1, b1, W2, b2 = params
    z1 = tc.ops.dense(X, W1, b1, name="z1")
    h = tc.compute(z1.shape, lambda i, j: tc.tanh(z1[i, j]), name="h")
    return tc.ops.dense(h, W2, b2, name="logits")


def cross_entropy(logits: tc.Tensor, labels: tc.Tensor) -> tc.Tensor:
    """Mean over the batch of ``-log softmax(logits)[i, label[i]]``."""
    n = logits.shape[0]
    logp = tc.ops.log_softmax(logits)
    r = tc.reduce_axis(n, "r")
    return tc.compute((), lambda: -tc.sum(logp[r, labels[r]], axis=r) / tc.cast(n, "float32"),
                      name="loss")


def declare(features: int) -> tuple[list[tc.Tensor], tc.Tensor, tc.Tensor, list[tc.Tensor]]:
    n = tc.var("n")
    X = tc.placeholder((n, features), name="X")
    y = tc.placeholder((n,), name="y", dtype="int64")
    params = [tc.placeholder((HIDDEN, features), name="W1"),
              tc.placeholder((HIDDEN,), name="b1"),
              tc.placeholder((CLASSES, HIDDEN), name="W2"),
              tc.placeholder((CLASSES,), name="b2")]
    return params, X, y, [model(X, params)]


def program() -> tuple[list[tc.Tensor], list[tc.Tensor]]:
    """The loss and its inputs, for ``tecomp show|lower examples/mlp_digits.py [--grad]``."""
    params, X, y, (logits,) = declare(64)
    return [cross_entropy(logits, y)], [X, y, *params]


def train(epochs: int = 30, batch: int = 64, lr: float = 0.1, seed: int = 0,
          verbose: bool = True) -> float:
    """Train and return the test accuracy."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x_all = (digits.data / 16.0).astype(np.float32)
    y_all = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x_all))
    split = int(0.8 * len(order))
    train_idx, test_idx = order[:split], order[split:]

    params, X, y, (logits,) = declare(x_all.shape[1])
    loss = cross_entropy(logits, y)
    grads = tc.gradient(loss, params)
    t0 = time.perf_counter()
    step = tc.build([loss, *grads], [X, y, *params], name="train_step")
    predict = tc.build(logits, [X, *params], name="predict")
    if verbose:
        print(f"compiled the training step and the predictor in {time.perf_counter() - t0:.2f} s")

    values = [rng.standard_normal((HIDDEN, x_all.shape[1])) / np.sqrt(x_all.shape[1]),
              np.zeros(HIDDEN), rng.standard_normal((CLASSES, HIDDEN)) / np.sqrt(HIDDEN),
              np.zeros(CLASSES)]
    values = [v.astype(np.float32) for v in values]
    velocity = [np.zeros_like(v) for v in values]
    for epoch in range(epochs):
        perm = rng.permutation(train_idx)
        total = 0.0
        for start in range(0, len(perm), batch):
            ix = perm[start:start + batch]
            value, *g = step(x_all[ix], y_all[ix], *values)
            total += float(value) * len(ix)
            for v, m, dv in zip(values, velocity, g):
                m *= 0.9
                m -= lr * dv
                v += m
        if verbose and (epoch % 5 == 4 or epoch == epochs - 1):
            acc = accuracy(predict, x_all[test_idx], y_all[test_idx], values)
            print(f"epoch {epoch + 1:3d}: train loss {total / len(perm):.4f}, "
                  f"test accuracy {acc:.3f}")
    acc = accuracy(predict, x_all[test_idx], y_all[test_idx], values)
    print(f"test accuracy: {acc:.3f} ({len(test_idx)} held-out digits)")
    return acc


def accuracy(predict, x: np.ndarray, y: np.ndarray, values: list[np.ndarray]) -> float:
    return float((predict(x, *values).argmax(axis=1) == y).mean())


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args(argv)
    return train(args.epochs, args.batch, args.lr)


if __name__ == "__main__":
    main()
