"""Builds and calls of the same and of different kernels at once: from 8 threads of one process
and from 4 processes sharing one persistent cache directory, twice (the second round loads
what the first stored).  Every result is checked against NumPy, and the cache is left with
only whole, valid entries."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

import tecomp as tc
from tecomp.codegen import disk_cache as dc
from tecomp.codegen.cache import KERNELS

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from concurrent_work import work  # noqa: E402


def test_eight_threads_build_and_call_same_and_different_kernels(tmp_path):
    old = dc.set_default_cache(tmp_path)
    errors: list[BaseException] = []
    try:
        for _ in range(2):
            KERNELS.clear()
            start = threading.Barrier(8)
            threads = [threading.Thread(target=_worker, args=(w, start, errors))
                       for w in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors[0]
    finally:
        dc.set_default_cache(old)
    _all_entries_valid(tmp_path)


def _worker(w: int, start: threading.Barrier, errors: list[BaseException]) -> None:
    try:
        start.wait()
        work(w % 3, 12)
    except BaseException as err:  # noqa: BLE001 - reported by the test
        errors.append(err)


def test_four_processes_share_one_cache_directory(tmp_path):
    env = dict(os.environ, TECOMP_CACHE_DIR=str(tmp_path))
    for _ in range(2):
        procs = [subprocess.Popen([sys.executable, str(HERE / "concurrent_work.py"), str(w % 2)],
                                  env=env,
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
