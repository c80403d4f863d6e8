"""tc.ops.dct (DCT-II, DST-II, DHT) built as kernels, its static cost, factor fusion, and
masked dense Kronecker-sparse products that zero elimination makes compact."""

import math

import numpy as np
import pytest
import scipy.fft as sfft

import tecomp as tc
from tecomp.ops.butterfly import sparse_terms
from tecomp.ops.butterfly_factors import (
    apply_kron_sparse,
    butterfly_cost,
    check_chainable,
    kron_sparse_dense,
    monarch_patterns,
    real_butterfly,
)
from tecomp.ops.butterfly_fuse import best_grouping, fuse_chain, fuse_factors, fused_pattern


def _reference(kind, x):
    if kind == "dct2":
        return sfft.dct(x, type=2, norm="ortho", axis=0)
    if kind == "dst2":
        return sfft.dst(x, type=2, norm="ortho", axis=0)
    f = np.fft.fft(x, axis=0)
    return (f.real - f.imag) / math.sqrt(x.shape[0])


def _built(n, kind, batch, fuse=1, dtype="float64"):
    X = tc.placeholder((n, batch), name="X", dtype=dtype)
    Y = tc.ops.dct(X, kind, fuse=fuse)
    return X, Y, tc.build(Y, [X])


@pytest.mark.parametrize("kind,n,fuse", [
    ("dct2", 16384, 1), ("dst2", 1024, 2), ("dht", 4096, 3),
    ("dct2", 2, 1), ("dst2", 4, 1), ("dht", 8, 2), ("dct2", 32, 2), ("dst2", 64, 3),
    ("dct2", 4096, "auto"), ("dst2", 512, "auto"), ("dht", 2048, "auto"), ("dct2", 2, "auto"),
])
def test_dct_kernels_match_scipy(rng, kind, n, fuse):
    x = rng.standard_normal((n, 3))
    _, _, kernel = _built(n, kind, 3, fuse)
    assert np.max(np.abs(kernel(x) - _reference(kind, x))) <= 1e-11


@pytest.mark.parametrize("kind", ["dct2", "dst2", "dht"])
def test_dct_evaluator_agrees(rng, kind):
    x = rng.standard_normal((16, 2))
    X = tc.placeholder((16, 2), name="X", dtype="float64")
    (y,) = tc.evaluate(tc.ops.dct(X, kind, fuse=2), {X: x})
    assert np.max(np.abs(y - _reference(kind, x))) <= 1e-12


@pytest.mark.parametrize("n", [4, 64, 1024])
def test_chain_cost_is_exact(n):
    L = n.bit_length() - 1
    X = tc.placeholder((n, 128), name="X", dtype="float64")
    perm, patterns, factors, _ = real_butterfly(n, "dct2")
    Ts = [tc.constant(f, name=f"T{i}") for i, f in enumerate(factors)]
    # as a chain of sums: 8 n (L-1) multiply-adds per column, one loop iteration each
    chain = tc.cost([tc.ops.butterfly_chain(X, patterns, Ts, perm=perm)], [X])
    assert chain.flops == 2 * 8 * n * (L - 1) * 128  # one multiply-add = 2 flops
    assert chain.iterations == 8 * n * (L - 1) * 128
    # dct writes the products out: the same multiplies, one add fewer per output element
    cost = tc.cost([tc.ops.dct(X, fuse=1, sparse=False)], [X])
    outputs = sum(a * b * d for a, b, _, d in patterns)
    assert cost.flops == (2 * 8 * n * (L - 1) - outputs) * 128
    # from n = 1024 the last factor is staged (a buffer of its own, butterfly.KEEP_STAGED) and
    # copied into row order: n more iterations a column before the CPU schedule forwards it
    assert cost.iterations == (outputs + (n if n >= 1024 else 0)) * 128
    fp, _ = fuse_chain(patterns, factors, best_grouping(patterns, 2))
    fused = tc.cost([tc.ops.dct(X, fuse=2, sparse=False)], [X])
    fused_outputs = sum(a * b * d for a, b, _, d in fp)
    assert fused.flops == (2 * butterfly_cost(fp) - fused_outputs) * 128 < cost.flops
    # sparse stages leave out one multiply-add per structural zero of a planned factor
    for fuse, dense, (pats, facs) in ((1, cost, (patterns, factors)),
                                      (2, fused, (fp, fuse_chain(patterns, factors,
                                                                 best_grouping(patterns, 2))[1]))):
        zeros = 0
        for (a, b, c, d), f in zip(pats, facs):
            plan = sparse_terms(f)
            zeros += 0 if plan is None else a * b * (c - len(plan)) * d
        assert tc.cost([tc.ops.dct(X, fuse=fuse)], [X]).flops == dense.flops - 2 * zeros * 128
        assert zeros > 0 or n == 4


def test_fusion_products(rng):
    for p, q in [((1, 2, 4, 8), (2, 4, 4, 4)), ((2, 4, 4, 4), (4, 4, 4, 2)),
                 ((1, 3, 4, 4), (4, 4, 3, 1)), ((2, 3, 4, 5), (4, 2, 3, 5))]:
        check_chainable([p, q])
        T, U = rng.standard_normal(p), rng.standard_normal(q)
        P = fuse_factors(T, U)
        assert P.shape == fused_pattern(p, q)
        ref = kron_sparse_dense(T) @ kron_sparse_dense(U)
        np.testing.assert_allclose(kron_sparse_dense(P), ref, rtol=1e-12, atol=1e-12)
    pats = monarch_patterns(12, 12, 3, 4)
    ts = [rng.standard_normal(p) for p in pats]
    (pf,), (tf,) = fuse_chain(pats, ts, 2)
    x = rng.standard_normal((12, 2))
    np.testing.assert_allclose(apply_kron_sparse(tf, x),
                               apply_kron_sparse(ts[0], apply_kron_sparse(ts[1], x)), rtol=1e-12)
    assert pf == (1, 12, 12, 1)
    with pytest.raises(ValueError, match="cannot be fused"):
        fused_pattern((2, 2, 3, 1), (3, 2, 2, 1))  # composes, blocks do not nest
    with pytest.raises(ValueError, match="sum to 3"):
        fuse_chain(pats + [(1, 1, 1, 12)], ts + [np.ones((1, 1, 1, 12))], [1, 1])


def _masked_flat(pattern, batch):
    a, b, c, d = pattern
    rows, cols = a * b * d, a * c * d
    K = tc.placeholder((rows, cols), name="K", dtype="float64")
    X = tc.placeholder((cols, batch), name="X", dtype="float64")

    def body(r, n):
        m = tc.reduce_axis(cols, name="m")
        same = tc.all(tc.eq(r // (b * d), m // (c * d)), tc.eq(r % d, m % d))
        return tc.sum(K[r, m] * X[m, n], axis=m, where=same)

    return K, X, tc.compute((rows, batch), body, name="Ymask")


def _masked_multi(pattern, batch):
    a, b, c, d = pattern
    K = tc.placeholder((a, b, d, a, c, d), name="K", dtype="float64")
    X = tc.placeholder((a, c, d, batch), name="X", dtype="float64")

    def body(i, j, l_, n):
        i2, k, l2 = (tc.reduce_axis(e, name=s) for e, s in ((a, "i2"), (c, "k"), (d, "l2")))
        return tc.sum(K[i, j, l_, i2, k, l2] * X[i2, k, l2, n], axis=[i2, k, l2],
                      where=tc.all(tc.eq(i, i2), tc.eq(l_, l2)))

    return K, X, tc.compute((a, b, d, batch), body, name="Ymulti")


@pytest.mark.parametrize("form", [_masked_flat, _masked_multi], ids=["flat", "multi"])
@pytest.mark.parametrize("pattern", [(2, 3, 4, 5), (4, 2, 2, 4), (1, 3, 5, 1)])
def test_masked_dense_product_becomes_compact(rng, form, pattern):
    a, b, c, d = pattern
    batch = 3
    K, X, Y = form(pattern, batch)
    dense = (a * b * d) * (a * c * d) * batch
    assert tc.cost([Y], [K, X], optimize=False).iterations == dense
    (opt,) = tc.optimize([Y])
    cost = tc.cost([opt], [K, X])
    assert cost.iterations == a * b * c * d * batch == dense // (a * d)
    assert cost.flops == 2 * a * b * c * d * batch
    M = kron_sparse_dense(rng.standard_normal(pattern))
    noise = rng.standard_normal(M.shape) * (M == 0)  # entries off the support are ignored
    x = rng.standard_normal((a * c * d, batch))
    shape_of = [tuple(int(s.value) for s in t.shape) for t in (K, X)]
    got = tc.build(opt, [K, X])((M + noise).reshape(shape_of[0]), x.reshape(shape_of[1]))
    np.testing.assert_allclose(got.reshape(a * b * d, batch), M @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("form", ["select", "cast"])
def test_masked_product_as_select_or_cast_is_compact(form, rng):
    a, b, c, d = 2, 3, 4, 5
    K = tc.placeholder((a * b * d, a * c * d), name="K", dtype="float64")
    X = tc.placeholder((a * c * d, 3), name="X", dtype="float64")

    def body(r, n):
        m = tc.reduce_axis(a * c * d, name="m")
        same = tc.all(tc.eq(r // (b * d), m // (c * d)), tc.eq(r % d, m % d))
        if form == "select":
            return tc.sum(tc.if_then_else(same, K[r, m] * X[m, n], 0.0), axis=m)
        return tc.sum(tc.cast(same, "float64") * K[r, m] * X[m, n], axis=m)

    Y = tc.compute((a * b * d, 3), body, name="Ysel")
    assert tc.cost([Y], [K, X]).iterations == a * b * c * d * 3
    k, x = rng.standard_normal((a * b * d, a * c * d)), rng.standard_normal((a * c * d, 3))
    (want,) = tc.evaluate([Y], {K: k, X: x})
    (got,) = tc.build([Y], [K, X])(k, x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["dct2", "dht"])
def test_float16_storage(rng, kind):
    n = 256
    x = rng.standard_normal((n, 4))
    _, _, k16 = _built(n, kind, 4, fuse=2, dtype="float16")
    y16 = k16(x.astype(np.float16))
    assert y16.dtype == np.float16
    ref = _reference(kind, x)
    rel = np.max(np.abs(y16.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert rel < 2e-2, rel
