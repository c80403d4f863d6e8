"""Cost of computing partly read stages whole (``passes/whole_stage.py``): A/B in one process.

    python benchmarks/whole_stage_cost.py

1. Every case of the CPU suite (``bench_cpu_cases.py``), forward and gradient: the loop
   programs with the rule and without it (the rule switched off by replacing its test with
   "never needed") are compared, and ``tc.lower`` is timed both ways (medians of 5,
   alternating).
2. The shape it exists for, at benchmark size: a 100000x64 gather from a 10000-row table
   read only at every other column (the stage is now computed whole, a buffer): call time
   with and without the rule (one thread, medians of 15, alternating).
"""
import sys
import time
from pathlib import Path

import numpy as np

import tecomp as tc
from tecomp.loop_printer import format_func
from tecomp.passes import absorb_crop, inline

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cpu_cases as cases  # noqa: E402

RULE = inline.needs_whole_domain


def _switch(on: bool) -> None:
    test = RULE if on else (lambda p, body: False)
    inline.needs_whole_domain = test
    absorb_crop.needs_whole_domain = test


def _programs():
    for case in cases.all_cases():
        ins = [tc.placeholder(x.shape, name=x.name, dtype=x.dtype) for x in case.inputs]
        out = case.tecomp(*ins)
        wrt = [t for t, x in zip(ins, case.inputs) if x.diff]
        yield case.name, [out], ins
        yield case.name + " (gradient)", list(tc.gradient(out, wrt)), ins


def _lower_times(outs, ins):
    texts, times = {}, {True: [], False: []}
    for _ in range(5):
        for on in (True, False):
            _switch(on)
            t = time.perf_counter()
            func = tc.lower(outs, ins).func
            times[on].append(time.perf_counter() - t)
            texts[on] = format_func(func)
    _switch(True)
    return texts[True] == texts[False], np.median(times[True]), np.median(times[False])


def main() -> None:
    tc.config.cache = False  # builds with the rule off must not load those with it on
    same = 0
    total = {True: 0.0, False: 0.0}
    for name, outs, ins in _programs():
        eq, a, b = _lower_times(outs, ins)
        same += eq
        total[True] += a
        total[False] += b
        print(f"{name:48s} {'same' if eq else 'DIFFERENT'} program; lower {a * 1e3:7.1f} ms "
              f"with the rule, {b * 1e3:7.1f} ms without")
    print(f"{same} programs unchanged; lowering in all {total[True]:.2f} s with the rule, "
          f"{total[False]:.2f} s without")

    n = tc.var("n")
    E = tc.placeholder((10000, 64), name="E")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    G = tc.compute((n, 64), lambda i, j: E[idx[i], j] * 2.0, name="G")
    H = tc.compute((n, 32), lambda i, j: G[i, 2 * j] + 1.0, name="H")
    rng = np.random.default_rng(0)
    e = rng.standard_normal((10000, 64)).astype(np.float32)
    ix = rng.integers(0, 10000, 100000)
    kernels = {}
    for on in (True, False):
        _switch(on)
        kernels[on] = tc.build(H, [E, idx])
        kernels[on].threads = 1
    _switch(True)
    ts = {True: [], False: []}
    for _ in range(15):
        for on, k in kernels.items():
            t = time.perf_counter()
            k(e, ix)
            ts[on].append(time.perf_counter() - t)
    a, b = np.median(ts[True]), np.median(ts[False])
    print(f"gather read at every other column: {a * 1e3:.2f} ms computed whole, "
          f"{b * 1e3:.2f} ms inlined, ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
