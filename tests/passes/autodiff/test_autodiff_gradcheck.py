"""The finite-difference checker itself rejects wrong gradients (injected via overrides)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc

F = "float64"


def program():
    X = tc.placeholder((5,), name="X", dtype=F)
    Y = tc.compute((5,), lambda i: tc.exp(X[i]) * X[i], name="Y", tag="f")
    return X, Y


def scaled(factor):
    def fn(out, inputs, head):
        (x,) = inputs
        return [tc.compute((5,), lambda i: head[i] * factor * (tc.exp(x[i]) * (x[i] + 1.0)),
                           name="dx")]
    return fn


def test_right_gradient_passes_with_second_order_remainder(rng):
    X, Y = program()
    figures = check_gradient(Y, [X], {X: rng.standard_normal(5)}, convergence=True,
                             overrides={"f": scaled(1.0)})
    assert figures["order"] > 1.5


def test_wrong_gradient_fails_the_directional_check(rng):
    X, Y = program()
    with pytest.raises(AssertionError, match="gradient check failed"):
        check_gradient(Y, [X], {X: rng.standard_normal(5)}, overrides={"f": scaled(1.01)})


def test_slightly_wrong_gradient_fails_the_convergence_check(rng):
    X, Y = program()
    with pytest.raises(AssertionError, match="second order"):
        # a 2% error passes a 5% tolerance but leaves a first-order Taylor remainder
        check_gradient(Y, [X], {X: rng.standard_normal(5)}, rtol=5e-2, convergence=True,
                       overrides={"f": scaled(1.02)})


def test_head_array_weights_the_output(rng):
    X, Y = program()
    x, h = rng.standard_normal(5), rng.standard_normal(5)
    figures = check_gradient(Y, [X], {X: x}, head=h, seed=5)
    v = np.random.default_rng(5).standard_normal(5)
    want = float(np.sum(h * np.exp(x) * (x + 1.0) * v))
    assert figures["directional"] == pytest.approx(want, rel=1e-12)
