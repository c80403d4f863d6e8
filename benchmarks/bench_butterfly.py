"""Real butterfly DCT-II against SciPy, a dense matmul and lazylinop (one thread, float64).

For each ``n`` (a power of two) and a batch of columns, prints the median time of
``scipy.fft.dct(x, 2, norm="ortho", axis=0)``, of ``C @ x`` with the dense DCT matrix, of
lazylinop's butterfly DCT (``lazylinop.butterfly.dct``) and its composed operator
(``lazylinop.signal.dct(n, backend="lazylinop")``) when lazylinop is installed, and of
``tc.ops.dct`` built with ``tc.build`` for each fusion level (``fuse=1`` is the chain of the
paper, ``L`` factors; ``fuse=2, 3`` multiply adjacent factors first).  Runs are interleaved
round-robin so that every method sees the same machine load; the ratios in the last columns
are taken within one run.

    python benchmarks/bench_butterfly.py [--sizes 256 1024 4096] [--batch 128] [--repeat 15]

``--retain-heap`` re-runs the script with glibc told to keep freed memory (``GLIBC_TUNABLES``
mmap/trim thresholds): tecomp kernels ``malloc`` their intermediate stages on every call, and
glibc returns large blocks to the system at ``free``, so each call page-faults its
intermediates afresh.  The option shows what reusing the buffers would give.
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


def _lazylinop_ops(n: int) -> dict:
    """lazylinop's DCT operators of size n, or {} when it is not installed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import lazylinop.butterfly as lb
            import lazylinop.signal as ls
    except Exception:  # not installed, or a missing optional dependency of it
        return {}
    return {"lazylinop-butterfly": lb.dct(n), "lazylinop-compose": ls.dct(n, backend="lazylinop")}


def run(sizes: list[int], batch: int, repeat: int, fuses: list[int]) -> None:
    import scipy.fft as sfft

    have_lazy = bool(_lazylinop_ops(4))
    if not have_lazy:
        print("lazylinop: not installed")
    header = f"{'n':>6} {'method':>20} {'median ms':>10} {'/scipy':>8} {'max err':>9}"
    print(header)
    rng = np.random.default_rng(0)
    for n in sizes:
        x = rng.standard_normal((n, batch))
        ref = sfft.dct(x, 2, norm="ortho", axis=0)
        dense = sfft.dct(np.eye(n), 2, norm="ortho", axis=0)
        methods = {"scipy": functools.partial(sfft.dct, type=2, norm="ortho", axis=0),
                   "dense": dense.__matmul__}
        for name, op in _lazylinop_ops(n).items():
            methods[name] = op.__matmul__
        X = tc.placeholder((n, batch), name="X", dtype="float64")
        for f in fuses:
            k = tc.build(tc.ops.dct(X, fuse=f), [X])
            k.threads = 1
            methods[f"tecomp fuse={f}"] = k
        errs = {m: float(np.max(np.abs(np.asarray(fn(x)) - ref))) for m, fn in methods.items()}
        times: dict[str, list[float]] = {m: [] for m in methods}
        for _ in range(repeat):
            for m, fn in methods.items():
                t0 = time.perf_counter()
                fn(x)
                times[m].append(time.perf_counter() - t0)
        med = {m: statistics.median(t) * 1e3 for m, t in times.items()}
        for m in methods:
            print(f"{n:>6} {m:>20} {med[m]:>10.3f} {med[m] / med['scipy']:>8.2f} "
                  f"{errs[m]:>9.1e}")
        best = min(v for m, v in med.items() if m.startswith("tecomp"))
        lazy = [v for m, v in med.items() if m.startswith("lazylinop")]
        print(f"{n:>6} tecomp best {best:.3f} ms: {best / med['scipy']:.2f}x scipy, "
              f"{best / med['dense']:.2f}x dense"
              + (f", {best / min(lazy):.2f}x lazylinop best" if lazy else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--fuse", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--retain-heap", action="store_true",
                    help="re-run with glibc keeping freed memory (see the module docstring)")
    args = ap.parse_args()
    if args.retain_heap and os.environ.get("GLIBC_TUNABLES") != _HEAP:
        env = dict(os.environ, GLIBC_TUNABLES=_HEAP)
        argv = [a for a in sys.argv if a != "--retain-heap"]
        print("(glibc keeps freed memory in this run)")
        sys.exit(subprocess.call([sys.executable, *argv], env=env))
    run(args.sizes, args.batch, args.repeat, args.fuse)


if __name__ == "__main__":
    main()
