"""``tc.jacobian`` through scans (forward mode with the identity seed) against central finite
differences in float64, and its compiled kernel against the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tests.passes.autodiff.scan_cases import CASES


def _fd_jacobian(c, x, h: float = 1e-6) -> np.ndarray:
    x0 = c.arrays[x]
    y0 = tc.evaluate([c.output], c.arrays)[0]
    out = np.zeros(y0.shape + x0.shape)
    for idx in np.ndindex(x0.shape):
        a = dict(c.arrays)
        xp, xm = x0.copy(), x0.copy()
        xp[idx] += h
        xm[idx] -= h
        a[x] = xp
        yp = tc.evaluate([c.output], a)[0]
        a[x] = xm
        ym = tc.evaluate([c.output], a)[0]
        out[(Ellipsis,) + idx] = (yp - ym) / (2 * h)
    return out


@pytest.mark.parametrize("name", ["cumsum", "cumprod_zeros", "fibonacci", "elman", "lstm",
                                  "euler", "reduce_gather"])
def test_jacobian_matches_finite_differences(name, rng):
    c = CASES[name](rng)
    for x in c.inputs:
        J = tc.jacobian(c.output, x)
        assert tuple(J.shape) == tuple(c.output.shape) + tuple(x.shape)
        (got,) = tc.evaluate([J], c.arrays)
        np.testing.assert_allclose(got, _fd_jacobian(c, x), rtol=1e-6, atol=1e-8,
                                   err_msg=f"{name}: d/d{x.name}")


def test_jacobian_of_a_cumsum_is_lower_triangular_ones():
    X = tc.placeholder((4, 2), name="X", dtype="float64")
    (J,) = tc.evaluate([tc.jacobian(tc.ops.cumsum(X, 0), X)], {X: np.zeros((4, 2))})
    want = np.einsum("ts,ij->tisj", np.tril(np.ones((4, 4))), np.eye(2))
    np.testing.assert_array_equal(J, want)


def test_jacobian_through_a_scan_builds_and_agrees(rng):
    c = CASES["elman"](rng)
    W = c.inputs[1]
    J = tc.jacobian(c.output, W)
    inputs = sorted(c.arrays, key=lambda t: t.name)
    kernel = tc.build([J], inputs)
    (got,) = kernel(*[c.arrays[t] for t in inputs])
    np.testing.assert_allclose(got, tc.evaluate([J], c.arrays)[0], rtol=1e-12, atol=1e-12)


def test_naive_jacobian_through_a_scan(rng):
    c = CASES["fibonacci"](rng)
    (X,) = c.inputs
    J = tc.jacobian(c.output, X, optimize=False)
    (got,) = tc.evaluate([J], c.arrays)
    np.testing.assert_allclose(got, _fd_jacobian(c, X), rtol=1e-6, atol=1e-8)
