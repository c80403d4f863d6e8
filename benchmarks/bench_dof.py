"""Laplacians of tanh MLPs: tecomp DOF against tecomp's Hessian method, JAX and folx.

For each configuration (input size N, width W, batch B; four tanh layers and a linear readout,
float64) this measures, in a process of its own and interleaved round by round (the order
rotating from round to round; medians and half the interquartile range):

* ``tecomp dof``      -- ``tc.laplacian(u, x)`` (forward propagation of the operator), built;
* ``tecomp hessian``  -- ``tc.laplacian(u, x, method="hessian")`` (forward over reverse), built;
* ``jax hessian``     -- ``vmap(trace(jax.hessian(u)))``, jitted;
* ``jax dof (hand)``  -- the DOF recurrences written by hand in jax.numpy, jitted;
* ``folx``            -- ``folx.forward_laplacian(u)`` (vmapped, jitted).

It prints medians (ms), each time relative to tecomp DOF, the peak memory of one call and
tecomp's static cost: flops of DOF over flops of the Hessian method for the Laplacian, a dense
indefinite ``A`` (rank N) and a low-rank ``A`` (rank N/10), and the bytes of intermediate
buffers.  Peak memory is the resident-memory growth of one warm call (``VmHWM`` reset through
``/proc/self/clear_refs``; Linux only); a tecomp kernel keeps its intermediate buffers between
calls (allocated on the first), so for tecomp that growth plus the buffers it holds is shown.

JAX and folx are optional (``pip install "jax[cpu]" folx``, in a benchmark environment); a
missing one prints "not installed".

    python benchmarks/bench_dof.py                  # the three configurations of issue 8
    python benchmarks/bench_dof.py --quick          # a small configuration, a few seconds
    python benchmarks/bench_dof.py --config 100,512,32 --rounds 21   # one configuration
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np

import tecomp as tc

CONFIGS = [(100, 256, 64), (100, 512, 32), (1000, 256, 8)]
DEPTH = 4
F64 = "float64"


def make_params(n: int, width: int, rng: np.random.Generator) -> list[np.ndarray]:
    out, nin = [], n
    for _ in range(DEPTH):
        out += [rng.standard_normal((width, nin)) / np.sqrt(nin), 0.1 * rng.standard_normal(width)]
        nin = width
    return out + [rng.standard_normal(width) / np.sqrt(width)]


def tecomp_mlp(n: int, width: int, batch: int) -> tuple[tc.Tensor, tc.Tensor, list[tc.Tensor]]:
    x = tc.placeholder((batch, n), name="x", dtype=F64)
    h, nin, params = x, n, []
    for layer in range(DEPTH):
        W = tc.placeholder((width, nin), name=f"W{layer}", dtype=F64)
        c = tc.placeholder((width,), name=f"c{layer}", dtype=F64)
        k = tc.reduce_axis(nin, f"k{layer}")
        h = tc.compute((batch, width), lambda b, j, h=h, W=W, c=c, k=k: tc.tanh(
            tc.sum(W[j, k] * h[b, k], axis=k) + c[j]), name=f"h{layer}")
        params += [W, c]
        nin = width
    w = tc.placeholder((width,), name="w", dtype=F64)
    k = tc.reduce_axis(width, "ko")
    u = tc.compute((batch,), lambda b: tc.sum(w[k] * h[b, k], axis=k), name="u")
    return x, u, params + [w]


def jax_methods(params: list[np.ndarray]) -> dict[str, Callable]:
    """The JAX and folx Laplacians, jitted (empty when JAX is missing)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("  jax: not installed")
        return {}
    jax.config.update("jax_enable_x64", True)
    ps = [jnp.asarray(p) for p in params]

    def u(x):
        h = x
        for layer in range(DEPTH):
            h = jnp.tanh(ps[2 * layer] @ h + ps[2 * layer + 1])
        return ps[-1] @ h

    def hess(xs):
        return jax.vmap(lambda x: jnp.trace(jax.hessian(u)(x)))(xs)

    def dof(xs):  # value, L grad (L = I: the Jacobian, batch x width x N), operator
        def act(z, s, gram):
            h = jnp.tanh(z)
            f1 = 1.0 - h * h
            return h, f1, f1 * s - 2.0 * h * f1 * gram
        G = ps[0]                                      # the first layer's, batch-invariant
        h, f1, sh = act(xs @ ps[0].T + ps[1], 0.0, jnp.sum(G * G, axis=1))
        Gh = f1[..., None] * G
        for layer in range(1, DEPTH):
            W = ps[2 * layer]
            G = jnp.einsum("jn,bnk->bjk", W, Gh)
            h, f1, sh = act(h @ W.T + ps[2 * layer + 1], sh @ W.T, jnp.sum(G * G, axis=-1))
            Gh = f1[..., None] * G
        return sh @ ps[-1]

    out = {"jax hessian": jax.jit(hess), "jax dof (hand)": jax.jit(dof)}
    try:
        import folx
    except ImportError:
        print("  folx: not installed")
        return out
    lap = folx.forward_laplacian(u, sparsity_threshold=0)
    out["folx"] = jax.jit(jax.vmap(lambda x: lap(x).laplacian))
    return out


def _rss_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_growth_mib(call: Callable[[], object]) -> float | None:
    """Peak RSS growth of one call (Linux: reset VmHWM, run, read it back)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    before = _rss_kib("VmRSS")
    call()
    peak = _rss_kib("VmHWM")
    return None if before is None or peak is None else (peak - before) / 1024


def static_ratios(x: tc.Tensor, u: tc.Tensor, n: int, rng: np.random.Generator) -> str:
    parts = []
    M = rng.standard_normal((n, n))
    lam = np.where(np.arange(n) % 2 == 0, 1.0, -1.0) * rng.uniform(0.5, 2.0, n)
    Q, _ = np.linalg.qr(M)
    r = max(1, n // 10)
    R = rng.standard_normal((r, n))
    for label, A in (("laplacian", np.eye(n)), ("dense", Q @ np.diag(lam) @ Q.T),
                     (f"rank {r}", R.T @ R)):
        dof = tc.cost([tc.diff_operator(u, x, A)]).flops
        hess = tc.cost([tc.diff_operator(u, x, A, method="hessian")]).flops
        parts.append(f"{label} {dof / hess:.3f}")
    return "static flops dof/hessian: " + ", ".join(parts)


def run_config(n: int, width: int, batch: int, rounds: int, static: bool) -> None:
    print(f"\nN={n} W={width} batch={batch} (tanh MLP depth {DEPTH}, float64)")
    rng = np.random.default_rng(0)
    params = make_params(n, width, rng)
    xv = rng.uniform(-1.0, 1.0, (batch, n))
    x, u, ph = tecomp_mlp(n, width, batch)
    calls: dict[str, Callable[[], object]] = {}
    held: dict[str, float] = {}                     # MiB a kernel keeps between calls
    results: dict[str, np.ndarray] = {}
    for method in ("dof", "hessian"):
        t0 = time.perf_counter()
        lap = tc.laplacian(u, x, method=method)
        kernel = tc.build([lap], [x] + ph)
        print(f"  tecomp {method}: build {time.perf_counter() - t0:.1f} s, "
              f"intermediate buffers {kernel.cost.bytes / 2**20:.1f} MiB, "
              f"flops {kernel.cost.flops:.3g}")
        calls[f"tecomp {method}"] = lambda k=kernel: k(xv, *params)
        held[f"tecomp {method}"] = kernel.cost.bytes / 2**20
    for name, fn in jax_methods(params).items():
        import jax

        calls[name] = lambda fn=fn: jax.block_until_ready(fn(xv))
    for name, call in calls.items():
        out = call()
        results[name] = np.asarray(out[0] if isinstance(out, tuple) else out)
    ref = results["tecomp dof"]
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for r in range(rounds):  # round-robin, the order rotating from round to round
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["tecomp dof"])
    for name in calls:
        med = statistics.median(times[name])
        q = statistics.quantiles(times[name], n=4) if rounds >= 2 else [med, med, med]
        err = np.abs(results[name] - ref).max() / (np.abs(ref).max() + 1e-300)
        mem = peak_growth_mib(calls[name])
        mem_s = "n/a" if mem is None else f"{max(mem, 0.0) + held.get(name, 0.0):.1f} MiB"
        print(f"  {name:16s} {med * 1e3:9.1f} ms ±{(q[2] - q[0]) / 2 / med:4.0%}  "
              f"{med / base:6.2f}x dof   "
              f"peak {mem_s:>10s}   rel. diff {err:.1e}")
    if static:
        print("  " + static_ratios(x, u, n, rng))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small configuration")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-static", action="store_true", help="skip the static cost ratios")
    ap.add_argument("--config", metavar="N,W,B", help="one configuration: input size, width, "
                    "batch (run in this process)")
    args = ap.parse_args()
    if args.config:
        n, width, batch = (int(v) for v in args.config.split(","))
        run_config(n, width, batch, 3 if args.quick else args.rounds, not args.no_static)
        return
    import subprocess
    import sys

    try:  # the CPU, its vector width and caches
        from benchmarks.bench_cpu import machine
    except ImportError:  # run as a script from benchmarks/
        from bench_cpu import machine

    print(f"machine: {machine()}", flush=True)
    for n, width, batch in [(20, 32, 16)] if args.quick else CONFIGS:  # a process each
        cmd = [sys.executable, __file__, "--config", f"{n},{width},{batch}",
               "--rounds", str(3 if args.quick else args.rounds)]
        subprocess.run(cmd + (["--no-static"] if args.no_static else []), check=False)


if __name__ == "__main__":
    main()
