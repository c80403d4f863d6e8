"""Per-call overhead of tc.interop's wrappers against a direct kernel call.

One tecomp program (a "swish dense" layer, ``y = z * sigmoid(z)``, ``z = x W^T``, float32,
W of shape (32, 16)) is called on the same data in several ways, interleaved round-robin
with the order rotated each round, in one process; each figure is the median over rounds of
the mean time of a block of calls.  The overhead of a wrapper is its time minus the direct
kernel call's in the same run.

* ``kernel``: ``tc.build(...)(x, w)`` on NumPy arrays (the baseline);
* ``torch eager``: ``tc.interop.torch_function`` called on CPU tensors (the custom operator
  dispatch, DLPack views in, ``torch.from_numpy`` out), under ``torch.no_grad``;
* ``torch compiled``: the layer inside ``torch.compile(fullgraph=True)`` (Inductor);
* ``jax ffi (jit)`` / ``jax callback (jit)``: ``tc.interop.jax_function`` under ``jax.jit``,
  through the XLA FFI handler and through ``jax.pure_callback``, results waited for;
* ``pure PyTorch (eager)`` / ``pure JAX (jit)``: the same layer written in the framework, for
  the framework's own per-call cost.

    python benchmarks/bench_interop.py --rows 1 256 --rounds 15 --calls 200
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import numpy as np

import tecomp as tc

FEATURES, HIDDEN = 16, 32


def layer() -> tuple[Any, Any, Any]:
    n = tc.var("n")
    X = tc.placeholder((n, FEATURES), name="X")
    W = tc.placeholder((HIDDEN, FEATURES), name="W")
    Z = tc.ops.dense(X, W)
    return X, W, tc.compute(Z.shape, lambda i, j: Z[i, j] * tc.sigmoid(Z[i, j]), name="swish")


def variants(rows: int, rng: np.random.Generator) -> dict[str, Callable[[], Any]]:
    X, W, Y = layer()
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    w = rng.standard_normal((HIDDEN, FEATURES)).astype(np.float32)
    kernel = tc.build(Y, [X, W])
    want = kernel(x, w)
    out: dict[str, Callable[[], Any]] = {"kernel": lambda: kernel(x, w)}
    try:
        import torch
    except ModuleNotFoundError:
        print("PyTorch not installed: no torch rows")
    else:
        f = tc.interop.torch_function(Y, [X, W])
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)
        compiled = torch.compile(lambda a, b: f(a, b), fullgraph=True)
        for fn in (f, compiled):
            with torch.no_grad():
                np.testing.assert_allclose(fn(xt, wt).numpy(), want, rtol=1e-6)

        def eager() -> Any:
            with torch.no_grad():
                return f(xt, wt)

        def comp() -> Any:
            with torch.no_grad():
                return compiled(xt, wt)

        def pure() -> Any:
            with torch.no_grad():
                z = xt @ wt.T
                return z * torch.sigmoid(z)

        out["torch eager"] = eager
        out["torch compiled"] = comp
        out["pure PyTorch (eager)"] = pure
    try:
        import jax
    except ModuleNotFoundError:
        print("JAX not installed: no jax rows")
    else:
        xj, wj = jax.numpy.asarray(x), jax.numpy.asarray(w)
        for via in ("ffi", "callback"):
            g = jax.jit(tc.interop.jax_function(Y, [X, W], via=via))
            np.testing.assert_allclose(np.asarray(g(xj, wj)), want, rtol=1e-6)
            out[f"jax {via} (jit)"] = _waited(g, xj, wj)
        ref = jax.jit(lambda a, b: (a @ b.T) * jax.nn.sigmoid(a @ b.T))
        out["pure JAX (jit)"] = lambda: ref(xj, wj).block_until_ready()
    return out


def _waited(fn: Any, *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args).block_until_ready()


def measure(fns: dict[str, Callable[[], Any]], rounds: int, calls: int) -> dict[str, float]:
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in names}
    for name in names:  # warm up
        for _ in range(calls // 4 + 1):
            fns[name]()
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 256])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    for rows in args.rows:
        got = measure(variants(rows, rng), args.rounds, args.calls)
        base = got["kernel"]
        print(f"\nx of shape ({rows}, {FEATURES}), W ({HIDDEN}, {FEATURES}), float32")
        print("| call | us per call | overhead vs kernel (us) |")
        print("|------|-------------|-------------------------|")
        for name, t in got.items():
            over = "-" if name == "kernel" else f"{(t - base) * 1e6:+.1f}"
            print(f"| {name} | {t * 1e6:.1f} | {over} |")


if __name__ == "__main__":
    main()
