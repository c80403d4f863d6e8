"""Time the integer solvers on the systems of a conv2d gradient.

Conv2d, NCHW, stride 2, dilation 2, kernel 3x3, padding 1:

    Y[n, o, oh, ow] = sum_{c, rh, rw} X[n, c, 2*oh + 2*rh - 1, 2*ow + 2*rw - 1] * W[o, c, rh, rw]

The input gradient reads ``dY`` at the points where the index map hits ``dX[nx, cx, h, w]``:
the equations ``(nx, cx, h, w) = (n, c, 2*oh + 2*rh - 1, 2*ow + 2*rw - 1)`` in the 7
unknowns ``(n, o, oh, ow, c, rh, rw)``.  The weight gradient solves
``(ow_, cw, kh, kw) = (o, c, rh, rw)``.  Each row of the table is the median time of one
call, in microseconds.

Run:  python benchmarks/bench_solvers.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tecomp.solvers import Affine, solve_integer_system, solve_parametric

UNKNOWNS = ["n", "o", "oh", "ow", "c", "rh", "rw"]
# rows: nx = n, cx = c, h = 2*oh + 2*rh - 1, w = 2*ow + 2*rw - 1
A_INPUT = [
    [1, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 1, 0, 0],
    [0, 0, 2, 0, 0, 2, 0],
    [0, 0, 0, 2, 0, 0, 2],
]
B_INPUT_OFFSET = [0, 0, -1, -1]
# rows: o_w = o, c_w = c, kh = rh, kw = rw
A_WEIGHT = [
    [0, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 1, 0, 0],
    [0, 0, 0, 0, 0, 1, 0],
    [0, 0, 0, 0, 0, 0, 1],
]

def median_us(fn: Callable[[], object], repeat: int) -> float:
    inner = 20
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner * 1e6)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()

    b_num = [1, 2, 7, 9]
    b_sym = [Affine.var(v) + k for v, k in zip(["nx", "cx", "h", "w"], [0, 0, 1, 1])]
    b_w = [Affine.var(v) for v in ["ow_", "cw", "kh", "kw"]]

    rows: list[tuple[str, Callable[[], object]]] = [
        ("solve_integer_system  input grad 4x7", lambda: solve_integer_system(A_INPUT, b_num)),
        ("solve_integer_system  weight grad 4x7",
         lambda: solve_integer_system(A_WEIGHT, [1, 2, 0, 2])),
        ("solve_parametric      input grad (b = nx, cx, h+1, w+1)",
         lambda: solve_parametric(A_INPUT, b_sym)),
        ("solve_parametric      weight grad", lambda: solve_parametric(A_WEIGHT, b_w)),
    ]
    try:
        from sympy import ZZ, Matrix
        from sympy.matrices.normalforms import smith_normal_decomp

        M = Matrix(A_INPUT)
        rows.append(("(reference) sympy smith_normal_decomp 4x7",
                     lambda: smith_normal_decomp(M, domain=ZZ)))
    except ImportError:  # pragma: no cover - sympy is a dependency
        pass

    width = max(len(name) for name, _ in rows)
    print(f"{'operation':<{width}}  median µs/call")
    print("-" * (width + 16))
    for name, fn in rows:
        print(f"{name:<{width}}  {median_us(fn, args.repeat):10.1f}")


if __name__ == "__main__":
    main()
