"""Real butterfly DCT-II against SciPy, a dense matmul and lazylinop (one thread, float64).

For each ``n`` (a power of two) and a batch of columns, prints the median time of
``scipy.fft.dct(x, 2, norm="ortho", axis=0)``, of ``C @ x`` with the dense DCT matrix, of
``tc.ops.dct`` built with ``tc.build`` for each fusion level (``fuse=auto`` is the default,
adjacent factors in pairs, triples at the ends for ``n >= 1024``; ``fuse=1`` is the chain of
the paper, ``L`` factors; ``fuse=2, 3`` multiply up to 2 or 3 adjacent factors first) and,
when lazylinop is installed, of:

* ``lazylinop-butterfly``: ``lazylinop.butterfly.dct(n)``, lazylinop's real butterfly chain
  (the same ``L`` Kronecker-sparse factors, its default ``ksm`` backend);
* ``lazylinop-opt``: the same chain after ``lazylinop.butterfly.optimize`` (its optimiser
  fuses adjacent factors where its own timings say it pays), only with
  ``--lazylinop-optimize DIR``: the optimiser times candidate fusions on this machine (minutes
  per size) and keeps what it measured in ``DIR`` (its ``wisdom.csv``/``knowledge.csv``), so
  later runs reuse it;
* ``lazylinop-compose``: ``lazylinop.signal.dct(n, backend="lazylinop")``, Makhoul's algorithm
  composed from lazylinop operators around its FFT (an FFT-based DCT, not a butterfly).

Runs are interleaved round-robin (``--order interleaved``, the default) so that every method
sees the same machine load, the order rotated by one method each round: a method's time
depends on the one that ran just before it (the caches and heap it leaves; tecomp's DCT at
n = 1024 took 0.39 ms run back to back, 0.50 ms right after lazylinop's FFT-based DCT and
0.56 ms right after the dense matmul, while SciPy's stayed at 0.47), so a fixed order would
favour some methods.  ``--order grouped`` runs each method's repeats back to back
(warm caches).  The ratios in the last columns are taken within one run.

    python benchmarks/bench_butterfly.py [--sizes 256 1024 4096] [--batch 128] [--repeat 15]
        [--fuse auto 1 2 3] [--order interleaved|grouped] [--lazylinop-optimize DIR]

``--retain-heap`` re-runs the script with glibc told to keep freed memory (``GLIBC_TUNABLES``
mmap/trim thresholds).  The kernels keep their intermediate buffers between calls; every
method still allocates its output per call (1 MiB at n = 1024), which glibc returns to the
system at ``free``, so each call page-faults it afresh.  The option shows what reusing that
memory would give.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import functools  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import tecomp as tc  # noqa: E402

_HEAP = "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296"


def _lazylinop_ops(n: int, batch: int = 128, wisdom: str | None = None) -> dict:
    """lazylinop's DCT operators of size n (see the module docstring), or {} when it is not
    installed; ``lazylinop-opt`` only with a ``wisdom`` directory."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import lazylinop.butterfly as lb
            import lazylinop.signal as ls
    except Exception:  # not installed, or a missing optional dependency of it
        return {}
    ops = {"lazylinop-butterfly": lb.dct(n)}
    if wisdom is not None:
        _, B, PR = lb.dct(n, 2, output="LBPR")  # DCT-II has no left factor: C = B (P R)
        cwd = os.getcwd()
        os.makedirs(wisdom, exist_ok=True)
        os.chdir(wisdom)  # the optimiser reads and writes its timings in the working directory
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ops["lazylinop-opt"] = lb.optimize(B, {"batch_size": batch}, verbose=False) @ PR
        finally:
            os.chdir(cwd)
    ops["lazylinop-compose"] = ls.dct(n, backend="lazylinop")
    return ops


def _time(methods: dict, x: np.ndarray, repeat: int, order: str) -> dict[str, float]:
    """Median milliseconds per method, interleaved round-robin (the order rotated by one
    method each round, so that every method follows every other equally often) or grouped
    per method."""
    times: dict[str, list[float]] = {m: [] for m in methods}
    names = list(methods)
    rounds = [names[r % len(names):] + names[:r % len(names)] for r in range(repeat)] \
        if order == "interleaved" else [[m] * repeat for m in names]
    for names in rounds:
        for m in names:
            t0 = time.perf_counter()
            methods[m](x)
            times[m].append(time.perf_counter() - t0)
    return {m: statistics.median(t) * 1e3 for m, t in times.items()}


def run(sizes: list[int], batch: int, repeat: int, fuses: list, order: str = "interleaved",
        wisdom: str | None = None) -> None:
    import scipy.fft as sfft

    if not _lazylinop_ops(4):
        print("lazylinop: not installed")
    print(f"{'n':>6} {'method':>20} {'median ms':>10} {'/scipy':>8} {'max err':>9}")
    rng = np.random.default_rng(0)
    for n in sizes:
        x = rng.standard_normal((n, batch))
        ref = sfft.dct(x, 2, norm="ortho", axis=0)
        dense = sfft.dct(np.eye(n), 2, norm="ortho", axis=0)
        methods = {"scipy": functools.partial(sfft.dct, type=2, norm="ortho", axis=0),
                   "dense": dense.__matmul__}
        for name, op in _lazylinop_ops(n, batch, wisdom).items():
            methods[name] = op.__matmul__
        X = tc.placeholder((n, batch), name="X", dtype="float64")
        for f in fuses:
            k = tc.build(tc.ops.dct(X, fuse=f), [X])
            k.threads = 1
            methods[f"tecomp fuse={f}"] = k
        errs = {m: float(np.max(np.abs(np.asarray(fn(x)) - ref))) for m, fn in methods.items()}
        med = _time(methods, x, repeat, order)
        for m in methods:
            print(f"{n:>6} {m:>20} {med[m]:>10.3f} {med[m] / med['scipy']:>8.2f} "
                  f"{errs[m]:>9.1e}")
        ours = [m for m in med if m.startswith("tecomp")]
        for m in dict.fromkeys(["tecomp fuse=auto", min(ours, key=med.__getitem__)]):
            if m not in med:
                continue
            t = med[m]
            lazy = ", ".join(f"{t / v:.2f}x {k}" for k, v in med.items() if k.startswith("lazy"))
            print(f"{n:>6} {m} {t:.3f} ms: {t / med['scipy']:.2f}x scipy, "
                  f"{t / med['dense']:.2f}x dense" + (f", {lazy}" if lazy else ""))


def _fuse_arg(v: str) -> int | str:
    return v if v == "auto" else int(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--fuse", type=_fuse_arg, nargs="+", default=["auto", 1, 2, 3])
    ap.add_argument("--order", choices=["interleaved", "grouped"], default="interleaved")
    ap.add_argument("--lazylinop-optimize", metavar="DIR", default=None,
                    help="also time lazylinop's optimised chain, its timings kept in DIR")
    ap.add_argument("--retain-heap", action="store_true",
                    help="re-run with glibc keeping freed memory (see the module docstring)")
    args = ap.parse_args()
    if args.retain_heap and os.environ.get("GLIBC_TUNABLES") != _HEAP:
        env = dict(os.environ, GLIBC_TUNABLES=_HEAP)
        argv = [a for a in sys.argv if a != "--retain-heap"]
        print("(glibc keeps freed memory in this run)")
        sys.exit(subprocess.call([sys.executable, *argv], env=env))
    wisdom = None if args.lazylinop_optimize is None else \
        os.path.abspath(args.lazylinop_optimize)
    run(args.sizes, args.batch, args.repeat, args.fuse, args.order, wisdom)


if __name__ == "__main__":
    main()
