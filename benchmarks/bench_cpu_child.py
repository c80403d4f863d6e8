"""One case of the CPU benchmark in a process of its own (started by ``bench_cpu.py``).

    python -m benchmarks.bench_cpu_child CASE THREADS REPS SAMPLE_MS

Pins itself to one CPU when ``THREADS`` is 1 (before any framework starts its threads),
builds tecomp's forward and gradient kernels and every peer's functions, checks all of them
against the PyTorch float64 result, then times them round-robin (``bench_cpu.py``'s
docstring) and prints one JSON line: medians, spreads, errors, notes, the BLAS kernel.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _pin(threads: int) -> None:
    if threads == 1 and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})


def rel_error(got: Any, want: Any) -> float:
    """Largest ``|got - want| / max(1, max |want|)`` over the arrays of ``got``/``want``."""
    import numpy as np

    got = [got] if isinstance(got, np.ndarray) or np.isscalar(got) else list(got)
    want = [want] if isinstance(want, np.ndarray) or np.isscalar(want) else list(want)
    worst = 0.0
    for g, w in zip(got, want):
        w = np.asarray(w, dtype=np.float64)
        g = np.asarray(g, dtype=np.float64)
        if g.shape != w.shape:
            return float("inf")
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        worst = max(worst, float(np.abs(g - w).max(initial=0.0)) / scale)
    return worst if worst == worst else float("inf")


def tecomp_fns(case, arrays, head, threads):
    import tecomp as tc

    ph = [tc.placeholder(x.shape, name=x.name, dtype=x.dtype) for x in case.inputs]
    out = case.tecomp(*ph)
    fwd = tc.build(out, ph)
    H = tc.placeholder(tuple(head.shape), name="head", dtype=out.dtype)
    diff = [p for p, x in zip(ph, case.inputs) if x.diff]
    grad = tc.build(tc.gradient(out, diff, head=H), ph + [H])
    fwd.threads = grad.threads = threads
    return (lambda: fwd(*arrays)), (lambda: grad(*arrays, head))


def torch_fns(case, arrays, head, dtype=None):
    import torch

    ts = [torch.from_numpy(a.copy()) for a in arrays]
    if dtype is not None:
        ts = [t.to(dtype) if t.is_floating_point() else t for t in ts]
    diff = [t.requires_grad_(True) for t, x in zip(ts, case.inputs) if x.diff]
    h = torch.from_numpy(head).to(ts[0].dtype if dtype is None else dtype)

    def fwd():
        with torch.no_grad():
            return case.torch(*ts)

    def grad():
        return torch.autograd.grad(case.torch(*ts), diff, h)

    if dtype is not None:  # the reference: NumPy results
        return (lambda: fwd().numpy()), (lambda: [g.numpy() for g in grad()])
    return fwd, grad


def jax_fns(case, arrays, head):
    import jax

    jax.config.update("jax_enable_x64", True)  # int64 indices; floats stay float32
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
    return ((lambda: jax.block_until_ready(fwd_j(*xs))),
            (lambda: jax.block_until_ready(grad_j(hj, *xs))))


def numpy_fns(case, arrays, head):
    fwd = (lambda: case.numpy(*arrays)) if case.numpy else None
    grad = (lambda: case.numpy_grad(*arrays, head)) if case.numpy_grad else None
    return fwd, grad


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(f"{i.get('internal_api')} {i.get('version')} kernel "
                     f"{i.get('architecture')} {i.get('num_threads')} threads" for i in libs) \
        or "no BLAS loaded"


def as_numpy(x: Any) -> Any:
    import numpy as np

    if isinstance(x, (list, tuple)):
        return [as_numpy(v) for v in x]
    if hasattr(x, "detach"):
        return x.detach().numpy()
    return np.asarray(x)


def broadcast_view(x: Any) -> bool:
    """Whether a result (or one of a list) is a PyTorch view with a stride of 0 over an
    extent above 1: a broadcast that was never written out (autograd's gradient of a sum
    is ``grad.expand(...)``), where tecomp and JAX return dense arrays."""
    if isinstance(x, (list, tuple)):
        return any(broadcast_view(v) for v in x)
    if not hasattr(x, "stride"):
        return False
    return any(st == 0 and n > 1 for st, n in zip(x.stride(), x.shape))


#: seconds of idleness before each framework's sample when the case runs on several threads:
#: a thread pool that spin-waits after its calls (OpenBLAS's spins about 0.2 s here) would
#: otherwise hold a core through the next framework's sample (a 1024^3 matmul on 2 threads
#: took 28 ms right after NumPy's, 12 ms after a 0.2 s pause, 10 ms alone)
SETTLE_S = 0.25

#: seconds of untimed calls after each settle pause (at least one call): the first calls
#: after an idle pause run slowly while the other vCPUs wake (a 2-thread row sum of 64 MiB:
#: 1.2 ms back to back, 1.4 ms +-89% in 20 ms samples right after a 0.25 s pause)
WARM_S = 0.03


def round_robin(fns: dict[str, Callable[[], Any]], reps: int,
                sample_s: float, settle_s: float = 0.0) -> dict[str, tuple[float, float]]:
    """Median seconds a call and spread (IQR / median) of each function, timed in rounds
    that call every function in turn, the order rotating each round; ``settle_s`` of sleep
    before each sample, then ``WARM_S`` of untimed calls (the calls after an idle pause pay
    for waking the other cores, in every framework alike); the consecutive calls of one
    sample still follow each other."""
    inner = {}
    for name, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        fn()
        inner[name] = max(1, int(sample_s / max(time.perf_counter() - t0, 1e-7)))
    samples: dict[str, list[float]] = {n: [] for n in fns}
    names = list(fns)
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, k = fns[name], inner[name]
            if settle_s:
                time.sleep(settle_s)
                t0 = time.perf_counter()
                while True:  # untimed calls until the sleeping cores are back at speed
                    fn()
                    if time.perf_counter() - t0 >= WARM_S:
                        break
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            samples[name].append((time.perf_counter() - t0) / k)
    out = {}
    for name, xs in samples.items():
        med = statistics.median(xs)
        q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [med, med, med]
        out[name] = (med, (q[2] - q[0]) / med if med > 0 else 0.0)
    return out


def run(name: str, threads: int, reps: int, sample_ms: float) -> dict[str, Any]:
    _pin(threads)
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    from benchmarks import bench_cpu_cases as cases_mod

    case = next(c for c in cases_mod.all_cases() if c.name == name)
    t_start = time.perf_counter()
    rng = np.random.default_rng(0)
    arrays = case.arrays(rng)
    ref_f, ref_g = torch_fns(case, arrays, np.zeros(1, np.float32), torch.float64)
    want = ref_f()
    head = rng.standard_normal(np.shape(want)).astype(np.float32)
    ref_f, ref_g = torch_fns(case, arrays, head, torch.float64)
    want_grad = ref_g()
    row: dict[str, Any] = {"case": name, "threads": threads, "flops": case.flops,
                           "notes": [], "errors": {}, "phases": {}}
    row["phases"]["reference"] = time.perf_counter() - t_start
    makers = {"tecomp": lambda: tecomp_fns(case, arrays, head, threads),
              "torch": lambda: torch_fns(case, arrays, head),
              "jax": lambda: jax_fns(case, arrays, head) if case.jax else (None, None),
              "numpy": lambda: numpy_fns(case, arrays, head)}
    timed: dict[str, Callable[[], Any]] = {}
    for fw, make in makers.items():
        try:
            t0 = time.perf_counter()
            fwd, grad = make()
            row["phases"][f"{fw} build"] = time.perf_counter() - t0
        except Exception as err:  # a peer (or tecomp) that cannot express or build the case
            row["notes"].append(f"{fw}: {type(err).__name__}: {str(err)[:160]}")
            continue
        for kind, fn, ref in (("fwd", fwd, want), ("grad", grad, want_grad)):
            if fn is None:
                continue
            try:
                got = fn()
                err = rel_error(as_numpy(got), ref)
            except Exception as exc:  # noqa: BLE001 - reported, not timed
                row["notes"].append(f"{fw} {kind}: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            row["errors"][f"{fw} {kind}"] = err
            if broadcast_view(got):
                row["notes"].append(f"{fw} {kind} returns a broadcast view (a stride of 0): "
                                    "its result is not written out, tecomp's is")
            if err <= 2e-3:
                timed[f"{fw} {kind}"] = fn
            else:
                row["notes"].append(f"{fw} {kind} differs from float64 (error {err:.1e}): "
                                    "not timed")
    if "numpy fwd" in timed:
        row["blas"] = blas_info()
    row["phases"]["checks"] = time.perf_counter() - t_start - sum(row["phases"].values())
    time.sleep(0.1)
    t0 = time.perf_counter()
    row["times"] = round_robin(timed, reps, sample_ms / 1e3, SETTLE_S if threads > 1 else 0.0)
    row["phases"]["timing"] = time.perf_counter() - t0
    return row


if __name__ == "__main__":
    case_name, nthreads, nreps, ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4])
    print(json.dumps(run(case_name, nthreads, nreps, ms)))
