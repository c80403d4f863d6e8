"""Guarded sums whose value a select discards (passes/schedule/cpu/unguard.py): causal scores
take the register tiles unguarded; a guard that keeps a read in bounds stays; a nest no tile
takes gets its guard back; results match the evaluator."""

from __future__ import annotations

import numpy as np

import tecomp as tc
from tecomp.host import describe
from tecomp.loop_printer import format_func
from tecomp.passes.lower import lower_program
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.microkernel import tile_shape
from tecomp.passes.schedule.cpu.unguard import reguard, unguard_sums


def _scores(n: int, d: int, shift: int = 0):
    Q = tc.placeholder((n + shift, d), name="Q")
    K = tc.placeholder((n, d), name="K")
    c = tc.reduce_axis(d, name="c")
    S = tc.compute((n, n), lambda i, j: tc.if_then_else(
        j <= i, tc.sum(Q[i + shift, c] * K[j, c], axis=c) * 0.125, -1e30), name="S")
    return S, [Q, K]


def test_causal_scores_take_the_register_tiles(rng):
    host = describe()
    mr, nr = tile_shape(host, 4)
    S, ins = _scores(70, 40)
    func, _ = lower_program([S], ins)
    assert "if (j <= i)" in format_func(func)
    unguarded, done = unguard_sums(func)
    assert len(done) == 1 and "if (j <= i)" not in format_func(unguarded)
    text = format_func(schedule_cpu(func, host=host))
    assert f"float32[{mr}, {nr}] (local)" in text
    arrays = [rng.standard_normal(x.shape).astype(np.float32) for x in ins]
    want = tc.evaluate([S], dict(zip(ins, arrays)))[0]
    np.testing.assert_allclose(tc.build(S, ins)(*arrays), want, rtol=1e-5, atol=1e-5)


def test_a_guard_that_keeps_a_read_in_bounds_stays(rng):
    """``select(i < 7, sum(A[i + 1, k] ..), 0)`` on 8 rows: unguarded, row 7 would read A[8]."""
    A = tc.placeholder((8, 40), name="A")
    B = tc.placeholder((40, 40), name="B")
    k = tc.reduce_axis(40, name="k")
    C = tc.compute((8, 40), lambda i, j: tc.if_then_else(
        i < 7, tc.sum(A[i + 1, k] * B[j, k], axis=k), 0.0), name="C")
    func, _ = lower_program([C], [A, B])
    _, done = unguard_sums(func)
    assert not done
    arrays = [rng.standard_normal(x.shape).astype(np.float32) for x in (A, B)]
    want = tc.evaluate([C], dict(zip([A, B], arrays)))[0]
    np.testing.assert_allclose(tc.build(C, [A, B])(*arrays), want, rtol=1e-5, atol=1e-5)


def test_a_nest_no_tile_takes_gets_its_guard_back():
    S, ins = _scores(6, 5)  # too small for a register tile
    func, _ = lower_program([S], ins)
    unguarded, done = unguard_sums(func)
    assert done
    assert format_func(reguard(unguarded, done)) == format_func(func)
    assert "if (j <= i)" in format_func(schedule_cpu(func, host=describe()))
