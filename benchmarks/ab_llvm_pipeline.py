"""A/B of LLVM pipeline settings on the CPU benchmark's default suite: compile time and
kernel time of each program's forward and gradient, built both ways in one process.

* ``--variant unroll``: LLVM's loop unroller (``tecomp.codegen.llvm.jit.UNROLL``) on / off;
* ``--variant O2``: the O3 pipeline / the O2 pipeline (no non-trivial loop unswitching,
  argument promotion or call-site splitting), code generation unchanged;
* ``--variant fold``: the emitter's folding of constant integer arithmetic and its short
  forms of ``//`` and ``%`` by positive constants on / off
  (``tecomp.codegen.llvm.emit_expr.int_constant``);
* ``--variant k2``: four reduction steps a trip of the register tiles' loop / two
  (``tecomp.passes.schedule.cpu.microkernel.K_UNROLL``);
* ``--variant rolled``: the register tiles' reduction loops left rolled by LLVM's unroller
  (``tecomp.codegen.llvm.emit.KEEP_TILE_LOOPS``) on / off;
* ``--variant outer``: loops of constant bounds around a loop LLVM would not unroll whole
  left rolled (``tecomp.codegen.llvm.emit.KEEP_OUTER_LOOPS``) on / off;
* ``--variant lsr``: LLVM's loop strength reduction (a pass of the code generator's IR
  pipeline) on / off (LLVM's ``-disable-lsr``).

    python -m benchmarks.ab_llvm_pipeline [--variant unroll] [--reps 9] [--threads 1]
                                          [--cases conv,attention]

Each build runs with the in-process kernel, body and bounds-proof caches cleared and the
persistent cache off, so both variants compile everything; *compile* is the wall time of
``tc.build``.  Results are checked against the first variant's build, and the kernels are
timed round-robin in one process (medians; one thread pinned to one CPU by default).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("TECOMP_CACHE", "0")

import tecomp as tc  # noqa: E402
from benchmarks.bench_cpu_cases import all_cases  # noqa: E402
from benchmarks.bench_cpu_child import round_robin  # noqa: E402
from tecomp.codegen.cache import KERNELS  # noqa: E402
from tecomp.codegen.llvm import jit, parts  # noqa: E402
from tecomp.proof_cache import PROVEN  # noqa: E402


def _switch(variant: str, base: bool):
    """Set ``variant`` to its base (True) or other setting; return the undo."""
    if variant == "unroll":
        saved = jit.UNROLL
        jit.UNROLL = base
        return lambda: setattr(jit, "UNROLL", saved)
    if variant == "k2":
        from tecomp.passes.schedule.cpu import microkernel

        steps = microkernel.K_UNROLL
        if not base:
            microkernel.K_UNROLL = 2
        return lambda: setattr(microkernel, "K_UNROLL", steps)
    if variant == "fold":
        from tecomp.codegen.llvm import emit_expr

        found = emit_expr.int_constant
        if not base:
            emit_expr.int_constant = lambda v: None
        return lambda: setattr(emit_expr, "int_constant", found)
    if variant == "rolled":
        from tecomp.codegen.llvm import emit

        kept = emit.KEEP_TILE_LOOPS
        emit.KEEP_TILE_LOOPS = base
        return lambda: setattr(emit, "KEEP_TILE_LOOPS", kept)
    if variant == "outer":
        from tecomp.codegen.llvm import emit

        kept = emit.KEEP_OUTER_LOOPS
        emit.KEEP_OUTER_LOOPS = base
        return lambda: setattr(emit, "KEEP_OUTER_LOOPS", kept)
    if variant == "lsr":
        jit.set_option("-disable-lsr", not base)
        return lambda: jit.set_option("-disable-lsr", False)
    optimise = jit.optimise
    if not base:
        jit.optimise = lambda mod, speed_level=3, host=None: optimise(mod, 2, host)
    return lambda: setattr(jit, "optimise", optimise)


def _build(case, variant: str, base: bool):
    """Forward and gradient kernels of ``case`` with ``variant`` at its base or other
    setting, and the seconds their builds took."""
    undo = _switch(variant, base)
    KERNELS.clear()
    parts.BODIES.clear()
    PROVEN.clear()  # the bounds proofs too: the second build must not find the first's
    try:
        ph = [tc.placeholder(x.shape, name=x.name, dtype=x.dtype) for x in case.inputs]
        out = case.tecomp(*ph)
        H = tc.placeholder(tuple(out.shape), name="head", dtype=out.dtype)
        diff = [p for p, x in zip(ph, case.inputs) if x.diff]
        grads = tc.gradient(out, diff, head=H)
        t0 = time.perf_counter()
        fwd = tc.build(out, ph)
        t1 = time.perf_counter()
        grad = tc.build(grads, ph + [H])
        t2 = time.perf_counter()
    finally:
        undo()
    return fwd, grad, t1 - t0, t2 - t1


def _close(got, want) -> bool:
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    for g, w in zip(got, want):
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        if float(np.abs(np.asarray(g, np.float64) - w).max(initial=0.0)) / scale > 1e-3:
            return False
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="unroll",
                    choices=("unroll", "O2", "fold", "k2", "rolled", "outer", "lsr"))
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names")
    args = ap.parse_args(argv)
    if args.threads == 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    import platform

    from tecomp.host import describe

    h = describe()
    print(f"# {platform.processor() or platform.machine()}, {h.vector_bits}-bit vectors, "
          f"{args.threads} thread(s), medians of {args.reps} rounds")
    a, b = {"O2": ("O3", "O2"), "k2": ("k4", "k2")}.get(args.variant, ("on", "off"))
    print(f"| case | compile {a} | compile {b} | fwd {a} | fwd {b}/{a} | grad {a} "
          f"| grad {b}/{a} |")
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    ratios: dict[str, list[float]] = {"compile": [], "fwd": [], "grad": []}
    wanted = [c for c in args.cases.split(",") if c]
    for case in all_cases():
        if case.suite != "default" or (wanted and not any(w in case.name for w in wanted)):
            continue
        arrays = case.arrays(rng)
        built = {v: _build(case, args.variant, v == "base") for v in ("base", "other")}
        fwd0, grad0 = built["base"][:2]
        head = np.ones(tuple(int(d) for d in fwd0(*arrays).shape), np.float32) \
            if np.ndim(fwd0(*arrays)) else np.float32(1.0)
        want_f, want_g = fwd0(*arrays), grad0(*arrays, head)
        fns = {}
        for v, (fwd, grad, _, _) in built.items():
            fwd.threads = grad.threads = args.threads
            assert _close(fwd(*arrays), want_f) and _close(grad(*arrays, head), want_g), \
                (case.name, v)
            fns[f"{v} fwd"] = lambda k=fwd, a=arrays: k(*a)
            fns[f"{v} grad"] = lambda k=grad, a=arrays, h=head: k(*a, h)
        times = round_robin(fns, args.reps, 0.1)
        c_on = sum(built["base"][2:])
        c_off = sum(built["other"][2:])
        f_on, g_on = times["base fwd"][0], times["base grad"][0]
        rf, rg = times["other fwd"][0] / f_on, times["other grad"][0] / g_on
        ratios["compile"].append(c_off / c_on)
        ratios["fwd"].append(rf)
        ratios["grad"].append(rg)
        print(f"| {case.name} | {c_on:.2f} s | {c_off:.2f} s | {f_on * 1e3:.2f} ms | {rf:.3f} "
              f"| {g_on * 1e3:.2f} ms | {rg:.3f} |", flush=True)
    geo = {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in ratios.items() if v}
    print(f"\ngeometric mean, {b} / {a}: compile {geo.get('compile', 0):.3f}, "
          f"forward {geo.get('fwd', 0):.3f}, gradient {geo.get('grad', 0):.3f}")


if __name__ == "__main__":
    main()
