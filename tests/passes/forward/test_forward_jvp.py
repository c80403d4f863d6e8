"""Forward mode (tc.jvp): a per-op table checked in float64 against central finite differences.

Each case builds a small program; the JVP along one random direction (a placeholder tangent
per input) must match ``(f(x + h v) - f(x - h v)) / 2h``.  Smooth cases also check that the
Taylor remainder ``|f(x + h v) - f(x) - h jvp|`` shrinks at second order.  Non-smooth points
(max with ties, prod with zero factors) are checked against their defining formulas.
"""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import topo_order, walk

F = "float64"


def ph(shape, name, dtype=F):
    return tc.placeholder(shape, name=name, dtype=dtype)


def run_jvp(out, inputs, arrays, rng, step=1e-6):
    """(jvp, finite difference, remainder function) along one random direction."""
    tans = [ph(x.shape, f"t_{x.name}") for x in inputs]
    dirs = {t: rng.standard_normal(np.asarray(arrays[x]).shape) for x, t in zip(inputs, tans)}
    J = tc.jvp(out, inputs, tans)
    assert J.shape == out.shape and J.dtype == out.dtype
    (j,) = tc.evaluate([J], {**arrays, **dirs})

    def f(h):
        b = dict(arrays)
        for x, t in zip(inputs, tans):
            b[x] = np.asarray(arrays[x]) + h * dirs[t]
        return tc.evaluate([out], b)[0]

    fd = (f(step) - f(-step)) / (2 * step)
    return j, fd, (lambda h: np.abs(f(h) - f(0.0) - h * j).max()), J


def _unary(fn, positive=False):
    def case(rng):
        A = ph((3, 4), "A")
        Y = tc.compute((3, 4), lambda i, j: fn(A[i, j]), name="Y")
        a = rng.uniform(0.5, 2.0, (3, 4)) if positive else rng.standard_normal((3, 4))
        return Y, [A], {A: a}, True
    return case


def case_binary(rng):
    A, B = ph((3, 4), "A"), ph((3, 4), "B")
    Y = tc.compute((3, 4), lambda i, j: (A[i, j] - B[i, j]) / (B[i, j] * B[i, j] + 1.0)
                   + -A[i, j] * tc.exp(B[i, j]) + A[i, j] * A[i, j], name="Y")
    return Y, [A, B], {A: rng.standard_normal((3, 4)), B: rng.standard_normal((3, 4))}, True


def case_pow_both(rng):
    A, B = ph((5,), "A"), ph((5,), "B")
    Y = tc.compute((5,), lambda i: A[i] ** B[i] + tc.pow(A[i], 3.0), name="Y")
    return Y, [A, B], {A: rng.uniform(0.5, 2, 5), B: rng.standard_normal(5)}, True


def case_max_min_select(rng):
    A, B = ph((6,), "A"), ph((6,), "B")
    Y = tc.compute((6,), lambda i: tc.maximum(A[i], B[i]) * tc.minimum(A[i], 0.3)
                   + tc.if_then_else(A[i] > B[i], tc.sin(A[i]), B[i] * B[i]), name="Y")
    a = np.array([0.1, -1.0, 2.0, 0.7, -0.2, 1.5])
    b = np.array([0.5, -2.0, 1.0, 1.1, -0.9, 0.2])
    return Y, [A, B], {A: a, B: b}, False


def case_floor_mod_cast(rng):
    A = ph((5,), "A")
    Y = tc.compute((5,), lambda i: tc.floor(A[i]) * A[i] + A[i] % 0.7
                   + tc.cast(i, F) * A[i], name="Y")
    return Y, [A], {A: np.array([0.33, 1.21, -0.45, 2.6, -1.9])}, False


def case_matmul_bias(rng):
    A, W, b = ph((3, 4), "A"), ph((4, 5), "W"), ph((5,), "b")
    k = tc.reduce_axis(4, "k")
    Y = tc.compute((3, 5), lambda i, j: tc.tanh(tc.sum(A[i, k] * W[k, j], axis=k) + b[j]),
                   name="Y")
    arrays = {A: rng.standard_normal((3, 4)), W: rng.standard_normal((4, 5)),
              b: rng.standard_normal(5)}
    return Y, [A, W, b], arrays, True


def case_sum_where_triangular(rng):
    A = ph((5, 5), "A")

    def body(i):
        k = tc.reduce_axis((0, i + 1), "k")
        return tc.sum(A[i, k] * A[k, i], axis=k, where=tc.ne(k, 2))
    Y = tc.compute((5,), body, name="Y")
    return Y, [A], {A: rng.standard_normal((5, 5))}, True


def case_reduce_inside(rng):
    """A product whose operands are reductions, and a scalar output."""
    A = ph((4, 3), "A")
    k, m = tc.reduce_axis(3, "k"), tc.reduce_axis(4, "m")
    R = tc.compute((4,), lambda i: tc.sum(A[i, k], axis=k) * tc.exp(tc.sum(A[i, k] * 0.5,
                                                                           axis=k)), name="R")
    S = tc.compute((), lambda: tc.sum(R[m] * R[m], axis=m) / tc.sum(A[m, 0] * A[m, 0] + 1.0,
                                                                    axis=m), name="S")
    return S, [A], {A: rng.standard_normal((4, 3))}, True


def case_max_min_reduce(rng):
    A = ph((4, 6), "A")
    k, k2 = tc.reduce_axis(6, "k"), tc.reduce_axis(6, "k2")
    Y = tc.compute((4,), lambda i: tc.max(A[i, k] * A[i, k], axis=k)
                   + tc.exp(tc.min(A[i, k2], axis=k2)), name="Y")
    return Y, [A], {A: rng.standard_normal((4, 6))}, True


def case_max_two_axes_nested(rng):
    """A 2-axis max, and a max nested in a sum over another index (computed inline)."""
    A, B = ph((3, 4, 5), "A"), ph((2, 5), "B")
    k, m = tc.reduce_axis(4, "k"), tc.reduce_axis(5, "m")
    j, m2 = tc.reduce_axis(2, "j"), tc.reduce_axis(5, "m2")
    Y = tc.compute((3,), lambda i: tc.max(A[i, k, m] * 2.0, axis=[k, m])
                   + tc.sum(tc.max(A[i, 0, m2] * B[j, m2], axis=m2), axis=j), name="Y")
    return Y, [A, B], {A: rng.standard_normal((3, 4, 5)), B: rng.standard_normal((2, 5))}, \
        True


def case_prod(rng):
    A = ph((3, 5), "A")
    k = tc.reduce_axis(5, "k")
    Y = tc.compute((3,), lambda i: tc.prod(A[i, k] + 0.1, axis=k), name="Y")
    return Y, [A], {A: rng.standard_normal((3, 5))}, True


def case_gather(rng):
    A, idx = ph((6,), "A"), ph((4,), "idx", "int64")
    Y = tc.compute((4,), lambda i: A[idx[i]] * A[idx[3 - i]], name="Y")
    return Y, [A], {A: rng.standard_normal(6), idx: np.array([0, 5, 2, 2])}, True


CASES = {
    "exp": _unary(tc.exp), "log": _unary(tc.log, positive=True),
    "sqrt": _unary(tc.sqrt, positive=True), "tanh": _unary(tc.tanh),
    "sigmoid": _unary(tc.sigmoid), "sin": _unary(tc.sin), "cos": _unary(tc.cos),
    "erf": _unary(tc.erf), "abs": _unary(lambda v: tc.abs(v) * v, positive=False),
    "neg_pow": _unary(lambda v: -(v ** 2.5), positive=True),
    "binary": case_binary, "pow_both": case_pow_both, "max_min_select": case_max_min_select,
    "floor_mod_cast": case_floor_mod_cast, "matmul_bias": case_matmul_bias,
    "sum_where_triangular": case_sum_where_triangular, "reduce_inside": case_reduce_inside,
    "max_min_reduce": case_max_min_reduce, "max_two_axes_nested": case_max_two_axes_nested,
    "prod": case_prod, "gather": case_gather,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_jvp_matches_finite_differences(name, rng):
    out, inputs, arrays, smooth = CASES[name](rng)
    j, fd, remainder, J = run_jvp(out, inputs, arrays, rng)
    np.testing.assert_allclose(j, fd, rtol=1e-6, atol=1e-7, err_msg=name)
    if smooth:
        r1, r2 = remainder(1e-3), remainder(5e-4)
        assert r2 < 0.3 * r1 or r1 < 1e-12, (name, r1, r2)
    for t in topo_order([J]):
        if t.op.__class__.__name__ == "ComputeOp":
            for e in walk(t.op.body):
                assert not isinstance(e, (E.Delta, E.Zero)), (name, t.name, e)


def test_max_ties_take_first_index(rng):
    A = ph((3, 5), "A")
    k = tc.reduce_axis(5, "k")
    Y = tc.compute((3,), lambda i: tc.max(A[i, k], axis=k), name="Y")
    Z = tc.compute((3,), lambda i: tc.min(A[i, k], axis=k), name="Z")
    a = np.array([[1.0, 3.0, 3.0, 0.0, 3.0], [2.0, 2.0, 2.0, 2.0, 2.0],
                  [-1.0, 0.5, -4.0, 0.5, -4.0]])
    t = ph((3, 5), "t")
    v = rng.standard_normal((3, 5))
    jy, jz = tc.evaluate([tc.jvp(Y, [A], [t]), tc.jvp(Z, [A], [t])], {A: a, t: v})
    rows = np.arange(3)
    np.testing.assert_array_equal(jy, v[rows, np.argmax(a, axis=1)])
    np.testing.assert_array_equal(jz, v[rows, np.argmin(a, axis=1)])
    assert list(np.argmax(a, axis=1)) == [1, 0, 1]  # the first of the tied indices


def test_prod_with_zero_factors(rng):
    A = ph((4, 4), "A")
    k = tc.reduce_axis(4, "k")
    Y = tc.compute((4,), lambda i: tc.prod(A[i, k], axis=k), name="Y")
    a = rng.standard_normal((4, 4))
    a[1, 2] = 0.0
    a[2, 0] = a[2, 3] = 0.0
    a[3, :] = 0.0
    t = ph((4, 4), "t")
    v = rng.standard_normal((4, 4))
    (j,) = tc.evaluate([tc.jvp(Y, [A], [t])], {A: a, t: v})
    expect = [sum(np.prod(np.delete(a[i], k)) * v[i, k] for k in range(4)) for i in range(4)]
    np.testing.assert_allclose(j, expect, rtol=1e-12, atol=1e-15)
    assert j[1] != 0.0 and j[2] == 0.0 and j[3] == 0.0


def test_intermediate_input_and_compute_tangent(rng):
    A = ph((5,), "A")
    H = tc.compute((5,), lambda i: tc.sin(A[i]), name="H")
    Y = tc.compute((5,), lambda i: H[i] * H[i] + A[i], name="Y")
    T = tc.compute((5,), lambda i: tc.cast(i, F) + 1.0, name="T")
    a = rng.standard_normal(5)
    (j,) = tc.evaluate([tc.jvp(Y, [H], [T])], {A: a})
    np.testing.assert_allclose(j, 2 * np.sin(a) * (np.arange(5) + 1.0), rtol=1e-12)


def test_independent_parts_build_no_stages(rng):
    X, W = ph((4,), "X"), ph((4,), "W")
    k = tc.reduce_axis(4, "k")
    V = tc.compute((4,), lambda i: tc.exp(W[i]) * 2.0, name="V")      # no X
    Y = tc.compute((4,), lambda i: V[i] * X[i] + tc.sum(V[k], axis=k), name="Y")
    t = ph((4,), "t")
    J = tc.jvp(Y, [X], [t])
    names = [s.name for s in topo_order([J]) if not s.is_placeholder]
    assert names == ["V", "jvp_Y"] or names == ["V", "d_Y"], names
    w, v = rng.standard_normal(4), rng.standard_normal(4)
    (j,) = tc.evaluate([J], {W: w, t: v})
    np.testing.assert_allclose(j, 2 * np.exp(w) * v, rtol=1e-12)
    (z,) = tc.evaluate([tc.jvp(V, [X], [t])], {W: w})
    np.testing.assert_array_equal(z, np.zeros(4))


def test_jvp_errors():
    X, I = ph((3,), "X"), ph((3,), "I", "int64")
    Y = tc.compute((3,), lambda i: X[i] * tc.cast(I[i], F), name="Y")
    with pytest.raises(tc.DifferentiationError, match="'I'"):
        tc.jvp(Y, [I], [ph((3,), "t")])
    with pytest.raises(tc.TecompError, match=r"shape \(4\).*'X'"):
        tc.jvp(Y, [X], [ph((4,), "t")])
    with pytest.raises(tc.TecompError, match="2 input"):
        tc.jvp(Y, [X, X], [ph((3,), "t")])
    with pytest.raises(tc.DifferentiationError, match="tangent"):
        tc.jvp(Y, [X], [ph((3,), "t", "int64")])
