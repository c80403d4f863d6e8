"""Max/min reductions in the LLVM backend: the vectorised form (``maxnum`` plus a NaN flag,
``codegen/llvm/emit.py``) keeps NumPy's NaN propagation, infinities and empty reductions."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.llvm import build_kernel
from tecomp.codegen.llvm.emit import minmax_reduction
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LoweredFunc, Seq, Store


def row_reduce(which: str, dtype: str, cols: int | None = None) -> tc.Kernel:
    n, m = tc.var("n"), tc.var("m")
    X = tc.placeholder((n, m), name="X", dtype=dtype)
    r = tc.reduce_axis(m if cols is None else cols, name="r")
    red = tc.max if which == "max" else tc.min
    Y = tc.compute((n,), lambda i: red(X[i, r], axis=r), name="Y")
    return tc.build(Y, [X])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("which", ["max", "min"])
def test_nan_inf_and_rows_match_numpy(rng, which: str, dtype: str) -> None:
    x = rng.standard_normal((9, 301)).astype(dtype)
    x[1, 0] = np.nan          # first element
    x[2, 300] = np.nan        # last element (the scalar epilogue)
    x[3, 150] = np.nan        # inside a vector
    x[3, 151] = np.inf
    x[4, :] = np.inf          # all +inf
    x[5, :] = -np.inf         # all -inf
    x[6, 7] = -np.inf
    x[6, 8] = np.inf
    x[7, :] = np.nan          # all NaN
    got = row_reduce(which, dtype)(x)
    want = x.max(1) if which == "max" else x.min(1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("which", ["max", "min"])
def test_empty_reduction_gives_identity(which: str) -> None:
    x = np.zeros((3, 0), dtype=np.float32)
    got = row_reduce(which, "float32")(x)
    np.testing.assert_array_equal(got, np.full(3, -np.inf if which == "max" else np.inf))


def test_whole_array_max_with_nan(rng) -> None:
    X = tc.placeholder((64, 33), name="X")
    r, s = tc.reduce_axis(64, name="r"), tc.reduce_axis(33, name="s")
    Z = tc.compute((), lambda: tc.max(X[r, s], axis=[r, s]), name="Z")
    k = tc.build(Z, [X])
    x = rng.standard_normal((64, 33)).astype(np.float32)
    assert k(x) == x.max()
    x[10, 3] = np.nan  # NaN in an early row: later rows must not clear it
    assert np.isnan(k(x))


def test_vectorised_form_is_used() -> None:
    src = row_reduce("max", "float32", cols=1024).source
    assert "maxnum" in src and "x float>" in src
    assert "llvm.maximum" not in src


def _acc_loop(value_of, reduce: str | None = None, init: float = float("-inf")):
    """``acc = init; for r: acc = value_of(acc, x[r]); y = acc`` in loop IR."""
    n, r = E.Var("n"), E.Var("r")
    x = Buffer("x", (n,), "float64", "input")
    y = Buffer("y", (), "float64", "output")
    acc = Buffer("acc", (), "float64", "local")
    load_acc = BufferLoad(acc, (), "float64")
    xr = BufferLoad(x, (r,), "float64")
    loop = For(r, E.Const(0, "int64"), n, Store(acc, (), value_of(load_acc, xr), reduce))
    body = Allocate(acc, Seq((Store(acc, (), E.Const(init, "float64")), loop,
                              Store(y, (), load_acc))))
    return LoweredFunc("accmax", (x,), (y,), (n,), body), loop


@pytest.mark.parametrize("form", ["acc_first", "acc_second", "reduce"])
def test_store_forms(form: str) -> None:
    if form == "acc_first":
        func, loop = _acc_loop(lambda a, v: E.Max(a, v, "float64"))
    elif form == "acc_second":
        func, loop = _acc_loop(lambda a, v: E.Max(v, a, "float64"))
    else:
        func, loop = _acc_loop(lambda a, v: v, reduce="max")
    assert minmax_reduction(loop) is not None
    k = build_kernel(func)
    x = np.array([1.0, 5.0, -2.0, 4.0])
    assert k(x) == 5.0
    assert np.isnan(k(np.array([np.nan, 1.0, 2.0])))
    assert k(np.zeros(0)) == -np.inf


def test_not_matched_when_value_reads_the_accumulator() -> None:
    func, loop = _acc_loop(lambda a, v: E.Max(a, E.Add(a, v, "float64"), "float64"), init=0.0)
    assert minmax_reduction(loop) is None
    k = build_kernel(func)
    assert k(np.array([1.0, 2.0, -5.0])) == 3.0
