"""A/B of the vector width tecomp compiles for: the same kernels built for 256-bit and for
512-bit vectors (:func:`tecomp.host.with_vector_bits`), timed round-robin in one process.

    python -m benchmarks.ab_vector_width [--reps 9] [--threads 1]

Cases: matmul 512^3, GELU (tanh form) on 2048x2048, a float32 sum of squares of 16M elements.  On a
host without AVX-512 both builds are the same 256-bit code.  Every result is checked against
NumPy in float64 first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tecomp as tc  # noqa: E402
from benchmarks.bench_cpu_cases import gelu_tc  # noqa: E402
from benchmarks.bench_cpu_child import rel_error, round_robin  # noqa: E402
from tecomp.codegen.llvm import build_kernel  # noqa: E402
from tecomp.host import describe, with_vector_bits  # noqa: E402
from tecomp.lowering_api import lower  # noqa: E402
from tecomp.pipeline import schedule_of  # noqa: E402


def cases(rng: np.random.Generator):
    n = 512
    A, B = tc.placeholder((n, n), name="A"), tc.placeholder((n, n), name="B")
    k = tc.reduce_axis(n, name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    yield "matmul 512^3", [C], [A, B], [a, b], a.astype(np.float64) @ b, 2 * n ** 3
    X = tc.placeholder((2048, 2048), name="X")
    x = rng.standard_normal((2048, 2048)).astype(np.float32)
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    yield "GELU (tanh) 2048x2048", [gelu_tc(X)], [X], [x], want, 0
    m = 1 << 24
    V = tc.placeholder((m,), name="V")
    r = tc.reduce_axis(m, name="r")
    S = tc.compute((), lambda: tc.sum(V[r] * V[r], axis=r), name="ss")
    v = rng.standard_normal(m).astype(np.float32)
    yield "sum of squares 16M", [S], [V], [v], np.sum(v.astype(np.float64) ** 2), 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sample-ms", type=float, default=20.0)
    args = ap.parse_args(argv)
    host = describe()
    widths = sorted({with_vector_bits(host, w).vector_bits for w in (256, 512)})
    print(f"host: {host.vector_bits}-bit vectors, {host.cores} cores; widths compared: "
          f"{widths}; {args.threads} thread(s)")
    print("| case | " + " | ".join(f"{w}-bit ms" for w in widths) + " | 512/256 |")
    print("|---|" + "---|" * (len(widths) + 1))
    for name, outs, ins, arrays, want, flops in cases(np.random.default_rng(0)):
        fns = {}
        for w in widths:
            low = lower(outs, ins)
            kern = build_kernel(low.func, inputs=ins, outputs=outs, hidden=low.constants,
                                single=True, host=with_vector_bits(host, w),
                                schedule=schedule_of("llvm"))
            kern.threads = args.threads
            err = rel_error(kern(*arrays), want)
            assert err < 1e-4, f"{name} at {w} bits: error {err:.1e}"
            fns[w] = (lambda k=kern, xs=arrays: k(*xs))
        times = round_robin(fns, args.reps, args.sample_ms / 1e3)
        cells = [f"{times[w][0] * 1e3:.3g} ±{times[w][1] * 50:.0f}%"
                 + (f" ({flops / times[w][0] / 1e9:.0f} GFLOP/s)" if flops else "")
                 for w in widths]
        speed = times[widths[0]][0] / times[widths[-1]][0] if len(widths) > 1 else 1.0
        print(f"| {name} | " + " | ".join(cells) + f" | {1 / speed:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
