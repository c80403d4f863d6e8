"""An Elman RNN over 100 steps, trained for a few steps of gradient descent.

The recurrence ``h[t] = tanh(W h[t-1] + U x[t] + b)`` is a ``tc.scan``; its gradient is the
adjoint recurrence running backward over time (O(T)), built by ``tc.gradient``.  The task:
predict a running average of the input sequence from the hidden state.

    python examples/rnn_sequence.py [--steps N] [--train-steps K]
"""

from __future__ import annotations

import argparse

import numpy as np

import tecomp as tc


def program(T: int = 100, B: int = 16, H: int = 32, I: int = 4,  # noqa: E741
            ) -> tuple[list[tc.Tensor], list[tc.Tensor]]:
    """The loss and its parameter gradients (outputs), and the inputs (``tecomp show``
    reads this function)."""
    X = tc.placeholder((T, B, I), name="x")
    Y = tc.placeholder((T, B), name="y")
    W = tc.placeholder((H, H), name="W")
    U = tc.placeholder((H, I), name="U")
    b = tc.placeholder((H,), name="b")
    V = tc.placeholder((H,), name="V")
    state = tc.placeholder((T, B, H), name="h_state")
    j, k = tc.reduce_axis(H, name="j"), tc.reduce_axis(I, name="k")
    xin = tc.compute((T, B, H), lambda t, n, i: tc.sum(U[i, k] * X[t, n, k], axis=k) + b[i],
                     name="xin")
    step = tc.compute((T, B, H), lambda t, n, i: tc.tanh(
        tc.sum(W[i, j] * state[t - 1, n, j], axis=j) + xin[t, n, i]), name="step")
    h0 = tc.compute((1, B, H), lambda s, n, i: tc.tanh(xin[0, n, i]), name="h0")
    h = tc.scan(h0, step, state, inputs=[xin], name="rnn")
    q = tc.reduce_axis(H, name="q")
    pred = tc.compute((T, B), lambda t, n: tc.sum(V[q] * h[t, n, q], axis=q), name="pred")
    rt, rn = tc.reduce_axis(T, name="rt"), tc.reduce_axis(B, name="rn")
    loss = tc.compute((), lambda: tc.sum((pred[rt, rn] - Y[rt, rn]) ** 2, axis=[rt, rn])
                      / float(T * B), name="loss")
    params = [W, U, b, V]
    grads = tc.gradient(loss, params)
    return [loss, *grads], [X, Y, *params]


def build(T: int, B: int, H: int, I: int):  # noqa: E741
    return tc.build(*program(T, B, H, I))


def main(argv: list[str] | None = None) -> list[float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="sequence length T")
    ap.add_argument("--train-steps", type=int, default=30)
    args = ap.parse_args(argv)
    T, B, H, I = args.steps, 16, 32, 4  # noqa: E741
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    y = (np.cumsum(x[:, :, 0], axis=0) / np.arange(1, T + 1)[:, None]).astype(np.float32)
    params = [(0.3 / np.sqrt(H) * rng.standard_normal((H, H))).astype(np.float32),
              (0.5 * rng.standard_normal((H, I))).astype(np.float32),
              np.zeros(H, np.float32),
              (0.1 * rng.standard_normal(H)).astype(np.float32)]
    kernel = build(T, B, H, I)
    losses = []
    lr = 0.05
    for it in range(args.train_steps):
        loss, *grads = kernel(x, y, *params)
        losses.append(float(loss))
        params = [p - lr * g for p, g in zip(params, grads)]
        if it % 10 == 0 or it == args.train_steps - 1:
            print(f"step {it:3d}  loss {float(loss):.5f}")
    print(f"Elman RNN, {T} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return losses


if __name__ == "__main__":
    main()
