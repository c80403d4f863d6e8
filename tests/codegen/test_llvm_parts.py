"""Kernels compiled in parts (codegen/llvm/parts.py): outlined bodies compiled apart, on
several threads, shared between kernels and cached on disk on their own."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen import disk_cache as dc
from tecomp.codegen.cache import CompileCache
from tecomp.codegen.llvm import compile_function, jit, parts
from tecomp.pipeline import scheduled


def _dense_program(rows: int):
    x = tc.placeholder((rows, 96), name="x")
    w = tc.placeholder((80, 96), name="w")
    y = tc.ops.dense(x, w, name="y")
    z = tc.compute(y.shape, lambda i, j: tc.tanh(y[i, j]), name="z")
    return x, w, y, z


def _func(outs, ins):
    """The scheduled loop program (register-tiled contraction bodies), no bounds checks."""
    return scheduled(tc.lower(outs, ins).func, "llvm", check_bounds=False)


def test_gradient_kernel_reuses_the_forward_kernels_bodies(rng):
    """The gradient recomputes the forward's projection: the body the forward compiled is
    the one the gradient kernel calls, and both kernels give the evaluator's results."""
    x, w, y, z = _dense_program(67)
    fwd = tc.build(z, [x, w])
    gx, gw = tc.gradient(z, [x, w])
    grad = tc.build([gx, gw], [x, w])
    shared = {id(b) for b in fwd._entry.parts} & {id(b) for b in grad._entry.parts}
    assert shared, "the gradient kernel compiled the forward's bodies again"
    a = rng.standard_normal((67, 96)).astype(np.float32)
    b = rng.standard_normal((80, 96)).astype(np.float32)
    np.testing.assert_allclose(fwd(a, b), np.tanh(a @ b.T), rtol=1e-4, atol=1e-5)
    ref = tc.evaluate([gx, gw], {x: a.astype(np.float64), w: b.astype(np.float64)})
    for got, want in zip(grad(a, b), ref):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert "define" in grad.source and grad.source.count("define") > grad._entry \
        .main_source.count("define"), "kernel.source leaves the bodies' IR out"


def test_a_missing_body_entry_recompiles_the_kernel(tmp_path, rng, monkeypatch):
    """A kernel entry whose body entry is gone (removed, evicted) is a miss: the kernel is
    compiled again, and works."""
    store = dc.DiskCache(tmp_path)
    monkeypatch.setattr(parts, "BODIES", type(parts.BODIES)())
    x, w, y, z = _dense_program(33)
    func = _func(z, [x, w])
    first = compile_function(func, cache=None, disk=store)
    assert first.parts
    for body in first.parts:  # the body objects, not the kernel's
        key = body.name.removeprefix("tecomp_body_")
        store.path(key).unlink()
    parts.BODIES.clear()
    second = compile_function(func, cache=None, disk=store)
    assert second.parts and second.address != first.address
    from tecomp.codegen.kernel import Kernel

    a = rng.standard_normal((33, 96)).astype(np.float32)
    b = rng.standard_normal((80, 96)).astype(np.float32)
    np.testing.assert_allclose(Kernel(func, second)(a, b), np.tanh(a @ b.T), rtol=1e-4,
                               atol=1e-5)


def test_builds_from_several_threads_at_once(rng):
    """Threads that compile different kernels at the same time (each with its own target
    machine and pass builder; the bodies on the compile pool) all get correct kernels."""
    results: dict[int, object] = {}
    errors: list[BaseException] = []
    cache: CompileCache = CompileCache(64)

    def work(t: int) -> None:
        try:
            x, w, y, z = _dense_program(40 + t)
            func = _func(z, [x, w])
            from tecomp.codegen.kernel import Kernel

            entry = compile_function(func, cache=cache, disk=None)
            results[t] = Kernel(func, entry)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    b = rng.standard_normal((80, 96)).astype(np.float32)
    for t, kern in results.items():
        a = rng.standard_normal((40 + t, 96)).astype(np.float32)
        np.testing.assert_allclose(kern(a, b), np.tanh(a @ b.T), rtol=1e-4, atol=1e-5)


def test_body_symbol_names_what_the_code_depends_on():
    """The same loop text for another speed level or host is another body."""
    from dataclasses import replace

    from tecomp.host import describe

    a = parts.body_symbol("loop", 3, None)
    assert a == parts.body_symbol("loop", 3, None)
    assert a != parts.body_symbol("loop", 2, None)
    assert a != parts.body_symbol("other loop", 3, None)
    assert a != parts.body_symbol("loop", 3, replace(describe(), cores=describe().cores + 1))


@pytest.mark.parametrize("with_elf", [True, False])
def test_parts_link_through_either_loader(rng, monkeypatch, with_elf):
    """The bodies' addresses reach the kernel through the ELF loader and through LLJIT."""
    monkeypatch.setattr(jit, "LOAD_WITH_ELF", with_elf)
    monkeypatch.setattr(parts, "BODIES", type(parts.BODIES)())
    x, w, y, z = _dense_program(19)
    func = _func(z, [x, w])
    entry = compile_function(func, cache=None, disk=None)
    assert entry.parts
    from tecomp.codegen.kernel import Kernel

    a = rng.standard_normal((19, 96)).astype(np.float32)
    b = rng.standard_normal((80, 96)).astype(np.float32)
    np.testing.assert_allclose(Kernel(func, entry)(a, b), np.tanh(a @ b.T), rtol=1e-4,
                               atol=1e-5)


def test_threads_never_share_a_target_machine_or_pass_builder():
    """LLVM's code generator and pass builders keep state: each compiling thread has its
    own (the same one again within a thread)."""
    made: dict[str, tuple] = {}

    def grab(name: str) -> None:
        made[name] = (jit._machine(), jit._pass_builder(3, None), jit._machine(),
                      jit._pass_builder(3, None))

    threads = [threading.Thread(target=grab, args=(n,)) for n in ("a", "b")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    (tm_a, pb_a, tm_a2, pb_a2), (tm_b, pb_b, _, _) = made["a"], made["b"]
    assert tm_a is tm_a2 and pb_a is pb_a2
    assert tm_a is not tm_b and pb_a is not pb_b


def test_a_forked_child_compiles_on_a_pool_of_its_own(rng):
    """After fork the parent's compile threads are gone: the child makes its own pool
    (a submit to the inherited one would wait for ever) and compiles kernels in parts."""
    import os

    from forked import wait_for

    x, w, y, z = _dense_program(23)
    tc.build(z, [x, w])  # the parent's pool has threads now (on more than one core)
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            cx, cw, cy, cz = _dense_program(29)
            kern = tc.build(cz, [cx, cw])
            a = np.ones((29, 96), np.float32)
            b = np.full((80, 96), 0.01, np.float32)
            ok = bool(kern._entry.parts) and np.allclose(kern(a, b), np.tanh(a @ b.T),
                                                         rtol=1e-4, atol=1e-5)
        finally:
            os._exit(0 if ok else 1)
    status = wait_for(pid, 120, "the forked child did not finish compiling")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_loops_equal_but_for_shared_subexpressions_have_one_body_key():
    """A body's key numbers expressions by value: a loop whose index expression is one
    shared object and a loop with equal copies of it are the same program, one key (a
    transformer block's two 64x64 weight gradients compiled twice before)."""
    from tecomp import expr as E
    from tecomp.codegen.llvm.parallel import body_key
    from tecomp.loopir import Buffer, BufferLoad, For, Seq, Store

    i, j = E.Var("i"), E.Var("j")
    A = Buffer("A", (E.Const(8, "int64"), E.Const(8, "int64")), "float32", "input")
    B = Buffer("B", A.shape, "float32", "output")
    shared = E.Add(i, j, "int64")

    def loop(first, second):
        body = Seq((Store(B, (i, j), BufferLoad(A, (i, first), "float32")),
                    Store(B, (j, i), BufferLoad(A, (j, second), "float32"))))
        return For(i, E.Const(0, "int64"), E.Const(8, "int64"),
                   For(j, E.Const(0, "int64"), E.Const(8, "int64"), body), kind="parallel")

    buffers = {A: None, B: None}
    one = body_key(loop(shared, shared), buffers, {})[0]
    copies = body_key(loop(shared, E.Add(E.Var("i"), E.Var("j"), "int64")), buffers, {})[0]
    other = body_key(loop(shared, E.Sub(i, j, "int64")), buffers, {})[0]
    assert one == copies
    assert one != other


def _levels(monkeypatch) -> dict[str, int]:
    """The speed level each module is compiled at, by symbol (a spy on the compilers)."""
    import tecomp.codegen.llvm as backend

    seen: dict[str, int] = {}
    for module in (backend, parts):
        real = module.compile_object

        def spy(text, name, *, speed_level=3, host=None, real=real):
            seen[name] = speed_level
            return real(text, name, speed_level=speed_level, host=host)
        monkeypatch.setattr(module, "compile_object", spy)
    return seen


def _sum_and_scan():
    """``s = sum(x)`` (a serial loop at the top level) and ``y[t] = 2 y[t-1]`` rows (a
    serial loop over t holding a parallel loop), as loop programs."""
    from tecomp import expr as E
    from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LoweredFunc, Seq, Store

    n, m = E.Var("n", "int64"), E.Var("m", "int64")
    i, t, j = (E.Var(v, "int64") for v in "itj")
    zero, one = E.Const(0, "int64"), E.Const(1, "int64")
    x = Buffer("x", (n,), "float64", "input")
    acc = Buffer("acc", (), "float64", "local")
    s = Buffer("s", (), "float64", "output")
    summed = LoweredFunc("total", (x,), (s,), (n,), Allocate(acc, Seq((
        Store(acc, (), E.Const(0.0, "float64")),
        For(i, zero, n, Store(acc, (), BufferLoad(x, (i,), "float64"), reduce="sum")),
        Store(s, (), BufferLoad(acc, (), "float64"))))))
    a = Buffer("a", (m,), "float64", "input")
    y = Buffer("y", (n, m), "float64", "output")
    first = For(j, zero, m, Store(y, (zero, j), BufferLoad(a, (j,), "float64")),
                kind="parallel")
    step = For(t, one, n, For(j, zero, m, Store(y, (t, j), BufferLoad(
        y, (E.Sub(t, one, "int64"), j), "float64") * E.Const(2.0, "float64")),
        kind="parallel"))
    scan = LoweredFunc("doubling", (a,), (y,), (n, m), Seq((first, step)))
    return summed, scan


@pytest.mark.parametrize("outline", [True, False])
def test_a_kernel_without_loops_of_its_own_compiles_unoptimised(monkeypatch, rng, outline):
    """A top-level loop that is not parallel becomes a body (compiled at the kernel's
    level), which leaves the kernel's own module calls only: compiled at level 0.  A serial
    loop holding a parallel one (a scan's steps) stays in the kernel's module, which is then
    optimised as before; so is everything with the outlining off."""
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import emit

    monkeypatch.setattr(emit, "OUTLINE_SERIAL", outline)
    monkeypatch.setattr(parts, "BODIES", type(parts.BODIES)())
    levels = _levels(monkeypatch)
    summed, scan = _sum_and_scan()
    x = rng.standard_normal(1001)
    entry = compile_function(summed, cache=None, disk=None)
    np.testing.assert_allclose(Kernel(summed, entry)(x), x.sum(), rtol=1e-12)
    assert levels["total"] == (0 if outline else 3)
    assert len(entry.parts) == (1 if outline else 0)
    assert all(levels[b.name] == 3 for b in entry.parts)
    a = rng.standard_normal(5)
    entry = compile_function(scan, cache=None, disk=None)
    got = Kernel(scan, entry)(a, 6)  # n: no input's shape gives it
    np.testing.assert_allclose(got, a * 2.0 ** np.arange(6)[:, None], rtol=1e-12)
    assert levels["doubling"] == 3 and entry.parts  # the parallel loops are bodies still


@pytest.mark.parametrize("split,with_elf", [(True, True), (True, False), (False, True)])
def test_a_lone_body_is_split_and_its_parts_load_from_disk(tmp_path, rng, monkeypatch, split,
                                                          with_elf):
    """A kernel with fewer parallel loops than compiling threads (a real DCT: one loop over
    blocks of columns, four stages in it) has the large loops of its body compiled as bodies
    of their own, which the body calls; from the persistent cache alone (no LLVM) the body
    is linked against them again. Results equal the evaluator's either way; with the
    split off (``split.SPLIT_BODIES``) no body calls another."""
    import dataclasses

    from tecomp.codegen import llvm as backend
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import split as splitting

    monkeypatch.setattr(splitting, "SPLIT_BODIES", split)
    monkeypatch.setattr(jit, "LOAD_WITH_ELF", with_elf)  # the parts linked by either loader
    here = backend.describe()
    monkeypatch.setattr(backend, "describe", lambda: dataclasses.replace(here, cores=4))
    monkeypatch.setattr(parts, "BODIES", type(parts.BODIES)())
    store = dc.DiskCache(tmp_path)
    X = tc.placeholder((256, 64), name="X")
    Y = tc.ops.dct(X)
    low = tc.lower([Y], [X])
    func = scheduled(low.func, "llvm", check_bounds=False)
    assert splitting.parallel_loops(func) == 1

    def run(entry, x):
        return Kernel(func, entry, inputs=[X], outputs=[Y], hidden=low.constants,
                      single=True)(x)

    first = compile_function(func, cache=None, disk=store)
    nested = [b for b in first.parts if b.parts]
    assert len(nested) == (1 if split else 0)
    assert all(len(b.parts) >= 2 for b in nested)
    x = rng.standard_normal((256, 64))
    want = tc.evaluate([Y], {X: x})[0]
    x = x.astype(np.float32)
    np.testing.assert_allclose(run(first, x), want, rtol=1e-4, atol=1e-4)

    def no_llvm(*args, **kwargs):
        raise AssertionError("compiled, not loaded from the persistent cache")

    parts.BODIES.clear()
    monkeypatch.setattr(backend, "compile_object", no_llvm)
    monkeypatch.setattr(parts, "compile_object", no_llvm)
    second = compile_function(func, cache=None, disk=store)
    assert second.address != first.address
    assert sorted(len(b.parts) for b in second.parts) == sorted(len(b.parts) for b in first.parts)
    np.testing.assert_allclose(run(second, x), want, rtol=1e-4, atol=1e-4)
