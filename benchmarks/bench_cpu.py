"""CPU benchmark of tecomp against NumPy, PyTorch, JAX and TVM 0.19 (``te.gradient``).

For every case of :mod:`bench_cpu_cases` it measures, in one run on the same cores: the forward
time and the gradient time (vector-Jacobian product with a random head) of tecomp's kernels
and of each peer, as medians over repeated calls after a warm-up call, and tecomp's compile
time (gradient + optimise + build of forward and gradient kernels) cold (no cache) and from
the persistent kernel cache.  Results are checked against NumPy (or PyTorch where NumPy has
no gradient) before timing.  Peers are optional: a missing one is reported "not installed".

    python -m benchmarks.bench_cpu [--cases matmul,softmax] [--budget 0.4] [--out DIR]
                                   [--plot PATH] [--no-tvm]

prints a Markdown table and writes it to ``benchmarks/results/cpu.md`` (with the date and
the machine), and a plot to ``benchmarks/results/bench_cpu.png`` and ``docs/bench_cpu.png``.
Peers live in a separate environment (``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tecomp as tc  # noqa: E402
from benchmarks import bench_cpu_cases as cases_mod  # noqa: E402

PEERS = ("numpy", "torch", "jax", "tvm")
ROOT = Path(__file__).resolve().parent.parent


def median_time(fn: Callable[[], Any], budget: float) -> float:
    """Median seconds of ``fn()`` after a warm-up call, repeated to fill about ``budget``."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > budget:  # very slow (TVM's default schedules): the warm-up call is the sample
        t0 = time.perf_counter()
        fn()
        return min(first, time.perf_counter() - t0) if first < 5 * budget else first
    reps = int(min(200, max(5, budget / max(first, 1e-6))))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def available() -> dict[str, str]:
    """Peer name -> version, or "not installed"."""
    out = {"numpy": np.__version__}
    for name, mod in (("torch", "torch"), ("jax", "jax"), ("tvm", "tvm")):
        try:
            m = __import__(mod)
            out[name] = getattr(m, "__version__", "?")
        except Exception as err:  # ImportError, or a broken install
            out[name] = f"not installed ({type(err).__name__})"
    return out


# ------------------------------------------------------------------------------ tecomp
def tecomp_kernels(case: cases_mod.Case) -> tuple[Any, Any]:
    ph = [tc.placeholder(x.shape, name=x.name, dtype=x.dtype) for x in case.inputs]
    out = case.tecomp(*ph)
    fwd = tc.build(out, ph)
    head = tc.placeholder(out.shape, name="head", dtype=out.dtype)
    diff = [p for p, x in zip(ph, case.inputs) if x.diff]
    grads = tc.gradient(out, diff, head=head)
    return fwd, tc.build(grads, ph + [head])


def compile_times(case: cases_mod.Case) -> tuple[float, float]:
    """Seconds to build forward and gradient cold (no cache) and from the disk cache."""
    from tecomp.codegen.cache import KERNELS
    from tecomp.codegen.disk_cache import DiskCache, set_default_cache

    with tempfile.TemporaryDirectory() as tmp:
        old = set_default_cache(DiskCache(tmp))
        try:
            KERNELS.clear()
            t0 = time.perf_counter()
            tecomp_kernels(case)
            cold = time.perf_counter() - t0
            KERNELS.clear()
            t0 = time.perf_counter()
            tecomp_kernels(case)
            cached = time.perf_counter() - t0
        finally:
            set_default_cache(old)
    return cold, cached


# ------------------------------------------------------------------------------ peers
def torch_fns(case, arrays, head):
    import torch

    ts = [torch.from_numpy(a.copy()) for a in arrays]
    diff = [t.requires_grad_(True) for t, x in zip(ts, case.inputs) if x.diff]
    h = torch.from_numpy(head)

    def fwd():
        with torch.no_grad():
            return case.torch(*ts)

    def grad():
        return torch.autograd.grad(case.torch(*ts), diff, h)

    return (lambda: fwd().numpy()), (lambda: [g.numpy() for g in grad()]), fwd, grad


def jax_fns(case, arrays, head):
    import jax

    jax.config.update("jax_enable_x64", True)  # keep int64 indices; floats stay float32
    xs = [jax.device_put(a) for a in arrays]
    pos = [n for n, x in enumerate(case.inputs) if x.diff]
    fwd_j = jax.jit(case.jax)

    def vjp(h, *args):
        def part(*d):
            full = list(args)
            for n, v in zip(pos, d):
                full[n] = v
            return case.jax(*full)

        return jax.vjp(part, *[args[n] for n in pos])[1](h)

    grad_j = jax.jit(vjp)
    hj = jax.device_put(head)

    def fwd():
        return fwd_j(*xs).block_until_ready()

    def grad():
        return jax.block_until_ready(grad_j(hj, *xs))

    return (lambda: np.asarray(fwd())), (lambda: [np.asarray(g) for g in grad()]), fwd, grad


def tvm_fns(case, arrays, head):
    import tvm
    from tvm import te

    # TVM's take gradient wants int32 indices
    dts = ["int32" if x.dtype == "int64" else x.dtype for x in case.inputs]
    arrays = [a.astype(d) for a, d in zip(arrays, dts)]
    ph = [te.placeholder(x.shape, name=x.name, dtype=d) for x, d in zip(case.inputs, dts)]
    out = case.tvm(*ph)
    H = te.placeholder(tuple(int(s) for s in out.shape), name="head", dtype=out.dtype)
    diff = [p for p, x in zip(ph, case.inputs) if x.diff]
    grads = te.gradient(out, diff, head=H)
    dev = tvm.cpu()
    f_fwd = tvm.build(te.create_schedule(out.op), ph + [out], target="llvm")
    f_grad = tvm.build(te.create_schedule([g.op for g in grads]), ph + [H] + list(grads),
                       target="llvm")
    xs = [tvm.nd.array(a, dev) for a in arrays]
    y = tvm.nd.empty(tuple(int(s) for s in out.shape), out.dtype, dev)
    gs = [tvm.nd.empty(tuple(int(s) for s in g.shape), g.dtype, dev) for g in grads]
    hv = tvm.nd.array(head, dev)

    def fwd():
        f_fwd(*xs, y)

    def grad():
        f_grad(*xs, hv, *gs)

    return ((lambda: (fwd(), y.numpy())[1]), (lambda: (grad(), [g.numpy() for g in gs])[1]),
            fwd, grad)


def _close(got, want, what: str) -> str | None:
    got = [got] if isinstance(got, np.ndarray) else list(got)
    want = [want] if isinstance(want, np.ndarray) else list(want)
    for g, w in zip(got, want):
        w = np.asarray(w, dtype=np.float64)
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        err = float(np.abs(np.asarray(g, np.float64) - w).max(initial=0.0)) / scale
        if not err < 2e-3:
            return f"{what} differs (relative error {err:.1e})"
    return None


# ------------------------------------------------------------------------------ one case
def run_case(case: cases_mod.Case, budget: float, peers: dict[str, str],
             rng: np.random.Generator) -> dict[str, Any]:
    arrays = case.arrays(rng)
    row: dict[str, Any] = {"case": case.name, "notes": []}
    fwd_k, grad_k = tecomp_kernels(case)
    ref = case.numpy(*arrays)
    head = rng.standard_normal(np.shape(ref)).astype(np.float32)
    row["notes"] += filter(None, [_close(fwd_k(*arrays), ref, "tecomp forward")])
    ref_grad = case.numpy_grad(*arrays, head) if case.numpy_grad else None
    fns: dict[str, tuple] = {
        "numpy": (None, None, lambda: case.numpy(*arrays),
                  (lambda: case.numpy_grad(*arrays, head)) if case.numpy_grad else None)}
    makers = {"torch": torch_fns, "jax": jax_fns, "tvm": tvm_fns}
    for name, make in makers.items():
        if not peers.get(name, "").startswith("not") and getattr(case, name) is not None:
            try:
                fns[name] = make(case, arrays, head)
            except Exception as err:  # a peer that cannot express or build the case
                row["notes"].append(f"{name}: {type(err).__name__}: {str(err)[:80]}")
    if ref_grad is None and "torch" in fns:
        ref_grad = fns["torch"][1]()
    if ref_grad is not None:
        row["notes"] += filter(None, [_close(grad_k(*arrays, head), ref_grad,
                                             "tecomp gradient")])
    for name in ("torch", "jax", "tvm"):
        if name in fns:
            row["notes"] += filter(None, [_close(fns[name][0](), ref, f"{name} forward")])
            if ref_grad is not None:
                row["notes"] += filter(None, [_close(fns[name][1](), ref_grad,
                                                     f"{name} gradient")])
    time.sleep(0.2)  # let BLAS threads of the checks above go to sleep
    row["tecomp fwd"] = median_time(lambda: fwd_k(*arrays), budget)
    row["tecomp grad"] = median_time(lambda: grad_k(*arrays, head), budget)
    for name, (_, _, fwd, grad) in fns.items():
        time.sleep(0.1)
        row[f"{name} fwd"] = median_time(fwd, budget)
        if grad is not None:
            row[f"{name} grad"] = median_time(grad, budget)
    row["compile cold"], row["compile cached"] = compile_times(case)
    return row


# ------------------------------------------------------------------------------ report
def _ms(v: float | None) -> str:
    return "—" if v is None else (f"{v * 1e3:.3g}" if v < 1 else f"{v * 1e3:.0f}")


def ratios(row: dict[str, Any], kind: str) -> tuple[float | None, float | None]:
    """tecomp / best of (PyTorch, JAX), and TVM / tecomp, for ``kind`` "fwd" or "grad"."""
    best = [row[f"{p} {kind}"] for p in ("torch", "jax") if f"{p} {kind}" in row]
    r = row[f"tecomp {kind}"] / min(best) if best else None
    tvm = row.get(f"tvm {kind}")
    return r, (tvm / row[f"tecomp {kind}"] if tvm else None)


def geomean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def table(rows: list[dict[str, Any]], peers: dict[str, str]) -> str:
    head = ["case"]
    for kind in ("fwd", "grad"):
        head += [f"tecomp {kind}"] + [f"{p} {kind}" for p in PEERS]
    head += ["fwd ratio", "grad ratio", "TVM/tecomp grad", "compile s", "cached ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["case"]]
        for kind in ("fwd", "grad"):
            cells += [_ms(r.get(f"{p} {kind}")) for p in ("tecomp",) + PEERS]
        fr, _ = ratios(r, "fwd")
        gr, tv = ratios(r, "grad")
        cells += [f"{fr:.2f}" if fr else "—", f"{gr:.2f}" if gr else "—",
                  f"{tv:.0f}×" if tv else "—", f"{r['compile cold']:.2f}",
                  f"{r['compile cached'] * 1e3:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    fwd = [ratios(r, "fwd")[0] for r in rows]
    grad = [ratios(r, "grad")[0] for r in rows]
    tvm = [ratios(r, "grad")[1] for r in rows]
    out = ["Times in milliseconds (median); ratios are tecomp / best of (PyTorch, JAX); "
           "below 1 tecomp is faster.", "", *lines, ""]
    gf, gg = geomean([x for x in fwd if x]), geomean([x for x in grad if x])
    if gf:
        out.append(f"* geometric mean tecomp / best(PyTorch, JAX): forward {gf:.2f}, "
                   f"gradient {gg:.2f}; worst case {max(x for x in fwd + grad if x):.2f}")
    if any(tvm):
        out.append(f"* TVM te.gradient / tecomp gradient: smallest {min(x for x in tvm if x):.1f}"
                   f"×, geometric mean {geomean([x for x in tvm if x]):.0f}×")
    mm = [r for r in rows if r["case"] == "matmul 512^3" and "numpy fwd" in r]
    if mm:
        frac = mm[0]["numpy fwd"] / mm[0]["tecomp fwd"]
        out.append(f"* matmul 512^3 float32: tecomp at {frac:.0%}"
                   f" of NumPy/OpenBLAS ({2 * 512 ** 3 / mm[0]['tecomp fwd'] / 1e9:.0f} GFLOP/s)")
    notes = [f"* {r['case']}: {n}" for r in rows for n in r["notes"]]
    if notes:
        out += ["", "Notes:", *notes]
    out += ["", "Peers: " + ", ".join(f"{k} {v}" for k, v in peers.items())]
    return "\n".join(out)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names")
    ap.add_argument("--budget", type=float, default=0.4, help="seconds per timing")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--plot", default=str(ROOT / "docs" / "bench_cpu.png"),
                    help="a second copy of the plot ('' for none)")
    ap.add_argument("--no-tvm", action="store_true")
    args = ap.parse_args(argv)
    peers = available()
    if args.no_tvm:
        peers["tvm"] = "not installed (skipped: --no-tvm)"
    want = [s.strip() for s in args.cases.split(",") if s.strip()]
    todo = [c for c in cases_mod.all_cases() if not want or any(w in c.name for w in want)]
    rng = np.random.default_rng(0)
    print(f"machine: {machine()}; peers: {peers}", flush=True)
    rows = []
    for case in todo:
        t0 = time.perf_counter()
        rows.append(run_case(case, args.budget, peers, rng))
        print(f"  {case.name}: done in {time.perf_counter() - t0:.1f} s", flush=True)
    text = table(rows, peers)
    stamp = datetime.date.today().isoformat()
    doc = (f"# CPU benchmark\n\n{stamp}, {machine()}.  Reproduce: "
           f"`python -m benchmarks.bench_cpu` (see benchmarks/README.md).\n\n{text}\n")
    print(doc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # a run of some cases leaves the full suite's table and the README's plot alone
    subset = len(todo) < len(cases_mod.all_cases())
    name = "cpu_subset" if subset else "cpu"
    (out / f"{name}.md").write_text(doc)
    print(f"written: {out / (name + '.md')}")
    try:
        from benchmarks.plot import plot_cpu

        targets = [out / f"bench_{name}.png"] + ([Path(args.plot)] if args.plot and not subset
                                                 else [])
        plot_cpu(rows, targets, f"tecomp vs peers, {stamp}, {machine()}")
    except ImportError as err:
        print(f"plot skipped: {err} (matplotlib not installed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
