"""Quick speed check of the LLVM backend against NumPy.

Runs a 512^3 float32 matmul and a 1x16x32x32 conv2d (32x16x3x3 weights, padding 1), each
built with ``tc.build``, and prints the median time of several runs next to NumPy's (``@`` for
the matmul; an im2col ``tensordot`` for the convolution) and the ratio tecomp / NumPy (below 1
means tecomp is faster).  Both use every core the process may run on; tecomp's time on one
thread is shown too.  On a machine shared with other work the threaded figures vary a lot.

    python benchmarks/quick_llvm.py [--repeat 31]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import tecomp as tc


def median_time(fn, repeat: int) -> float:
    """Median wall time of ``fn`` over ``repeat`` runs after one warm-up run."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_case(rng: np.random.Generator):
    n = 512
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    k = tc.reduce_axis(n, name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    return "matmul 512^3 f32", tc.build(C, [A, B]), (a, b), lambda: a @ b, 2 * n**3


def conv_case(rng: np.random.Generator):
    X = tc.placeholder((1, 16, 32, 32), name="X")
    W = tc.placeholder((32, 16, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1)
    x = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)

    def numpy_conv():
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        return np.tensordot(w, cols, axes=([1, 2, 3], [1, 4, 5])).transpose(1, 0, 2, 3)

    flops = 2 * 32 * 16 * 9 * 32 * 32
    return "conv2d 1x16x32x32 k3 p1", tc.build(Y, [X, W]), (x, w), numpy_conv, flops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=31)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"cores: {os.cpu_count()}, tecomp threads: up to {len(os.sched_getaffinity(0))}")
    print(f"{'case':26s} {'tecomp ms':>10s} {'1 thread':>10s} {'numpy ms':>10s} {'ratio':>7s} "
          f"{'GFLOP/s':>8s}")
    for make in (matmul_case, conv_case):
        label, kernel, arrays, ref, flops = make(rng)
        np.testing.assert_allclose(kernel(*arrays), ref(), rtol=1e-3, atol=1e-3)
        # OpenBLAS's threads keep spinning for a while after a call and would take the cores
        # tecomp's threads need: let them go to sleep before timing tecomp
        time.sleep(0.5)
        t_tc = median_time(lambda k=kernel, a=arrays: k(*a), args.repeat)
        threads = kernel.threads
        kernel.threads = 1
        t_one = median_time(lambda k=kernel, a=arrays: k(*a), args.repeat)
        kernel.threads = threads
        t_np = median_time(ref, args.repeat)
        print(f"{label:26s} {t_tc * 1e3:10.3f} {t_one * 1e3:10.3f} {t_np * 1e3:10.3f} "
              f"{t_tc / t_np:7.2f} {flops / t_tc / 1e9:8.1f}")


if __name__ == "__main__":
    main()
