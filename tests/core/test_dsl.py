"""Declaration: dtypes, operators, printer determinism and user-facing error messages."""

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E


def test_compute_names_axes_after_lambda_parameters():
    A = tc.placeholder((4, 5), name="A")
    B = tc.compute((5, 4), lambda row, col: A[col, row], name="B")
    assert [a.var.name for a in B.op.axes] == ["row", "col"]
    assert "B[row, col] = A[col, row]" in tc.show(B)


def test_tensor_attributes():
    n = tc.var("n")
    A = tc.placeholder((n, 3), name="A", dtype="float64")
    assert A.ndim == 2 and A.dtype == "float64" and A.name == "A"
    assert A.shape[0] == n


def test_python_equality_is_structural():
    i = tc.var("i")
    assert (i + 1) == (i + 1)
    assert (i + 1) != (i + 2)
    assert isinstance(tc.eq(i, 1), E.EQ)


def test_constant_folding_only_in_constructors():
    assert tc.const(2) + 3 == E.Const(5, "int64")
    x = tc.placeholder((3,), name="x")
    e = x[0] * 1.0
    assert e == x[0]


def test_show_is_deterministic_and_disambiguates_names():
    A = tc.placeholder((3,), name="T")
    B = tc.compute((3,), lambda i: A[i] * 2.0, name="T")
    text = tc.show(B)
    assert text == tc.show(B)
    assert "T#1[i] = T[i] * 2.0" in text


@pytest.mark.parametrize("make, message", [
    (lambda A: tc.compute((4,), lambda i, j: A[i, j], name="C"), "compute 'C'"),
    (lambda A: A[1], "has 2 dimension(s) but is indexed with 1"),
    (lambda A: A[0.5, 1], "axis 0"),
    (lambda A: tc.placeholder((-3,), name="P"), "negative extent -3"),
    (lambda A: tc.compute((3,), lambda i: A[i, 0] + tc.cast(i, "int64"), name="D"),
     "cannot mix float32 and int64"),
    (lambda A: tc.compute((3,), lambda i: i / 2, name="D"), "use // for floor division"),
    (lambda A: tc.exp(tc.var("n")), "needs a float argument"),
    (lambda A: tc.sum(A[0, 0], axis=3), "axis"),
    (lambda A: tc.placeholder((3,), dtype="float128"), "unknown dtype"),
    (lambda A: tc.compute((3,), lambda i: "x", name="S"), "not an expression"),
])
def test_declaration_errors_name_the_culprit(make, message):
    A = tc.placeholder((4, 4), name="A")
    with pytest.raises(tc.TecompError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make(A)


def test_python_if_on_expression_is_an_error():
    i = tc.var("i")
    with pytest.raises(tc.TecompError, match="if_then_else"):
        if i < 3:
            pass


def test_user_lambda_exceptions_propagate_unchanged():
    class Boom(Exception):
        pass

    def f(i):
        raise Boom("mine")

    with pytest.raises(Boom, match="mine"):
        tc.compute((3,), f)


def test_int_and_bool_dtypes():
    A = tc.placeholder((4,), name="A", dtype="int32")
    B = tc.compute((4,), lambda i: A[i] * 2 + 1, name="B")
    assert B.dtype == "int32"
    C = tc.compute((4,), lambda i: A[i] > 2, name="C")
    assert C.dtype == "bool"
    a = np.array([1, 2, 3, 4], dtype=np.int32)
    b, c = tc.evaluate([B, C], {A: a})
    np.testing.assert_array_equal(b, a * 2 + 1)
    np.testing.assert_array_equal(c, a > 2)
