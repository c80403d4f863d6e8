"""Gradients of Kronecker-sparse stages and butterfly chains: the transposed chain, at the
forward's cost, with the input permutation inverted exactly."""

import numpy as np
import pytest
import scipy.fft as sfft
from gradcheck import check_gradient

import tecomp as tc
from tecomp.functor import input_tensors
from tecomp.ops.butterfly_factors import kron_sparse_dense, real_butterfly, square_dyadic_patterns
from tecomp.ops.butterfly_fuse import auto_grouping, fuse_chain
from tecomp.ops.butterfly_gather import BitAffineMap, bit_affine_form, inverse_permutation

F64 = "float64"
KINDS = ["dct2", "dst2", "dht"]


def _transform_matrix(n, kind):
    if kind == "dct2":
        return sfft.dct(np.eye(n), 2, norm="ortho", axis=0)
    if kind == "dst2":
        return sfft.dst(np.eye(n), 2, norm="ortho", axis=0)
    F = np.fft.fft(np.eye(n), axis=0)
    return ((1 + 1j) * F).real / np.sqrt(n)


def _field_values(form, n, lo, hi):
    e = form.field(tc.var("q"), lo, hi)
    if isinstance(e, int):
        return np.full(n, e)
    Y = tc.compute((n,), lambda p: tc.cast(form.field(p, lo, hi), F64))
    return tc.evaluate([Y], {})[0].astype(np.int64)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 8, 64])
def test_chain_permutations_invert_to_bit_affine_maps(kind, n):
    perm = real_butterfly(n, kind)[0]
    inv = inverse_permutation(perm)
    assert np.array_equal(perm[inv], np.arange(n))
    for table in (perm, inv):
        form = bit_affine_form(table)
        assert form is not None
        bits = n.bit_length() - 1
        for lo, hi in [(0, bits), (0, 1), (1, bits), (bits // 2, bits)]:
            want = (table >> lo) & ((1 << (hi - lo)) - 1)
            assert np.array_equal(_field_values(form, n, lo, hi), want), (lo, hi)


def test_random_bit_affine_bijections_and_rejections(rng):
    n, bits = 32, 5
    found = 0
    while found < 6:
        form = BitAffineMap(int(rng.integers(n)), tuple(int(c) for c in rng.integers(0, n, bits)))
        table = form(np.arange(n))
        if np.unique(table).size != n:
            continue
        found += 1
        assert bit_affine_form(table) == form
        for lo, hi in [(0, bits), (1, 4), (3, 5)]:
            assert np.array_equal(_field_values(form, n, lo, hi),
                                  (table >> lo) & ((1 << (hi - lo)) - 1)), (form, lo, hi)
    assert bit_affine_form([0, 2, 1, 3, 5, 4, 6, 7]) is None  # a swap alone is not affine
    with pytest.raises(ValueError, match="not a permutation"):
        inverse_permutation([0, 1, 1, 3])
    with pytest.raises(tc.TecompError, match="not a permutation"):
        tc.ops.butterfly_chain(tc.placeholder((4, 2), name="Z", dtype=F64), [(1, 4, 4, 1)],
                               [tc.placeholder((1, 4, 4, 1), name="T", dtype=F64)],
                               perm=np.array([0, 1, 1, 3]))


def _chains(n):
    """Every butterfly gradient the budget test covers: ``(label, output, inputs, wrt)``."""
    out = []
    for dtype in (F64, "float32"):
        X = tc.placeholder((n, 128), name="X", dtype=dtype)
        for kind in KINDS:
            for fuse in ("auto", 1, 2, 3):
                for sparse in (False, True):
                    out.append((f"{kind} fuse={fuse} {dtype} sparse={sparse}",
                                tc.ops.dct(X, kind, fuse=fuse, sparse=sparse), [X], [X]))
    X = tc.placeholder((n, 128), name="X", dtype=F64)
    pats = square_dyadic_patterns(n)
    Ts = [tc.placeholder(p, name=f"T{i}", dtype=F64) for i, p in enumerate(pats)]
    perm = real_butterfly(n, "dct2")[0]
    for unroll in (False, True):
        Y = tc.ops.butterfly_chain(X, pats, Ts, perm=perm, unroll=unroll)
        out.append((f"dyadic unroll={unroll} X", Y, [X, *Ts], [X]))
    pat = (4, 8, 8, n // 32)
    T = tc.placeholder(pat, name="T", dtype=F64)
    Xk = tc.placeholder((n, 128), name="Xk", dtype=F64)
    out.append(("kron_sparse_matmul X", tc.ops.kron_sparse_matmul(T, Xk, pat), [T, Xk], [Xk]))
    out.append(("kron_sparse_matmul T", tc.ops.kron_sparse_matmul(T, Xk, pat), [T, Xk], [T]))
    return out


def test_every_butterfly_gradient_costs_at_most_its_forward_at_n256():
    """tc.cost is static: a deterministic budget, 1.2x the forward's flops.

    The gradient's transposed stages write every product: the forward's structural zeros
    (``dct(..., sparse=True)``, the default) are left out of the forward only, where a
    factor's columns have unequal numbers of them in the transpose.  Its budget is therefore
    the forward with all products (``sparse=False``), and at most 1.4x the sparse one."""
    n = 256
    dense_fwd = {}
    for label, Y, inputs, wrt in _chains(n):
        H = tc.placeholder(Y.shape, name="H", dtype=Y.dtype)
        grads = tc.gradient(Y, wrt, head=H)
        fwd = tc.cost([Y], inputs).flops
        cost = tc.cost(grads, inputs + [H]).flops
        if label.endswith("sparse=False"):
            dense_fwd[label[:-len("sparse=False")]] = fwd
        elif label.endswith("sparse=True"):
            assert fwd < dense_fwd[label[:-len("sparse=True")]], label
            assert cost <= 1.4 * fwd, (label, cost, fwd)
            fwd = dense_fwd[label[:-len("sparse=True")]]
        assert cost <= 1.2 * fwd, (label, cost, fwd)


@pytest.mark.parametrize("n", [256, 1024])
def test_factor_gradients_of_a_trained_chain_at_twice_the_forward(rng, n):
    pats = square_dyadic_patterns(n)
    if n > 256:  # the real chain's fused factors: fewer, denser stages
        pats = fuse_chain(pats, [np.zeros(p) for p in pats], auto_grouping(pats))[0]
    Ts = [tc.placeholder(p, name=f"T{i}", dtype=F64) for i, p in enumerate(pats)]
    X = tc.placeholder((n, 3), name="X", dtype=F64)
    perm = real_butterfly(n, "dht")[0]
    Y = tc.ops.butterfly_chain(X, pats, Ts, perm=perm)
    ts = [rng.standard_normal(p) for p in pats]
    x = rng.standard_normal((n, 3))
    check_gradient(Y, Ts, {X: x, **dict(zip(Ts, ts))}, optimize=True,
                   head=rng.standard_normal((n, 3)))
    H = tc.placeholder((n, 3), name="H", dtype=F64)
    fwd = tc.cost([Y], [X, *Ts]).flops
    # beyond the forward whose stages it reads (optimised together, so that they are shared),
    # the gradient costs one transposed stage and one product stage per factor
    for wrt in (Ts, Ts + [X]):
        both = tc.optimize([Y, *tc.gradient(Y, wrt, head=H, optimize=False)])
        both = tc.cost(both, [X, H, *Ts]).flops
        assert both - fwd <= 2 * fwd, (len(wrt), both, fwd)
    grads = tc.gradient(Y, Ts + [X], head=H)
    # each factor's gradient is sum_n head-row x input-row on the factor's support
    h = rng.standard_normal((n, 3))
    got = tc.build(grads, [X, H, *Ts])(x, h, *ts)
    Ms = [kron_sparse_dense(t) for t in ts]
    ins = [x[perm]]
    for M in reversed(Ms[1:]):
        ins.insert(0, M @ ins[0])
    heads = [h]
    for M in Ms[:-1]:
        heads.append(M.T @ heads[-1])
    for pos, (M, g) in enumerate(zip(Ms, got[:-1])):
        want = (heads[pos] @ ins[pos].T) * (M != 0)
        np.testing.assert_allclose(kron_sparse_dense(g), want, rtol=1e-10, atol=1e-10)
    dx = np.zeros_like(x)
    dx[perm] = Ms[-1].T @ heads[-1]
    np.testing.assert_allclose(got[-1], dx, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [F64, "float32"])
def test_dct_gradient_is_the_inverse_transform(rng, kind, dtype):
    n = 256
    X = tc.placeholder((n, 128), name="X", dtype=dtype)
    G = tc.placeholder((n, 128), name="G", dtype=dtype)
    (dX,) = tc.gradient(tc.ops.dct(X, kind), [X], head=G)
    g = rng.standard_normal((n, 128))
    got = tc.build([dX], [G])(g.astype(dtype))
    want = _transform_matrix(n, kind).T @ g
    tol = 1e-12 if dtype == F64 else 1e-4
    assert np.max(np.abs(got - want)) <= tol
    if kind == "dct2":
        assert np.max(np.abs(got - sfft.idct(g, 2, norm="ortho", axis=0))) <= tol


@pytest.mark.parametrize("unrolled", [True, False])
def test_the_permuted_input_stage_adjoint_is_a_buffer_the_inverse_permutation_reads(rng,
                                                                                    unrolled):
    from tecomp import expr as E
    from tecomp.functor import topo_order, walk
    from tecomp.ops import butterfly_grad

    n = 64
    X = tc.placeholder((n, 8), name="X", dtype=F64)
    G = tc.placeholder((n, 8), name="G", dtype=F64)
    butterfly_grad.UNROLL_BUFFERED = unrolled
    butterfly_grad.KEEP_ADJOINTS = False  # the permuted input's adjoint alone (see below)
    try:
        (dX,) = tc.gradient(tc.ops.dct(X), [X], head=G)
    finally:
        butterfly_grad.UNROLL_BUFFERED = True
        butterfly_grad.KEEP_ADJOINTS = True
    kept = [t for t in topo_order([dX]) if t.attrs.get("keep_buffer")]
    if not unrolled:
        assert not kept
    else:  # products written out, kept a buffer for the gather through perm^-1
        (D,) = kept
        assert not [x for x in walk(D.op.body) if isinstance(x, E.Reduce)]
        from tecomp.passes.lower import lower

        func = lower([dX], [G])
        assert any(s.buffer.name == D.name for s in _walk_allocs(func.body))
    g = rng.standard_normal((n, 8))
    got = tc.build(dX, [G])(g)
    np.testing.assert_allclose(got, sfft.idct(g, 2, norm="ortho", axis=0), atol=1e-12)


@pytest.mark.parametrize("n", [256, 4096])
def test_staged_adjoints_keep_their_order_and_their_views_are_never_copied(rng, n):
    """Every staged adjoint ``D[i, l, k, n]`` is a buffer of its own (computed in its own
    order, not in the order of the view that re-indexes it into the previous stage's layout),
    and no view is a buffer: each is inlined into the transposed stage that reads it, even
    where its 16 reads outgrow the inliner's size budget (4096 points: groups of three)."""
    from tecomp.passes.lower import lower

    X = tc.placeholder((n, 4), name="X", dtype=F64)
    G = tc.placeholder((n, 4), name="G", dtype=F64)
    (dX,) = tc.gradient(tc.ops.dct(X), [X], head=G)
    allocs = [s.buffer.name for s in _walk_allocs(lower([dX], [G]).body)]
    assert not [a for a in allocs if a.endswith("_dx_view")], allocs
    assert len([a for a in allocs if a.endswith("_dx")]) >= 2, allocs
    g = rng.standard_normal((n, 4))
    got = tc.build(dX, [G])(g)
    np.testing.assert_allclose(got, sfft.idct(g, 2, norm="ortho", axis=0), atol=1e-12)


def _walk_allocs(s):
    from tecomp.loopir import Allocate
    from tecomp.stmt_functor import walk_stmt

    return [x for x in walk_stmt(s) if isinstance(x, Allocate)]


@pytest.mark.parametrize("kind", KINDS)
def test_declined_rule_and_jacobian_fall_back_to_the_generic_adjoint(rng, kind):
    n = 8
    X = tc.placeholder((n, 2), name="X", dtype=F64)
    Y = tc.ops.dct(X, kind)
    (Yo,) = tc.optimize([Y])  # passes may rebuild the stages: their rules then decline
    assert Yo.attrs["vjp"](Yo, input_tensors(Yo), tc.placeholder((n, 2), dtype=F64)) is None
    x = rng.standard_normal((n, 2))
    for out in (Y, Yo):
        check_gradient(out, [X], {X: x}, optimize=True, head=rng.standard_normal((n, 2)))
    (jac,) = tc.evaluate([tc.jacobian(Y, X)], {X: x})  # a prefixed head: the generic adjoint
    want = np.einsum("ij,bc->ibjc", _transform_matrix(n, kind), np.eye(2))
    np.testing.assert_allclose(jac, want, atol=1e-12)
