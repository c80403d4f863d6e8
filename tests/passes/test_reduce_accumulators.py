"""Blocked float32 sums combined in float64 (passes/schedule/cpu/reduce_accumulators.py): structure,
results in the loop-IR interpreter, and the accuracy of compiled long sums."""

from __future__ import annotations

import numpy as np
from cpu_order import lower_program
from loop_interp import run

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import Allocate, For, Seq
from tecomp.passes.schedule.cpu.reduce_accumulators import block_sums


def _stmts(s):
    yield s
    if isinstance(s, Seq):
        for x in s.stmts:
            yield from _stmts(x)
    elif hasattr(s, "body"):
        yield from _stmts(s.body)


def _sum_of_squares(n):
    X = tc.placeholder((n,), name="X")
    i = tc.reduce_axis(n, name="i")
    S = tc.compute((), lambda: tc.sum(X[i] * X[i], axis=i), name="S")
    return X, S


def test_symbolic_sum_is_blocked_and_combined_in_float64():
    n = tc.var("n")
    X, S = _sum_of_squares(n)
    func, _ = lower_program([S], [X])
    out = block_sums(func, block=64)
    stmts = list(_stmts(out.body))
    wide = [s for s in stmts if isinstance(s, Allocate) and s.buffer.dtype == "float64"]
    assert len(wide) == 1 and wide[0].buffer.scope == "local"
    loops = [s for s in stmts if isinstance(s, For)]
    assert [lp.step for lp in loops] == [64, 1]
    assert isinstance(loops[1].hi, E.Min)  # the last block stops at n
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    (got,) = run(out, [x], {n: 1000})
    want = float(np.sum(x.astype(np.float64) ** 2))
    assert abs(float(got) - want) <= 1e-6 * want


def test_short_inner_loop_blocks_one_level_up():
    A = tc.placeholder((300, 8), name="A")
    r, s = tc.reduce_axis(300, name="r"), tc.reduce_axis(8, name="s")
    S = tc.compute((), lambda: tc.sum(A[r, s], axis=[r, s]), name="S")
    func, _ = lower_program([S], [A])
    out = block_sums(func, block=64, min_part=16, min_terms=100)
    loops = [s for s in _stmts(out.body) if isinstance(s, For)]
    # r stepped by 64 // 8 = 8 rows a block, then the rows of the block, then s
    assert [lp.step for lp in loops] == [8, 1, 1]
    a = np.random.default_rng(1).standard_normal((300, 8)).astype(np.float32)
    (got,) = run(out, [a])
    assert np.isclose(float(got), a.astype(np.float64).sum(), rtol=1e-5, atol=1e-4)


def test_left_alone_when_short_double_or_not_a_plain_sum():
    X, S = _sum_of_squares(100)
    func, _ = lower_program([S], [X])
    assert block_sums(func, block=64) is func  # 100 terms: below min_terms
    assert block_sums(func, block=16, min_terms=10) is not func
    D = tc.placeholder((100000,), name="D", dtype="float64")
    i = tc.reduce_axis(100000, name="i")
    T = tc.compute((), lambda: tc.sum(D[i], axis=i), name="T")
    func, _ = lower_program([T], [D])
    assert block_sums(func) is func  # float64 sums are accurate enough already
    M = tc.placeholder((100000,), name="M")
    U = tc.compute((), lambda: tc.max(M[i], axis=i), name="U")
    func, _ = lower_program([U], [M])
    assert block_sums(func) is func  # a max, not a sum


def test_compiled_long_sums_match_float64():
    """A 4M-term float32 sum of squares (the worst case: terms of one sign) and a 2-D sum of
    mixed signs, within 1e-6 relative of float64 (one accumulator gave ~1e-4)."""
    n = 1 << 22
    X, S = _sum_of_squares(n)
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    got = float(tc.build(S, [X])(x))
    want = float(np.sum(x.astype(np.float64) ** 2))
    assert abs(got - want) <= 1e-6 * want
    A = tc.placeholder((2048, 2048), name="A")
    r, s = tc.reduce_axis(2048, name="r"), tc.reduce_axis(2048, name="s")
    T = tc.compute((), lambda: tc.sum(tc.abs(A[r, s]), axis=[r, s]), name="T")
    a = np.random.default_rng(3).standard_normal((2048, 2048)).astype(np.float32)
    got = float(tc.build(T, [A])(a))
    want = float(np.abs(a.astype(np.float64)).sum())
    assert abs(got - want) <= 1e-6 * want


def test_top_level_blocks_run_in_parallel_and_give_the_same_bits():
    n = tc.var("n")
    X, S = _sum_of_squares(n)
    func, _ = lower_program([S], [X])
    out = block_sums(func, block=64, parallel=True)
    loops = [s for s in _stmts(out.body) if isinstance(s, For)]
    assert [lp.kind for lp in loops] == ["parallel", "serial", "serial"]
    x = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    (par,) = run(out, [x], {n: 1000})
    (ser,) = run(block_sums(func, block=64), [x], {n: 1000})
    assert float(par) == float(ser)  # the same additions in the same order
    (empty,) = run(out, [x[:0]], {n: 0})
    assert float(empty) == 0.0
    # compiled: one thread and all threads agree to the bit
    m = 1 << 22
    Y, T = _sum_of_squares(m)
    kernel = tc.build(T, [Y])
    y = np.random.default_rng(5).standard_normal(m).astype(np.float32)
    kernel.threads = 1
    one = float(kernel(y))
    kernel.threads = 2
    assert float(kernel(y)) == one
