"""Small operator definitions for the autodiff tests (written here, independent of tc.ops)."""

from __future__ import annotations

import tecomp as tc


def pad2d(X: tc.Tensor, p: int) -> tc.Tensor:
    n, c, h, w = X.shape
    return tc.compute(
        (n, c, h + 2 * p, w + 2 * p),
        lambda b, ch, y, x: tc.if_then_else(
            tc.all(y >= p, y < h + p, x >= p, x < w + p), X[b, ch, y - p, x - p], 0.0),
        name="Xpad")


def out_extent(size: int, k: int, stride: int, dilation: int) -> int:
    return (size - dilation * (k - 1) - 1) // stride + 1


def conv2d(X: tc.Tensor, W: tc.Tensor, stride: int = 1, dilation: int = 1,
           padding: int = 0) -> tc.Tensor:
    """NCHW x KCRS cross-correlation."""
    if padding:
        X = pad2d(X, padding)
    n, c, h, w = (int(s.value) for s in X.shape)
    k, _, r, s = (int(d.value) for d in W.shape)
    oh, ow = out_extent(h, r, stride, dilation), out_extent(w, s, stride, dilation)
    rc, rr, rs = tc.reduce_axis(c, "rc"), tc.reduce_axis(r, "rr"), tc.reduce_axis(s, "rs")
    return tc.compute(
        (n, k, oh, ow),
        lambda b, o, y, x: tc.sum(
            X[b, rc, y * stride + rr * dilation, x * stride + rs * dilation] * W[o, rc, rr, rs],
            axis=[rc, rr, rs]),
        name="conv")


def depthwise(X: tc.Tensor, W: tc.Tensor, stride: int = 1, dilation: int = 1) -> tc.Tensor:
    n, c, h, w = (int(s.value) for s in X.shape)
    _, r, s = (int(d.value) for d in W.shape)
    oh, ow = out_extent(h, r, stride, dilation), out_extent(w, s, stride, dilation)
    rr, rs = tc.reduce_axis(r, "rr"), tc.reduce_axis(s, "rs")
    return tc.compute(
        (n, c, oh, ow),
        lambda b, ch, y, x: tc.sum(
            X[b, ch, y * stride + rr * dilation, x * stride + rs * dilation] * W[ch, rr, rs],
            axis=[rr, rs]),
        name="dwconv")


def pool(X: tc.Tensor, k: int, stride: int, dilation: int, kind: str) -> tc.Tensor:
    n, c, h, w = (int(s.value) for s in X.shape)
    oh, ow = out_extent(h, k, stride, dilation), out_extent(w, k, stride, dilation)
    rr, rs = tc.reduce_axis(k, "rr"), tc.reduce_axis(k, "rs")

    def window(b, ch, y, x):
        return X[b, ch, y * stride + rr * dilation, x * stride + rs * dilation]

    if kind == "max":
        return tc.compute((n, c, oh, ow), lambda b, ch, y, x: tc.max(
            window(b, ch, y, x), axis=[rr, rs]), name="maxpool")
    return tc.compute((n, c, oh, ow), lambda b, ch, y, x: tc.sum(
        window(b, ch, y, x), axis=[rr, rs]) / float(k * k), name="avgpool")


def softmax_stages(X: tc.Tensor, log: bool = False) -> tc.Tensor:
    """Softmax (or log-softmax) over the last axis, in four stages with max subtraction."""
    n, m = X.shape
    k1, k2 = tc.reduce_axis(m, "k1"), tc.reduce_axis(m, "k2")
    M = tc.compute((n,), lambda i: tc.max(X[i, k1], axis=k1), name="rowmax")
    Ex = tc.compute((n, m), lambda i, c: tc.exp(X[i, c] - M[i]), name="shifted_exp")
    S = tc.compute((n,), lambda i: tc.sum(Ex[i, k2], axis=k2), name="rowsum")
    if log:
        return tc.compute((n, m), lambda i, c: X[i, c] - M[i] - tc.log(S[i]), name="logsm")
    return tc.compute((n, m), lambda i, c: Ex[i, c] / S[i], name="softmax")


def softmax_single(X: tc.Tensor, tag: str | None = "softmax") -> tc.Tensor:
    """Softmax over the last axis as ONE stage (nested reductions), tagged for overrides."""
    n, m = X.shape
    k, q = tc.reduce_axis(m, "k"), tc.reduce_axis(m, "q")
    return tc.compute(
        (n, m),
        lambda i, c: tc.exp(X[i, c] - tc.max(X[i, q], axis=q))
        / tc.sum(tc.exp(X[i, k] - tc.max(X[i, q], axis=q)), axis=k),
        name="sm", tag=tag)
