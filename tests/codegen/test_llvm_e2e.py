"""tc.build end to end on the LLVM target: each program equals NumPy and ``tc.evaluate``."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp.errors import TecompError


def run(outputs, inputs, arrays, rtol=1e-5, atol=1e-6):
    """Build, call, compare with the reference evaluator; return the kernel's results."""
    kernel = tc.build(outputs, inputs)
    got = kernel(*arrays)
    outs = [outputs] if isinstance(outputs, tc.Tensor) else outputs
    want = tc.evaluate(outs, dict(zip(inputs, arrays)))
    gots = [got] if isinstance(outputs, tc.Tensor) else list(got)
    assert len(gots) == len(want)
    for g, w in zip(gots, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def test_matmul_symbolic_n(rng):
    n = tc.var("n")
    A = tc.placeholder((n, 24), name="A")
    B = tc.placeholder((24, 16), name="B")
    k = tc.reduce_axis(24, name="k")
    C = tc.compute((n, 16), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    kernel = tc.build(C, [A, B])
    for rows in (1, 7, 33):
        a = rng.standard_normal((rows, 24)).astype(np.float32)
        b = rng.standard_normal((24, 16)).astype(np.float32)
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)
    run(C, [A, B], [a, b])
    assert kernel.ir.params == (n,) and "define" in kernel.source
    assert kernel.cost.flops is not None


def _conv_ref(x, w, stride, pad, dil):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (s - 1) - 1) // stride + 1
    out = np.zeros((n, k, oh, ow), np.float64)
    for ry in range(r):
        for rx in range(s):
            patch = xp[:, :, ry * dil: ry * dil + stride * (oh - 1) + 1: stride,
                       rx * dil: rx * dil + stride * (ow - 1) + 1: stride]
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, ry, rx])
    return out


@pytest.mark.parametrize("stride,pad,dil", [(1, 1, 1), (2, 1, 1), (1, 2, 2), (2, 0, 2)])
def test_conv2d_nchw(rng, stride, pad, dil):
    X = tc.placeholder((2, 3, 9, 8), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dil)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    got = run(Y, [X, W], [x, w], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, _conv_ref(x, w, stride, pad, dil), rtol=1e-4, atol=1e-4)


def test_conv2d_handwritten_padding_symbolic_batch(rng):
    b = tc.var("b")
    X = tc.placeholder((b, 2, 6, 6), name="X")
    W = tc.placeholder((3, 2, 3, 3), name="W")
    rc, ry, rx = (tc.reduce_axis(2, "rc"), tc.reduce_axis(3, "ry"), tc.reduce_axis(3, "rx"))

    def body(n, f, y, x):
        iy, ix = y + ry - 1, x + rx - 1
        inside = (iy >= 0) & (iy < 6) & (ix >= 0) & (ix < 6)
        return tc.sum(tc.if_then_else(inside, X[n, rc, iy, ix], 0.0) * W[f, rc, ry, rx],
                      axis=[rc, ry, rx])

    Y = tc.compute((b, 3, 6, 6), body, name="Y")
    x = rng.standard_normal((3, 2, 6, 6)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    got = run(Y, [X, W], [x, w], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, _conv_ref(x, w, 1, 1, 1), rtol=1e-4, atol=1e-4)


def test_pooling(rng):
    X = tc.placeholder((2, 3, 8, 7), name="X")
    mx = tc.ops.max_pool2d(X, 3, stride=2, padding=1)
    av = tc.ops.avg_pool2d(X, 2)
    x = rng.standard_normal((2, 3, 8, 7)).astype(np.float32)
    got_max, got_avg = run([mx, av], [X], [x])
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.max([xp[:, :, dy:dy + 7:2, dx:dx + 7:2] for dy in range(3) for dx in range(3)],
                  axis=0)
    np.testing.assert_array_equal(got_max, want[:, :, :4, :4])
    np.testing.assert_allclose(got_avg, x[:, :, :8, :6].reshape(2, 3, 4, 2, 3, 2)
                               .mean(axis=(3, 5)), rtol=1e-5)


def test_softmax_and_layer_norm(rng):
    n = tc.var("n")
    X = tc.placeholder((n, 10), name="X")
    G = tc.placeholder((10,), name="G")
    Bb = tc.placeholder((10,), name="Bb")
    sm = tc.ops.softmax(X)
    ln = tc.ops.layer_norm(X, G, Bb, eps=1e-5)
    x = rng.standard_normal((5, 10)).astype(np.float32) * 3
    g = rng.standard_normal(10).astype(np.float32)
    bb = rng.standard_normal(10).astype(np.float32)
    got_sm, got_ln = run([sm, ln], [X, G, Bb], [x, g, bb])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got_sm, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    mu, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    np.testing.assert_allclose(got_ln, (x - mu) / np.sqrt(var + 1e-5) * g + bb, rtol=1e-4,
                               atol=1e-5)


def test_gather_with_int64_indices(rng):
    v, d, n = tc.var("v"), tc.var("d"), tc.var("n")
    Emb = tc.placeholder((v, d), name="Emb")
    Idx = tc.placeholder((n,), name="Idx", dtype="int64")
    out = tc.ops.take(Emb, Idx)
    own = tc.compute((n, d), lambda i, j: Emb[Idx[i], j] * 2.0, name="own")
    e = rng.standard_normal((11, 5)).astype(np.float32)
    idx = rng.integers(0, 11, 7).astype(np.int64)
    got, got2 = run([out, own], [Emb, Idx], [e, idx])
    np.testing.assert_array_equal(got, e[idx])
    np.testing.assert_array_equal(got2, e[idx] * 2)


def test_flatten_via_floordiv_mod(rng):
    X = tc.placeholder((4, 6), name="X")
    F = tc.compute((24,), lambda i: X[i // 6, i % 6], name="F")
    U = tc.compute((6, 4), lambda i, j: F[i * 4 + j] + 1.0, name="U")
    x = rng.standard_normal((4, 6)).astype(np.float32)
    got_f, got_u = run([F, U], [X], [x])
    np.testing.assert_array_equal(got_f, x.reshape(-1))
    np.testing.assert_array_equal(got_u, x.reshape(6, 4) + 1)


def test_cumsum_via_where(rng):
    n = tc.var("n")
    X = tc.placeholder((n,), name="X", dtype="float64")
    k = tc.reduce_axis(n, name="k")
    S = tc.compute((n,), lambda i: tc.sum(X[k], axis=k, where=k <= i), name="S")
    x = rng.standard_normal(50)
    got = run(S, [X], [x], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, np.cumsum(x), rtol=1e-12, atol=1e-12)


def test_scalar_output(rng):
    n = tc.var("n")
    X = tc.placeholder((n, 3), name="X")
    i_, j_ = tc.reduce_axis(n, "i"), tc.reduce_axis(3, "j")
    loss = tc.compute((), lambda: tc.sum(X[i_, j_] * X[i_, j_], axis=[i_, j_]), name="loss")
    x = rng.standard_normal((9, 3)).astype(np.float32)
    got = run(loss, [X], [x])
    assert got.shape == () and got.dtype == np.float32
    np.testing.assert_allclose(got, np.sum(x * x), rtol=1e-5)


def test_float16_and_int_outputs(rng):
    n = tc.var("n")
    H = tc.placeholder((n,), name="H", dtype="float16")
    I32 = tc.placeholder((n,), name="I", dtype="int32")
    half = tc.compute((n,), lambda i: H[i] * 2.0 + tc.cast(I32[i], "float16"), name="half")
    ints = tc.compute((n,), lambda i: I32[i] * 3 // 2 - I32[i] % 4, name="ints")
    k = tc.reduce_axis(n, "k")
    total = tc.compute((), lambda: tc.sum(tc.cast(I32[k], "int64"), axis=k), name="total")
    pos = tc.compute((n,), lambda i: H[i] > 0.0, name="pos")
    h = rng.standard_normal(13).astype(np.float16)
    iv = rng.integers(-50, 50, 13).astype(np.int32)
    got_h, got_i, got_t, got_p = run([half, ints, total, pos], [H, I32], [h, iv], rtol=0,
                                     atol=0)
    np.testing.assert_array_equal(got_h, h * np.float16(2) + iv.astype(np.float16))
    np.testing.assert_array_equal(got_i, iv * 3 // 2 - iv % 4)
    assert got_t == iv.sum() and got_t.dtype == np.int64
    np.testing.assert_array_equal(got_p, h > 0)


def test_scalar_var_input(rng):
    n, s = tc.var("n"), tc.var("s")
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: X[i] * tc.cast(s, "float32") + tc.cast(i % s, "float32"),
                   name="Y")
    kernel = tc.build(Y, [X, s])
    x = rng.standard_normal(10).astype(np.float32)
    np.testing.assert_allclose(kernel(x, 3), x * 3 + np.arange(10) % 3, rtol=1e-6)
    np.testing.assert_allclose(kernel(x, 3), tc.evaluate([Y], {X: x, s: 3})[0], rtol=1e-6)


def test_gradient_program(rng):
    n = tc.var("n")
    A = tc.placeholder((n, 8), name="A")
    B = tc.placeholder((8, 5), name="B")
    k = tc.reduce_axis(8, name="k")
    C = tc.compute((n, 5), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    dA, dB = tc.gradient(C, [A, B])
    a = rng.standard_normal((6, 8)).astype(np.float32)
    b = rng.standard_normal((8, 5)).astype(np.float32)
    c, da, db = run([C, dA, dB], [A, B], [a, b], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(da, np.ones((6, 5)) @ b.T, rtol=1e-5)
    np.testing.assert_allclose(db, a.T @ np.ones((6, 5)), rtol=1e-5, atol=1e-5)


def test_targets():
    X = tc.placeholder((3,), name="X")
    Y = tc.compute((3,), lambda i: X[i] + 1.0, name="Y")
    cuda = tc.build(Y, [X], target="cuda")  # the CUDA backend's own tests run it
    assert cuda.target == "cuda" and '__global__' in cuda.source
    with pytest.raises(TecompError, match=r"unknown target 'metal'; valid targets are 'llvm', "
                                          r"'cuda'"):
        tc.build(Y, [X], target="metal")


def test_build_is_cached_and_named():
    X = tc.placeholder((3,), name="X")
    Y = tc.compute((3,), lambda i: X[i] * 5.0, name="Y")
    k1 = tc.build(Y, [X], name="times5")
    k2 = tc.build(Y, [X], name="times5")
    assert k1.name == "times5" and k2._entry is k1._entry
    assert k1(np.ones(3, np.float32)).tolist() == [5.0, 5.0, 5.0]


def test_constant_tensors_are_hidden_inputs(rng):
    n = tc.var("n")
    X = tc.placeholder((n, 3), name="X")
    data1 = rng.standard_normal((3, 2)).astype(np.float32)
    data2 = rng.standard_normal((3, 2)).astype(np.float32)
    outs = []
    for data in (data1, data2):
        M = tc.constant(data, name="M")
        r = tc.reduce_axis(3, name="r")
        Y = tc.compute((n, 2), lambda i, j, M=M, r=r: tc.sum(X[i, r] * M[r, j], axis=r),
                       name="Y")
        kernel = tc.build(Y, [X])
        assert len(kernel.inputs) == 1
        x = rng.standard_normal((4, 3)).astype(np.float32)
        np.testing.assert_allclose(kernel(x), x @ data, rtol=1e-5, atol=1e-6)
        outs.append(kernel)
    assert outs[0]._entry is outs[1]._entry  # same program, different data


def test_kernel_cost_is_tc_cost():
    n = tc.var("n")
    A = tc.placeholder((n, 6), name="A")
    k = tc.reduce_axis(6, name="k")
    S = tc.compute((n,), lambda i: tc.sum(A[i, k] * A[i, k], axis=k), name="S")
    kernel = tc.build(S, [A])
    want = tc.cost([S], [A])
    assert kernel.cost.flops == want.flops and kernel.cost.iterations == want.iterations
    assert kernel.cost.flops.subs({next(iter(kernel.cost.flops.free_symbols)): 10}) == 120
