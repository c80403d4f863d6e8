"""CPU benchmark of tecomp against PyTorch, JAX (jit) and NumPy/OpenBLAS, on realistic sizes.

    python -m benchmarks.bench_cpu [--quick] [--cases conv,matmul] [--suite default|latency|all]
                                   [--threads 1,all] [--reps 7] [--out DIR] [--plot PATH]

How it measures (``benchmarks/README.md`` has more):

* every case (``bench_cpu_cases.py``) runs in a process of its own, once with one thread
  (pinned to one CPU) and once with all the cores the benchmark may use; each framework is
  told the thread count (``torch.set_num_threads``, XLA's flags, the BLAS variables, tecomp's
  ``Kernel.threads``).  The NumPy/OpenBLAS peer runs with ``OPENBLAS_CORETYPE`` and
  ``OPENBLAS_L2_SIZE`` removed from that child's environment, and the BLAS kernel it used
  (``threadpoolctl``) is printed;
* in that process every result — tecomp's and each peer's, forward and gradient — is checked
  against the PyTorch float64 result before anything is timed;
* tecomp and the peers are then timed round-robin: each round times every function once
  (enough calls to last ``--sample-ms``), the order rotating from round to round, so that a
  change of machine load hits all of them alike; the table gives medians and the spread
  (interquartile range over the median) of ``--reps`` rounds;
* the CPU model and its measured float32 FMA peak (:mod:`benchmarks.peak`, 1 core and all
  cores) head the report, and each contraction shows tecomp's GFLOP/s and % of that peak.

Writes ``benchmarks/results/cpu.md`` and ``cpu.json`` (``cpu_subset.*`` for ``--quick`` or
``--cases``), and the plot ``bench_cpu.png`` beside them (copied to ``docs/bench_cpu.png`` by
a full run); prints where.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_cpu_report as report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("tecomp", "torch", "jax", "numpy")
TOLERANCE = 2e-3  # max |error| / max(1, max |reference|) of float32 results


def cpu_model() -> str:
    """The CPU's model name, with its family and model numbers where the name alone does not
    tell the part (a virtual machine's "Intel(R) Xeon(R) Processor")."""
    try:
        fields: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
            if not line.strip():
                break  # the first CPU's record
        name = fields.get("model name")
        if name:
            family, model = fields.get("cpu family"), fields.get("model")
            return f"{name}, family {family} model {model}" if family and model else name
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    import llvmlite.binding as llvm

    from tecomp.host import describe, reported_caches

    h = describe()
    reported = reported_caches()[2]
    l3 = f"L3 {h.l3 >> 20} MiB" + (
        f" (of {reported >> 20} MiB reported: a virtual machine's share)" if reported != h.l3
        else "")
    return (f"{cpu_model()} (LLVM: {llvm.get_host_cpu_name()}), {h.cores} cores, "
            f"{h.vector_bits}-bit vectors{', FMA' if h.fma else ''}, L1d {h.l1d >> 10} KiB, "
            f"L2 {h.l2 >> 10} KiB, {l3}; Python {platform.python_version()}")


def child_env(threads: int) -> dict[str, str]:
    """The environment of a case's process: thread counts set, the OpenBLAS overrides gone."""
    env = dict(os.environ)
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(var, None)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    env["JAX_PLATFORMS"] = "cpu"
    if threads == 1:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1").strip()
    return env


def run_child(name: str, threads: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench_cpu_child", name, str(threads),
           str(args.reps), str(args.sample_ms)]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, env=child_env(threads), cwd=ROOT, capture_output=True,
                             text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"case": name, "threads": threads, "notes": [f"timed out ({args.timeout} s)"]}
    lines = [x for x in res.stdout.splitlines() if x.startswith("{")]
    if res.returncode != 0 or not lines:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        return {"case": name, "threads": threads,
                "notes": [f"process failed (exit {res.returncode}): {' | '.join(tail)[:300]}"]}
    row = json.loads(lines[-1])
    row["wall_s"] = time.perf_counter() - t0
    return row


def select(args: argparse.Namespace) -> list[Any]:
    from benchmarks import bench_cpu_cases as cases_mod

    cases = cases_mod.all_cases()
    if args.suite != "all":
        cases = [c for c in cases if c.suite == args.suite]
    if args.quick:
        cases = [c for c in cases if c.quick]
    want = [s.strip() for s in args.cases.split(",") if s.strip()]
    if want:
        cases = [c for c in cases if any(w in c.name for w in want)]
    return cases


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small subset (a few minutes)")
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names")
    ap.add_argument("--suite", default="all", choices=("default", "latency", "all"))
    ap.add_argument("--threads", default="1,all", help="thread counts: 1, all, or numbers")
    ap.add_argument("--reps", type=int, default=7, help="timing rounds")
    ap.add_argument("--sample-ms", type=float, default=20.0, help="least time of one sample")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case process")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--plot", default=str(ROOT / "docs" / "bench_cpu.png"),
                    help="a second copy of a full run's plot ('' for none)")
    args = ap.parse_args(argv)

    from benchmarks.peak import peak_gflops
    from tecomp.host import cpu_count

    cores = cpu_count()
    counts = sorted({cores if t.strip() == "all" else int(t) for t in args.threads.split(",")})
    todo = select(args)
    print(f"machine: {machine()}", flush=True)
    load_before = os.getloadavg()[0]
    peaks = {t: peak_gflops(t) for t in counts}
    print("measured float32 FMA peak: " + ", ".join(
        f"{t} thread{'s' if t > 1 else ''} {p:.0f} GFLOP/s" for t, p in peaks.items()),
        flush=True)
    rows = []
    for threads in counts:
        for case in todo:
            row = run_child(case.name, threads, args)
            row["suite"] = case.suite
            rows.append(row)
            print(f"  [{threads} thr] {case.name}: {report.summary(row)}"
                  f" ({row.get('wall_s', 0):.0f} s)", flush=True)
    # the peak again at the end: the larger of the two (a busy machine lowers it)
    peaks = {t: max(p, peak_gflops(t)) for t, p in peaks.items()}
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    doc = report.document(rows, peaks, counts, stamp, f"{machine()}; {load}",
                          " ".join(argv or sys.argv[1:]))
    print(doc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    subset = args.quick or bool(args.cases) or args.suite != "all"
    name = "cpu_subset" if subset else "cpu"
    (out / f"{name}.md").write_text(doc)
    (out / f"{name}.json").write_text(json.dumps(
        {"date": stamp, "machine": machine(), "peaks": peaks, "rows": rows}, indent=1))
    print(f"written: {out / (name + '.md')}, {out / (name + '.json')}")
    if not subset:
        section = report.readme_section(rows, peaks, counts, stamp, cpu_model(), load)
        if report.update_readme(ROOT / "README.md", section):
            print(f"README benchmark table updated: {ROOT / 'README.md'}")
    try:
        from benchmarks.plot import plot_cpu

        targets = [out / f"bench_{name}.png"] + ([Path(args.plot)] if args.plot and not subset
                                                 else [])
        plot_cpu(rows, targets, f"tecomp vs peers, {stamp}, {cpu_model()}")
        print("plot: " + ", ".join(map(str, targets)))
    except ImportError as err:
        print(f"plot skipped: {err} (matplotlib not installed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
