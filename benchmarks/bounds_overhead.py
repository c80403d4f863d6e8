"""Cost of the default bounds checks: a gather and its scatter gradient, checked vs unchecked.

    python benchmarks/bounds_overhead.py

One thread; medians of 15 alternating runs in the same process.
"""
import time

import numpy as np

import tecomp as tc

n, m = tc.var("n"), tc.var("m")
E = tc.placeholder((m, 64), name="E")
idx = tc.placeholder((n,), name="idx", dtype="int64")
G = tc.compute((n, 64), lambda i, j: E[idx[i], j] * 2.0, name="G")
(dE,) = tc.gradient(G, [E])
rng = np.random.default_rng(0)
e = rng.standard_normal((10000, 64)).astype(np.float32)
ix = rng.integers(0, 10000, 100000)
for label, outs in (("gather", G), ("scatter (gradient)", dE)):
    ks = {c: tc.build(outs, [E, idx], check_bounds=c) for c in (True, False)}
    for k in ks.values():
        k.threads = 1
    ts = {True: [], False: []}
    for _ in range(15):
        for c, k in ks.items():
            t = time.perf_counter()
            k(e, ix)
            ts[c].append(time.perf_counter() - t)
    a, b = np.median(ts[True]), np.median(ts[False])
    print(f"{label}: checked {a*1e3:.2f} ms, unchecked {b*1e3:.2f} ms, ratio {a/b:.2f}")
