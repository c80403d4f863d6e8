"""Bugs found by ``benchmarks/soak.py``, each reduced to a regression test."""

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc


def _shifted_diagonal():
    # a factor that does not depend on the summation variable used to be moved out of a sum
    # whose zero-eliminated extent (select(j0 >= 1 ..., 4, 0)) was what kept it in bounds:
    # X1[j0, j0 - 1] was then read at j0 = 0
    n, m = tc.var("n"), tc.var("m")
    X1 = tc.placeholder((n, m), name="X1", dtype="float64")
    S4 = tc.compute((4, 3), lambda i0, i1: tc.cast(i0, "float64") * 0.25 * X1[i1 + 1, i1]
                    + X1[i1 + 1, i1] * X1[i1 + 1, i1], name="S4")
    return n, m, X1, S4


@pytest.mark.parametrize("shape", [(4, 3), (6, 5)])
def test_hoisted_factor_stays_guarded(shape):
    n, m, X1, S4 = _shifted_diagonal()
    x = np.random.default_rng(1).standard_normal(shape)
    (g,) = tc.gradient(S4, [X1])
    (naive,) = tc.gradient(S4, [X1], optimize=False)
    want = tc.evaluate([naive], {X1: x})[0]
    np.testing.assert_allclose(tc.evaluate([g], {X1: x})[0], want, rtol=1e-12)
    np.testing.assert_allclose(tc.build(g, [X1])(x), want, rtol=1e-12)
    check_gradient(S4, [X1], {X1: x}, seed=3, rtol=1e-5, atol=1e-8)


def test_hoisted_factor_under_a_select_of_a_strided_read():
    n = tc.var("n")
    X2 = tc.placeholder((3,), name="X2", dtype="float64")
    X1 = tc.placeholder((1,), name="X1", dtype="float64")
    S3 = tc.compute((3, 1), lambda i0, i1: X2[2 - i0] / (X2[2 - i0] * X2[2 - i0] + 1.0),
                    name="S3")
    r = tc.reduce_axis(2, name="r")
    S4 = tc.compute((1, n), lambda i0, i1: tc.if_then_else(
        i1 <= i0 + 1, tc.if_then_else(tc.eq((i0 + i0) % 2, 0),
                                      tc.sum(X2[i0 % 3], axis=r, where=i1 < i0),
                                      S3[i1 % 3, i1]), X1[(i0 + 2) // 3])
        * X2[i0 * 2 + 1] + X2[i0 * 2 + 1] * X2[i0 * 2 + 1], name="S4")
    rng = np.random.default_rng(2)
    for size in (1, 3):
        arrays = {X2: rng.standard_normal(3), X1: rng.standard_normal(1), n: size}
        check_gradient(S4, [X2, X1], arrays, seed=5, rtol=1e-5, atol=1e-8, optimize=True)
    g = tc.gradient(S4, [X2, X1])
    a2, a1 = rng.standard_normal(3), rng.standard_normal(1)
    want = tc.evaluate(tc.gradient(S4, [X2, X1], optimize=False), {X2: a2, X1: a1, n: 3})
    for got, w in zip(tc.build(g, [X2, X1, n])(a2, a1, 3), want):
        np.testing.assert_allclose(got, w, rtol=1e-12)


def _compiled_matches_evaluator(outputs, inputs, arrays, bindings):
    want = tc.evaluate(outputs, bindings)
    got = tc.build(outputs, inputs)(*arrays)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_data_guard_is_tested_after_the_index_guard():
    # building an eliminated gradient eliminates it again; the guard of a product's zero
    # count, S2_zeros[j0] == 0, used to come before j0 <= 2 (S2_zeros has 3 rows, j0 < 4)
    n = tc.var("n")
    X1 = tc.placeholder((4,), name="X1", dtype="float64")
    idx = tc.placeholder((3,), name="idx", dtype="int32")
    r = tc.reduce_axis(n, name="r")
    S2 = tc.compute((3, 3), lambda i0, i1: tc.prod(
        tc.tanh(tc.cast(r, "float64") * 0.25 / (X1[i0] * X1[i0] + 1.0)) * 0.5 + 1.0, axis=r,
        where=tc.eq(r, r)) * X1[idx[i1]] + X1[idx[i1]] * X1[idx[i1]], name="S2")
    (g,) = tc.gradient(S2, [X1])
    x, ix = np.random.default_rng(3).standard_normal(4), np.array([0, 3, 1], np.int32)
    _compiled_matches_evaluator([g], [X1, idx, n], [x, ix, 3], {X1: x, idx: ix, n: 3})


def test_second_elimination_keeps_a_stage_it_cannot_bound():
    # eliminating an eliminated gradient met a max(...) loop bound it cannot read as affine
    # and raised ValueError ("unbounded summation variable") from tc.build
    n = tc.var("n")
    X1 = tc.placeholder((3,), name="X1", dtype="float64")
    idx = tc.placeholder((1,), name="idx", dtype="int64")
    r3 = tc.reduce_axis(1, name="r3")

    def scale(i0, i1):
        return tc.cast(i0, "float64") * 0.25 / (X1[(i1 + 3) % 3] * X1[(i1 + 3) % 3] + 1.0)
    S2 = tc.compute((1, 4), lambda i0, i1: tc.prod(tc.tanh(X1[2]) * 0.5 + 1.0, axis=r3,
                                                   where=i0 < r3)
                    / (scale(i0, i1) * scale(i0, i1) + 1.0), name="S2")
    r5 = tc.reduce_axis(n, name="r5")
    S4 = tc.compute((3, 1), lambda i0, i1: tc.prod(
        tc.tanh(3.0 - S2[i1, idx[i1]]) * 0.5 + 1.0, axis=r5, where=i0 <= r5 + 1)
        * X1[(i0 + 2) // 2] + X1[(i0 + 2) // 2] * X1[(i0 + 2) // 2], name="S4")
    (g,) = tc.gradient(S4, [X1])
    x, ix = np.random.default_rng(4).standard_normal(3), np.array([0])
    _compiled_matches_evaluator([g], [X1, idx, n], [x, ix, 3], {X1: x, idx: ix, n: 3})
    check_gradient(S4, [X1], {X1: x, idx: ix, n: 3}, seed=1, rtol=1e-5, atol=1e-8)


def test_guard_of_a_hoisted_factor_names_no_summation_variable():
    # the guard built for a hoisted factor used the extent of a triangular axis
    # (min(t + 1, 3) - max(t - 1, 0) + 1), outside the sum that binds t
    X1 = tc.placeholder((4,), name="X1", dtype="float64")
    S3 = tc.compute((4, 4), lambda i0, i1: tc.if_then_else(
        i1 <= i0 + 1, tc.if_then_else(i0 <= i1 + 1, X1[1], tc.cast(i0, "float64") * 0.25),
        X1[1]) * X1[2] + X1[2] * X1[2], name="S3")
    (g,) = tc.gradient(S3, [X1])
    (naive,) = tc.gradient(S3, [X1], optimize=False)
    x = np.random.default_rng(6).standard_normal(4)
    want = tc.evaluate([naive], {X1: x})[0]
    np.testing.assert_allclose(tc.evaluate([g], {X1: x})[0], want, rtol=1e-12)
    np.testing.assert_allclose(tc.build(g, [X1])(x), want, rtol=1e-12)
    check_gradient(S3, [X1], {X1: x}, seed=2, rtol=1e-5, atol=1e-8)


def test_read_in_an_arm_taken_only_for_larger_sizes_is_a_size_check():
    # the else arm (i0 != i1, so i0 >= 1) reads X1[(i0 + 1) // 2] out of range, but it runs
    # only for n >= 2: a correct program for n = 1, so no build error but a check on n
    n = tc.var("n")
    X1 = tc.placeholder((1,), name="X1")
    S3 = tc.compute((n, 1), lambda i0, i1: tc.if_then_else(
        tc.eq(i1, i0), X1[0] * 3.0, X1[(i0 + 1) // 2] * 3.0), name="S3")
    kernel = tc.build(S3, [X1, n])
    np.testing.assert_array_equal(kernel(np.array([2.0], np.float32), 1), [[6.0]])
    with pytest.raises(tc.IndexBoundsError, match=r"n = 2 .*'X1'.*X1\[\(i0 \+ 1\) // 2\]"):
        kernel(np.array([2.0], np.float32), 2)


def test_stashed_factor_of_a_max_keeps_the_max():
    # seed-12 soak: the part of a max's body that skips an output axis was stashed into a
    # stage of its own and the max rebuilt as a sum (every output was the sum of the terms)
    n, m = tc.var("n"), tc.var("m")
    X1 = tc.placeholder((4,), name="X1")
    S2 = tc.compute((m,), lambda i0: tc.cast(X1[(i0 * 2 + i0 * 3 + 1) // 2], "float64"),
                    name="S2")
    r4 = tc.reduce_axis(n, name="r4")
    S3 = tc.compute((n,), lambda i0: tc.max(tc.cast(r4, "float64") * 0.25
                                             * S2[(r4 * 3 + 2) // 6] * S2[i0 * m // n],
                                             axis=r4), name="S3")
    x = np.array([0.3, -0.7, 0.9, 0.2], np.float32)
    want = tc.evaluate([S2, S3], {X1: x, n: 4, m: 2})
    np.testing.assert_allclose(want[1], [0.045, 0.045, 0.03, 0.03], rtol=1e-6)
    got = tc.build([S2, S3], [X1, n, m])(x, 4, 2)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def _empty_sum_over_a_gather():
    # seed-13 soak: the division by a gather was multiplied into a sum whose `where` never
    # holds (r9 < 1 and i0 < r9), so the kernel never read X2[idx10[0], 0] at idx10[0] = -1
    X2 = tc.placeholder((2, 3), name="X2")
    idx10 = tc.placeholder((1,), name="idx10", dtype="int32")
    r9 = tc.reduce_axis(1, name="r9")

    def g(x):
        return tc.sigmoid(x) * tc.sigmoid(x) + 1.0
    S8 = tc.compute((1,), lambda i0: tc.sum(
        tc.if_then_else(X2[r9 % 2, (r9 + 3) % 3] > 0, X2[0, r9], -X2[1, r9]), axis=r9,
        where=i0 < r9) / g(X2[idx10[i0], 0]), name="S8")
    return X2, idx10, S8


def test_a_gather_beside_an_empty_sum_is_still_checked():
    X2, idx10, S8 = _empty_sum_over_a_gather()
    x = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    k = tc.build(S8, [X2, idx10])
    np.testing.assert_array_equal(k(x, np.array([1], np.int32)), [0.0])
    with pytest.raises(tc.EvaluationError, match="X2"):
        tc.evaluate([S8], {X2: x, idx10: np.array([-1], np.int32)})
    with pytest.raises(tc.IndexBoundsError, match="X2"):
        k(x, np.array([-1], np.int32))


def _scan_with_a_gathered_input(n):
    # seed-13 soak (with scans): the part of the step that does not read the state,
    # abs(X1[idx5[t]]), was stashed as a stage over all n rows of the time axis and computed
    # before the scan, so the kernel read X1[idx5[0]] at a row that no step computes
    X1 = tc.placeholder((3,), name="X1", dtype="float64")
    idx5 = tc.placeholder((n,), name="idx5", dtype="int64")
    state = tc.placeholder((n, 2), name="S4_state", dtype="float64")
    init = tc.compute((1, 2), lambda _, i: X1[i] * 1.0, name="S4_init")
    step = tc.compute((n, 2), lambda t, i: tc.tanh(state[t - 1, i % 2]) * 0.5
                      + tc.abs(X1[idx5[t]] * 2.5), name="S4_step")
    return X1, idx5, tc.scan(init, step, state, name="S4")


@pytest.mark.parametrize("size", [1, 3, "n"])
def test_a_gather_in_a_scan_step_is_read_only_at_the_steps(size):
    n = tc.var("n") if size == "n" else size
    X1, idx5, S4 = _scan_with_a_gathered_input(n)
    inputs = [X1, idx5] + ([n] if size == "n" else [])
    k = tc.build(S4, inputs)
    x = np.array([0.5, -1.0, 2.0])
    for rows in ([-1], [-1, 2, 0]) if size == "n" else ([-1, 2, 0][:size],):
        args = [x, np.array(rows)] + ([len(rows)] if size == "n" else [])
        want = tc.evaluate([S4], dict(zip(inputs, args)))[0]
        np.testing.assert_allclose(k(*args), want, rtol=1e-12)
    if size != 1:  # a step's own out-of-range row is still reported
        args = [x, np.array([0, -1, 1])] + ([3] if size == "n" else [])
        with pytest.raises(tc.IndexBoundsError, match="X1"):
            k(*args)


def test_the_gradient_of_a_scan_without_steps():
    # seed-13 soak: with one time row and one given step, no step runs; the derivative of the
    # step's state gather scattered into row -1 of the state's adjoint
    X1 = tc.placeholder((3,), name="X1", dtype="float64")
    idx3 = tc.placeholder((2,), name="idx3", dtype="int64")
    state = tc.placeholder((1, 2), name="S2_state", dtype="float64")
    init = tc.compute((1, 2), lambda _, i: X1[i] * X1[i], name="S2_init")
    step = tc.compute((1, 2), lambda t, i: tc.tanh(state[t - 1, idx3[i]]) * 0.5 + X1[0],
                      name="S2_step")
    S2 = tc.scan(init, step, state, name="S2")
    S4 = tc.compute((2,), lambda i: S2[0, i] * X1[i] + X1[i] * X1[i], name="S4")
    x, idx = np.array([0.5, -1.0, 2.0]), np.array([1, 0])
    (g,) = tc.gradient(S4, [X1])
    want = 3 * x**2 + 2 * x
    want[2] = 0.0
    np.testing.assert_allclose(tc.evaluate([g], {X1: x, idx3: idx})[0], want, rtol=1e-12)
    np.testing.assert_allclose(tc.build(g, [X1, idx3])(x, idx), want, rtol=1e-12)
    check_gradient(S4, [X1], {X1: x, idx3: idx}, seed=3, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("steps", [0, 2])
def test_a_stashed_step_part_without_the_time_axis_runs_only_with_a_step(steps):
    # seed-13 soak, second run: tanh(F4[idx7[i]]), moved out of the step's sum and then out of
    # the step (it depends on i only), was computed before the scan even when no step runs
    m = tc.var("m")
    X1 = tc.placeholder((m,), name="X1")
    idx7 = tc.placeholder((3,), name="idx7", dtype="int32")
    F4 = tc.compute((1,), lambda i: tc.cast((i * 4 + 3) % 7, "float32"), name="F4")
    state = tc.placeholder((m, 3), name="S5_state")
    init = tc.compute((1, 3), lambda _, i: tc.abs(X1[(i + 2) // 5] * 2.5), name="S5_init")
    r6 = tc.reduce_axis(3, name="r6")
    step = tc.compute((m, 3), lambda t, i: tc.tanh(tc.sum(
        tc.tanh(F4[idx7[i]]) * state[t - 1, r6], axis=r6) * 0.5) + X1[t % m], name="S5_step")
    S5 = tc.scan(init, step, state, name="S5")
    k = tc.build(S5, [X1, idx7, m])
    x = np.linspace(-1.0, 1.0, steps + 1).astype(np.float32)
    for idx in ([0, 0, 0], [-1, 0, 0]):
        args = [x, np.array(idx, np.int32), steps + 1]
        if steps and idx[0] < 0:
            with pytest.raises(tc.IndexBoundsError, match="F4"):
                k(*args)
            continue
        want = tc.evaluate([S5], dict(zip([X1, idx7, m], args)))[0]
        np.testing.assert_allclose(k(*args), want, rtol=1e-6)
