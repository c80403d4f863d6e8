"""Determinism across interpreters, thread safety, and memory hygiene of kernels."""

import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tecomp as tc
from tecomp.codegen.cache import CompileCache
from tecomp.codegen.llvm import compile_function

DETERMINISM = textwrap.dedent("""
    import hashlib, sys, tecomp as tc
    sys.path.insert(0, sys.argv[1])
    from test_user_errors import run_bad_index_battery
    print("caught", run_bad_index_battery())
    n, m = tc.var("n"), tc.var("m")
    E = tc.placeholder((m, 8), name="E")
    W = tc.placeholder((8, 8), name="W")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    k = tc.reduce_axis(8, name="k")
    H = tc.compute((n, 8), lambda i, j: tc.tanh(tc.sum(E[idx[i], k] * W[k, j], axis=k,
                   where=tc.eq((k + j) % 2, 0))), name="H")
    r, s = tc.reduce_axis(n, name="r"), tc.reduce_axis(8, name="s")
    L = tc.compute((), lambda: tc.sum(H[r, s] * H[r, s], axis=[r, s]), name="L")
    grads = tc.gradient(L, [E, W])
    from tecomp.codegen.llvm import emit_module
    from tecomp.passes.bounds_check import add_bounds_checks
    low = tc.lower([L, *grads], [E, W, idx])
    source = str(emit_module(add_bounds_checks(low.func)[0], threads=True))
    for text in (tc.show([L, *grads]), str(low), source):
        print(hashlib.sha256(text.encode()).hexdigest())
""")


def test_same_program_prints_identically_across_interpreters():
    """tc.show, the loop IR and the emitted LLVM IR do not depend on hash randomisation, and
    bad indices raise cleanly in a fresh interpreter (a crash would fail only this test)."""
    here = os.path.dirname(os.path.abspath(__file__))
    procs = [subprocess.Popen([sys.executable, "-c", DETERMINISM, here], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONHASHSEED=seed)) for seed in "12"]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        outs.append(out)
    assert outs[0].splitlines()[0] == "caught 10" and len(outs[0].split()) == 5
    assert outs[0] == outs[1]


def _program(c: float):
    n = tc.var("n")
    A = tc.placeholder((n, 16), name="A")
    k = tc.reduce_axis(16, name="k")
    S = tc.compute((n,), lambda i: tc.sum(tc.sin(A[i, k] * c), axis=k), name="S")
    return A, S


def test_building_and_calling_from_many_threads(rng):
    """Eight threads build (four distinct programs, each twice) and call them at once."""
    a = rng.standard_normal((64, 16)).astype(np.float32)
    consts = [0.5, 1.5, 2.5, 3.5] * 2
    barrier = threading.Barrier(len(consts))

    def work(c: float):
        A, S = _program(c)
        barrier.wait()
        kern = tc.build(S, [A])
        return [kern(a) for _ in range(50)], tc.evaluate([S], {A: a})[0]

    with ThreadPoolExecutor(len(consts)) as pool:
        results = list(pool.map(work, consts))
    for outs, want in results:
        for got in outs:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_one_kernel_called_from_many_threads(rng):
    A, S = _program(0.75)
    kern = tc.build(S, [A])
    data = [rng.standard_normal((int(rng.integers(1, 300)), 16)).astype(np.float32)
            for _ in range(16)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda x: [kern(x) for _ in range(20)], data))
    for x, outs in zip(data, got):
        want = kern(x)
        for o in outs:
            np.testing.assert_array_equal(o, want)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_many_calls_do_not_grow_memory(rng):
    n, m = tc.var("n"), tc.var("m")
    E = tc.placeholder((m, 8), name="E")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    G = tc.compute((n, 8), lambda i, j: tc.exp(E[idx[i], j]), name="G")
    (dE,) = tc.gradient(G, [E])  # a scatter through a temporary buffer (malloc/free)
    kern = tc.build([G, dE], [E, idx])
    e = rng.standard_normal((32, 8)).astype(np.float32)
    ix = rng.integers(0, 32, 64)
    for _ in range(1000):
        kern(e, ix)
    gc.collect()
    before = _rss()
    for _ in range(10_000):
        kern(e, ix)
    gc.collect()
    grown = _rss() - before
    assert grown < 4 << 20, f"10,000 calls grew the resident set by {grown} bytes"


def test_compile_cache_evicts_and_frees():
    """A bounded cache holds at most ``maxsize`` kernels; evicted code is released."""
    cache = CompileCache(4)
    funcs = []
    for c in range(10):
        A, S = _program(0.1 * (c + 1))
        funcs.append(tc.lower(S, [A]).func)
    first = weakref.ref(compile_function(funcs[0], cache=cache, speed_level=0))
    sizes = [len(cache)]
    for func in funcs[1:]:
        compile_function(func, cache=cache, speed_level=0)
        sizes.append(len(cache))
    assert sizes == [1, 2, 3, 4, 4, 4, 4, 4, 4, 4] and cache.misses == 10
    gc.collect()
    assert first() is None, "an evicted kernel is still alive"
    keys = list(cache._data)
    compile_function(funcs[-1], cache=cache, speed_level=0)
    assert cache.hits == 1 and list(cache._data) == keys
