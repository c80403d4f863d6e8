"""Before/after timing of the CPU loop-nest schedule (passes/schedule/cpu/, its loop order
in loop_order.py).

For each case of the CPU suite (``bench_cpu_cases.py``), the forward kernel and the gradient
kernel are compiled three ways and timed in the same run, with NumPy's (and, when installed,
JAX's) time beside them:

* ``old order``: the loop order as it was before the tie rule of ``loop_order`` (a sum whose
  unit-stride data axis and innermost reduction axis score equally keeps the plain order);
* ``order``: today's lowering, compiled as the LLVM backend compiles it by default
  (``fuse_parallel`` only);
* ``sched``: today's lowering through :func:`tecomp.passes.schedule.cpu.schedule_cpu` (row and
  reduction blocking of "i, k, j" sums, then ``fuse_parallel``).

Medians in milliseconds on ``--threads`` threads (default 1, so that the figures compare with
``OPENBLAS_NUM_THREADS=1`` NumPy on a shared machine).

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.bench_schedule --cases "matmul 512^3" "conv2d s1 p1"
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import numpy as np

import tecomp as tc
from tecomp.codegen.kernel import Kernel
from tecomp.codegen.llvm import compile_function
from tecomp.loopir import LoweredFunc
from tecomp.passes.schedule.cpu import loop_order, schedule_cpu
from tecomp.pipeline import schedule_of

from . import bench_cpu_cases as cases_mod


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def _programs(case: cases_mod.Case):
    ph = [tc.placeholder(x.shape, name=x.name, dtype=x.dtype) for x in case.inputs]
    out = case.tecomp(*ph)
    diff = [p for p, x in zip(ph, case.inputs) if x.diff]
    head = tc.placeholder(out.shape, name="head", dtype=out.dtype)
    grads = tc.gradient(out, diff, head=head)
    return [([out], ph), (grads, ph + [head])]


def _kernel(outs, ins, how: str, threads: int) -> Kernel:
    low = tc.lower(outs, ins)
    func: LoweredFunc = low.func
    saved = loop_order._short_inner  # the loop order is the CPU schedule's first step
    if how == "old order":
        loop_order._short_inner = lambda k, j, most=None: False
    try:
        if how == "sched":
            func = schedule_cpu(func)
        # compiled as tc.build compiles: the CPU schedule (again, for "sched") before LLVM
        entry = compile_function(func, cache=None, disk=None, schedule=schedule_of("llvm"))
    finally:
        loop_order._short_inner = saved
    k = Kernel(func, entry, inputs=ins, outputs=outs, hidden=low.constants,
               single=len(outs) == 1, target="llvm")
    k.threads = threads
    return k


def _jax(case: cases_mod.Case, arrays, head):
    try:
        import jax
    except ImportError:
        return None, None
    xs = [jax.numpy.asarray(a) for a in arrays]
    diff = [n for n, x in enumerate(case.inputs) if x.diff]
    f = jax.jit(case.jax)

    def vjp(h, *args):
        def part(*d):
            full = list(args)
            for n, v in zip(diff, d):
                full[n] = v
            return case.jax(*full)
        return jax.vjp(part, *[args[n] for n in diff])[1](h)

    g = jax.jit(vjp)
    hj = jax.numpy.asarray(head)
    return (lambda: jax.block_until_ready(f(*xs))), (lambda: jax.block_until_ready(g(hj, *xs)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=None, help="case names (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=21)
    args = ap.parse_args(argv)
    all_cases = {c.name: c for c in cases_mod.all_cases()}
    names = args.cases or list(all_cases)
    rng = np.random.default_rng(0)
    hows = ["old order", "order", "sched"]
    print("| case | pass | " + " | ".join(hows) + " | numpy | jax | old/sched |")
    print("|---|---|" + "---|" * (len(hows) + 3))
    for name in names:
        case = all_cases[name]
        arrays = case.arrays(rng)
        (fwd, ins), (grads, gins) = _programs(case)
        out_shape = tuple(int(s.value) for s in fwd[0].shape)
        head = rng.standard_normal(out_shape).astype(np.float32)
        jf, jg = _jax(case, arrays, head) if case.jax is not None else (None, None)
        for what, outs, ins_, data, peer in (("fwd", fwd, ins, arrays, jf),
                                             ("grad", grads, gins, arrays + [head], jg)):
            times, results = {}, {}
            for how in hows:
                k = _kernel(outs, ins_, how, args.threads)
                results[how] = k(*data)
                times[how] = median_ms(lambda k=k, d=data: k(*d), args.repeat)
            for how in hows[1:]:  # same results up to float rounding (relative to the largest)
                got = [results[how]] if len(outs) == 1 else results[how]
                ref = [results["old order"]] if len(outs) == 1 else results["old order"]
                for a, b in zip(got, ref):
                    scale = float(np.max(np.abs(b))) if np.size(b) else 0.0
                    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * max(scale, 1.0),
                                               err_msg=f"{name} {what} {how}")
            npt = "—"
            if what == "fwd" and case.numpy is not None:
                npt = f"{median_ms(lambda c=case, a=arrays: c.numpy(*a), args.repeat):.3g}"
            elif case.numpy_grad is not None:
                t_np = median_ms(lambda c=case, a=arrays, h=head: c.numpy_grad(*a, h),
                                 args.repeat)
                npt = f"{t_np:.3g}"
            jt = "not installed" if peer is None else f"{median_ms(peer, args.repeat):.3g}"
            row = " | ".join(f"{times[h]:.3g}" for h in hows)
            print(f"| {name} | {what} | {row} | {npt} | {jt} | "
                  f"{times['old order'] / times['sched']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
