"""Bounds checks on data-dependent indices: gathers, scatters, nested gathers, guarded reads."""

import numpy as np
import pytest

import tecomp as tc
from tecomp.loopir import Seq, Store
from tecomp.passes.bounds_check import add_bounds_checks


def _gather():
    n, m = tc.var("n"), tc.var("m")
    E = tc.placeholder((m, 4), name="E")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    G = tc.compute((n, 4), lambda i, j: E[idx[i], j] * 2.0, name="G")
    return E, idx, G


def test_gather_in_range_matches_evaluator(rng):
    E, idx, G = _gather()
    e = rng.standard_normal((5, 4)).astype(np.float32)
    ix = rng.integers(0, 5, size=7)
    got = tc.build(G, [E, idx])(e, ix)
    np.testing.assert_allclose(got, tc.evaluate([G], {E: e, idx: ix})[0], rtol=1e-6)


@pytest.mark.parametrize("bad,pos", [(5, 5), (-1, -1), (1 << 40, 1 << 40)])
def test_gather_out_of_range_names_tensor_and_position(bad, pos):
    E, idx, G = _gather()
    k = tc.build(G, [E, idx])
    e = np.zeros((5, 4), np.float32)
    with pytest.raises(tc.IndexBoundsError) as info:
        k(e, np.array([0, 2, bad, 1]))
    msg = str(info.value)
    assert "'E'" in msg and f"({pos}, 0)" in msg and "axis 0" in msg and "[0, 5)" in msg
    assert isinstance(info.value, tc.TecompError)


def test_first_failure_in_loop_order_is_reported():
    E, idx, G = _gather()
    k = tc.build(G, [E, idx])
    k.threads = 1
    with pytest.raises(tc.IndexBoundsError, match=r"\(7, 0\)"):
        k(np.zeros((5, 4), np.float32), np.array([0, 7, 9]))


def test_empty_table_read_is_reported_not_performed():
    E, idx, G = _gather()
    with pytest.raises(tc.IndexBoundsError, match=r"\[0, 0\)"):
        tc.build(G, [E, idx])(np.zeros((0, 4), np.float32), np.array([0]))


def test_scatter_write_out_of_range_is_skipped_and_reported():
    E, idx, G = _gather()
    (dE,) = tc.gradient(G, [E])
    k = tc.build(dE, [E, idx])
    e = np.zeros((3, 4), np.float32)
    np.testing.assert_allclose(k(e, np.array([0, 2, 2])),
                               tc.evaluate([dE], {E: e, idx: np.array([0, 2, 2]),
                                                    E.shape[0]: 3})[0])
    with pytest.raises(tc.IndexBoundsError, match="write to tensor 'E_grad'.*\\(3, 0\\)"):
        k(e, np.array([0, 3]))


def test_nested_gather_and_int32_index():
    n = tc.var("n")
    A = tc.placeholder((6,), name="A")
    p = tc.placeholder((n,), name="p", dtype="int32")
    q = tc.placeholder((4,), name="q", dtype="int32")
    R = tc.compute((n,), lambda i: A[q[p[i]]], name="R")
    k = tc.build(R, [A, p, q])
    a = np.arange(6, dtype=np.float32)
    qv = np.array([5, 4, 3, 2], np.int32)
    np.testing.assert_array_equal(k(a, np.array([0, 3, 1], np.int32), qv), [5, 2, 4])
    with pytest.raises(tc.IndexBoundsError, match="'q'.*\\(4,\\)"):
        k(a, np.array([4], np.int32), qv)
    with pytest.raises(tc.IndexBoundsError, match="'A'.*\\(9,\\)"):
        k(a, np.array([0], np.int32), np.array([9, 0, 0, 0], np.int32))


def test_guarded_read_does_not_fire_where_not_evaluated():
    n, m = tc.var("n"), tc.var("m")
    E = tc.placeholder((m,), name="E")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    G = tc.compute((n,), lambda i: tc.if_then_else(
        (idx[i] >= 0) & (idx[i] < m), E[idx[i]], tc.const(-1.0)), name="G")
    ix = np.array([0, -3, 2, 99])
    e = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(tc.build(G, [E, idx])(e, ix), [1.0, -1.0, 3.0, -1.0])


def test_opt_out_builds_without_checks():
    E, idx, G = _gather()
    checked = tc.build(G, [E, idx])
    raw = tc.build(G, [E, idx], check_bounds=False)
    assert len(raw.ir.outputs) == 1 and len(checked.ir.outputs) == 2
    e = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(raw(e, np.array([1, 0])), checked(e, np.array([1, 0])))


def test_pass_leaves_affine_programs_alone():
    n = tc.var("n")
    A = tc.placeholder((n, 3), name="A")
    B = tc.compute((n,), lambda i: A[i, 0] + A[i, 2], name="B")
    func = tc.lower([B], [A]).func
    out, info = add_bounds_checks(func)
    assert info is None and out is func


def test_pass_records_each_access_once():
    E, idx, G = _gather()
    out, info = add_bounds_checks(tc.lower([G], [E, idx]).func)
    assert [c.buffer for c in info.checks] == ["E"] and info.checks[0].axes == (0,)
    assert out.outputs[-1] is info.error and info.error.shape[0].value == 3

    def stores(s):
        if isinstance(s, Store):
            yield s
        for f in ("body", "then", "else_"):
            if getattr(s, f, None) is not None:
                yield from stores(getattr(s, f))
        if isinstance(s, Seq):
            for t in s.stmts:
                yield from stores(t)

    assert sum(1 for s in stores(out.body) if s.buffer is info.error) == 3
