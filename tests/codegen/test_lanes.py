"""Lane loops (``For(kind="lanes")``): vector operations where the form allows, the serial
loop otherwise, the same results either way."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.llvm import build_kernel
from tecomp.codegen.target import AS_GIVEN
from tecomp.lanes import vector_form
from tecomp.loopir import Buffer, BufferLoad, For, LoweredFunc, Seq, Store


def _c(n):
    return E.Const(n, "int64")


def _program(value_of, lanes=8, rows=3, dtype="float32"):
    """``Y[r, j0 + jj] = value_of(X, r, jj)`` over lanes ``jj`` of a lane loop, for every
    block ``j0`` of ``lanes`` columns and every row ``r``."""
    width = 4 * lanes
    X = Buffer("X", (_c(rows), _c(2 * width)), dtype, "input")
    Y = Buffer("Y", (_c(rows), _c(width)), dtype, "output")
    j0, jj = E.Var("j0", "int64"), E.Var("jj", "int64")
    stores = tuple(Store(Y, (_c(r), E.add(j0, jj)), value_of(X, r, j0, jj)) for r in range(rows))
    lane = For(jj, _c(0), _c(lanes), Seq(stores), kind="lanes")
    body = For(j0, _c(0), _c(width), lane, step=lanes)
    return LoweredFunc("lanes_test", (X,), (Y,), (), body), lane


def _run(func, x):
    A = tc.placeholder(tuple(int(d.value) for d in func.inputs[0].shape), name="X",
                       dtype=func.inputs[0].dtype)
    Yt = tc.placeholder(tuple(int(d.value) for d in func.outputs[0].shape), name="Y",
                        dtype=func.outputs[0].dtype)
    kernel = build_kernel(func, inputs=[A], outputs=[Yt], single=True, schedule=AS_GIVEN,
                          cache=None)
    return kernel(x), kernel.source


def _load(X, r, col):
    return BufferLoad(X, (_c(r), col), X.dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_contiguous_lanes_become_vector_operations(dtype):
    # Y[r, j] = X[r, j] * X[r, 0] + X[(r + 1) % 3, j + 1] - 2: contiguous reads, a
    # broadcast element and a constant
    def value(X, r, j0, jj):
        col = E.add(j0, jj)
        prod = E.mul(_load(X, r, col), _load(X, r, _c(0)))
        return E.sub(E.add(prod, _load(X, (r + 1) % 3, E.add(col, _c(1)))),
                     E.Const(2.0, dtype))
    func, lane = _program(value, dtype=dtype)
    assert vector_form(lane) is not None
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(dtype)
    got, source = _run(func, x)
    want = x[:, :32] * x[:, :1] + np.roll(x, -1, axis=0)[:, 1:33] - 2
    np.testing.assert_allclose(got, want, rtol=1e-6)
    scalar = "float" if dtype == "float32" else "double"
    assert f"<8 x {scalar}>" in source


def test_lane_maximum_propagates_nan_as_the_scalar_rule():
    def value(X, r, j0, jj):
        return E.maximum(_load(X, r, E.add(j0, jj)), E.Const(0.0, "float32"))
    func, lane = _program(value)
    assert vector_form(lane) is not None
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    x[1, 5] = np.nan
    got, source = _run(func, x)
    np.testing.assert_array_equal(got, np.maximum(x[:, :32], 0.0))  # NaN stays NaN
    assert "llvm.maximum.v8f32" in source or "<8 x float>" in source


def test_lane_select_on_a_lane_index_condition():
    # a causal mask: Y[r, j] = X[r, j] where j <= 10 r, else -1
    def value(X, r, j0, jj):
        col = E.add(j0, jj)
        return E.select(E.compare(E.LE, col, _c(10 * r)), _load(X, r, col),
                        E.Const(-1.0, "float32"))
    func, lane = _program(value)
    assert vector_form(lane) is not None
    x = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    got, _ = _run(func, x)
    cols = np.arange(32)
    want = np.where(cols[None, :] <= 10 * np.arange(3)[:, None], x[:, :32], -1.0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["strided", "call", "lane in a uniform index"])
def test_other_lane_loops_run_serially_with_the_same_results(case):
    def value(X, r, j0, jj):
        col = E.add(j0, jj)
        if case == "strided":
            return _load(X, r, E.add(col, col))  # X[r, 2 j]: not one vector load
        if case == "call":
            return E.call("exp", _load(X, r, col))
        return BufferLoad(X, (E.mod(jj, _c(3)), col), X.dtype)
    func, lane = _program(value)
    assert vector_form(lane) is None
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    got, _ = _run(func, x)
    cols = np.arange(32)
    if case == "strided":
        want = x[:, 2 * cols]
    elif case == "call":
        want = np.exp(x[:, :32])
    else:
        want = np.broadcast_to(x[(cols % 8) % 3, cols], (3, 32))  # the same for each row
    np.testing.assert_allclose(got, want, rtol=1e-6)
