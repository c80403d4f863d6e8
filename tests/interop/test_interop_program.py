"""The framework-independent part of the wrappers: shapes from (symbolic) sizes, gradient
programs of several outputs, and the gradient of a gradient (no PyTorch or JAX needed)."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp.interop.program import Program, eval_size


class Sym:
    """A stand-in for a framework's symbolic integer: records the arithmetic done on it."""

    def __init__(self, text):
        self.text = text

    def _op(self, other, sym):
        return Sym(f"({self.text} {sym} {getattr(other, 'text', other)})")

    def __add__(self, o):
        return self._op(o, "+")

    def __sub__(self, o):
        return self._op(o, "-")

    def __mul__(self, o):
        return self._op(o, "*")

    def __rmul__(self, o):
        return Sym(f"({o} * {self.text})")

    def __radd__(self, o):
        return Sym(f"({o} + {self.text})")

    def __floordiv__(self, o):
        return self._op(o, "//")


def test_output_shapes_bind_affine_sizes_and_stay_symbolic():
    n, m = tc.var("n"), tc.var("m")
    X = tc.placeholder((n + 2, 3), name="X", dtype="float64")
    Y = tc.placeholder((2 * m,), name="Y", dtype="float64")
    Z = tc.compute((n, 2 * m + 1), lambda i, j: X[i, 0] * 1.0, name="Z")
    p = Program([Z], [X, Y], "Z")
    assert p.output_shapes([(7, 3), (8,)]) == [(5, 9)]
    (shape,) = p.output_shapes([(Sym("s0"), 3), (Sym("s1"),)])
    assert shape[0].text == "((s0 - 2) // 1)" and shape[1].text.endswith("+ 1)")
    with pytest.raises(tc.ArgumentError, match="'X', axis 1: expected extent 3, got 4"):
        p.output_shapes([(7, 4), (8,)])
    with pytest.raises(tc.ArgumentError, match="takes 2 tensor"):
        p.output_shapes([(7, 3)])
    with pytest.raises(tc.ArgumentError, match="'Y' has 1 dimension"):
        p.output_shapes([(7, 3), (8, 1)])
    assert eval_size(tc.var("q") * 2, {tc.var("q"): 4}) == 8


def test_gradient_program_sums_over_outputs_and_skips_integer_inputs(rng):
    n = tc.var("n")
    X = tc.placeholder((n, 4), name="X", dtype="float64")
    idx = tc.placeholder((3,), name="idx", dtype="int64")
    A = tc.compute((3, 4), lambda i, j: tc.sin(X[idx[i], j]), name="A")
    B = tc.compute((n,), lambda i: X[i, 0] * X[i, 1], name="B")
    p = Program([A, B], [X, idx], "AB")
    g = p.gradient()
    assert p.float_inputs == [0] and [t.name for t in g.inputs] == ["X", "idx", "A_head",
                                                                    "B_head"]
    assert p.gradient_dtypes() == (["float64", "int64", "float64", "float64"], ["float64"])
    x = rng.standard_normal((5, 4))
    ix = np.array([4, 0, 4])
    ha, hb = rng.standard_normal((3, 4)), rng.standard_normal(5)
    (dx,) = [g.kernel()(x, ix, ha, hb)]
    want = np.zeros((5, 4))
    np.add.at(want, ix, ha * np.cos(x[ix]))
    want[:, 0] += hb * x[:, 1]
    want[:, 1] += hb * x[:, 0]
    np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-14)
    assert p.gradient() is g  # built once


def test_gradient_of_gradient_matches_finite_differences(rng):
    X = tc.placeholder((3, 4), name="X", dtype="float64")
    W = tc.placeholder((2, 4), name="W", dtype="float64")
    Z = tc.compute((3, 2), lambda i, j: tc.tanh(tc.ops.dense(X, W)[i, j]), name="Z")
    p = Program([Z], [X, W], "Z")
    g2 = p.gradient().gradient()
    assert [t.name for t in g2.inputs][:3] == ["X", "W", "Z_head"]
    x, w, h = rng.standard_normal((3, 4)), rng.standard_normal((2, 4)), rng.standard_normal((3, 2))
    ux, uw = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))

    def inner(x, w, h):  # <ux, dX> + <uw, dW> of the first gradient
        dx, dw = p.gradient().kernel()(x, w, h)
        return float(np.sum(ux * dx) + np.sum(uw * dw))

    got = g2.kernel()(x, w, h, ux, uw)
    eps = 1e-6
    for k, a in enumerate((x, w, h)):
        v = rng.standard_normal(a.shape)
        args_p = [b + eps * v if j == k else b for j, b in enumerate((x, w, h))]
        args_m = [b - eps * v if j == k else b for j, b in enumerate((x, w, h))]
        fd = (inner(*args_p) - inner(*args_m)) / (2 * eps)
        assert abs(fd - float(np.sum(got[k] * v))) < 1e-6 * max(1.0, abs(fd))


def test_program_errors():
    X = tc.placeholder((3,), name="X", dtype="int64")
    Y = tc.compute((3,), lambda i: X[i] * 2, name="Y")
    with pytest.raises(tc.TecompError, match="no float input"):
        Program([Y], [X], "Y").gradient()
    with pytest.raises(tc.TecompError, match="placeholders"):
        Program([Y], [Y], "Y")
