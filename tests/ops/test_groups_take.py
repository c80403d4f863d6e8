"""Grouped convolutions (any ``groups``) and ``take`` with N-D indices, with their gradients."""

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc


def grouped_conv_ref(x, w, groups, stride, pad):
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    kg = k // groups
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    out = np.zeros((n, k, oh, ow))
    for f in range(k):
        g = f // kg
        for y in range(oh):
            for z in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, y * stride:y * stride + r,
                           z * stride:z * stride + s]
                out[:, f, y, z] = np.einsum("ncrs,crs->n", patch, w[f])
    return out


# (C, K, groups): two groups, a channel multiplier (C=groups, K=2C), depthwise
@pytest.mark.parametrize("c,k,groups,stride,pad", [(4, 6, 2, 1, 1), (3, 6, 3, 2, 0),
                                                   (6, 6, 3, 1, 1), (4, 4, 4, 1, 1)])
def test_grouped_conv2d_forward_and_gradient(rng, c, k, groups, stride, pad):
    X = tc.placeholder((2, c, 6, 5), name="X", dtype="float64")
    W = tc.placeholder((k, c // groups, 3, 3), name="W", dtype="float64")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, groups=groups)
    x, w = rng.standard_normal((2, c, 6, 5)), rng.standard_normal((k, c // groups, 3, 3))
    np.testing.assert_allclose(tc.evaluate(Y, {X: x, W: w})[0],
                               grouped_conv_ref(x, w, groups, stride, pad), rtol=1e-10,
                               atol=1e-12)
    head = rng.standard_normal(tuple(int(s) for s in Y.shape))
    for optimize in (False, True):
        check_gradient(Y, [X, W], {X: x, W: w}, head=head, optimize=optimize)


def test_grouped_conv2d_builds(rng):
    X = tc.placeholder((1, 4, 7, 7), name="X")
    W = tc.placeholder((6, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1, groups=2)
    dX, dW = tc.gradient(Y, [X, W])
    x = rng.standard_normal((1, 4, 7, 7)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    got = tc.build([Y, dX, dW], [X, W])(x, w)
    want = tc.evaluate([Y, dX, dW], {X: x, W: w})
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups,k,cg,message", [
    (2, 5, 2, "not divisible by groups=2"),
    (2, 4, 3, "4 channels .* groups=2 times W's 3 channels per group"),
    (0, 4, 4, "groups must be a positive int"),
])
def test_grouped_conv2d_errors_name_the_mismatch(groups, k, cg, message):
    X = tc.placeholder((1, 4, 6, 6), name="X")
    W = tc.placeholder((k, cg, 3, 3), name="W")
    with pytest.raises(tc.TecompError, match=message):
        tc.ops.conv2d(X, W, groups=groups)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_nd_indices_matches_numpy(rng, axis):
    E = tc.placeholder((5, 4, 3), name="E", dtype="float64")
    idx = tc.placeholder((2, 3), name="idx", dtype="int64")
    out = tc.ops.take(E, idx, axis=axis)
    e = rng.standard_normal((5, 4, 3))
    ix = rng.integers(0, e.shape[axis], size=(2, 3))
    ref = np.take(e, ix, axis=axis)
    assert out.shape == ref.shape
    np.testing.assert_array_equal(tc.evaluate(out, {E: e, idx: ix})[0], ref)
    head = rng.standard_normal(ref.shape)
    for optimize in (False, True):
        check_gradient(out, [E], {E: e, idx: ix}, head=head, optimize=optimize)


def test_take_nd_builds_and_scalar_indices(rng):
    E = tc.placeholder((10, 4), name="E")
    idx = tc.placeholder((3, 2), name="idx", dtype="int32")
    out = tc.ops.take(E, idx)
    (dE,) = tc.gradient(out, [E])
    e = rng.standard_normal((10, 4)).astype(np.float32)
    ix = np.array([[1, 1], [9, 0], [1, 3]], dtype=np.int32)
    got_out, got_dE = tc.build([out, dE], [E, idx])(e, ix)
    np.testing.assert_array_equal(got_out, np.take(e, ix, axis=0))
    np.testing.assert_allclose(got_dE, np.bincount(ix.ravel(), minlength=10)[:, None]
                               * np.ones((1, 4)), rtol=1e-6)
    one = tc.placeholder((), name="one", dtype="int64")
    np.testing.assert_array_equal(tc.evaluate(tc.ops.take(E, one), {E: e, one: np.int64(7)})[0],
                                  e[7])
