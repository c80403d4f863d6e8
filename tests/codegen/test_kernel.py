"""Kernel: argument checking (each message), outputs, out=, the compile cache, threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.cache import KERNELS, CompileCache
from tecomp.codegen.kernel import Kernel
from tecomp.codegen.llvm import build_kernel, compile_function
from tecomp.errors import ArgumentError, TecompError
from tecomp.loopir import Buffer, BufferLoad, For, LoweredFunc, Seq, Store

n, m = E.Var("n"), E.Var("m")
i, j, k = E.Var("i"), E.Var("j"), E.Var("k")
ZERO = E.Const(0, "int64")


def load(buf, *idx):
    return BufferLoad(buf, tuple(idx), buf.dtype)


def matmul_func(name: str = "mm", dtype: str = "float32") -> LoweredFunc:
    """C[n, m] = A[n, 4] @ B[4, m] with C zeroed first (hand-built loop IR)."""
    a = Buffer("A", (n, E.Const(4, "int64")), dtype, "input")
    b = Buffer("B", (E.Const(4, "int64"), m), dtype, "input")
    cbuf = Buffer("C", (n, m), dtype, "output")
    body = For(i, ZERO, n, Seq((
        For(j, ZERO, m, Store(cbuf, (i, j), E.Const(0.0, dtype))),
        For(k, ZERO, E.Const(4, "int64"), For(j, ZERO, m, Store(
            cbuf, (i, j), load(a, i, k) * load(b, k, j), reduce="sum"))))))
    return LoweredFunc(name, (a, b), (cbuf,), (n, m), body)


@pytest.fixture(scope="module")
def mm() -> Kernel:
    return build_kernel(matmul_func())


def arrays(rng, nn=3, mm_=5, dtype=np.float32):
    return (rng.standard_normal((nn, 4)).astype(dtype), rng.standard_normal((4, mm_)).astype(dtype))


def test_call_and_attributes(rng, mm):
    a, b = arrays(rng)
    np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-5)
    assert mm.name == "mm" and mm.target == "llvm"
    assert mm.ir == matmul_func()
    assert "define" in mm.source and "@mm(" in mm.source
    assert [x.name for x in mm.inputs] == ["A", "B"]
    assert [x.name for x in mm.outputs] == ["C"]


# ------------------------------------------------------------------------------ argument errors
def test_wrong_count(rng, mm):
    a, b = arrays(rng)
    with pytest.raises(ArgumentError, match=r"kernel 'mm' takes 2 argument\(s\) \(tensor 'A', "
                                            r"tensor 'B'\), got 3"):
        mm(a, b, b)
    with pytest.raises(ArgumentError, match=r"takes 2 argument\(s\).*got 1"):
        mm(a)


def test_wrong_ndim(rng, mm):
    a, b = arrays(rng)
    with pytest.raises(ArgumentError, match=r"argument 1 \(tensor 'B'\): expected 2 "
                                            r"dimension\(s\), got an array with 1"):
        mm(a, b[0])


def test_wrong_dtype_is_not_cast(rng, mm):
    a, b = arrays(rng)
    with pytest.raises(ArgumentError, match=r"argument 0 \(tensor 'A'\): expected dtype float32, "
                                            r"got float64"):
        mm(a.astype(np.float64), b)
    with pytest.raises(ArgumentError, match=r"tensor 'B'.*expected dtype float32, got int64"):
        mm(a, b.astype(np.int64))


def test_wrong_constant_extent(rng, mm):
    a, b = arrays(rng)
    with pytest.raises(ArgumentError, match=r"tensor 'A', axis 1: expected extent 4, got 5"):
        mm(np.zeros((3, 5), np.float32), b)


def test_inconsistent_symbolic_size(rng):
    x = Buffer("X", (n,), "float32", "input")
    w = Buffer("W", (m, n), "float32", "input")
    y = Buffer("Y", (n,), "float32", "output")
    body = For(i, ZERO, n, Store(y, (i,), load(x, i) + load(w, ZERO, i)))
    kern = build_kernel(LoweredFunc("inc", (x, w), (y,), (n, m), body))
    with pytest.raises(ArgumentError, match=r"tensor 'W', axis 1: expected extent n = 6 \(bound "
                                            r"from tensor 'X', axis 0\), got 7"):
        kern(np.zeros(6, np.float32), np.zeros((2, 7), np.float32))


def test_not_an_array(mm):
    with pytest.raises(ArgumentError, match=r"argument 0 \(tensor 'A'\): expected a NumPy array "
                                            r"of dtype float32, got list"):
        mm([[1.0] * 4], np.zeros((4, 2), np.float32))


def test_affine_extents_bind_and_check(rng):
    x = Buffer("X", (n + 2,), "float64", "input")
    y = Buffer("Y", (n,), "float64", "output")
    body = For(i, ZERO, n, Store(y, (i,), load(x, i) + load(x, i + 1) + load(x, i + 2)))
    kern = build_kernel(LoweredFunc("win", (x,), (y,), (n,), body))
    a = rng.standard_normal(10)
    np.testing.assert_allclose(kern(a), a[:-2] + a[1:-1] + a[2:])
    x2 = Buffer("X", (n * 2,), "float64", "input")
    body2 = For(i, ZERO, n, Store(y, (i,), load(x2, i * 2)))
    kern2 = build_kernel(LoweredFunc("even", (x2,), (y,), (n,), body2))
    np.testing.assert_array_equal(kern2(a), a[::2])
    with pytest.raises(ArgumentError, match=r"tensor 'X', axis 0: extent n \* 2 .*= 9.* does not "
                                            r"determine n"):
        kern2(np.zeros(9))
    x3 = Buffer("X", (n, n + 1), "float64", "input")
    body3 = For(i, ZERO, n, Store(y, (i,), load(x3, i, i + 1)))
    kern3 = build_kernel(LoweredFunc("diag1", (x3,), (y,), (n,), body3))
    with pytest.raises(ArgumentError, match=r"tensor 'X', axis 1: expected extent n \+ 1 = 4 "
                                            r"\(n = 3\), got 5"):
        kern3(np.zeros((3, 5)))


def test_undetermined_size_must_be_an_input():
    xp = tc.placeholder((n,), name="X")
    x = Buffer("X", (n,), "float32", "input")
    y = Buffer("Y", (m,), "float32", "output")
    body = For(i, ZERO, m, Store(y, (i,), load(x, ZERO)))
    func = LoweredFunc("bcast", (x,), (y,), (n, m), body)
    with pytest.raises(ArgumentError, match=r"the size 'm' is not determined by the arguments' "
                                            r"shapes; pass it as a tc.var input"):
        build_kernel(func, inputs=[xp])(np.ones(2, np.float32))
    kern = build_kernel(func, inputs=[xp, m])
    np.testing.assert_array_equal(kern(np.full(2, 7, np.float32), 3), [7, 7, 7])


def test_zero_d_inputs_accept_scalars():
    s = Buffer("s", (), "float32", "input")
    q = Buffer("q", (), "int64", "input")
    y = Buffer("Y", (n,), "float32", "output")
    body = For(i, ZERO, n, Store(y, (i,), load(s) * E.cast(load(q) + i, "float32")))
    func = LoweredFunc("sc", (s, q), (y,), (n,), body)
    kern = build_kernel(func)
    assert [type(a).__name__ for a in kern.inputs] == ["Buffer", "Buffer", "Var"]
    want = np.array([6, 8, 10], np.float32)
    for sv in (np.float32(2.0), np.array(2.0, np.float32), 2.0):
        np.testing.assert_array_equal(kern(sv, np.int64(3), 3), want)
    with pytest.raises(ArgumentError, match=r"tensor 'q'\): expected a NumPy array of dtype "
                                            r"int64, got float"):
        kern(2.0, 3.0, 3)
    with pytest.raises(ArgumentError, match=r"tensor 's'\): expected dtype float32, got float64"):
        kern(np.float64(2.0), 3, 3)


# ------------------------------------------------------------------------------ inputs, outputs
def test_inputs_not_modified_and_non_contiguous_inputs(rng, mm):
    big_a = rng.standard_normal((6, 8)).astype(np.float32)
    big_b = rng.standard_normal((5, 4)).astype(np.float32)
    a, b = big_a[::2, 1::2], big_b.T  # strided and transposed views
    assert not a.flags.c_contiguous and not b.flags.c_contiguous
    keep_a, keep_b = big_a.copy(), big_b.copy()
    got = mm(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)
    np.testing.assert_array_equal(big_a, keep_a)
    np.testing.assert_array_equal(big_b, keep_b)
    ro = np.ascontiguousarray(a)
    ro.setflags(write=False)
    np.testing.assert_allclose(mm(ro, b), a @ b, rtol=1e-5)


def test_out_is_filled(rng, mm):
    a, b = arrays(rng)
    out = np.full((3, 5), np.nan, np.float32)
    res = mm(a, b, out=out)
    assert res is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    res = mm(a, b, out=(out,))
    assert res is out


def test_out_errors(rng, mm):
    a, b = arrays(rng)
    cases = [
        (np.zeros((3, 5), np.float64), r"out= for output 'C': expected dtype float32, got float64"),
        (np.zeros((5, 3), np.float32), r"out= for output 'C': expected shape \(3, 5\), got "
                                       r"\(5, 3\)"),
        (np.zeros((5, 3), np.float32).T, r"out= for output 'C': the array must be C-contiguous"),
        ((np.zeros((3, 5), np.float32),) * 2, r"out= has 2 array\(s\) for 1 output\(s\)"),
        (([[0.0] * 5] * 3,), r"out= for output 'C': expected a NumPy array, got list"),
    ]
    for out, msg in cases:
        with pytest.raises(ArgumentError, match=msg):
            mm(a, b, out=out)
    ro = np.zeros((3, 5), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ArgumentError, match="writeable"):
        mm(a, b, out=ro)


def test_out_must_not_alias_an_input(rng):
    x = Buffer("X", (n,), "float32", "input")
    y = Buffer("Y", (n,), "float32", "output")
    kern = build_kernel(LoweredFunc("dbl", (x,), (y,), (n,),
                                    For(i, ZERO, n, Store(y, (i,), load(x, i) * 2.0))))
    a = np.arange(4, dtype=np.float32)
    with pytest.raises(ArgumentError, match=r"out= for output 'Y': the array overlaps an input"):
        kern(a, out=a)
    big = np.zeros(8, np.float32)
    with pytest.raises(ArgumentError, match="overlaps"):
        kern(big[::2], out=big[4:])  # the input view is copied, the memory still overlaps
    np.testing.assert_array_equal(a, np.arange(4))


def test_multiple_outputs_return_a_tuple(rng):
    x = Buffer("X", (n,), "int32", "input")
    y = Buffer("Y", (n,), "int32", "output")
    z = Buffer("Z", (n,), "bool", "output")
    body = For(i, ZERO, n, Seq((Store(y, (i,), load(x, i) * 2),
                                Store(z, (i,), load(x, i) > 0))))
    kern = build_kernel(LoweredFunc("two", (x,), (y, z), (n,), body))
    a = np.array([-1, 0, 3], np.int32)
    yy, zz = kern(a)
    assert yy.dtype == np.int32 and zz.dtype == np.bool_
    assert yy.tolist() == [-2, 0, 6] and zz.tolist() == [False, False, True]
    oy, oz = np.empty(3, np.int32), np.empty(3, np.bool_)
    res = kern(a, out=(oy, oz))
    assert res[0] is oy and res[1] is oz and oz.tolist() == [False, False, True]
    with pytest.raises(ArgumentError, match="overlaps an input or another output"):
        kern(a, out=(oy, oy.view(np.bool_)[:3]))


def test_empty_arrays(mm):
    got = mm(np.zeros((0, 4), np.float32), np.zeros((4, 3), np.float32))
    assert got.shape == (0, 3)


# ------------------------------------------------------------------------------ cache
def test_cache_hit_returns_equivalent_kernel(rng):
    func = matmul_func("cached", "float64")
    KERNELS.clear()
    first = build_kernel(func)
    second = build_kernel(matmul_func("cached", "float64"))  # equal, separately built
    # the same compiled entry: nothing was compiled or loaded again (a timing comparison
    # here was flaky, since the first build may itself come quickly from the disk cache)
    assert KERNELS.hits == 1 and KERNELS.misses == 1
    assert second._entry is first._entry
    a, b = arrays(rng, dtype=np.float64)
    np.testing.assert_array_equal(first(a, b), second(a, b))
    build_kernel(matmul_func("cached", "float32"))  # a different program
    assert KERNELS.misses == 2


def test_cache_is_lru_bounded():
    cache: CompileCache[int] = CompileCache(maxsize=2)
    calls = []
    for key in ["a", "b", "a", "c", "b"]:
        cache.get_or_compile(key, lambda key=key: calls.append(key) or len(calls))
    assert calls == ["a", "b", "c", "b"]  # "b" was evicted by "c" ("a" was used more recently)
    assert len(cache) == 2 and "a" not in cache and "c" in cache


def test_cache_compiles_once_under_contention():
    cache: CompileCache[str] = CompileCache()
    calls = []
    start = threading.Barrier(4)

    def slow() -> str:
        calls.append(1)
        time.sleep(0.1)
        return "done"

    results = []

    def worker():
        start.wait()
        results.append(cache.get_or_compile("k", slow))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["done"] * 4 and len(calls) == 1


def test_failed_compile_is_not_cached():
    cache: CompileCache[int] = CompileCache()

    def bad() -> int:
        raise TecompError("boom")

    with pytest.raises(TecompError, match="boom"):
        cache.get_or_compile("x", bad)
    assert cache.get_or_compile("x", lambda: 3) == 3


def test_threads_build_and_call_concurrently(rng):
    errors = []
    start = threading.Barrier(4)

    def worker(t: int) -> None:
        try:
            start.wait()
            x = Buffer("X", (n,), "float64", "input")
            y = Buffer("Y", (n,), "float64", "output")
            scale = E.Const(float(t + 1), "float64")
            body = For(i, ZERO, n, Store(y, (i,), load(x, i) * scale))
            for rep in range(3):
                kern = build_kernel(LoweredFunc(f"thr{t}", (x,), (y,), (n,), body))
                mmk = build_kernel(matmul_func("shared", "float64"))
                a = np.arange(1000.0) + rep
                np.testing.assert_array_equal(kern(a), a * (t + 1))
                p, q = np.ones((2, 4)), np.full((4, 3), float(t))
                np.testing.assert_array_equal(mmk(p, q), np.full((2, 3), 4.0 * t))
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_compile_function_without_cache():
    f1 = compile_function(matmul_func("nocache"), cache=None)
    f2 = compile_function(matmul_func("nocache"), cache=None)
    assert f1 is not f2 and f1.address != f2.address


def test_threads_follow_data_and_work(rng):
    """Small calls run on one thread; a call with little data but many iterations (a matmul)
    or much data is threaded: the static cost for the call's sizes decides."""
    n = tc.var("n")
    A = tc.placeholder((n, n), name="A")
    k = tc.reduce_axis(n, name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * A[k, j], axis=k), name="C")
    kern = tc.build(C, [A])
    kern.threads = 2
    real = kern._fn
    used: list[int] = []

    def spy(*args):
        used.append(args[-1])
        return real(*args)

    kern._fn = spy
    for size in (8, 160):  # 160: 300 KiB of data, 4 M iterations
        a = rng.standard_normal((size, size)).astype(np.float32)
        np.testing.assert_allclose(kern(a), a @ a, rtol=1e-4, atol=1e-4)
    assert used == [1, 2]
