"""The persistent cache across processes: a second, fresh process loads what the first compiled.

Each build runs in a new Python process with its own cache directory (``TECOMP_CACHE_DIR``): the
first compiles and stores the loop program, the kernel, the parallel-loop runtime and the
bounds verdict; the second must take the loop program, kernel and runtime from disk (LLVM made
no target machine, islpy was not imported) and give the evaluator's results, the same bits as
the first.
A program that needs runtime bounds checks still checks them when its kernel comes from disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tecomp as tc
from tecomp.cost import count_cost, count_iterations

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tecomp as tc
    from tecomp.codegen import disk_cache
    from tecomp.codegen.llvm import jit

    mode, out = sys.argv[1], sys.argv[2]
    if mode == "second":  # everything must come from the cache: no LLVM compile at all
        import tecomp.codegen.llvm as backend

        def no_llvm(*args, **kwargs):
            raise AssertionError("LLVM compiled although the cache holds the code")

        jit.compile_ir = backend.compile_ir = no_llvm
    X = tc.placeholder((1, 8, 24, 21), name="X")  # its padded copy is a pooled temporary
    W = tc.placeholder((4, 8, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    gX, gW = tc.gradient(Y, [X, W], H)
    k = tc.build([gX, gW], [X, W, H])
    islpy_used = "islpy" in sys.modules
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(tuple(int(d.value) for d in t.shape)).astype(np.float32)
            for t in (X, W, H)]
    got = k(*args)
    want = tc.evaluate([gX, gW], dict(zip((X, W, H), args)))
    n = tc.var("n")
    E = tc.placeholder((n, 4), name="E")
    idx = tc.placeholder((6,), name="idx", dtype="int64")
    G = tc.compute((6, 4), lambda i, j: E[idx[i], j] * 2.0, name="G")
    g = tc.build(G, [E, idx])
    e = rng.standard_normal((5, 4)).astype(np.float32)
    ix = np.array([4, 0, 1, 3, 2, 4])
    gathered = g(e, ix)
    try:
        g(e, np.array([0, 1, 5, 0, 0, 0]))
        error = ""
    except tc.IndexBoundsError as err:
        error = str(err)
    np.savez(out, gX=got[0], gW=got[1], eX=want[0], eW=want[1], G=gathered, eG=e[ix] * 2)
    store = disk_cache.default_cache()
    print(json.dumps({"hits": store.hits, "misses": store.misses, "islpy": islpy_used,
                      "machine": bool(jit._state.get("tms")), "error": error,
                      "pooled": repr(k._entry.pooled),
                      "llvm_loaded": "llvmlite.binding" in sys.modules,
                      "loader": type(k._entry._tracker).__name__}))
""")


def _run(tmp_path, mode):
    env = dict(os.environ, TECOMP_CACHE_DIR=str(tmp_path / "cache" / "tecomp"))
    out = tmp_path / f"{mode}.npz"
    res = subprocess.run([sys.executable, "-c", CHILD, mode, str(out)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1]), np.load(out)


def test_second_process_loads_everything_from_disk(tmp_path):
    info1, res1 = _run(tmp_path, "first")
    # loop program, proof and kernel of each program, the runtime, the gradient (looked up
    # before it is computed), the proof of the convolution's forward (tc.gradient refuses
    # a forward the bounds proofs refuse), the digests of the three source trees the keys
    # name (passes, passes and tecomp, the LLVM backend), LLVM's description of the host and
    # the five outlined parallel-loop bodies the gradient kernel is compiled in
    # (codegen/llvm/parts.py)
    assert info1["hits"] == 0 and info1["misses"] == 18
    assert info1["machine"] and info1["islpy"]
    info2, res2 = _run(tmp_path, "second")
    # loop program (bounds-checked: the gather keeps the checks the pass added) and kernel
    # of each program, the runtime and the gradient (found: the forward was checked when it
    # was stored, so its verdict is not looked up), the source digests of tecomp and of the
    # LLVM backend (the proofs' digest is not needed), the host's description and the five
    # bodies; no bounds pass runs and, where the ELF loader maps the kernels, LLVM is not
    # even loaded
    assert info2["hits"] == 14 and info2["misses"] == 0
    assert not info2["machine"], "a target machine was made: something was compiled"
    if info2["loader"] == "Image":  # x86-64 Linux (codegen/llvm/elf.py)
        assert not info2["llvm_loaded"], "llvmlite's binding was loaded on the warm path"
    assert not info2["islpy"], "the bounds proof of the convolution ran again"
    assert info1["pooled"] != "()" and info2["pooled"] == info1["pooled"]
    for res in (res1, res2):
        np.testing.assert_allclose(res["gX"], res["eX"], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(res["gW"], res["eW"], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(res["G"], res["eG"])
    for name in ("gX", "gW", "G"):  # the same machine code
        np.testing.assert_array_equal(res1[name], res2[name])
    for info in (info1, info2):
        assert "out-of-bounds read of tensor 'E'" in info["error"], info["error"]


def _iteration_programs():
    n = tc.var("n")
    X = tc.placeholder((1, 2, n, 7), name="X")
    W = tc.placeholder((3, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    gX, gW = tc.gradient(Y, [X, W], H)
    A = tc.placeholder((n, n), name="A")
    k = tc.reduce_axis(n, name="k")
    C = tc.compute((n,), lambda i: tc.sum(tc.if_then_else(k <= i, A[i, k], 0.0), axis=k),
                   name="C")
    (dA,) = tc.gradient(C, [A])
    return n, [tc.lower([gX, gW], [X, W, H]).func, tc.lower([C, dA], [A]).func]


@pytest.mark.parametrize("size", [1, 2, 9, 16])
def test_count_iterations_matches_cost(size):
    n, funcs = _iteration_programs()
    for func in funcs:
        assert count_iterations(func, {n: size}) == count_cost(func, {n: size}).iterations


def test_pooled_record_round_trip_and_garbage():
    from tecomp import expr as E
    from tecomp.codegen.llvm import _pooled_from_record, _pooled_record
    from tecomp.loopir import Buffer

    bufs = (Buffer("X_pad", (E.Const(1, "int64"), E.Const(34, "int64")), "float32", "temp"),
            Buffer("t:;'\"", (E.Const(7, "int32"),), "float64", "temp"))
    assert _pooled_from_record(_pooled_record(bufs)) == bufs
    assert _pooled_from_record(_pooled_record(())) == ()
    n = tc.var("n")
    symbolic = (Buffer("s", (n * 16 + 2, (n + 1) // 2), "float32", "temp"),)
    assert _pooled_from_record(_pooled_record(symbolic)) == symbolic
    assert _pooled_record((Buffer("s", (tc.cast(n, "int32"),), "float32", "temp"),)) is None
    for bad in (None, b"()", "", "(", "__import__('os')", "((1, 2),)", "[('a', 'f', 's', 3)]",
                "(('a', 'f', 's', (('c', 1.5, 'int64'),)),)",
                "(('a', 'f', 's', (('Call', ('c', 1, 'int64'), ('c', 1, 'int64'), 'i'),)),)"):
        assert _pooled_from_record(bad) is None, bad
