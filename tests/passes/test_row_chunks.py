"""Column sums in one partial sum a core (passes/schedule/cpu/sum_order.py, ``_row_chunks``):
a stage whose only data axis is the innermost loop of its reordered sum (``b[j] = sum_t
H[t, j]``) runs its rows in contiguous chunks, a parallel loop, each into a row of a
temporary, then combines them; compiled and interpreted results against NumPy, and the
stages left alone."""

from __future__ import annotations

import numpy as np
import pytest
from gemm_cases import compiled
from loop_interp import run

import tecomp as tc
from tecomp.host import Host
from tecomp.loopir import Allocate, For
from tecomp.passes.lower import lower_program
from tecomp.passes.schedule.cpu import schedule_cpu, sum_order
from tecomp.passes.schedule.cpu.sum_order import order_sums
from tecomp.stmt_functor import walk_stmt


def _host(cores: int) -> Host:
    return Host(vector_bits=256, fma=True, cores=cores, l1d=32768, l2=1 << 20, l3=8 << 20)


def _column(rows, cols, combiner="sum", dtype="float64", where=False, mean=False):
    H = tc.placeholder((rows, cols), name="H", dtype=dtype)
    t = tc.reduce_axis(rows, name="t")
    op = {"sum": tc.sum, "max": tc.max, "min": tc.min}[combiner]
    if where:
        body = lambda j: op(H[t, j], axis=t, where=tc.ne(t % 3, 1))  # noqa: E731
    else:
        body = lambda j: op(H[t, j], axis=t)  # noqa: E731
    if mean:
        Y = tc.compute((cols,), lambda j: body(j) * (1.0 / rows), name="Y")
    else:
        Y = tc.compute((cols,), body, name="Y")
    return Y, H


def _want(h, combiner, where, mean):
    x = h.astype(np.float64)
    if where:
        x = x[np.arange(len(x)) % 3 != 1]
    got = {"sum": x.sum(0), "max": x.max(0), "min": x.min(0)}[combiner]
    return got / len(h) if mean else got


def _parts(func):
    return [s.buffer for s in walk_stmt(func.body)
            if isinstance(s, Allocate) and s.buffer.name.endswith("_part")]


def test_a_column_sum_becomes_one_partial_sum_a_core():
    Y, H = _column(1001, 40)
    func, _ = lower_program([Y], [H])
    chunked = order_sums(func, _host(3))
    (part,) = _parts(chunked)
    assert [int(d.value) for d in part.shape] == [3, 40]
    par = [s for s in walk_stmt(chunked.body) if isinstance(s, For) and s.kind == "parallel"]
    assert len(par) == 1 and int(par[0].hi.value) == 3
    # one core, no host, or too few rows a chunk: one serial nest
    for host in (_host(1), None):
        assert _parts(order_sums(func, host)) == []
    small, _ = lower_program(*[[x] for x in _column(23, 40)])  # under 8 rows a chunk
    assert _parts(order_sums(small, _host(3))) == []


def test_the_switch_keeps_one_serial_nest(monkeypatch):
    monkeypatch.setattr(sum_order, "COLUMN_CHUNKS", False)
    Y, H = _column(1001, 40)
    func, _ = lower_program([Y], [H])
    assert _parts(order_sums(func, _host(3))) == []


def test_a_stage_with_another_data_axis_is_left_alone():
    H = tc.placeholder((6, 100, 40), name="H", dtype="float64")
    t = tc.reduce_axis(100, name="t")
    Y = tc.compute((6, 40), lambda i, j: tc.sum(H[i, t, j], axis=t), name="Y")
    func, _ = lower_program([Y], [H])
    assert _parts(order_sums(func, _host(3))) == []


@pytest.mark.parametrize("combiner,dtype,where,mean", [
    ("sum", "float64", False, False),
    ("sum", "float32", False, False),
    ("sum", "float64", True, False),
    ("sum", "float64", False, True),
    ("max", "float64", False, False),
    ("min", "float32", True, False),
])
@pytest.mark.parametrize("cores", [2, 3])
def test_chunked_column_sums_compute_the_columns(combiner, dtype, where, mean, cores):
    rows, cols = 1001, 37
    Y, H = _column(rows, cols, combiner, dtype, where, mean)
    func, consts = lower_program([Y], [H])
    sched = schedule_cpu(func, host=_host(cores))
    # a column maximum keeps the plain order (loop_order.py: only windows move ``j`` in)
    assert len(_parts(sched)) == (combiner == "sum")
    h = np.random.default_rng(cores).standard_normal((rows, cols)).astype(dtype)
    want = _want(h, combiner, where, mean)
    tol = 1e-12 if dtype == "float64" else 2e-5
    (interpreted,) = run(sched, [h], constants=consts)
    np.testing.assert_allclose(interpreted, want, rtol=tol, atol=tol)
    k = compiled(sched)
    for threads in (1, 2):
        k.threads = threads
        np.testing.assert_allclose(k(h), want, rtol=tol, atol=tol)


def test_layer_norm_gradient_with_chunked_shift_and_scale_gradients():
    X, g, b = (tc.placeholder((64, 48), name="X", dtype="float64"),
               tc.placeholder((48,), name="g", dtype="float64"),
               tc.placeholder((48,), name="b", dtype="float64"))
    Y = tc.ops.layer_norm(X, g, b)
    G = tc.placeholder(Y.shape, name="G", dtype="float64")
    grads = list(tc.gradient(Y, [X, g, b], head=G))
    func, consts = lower_program(grads, [X, g, b, G])
    sched = schedule_cpu(func, host=_host(2))
    assert len(_parts(sched)) == 2  # the gradients of g and b
    rng = np.random.default_rng(0)
    x, gg, bb, hh = (rng.standard_normal(s) for s in ((64, 48), 48, 48, (64, 48)))
    want = tc.evaluate(grads, {X: x, g: gg, b: bb, G: hh})
    got = compiled(sched)(x, gg, bb, hh)
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12)
