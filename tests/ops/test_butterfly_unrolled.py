"""Unrolled butterfly stages, the input gather as index arithmetic, and the default fusion."""

import numpy as np
import pytest
import scipy.fft as sfft
from gradcheck import check_gradient

import tecomp as tc
from tecomp.ops.butterfly_factors import (
    butterfly_cost,
    kron_sparse_dense,
    monarch_patterns,
    real_butterfly,
    square_dyadic_patterns,
)
from tecomp.ops.butterfly_fuse import auto_grouping, best_grouping, fuse_chain
from tecomp.ops.butterfly_gather import bit_linear_split

F64 = "float64"


def test_bit_linear_split_worked_example():
    perm, patterns, _, _ = real_butterfly(16, "dct2")
    assert list(perm) == [0, 15, 8, 7, 4, 11, 12, 3, 2, 13, 10, 5, 6, 9, 14, 1]
    split = bit_linear_split(perm, 8, 2)
    assert (split.base, split.scale, split.weights) == ((0, 15), (2, -2), (4, 2, 1))


@pytest.mark.parametrize("kind", ["dct2", "dst2", "dht"])
@pytest.mark.parametrize("n", [2, 4, 8, 64, 1024])
def test_bit_linear_split_reproduces_every_chain_gather(kind, n):
    perm = real_butterfly(n, kind)[0]
    for c in (2, 4, 8, 16):
        if c > n:
            continue
        a = n // c
        split = bit_linear_split(perm, a, c)
        assert split is not None
        i = np.arange(a)
        q = sum((((i >> t) & 1) * w for t, w in enumerate(split.weights)), np.zeros(a, int))
        got = np.asarray(split.base)[None, :] + q[:, None] * np.asarray(split.scale)[None, :]
        np.testing.assert_array_equal(got.reshape(-1), perm)


def test_bit_linear_split_rejects_other_permutations():
    assert bit_linear_split(np.array([1, 0, 2, 3, 7, 4, 6, 5]), 4, 2) is None
    assert bit_linear_split(np.arange(12), 3, 4) is None  # a not a power of two
    assert bit_linear_split(np.arange(8), 4, 4) is None  # wrong length


def _reference(factors, x, perm=None):
    y = x if perm is None else x[perm]
    for t in reversed(factors):
        y = kron_sparse_dense(t) @ y
    return y


@pytest.mark.parametrize("patterns", [square_dyadic_patterns(16), monarch_patterns(12, 12, 3, 4),
                                      [(1, 3, 5, 1)], [(2, 3, 4, 5)]],
                         ids=["dyadic16", "monarch12", "single1351", "single2345"])
@pytest.mark.parametrize("perm_form", ["none", "tensor", "array"])
def test_unrolled_chain_matches_numpy_and_gradients(rng, patterns, perm_form):
    Ts = [tc.placeholder(p, name=f"T{i}", dtype=F64) for i, p in enumerate(patterns)]
    a, _, c, d = patterns[-1]
    rows = a * c * d
    X = tc.placeholder((rows, 4), name="X", dtype=F64)
    p = rng.permutation(rows)
    perm = {"none": None, "tensor": tc.constant(p, name="P"), "array": p}[perm_form]
    Y = tc.ops.butterfly_chain(X, patterns, Ts, perm=perm, unroll=True)
    ts = [rng.standard_normal(q) for q in patterns]
    x = rng.standard_normal((rows, 4))
    ref = _reference(ts, x, None if perm is None else p)
    np.testing.assert_allclose(tc.build(Y, [X, *Ts])(x, *ts), ref, rtol=1e-11, atol=1e-12)
    (ev,) = tc.evaluate([Y], {X: x, **dict(zip(Ts, ts))})
    np.testing.assert_allclose(ev, ref, rtol=1e-11, atol=1e-12)
    check_gradient(Y, Ts + [X], {X: x, **dict(zip(Ts, ts))}, optimize=True,
                   head=rng.standard_normal(ref.shape))


@pytest.mark.parametrize("kind", ["dct2", "dst2", "dht"])
def test_bit_linear_gather_reads_no_table(rng, kind):
    n = 64
    X = tc.placeholder((n, 3), name="X", dtype=F64)
    perm, patterns, factors, _ = real_butterfly(n, kind)
    Ts = [tc.constant(f, name=f"T{i}") for i, f in enumerate(factors)]
    fast = tc.ops.butterfly_chain(X, patterns, Ts, name="fast", perm=perm, unroll=True)
    table = tc.ops.butterfly_chain(X, patterns, Ts, name="table", perm=perm)
    assert [b.dtype for b in tc.lower(fast, [X]).func.inputs if b.dtype == "int64"] == []
    assert "int64" in [b.dtype for b in tc.lower(table, [X]).func.inputs]
    x = rng.standard_normal((n, 3))
    np.testing.assert_allclose(tc.build(fast, [X])(x), tc.build(table, [X])(x),
                               rtol=1e-12, atol=1e-13)


def test_unsplittable_array_perm_falls_back_to_a_table(rng):
    patterns = square_dyadic_patterns(8)
    ts = [rng.standard_normal(p) for p in patterns]
    Ts = [tc.constant(t, name=f"T{i}") for i, t in enumerate(ts)]
    X = tc.placeholder((8, 2), name="X", dtype=F64)
    p = np.array([1, 0, 2, 3, 7, 4, 6, 5])
    Y = tc.ops.butterfly_chain(X, patterns, Ts, perm=p, unroll=True)
    x = rng.standard_normal((8, 2))
    np.testing.assert_allclose(tc.build(Y, [X])(x), _reference(ts, x, p), rtol=1e-12,
                               atol=1e-13)
    with pytest.raises(tc.TecompError, match="perm must hold 8"):
        tc.ops.butterfly_chain(X, patterns, Ts, perm=np.arange(7), unroll=True)
    with pytest.raises(tc.TecompError, match="perm must hold 8"):
        tc.ops.butterfly_chain(X, patterns, Ts, perm=np.arange(8) + 1)


def test_unrolled_stages_keep_their_buffers():
    # no stage is inlined into its consumer (that would recompute it c times)
    n = 1024
    X = tc.placeholder((n, 8), name="X", dtype=F64)
    _, patterns, factors, _ = real_butterfly(n, "dct2")
    fp, _ = fuse_chain(patterns, factors, auto_grouping(patterns, fewer_passes=True))
    cost = tc.cost([tc.ops.dct(X)], [X])
    # every stage once, plus the copy of the staged last factor into row order (staged_out)
    assert cost.iterations == sum(a * b * d for a, b, _, d in fp) * 8 + n * 8


def test_auto_grouping_and_dct_default(rng):
    _, patterns, _, _ = real_butterfly(256, "dct2")
    assert auto_grouping(patterns) == best_grouping(patterns, 2) == [2, 2, 2, 2]
    # odd length: the input end as one triple; a triple that cannot fuse falls back to pairs
    assert auto_grouping(real_butterfly(512, "dct2")[1]) == [2, 2, 2, 3]
    assert auto_grouping(real_butterfly(8, "dct2")[1]) == [3]
    assert auto_grouping([(2, 2, 3, 1), (3, 2, 2, 1), (1, 6, 1, 1)]) == [1, 1, 1]
    # fewer passes: triples at both ends of an even chain, the same multiply-adds as pairs
    pats = real_butterfly(1024, "dct2")[1]
    assert auto_grouping(pats) == [2] * 5
    assert auto_grouping(pats, fewer_passes=True) == [3, 2, 2, 3]
    assert auto_grouping(patterns, fewer_passes=True) == [3, 2, 3]
    assert butterfly_cost(fuse_chain(pats, [np.ones(p) for p in pats], [3, 2, 2, 3])[0]) == \
        butterfly_cost(fuse_chain(pats, [np.ones(p) for p in pats], [2] * 5)[0])
    # fewest passes (long chains): groups of up to three, one pass fewer than above
    pats = real_butterfly(2048, "dct2")[1]
    assert auto_grouping(pats, fewer_passes=True) == [2, 2, 2, 2, 3]
    assert auto_grouping(pats, fewer_passes=True, fewest_passes=True) == [3, 3, 2, 3] == \
        best_grouping(pats, 3)
    for n in (8, 512, 2048):
        x = rng.standard_normal((n, 3))
        Xn = tc.placeholder((n, 3), name="Xn", dtype=F64)
        y = tc.build(tc.ops.dct(Xn, "dst2"), [Xn])(x)
        assert np.max(np.abs(y - sfft.dst(x, 2, norm="ortho", axis=0))) <= 1e-12
    x = rng.standard_normal((256, 5))
    X = tc.placeholder((256, 5), name="X", dtype=F64)
    y = tc.build(tc.ops.dct(X), [X])(x)
    assert np.max(np.abs(y - sfft.dct(x, 2, norm="ortho", axis=0))) <= 1e-12
    with pytest.raises(tc.TecompError, match="auto"):
        tc.ops.dct(X, fuse="best")


@pytest.mark.parametrize("kind", ["dct2", "dst2"])
def test_dct_gradient_with_respect_to_input(rng, kind):
    n = 16
    X = tc.placeholder((n, 3), name="X", dtype=F64)
    Y = tc.ops.dct(X, kind)
    x = rng.standard_normal((n, 3))
    check_gradient(Y, [X], {X: x}, optimize=True, head=rng.standard_normal((n, 3)))


@pytest.mark.parametrize("patterns", [square_dyadic_patterns(16), monarch_patterns(12, 12, 3, 4)],
                         ids=["dyadic16", "monarch12"])
@pytest.mark.parametrize("perm_form", ["none", "array"])
def test_staged_out_matches_row_order_and_gradients(rng, patterns, perm_form):
    # the last factor computed as a stage, then copied into row order: same values, and the
    # gradient goes through the copy's generic adjoint into the stage's declared rule
    Ts = [tc.placeholder(p, name=f"T{i}", dtype=F64) for i, p in enumerate(patterns)]
    a, _, c, d = patterns[-1]
    rows = a * c * d
    X = tc.placeholder((rows, 4), name="X", dtype=F64)
    p = rng.permutation(rows)
    perm = None if perm_form == "none" else p
    Y = tc.ops.butterfly_chain(X, patterns, Ts, perm=perm, unroll=True, staged_out=True)
    assert patterns[0][3] > 1  # a staged last factor (small: inlined into the copy again)
    ts = [rng.standard_normal(q) for q in patterns]
    x = rng.standard_normal((rows, 4))
    ref = _reference(ts, x, perm)
    np.testing.assert_allclose(tc.build(Y, [X, *Ts])(x, *ts), ref, rtol=1e-11, atol=1e-12)
    check_gradient(Y, Ts + [X], {X: x, **dict(zip(Ts, ts))}, optimize=True,
                   head=rng.standard_normal(ref.shape))


@pytest.mark.parametrize("kind", ["dct2", "dst2"])
def test_dct_1024_staged_out_matches_scipy_and_its_inverse(rng, kind):
    n = 1024
    X = tc.placeholder((n, 3), name="X", dtype=F64)
    Y = tc.ops.dct(X, kind)
    G = tc.placeholder((n, 3), name="G", dtype=F64)
    x, g = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
    assert f"{kind}_M1_staged" in str(tc.lower(Y, [X]))  # kept a buffer at this size
    fwd, inv = (sfft.dct, sfft.idct) if kind == "dct2" else (sfft.dst, sfft.idst)
    np.testing.assert_allclose(tc.build(Y, [X])(x), fwd(x, 2, norm="ortho", axis=0),
                               rtol=1e-12, atol=1e-12)
    (dX,) = tc.gradient(Y, [X], head=G)
    np.testing.assert_allclose(tc.build(dX, [X, G])(x, g), inv(g, 2, norm="ortho", axis=0),
                               rtol=1e-12, atol=1e-12)


def test_sparse_terms_of_the_real_chain():
    # the fused middle factors: one structural zero per output row, k = 1 for rows j < b/2 and
    # k = 0 for the others; the end factors have none (first) or unequal numbers (last)
    from tecomp.ops.butterfly import sparse_terms
    perm, pats, facs, _ = real_butterfly(256, "dct2")
    pats, facs = fuse_chain(pats, facs, auto_grouping(pats))
    plans = [sparse_terms(f) for f in facs]
    assert plans[0] is None and plans[-1] is None
    for plan, f in zip(plans[1:-1], facs[1:-1]):
        assert plan == [(0, 4, 2, 1), 2, 3, 4, 5, 6, 7]
        b, c = f.shape[1:3]
        for j in range(b):  # the terms left out are exactly the zeros of row j
            kept = {t if isinstance(t, int) else j // 4 for t in plan}
            assert not np.any(f[:, j, sorted(set(range(c)) - kept), :])
    assert sparse_terms(np.ones((2, 3, 4, 1))) is None
    T = np.ones((1, 4, 3, 2))
    T[:, [0, 2], 0, :] = 0  # rows alternate between dropping k = 0 and k = 1
    T[:, [1, 3], 1, :] = 0
    assert sparse_terms(T) == [(1, 1, 2, -1), 2]
    T[:, 3, 1, :] = 5.0  # row 3 has no zero left
    assert sparse_terms(T) is None


@pytest.mark.parametrize("kind", ["dct2", "dst2", "dht"])
@pytest.mark.parametrize("n", [64, 1024])
def test_dct_without_structural_zeros_is_the_same_transform(rng, kind, n):
    # the zero products add exact zeros: the sparse stages give the same bits, fewer flops
    X = tc.placeholder((n, 3), name="X", dtype=F64)
    x = rng.standard_normal((n, 3))
    sparse, dense = tc.ops.dct(X, kind), tc.ops.dct(X, kind, sparse=False)
    assert tc.cost(sparse).flops < tc.cost(dense).flops
    np.testing.assert_array_equal(tc.build(sparse, [X])(x), tc.build(dense, [X])(x))
    with pytest.raises(tc.TecompError, match="terms needs unroll"):
        tc.ops.butterfly_chain(X, [(1, n, n, 1)], [tc.placeholder((1, n, n, 1), name="T")],
                               terms=[None])


@pytest.mark.parametrize("keep", [True, False])
def test_the_staged_last_factor_keeps_its_buffer(rng, keep, monkeypatch):
    """At 2048 points grouped in pairs the output end is a pair of factors, 8 terms: small
    enough that the inliner would compute them in the copy's row order (each input row
    re-read by the 4 outputs it feeds); the staged stage keeps its buffer (``KEEP_STAGED``)."""
    from tecomp.loopir import Allocate
    from tecomp.ops import butterfly
    from tecomp.stmt_functor import walk_stmt

    monkeypatch.setattr(butterfly, "KEEP_STAGED", keep)
    X = tc.placeholder((2048, 3), name="X", dtype=F64)
    k = tc.build(tc.ops.dct(X, fuse=2), [X])
    temps = [s.buffer.name for s in walk_stmt(k.ir.body) if isinstance(s, Allocate)]
    assert any(t.endswith("_staged") for t in temps) == keep
    x = rng.standard_normal((2048, 3))
    assert np.max(np.abs(k(x) - sfft.dct(x, 2, norm="ortho", axis=0))) <= 1e-12
