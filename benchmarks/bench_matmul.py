"""float32 matmul on one thread: tecomp's CPU schedule (current and, with ``--old``, the
schedule before the register-tiled micro-kernel) against NumPy's BLAS, timed round-robin in
one process.

    python -m benchmarks.bench_matmul [--sizes 256 512 1024 2048] [--reps 7] [--old] [--no-pack]

The script re-runs itself in a child process whose environment lacks ``OPENBLAS_CORETYPE``
and ``OPENBLAS_L2_SIZE`` (so OpenBLAS picks its kernel for this CPU itself; the parent's
environment is left as it is), limits NumPy's BLAS to one thread with threadpoolctl and sets
``threads = 1`` on the tecomp kernels.  It prints the BLAS library threadpoolctl reports
(its kernel name: ``architecture``), then one row per size: median milliseconds and GFLOP/s
(``2 n^3`` flops a call).  Every result is checked against NumPy in float64 first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: variables that override OpenBLAS's own choice of kernel and blocking
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_CHILD = "--in-child"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _CHILD not in argv:
        env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_OVERRIDES}
        cmd = [sys.executable, "-m", "benchmarks.bench_matmul", *argv, _CHILD]
        root = str(Path(__file__).resolve().parent.parent)
        return subprocess.call(cmd, env=env, cwd=root)
    argv.remove(_CHILD)
    return run(argv)


def matmul_fns(n: int, schedules: dict, rng) -> dict:
    """One call of an ``n x n`` float32 matmul per schedule (one thread) and NumPy's, each
    checked against the float64 product."""
    import numpy as np

    import tecomp as tc
    from benchmarks.bench_cpu_child import rel_error
    from tecomp.codegen.llvm import build_kernel
    from tecomp.lowering_api import lower

    A, B = tc.placeholder((n, n), name="A"), tc.placeholder((n, n), name="B")
    k = tc.reduce_axis(n, name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    want = a.astype(np.float64) @ b
    fns = {}
    for name, sched in schedules.items():
        low = lower([C], [A, B])
        kern = build_kernel(low.func, inputs=[A, B], outputs=[C], hidden=low.constants,
                            single=True, schedule=sched)
        kern.threads = 1
        err = rel_error(kern(a, b), want)
        assert err < 1e-4, f"{name} at n={n}: error {err:.1e}"
        fns[name] = (lambda f=kern: f(a, b))
    fns["numpy"] = lambda: np.matmul(a, b)
    return fns


def run(argv: Sequence[str]) -> int:
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    from benchmarks.bench_cpu_child import round_robin
    from tecomp.codegen.target import Schedule
    from tecomp.passes.schedule.cpu import schedule_cpu
    from tecomp.pipeline import schedule_of

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sample-ms", type=float, default=30.0)
    ap.add_argument("--old", action="store_true",
                    help="also time the schedule without the micro-kernel (gemm=False)")
    ap.add_argument("--no-pack", action="store_true",
                    help="also time the schedule without panel packing (pack=False)")
    args = ap.parse_args(argv)
    threadpool_limits(1)
    for lib in threadpool_info():
        print(f"BLAS: {lib.get('internal_api')} {lib.get('version')} "
              f"kernel={lib.get('architecture')} threads={lib.get('num_threads')}")
    print("env overrides removed:", ", ".join(OPENBLAS_OVERRIDES))
    schedules = {"tecomp": schedule_of("llvm")}
    if args.old:
        def old(func, **options):
            return schedule_cpu(func, gemm=False, **options)
        schedules["tecomp old"] = Schedule(old, schedules["tecomp"].version + "-old")
    if args.no_pack:
        def unpacked(func, **options):
            return schedule_cpu(func, pack=False, **options)
        schedules["tecomp no-pack"] = Schedule(unpacked,
                                               schedules["tecomp"].version + "-no-pack")
    names = [*schedules, "numpy"]
    print("| n | " + " | ".join(f"{n} ms (GFLOP/s)" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    rng = np.random.default_rng(0)
    for n in args.sizes:
        fns = matmul_fns(n, schedules, rng)
        times = round_robin(fns, args.reps, args.sample_ms / 1e3)
        cells = [f"{times[m][0] * 1e3:.3g} ({2 * n ** 3 / times[m][0] / 1e9:.0f})"
                 for m in names]
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
