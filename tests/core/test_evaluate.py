"""The reference evaluator against NumPy on the foundation's program suite."""

import numpy as np
import pytest

import tecomp as tc


def test_matmul_symbolic_rows(rng):
    n = tc.var("n")
    A = tc.placeholder((n, 8), name="A", dtype="float64")
    B = tc.placeholder((8, 5), name="B", dtype="float64")
    k = tc.reduce_axis(8, name="k")
    C = tc.compute((n, 5), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    for rows in (1, 7):
        a, b = rng.standard_normal((rows, 8)), rng.standard_normal((8, 5))
        np.testing.assert_allclose(tc.evaluate(C, {A: a, B: b})[0], a @ b, rtol=1e-12)


def test_floor_division_and_modulo_follow_python():
    A = tc.placeholder((7,), name="A", dtype="int64")
    Q = tc.compute((7,), lambda i: A[i] // 3, name="Q")
    R = tc.compute((7,), lambda i: A[i] % -3, name="R")
    a = np.arange(-3, 4, dtype=np.int64)
    q, r = tc.evaluate([Q, R], {A: a})
    assert list(q) == [x // 3 for x in a.tolist()]
    assert list(r) == [x % -3 for x in a.tolist()]


def test_flatten_unflatten(rng):
    A = tc.placeholder((3, 5), name="A")
    F = tc.compute((15,), lambda i: A[i // 5, i % 5], name="F")
    U = tc.compute((3, 5), lambda i, j: F[i * 5 + j], name="U")
    a = rng.standard_normal((3, 5)).astype(np.float32)
    f, u = tc.evaluate([F, U], {A: a})
    np.testing.assert_array_equal(f, a.reshape(-1))
    np.testing.assert_array_equal(u, a)


def test_cumsum_via_where(rng):
    A = tc.placeholder((9,), name="A", dtype="float64")
    k = tc.reduce_axis(9, name="k")
    S = tc.compute((9,), lambda i: tc.sum(A[k], axis=k, where=k <= i), name="S")
    a = rng.standard_normal(9)
    np.testing.assert_allclose(tc.evaluate(S, {A: a})[0], np.cumsum(a))


def test_reduction_bounds_depending_on_outer_axis(rng):
    A = tc.placeholder((6,), name="A", dtype="float64")

    def body(i):
        k = tc.reduce_axis((0, i + 1), name="k")
        return tc.sum(A[k], axis=k)

    S = tc.compute((6,), body, name="S")
    a = rng.standard_normal(6)
    np.testing.assert_allclose(tc.evaluate(S, {A: a})[0], np.cumsum(a))


def test_guarded_read_is_not_evaluated_out_of_bounds():
    A = tc.placeholder((4,), name="A")
    P = tc.compute((6,), lambda i: tc.if_then_else(tc.all(i >= 1, i < 5), A[i - 1], -1.0),
                   name="P")
    out = tc.evaluate(P, {A: np.arange(4, dtype=np.float32)})[0]
    np.testing.assert_array_equal(out, [-1, 0, 1, 2, 3, -1])


def test_unguarded_out_of_bounds_read_raises():
    A = tc.placeholder((4,), name="A")
    P = tc.compute((4,), lambda i: A[i + 1], name="P")
    with pytest.raises(tc.TecompError, match="'A' out of bounds on axis 0: index 4"):
        tc.evaluate(P, {A: np.zeros(4, np.float32)})


def test_gather_int64(rng):
    E_ = tc.placeholder((10, 3), name="E")
    idx = tc.placeholder((6,), name="idx", dtype="int64")
    T = tc.ops.take(E_, idx)
    e = rng.standard_normal((10, 3)).astype(np.float32)
    ix = np.array([0, 9, 3, 3, 1, 0])
    np.testing.assert_array_equal(tc.evaluate(T, {E_: e, idx: ix})[0], e[ix])


def test_scalar_output_and_prod_max_min(rng):
    A = tc.placeholder((3, 4), name="A", dtype="float64")
    r, s = tc.reduce_axis(3, name="r"), tc.reduce_axis(4, name="s")
    tot = tc.compute((), lambda: tc.sum(A[r, s], axis=[r, s]), name="tot")
    k = tc.reduce_axis(4, name="k")
    P = tc.compute((3,), lambda i: tc.prod(A[i, k], axis=k), name="P")
    M = tc.compute((3,), lambda i: tc.max(A[i, k], axis=k), name="M")
    m = tc.compute((3,), lambda i: tc.min(A[i, k], axis=k), name="m")
    a = rng.standard_normal((3, 4))
    t, p, mx, mn = tc.evaluate([tot, P, M, m], {A: a})
    assert t.shape == ()
    np.testing.assert_allclose(t, a.sum())
    np.testing.assert_allclose(p, a.prod(1))
    np.testing.assert_array_equal(mx, a.max(1))
    np.testing.assert_array_equal(mn, a.min(1))


def test_float16_values():
    A = tc.placeholder((5,), name="A", dtype="float16")
    B = tc.compute((5,), lambda i: A[i] * A[i] + 1.0, name="B")
    a = np.linspace(-1, 1, 5).astype(np.float16)
    out = tc.evaluate(B, {A: a})[0]
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, a * a + np.float16(1), rtol=1e-3)


def test_inconsistent_shape_is_reported():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.placeholder((n,), name="B")
    C = tc.compute((n,), lambda i: A[i] + B[i], name="C")
    with pytest.raises(tc.TecompError, match="'B', axis 0"):
        tc.evaluate(C, {A: np.zeros(3, np.float32), B: np.zeros(4, np.float32)})


def test_math_functions(rng):
    import scipy.special as sp

    A = tc.placeholder((7,), name="A", dtype="float64")
    fs = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
          "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "sin": np.sin, "cos": np.cos,
          "abs": np.abs, "erf": sp.erf, "floor": np.floor, "ceil": np.ceil}
    a = rng.uniform(0.1, 3.0, 7)
    for name, ref in fs.items():
        fn = getattr(tc, name)
        T = tc.compute((7,), lambda i: fn(A[i]), name=name)  # noqa: B023
        np.testing.assert_allclose(tc.evaluate(T, {A: a})[0], ref(a), rtol=1e-12, err_msg=name)
    T = tc.compute((7,), lambda i: tc.pow(A[i], 1.5), name="pow")
    np.testing.assert_allclose(tc.evaluate(T, {A: a})[0], a ** 1.5)


def test_shared_subexpressions_are_evaluated_once():
    # a DAG of depth 60 whose tree expansion has 2**60 nodes
    A = tc.placeholder((3,), name="A", dtype="float64")
    e = A[0]
    for _ in range(60):
        e = e * 0.5 + e * 0.5
    T = tc.compute((3,), lambda i: e + A[i], name="T")
    a = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(tc.evaluate(T, {A: a})[0], a + 1.0)
