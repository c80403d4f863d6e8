"""Outlined ``"parallel"`` loops run on several threads and give the serial results."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen import kernel as kernel_module
from tecomp.codegen.llvm import build_kernel
from tecomp.codegen.llvm.emit import emit_module
from tecomp.errors import ArgumentError
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LetStmt, LoweredFunc, Seq, Store

n, m = E.Var("n"), E.Var("m")
i, j, k = E.Var("i"), E.Var("j"), E.Var("k")
ZERO = E.Const(0, "int64")


@pytest.fixture(autouse=True)
def always_threaded(monkeypatch):
    monkeypatch.setattr(kernel_module, "PARALLEL_MIN_BYTES", 0)


def load(buf, *idx):
    return BufferLoad(buf, tuple(idx), buf.dtype)


def test_parallel_loop_is_outlined():
    x = Buffer("X", (n,), "float32", "input")
    y = Buffer("Y", (n,), "float32", "output")
    body = For(i, ZERO, n, Store(y, (i,), load(x, i) + 1.0), kind="parallel")
    kern = build_kernel(LoweredFunc("inc", (x,), (y,), (n,), body))
    assert "@tecomp_parallel_for" in kern.source and "inc.par0" in kern.source
    serial = build_kernel(LoweredFunc("inc", (x,), (y,), (n,), body), threads=False)
    assert "tecomp_parallel_for" not in serial.source


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("rows", [0, 1, 2, 5, 67])
def test_thread_counts_and_trip_counts(rng, threads, rows):
    A = tc.placeholder((n, 12), name="A")
    B = tc.placeholder((12, 9), name="B")
    r = tc.reduce_axis(12, name="r")
    C = tc.compute((n, 9), lambda p, q: tc.sum(A[p, r] * B[r, q], axis=r), name="C")
    kern = tc.build(C, [A, B])
    assert "tecomp_parallel_for" in kern.source
    kern.threads = threads
    a = rng.standard_normal((rows, 12))
    a = a.astype(np.float32)
    b = rng.standard_normal((12, 9)).astype(np.float32)
    np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_strided_parallel_loop_with_offset(rng):
    y = Buffer("Y", (n,), "int64", "output")
    body = Seq((For(i, ZERO, n, Store(y, (i,), E.Const(-1, "int64"))),
                For(j, E.Const(3, "int64"), n - 1, Store(y, (j,), j * 10), step=4,
                    kind="parallel")))
    kern = build_kernel(LoweredFunc("strided", (), (y,), (n,), body))
    for threads in (1, 2, 5):
        kern.threads = threads
        for size in (0, 4, 5, 8, 30):
            want = [-1] * size
            for q in range(3, size - 1, 4):
                want[q] = q * 10
            assert kern(size).tolist() == want


def test_captures_temps_lets_and_private_locals(rng):
    # stage 1 (parallel) fills a heap temp; stage 2 (parallel) reads it with a let-bound float
    # scale and a per-iteration local accumulator and temp row
    x = Buffer("X", (n, m), "float64", "input")
    t = Buffer("T", (n, m), "float64", "temp")
    y = Buffer("Y", (n,), "float64", "output")
    acc = Buffer("acc", (), "float64", "local")
    row = Buffer("row", (m,), "float64", "temp")
    s = E.Var("s", "float64")
    stage1 = For(i, ZERO, n, For(j, ZERO, m, Store(t, (i, j), load(x, i, j) * 2.0)),
                 kind="parallel")
    stage2 = For(i, ZERO, n, Allocate(acc, Allocate(row, Seq((
        For(j, ZERO, m, Store(row, (j,), load(t, i, j) * E.Var("s", "float64"))),
        Store(acc, (), E.Const(0.0, "float64")),
        For(j, ZERO, m, Store(acc, (), load(row, j), reduce="sum")),
        Store(y, (i,), load(acc)))))), kind="parallel")
    body = Allocate(t, LetStmt(s, E.cast(m, "float64") * 0.5, Seq((stage1, stage2))))
    kern = build_kernel(LoweredFunc("two", (x,), (y,), (n, m), body))
    a = rng.standard_normal((41, 7))
    for threads in (1, 2, 4):
        kern.threads = threads
        np.testing.assert_allclose(kern(a), (a * 2 * 3.5).sum(axis=1), rtol=1e-12)


def test_nested_parallel_loops_run_inner_serially(rng):
    y = Buffer("Y", (n, m), "int32", "output")
    body = For(i, ZERO, n, For(j, ZERO, m, Store(y, (i, j), E.cast(i * 100 + j, "int32")),
                               kind="parallel"), kind="parallel")
    kern = build_kernel(LoweredFunc("nest", (), (y,), (n, m), body))
    kern.threads = 3
    got = kern(7, 5)
    np.testing.assert_array_equal(got, np.add.outer(np.arange(7) * 100, np.arange(5)))
    assert "nest.par0" in kern.source and "nest.par1" not in kern.source


def test_out_of_memory_in_a_thread_is_reported():
    y = Buffer("Y", (n,), "float32", "output")
    t = Buffer("T", (m,), "float32", "temp")
    body = For(i, ZERO, n, Allocate(t, Seq((
        For(j, ZERO, m, Store(t, (j,), E.cast(j, "float32"))),
        Store(y, (i,), load(t, m - 1))))), kind="parallel")
    kern = build_kernel(LoweredFunc("oomp", (), (y,), (n, m), body))
    kern.threads = 2
    assert kern(4, 3).tolist() == [2.0] * 4
    with pytest.raises(ArgumentError, match="out of memory"):
        kern(4, 2**50)


def test_e2e_programs_with_threads(rng):
    X = tc.placeholder((n, 10), name="X")
    sm = tc.ops.softmax(X)
    kern = tc.build(sm, [X])
    x = rng.standard_normal((33, 10)).astype(np.float32)
    kern.threads = 1
    one = kern(x)
    kern.threads = 4
    np.testing.assert_allclose(kern(x), one, rtol=1e-6)
    np.testing.assert_allclose(one, tc.evaluate([sm], {X: x})[0], rtol=1e-5)


def test_oversubscribed_concurrent_calls(rng):
    """More helper threads than cores, from several calling threads at once: late helpers find
    no chunk left (the callers did the work) and every result is still complete."""
    import threading

    A = tc.placeholder((n, 33), name="A")
    B = tc.compute((n, 33), lambda p, q: A[p, q] * 2.0 + 1.0, name="B")
    kern = tc.build(B, [A])
    kern.threads = 16
    a = rng.standard_normal((301, 33)).astype(np.float32)
    want = a * 2 + 1
    bad: list[int] = []

    def run() -> None:
        for _ in range(40):
            if not np.array_equal(kern(a), want):
                bad.append(1)

    ts = [threading.Thread(target=run) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_kernel_code_freed_right_after_threaded_calls(rng):
    """A kernel dropped right after a call whose helpers may not have run yet: the helpers run
    only the permanent runtime once every chunk is done, so freeing the code is safe."""
    import gc

    x = Buffer("X", (n,), "float32", "input")
    y = Buffer("Y", (n,), "float32", "output")
    a = rng.standard_normal(5000).astype(np.float32)
    for c in range(12):
        body = For(i, ZERO, n, Store(y, (i,), load(x, i) + float(c)), kind="parallel")
        kern = build_kernel(LoweredFunc(f"drop{c}", (x,), (y,), (n,), body), cache=None)
        kern.threads = 16
        np.testing.assert_array_equal(kern(a), a + c)
        del kern
        gc.collect()


def test_threaded_calls_in_a_forked_child(rng):
    """The worker pool is reset in a child process (no worker threads survive fork)."""
    import os

    A = tc.placeholder((n, 40), name="A")
    B = tc.compute((n, 40), lambda p, q: A[p, q] * 3.0, name="B")
    kern = tc.build(B, [A])
    kern.threads = 4
    a = rng.standard_normal((500, 40)).astype(np.float32)
    np.testing.assert_array_equal(kern(a), a * 3)  # the parent's pool now has workers
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when the threaded call is right
        ok = False
        try:
            ok = all(np.array_equal(kern(a), a * 3) for _ in range(5))
        finally:
            os._exit(0 if ok else 1)
    from forked import wait_for

    status = wait_for(pid, 60, "the forked child did not finish its threaded calls")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    np.testing.assert_array_equal(kern(a), a * 3)


def test_loops_equal_up_to_names_share_one_body(rng):
    """Two parallel loops that differ only in the names of their variables and buffers are
    one body function called twice; a loop with another constant gets its own body."""
    x = Buffer("X", (n,), "float32", "input")
    y = Buffer("Y", (n,), "float32", "input")
    a = Buffer("A", (n,), "float32", "output")
    b = Buffer("B", (n,), "float32", "output")
    c = Buffer("C", (n,), "float32", "output")
    body = Seq((For(i, ZERO, n, Store(a, (i,), load(x, i) * 2.0 + 1.0), kind="parallel"),
                For(j, ZERO, n, Store(b, (j,), load(y, j) * 2.0 + 1.0), kind="parallel"),
                For(k, ZERO, n, Store(c, (k,), load(y, k) * 3.0 + 1.0), kind="parallel")))
    func = LoweredFunc("twice", (x, y), (a, b, c), (n,), body)
    text = str(emit_module(func, threads=True))
    defined = {f for f in ("twice.par0", "twice.par1", "twice.par2")
               if f'define internal i32 @"{f}"(' in text}
    assert defined == {"twice.par0", "twice.par2"}
    kern = build_kernel(func)
    kern.threads = 2
    xs = rng.standard_normal(1000).astype(np.float32)
    ys = rng.standard_normal(1000).astype(np.float32)
    ra, rb, rc = kern(xs, ys)
    np.testing.assert_allclose(ra, xs * 2 + 1, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rb, ys * 2 + 1, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rc, ys * 3 + 1, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity")
                    or len(__import__("os").sched_getaffinity(0)) < 2,
                    reason="binds workers on Linux with two CPUs or more")
def test_workers_are_bound_to_distinct_cpus_of_their_set():
    """A fresh process's workers each run on one CPU of the set they started with, distinct
    while there are CPUs enough, the first one on the CPU after the one its creator ran on
    (never on the caller's own while there are others); the calling thread is left unbound
    (its set unchanged)."""
    import json
    import subprocess
    import sys

    script = """
import json, os
import numpy as np, tecomp as tc
from tecomp.codegen import kernel
kernel.PARALLEL_MIN_BYTES = 0
A = tc.placeholder((500, 40), name="A")
k = tc.build(tc.compute((500, 40), lambda p, q: A[p, q] * 3.0, name="B"), [A])
k.threads = len(os.sched_getaffinity(0))
before = set(os.listdir("/proc/self/task"))
a = np.ones((500, 40), np.float32)
import ctypes
getcpu = ctypes.CDLL(None).sched_getcpu
cpu_before = getcpu()
assert np.array_equal(k(a), a * 3)
cpu_after = getcpu()
def allowed(path):
    line = [x for x in open(path) if x.startswith("Cpus_allowed_list")][0]
    return line.split(":")[1].strip()
import time
deadline = time.monotonic() + 10  # a worker binds itself when it first runs, which may
while True:                       # be after the call it was started for has returned
    workers = [allowed(f"/proc/self/task/{t}/status")
               for t in set(os.listdir("/proc/self/task")) - before]
    if all(w.isdigit() for w in workers) or time.monotonic() > deadline:
        break
    time.sleep(0.01)
print(json.dumps({"workers": workers, "ran_on": [cpu_before, cpu_after],
                  "caller": allowed("/proc/self/status"),
                  "cpus": sorted(os.sched_getaffinity(0))}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    cpus = got["cpus"]
    assert got["workers"], "the threaded call started no worker"
    homes = [int(x) for x in got["workers"]]  # one CPU each: "3", not "0-3"
    assert all(h in cpus for h in homes)
    assert len(set(homes)) == len(homes)
    assert got["caller"] != str(homes[0])
    before, after = got["ran_on"]
    if len(cpus) > 1 and before == after:  # the caller stayed on one CPU through the call
        # that made the workers: the first is on the next CPU of the set, cyclically
        assert homes[0] == cpus[(cpus.index(before) + 1) % len(cpus)], (homes, before)


def test_a_parallel_loops_slot_is_the_first_iteration_of_each_part():
    """``For.slot``: each outlined call's first iteration (a chunk a call: ``min(4 threads,
    trips)`` chunks); the whole loop's ``lo`` when one thread runs it, threaded or not; the
    printer and the C renderer show it."""
    from tecomp.codegen.cstyle import CStyleRenderer

    s = E.Var("s")
    y = Buffer("Y", (n,), "int64", "output")
    loop = For(i, E.Const(2, "int64"), n, Store(y, (i,), s), kind="parallel", slot=s)
    body = Seq((For(j, ZERO, n, Store(y, (j,), E.Const(-1, "int64"))), loop))
    assert "parallel for (i, 2, n, slot s)" in str(body)
    kern = build_kernel(LoweredFunc("slots", (), (y,), (n,), body))
    serial = build_kernel(LoweredFunc("slots", (), (y,), (n,), body), threads=False)
    kern.threads = 1
    assert kern(6).tolist() == [-1, -1, 2, 2, 2, 2]
    assert serial(6).tolist() == [-1, -1, 2, 2, 2, 2]
    kern.threads = 2  # 4 trips, 4 chunks: one call each, wherever it runs
    assert kern(6).tolist() == [-1, -1, 2, 3, 4, 5]
    kern.threads = 2  # 16 trips, 8 chunks of two
    assert kern(18).tolist() == [-1, -1] + [2 + 2 * (q // 2) for q in range(16)]
    text = CStyleRenderer().render_stmt(loop)
    assert text[:3] == ["{", "const long long s = 2LL;", "for (long long i = 2LL; i < n; ++i) {"]
    assert text[-1] == "}"


def test_workers_spin_by_the_clock_on_x86():
    """On x86-64 a worker's spin before it sleeps is bounded by the time-stamp counter
    (SPIN_TICKS), not by a count of pause rounds whose length varies 14-fold between CPUs;
    elsewhere by SPIN_ROUNDS."""
    import platform

    from tecomp.codegen.llvm import runtime

    text = str(runtime.build_module())
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
    assert ("llvm.readcyclecounter" in text) == x86
    assert str(runtime.SPIN_TICKS if x86 else runtime.SPIN_ROUNDS) in text
