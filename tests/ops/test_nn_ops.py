"""tc.ops against NumPy references (through the reference evaluator)."""

import numpy as np
import pytest

import tecomp as tc


def conv2d_ref(x, w, stride, pad, dil):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (s - 1) - 1) // stride + 1
    out = np.zeros((n, k, oh, ow))
    for y in range(oh):
        for z in range(ow):
            patch = xp[:, :, y * stride: y * stride + dil * (r - 1) + 1: dil,
                       z * stride: z * stride + dil * (s - 1) + 1: dil]
            out[:, :, y, z] = np.einsum("ncrs,kcrs->nk", patch, w)
    return out


@pytest.mark.parametrize("stride,pad,dil", [(1, 1, 1), (2, 0, 1), (1, 2, 2), (3, 1, 2)])
def test_conv2d(rng, stride, pad, dil):
    X = tc.placeholder((2, 3, 9, 8), name="X", dtype="float64")
    W = tc.placeholder((4, 3, 3, 3), name="W", dtype="float64")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dil)
    x, w = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 3))
    np.testing.assert_allclose(tc.evaluate(Y, {X: x, W: w})[0],
                               conv2d_ref(x, w, stride, pad, dil), rtol=1e-10, atol=1e-12)


def test_depthwise_conv2d(rng):
    X = tc.placeholder((1, 4, 6, 6), name="X", dtype="float64")
    W = tc.placeholder((4, 1, 3, 3), name="W", dtype="float64")
    Y = tc.ops.conv2d(X, W, padding=1, groups=4)
    x, w = rng.standard_normal((1, 4, 6, 6)), rng.standard_normal((4, 1, 3, 3))
    ref = np.concatenate([conv2d_ref(x[:, c:c + 1], w[c:c + 1], 1, 1, 1) for c in range(4)], 1)
    np.testing.assert_allclose(tc.evaluate(Y, {X: x, W: w})[0], ref, rtol=1e-10)


def test_pooling(rng):
    X = tc.placeholder((1, 2, 6, 6), name="X", dtype="float64")
    x = rng.standard_normal((1, 2, 6, 6))
    mp, ap = tc.evaluate([tc.ops.max_pool2d(X, 2), tc.ops.avg_pool2d(X, 2)], {X: x})
    blocks = x.reshape(1, 2, 3, 2, 3, 2)
    np.testing.assert_array_equal(mp, blocks.max(axis=(3, 5)))
    np.testing.assert_allclose(ap, blocks.mean(axis=(3, 5)))


def test_softmax_log_softmax_layer_norm_dense(rng):
    X = tc.placeholder((4, 7), name="X", dtype="float64")
    G = tc.placeholder((7,), name="G", dtype="float64")
    Bt = tc.placeholder((7,), name="Bt", dtype="float64")
    W = tc.placeholder((3, 7), name="W", dtype="float64")
    b = tc.placeholder((3,), name="b", dtype="float64")
    outs = [tc.ops.softmax(X), tc.ops.log_softmax(X), tc.ops.layer_norm(X, G, Bt),
            tc.ops.dense(X, W, b)]
    x, g, bt = rng.standard_normal((4, 7)), rng.standard_normal(7), rng.standard_normal(7)
    w, bb = rng.standard_normal((3, 7)), rng.standard_normal(3)
    sm, lsm, ln, dn = tc.evaluate(outs, {X: x, G: g, Bt: bt, W: w, b: bb})
    e = np.exp(x - x.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(sm, ref, rtol=1e-12)
    np.testing.assert_allclose(lsm, np.log(ref), rtol=1e-12)
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    np.testing.assert_allclose(ln, (x - mu) / np.sqrt(var + 1e-5) * g + bt, rtol=1e-10)
    np.testing.assert_allclose(dn, x @ w.T + bb, rtol=1e-12)


@pytest.mark.parametrize("pattern", [(1, 3, 5, 1), (2, 3, 4, 5), (3, 1, 2, 4), (4, 2, 2, 1)])
def test_kron_sparse_matmul(rng, pattern):
    from tecomp.ops.butterfly_factors import kron_sparse_dense

    a, b, c, d = pattern
    T = tc.placeholder(pattern, name="T", dtype="float64")
    X = tc.placeholder((a * c * d, 3), name="X", dtype="float64")
    Y = tc.ops.kron_sparse_matmul(T, X, pattern)
    t, x = rng.standard_normal(pattern), rng.standard_normal((a * c * d, 3))
    np.testing.assert_allclose(tc.evaluate(Y, {T: t, X: x})[0], kron_sparse_dense(t) @ x,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["dct2", "dst2", "dht"])
def test_dct_matches_scipy(rng, kind):
    import scipy.fft as F

    X = tc.placeholder((64, 3), name="X", dtype="float64")
    x = rng.standard_normal((64, 3))
    y = tc.evaluate(tc.ops.dct(X, kind), {X: x})[0]
    if kind == "dct2":
        ref = F.dct(x, type=2, norm="ortho", axis=0)
    elif kind == "dst2":
        ref = F.dst(x, type=2, norm="ortho", axis=0)
    else:
        f = np.fft.fft(x, axis=0)
        ref = (f.real - f.imag) / np.sqrt(64)
    assert np.abs(y - ref).max() < 1e-12


def test_op_errors():
    X = tc.placeholder((2, 3), name="X")
    with pytest.raises(tc.TecompError, match="must be 4-D"):
        tc.ops.conv2d(X, X)
    with pytest.raises(tc.TecompError, match="pattern"):
        tc.ops.kron_sparse_matmul(tc.placeholder((1, 2, 2, 1), name="T"), X, (1, 2, 3, 1))
    with pytest.raises(tc.TecompError, match="power of two|power"):
        tc.ops.dct(tc.placeholder((6, 2), name="Z"))


def test_dense_shape_mismatch_is_an_error():
    X = tc.placeholder((4, 8), name="X")
    with pytest.raises(tc.TecompError, match="'X' axis 1|X axis 1"):
        tc.ops.dense(X, tc.placeholder((8, 3), name="W"))
    with pytest.raises(tc.TecompError, match="bias b axis 0"):
        tc.ops.dense(X, tc.placeholder((3, 8), name="W"), tc.placeholder((4,), name="b"))


# ------------------------------------------------------------- softmax's cancelling maximum
def _stage_names(ts):
    from tecomp.functor import topo_order

    return {t.name for t in topo_order(list(ts))}


def _fd(f, x, v, h=1e-5):
    return (f(x + h * v) - f(x - h * v)) / (2 * h)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_derivatives_treat_the_max_shift_as_a_constant(rng, op):
    """The row maximum's derivative cancels in (log-)softmax: reverse mode, forward mode and
    DOF leave it out (no argmax stage, no reduction of a sum that is zero) and still give
    the derivatives of the whole op, checked against central differences in float64."""
    X = tc.placeholder((3, 6), name="X", dtype="float64")
    Y = getattr(tc.ops, op)(X)
    w = rng.standard_normal((3, 6))
    W = tc.placeholder((3, 6), name="W", dtype="float64")
    i, j = tc.reduce_axis(3, name="i"), tc.reduce_axis(6, name="j")
    L = tc.compute((), lambda: tc.sum(tc.sin(Y[i, j]) * W[i, j], axis=[i, j]), name="L")
    x = rng.standard_normal((3, 6)) * 3.0
    v = rng.standard_normal((3, 6))

    def f(xx):
        return float(tc.evaluate([L], {X: xx, W: w})[0])

    (g,) = tc.gradient(L, [X])
    assert not any("argmax" in n for n in _stage_names([g]))
    (gx,) = tc.evaluate([g], {X: x, W: w})
    np.testing.assert_allclose(np.sum(gx * v), _fd(f, x, v), rtol=1e-7)

    V = tc.placeholder((3, 6), name="V", dtype="float64")
    dL = tc.jvp(L, [X], [V])
    assert not any("argmax" in n for n in _stage_names([dL]))
    np.testing.assert_allclose(float(tc.evaluate([dL], {X: x, W: w, V: v})[0]),
                               _fd(f, x, v), rtol=1e-7)

    lap = tc.laplacian(Y, X)                     # rows are samples: d2 Y / dX[r, :]^2
    (got,) = tc.evaluate([lap], {X: x})
    (y0,) = tc.evaluate([Y], {X: x})
    h = 1e-4
    want = np.zeros_like(y0)
    for c in range(6):
        e = np.zeros((3, 6))
        e[:, c] = h
        yp, = tc.evaluate([Y], {X: x + e})
        ym, = tc.evaluate([Y], {X: x - e})
        want += (yp - 2 * y0 + ym) / h**2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_max_stage_differentiated_as_the_output_keeps_its_derivative(rng):
    """The constant treatment applies to readers of the maximum, not to the maximum itself."""
    from tecomp.functor import topo_order

    X = tc.placeholder((2, 5), name="X", dtype="float64")
    mx = next(t for t in topo_order([tc.ops.softmax(X)]) if t.name == "softmax_max")
    (g,) = tc.gradient(mx, [X])
    x = rng.standard_normal((2, 5))
    (gx,) = tc.evaluate([g], {X: x})
    want = np.zeros((2, 5))
    want[np.arange(2), x.argmax(1)] = 1.0
    np.testing.assert_array_equal(gx, want)
