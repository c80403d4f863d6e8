"""Small tensor programs for the lowering tests: each returns (outputs, inputs, arrays, scalars).

Sizes are small so the plain-Python loop interpreter runs them in milliseconds.
"""

from __future__ import annotations

import numpy as np

import tecomp as tc


def matmul(rng, n=3, k=4, m=5):
    N = tc.var("n")
    A = tc.placeholder((N, k), name="A")
    B = tc.placeholder((k, m), name="B")
    r = tc.reduce_axis(k, name="k")
    C = tc.compute((N, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [C], [A, B], [rng.standard_normal((n, k)), rng.standard_normal((k, m))], {}


def conv2d(rng, stride=2, dilation=2, pad=2):
    """NCHW convolution; padding is its own stage (if_then_else around the read)."""
    n, c, h, w, f, kh = 1, 2, 7, 6, 3, 3
    X = tc.placeholder((n, c, h, w), name="X")
    W = tc.placeholder((f, c, kh, kh), name="W")
    Xp = tc.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda b, ch, y, x: tc.if_then_else(
            tc.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
            X[b, ch, y - pad, x - pad], 0.0),
        name="Xp")
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    rc = tc.reduce_axis(c, name="rc")
    ry = tc.reduce_axis(kh, name="ry")
    rx = tc.reduce_axis(kh, name="rx")
    Y = tc.compute(
        (n, f, oh, ow),
        lambda b, o, y, x: tc.sum(
            Xp[b, rc, y * stride + ry * dilation, x * stride + rx * dilation] * W[o, rc, ry, rx],
            axis=[rc, ry, rx]),
        name="Y")
    return [Y], [X, W], [rng.standard_normal((n, c, h, w)),
                         rng.standard_normal((f, c, kh, kh))], {}


def pooling(rng):
    """Max pooling 3x3 stride 1 with -inf padding 1, and average pooling 2x2 stride 2."""
    c, h, w = 2, 6, 6
    X = tc.placeholder((c, h, w), name="X")
    Xp = tc.compute((c, h + 2, w + 2), lambda ch, y, x: tc.if_then_else(
        tc.all(y >= 1, y < h + 1, x >= 1, x < w + 1), X[ch, y - 1, x - 1], float("-inf")),
        name="Xp")
    ry, rx = tc.reduce_axis(3, name="ry"), tc.reduce_axis(3, name="rx")
    Mx = tc.compute((c, h, w), lambda ch, y, x: tc.max(Xp[ch, y + ry, x + rx], axis=[ry, rx]),
                    name="MaxPool")
    sy, sx = tc.reduce_axis(2, name="sy"), tc.reduce_axis(2, name="sx")
    Av = tc.compute((c, h // 2, w // 2),
                    lambda ch, y, x: tc.sum(X[ch, 2 * y + sy, 2 * x + sx], axis=[sy, sx]) / 4.0,
                    name="AvgPool")
    return [Mx, Av], [X], [rng.standard_normal((c, h, w))], {}


def softmax(rng, n=3, m=5):
    N, M = tc.var("n"), tc.var("m")
    X = tc.placeholder((N, M), name="X")
    k = tc.reduce_axis(M, name="k")
    mx = tc.compute((N,), lambda i: tc.max(X[i, k], axis=k), name="mx")
    e = tc.compute((N, M), lambda i, j: tc.exp(X[i, j] - mx[i]), name="e")
    k2 = tc.reduce_axis(M, name="k2")
    s = tc.compute((N,), lambda i: tc.sum(e[i, k2], axis=k2), name="s")
    y = tc.compute((N, M), lambda i, j: e[i, j] / s[i], name="softmax")
    return [y], [X], [rng.standard_normal((n, m))], {}


def layer_norm(rng, n=3, m=6):
    X = tc.placeholder((n, m), name="X")
    g = tc.placeholder((m,), name="gamma")
    b = tc.placeholder((m,), name="beta")
    k = tc.reduce_axis(m, name="k")
    mean = tc.compute((n,), lambda i: tc.sum(X[i, k], axis=k) / float(m), name="mean")
    xc = tc.compute((n, m), lambda i, j: X[i, j] - mean[i], name="xc")
    k2 = tc.reduce_axis(m, name="k2")
    var = tc.compute((n,), lambda i: tc.sum(xc[i, k2] * xc[i, k2], axis=k2) / float(m),
                     name="var")
    y = tc.compute((n, m), lambda i, j: xc[i, j] / tc.sqrt(var[i] + 1e-5) * g[j] + b[j],
                   name="ln")
    return [y], [X, g, b], [rng.standard_normal((n, m)), rng.standard_normal(m),
                            rng.standard_normal(m)], {}


def gather(rng):
    T = tc.placeholder((6, 4), name="T")
    idx = tc.placeholder((5,), name="idx", dtype="int64")
    G = tc.compute((5, 4), lambda i, j: T[idx[i], j] * 2.0, name="G")
    return [G], [T, idx], [rng.standard_normal((6, 4)), rng.integers(0, 6, 5)], {}


def flatten(rng):
    X = tc.placeholder((3, 4), name="X")
    F = tc.compute((12,), lambda i: X[i // 4, i % 4], name="F")
    U = tc.compute((4, 3), lambda a, b: F[a * 3 + b] + 1.0, name="U")
    return [U], [X], [rng.standard_normal((3, 4))], {}


def cumsum(rng, n=6):
    N = tc.var("n")
    X = tc.placeholder((N,), name="X")
    k = tc.reduce_axis(N, name="k")
    C = tc.compute((N,), lambda i: tc.sum(X[k], axis=k, where=k <= i), name="C")
    return [C], [X], [rng.standard_normal(n)], {}


def scalar_loss(rng):
    X = tc.placeholder((3, 4), name="X")
    r, s = tc.reduce_axis(3, name="r"), tc.reduce_axis(4, name="s")
    L = tc.compute((), lambda: tc.sum(X[r, s] * X[r, s], axis=[r, s]), name="loss")
    return [L], [X], [rng.standard_normal((3, 4))], {}


def int_outputs(rng):
    I = tc.placeholder((4, 5), name="I", dtype="int32")
    k = tc.reduce_axis(5, name="k")
    S = tc.compute((4,), lambda i: tc.sum(I[i, k], axis=k), name="S")
    J = tc.compute((4,), lambda i: tc.cast(I[i, 0], "int64"), name="J")
    k2 = tc.reduce_axis((0, 5), name="k2")
    M = tc.compute((4,), lambda i: tc.max(J[i] * tc.cast(I[i, k2], "int64"), axis=k2),
                   name="M")
    k3 = tc.reduce_axis((0, 5), name="k3")
    E = tc.compute((4,), lambda i: tc.min(tc.cast(I[i, k3], "int64"), axis=k3, where=k3 < i),
                   name="E")
    return [S, M, E], [I], [rng.integers(-9, 9, (4, 5)).astype(np.int32)], {}


def nested(rng):
    A = tc.placeholder((3, 4, 5), name="A")
    B = tc.placeholder((4,), name="B")
    j = tc.reduce_axis(4, name="j")
    k = tc.reduce_axis(5, name="k")
    Y = tc.compute((3,), lambda i: tc.sum(tc.max(A[i, j, k], axis=k) * B[j], axis=j), name="Y")
    return [Y], [A, B], [rng.standard_normal((3, 4, 5)), rng.standard_normal(4)], {}


def triangular(rng, n=6):
    N = tc.var("n")
    X = tc.placeholder((N,), name="X")

    def body(i):
        k = tc.reduce_axis((0, i + 1), name="k")
        return tc.sum(X[k] * X[i - k], axis=k)

    T = tc.compute((N,), body, name="T")
    return [T], [X], [rng.standard_normal(n)], {}


def window(rng, n=7):
    """Reduction bounds with min/max/floordiv of the data axis, a second axis bounded by the
    first, and an empty range for some points (max gives -inf there)."""
    N = tc.var("n")
    X = tc.placeholder((N,), name="X")

    def body(i):
        k = tc.reduce_axis((tc.maximum(0, i - 2), tc.minimum(N, i // 2 + 2)), name="k")
        q = tc.reduce_axis((k, tc.minimum(N, k + 2)), name="q")
        return tc.max(X[k] + X[q], axis=[k, q])

    W = tc.compute((N,), body, name="W")
    return [W], [X], [rng.standard_normal(n)], {}


CASES = {
    "matmul": matmul, "conv2d": conv2d, "pooling": pooling, "softmax": softmax,
    "layer_norm": layer_norm, "gather": gather, "flatten": flatten, "cumsum": cumsum,
    "scalar_loss": scalar_loss, "int_outputs": int_outputs, "nested": nested,
    "triangular": triangular, "window": window,
}
