"""Array contraction of row temporaries (passes/schedule/cpu/contract_rows.py): a temporary only a
fused row loop touches, at its own row, becomes a row allocated inside the loop; anything else is
left whole; compiled results equal the evaluator's with and without the pass."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_order import lower
from test_fuse_loops import _check

import tecomp as tc
from tecomp.loopir import Allocate, For, Seq
from tecomp.passes.schedule.cpu import contract_rows as cr
from tecomp.passes.schedule.cpu.contract_rows import contract_rows
from tecomp.passes.schedule.cpu.fuse_loops import fuse_row_loops
from tecomp.stmt_functor import walk_stmt


def _allocations(stmt):
    """(buffer name, shape rank, inside a parallel loop) of every allocation in ``stmt``."""
    out = []

    def walk(s, inside):
        if isinstance(s, Allocate):
            out.append((s.buffer.name, len(s.buffer.shape), inside))
            walk(s.body, inside)
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, inside)
        elif isinstance(s, For):
            walk(s.body, inside or s.kind == "parallel")
        else:
            for x in walk_stmt(s):
                if x is not s and isinstance(x, (Allocate, Seq, For)):
                    walk(x, inside)

    walk(stmt, False)
    return out


@pytest.mark.parametrize("on", [True, False])
def test_softmax_temporaries_become_rows(monkeypatch, on):
    monkeypatch.setattr(cr, "CONTRACT_ROWS", on)
    X = tc.placeholder((128, 96), name="X")
    Y = tc.ops.softmax(X)
    func = contract_rows(fuse_row_loops(lower([Y], [X])))
    allocs = _allocations(func.body)
    exp = [a for a in allocs if a[0] == "softmax_exp"]
    # the exponentials: a [96] row inside the loop, or the whole [128, 96] outside it
    assert exp == ([("softmax_exp", 1, True)] if on else [("softmax_exp", 2, False)])
    if on:
        assert all(inside for _, _, inside in allocs)
    x = np.random.default_rng(0).standard_normal((128, 96)).astype(np.float32) * 4
    _check([Y], [X], [x])


def test_layer_norm_gradient_with_row_temporaries(monkeypatch):
    X, g, b = (tc.placeholder((96, 80), name="X"), tc.placeholder((80,), name="g"),
               tc.placeholder((80,), name="b"))
    Y = tc.ops.layer_norm(X, g, b)
    H = tc.placeholder(Y.shape, name="H")
    grads = list(tc.gradient(Y, [X, g, b], head=H))
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((96, 80), (80,), (80,), (96, 80))]
    func = contract_rows(fuse_row_loops(lower(grads, [X, g, b, H])))
    assert any(inside for _, _, inside in _allocations(func.body))
    _check(grads, [X, g, b, H], arrays, rtol=1e-4)


def test_a_temporary_read_at_another_row_stays_whole():
    n = 128
    X = tc.placeholder((n, n), name="X")
    A = tc.ops.softmax(X)  # its exponentials and sums are read at the mirrored row
    B = tc.compute((n, n), lambda i, j: A[n - 1 - i, j] + 1.0, name="B")
    func = contract_rows(fuse_row_loops(lower([B], [X])))
    allocs = _allocations(func.body)
    assert ("softmax_exp", 2, False) in allocs and ("softmax_sum", 1, False) in allocs
    assert ("softmax_max", 0, True) in allocs  # only this row's own code reads the maximum
    x = np.random.default_rng(2).standard_normal((n, n)).astype(np.float32)
    _check([B], [X], [x])


def test_a_row_over_the_limit_or_of_symbolic_length_stays_whole():
    wide = cr.ROW_BYTES // 4 + 16  # float32 elements: one row more than the limit
    X = tc.placeholder((64, wide), name="X")
    Y = tc.ops.softmax(X)
    func = contract_rows(fuse_row_loops(lower([Y], [X])))
    assert ("softmax_exp", 2, False) in _allocations(func.body)
    n = tc.var("n")
    Xn = tc.placeholder((64, n), name="X")
    Yn = tc.ops.softmax(Xn)
    func = contract_rows(fuse_row_loops(lower([Yn], [Xn])))
    assert ("softmax_exp", 2, False) in _allocations(func.body)
    x = np.random.default_rng(3).standard_normal((64, 37)).astype(np.float32)
    _check([Yn], [Xn], [x])


def test_short_row_loops_are_left_to_collapse():
    """A parallel loop of fewer than 64 rows keeps its nest perfect for fuse_parallel."""
    X = tc.placeholder((8, 256), name="X")
    Y = tc.ops.softmax(X)
    fused = fuse_row_loops(lower([Y], [X]), min_trips=8)
    assert ("softmax_exp", 2, False) in _allocations(contract_rows(fused).body)
    assert ("softmax_exp", 1, True) in _allocations(contract_rows(fused, min_trips=8).body)


def test_a_batch_of_rows_keeps_one_row():
    """[heads, rows, columns]: the batch's nest owns a row per (head, row) pair; the
    exponentials lose both of those dimensions."""
    X = tc.placeholder((4, 80, 48), name="X")
    Y = tc.ops.softmax(X)
    func = contract_rows(fuse_row_loops(lower([Y], [X])))
    assert ("softmax_exp", 1, True) in _allocations(func.body)
    x = np.random.default_rng(7).standard_normal((4, 80, 48)).astype(np.float32)
    _check([Y], [X], [x])
