"""User errors of tc.gradient / tc.jacobian: each raises a TecompError naming the culprit."""

from __future__ import annotations

import pytest

import tecomp as tc

F = "float64"


def program():
    X = tc.placeholder((3, 4), name="X", dtype=F)
    idx = tc.placeholder((3,), name="idx", dtype="int32")
    Y = tc.compute((3,), lambda i: X[i, idx[i]] * 2.0, name="Y")
    return X, idx, Y


def raises(fn, *fragments):
    with pytest.raises(tc.DifferentiationError) as err:
        fn()
    assert isinstance(err.value, tc.TecompError)
    for f in fragments:
        assert f in str(err.value), str(err.value)


def test_integer_input_is_rejected_not_a_silent_zero():
    X, idx, Y = program()
    raises(lambda: tc.gradient(Y, [X, idx]), "'idx'", "int32", "'Y'")
    raises(lambda: tc.jacobian(Y, idx), "'idx'", "int32")


def test_non_float_output():
    X, idx, Y = program()
    Z = tc.compute((3,), lambda i: idx[i] + 1, name="Z")
    raises(lambda: tc.gradient(Z, [X]), "'Z'", "int32")
    raises(lambda: tc.jacobian(Z, X), "'Z'")
    raises(lambda: tc.gradient("Y", [X]), "'Y'", "not a tensor")


def test_head_shape_and_dtype_are_checked():
    X, _, Y = program()
    wrong = tc.placeholder((4,), name="H4", dtype=F)
    raises(lambda: tc.gradient(Y, [X], wrong), "'H4'", "(4)", "'Y'", "(3)")
    wrong_rank = tc.placeholder((3, 1), name="H31", dtype=F)
    raises(lambda: tc.gradient(Y, [X], wrong_rank), "'H31'", "(3, 1)")
    f32 = tc.placeholder((3,), name="H32", dtype="float32")
    raises(lambda: tc.gradient(Y, [X], f32), "'H32'", "float32", "float64")
    raises(lambda: tc.gradient(Y, [X], 1.0), "head", "'Y'")


def test_symbolic_head_shape_must_match():
    n, m = tc.var("n"), tc.var("m")
    X = tc.placeholder((n,), name="X", dtype=F)
    Y = tc.compute((n,), lambda i: X[i] * X[i], name="Y")
    raises(lambda: tc.gradient(Y, [X], tc.placeholder((m,), name="Hm", dtype=F)),
           "'Hm'", "(m)", "(n)")
    (dX,) = tc.gradient(Y, [X], tc.placeholder((n,), name="Hn", dtype=F), optimize=False)
    assert dX.shape == X.shape


def test_non_tensor_inputs():
    X, _, Y = program()
    raises(lambda: tc.gradient(Y, [X, "W"]), "input 1", "'W'", "not a tensor", "'Y'")
    raises(lambda: tc.gradient(Y, 3), "inputs must be")
    raises(lambda: tc.jacobian(Y, None), "input 0", "None")


def test_bad_overrides():
    X, _, Y = program()
    raises(lambda: tc.gradient(Y, [X], overrides=[1]), "overrides must map")
    raises(lambda: tc.gradient(Y, [X], overrides={3: print}), "override key 3")
    raises(lambda: tc.gradient(Y, [X], overrides={Y: 5}), "'Y'", "not a function")


def test_max_over_a_triangular_domain_is_rejected_by_name():
    X = tc.placeholder((4, 4), name="X", dtype=F)
    k = tc.reduce_axis(4, "k")
    q = tc.reduce_axis((0, k.var + 1), "q")
    Y = tc.compute((4,), lambda i: tc.max(X[i, k] * X[q, i], axis=[k, q]), name="Tri")
    raises(lambda: tc.gradient(Y, [X], optimize=False), "'Tri'", "'q'")
