"""tc.ops Kronecker-sparse products and butterfly chains: values, gradients, static cost."""

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc
from tecomp.ops.butterfly_factors import (
    butterfly_cost,
    kron_sparse_dense,
    monarch_patterns,
    square_dyadic_patterns,
)

PATTERNS = [(1, 3, 5, 1), (2, 3, 4, 5), (3, 1, 2, 4), (4, 2, 2, 1)]
F64 = "float64"


def _operands(pattern, batch=3):
    a, b, c, d = pattern
    T = tc.placeholder(pattern, name="T", dtype=F64)
    X = tc.placeholder((a * c * d, batch), name="X", dtype=F64)
    return T, X


@pytest.mark.parametrize("pattern", PATTERNS)
def test_kron_sparse_matmul_built_and_evaluated(rng, pattern):
    T, X = _operands(pattern)
    Y = tc.ops.kron_sparse_matmul(T, X, pattern)
    t, x = rng.standard_normal(pattern), rng.standard_normal((int(X.shape[0].value), 3))
    ref = kron_sparse_dense(t) @ x
    np.testing.assert_allclose(tc.evaluate(Y, {T: t, X: x})[0], ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tc.build(Y, [T, X])(t, x), ref, rtol=1e-12, atol=1e-12)
    assert tc.cost([Y], [T, X]).flops == 2 * np.prod(pattern) * 3


@pytest.mark.parametrize("pattern", PATTERNS)
def test_kron_sparse_gradients(rng, pattern):
    a, b, c, d = pattern
    T, X = _operands(pattern, batch=4)
    Y = tc.ops.kron_sparse_matmul(T, X, pattern)
    arrays = {T: rng.standard_normal(pattern), X: rng.standard_normal((a * c * d, 4))}
    head = rng.standard_normal((a * b * d, 4))
    check_gradient(Y, [T, X], arrays, head=head, optimize=True)
    # each gradient costs a·b·c·d·batch multiply-adds after zero elimination
    H = tc.placeholder((a * b * d, 4), name="H", dtype=F64)
    dT, dX = tc.gradient(Y, [T, X], H)
    macs = a * b * c * d * 4
    for g in (dT, dX):
        cost = tc.cost([g], [T, X, H])
        assert cost.flops <= 2 * macs, (g.name, cost)
        assert cost.iterations <= macs, (g.name, cost)
    gt, gx = tc.build([dT, dX], [T, X, H])(arrays[T], arrays[X], head)
    M = kron_sparse_dense(arrays[T])
    np.testing.assert_allclose(gx, M.T @ head, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kron_sparse_dense(gt), (head @ arrays[X].T) * (M != 0),
                               rtol=1e-12, atol=1e-12)


def _chain_reference(factors, x):
    y = x
    for t in reversed(factors):
        y = kron_sparse_dense(t) @ y
    return y


@pytest.mark.parametrize("patterns", [square_dyadic_patterns(16), monarch_patterns(12, 12, 3, 4)],
                         ids=["dyadic16", "monarch12"])
def test_chains_and_their_gradients(rng, patterns):
    Ts = [tc.placeholder(p, name=f"T{i}", dtype=F64) for i, p in enumerate(patterns)]
    a, _, c, d = patterns[-1]
    X = tc.placeholder((a * c * d, 5), name="X", dtype=F64)
    Y = tc.ops.butterfly_chain(X, patterns, Ts)
    ts = [rng.standard_normal(p) for p in patterns]
    x = rng.standard_normal((a * c * d, 5))
    ref = _chain_reference(ts, x)
    np.testing.assert_allclose(tc.build(Y, [X, *Ts])(x, *ts), ref, rtol=1e-11, atol=1e-12)
    assert tc.cost([Y], [X, *Ts]).flops == 2 * butterfly_cost(patterns) * 5
    check_gradient(Y, Ts + [X], {X: x, **dict(zip(Ts, ts))}, optimize=True,
                   head=rng.standard_normal(ref.shape))
    # the factor gradients of the chain cost about one forward pass each (no dense term)
    grads = tc.gradient(Y, Ts)
    assert tc.cost(grads, [X, *Ts]).iterations <= 3 * len(Ts) * butterfly_cost(patterns) * 5


def test_chainability_is_checked():
    X = tc.placeholder((16, 2), name="X", dtype=F64)
    pats = [(1, 2, 2, 8), (2, 2, 2, 4), (2, 2, 2, 2)]
    Ts = [tc.placeholder(p, name=f"T{i}", dtype=F64) for i, p in enumerate(pats)]
    with pytest.raises(tc.TecompError, match="positions 1 and 2"):
        tc.ops.butterfly_chain(X, pats, Ts)
    pats = square_dyadic_patterns(8)
    Ts = [tc.placeholder(p, name=f"U{i}", dtype=F64) for i, p in enumerate(pats)]
    with pytest.raises(tc.TecompError, match="factor 1 U0 has shape"):
        tc.ops.butterfly_chain(tc.placeholder((8, 2), name="Z"), pats, [Ts[0], Ts[0], Ts[2]])
    with pytest.raises(tc.TecompError, match="X must have shape"):
        tc.ops.butterfly_chain(X, pats, Ts)
    with pytest.raises(tc.TecompError, match="fuse"):
        tc.ops.dct(tc.placeholder((8, 2), name="Z"), fuse=0)
