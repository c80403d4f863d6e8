"""Forward mode and second-order operators through scans, against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tests.passes.autodiff.scan_cases import CASES


@pytest.mark.parametrize("name", sorted(CASES))
def test_jvp_matches_central_difference(name, rng):
    c = CASES[name](rng)
    tans = [tc.placeholder(x.shape, name=f"v_{x.name}", dtype=x.dtype) for x in c.inputs]
    J = tc.jvp(c.output, c.inputs, tans)
    v = {t: rng.standard_normal(np.shape(c.arrays[x])) for x, t in zip(c.inputs, tans)}
    (got,) = tc.evaluate([J], {**c.arrays, **v})
    h = 1e-6
    plus, minus = dict(c.arrays), dict(c.arrays)
    for x, t in zip(c.inputs, tans):
        plus[x] = c.arrays[x] + h * v[t]
        minus[x] = c.arrays[x] - h * v[t]
    fd = (tc.evaluate([c.output], plus)[0] - tc.evaluate([c.output], minus)[0]) / (2 * h)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)
    kernel = tc.build(J, list(c.arrays) + tans)
    built = kernel(*[c.arrays[x] for x in c.arrays], *[v[t] for t in tans])
    np.testing.assert_allclose(built, got, rtol=1e-10, atol=1e-12)


def test_hessian_of_euler_loss(rng):
    c = CASES["euler"](rng)
    (th,) = c.inputs[:1]
    S = c.output
    r0, r1 = tc.reduce_axis(12, "r0"), tc.reduce_axis(3, "r1")
    loss = tc.compute((), lambda: tc.sum(S[r0, r1] * S[r0, r1], axis=[r0, r1]), name="loss")
    (H,) = tc.evaluate([tc.hessian(loss, th)], c.arrays)
    (g,) = tc.gradient(loss, [th])
    p0, h = c.arrays[th], 1e-6

    def grad(p):
        return tc.evaluate([g], {**c.arrays, th: p})[0]

    fd = np.stack([(grad(p0 + h * e) - grad(p0 - h * e)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", ["dof", "hessian"])
def test_laplacian_through_a_scan(method, rng):
    B, n, T = 2, 3, 5
    X = tc.placeholder((B, n), name="x", dtype="float64")
    st = tc.placeholder((T, B), name="st", dtype="float64")
    k = tc.reduce_axis(n, "k")
    init = tc.compute((1, B), lambda s, b: 0.1 * tc.sum(X[b, k] * X[b, k], axis=k), name="init")
    upd = tc.compute((T, B), lambda t, b: tc.tanh(st[t - 1, b] * X[b, t % n] + X[b, 0]),
                     name="upd")
    S = tc.scan(init, upd, st, name="per_sample")
    out = tc.compute((B,), lambda b: S[T - 1, b], name="out")
    x = rng.standard_normal((B, n))
    (got,) = tc.evaluate([tc.laplacian(out, X, method=method)], {X: x})

    def f(xx):
        return tc.evaluate([out], {X: xx})[0]

    h = 1e-4
    fd = sum((f(x + h * e[None]) - 2 * f(x) + f(x - h * e[None])) / h ** 2 for e in np.eye(n))
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-6)
