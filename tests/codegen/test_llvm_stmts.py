"""The LLVM emitter on every loop-IR statement, with hand-built LoweredFuncs."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.llvm import build_kernel
from tecomp.errors import ArgumentError, CompileError
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LetStmt,
    LoweredFunc,
    Seq,
    Store,
)

n, m = E.Var("n"), E.Var("m")
i, j, k = E.Var("i"), E.Var("j"), E.Var("k")


def c(v, dtype="int64"):
    return E.Const(v, dtype)


def load(buf, *idx):
    return BufferLoad(buf, tuple(idx), buf.dtype)


IDENT = {"sum": 0, "prod": 1, "max": -np.inf, "min": np.inf}
NP = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "float16"])
@pytest.mark.parametrize("combiner", ["sum", "prod", "max", "min"])
def test_store_reduce_into_output(rng, dtype, combiner):
    x = Buffer("X", (n, m), dtype, "input")
    y = Buffer("Y", (n,), dtype, "output")
    ident = IDENT[combiner]
    if dtype.startswith("int") and combiner in ("max", "min"):
        info = np.iinfo(dtype)
        ident = info.min if combiner == "max" else info.max
    body = For(i, c(0), n, Seq((
        Store(y, (i,), c(ident, dtype) if dtype.startswith("int") else c(float(ident), dtype)),
        For(k, c(0), m, Store(y, (i,), load(x, i, k), reduce=combiner)))))
    kern = build_kernel(LoweredFunc("red", (x,), (y,), (n, m), body))
    a = rng.integers(-3, 4, (5, 6)).astype(dtype) if dtype.startswith("int") else \
        rng.uniform(0.5, 1.5, (5, 6)).astype(dtype)
    got = kern(a)
    want = NP[combiner](a, axis=1)
    if dtype == "float16":
        np.testing.assert_allclose(got, want, rtol=5e-3)
    elif dtype.startswith("float"):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def test_bool_reductions(rng):
    x = Buffer("X", (n, m), "bool", "input")
    any_ = Buffer("Any", (n,), "bool", "output")
    all_ = Buffer("All", (n,), "bool", "output")
    body = For(i, c(0), n, Seq((
        Store(any_, (i,), c(False, "bool")), Store(all_, (i,), c(True, "bool")),
        For(k, c(0), m, Seq((Store(any_, (i,), load(x, i, k), reduce="sum"),
                             Store(all_, (i,), load(x, i, k), reduce="prod")))))))
    kern = build_kernel(LoweredFunc("anyall", (x,), (any_, all_), (n, m), body))
    a = rng.random((7, 3)) < 0.4
    got_any, got_all = kern(a)
    np.testing.assert_array_equal(got_any, a.any(axis=1))
    np.testing.assert_array_equal(got_all, a.all(axis=1))


def test_local_accumulator_and_0d_output(rng):
    x = Buffer("X", (n,), "float64", "input")
    acc = Buffer("acc", (), "float64", "local")
    y = Buffer("Y", (), "float64", "output")
    body = Allocate(acc, Seq((
        Store(acc, (), c(0.0, "float64")),
        For(i, c(0), n, Store(acc, (), load(x, i) * load(x, i), reduce="sum")),
        Store(y, (), load(acc)))))
    func = LoweredFunc("sumsq", (x,), (y,), (n,), body)
    a = rng.standard_normal(101)
    for threads in (False, True):
        kern = build_kernel(func, threads=threads)
        got = kern(a)
        assert got.shape == () and got.dtype == np.float64
        np.testing.assert_allclose(got, np.sum(a * a), rtol=1e-12)
    # one function: the accumulator promoted to a register
    assert "alloca" not in build_kernel(func, threads=False).source
    # threaded, the loop is a body of its own (emit.OUTLINE_SERIAL), passed the accumulator:
    # a register there, a stack slot only in the kernel's own (unoptimised) function
    bodies = kern._entry.parts
    assert len(bodies) == 1 and "alloca" not in bodies[0].source


@pytest.mark.parametrize("size", [16, 8192, None])  # stack, heap (constant), heap (symbolic)
def test_temporary_buffers(rng, size):
    ext = n if size is None else c(size)
    x = Buffer("X", (ext,), "float32", "input")
    t = Buffer("T", (ext,), "float32", "temp")
    y = Buffer("Y", (ext,), "float32", "output")
    body = Allocate(t, Seq((
        For(i, c(0), ext, Store(t, (i,), load(x, i) * 2.0)),
        For(i, c(0), ext, Store(y, (i,), load(t, ext - 1 - i) + 1.0)))))
    params = (n,) if size is None else ()
    kern = build_kernel(LoweredFunc("rev", (x,), (y,), params, body))
    a = rng.standard_normal(size or 1000).astype(np.float32)
    np.testing.assert_allclose(kern(a), a[::-1] * 2 + 1, rtol=1e-6)
    # heap temporaries outside loops are the caller's (pooled) memory, never malloc-ed
    assert "malloc" not in kern.source
    assert kern._entry.pooled == (() if size == 16 else (t,))
    if size is None:  # a larger size grows the pool; a smaller one reuses it
        for count in (5000, 10, 0, 3000):
            a = rng.standard_normal(count).astype(np.float32)
            np.testing.assert_allclose(kern(a), a[::-1] * 2 + 1, rtol=1e-6)


def test_pooled_temporaries_are_reused_per_thread(rng):
    """The pool hands a thread the same block on every call and other threads their own (the
    spy once took one argument of two, so every call raised in its thread and the checks
    below saw nothing: now each thread must finish every call)."""
    import threading

    x = Buffer("X", (n,), "float64", "input")
    t = Buffer("T", (n,), "float64", "temp")
    y = Buffer("Y", (n,), "float64", "output")
    body = Allocate(t, Seq((
        For(i, c(0), n, Store(t, (i,), load(x, i) * 3.0)),
        For(i, c(0), n, Store(y, (i,), load(t, n - 1 - i) - 1.0)))))
    kern = build_kernel(LoweredFunc("pool", (x,), (y,), (n,), body))
    seen: dict[str, set[int]] = {}
    real = kern._temporaries

    def spy(sizes, near=0):
        ptrs = real(sizes, near)
        seen.setdefault(threading.current_thread().name, set()).update(ptrs)
        return ptrs

    kern._temporaries = spy
    bad = []
    alive = threading.Barrier(3)  # all threads hold their blocks at the same time

    data = [rng.standard_normal(count) for count in (4000, 4000, 100, 4000)]

    done = []

    def run():
        for a in data:
            if not np.array_equal(kern(a), a[::-1] * 3 - 1):
                bad.append(a.size)
        done.append(threading.current_thread().name)
        alive.wait()

    threads = [threading.Thread(target=run, name=f"w{w}") for w in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not bad and len(done) == 3  # every thread ran every call
    # one block a thread, reused: its calls' addresses differ only by where the temporary is
    # placed in it (half a page from the call's input: result_pool.placement)
    from tecomp.codegen.result_pool import PAGE_SLACK

    assert len(seen) == 3 and all(max(p) - min(p) < PAGE_SLACK for p in seen.values()), seen
    starts = sorted(min(p) for p in seen.values())
    assert all(b - a >= 4000 * 8 for a, b in zip(starts, starts[1:]))  # never shared


def test_temporary_inside_loop_is_freed_each_iteration(rng):
    x = Buffer("X", (n, m), "float64", "input")
    t = Buffer("row", (m,), "float64", "temp")
    y = Buffer("Y", (n,), "float64", "output")
    body = For(i, c(0), n, Allocate(t, Seq((
        For(j, c(0), m, Store(t, (j,), E.call("exp", load(x, i, j)))),
        Store(y, (i,), c(0.0, "float64")),
        For(j, c(0), m, Store(y, (i,), load(t, j), reduce="sum"))))))
    kern = build_kernel(LoweredFunc("rowexp", (x,), (y,), (n, m), body))
    a = rng.standard_normal((50, 9))
    np.testing.assert_allclose(kern(a), np.exp(a).sum(axis=1), rtol=1e-12)
    assert kern.source.count("@free(") >= 1


def test_let_and_if_then_else(rng):
    x = Buffer("X", (n,), "int64", "input")
    y = Buffer("Y", (n,), "int64", "output")
    t = E.Var("t")
    body = For(i, c(0), n, LetStmt(t, i * 3 % 7, IfThenElse(
        t < 3, Store(y, (i,), load(x, i) + t),
        Seq((Store(y, (i,), c(-1)), IfThenElse(tc.eq(t, 5), Store(y, (i,), c(99))))))))
    kern = build_kernel(LoweredFunc("letif", (x,), (y,), (n,), body))
    a = rng.integers(-10, 10, 30)
    want = [a[q] + (q * 3 % 7) if q * 3 % 7 < 3 else (99 if q * 3 % 7 == 5 else -1)
            for q in range(30)]
    assert kern(a).tolist() == want


@pytest.mark.parametrize("lo,hi,step", [(0, 10, 1), (3, 10, 3), (2, 11, 4), (7, 3, 1), (5, 5, 2),
                                        (-4, 4, 3)])
def test_loop_ranges(lo, hi, step):
    y = Buffer("Y", (c(20),), "int64", "output")
    body = Seq((For(i, c(0), c(20), Store(y, (i,), c(0))),
                For(j, c(lo), c(hi), Store(y, (j + 4,), j), step=step)))
    got = build_kernel(LoweredFunc("rng", (), (y,), (), body))()
    want = [0] * 20
    for q in range(lo, hi, step):
        want[q + 4] = q
    assert got.tolist() == want


def test_triangular_loop_cumsum(rng):
    x = Buffer("X", (n,), "float64", "input")
    y = Buffer("Y", (n,), "float64", "output")
    body = For(i, c(0), n, Seq((
        Store(y, (i,), c(0.0, "float64")),
        For(j, c(0), i + 1, Store(y, (i,), load(x, j), reduce="sum")))), kind="parallel")
    kern = build_kernel(LoweredFunc("cumsum", (x,), (y,), (n,), body))
    a = rng.standard_normal(77)
    np.testing.assert_allclose(kern(a), np.cumsum(a), rtol=1e-12, atol=1e-12)


def test_symbolic_step_bounds_and_strided_loop():
    # for j in range(i % 3, n, 3): the strided, guard-free form zero elimination produces
    y = Buffer("Y", (n, n), "int32", "output")
    body = Seq((For(i, c(0), n, For(j, c(0), n, Store(y, (i, j), c(0, "int32")))),
                For(i, c(0), n, For(j, i % 3, n, Store(y, (i, j), c(1, "int32")), step=3))))
    got = build_kernel(LoweredFunc("stride", (), (y,), (n,), body))(10)
    want = np.array([[1 if (q - p % 3) % 3 == 0 and q >= p % 3 else 0 for q in range(10)]
                     for p in range(10)], np.int32)
    np.testing.assert_array_equal(got, want)


def test_scalar_parameters(rng):
    s = E.Var("s")
    s32 = E.Var("s32", "int32")
    x = Buffer("X", (n,), "float32", "input")
    y = Buffer("Y", (n,), "float32", "output")
    body = For(i, c(0), n, Store(y, (i,), load(x, i) * E.cast(s, "float32")
                                 + E.cast(s32, "float32")))
    kern = build_kernel(LoweredFunc("scale", (x,), (y,), (n, s, s32), body))
    a = rng.standard_normal(10).astype(np.float32)
    np.testing.assert_allclose(kern(a, 3, np.int32(-2)), a * 3 - 2, rtol=1e-6)
    with pytest.raises(ArgumentError, match=r"scalar 's32': 4294967296 does not fit in int32"):
        kern(a, 3, 2**32)
    with pytest.raises(ArgumentError, match=r"scalar 's': expected an integer, got float"):
        kern(a, 3.0, 1)


def test_inner_loop_is_vectorised():
    x = Buffer("X", (n,), "float32", "input")
    y = Buffer("Y", (n,), "float32", "output")
    body = For(i, c(0), n, Store(y, (i,), load(x, i) * 2.0 + 1.0))
    kern = build_kernel(LoweredFunc("axpb", (x,), (y,), (n,), body))
    assert re.search(r"<\d+ x float>", kern.source)
    a = np.arange(37, dtype=np.float32)
    np.testing.assert_array_equal(kern(a), a * 2 + 1)


def test_out_of_memory_is_reported():
    y = Buffer("Y", (), "float32", "output")
    t = Buffer("T", (n,), "float32", "temp")
    body = Allocate(t, Seq((For(i, c(0), n, Store(t, (i,), E.cast(i, "float32"))),
                            Store(y, (), load(t, n - 1)))))
    kern = build_kernel(LoweredFunc("huge", (), (y,), (n,), body))
    assert kern(4) == 3.0
    for size in (2**61, 2**50):  # the byte count overflows; malloc fails
        with pytest.raises(ArgumentError, match="out of memory"):
            kern(size)


def test_emit_errors_name_the_stage():
    y = Buffer("Y", (n,), "float32", "output")
    x = Buffer("X", (n,), "float32", "input")
    t = Buffer("T", (n,), "float32", "temp")
    cases = [
        (For(i, c(0), n, Store(y, (i,), E.cast(j, "float32"))), r"emit: variable 'j' is not bound"),
        (For(i, c(0), n, Store(y, (i,), load(t, i))), r"emit: buffer 'T' is not allocated"),
        (For(i, c(0), n, Store(y, (i,), c(0.0, "float32")), step=0), r"emit: .*step 0"),
        (For(i, c(0), n, Store(x, (i,), c(0.0, "float32"))), r"emit: store into the input"),
        (For(i, c(0), n, Store(y, (i, i), c(0.0, "float32"))), r"emit: buffer 'Y' has 1 dim"),
    ]
    for body, msg in cases:
        with pytest.raises(CompileError, match=msg):
            build_kernel(LoweredFunc("bad", (x,), (y,), (n,), body))


def test_verify_and_jit_stages_are_named():
    from tecomp.codegen.llvm import compile_ir

    with pytest.raises(CompileError, match=r"verify: LLVM rejected the IR of 'f'"):
        compile_ir("define i32 @f() { ret i64 0 }", "f")
    src = ("declare double @tecomp_no_such_symbol(double)\n"
           "define double @g(double %x) {\n"
           "  %y = call double @tecomp_no_such_symbol(double %x)\n"
           "  ret double %y\n}\n")
    with pytest.raises(CompileError, match=r"jit: could not load 'g'"):
        compile_ir(src, "g")


def _tile(trips: E.Expr, unroll: int = 1) -> tuple[LoweredFunc, Allocate, For]:
    """A one-row register tile ``Y[jj] = sum_k X[k] * W[k, jj]`` over 16 lanes: the function,
    its body and the lane loop of one step of the reduction."""
    jj = E.Var("jj")
    x = Buffer("X", (n,), "float32", "input")
    w = Buffer("W", (n, c(16)), "float32", "input")
    y = Buffer("Y", (c(16),), "float32", "output")
    acc = Buffer("acc", (c(16),), "float32", "local")
    step = For(jj, c(0), c(16), Store(acc, (jj,), load(acc, jj) + load(x, k) * load(w, k, jj)),
               kind="lanes")
    body = Allocate(acc, Seq((
        For(jj, c(0), c(16), Store(acc, (jj,), c(0.0, "float32")), kind="lanes"),
        For(k, c(0), trips, step, unroll=unroll),
        For(jj, c(0), c(16), Store(y, (jj,), load(acc, jj)), kind="lanes"))))
    return LoweredFunc("tile" if unroll == 1 else f"tile_u{unroll}", (x, w), (y,), (n,),
                       body), body, step


def test_register_tile_loops_are_left_rolled(monkeypatch):
    """A loop whose body is lane loops only -- a register tile's reduction steps, which the
    schedule unrolls itself -- carries ``llvm.loop.unroll.disable`` (a self-referencing loop
    ID): LLVM keeps one copy of the vector body where its unroller made several."""
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import compile_function, emit, parts
    from tecomp.codegen.llvm.emit import emit_module

    func, body, step = _tile(n)  # compiled afresh below: no caches
    text = str(emit_module(func))
    assert re.search(r'!(\d+) = !{ !\1, !\d+ }', text) and "llvm.loop.unroll.disable" in text
    rng = np.random.default_rng(3)
    a = rng.standard_normal(37).astype(np.float32)
    b = rng.standard_normal((37, 16)).astype(np.float32)
    copies = {}
    for keep in (True, False):
        monkeypatch.setattr(emit, "KEEP_TILE_LOOPS", keep)
        monkeypatch.setattr(parts, "BODIES", type(parts.BODIES)())  # the loop is a body
        kern = Kernel(func, compile_function(func, cache=None, disk=None), target="llvm")
        np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-5, atol=1e-5)
        copies[keep] = len(re.findall(r"fmul [a-z ]*<16 x float>|@llvm\.fma\.v16f32\(",
                                      kern.source))
    assert copies[True] == 1 < copies[False], copies
    short, _, _ = _tile(c(3))
    assert "llvm.loop" not in str(emit_module(short))  # three trips: LLVM unrolls it whole


@pytest.mark.parametrize("trips", [0, 1, 3, 4, 7, 37])
def test_unroll_hint_becomes_llvm_unroll_count(trips):
    """A loop's ``unroll`` hint (a register tile's steps a trip, chosen by the schedule) is
    handed to LLVM as ``llvm.loop.unroll.count``: LLVM makes that many copies of the body a
    trip and runs the remainder apart, every iteration in order (a float sum in sequence:
    exact against the same sum in NumPy's order for these small integers)."""
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import compile_function
    from tecomp.codegen.llvm.emit import emit_module

    func, _, _ = _tile(n, unroll=4)
    text = str(emit_module(func))
    assert re.search(r'!{ !"llvm.loop.unroll.count", i32 4 }', text)
    assert "llvm.loop.unroll.disable" not in text
    assert "unroll 4" in str(tc.Lowered(func))
    kern = Kernel(func, compile_function(func, cache=None, disk=None), target="llvm")
    rng = np.random.default_rng(trips)
    a = rng.integers(-3, 4, trips).astype(np.float32)
    b = rng.integers(-3, 4, (trips, 16)).astype(np.float32)
    np.testing.assert_array_equal(kern(a, b), a @ b)
    if trips == 37:  # four copies a trip and a remainder: four times the one step's products
        ops = len(re.findall(r"fmul [a-z ]*<16 x float>|@llvm\.fma\.v16f32\(", kern.source))
        assert ops >= 4, ops


def test_heap_temporaries_start_on_64_byte_boundaries():
    """A temporary malloc would place 16 bytes past a page (large blocks) is allocated with
    ``aligned_alloc(64, bytes rounded up to 64)``: a 64-byte vector load of a packed panel
    spanning two cache lines cost 10-30% of a matmul's time on an Intel Xeon core."""
    y = Buffer("Y", (n,), "float32", "output")
    t = Buffer("T", (n,), "float32", "temp")
    fill = For(j, c(0), n, Store(t, (j,), E.cast(j + i, "float32")))
    body = For(i, c(0), n, Allocate(t, Seq((fill, Store(y, (i,), load(t, n - 1))))))
    kern = build_kernel(LoweredFunc("aligned", (), (y,), (n,), body))
    assert re.search(r"ptr @aligned_alloc\(i64 64, i64 %", kern.source)
    assert "@malloc(" not in kern.source
    np.testing.assert_array_equal(kern(5), np.arange(5, dtype=np.float32) + 4)
