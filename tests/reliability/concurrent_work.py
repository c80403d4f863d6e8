"""The workload of ``test_concurrency.py``: a worker builds a shared program, its gradient and
a program of its own, and calls each with several shapes, checking against NumPy.

Run as a script (``python concurrent_work.py WORKER``) it does the same in a new process and
prints ``ok`` and the persistent cache directory it used.
"""

from __future__ import annotations

import sys

import numpy as np

import tecomp as tc


def programs(worker: int):
    n = tc.var("n")
    A = tc.placeholder((n, 6), name="A")
    k = tc.reduce_axis(6, name="k")
    shared = tc.compute((n,), lambda i: tc.sum(tc.exp(A[i, k]) * 0.5, axis=k), name="S")
    own = tc.compute((n, 6), lambda i, j: A[i, j] * float(worker + 2), name="P")
    (grad,) = tc.gradient(shared, [A])
    return A, [(shared, lambda a: (np.exp(a) * 0.5).sum(1)),
               (own, lambda a: a * (worker + 2)),
               (grad, lambda a: np.exp(a) * 0.5)]


def work(worker: int, calls: int) -> None:
    rng = np.random.default_rng(worker)
    A, progs = programs(worker)
    for out, want in progs:
        kern = tc.build(out, [A])
        for c in range(calls):
            a = rng.standard_normal((3 + c % 4, 6)).astype(np.float32)
            np.testing.assert_allclose(kern(a), want(a), rtol=2e-5, atol=1e-6)


if __name__ == "__main__":
    from tecomp.codegen.disk_cache import default_cache

    work(int(sys.argv[1]), 8)
    print("ok", default_cache().directory)
