"""Custom derivatives: ``overrides=`` by tag and by tensor (the review thread's request)."""

from __future__ import annotations

import numpy as np
import pytest
from ad_nets import softmax_single
from gradcheck import check_gradient

import tecomp as tc

F = "float64"


def softmax_grad(out, inputs, head):
    """Hand-written softmax VJP: dX = S * (dS - Σ_k dS[k] S[k])."""
    (x,) = inputs
    n, m = out.shape
    k = tc.reduce_axis(m, "k")
    dot = tc.compute((n,), lambda i: tc.sum(head[i, k] * out[i, k], axis=k), name="sm_dot")
    dx = tc.compute((n, m), lambda i, c: out[i, c] * (head[i, c] - dot[i]), name="sm_vjp")
    return [dx]


def focal_loss(logits, target, gamma=2.0):
    """Σ_i -(1 - p_t)^γ log p_t with p = softmax(logits), p_t = p[i, target[i]]."""
    n, m = logits.shape
    P = softmax_single(logits, tag="softmax")
    r = tc.reduce_axis(n, "r")
    pt = P[r, target[r]]
    loss = tc.compute((), lambda: tc.sum(-tc.pow(1.0 - pt, gamma) * tc.log(pt), axis=r),
                      name="focal")
    return P, loss


def test_softmax_override_by_tag_inside_a_focal_loss(rng):
    X = tc.placeholder((4, 5), name="X", dtype=F)
    T = tc.placeholder((4,), name="T", dtype="int64")
    P, loss = focal_loss(X, T)
    calls = []

    def fn(out, inputs, head):
        calls.append((out, list(inputs), head))
        return softmax_grad(out, inputs, head)

    (dX,) = tc.gradient(loss, [X], optimize=False, overrides={"softmax": fn})
    assert len(calls) == 1
    out, inputs, head = calls[0]
    assert out is P and inputs == [X] and head.shape == P.shape
    from tecomp.functor import topo_order

    names = {t.name for t in topo_order([dX])}
    assert {"sm_vjp", "sm_dot"} <= names
    arrays = {X: rng.standard_normal((4, 5)), T: rng.integers(0, 5, 4)}
    (auto,) = tc.gradient(loss, [X], optimize=False)
    np.testing.assert_allclose(tc.evaluate(dX, arrays)[0], tc.evaluate(auto, arrays)[0],
                               rtol=1e-10, atol=1e-12)
    check_gradient(loss, [X], arrays, overrides={"softmax": softmax_grad}, seed=11)


def test_override_for_one_tensor_straight_through(rng):
    X = tc.placeholder((6,), name="X", dtype=F)
    Q1 = tc.compute((6,), lambda i: tc.floor(X[i] * 4.0) / 4.0, name="Q1", tag="quant")
    Q2 = tc.compute((6,), lambda i: tc.floor(X[i] * 4.0) / 4.0, name="Q2", tag="quant")
    Y = tc.compute((6,), lambda i: Q1[i] * 2.0 + Q2[i], name="Y")

    def straight_through(out, inputs, head):
        return [head]

    def zero_by_tag(out, inputs, head):
        return [None]

    (dX,) = tc.gradient(Y, [X], optimize=False, overrides={Q1: straight_through})
    x = rng.standard_normal(6)
    np.testing.assert_allclose(tc.evaluate(dX, {X: x})[0], np.full(6, 2.0))
    # a tensor key takes precedence over a tag; Q2 (tag only) falls back to the tag rule
    (dX2,) = tc.gradient(Y, [X], optimize=False,
                         overrides={Q2: straight_through, "quant": zero_by_tag})
    np.testing.assert_allclose(tc.evaluate(dX2, {X: x})[0], np.ones(6))


def test_override_sees_only_direct_inputs_and_rest_is_automatic(rng):
    A, B = tc.placeholder((3,), name="A", dtype=F), tc.placeholder((3,), name="B", dtype=F)
    H = tc.compute((3,), lambda i: tc.exp(A[i]), name="H")
    Y = tc.compute((3,), lambda i: H[i] * B[i], name="Y", tag="prod2")

    def half(out, inputs, head):
        h, b = inputs
        assert (h.name, b.name) == ("H", "B")
        dh = tc.compute((3,), lambda i: head[i] * b[i] * 0.5, name="dh")
        return [dh, None]

    dA, dB = tc.gradient(Y, [A, B], optimize=False, overrides={"prod2": half})
    a, b = rng.standard_normal(3), rng.standard_normal(3)
    ga, gb = tc.evaluate([dA, dB], {A: a, B: b})
    np.testing.assert_allclose(ga, 0.5 * b * np.exp(a), rtol=1e-12)
    np.testing.assert_array_equal(gb, np.zeros(3))


def _simple():
    X = tc.placeholder((3,), name="X", dtype=F)
    Y = tc.compute((3,), lambda i: X[i] * X[i], name="Y", tag="sq")
    return X, Y


@pytest.mark.parametrize("result, message", [
    (lambda out, ins, head: [], "returned 0 adjoint"),
    (lambda out, ins, head: 3, "not a list"),
    (lambda out, ins, head: ["x"], "expected a tensor"),
    (lambda out, ins, head: [tc.placeholder((4,), name="W", dtype=F)], "'W' of shape (4)"),
    (lambda out, ins, head: [tc.placeholder((3,), name="I", dtype="int64")], "dtype int64"),
])
def test_bad_override_results_raise_naming_the_tensor(result, message):
    X, Y = _simple()
    with pytest.raises(tc.DifferentiationError) as err:
        tc.gradient(Y, [X], optimize=False, overrides={"sq": result})
    assert "'Y'" in str(err.value) and message in str(err.value)
