"""An Elman RNN over time: tecomp's scan against PyTorch and JAX, forward and gradient.

``h[t] = tanh(W h[t-1] + U x[t] + b)`` for a batch, with the loss ``sum(h * g)`` for a fixed
random ``g``; the gradient is with respect to ``W, U, b`` and ``x``.  Measured in one process,
interleaved round-robin (every contender once per round), medians in ms (float32):

* ``tecomp``           -- ``tc.scan`` forward; ``tc.gradient`` (the adjoint reverse scan), built
  for the LLVM target;
* ``tecomp k=10``      -- the same gradient with ``checkpoint=10`` (every 10th state stored, each
  segment recomputed): its time and the bytes of the buffers it allocates beside the plain
  one's (``--checkpoint`` sets k);
* ``torch loop``       -- a Python loop over ``torch.tanh(h @ W.T + x[t] @ U.T + b)``; backward
  by autograd;
* ``torch nn.RNN``     -- ``torch.nn.RNN(tanh)`` with the same weights (one bias set to zero);
* ``jax lax.scan``     -- ``jax.lax.scan`` under ``jax.jit``; ``jax.grad`` for the gradient.

PyTorch and JAX are optional (a missing peer prints "not installed").  Results are checked
against each other before timing.

    python benchmarks/bench_scan.py                       # batch 32, hidden 256, 100 steps
    python benchmarks/bench_scan.py --quick               # small, a few seconds
    python benchmarks/bench_scan.py --batch 32 --hidden 256 --steps 100 --rounds 15
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np

import tecomp as tc


def tecomp_rnn(T: int, B: int, H: int, I: int, checkpoint: int | None = None):  # noqa: E741
    X = tc.placeholder((T, B, I), name="x")
    W = tc.placeholder((H, H), name="W")
    U = tc.placeholder((H, I), name="U")
    b = tc.placeholder((H,), name="b")
    G = tc.placeholder((T, B, H), name="g")
    st = tc.placeholder((T, B, H), name="h_state")
    j, k = tc.reduce_axis(H, name="j"), tc.reduce_axis(I, name="k")
    xin = tc.compute((T, B, H), lambda t, n, i: tc.sum(U[i, k] * X[t, n, k], axis=k) + b[i],
                     name="xin")
    step = tc.compute((T, B, H), lambda t, n, i: tc.tanh(
        tc.sum(W[i, j] * st[t - 1, n, j], axis=j) + xin[t, n, i]), name="step")
    h0 = tc.compute((1, B, H), lambda s, n, i: tc.tanh(xin[0, n, i]), name="h0")
    h = tc.scan(h0, step, st, name="rnn")
    grads = tc.gradient(h, [X, W, U, b], G, checkpoint=checkpoint)
    fwd = tc.build(h, [X, W, U, b])
    bwd = tc.build(grads, [X, W, U, b, G])
    bwd.temp_bytes = tc.cost(grads, [X, W, U, b, G]).bytes  # the buffers the gradient allocates
    return fwd, bwd


def numpy_reference(x, W, U, b, g):
    T = x.shape[0]
    h = np.zeros(x.shape[:2] + (W.shape[0],), np.float64)
    h[0] = np.tanh(x[0] @ U.T + b)
    for t in range(1, T):
        h[t] = np.tanh(h[t - 1] @ W.T + x[t] @ U.T + b)
    return h


def torch_contenders(x, W, U, b, g) -> dict[str, tuple[Callable, Callable]]:
    try:
        import torch
    except ImportError:
        return {}
    tx, tW, tU, tb, tg = (torch.tensor(a) for a in (x, W, U, b, g))

    def loop(x, W, U, b):
        hs = [torch.tanh(x[0] @ U.T + b)]
        for t in range(1, x.shape[0]):
            hs.append(torch.tanh(hs[-1] @ W.T + x[t] @ U.T + b))
        return torch.stack(hs)

    def loop_fwd():
        with torch.no_grad():
            return loop(tx, tW, tU, tb)

    def loop_grad():
        ps = [a.clone().requires_grad_(True) for a in (tx, tW, tU, tb)]
        (loop(*ps) * tg).sum().backward()
        return [p.grad for p in ps]

    rnn = torch.nn.RNN(U.shape[1], W.shape[0], nonlinearity="tanh")
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(tU)
        rnn.weight_hh_l0.copy_(tW)
        rnn.bias_ih_l0.copy_(tb)
        rnn.bias_hh_l0.zero_()
    h0 = torch.zeros(1, x.shape[1], W.shape[0])

    def rnn_all(xx):  # step 0 of the scan has no recurrent term: h0 = 0 gives the same
        return rnn(xx, h0)[0]

    def rnn_fwd():
        with torch.no_grad():
            return rnn_all(tx)

    def rnn_grad():
        xx = tx.clone().requires_grad_(True)
        rnn.zero_grad()
        (rnn_all(xx) * tg).sum().backward()
        return [xx.grad, rnn.weight_hh_l0.grad, rnn.weight_ih_l0.grad, rnn.bias_ih_l0.grad]

    torch.set_num_threads(torch.get_num_threads())
    return {"torch loop": (loop_fwd, loop_grad), "torch nn.RNN": (rnn_fwd, rnn_grad)}


def jax_contenders(x, W, U, b, g) -> dict[str, tuple[Callable, Callable]]:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}

    def run(x, W, U, b):
        h0 = jnp.tanh(x[0] @ U.T + b)

        def step(h, xt):
            h = jnp.tanh(h @ W.T + xt @ U.T + b)
            return h, h

        _, hs = jax.lax.scan(step, h0, x[1:])
        return jnp.concatenate([h0[None], hs])

    fwd = jax.jit(run)
    grad = jax.jit(jax.grad(lambda *a: jnp.sum(run(*a) * g), argnums=(0, 1, 2, 3)))
    args = [jnp.asarray(a) for a in (x, W, U, b)]
    return {"jax lax.scan": (lambda: fwd(*args).block_until_ready(),
                             lambda: [r.block_until_ready() for r in grad(*args)])}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--inputs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--checkpoint", type=int, default=10,
                    help="k of the checkpointed tecomp gradient timed beside the plain one")
    ap.add_argument("--quick", action="store_true", help="batch 4, hidden 32, 20 steps")
    args = ap.parse_args(argv)
    if args.quick:
        args.batch, args.hidden, args.inputs, args.steps, args.rounds = 4, 32, 8, 20, 5
    T, B, H, I = args.steps, args.batch, args.hidden, args.inputs  # noqa: E741
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    W = (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)
    U = (rng.standard_normal((H, I)) / np.sqrt(I)).astype(np.float32)
    b = (0.1 * rng.standard_normal(H)).astype(np.float32)
    g = rng.standard_normal((T, B, H)).astype(np.float32)
    t0 = time.perf_counter()
    fwd, bwd = tecomp_rnn(T, B, H, I)
    print(f"tecomp build (forward + gradient): {time.perf_counter() - t0:.2f} s")
    ref = numpy_reference(x, W, U, b, g)
    got = fwd(x, W, U, b)
    assert np.max(np.abs(got - ref)) < 1e-3, "tecomp forward disagrees with NumPy"
    _, ckpt = tecomp_rnn(T, B, H, I, checkpoint=args.checkpoint)
    contenders = {"tecomp": (lambda: fwd(x, W, U, b), lambda: bwd(x, W, U, b, g)),
                  f"tecomp k={args.checkpoint}": (lambda: fwd(x, W, U, b),
                                                  lambda: ckpt(x, W, U, b, g))}
    tgrads = bwd(x, W, U, b, g)
    for a, c in zip(tgrads, ckpt(x, W, U, b, g)):
        assert np.max(np.abs(a - c)) <= 1e-4 * max(1.0, np.max(np.abs(a))), (
            "the checkpointed gradient disagrees")
    for peers in (torch_contenders(x, W, U, b, g), jax_contenders(x, W, U, b, g)):
        for name, (f, gr) in peers.items():
            out = np.asarray(f())
            assert np.max(np.abs(out - ref)) < 1e-3, f"{name} forward disagrees"
            for a, c in zip(tgrads, gr()):
                c = np.asarray(c)
                assert np.max(np.abs(a - c)) <= 1e-3 * max(1.0, np.max(np.abs(c))), (
                    f"{name} gradient disagrees")
            contenders[name] = (f, gr)
    for peer in ("torch", "jax"):
        if not any(n.startswith(peer) for n in contenders):
            print(f"{peer}: not installed")
    times: dict[str, dict[str, list[float]]] = {n: {"forward": [], "gradient": []}
                                                for n in contenders}
    for _ in range(args.rounds):
        for name, (f, gr) in contenders.items():
            for kind, fn in (("forward", f), ("gradient", gr)):
                s = time.perf_counter()
                fn()
                times[name][kind].append(1e3 * (time.perf_counter() - s))
    med = {n: {k: statistics.median(v) for k, v in d.items()} for n, d in times.items()}
    print(f"Elman RNN  batch {B}  hidden {H}  inputs {I}  steps {T}  float32  "
          f"(median ms of {args.rounds} interleaved rounds)")
    best = {k: min(m[k] for m in med.values()) for k in ("forward", "gradient")}
    for name, m in med.items():
        print(f"  {name:14s}  forward {m['forward']:8.2f} ({m['forward'] / best['forward']:.2f}x "
              f"best)   gradient {m['gradient']:8.2f} "
              f"({m['gradient'] / best['gradient']:.2f}x best)")
    mib = 1 / (1 << 20)
    print(f"  tecomp gradient, checkpoint=None vs checkpoint={args.checkpoint}: "
          f"{med['tecomp']['gradient']:.2f} vs "
          f"{med[f'tecomp k={args.checkpoint}']['gradient']:.2f} ms; buffers allocated "
          f"(all live at once: the peak) {bwd.temp_bytes * mib:.2f} vs "
          f"{ckpt.temp_bytes * mib:.2f} MiB")
    return med


if __name__ == "__main__":
    main()
