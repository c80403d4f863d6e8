"""Builds and calls of the same and of different kernels at once: from 8 threads of one process
and from 4 processes sharing one persistent cache directory, twice (the second round loads
what the first stored).  Every result is checked against NumPy, and the cache is left with
only whole, valid entries."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np

import tecomp as tc
from tecomp.codegen import disk_cache as dc
from tecomp.codegen.cache import KERNELS

WORKLOAD = textwrap.dedent("""
    import numpy as np
    import tecomp as tc

    def programs(worker):
        n = tc.var("n")
        A = tc.placeholder((n, 6), name="A")
        k = tc.reduce_axis(6, name="k")
        shared = tc.compute((n,), lambda i: tc.sum(tc.exp(A[i, k]) * 0.5, axis=k), name="S")
        own = tc.compute((n, 6), lambda i, j: A[i, j] * float(worker + 2), name="P")
        (grad,) = tc.gradient(shared, [A])
        return A, [(shared, lambda a: (np.exp(a) * 0.5).sum(1)),
                   (own, lambda a: a * (worker + 2)),
                   (grad, lambda a: np.exp(a) * 0.5)]

    def work(worker, calls):
        rng = np.random.default_rng(worker)
        A, progs = programs(worker)
        for out, want in progs:
            kern = tc.build(out, [A])
            for c in range(calls):
                a = rng.standard_normal((3 + c % 4, 6)).astype(np.float32)
                np.testing.assert_allclose(kern(a), want(a), rtol=2e-5, atol=1e-6)
        return True
""")

exec(WORKLOAD)  # the same workload in this process's threads  # noqa: S102

CHILD = WORKLOAD + textwrap.dedent("""
    import sys
    from tecomp.codegen.disk_cache import default_cache
    work(int(sys.argv[1]), 20)
    print("ok", default_cache().directory)
""")


def test_eight_threads_build_and_call_same_and_different_kernels(tmp_path):
    old = dc.set_default_cache(tmp_path)
    errors: list[BaseException] = []
    try:
        for _ in range(2):
            KERNELS.clear()
            start = threading.Barrier(8)

            def run(worker: int) -> None:
                try:
                    start.wait()
                    work(worker % 3, 25)  # noqa: F821 - defined by exec(WORKLOAD)
                except BaseException as err:  # noqa: BLE001 - reported below
                    errors.append(err)

            threads = [threading.Thread(target=run, args=(w,)) for w in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors[0]
    finally:
        dc.set_default_cache(old)
    _all_entries_valid(tmp_path)


def test_four_processes_share_one_cache_directory(tmp_path):
    import os

    env = dict(os.environ, TECOMP_CACHE_DIR=str(tmp_path))
    for _ in range(2):
        procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(w % 2)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for w in range(4)]
        outs = [p.communicate(timeout=240) for p in procs]
        assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
        assert [o.split() for o, _ in outs] == [["ok", str(tmp_path)]] * 4
    _all_entries_valid(tmp_path)


def _all_entries_valid(directory) -> None:
    files = [p for p in directory.rglob("*") if p.is_file()]
    assert files, "nothing was stored"
    for p in files:
        assert p.suffix == ".bin", f"left behind: {p.name}"
        assert dc.decode(p.read_bytes(), p.stem) is not None, f"invalid entry {p.name}"


def test_threads_and_config_see_one_kernel_bound():
    # the in-memory cache stays within its bound while threads build distinct programs
    size = tc.config.kernel_cache_size
    try:
        tc.config.kernel_cache_size = 3
        A = tc.placeholder((4,), name="A")

        def run(w: int) -> None:
            for s in range(4):
                out = tc.compute((4,), lambda i, f=float(w * 10 + s): A[i] + f, name="T")
                got = tc.build(out, [A])(np.zeros(4, np.float32))
                assert got.tolist() == [w * 10 + s] * 4

        threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(KERNELS) <= 3
    finally:
        tc.config.kernel_cache_size = size
