"""Soak test: many random programs through the compiler, failures counted and reported.

    python benchmarks/soak.py --programs 10000 --gradients 1000 [--seed 0] [--opt-level 1]
    python benchmarks/soak.py --programs 100000 --gradients 10000 --seed 0 --jobs 16
    python benchmarks/soak.py --kernels 10000 --calls 1000000   # memory: builds, then calls
    python benchmarks/soak.py --kernels 1000 --cache-size 64    # the same, smaller bound
    python benchmarks/soak.py --bounds-cost      # build-time cost of the static bounds proofs

Draws programs from the hypothesis strategies of the reliability tests
(``tests/reliability/strategies.py``) and checks, for each:

* JIT == reference evaluator (inputs unwritten, outputs not aliasing inputs); every
  ``--o3-every``-th program goes through ``tc.build`` itself (O3), the others through the same
  pipeline compiled at ``--opt-level`` (compiling at O3 dominates the run time otherwise);
* ``tc.optimize`` preserves the evaluator's results;
* every ``--oob-every``-th program with a gather, run again with one gather index out of
  range (the same kernel): it raises ``IndexBoundsError`` exactly where the evaluator raises,
  naming the same tensor, else both agree;
* for ``--gradients`` smooth float64 programs, ``tc.gradient`` (naive and optimised,
  alternating) against central finite differences, and the optimised gradient compiled (same
  pipeline, bounds proofs included) against the evaluator.

Every compiled program goes through the bounds pass, so an affine access that leaves its
tensor fails the build (``LoweringError``) instead of reading foreign memory.

Each run (each job) uses a persistent cache of its own in a temporary directory, so a rerun
compiles everything again.  The evaluator runs once per program (its results serve the JIT
and ``tc.optimize`` checks)
and the out-of-range check reuses the JIT check's kernel.  ``--jobs n`` splits the programs
over ``n`` processes (each its own hypothesis seed, derived from ``--seed``; the same
``--seed`` and ``--jobs`` draw the same programs) and adds up their counts.

Prints programs per second, how many of the programs are distinct (hypothesis repeats some;
a repeat still gets fresh data, but its kernel comes from the in-memory cache), counts per
check and the first program of each distinct failure (by exception type and first message
line).  Exit status 1 when anything failed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "reliability"))

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tecomp as tc  # noqa: E402
from tecomp.codegen.kernel import Kernel  # noqa: E402
from tecomp.codegen.llvm import compile_function  # noqa: E402
from tecomp.passes.bounds_check import add_bounds_checks  # noqa: E402
from tecomp.pipeline import schedule_of  # noqa: E402


def build_at(prog, level: int) -> Kernel:
    """``tc.build`` with the LLVM pipeline at ``level`` (same lowering and bounds checks)."""
    outs = list(prog.outputs)
    lowered = tc.lower(outs, prog.inputs)
    func, bounds = add_bounds_checks(lowered.func)
    entry = compile_function(func, speed_level=level, schedule=schedule_of("llvm"))
    return Kernel(func, entry, inputs=prog.inputs, outputs=outs, hidden=lowered.constants,
                  single=False, bounds=bounds)


class Tally:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.failures: dict[str, tuple[str, str]] = {}
        self.failed: dict[str, int] = {}
        self.distinct: set[str] = set()  # digests of the forward programs' text
        self.distinct_gradients: set[str] = set()
        self.scans = [0, 0]  # programs holding a tc.scan: forward, for gradients

    def run(self, check: str, prog, fn) -> None:
        self.counts[check] = self.counts.get(check, 0) + 1
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - every failure is counted and reported
            self.failed[check] = self.failed.get(check, 0) + 1
            key = f"{check}: {type(err).__name__}: {str(err).splitlines()[0][:100]}"
            self.failures.setdefault(key, (prog.text, traceback.format_exc()[-2000:]))


def _has_scan(prog) -> bool:
    from tecomp.functor import topo_order
    from tecomp.scan_op import ScanOp

    return any(isinstance(t.op, ScanOp) for t in topo_order(prog.outputs))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def compile_memory(count: int, calls: int = 0) -> int:
    """Build ``count`` distinct kernels through ``tc.build``, then make ``calls`` kernel calls
    (a few kernels, several shapes); print the RSS as it goes and its growth after warm-up.

    The persistent cache goes to a temporary directory (removed at the end), so that the run
    neither reads the user's cache nor fills it with ``count`` throw-away entries."""
    import tempfile

    from tecomp.codegen.cache import KERNELS
    from tecomp.codegen.disk_cache import set_default_cache
    from tecomp.proof_cache import PROVEN

    tmp = tempfile.TemporaryDirectory(prefix="tecomp-soak-")
    old = set_default_cache(tmp.name)
    n = tc.var("n")
    A = tc.placeholder((n, 16), name="A")
    k = tc.reduce_axis(16, name="k")
    a = np.ones((8, 16), np.float32)
    start = _rss_mb()
    t0 = time.perf_counter()
    marks: list[float] = []

    def report(what: str, done: int, total: int) -> None:
        rss = _rss_mb()
        marks.append(rss)
        print(f"  {done:8d} {what}: RSS {rss:7.1f} MiB (+{rss - start:.1f}), kernels cached "
              f"{len(KERNELS)} (max {KERNELS.maxsize}), proofs {len(PROVEN)} "
              f"(max {PROVEN.maxsize}), {time.perf_counter() - t0:.0f} s", flush=True)

    try:
        for c in range(count):
            S = tc.compute((n,), lambda i, c=c: tc.sum(tc.sin(A[i, k] * (1.0 + c * 1e-3)),
                                                       axis=k), name="S")
            tc.build(S, [A])(a)
            if (c + 1) % max(1, count // 10) == 0:
                report("kernels", c + 1, count)
        if count:
            warm = marks[min(len(marks) - 1, 2)]
            print(f"  build growth after warm-up (30% mark to end): {marks[-1] - warm:+.1f} MiB")
        if calls:
            marks.clear()
            kernels = []
            for scale in (1.0, 2.0, 3.0, 4.0):
                S = tc.compute((n,), lambda i, s=scale: tc.sum(A[i, k] * s, axis=k), name="C")
                kernels.append(tc.build(S, [A]))
            arrays = [np.ones((m, 16), np.float32) for m in (1, 7, 64, 300)]
            for c in range(calls):
                kernels[c % 4](arrays[(c // 4) % 4])
                if (c + 1) % max(1, calls // 10) == 0:
                    report("calls", c + 1, calls)
            warm = marks[min(len(marks) - 1, 2)]
            print(f"  call growth after warm-up (30% mark to end): {marks[-1] - warm:+.1f} MiB")
    finally:
        set_default_cache(old)
        tmp.cleanup()
    return 0


def bounds_cost(repeat: int = 9) -> int:
    """Median time of :func:`add_bounds_checks` (the static proofs) on conv2d gradients."""
    for label, symbolic in (("constant sizes", False), ("symbolic n, h, w", True)):
        n, h, w = (tc.var("n"), tc.var("h"), tc.var("w")) if symbolic else (8, 32, 32)
        X = tc.placeholder((n, 16, h, w), name="X")
        W = tc.placeholder((32, 16, 3, 3), name="W")
        for stride, pad in ((1, 1), (2, 1)):
            Y = tc.ops.conv2d(X, W, stride=stride, padding=pad)
            func = tc.lower([Y, *tc.gradient(Y, [X, W])], [X, W]).func
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                _, info = add_bounds_checks(func)
                times.append(time.perf_counter() - t0)
            extra = "nothing added" if info is None else f"{len(info.checks)} runtime checks, " \
                f"{len(info.sizes)} size checks"
            print(f"  conv2d stride {stride} padding {pad} + gradient, {label}: "
                  f"{1e3 * sorted(times)[repeat // 2]:.1f} ms (median of {repeat}; {extra})")
    return 0


def _jobs_seed(seed: int, job: int) -> int:
    """The hypothesis seed of share ``job`` (job 0 draws what a run with one job draws)."""
    return seed + 100003 * job


def _share(total: int, jobs: int, job: int) -> int:
    return total // jobs + (1 if job < total % jobs else 0)


def soak(opts: dict, job: int = 0, jobs: int = 1) -> Tally:
    """Run share ``job`` of ``jobs`` of the random-program checks; return the tally."""
    warnings.simplefilter("ignore")
    from gradcheck import check_gradient
    from strategies import programs
    from test_fuzz_programs import assert_same, check_out_of_range

    tally = Tally()
    seen = {"n": 0}
    quiet = settings(deadline=None, database=None, derandomize=False,
                     suppress_health_check=list(HealthCheck))
    seed0 = _jobs_seed(opts["seed"], job)

    def jit_check(prog, data: list, want: list) -> Kernel:
        """JIT == evaluator on ``data``; returns the kernel (reused for out-of-range data)."""
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in data]
        if seen["n"] % opts["o3_every"] == 0:
            kernel = tc.build(prog.outputs, prog.inputs)
        else:
            kernel = build_at(prog, opts["opt_level"])
        got = kernel(*data)
        for a, c in zip(data, copies):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, c, err_msg="the kernel wrote an input")
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"output {k}")
            for a in data:
                if isinstance(a, np.ndarray):
                    assert not np.shares_memory(g, a), "an output aliases an input"
        return kernel

    def opt_check(prog, data: list, want: list) -> None:
        b = prog.bindings(data)
        for k, (g, w) in enumerate(zip(tc.evaluate(tc.optimize(prog.outputs), b), want)):
            assert_same(g, w, f"optimized output {k}")

    @hypothesis_seed(seed0)
    @given(programs(), st.integers(0, 2**31))
    @settings(quiet, max_examples=max(1, _share(opts["programs"], jobs, job)))
    def forward(prog, seed):
        seen["n"] += 1
        tally.distinct.add(hashlib.sha256(prog.text.encode()).hexdigest())
        tally.scans[0] += _has_scan(prog)
        data = prog.arrays(seed)
        want: list = []
        kernel: list = []
        tally.run("evaluator", prog, lambda: want.extend(
            tc.evaluate(prog.outputs, prog.bindings(data))))
        if len(want) != len(prog.outputs):
            return
        tally.run("jit == evaluator", prog, lambda: kernel.append(jit_check(prog, data, want)))
        tally.run("optimize preserves", prog, lambda: opt_check(prog, data, want))
        if prog.index_high and seen["n"] % opts["oob_every"] == 0:
            tally.run("out-of-range gathers agree", prog, lambda: check_out_of_range(
                prog, seed, kernel[0] if kernel else None))

    @hypothesis_seed(seed0 + 1)
    @given(programs(smooth=True, dtype="float64"), st.integers(0, 2**31))
    @settings(quiet, max_examples=max(1, _share(opts["gradients"], jobs, job)))
    def gradients(prog, seed):
        tally.distinct_gradients.add(hashlib.sha256(prog.text.encode()).hexdigest())
        tally.scans[1] += _has_scan(prog)

        def check() -> None:
            check_gradient(prog.outputs[-1], prog.floats, prog.bindings(prog.arrays(seed)),
                           seed=seed % 2**16, rtol=1e-5, atol=1e-8, optimize=bool(seed % 2))
        tally.run("gradient == finite differences", prog, check)

        def compiled() -> None:
            grads = tc.gradient(prog.outputs[-1], prog.floats)
            b = prog.bindings(prog.arrays(seed))
            want = tc.evaluate(grads, b)
            outs = list(grads)
            lowered = tc.lower(outs, prog.inputs)
            func, bounds = add_bounds_checks(lowered.func)
            entry = compile_function(func, speed_level=opts["opt_level"],
                                     schedule=schedule_of("llvm"))
            kernel = Kernel(func, entry, inputs=prog.inputs, outputs=outs,
                            hidden=lowered.constants, single=False, bounds=bounds)
            for k, (g, w) in enumerate(zip(kernel(*prog.arrays(seed)), want)):
                assert_same(g, w, f"gradient {k}")
        tally.run("compiled gradient == evaluator", prog, compiled)

    import tempfile

    from tecomp.codegen.disk_cache import set_default_cache

    # a persistent cache of its own: a rerun compiles again (and the user's cache is spared
    # thousands of throw-away entries)
    with tempfile.TemporaryDirectory(prefix="tecomp-soak-") as tmp:
        old = set_default_cache(tmp)
        try:
            if _share(opts["programs"], jobs, job):
                forward()
            if _share(opts["gradients"], jobs, job):
                gradients()
        finally:
            set_default_cache(old)
    return tally


def _soak_job(opts: dict, job: int, jobs: int) -> Tally:
    return soak(opts, job, jobs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=10000)
    ap.add_argument("--gradients", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes; job j draws with hypothesis seed "
                         "seed + 100003 j, so --seed and --jobs together fix the programs")
    ap.add_argument("--opt-level", type=int, default=1)
    ap.add_argument("--o3-every", type=int, default=25)
    ap.add_argument("--oob-every", type=int, default=4,
                    help="every n-th program with a gather is also run with an index out of "
                         "range (its kernel from the JIT check)")
    ap.add_argument("--kernels", type=int, default=0,
                    help="only compile this many distinct kernels (tc.build, O3) and report "
                         "the resident set size")
    ap.add_argument("--cache-size", type=int, default=0,
                    help="with --kernels: tc.config.kernel_cache_size for the run (default "
                         "256)")
    ap.add_argument("--calls", type=int, default=0,
                    help="with --kernels (or alone): then call kernels this many times and "
                         "report the resident set size")
    ap.add_argument("--bounds-cost", action="store_true",
                    help="only time the static bounds proofs on conv2d gradients")
    args = ap.parse_args()
    if args.bounds_cost:
        return bounds_cost()
    if args.kernels or args.calls:
        if args.cache_size:
            tc.config.kernel_cache_size = args.cache_size
        return compile_memory(args.kernels, args.calls)
    opts = {k: getattr(args, k) for k in ("programs", "gradients", "seed", "opt_level",
                                          "o3_every", "oob_every")}
    jobs = max(1, args.jobs)
    t0 = time.perf_counter()
    if jobs == 1:
        tallies = [soak(opts)]
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            tallies = pool.starmap(_soak_job, [(opts, j, jobs) for j in range(jobs)])
    elapsed = time.perf_counter() - t0
    tally = Tally()
    for t in tallies:
        for check, n in t.counts.items():
            tally.counts[check] = tally.counts.get(check, 0) + n
        for check, n in t.failed.items():
            tally.failed[check] = tally.failed.get(check, 0) + n
        for key, found in t.failures.items():
            tally.failures.setdefault(key, found)
        tally.distinct |= t.distinct
        tally.distinct_gradients |= t.distinct_gradients
        tally.scans = [a + b for a, b in zip(tally.scans, t.scans)]
    done = tally.counts.get("evaluator", 0) + tally.counts.get(
        "gradient == finite differences", 0)
    print(f"soak (seed {args.seed}, {jobs} job{'s' if jobs > 1 else ''}): {elapsed:.0f} s, "
          f"{done / max(elapsed, 1e-9):.2f} programs/s (opt level {args.opt_level}, O3 via "
          f"tc.build every {args.o3_every})")
    print(f"  distinct programs (by text): {len(tally.distinct)} forward, "
          f"{len(tally.distinct_gradients)} for gradients; with a scan: {tally.scans[0]} "
          f"forward, {tally.scans[1]} for gradients")
    for check, n in tally.counts.items():
        print(f"  {check:32s} {n:6d} run, {tally.failed.get(check, 0):4d} failed")
    for key, (text, tb) in tally.failures.items():
        print(f"\n=== {key}\n{text}\n{tb}")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
