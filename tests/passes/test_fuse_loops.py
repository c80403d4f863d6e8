"""Fusion of consecutive parallel row loops (passes/schedule/cpu/fuse_loops.py): fused where every
iteration touches only its own rows, kept apart otherwise, and compiled results equal to the
evaluator's either way."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_order import lower

import tecomp as tc
from tecomp.loopir import Allocate, For, Seq
from tecomp.passes.schedule.cpu.fuse_loops import fuse_row_loops


def _top_loops(func):
    s, out = func.body, []
    stack = [s]
    while stack:
        x = stack.pop()
        if isinstance(x, Seq):
            stack.extend(reversed(x.stmts))
        elif isinstance(x, Allocate):
            stack.append(x.body)
        elif isinstance(x, For):
            out.append(x)
    return out


def _check(outs, ins, arrays, rtol=1e-5):
    kernel = tc.build(outs, ins)
    got = kernel(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


def test_softmax_rows_become_one_parallel_loop():
    X = tc.placeholder((128, 96), name="X")
    Y = tc.ops.softmax(X)
    func = lower([Y], [X])
    assert len(_top_loops(func)) == 4
    fused = fuse_row_loops(func)
    (loop,) = _top_loops(fused)
    assert loop.kind == "parallel" and isinstance(loop.body, Seq) and len(loop.body.stmts) == 4
    x = np.random.default_rng(0).standard_normal((128, 96)).astype(np.float32)
    _check([Y], [X], [x])


@pytest.mark.parametrize("read", ["shifted", "reversed", "transposed"])
def test_reads_of_other_rows_keep_the_loops_apart(read):
    n = 128
    X = tc.placeholder((n, n), name="X")
    A = tc.compute((n, n), lambda i, j: tc.exp(X[i, j]) * 2.0, name="A")
    k = tc.reduce_axis(n, name="k")
    if read == "shifted":
        B = tc.compute((n, n), lambda i, j: A[tc.maximum(i - 1, 0), j] + 1.0, name="B")
    elif read == "reversed":
        B = tc.compute((n, n), lambda i, j: A[n - 1 - i, j] + 1.0, name="B")
    else:
        B = tc.compute((n,), lambda i: tc.sum(A[k, i], axis=k), name="B")
    func = lower([A, B], [X])
    assert fuse_row_loops(func) is func
    x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    _check([A, B], [X], [x])


def test_short_loops_are_left_to_collapse():
    X = tc.placeholder((8, 256), name="X")
    A = tc.compute((8, 256), lambda i, j: X[i, j] * 2.0, name="A")
    B = tc.compute((8, 256), lambda i, j: A[i, j] + X[i, j], name="B")
    func = lower([A, B], [X])
    assert fuse_row_loops(func) is func
    assert len(_top_loops(fuse_row_loops(func, min_trips=8))) == 1


def test_layer_norm_gradient_fused_and_correct():
    X = tc.placeholder((64, 80), name="X", dtype="float64")
    Y = tc.ops.layer_norm(X) if hasattr(tc.ops, "layer_norm") else None
    if Y is None:
        pytest.skip("no layer_norm op")
    H = tc.placeholder(Y.shape, name="H", dtype="float64")
    (g,) = tc.gradient(Y, [X], head=H)
    func = lower([g], [X, H])
    assert len(_top_loops(fuse_row_loops(func))) < len(_top_loops(func))
    rng = np.random.default_rng(2)
    _check([g], [X, H], [rng.standard_normal((64, 80)), rng.standard_normal((64, 80))],
           rtol=1e-10)


@pytest.mark.parametrize("symbolic", [True, False])
def test_rows_of_a_symbolic_length_are_fused(monkeypatch, symbolic):
    """A symbolic row count (a sequence length) is fused like a long loop; the switch off
    keeps the four loops of a softmax apart. Either way the kernel matches the evaluator at
    lengths of 0, 1 and 37."""
    from tecomp.passes.schedule.cpu import fuse_loops

    monkeypatch.setattr(fuse_loops, "SYMBOLIC_TRIPS", symbolic)
    n = tc.var("n")
    X = tc.placeholder((n, 96), name="X")
    Y = tc.ops.softmax(X)
    func = lower([Y], [X])
    assert len(_top_loops(func)) == 4
    fused = fuse_row_loops(func)
    if symbolic:
        (loop,) = _top_loops(fused)
        assert loop.kind == "parallel" and len(loop.body.stmts) == 4
    else:
        assert fused is func
    kernel = tc.build(Y, [X])
    for rows in (0, 1, 37):
        x = np.random.default_rng(rows).standard_normal((rows, 96)).astype(np.float32)
        want = tc.evaluate([Y], {X: x})[0]
        np.testing.assert_allclose(kernel(x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_rows", [True, False])
def test_rows_of_a_batch_are_fused(monkeypatch, batch_rows):
    """A softmax over the last axis of [heads, rows, columns]: four nests of a short parallel
    loop over heads around the rows, one nest with the four stages inside (BATCH_ROWS)."""
    from tecomp.passes.schedule.cpu import fuse_loops

    monkeypatch.setattr(fuse_loops, "BATCH_ROWS", batch_rows)
    X = tc.placeholder((4, 80, 48), name="X")
    Y = tc.ops.softmax(X)
    func = lower([Y], [X])
    assert len(_top_loops(func)) == 4
    loops = _top_loops(fuse_row_loops(func))
    assert len(loops) == (1 if batch_rows else 4)
    if batch_rows:
        inner = loops[0].body
        assert isinstance(inner, For) and isinstance(inner.body, Seq)
        assert len(inner.body.stmts) == 4
    x = np.random.default_rng(4).standard_normal((4, 80, 48)).astype(np.float32)
    _check([Y], [X], [x])


def test_rows_of_a_batch_read_at_another_row_stay_apart():
    X = tc.placeholder((4, 80, 48), name="X")
    A = tc.ops.softmax(X)
    B = tc.compute((4, 80, 48), lambda h, i, j: A[h, 79 - i, j] * 2.0, name="B")
    func = lower([A, B], [X])
    fused = fuse_row_loops(func)
    assert len(_top_loops(fused)) == 2  # the softmax's four stages, then B apart
    x = np.random.default_rng(6).standard_normal((4, 80, 48)).astype(np.float32)
    _check([A, B], [X], [x])
