"""Constant entries of ``Tensor.shape`` behave as Python ints; symbolic ones say why not."""

import operator

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E


def test_constant_shape_entries_are_ints_where_python_expects_one():
    X = tc.placeholder((3, 4), name="X")
    assert int(X.shape[0]) == 3 and operator.index(X.shape[1]) == 4
    assert X.shape == (3, 4) and (3, 4) == X.shape and X.shape != (4, 3)
    assert X.shape[0] == 3 and 3 == X.shape[0] and X.shape[0] != 4
    assert list(range(X.shape[0])) == [0, 1, 2]
    assert np.zeros(X.shape).shape == (3, 4)
    assert np.ones((X.shape[1], 2)).shape == (4, 2)
    assert [1, 2, 3, 4, 5][X.shape[0]] == 4
    assert repr(X.shape) == "(3, 4)" and repr(tc.placeholder((5,)).shape) == "(5,)"


def test_derived_shapes_stay_ints():
    X = tc.placeholder((3, 4), name="X")
    Y = tc.compute((X.shape[0] * 2, X.shape[1] - 1), lambda i, j: X[i // 2, j], name="Y")
    assert Y.shape == (6, 3)
    y = tc.evaluate([Y], {X: np.arange(12, dtype=np.float32).reshape(3, 4)})[0]
    assert y.shape == tuple(int(s) for s in Y.shape)


def test_hash_agrees_with_equality():
    X = tc.placeholder((3, 4), name="X")
    assert hash(X.shape[0]) == hash(3) and hash(X.shape) == hash((3, 4))
    assert {3: "three"}[X.shape[0]] == "three"
    assert {X.shape[0]: "three"}[3] == "three"


def test_expression_equality_stays_structural():
    assert E.Const(3, "int64") == E.Const(3, "int64")
    assert E.Const(3, "int32") != E.Const(3, "int64")
    assert E.Const(3.0, "float32") != 3 and E.Const(1, "int64") != True  # noqa: E712
    assert E.Const(True, "bool") != 1
    n = tc.var("n")
    assert (n + 1) == (n + 1) and (n + 1) != 1


def test_symbolic_entries_name_their_variable():
    n = tc.var("n")
    X = tc.placeholder((n, 2 * n + 1), name="X")
    with pytest.raises(tc.TecompError, match="'n'"):
        int(X.shape[0])
    with pytest.raises(tc.TecompError, match=r"2 \* n \+ 1 is symbolic.*'n'"):
        range(X.shape[1])
    with pytest.raises(TypeError):  # what Python code probing operator.index catches
        operator.index(X.shape[0])
    with pytest.raises(tc.TecompError, match="not an integer constant"):
        int(tc.const(2.5))
    assert X.shape != (3, 7)


def test_shape_entries_as_operator_arguments():
    X = tc.placeholder((1, 2, 8, 8), name="X")
    W = tc.placeholder((2, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=W.shape[0], padding=(1, W.shape[0] - 1))
    assert Y.shape == (1, 2, 4, 4)
    assert tc.ops.max_pool2d(X, X.shape[0] * 2).shape == (1, 2, 4, 4)
    n = tc.var("n")
    with pytest.raises(tc.TecompError, match="'n'"):
        tc.ops.max_pool2d(X, n)
