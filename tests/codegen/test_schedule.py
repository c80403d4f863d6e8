"""CPU scheduling: parallel-loop collapsing, inverted reduction bounds, speculated padding
loads — each checked structurally and, on random programs, against the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import Buffer, BufferLoad, For, LetStmt, LoweredFunc, Seq, Store
from tecomp.passes.schedule.cpu import fuse_parallel
from tecomp.passes.schedule.cpu.sum_order import order_sums

I64 = "int64"


def _c(v: int) -> E.Const:
    return E.Const(v, I64)


def _func(body, *bufs) -> LoweredFunc:
    ins = tuple(b for b in bufs if b.scope == "input")
    outs = tuple(b for b in bufs if b.scope == "output")
    return LoweredFunc("f", ins, outs, (), body)


def _copy_of_one_image():
    """``Y[b, c, x] = A[b, c, x]`` over a batch of one, its batch loop parallel."""
    b, c, x = E.Var("b", I64), E.Var("c", I64), E.Var("x", I64)
    A = Buffer("A", (_c(1), _c(16), _c(8)), "float32", "input")
    Y = Buffer("Y", (_c(1), _c(16), _c(8)), "float32", "output")
    store = Store(Y, (b, c, x), BufferLoad(A, (b, c, x), "float32"))
    body = For(b, _c(0), _c(1), For(c, _c(0), _c(16), For(x, _c(0), _c(8), store)),
               kind="parallel")
    return b, c, x, A, Y, store, body


def test_short_parallel_loop_is_collapsed_with_data_loops():
    b, c, x, A, Y, store, body = _copy_of_one_image()
    out = fuse_parallel(_func(body, A, Y), min_trips=64).body
    # the innermost loop (its body a store) stays a loop for the vectoriser
    assert isinstance(out, For) and out.kind == "parallel" and out.hi == _c(16)
    assert isinstance(out.body, LetStmt) and out.body.var == b
    assert out.body.body.var == c and isinstance(out.body.body.body, For)
    assert out.body.body.body.var == x and out.body.body.body.body is store
    same = fuse_parallel(_func(body, A, Y), min_trips=1)
    assert same.body is body
    from tecomp.passes.schedule.cpu import schedule as cpu_schedule

    cpu_schedule.KEEP_INNERMOST = False
    try:  # the switch off: collapsed down to the innermost loop, as before
        out = fuse_parallel(_func(body, A, Y), min_trips=64).body
    finally:
        cpu_schedule.KEEP_INNERMOST = True
    assert out.hi == _c(128) and out.body.body.body.var == x


def test_reduction_and_imperfect_nests_are_not_collapsed():
    b, k, x = E.Var("b", I64), E.Var("k", I64), E.Var("x", I64)
    A = Buffer("A", (_c(2), _c(16)), "float32", "input")
    Y = Buffer("Y", (_c(2),), "float32", "output")
    red = For(b, _c(0), _c(2), For(k, _c(0), _c(16), Store(
        Y, (b,), BufferLoad(A, (b, k), "float32"), "sum")), kind="parallel")
    assert fuse_parallel(_func(red, A, Y)).body is red
    Z = Buffer("Z", (_c(2), _c(16)), "float32", "output")
    imperfect = For(b, _c(0), _c(2), Seq((
        Store(Y, (b,), E.Const(0.0, "float32")),
        For(x, _c(0), _c(16), Store(Z, (b, x), BufferLoad(A, (b, x), "float32"))))),
        kind="parallel")
    assert fuse_parallel(_func(imperfect, A, Y, Z)).body is imperfect
    n = E.Var("n", I64)
    symbolic = For(b, _c(0), _c(2), For(x, _c(0), n, Store(
        Z, (b, x), E.Const(1.0, "float32"))), kind="parallel")
    assert fuse_parallel(_func(symbolic, A, Z)).body is symbolic
    # a load of the stored buffer at another element: a cross-iteration dependence
    shifted = For(b, _c(0), _c(2), For(x, _c(0), _c(15), Store(
        Z, (b, x), BufferLoad(Z, (b, x + 1), "float32"))), kind="parallel")
    assert fuse_parallel(_func(shifted, Z)).body is shifted


def _loops(s) -> list[For]:
    out, stack = [], [s]
    while stack:
        x = stack.pop()
        if isinstance(x, For):
            out.append(x)
        if isinstance(x, Seq):
            stack.extend(reversed(x.stmts))
        elif hasattr(x, "body"):
            stack.append(x.body)
    return out


def test_window_bounds_are_inverted_to_put_the_data_axis_innermost(rng):
    n, r = 12, 3
    G = tc.placeholder((n,), name="G")
    w = tc.placeholder((r,), name="w")

    def f(j):  # input gradient of a 1-D convolution: k in [max(j - n + 1, 0), min(j, r - 1)]
        k = tc.reduce_axis((tc.maximum(j - (n - 1), 0), tc.minimum(j, r - 1) + 1), name="k")
        return tc.sum(G[j - k] * w[k], axis=k)

    D = tc.compute((n + r - 1,), f, name="D")
    func = order_sums(tc.lower(D, [G, w]).func)  # the CPU schedule's loop order
    names = [loop.var.name for loop in _loops(func.body)]
    assert names[-1] == "j" and names.count("j") == 2  # zero fill, then k { j }
    k_loop = [loop for loop in _loops(func.body) if loop.var.name == "k"][0]
    assert isinstance(k_loop.lo, E.Const) and isinstance(k_loop.hi, E.Const)
    g = rng.standard_normal(n).astype(np.float32)
    wv = rng.standard_normal(r).astype(np.float32)
    np.testing.assert_allclose(tc.build(D, [G, w])(g, wv), np.convolve(g, wv), rtol=1e-5,
                               atol=1e-6)


def _random_program(seed: int):
    """A random batch-1 program mixing padded windows, inverted windows and a contraction."""
    r = np.random.default_rng(seed)
    n = int(r.integers(3, 12))
    m = int(r.integers(2, 9))
    kw = int(r.integers(1, 4))
    pad = int(r.integers(0, kw + 1))
    A = tc.placeholder((1, n, m), name="A")
    w = tc.placeholder((kw,), name="w")
    out_m = m + 2 * pad - kw + 1

    def padded(b, i, j):  # a padded 1-D window along the last axis
        k = tc.reduce_axis(kw, name="k")
        inside = tc.all(j + k >= pad, j + k < m + pad)
        return tc.sum(tc.if_then_else(inside, A[b, i, tc.maximum(j + k - pad, 0)], 0.0)
                      * w[k], axis=k)

    P = tc.compute((1, n, out_m), padded, name="P")

    def window(b, i, j):  # its transpose: bounds on k depend on the data axis j
        lo = tc.maximum(j - (out_m - 1), 0)
        k = tc.reduce_axis((lo, tc.minimum(j, kw - 1) + 1), name="k")
        return tc.sum(P[b, i, j - k] * w[k], axis=k)

    Q = tc.compute((1, n, out_m + kw - 1), window, name="Q")
    q = tc.reduce_axis(n, name="q")
    R = tc.compute((1, n, out_m + kw - 1),
                   lambda b, i, j: tc.sum(A[b, q, j % m] * Q[b, i, j], axis=q), name="R")
    arrays = [r.standard_normal((1, n, m)).astype(np.float32),
              r.standard_normal(kw).astype(np.float32)]
    return [P, Q, R], [A, w], arrays


@pytest.mark.parametrize("seed", range(3))
def test_random_scheduled_programs_equal_the_evaluator(seed, monkeypatch):
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)  # thread even tiny calls
    outs, ins, arrays = _random_program(seed)
    head = tc.placeholder(outs[2].shape, name="head")
    grads = tc.gradient(outs[2], ins, head=head)
    h = np.random.default_rng(seed + 100).standard_normal(
        tuple(int(s.value) for s in outs[2].shape)).astype(np.float32)
    kernel = tc.build(outs + grads, ins + [head])
    env = dict(zip(ins + [head], arrays + [h]))
    want = tc.evaluate(outs + grads, env)
    for threads in (1, 2):  # serial, and the collapsed parallel loops on two threads
        kernel.threads = threads
        for g, x in zip(kernel(*arrays, h), want):
            np.testing.assert_allclose(g, x, rtol=1e-4, atol=1e-3,
                                       err_msg=f"seed {seed}, {threads} thread(s)")


def test_padding_loads_are_speculated_without_branches():
    """A zero-padded copy is split at its borders (no guard left per element); a guarded
    read the split keeps (an equality) is a clamped, speculated load, not a branch."""
    X = tc.placeholder((1, 4, 8, 8), name="X")
    W = tc.placeholder((4, 4, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1)
    kernel = tc.build(Y, [X, W])
    assert "sel.t" not in kernel.source  # no branch per padded read
    A = tc.placeholder((4, 8), name="A")
    P = tc.compute((4, 8), lambda i, j: tc.if_then_else(tc.ne(j, 0), A[i, j - 1], 0.0),
                   name="P")
    kernel = tc.build(P, [A])
    assert "sel.t" not in kernel.source
    assert "llvm.smax.i64" in kernel.source or "smax" in kernel.source
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    want = np.concatenate([np.zeros((4, 1), np.float32), a[:, :-1]], axis=1)
    np.testing.assert_array_equal(kernel(a), want)


def test_a_parallel_loop_of_one_iteration_hands_its_mark_inward():
    """A batch of one: the parallel loop of one trip gives its mark to the independent loop
    it holds (then dropped as a serial one-trip loop); a loop whose iterations are not
    independent keeps nothing from it."""
    from tecomp.passes.schedule.cpu.schedule import hand_inward

    b, c, x, A, Y, store, body = _copy_of_one_image()
    out = hand_inward(_func(body, A, Y)).body
    assert out.kind == "serial" and out.body.kind == "parallel" and out.body.var == c
    assert out.body.body.kind == "serial"  # 16 trips: no further
    S = Buffer("S", (_c(1), _c(8)), "float32", "output")  # every c writes the same row
    shared = Store(S, (b, x), BufferLoad(A, (b, c, x), "float32"))
    body = For(b, _c(0), _c(1), For(c, _c(0), _c(16), For(x, _c(0), _c(8), shared)),
               kind="parallel")
    assert hand_inward(_func(body, A, S)).body is body


def test_a_batch_of_one_convolution_runs_its_contraction_on_every_core():
    """The 3x3 convolution of one image: its contraction nest sits in a parallel loop of
    more than one iteration after the CPU schedule (it was one thread's behind a parallel
    loop over the batch of one), and the kernel agrees with the reference on 2 threads."""
    from tecomp import pipeline
    from tecomp.stmt_functor import walk_stmt

    X = tc.placeholder((1, 16, 32, 32), name="X")
    W = tc.placeholder((32, 16, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1)
    func, _, _ = pipeline.loop_program([Y], [X, W], target_name="llvm", name=None,
                                       check_bounds=True)
    scheduled = pipeline.scheduled(func, "llvm")
    parallel = [s for s in walk_stmt(scheduled.body)
                if isinstance(s, For) and s.kind == "parallel"]
    assert parallel and all(not (s.lo == _c(0) and s.hi == _c(1)) for s in parallel)
    k = tc.build(Y, [X, W])
    k.threads = 2
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    (want,) = tc.evaluate(Y, {X: x.astype(np.float64), W: w.astype(np.float64)})
    np.testing.assert_allclose(k(x, w), want, rtol=1e-4, atol=1e-4)
