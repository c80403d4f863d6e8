"""Tests for Kronecker-sparse factors and the real DCT-II / DST-II / DHT butterflies."""

import math

import numpy as np
import pytest
import scipy.fft as sfft

from tecomp.ops.butterfly_factors import (
    apply_kron_sparse,
    apply_real_butterfly,
    butterfly_cost,
    check_chainable,
    dft_butterfly,
    kron_sparse_dense,
    monarch_patterns,
    real_butterfly,
    square_dyadic_patterns,
)

KINDS = ("dct2", "dst2", "dht")
SIZES = [2**L for L in range(1, 15)]  # 2 .. 16384


def _reference(kind, X):
    if kind == "dct2":
        return sfft.dct(X, type=2, norm="ortho", axis=0)
    if kind == "dst2":
        return sfft.dst(X, type=2, norm="ortho", axis=0)
    F = np.fft.fft(X, axis=0)
    return (F.real - F.imag) / math.sqrt(X.shape[0])


def _expected_patterns(n):
    L = n.bit_length() - 1
    if L == 1:
        return [(1, 2, 2, 1)]
    middle = [(2 ** (ell - 1), 4, 4, n >> ell) for ell in range(2, L)]
    return [(1, 2, 4, n // 2), *middle, (n // 2, 4, 2, 1)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", SIZES)
def test_real_butterfly_matches_reference(kind, n):
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, 3))
    data = real_butterfly(n, kind)
    perm, patterns, factors, out_perm = data
    assert out_perm is None
    assert perm.dtype == np.int64 and perm.shape == (n,)
    assert np.array_equal(np.sort(perm), np.arange(n))
    assert patterns == _expected_patterns(n)
    for T, p in zip(factors, patterns):
        assert T.dtype == np.float64 and T.shape == p
    L = n.bit_length() - 1
    assert butterfly_cost(patterns) == (8 * n * (L - 1) if n > 2 else 4)
    check_chainable(patterns)
    Y = apply_real_butterfly(data, X)
    assert np.max(np.abs(Y - _reference(kind, X))) <= 1e-11
    y = apply_real_butterfly(data, X[:, 0])
    assert y.shape == (n,)
    assert np.max(np.abs(y - _reference(kind, X[:, 0]))) <= 1e-11


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 4, 8, 32])
def test_dense_product_of_factors(kind, n):
    """The plain matrix product M_1 ... M_L (no hidden permutations) times the gather."""
    perm, _, factors, _ = real_butterfly(n, kind)
    M = np.eye(n)[perm]
    for T in reversed(factors):
        M = kron_sparse_dense(T) @ M
    assert np.max(np.abs(M - _reference(kind, np.eye(n)))) <= 1e-12


@pytest.mark.parametrize("n", [2, 8, 64])
def test_dst_with_explicit_output_perm(n):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, 2))
    data = real_butterfly(n, "dst2", fold_output_perm=False)
    assert np.array_equal(data[3], np.arange(n)[::-1])
    assert data[1] == _expected_patterns(n)
    Y = apply_real_butterfly(data, X)
    assert np.max(np.abs(Y - _reference("dst2", X))) <= 1e-12
    # y_final[k] = y[out_perm[k]]
    y_raw = apply_real_butterfly((data[0], data[1], data[2], None), X)
    assert np.allclose(Y, y_raw[data[3]])


def test_worked_example_n4():
    perm, patterns, factors, out_perm = real_butterfly(4, "dct2")
    assert perm.tolist() == [0, 3, 2, 1]
    assert patterns == [(1, 2, 4, 2), (2, 4, 2, 1)]
    last = factors[1]
    for i in range(2):
        assert np.array_equal(last[i, :2, :, 0], [[1.0, 1.0], [1.0, -1.0]])
        assert np.all(last[i, 2:] == 0.0)


def test_transform_identities():
    n = 16
    rng = np.random.default_rng(2)
    x = rng.standard_normal(n)
    k = np.arange(n)
    m = np.arange(n)
    # Makhoul reordering: even samples then odd samples reversed
    v = np.concatenate([x[0::2], x[1::2][::-1]])
    unnorm = np.cos(np.pi * np.outer(k, 2 * m + 1) / (2 * n)) @ x
    assert np.allclose(unnorm, np.real(np.exp(-1j * np.pi * k / (2 * n)) * np.fft.fft(v)))
    # DST-II = reversal * DCT-II * diag((-1)^m), orthonormal scalings included
    sign = (-1.0) ** m
    dst = sfft.dst(x, 2, norm="ortho")
    assert np.allclose(dst, sfft.dct(sign * x, 2, norm="ortho")[::-1])


@pytest.mark.parametrize("n", [2, 4, 16, 256])
def test_complex_dft_butterfly(n):
    perm, patterns, factors = dft_butterfly(n)
    assert patterns == square_dyadic_patterns(n)
    x = np.random.default_rng(3).standard_normal((n, 2))
    y = x[perm].astype(np.complex128)
    for K in reversed(factors):
        y = apply_kron_sparse(K, y)
    assert np.allclose(y, np.fft.fft(x, axis=0))


@pytest.mark.parametrize("pattern", [(1, 3, 5, 1), (2, 3, 4, 5), (3, 1, 2, 4), (4, 2, 2, 1)])
def test_dense_vs_apply(pattern):
    rng = np.random.default_rng(4)
    a, b, c, d = pattern
    T = rng.standard_normal(pattern)
    X = rng.standard_normal((a * c * d, 3))
    M = kron_sparse_dense(T)
    assert M.shape == (a * b * d, a * c * d)
    assert np.count_nonzero(M) == T.size
    assert np.allclose(M @ X, apply_kron_sparse(T, X))
    assert np.allclose(M @ X[:, 0], apply_kron_sparse(T, X[:, 0]))
    i, j, k, l_ = a - 1, b - 1, c - 1, d - 1
    assert M[i * b * d + j * d + l_, i * c * d + k * d + l_] == T[i, j, k, l_]


def test_apply_kron_sparse_shape_error():
    with pytest.raises(ValueError, match="input rows"):
        apply_kron_sparse(np.ones((2, 2, 2, 2)), np.ones((7, 1)))


def test_pattern_families_and_chainability():
    sd = square_dyadic_patterns(16)
    assert sd == [(1, 2, 2, 8), (2, 2, 2, 4), (4, 2, 2, 2), (8, 2, 2, 1)]
    check_chainable(sd)
    mo = monarch_patterns(12, 12, 3, 4)
    assert mo == [(1, 3, 4, 4), (4, 4, 3, 1)]
    check_chainable(mo)
    check_chainable(monarch_patterns(6, 10, 2, 5))
    with pytest.raises(ValueError, match="positions 1 and 2"):
        check_chainable([(1, 2, 2, 8), (2, 2, 2, 4), (2, 2, 2, 2)])
    # sizes compose (6 columns, 6 rows) but the block structures do not nest
    check_chainable([(1, 2, 2, 3), (3, 2, 2, 1)], strict=False)
    with pytest.raises(ValueError, match="positions 0 and 1 are not chainable"):
        check_chainable([(1, 2, 2, 3), (3, 2, 2, 1)])
    with pytest.raises(ValueError, match="position 0"):
        check_chainable([(1, 2, 0, 1)])


def test_argument_errors():
    for bad in (0, 1, 3, 12, -4, 2.0):
        with pytest.raises(ValueError, match="power of two"):
            real_butterfly(bad, "dct2")
    with pytest.raises(ValueError, match="kind"):
        real_butterfly(8, "dct3")
    with pytest.raises(ValueError, match="divide"):
        monarch_patterns(12, 12, 5, 4)
    with pytest.raises(ValueError, match="divide"):
        monarch_patterns(12, 12, 3, 5)
    with pytest.raises(ValueError, match="power of two"):
        square_dyadic_patterns(6)
