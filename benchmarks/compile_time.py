"""Compile time of the conv2d gradient in fresh processes: cold, and from the persistent cache.

    python benchmarks/compile_time.py              # 1 cold process, then 15 warm ones
    python benchmarks/compile_time.py --runs 31 --bytecode off

The case: ``X`` 1×16×32×32, ``W`` 32×16×3×3 (float32), ``Y = tc.ops.conv2d(X, W, stride=1,
padding=1)``, a head ``H`` of ``Y``'s shape, ``gX, gW = tc.gradient(Y, [X, W], H)`` (zero
elimination on) and ``tc.build([gX, gW], [X, W, H])``.

Every measurement is a new Python process (``python this_file --child``) with its own
persistent cache directory, a temporary one for the whole run (``XDG_CACHE_HOME``, which
:mod:`tecomp.codegen.disk_cache` reads).  The first process finds the cache empty and
compiles (the *cold* compile); the next ``--runs`` processes find the kernel, the parallel-loop
runtime and the bounds proof there.  Each child times, with ``time.perf_counter``: ``import
tecomp``; ``tc.gradient`` (autodiff and zero elimination); ``tc.build`` (lowering, bounds
proof or its cached verdict, then the kernel: compiled or loaded); the first call of the
kernel.  *compile* is gradient + build, the figure of issue #6 (``import tecomp`` is not in
it); *compile CPU* is the CPU time of the same span (``time.process_time``), a steadier figure
on a loaded machine.  A warm child that misses the persistent cache (the source changed during
the run) is left out with a warning; the script fails when all do.

Bytecode: an installed package runs from compiled bytecode, so by default the children write
and read it under a temporary ``PYTHONPYCACHEPREFIX`` (the source tree is left alone), warmed
by one extra process first; ``--bytecode off`` measures source compilation as well (what a
``PYTHONDONTWRITEBYTECODE`` environment sees).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PHASES = ("import", "gradient", "build", "first call", "compile", "compile CPU")


def child() -> None:
    """One measurement in this (fresh) process; prints a JSON object."""
    t0 = time.perf_counter()
    import numpy as np

    import tecomp as tc
    from tecomp.codegen.disk_cache import default_cache

    t1 = time.perf_counter()
    X = tc.placeholder((1, 16, 32, 32), name="X")
    W = tc.placeholder((32, 16, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=1, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    t2, c2 = time.perf_counter(), time.process_time()
    gX, gW = tc.gradient(Y, [X, W], H)
    t3 = time.perf_counter()
    k = tc.build([gX, gW], [X, W, H])
    t4, c4 = time.perf_counter(), time.process_time()
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(tuple(int(d.value) for d in t.shape)).astype(np.float32)
            for t in (X, W, H)]
    t5 = time.perf_counter()
    k(*args)
    t6 = time.perf_counter()
    store = default_cache()
    print(json.dumps({"import": t1 - t0, "gradient": t3 - t2, "build": t4 - t3,
                      "first call": t6 - t5, "compile": t4 - t2, "compile CPU": c4 - c2,
                      "disk hits": store.hits if store else 0,
                      "disk misses": store.misses if store else -1}))


def run_child(env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="warm processes (default 15)")
    ap.add_argument("--bytecode", choices=("on", "off"), default="on")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.child:
        child()
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if opts.bytecode == "on":
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pyc")
            warm_env = dict(env, XDG_CACHE_HOME=os.path.join(tmp, "bytecode-warm-up"))
            run_child(warm_env)  # writes the bytecode; its kernel cache is thrown away
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        cold = run_child(env)
        warm = [run_child(env) for _ in range(opts.runs)]
    missed = [w for w in warm if w["disk misses"] != 0 or w["disk hits"] < 1]
    warm = [w for w in warm if w not in missed]
    if missed:  # the source changed during the run (the keys cover it), or the cache failed
        print(f"warning: {len(missed)} warm process(es) missed the persistent cache (hits, "
              f"misses: {[(w['disk hits'], w['disk misses']) for w in missed]}); left out")
    if not warm:
        print("error: every warm process missed the persistent cache")
        return 1
    print(f"conv2d 1x16x32x32 * 32x16x3x3 gradient; bytecode {opts.bytecode}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'ms':<12}{'cold':>9}{'warm median':>13}{'warm min':>10}{'warm max':>10}")
    for p in PHASES:
        xs = [w[p] * 1e3 for w in warm]
        print(f"{p:<12}{cold[p] * 1e3:>9.1f}{statistics.median(xs):>13.1f}"
              f"{min(xs):>10.1f}{max(xs):>10.1f}")
    print(f"(compile = gradient + build, wall clock; compile CPU: its CPU time, less sensitive "
          f"to other load; {len(warm)} warm processes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
