"""Neural-network operators written in the DSL (like TVM's topi): each returns tensors.

Layouts follow PyTorch: images are NCHW, convolution weights KCRS, dense weights (out, in).
Padding is a separate element-wise stage (lowering inlines it into its consumer), so that the
gradient of a padded convolution flows through the padding the same way a user would write it.
"""

from __future__ import annotations

from typing import Sequence

from .. import dsl as tc
from ..errors import DeclarationError
from ..expr import Expr, as_expr
from ..tensor import CANCELLING_DERIVATIVE, Tensor


def _pair(v: int | Sequence[int], what: str) -> tuple[int, int]:
    if hasattr(v, "__index__"):  # an int, or a constant shape entry
        v = (v, v)  # type: ignore[assignment]
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise DeclarationError(f"{what} must be an int or a pair, got {v!r}")
    return v  # type: ignore[return-value]


def _out_extent(size: Expr, pad: int, kernel: int, stride: int, dil: int, who: str) -> Expr:
    ext = (as_expr(size) + 2 * pad - dil * (kernel - 1) - 1) // stride + 1
    if hasattr(ext, "value") and ext.value <= 0:
        raise DeclarationError(f"{who}: the output would be empty (extent {ext.value})")
    return ext


def pad2d(X: Tensor, padding: int | Sequence[int], value: float = 0.0,
          name: str | None = None) -> Tensor:
    """Zero-pad (or ``value``-pad) the last two axes of an NCHW tensor."""
    ph, pw = _pair(padding, "padding")
    if ph == 0 and pw == 0:
        return X
    n, c, h, w = X.shape
    return tc.compute(
        (n, c, h + 2 * ph, w + 2 * pw),
        lambda b, ch, y, x: tc.if_then_else(
            tc.all(y >= ph, y < h + ph, x >= pw, x < w + pw),
            X[b, ch, y - ph, x - pw], value),
        name=name or f"{X.name}_pad", tag="pad")


def conv2d(X: Tensor, W: Tensor, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1, name: str = "conv2d") -> Tensor:
    """2-D convolution (cross-correlation) of NCHW ``X`` with KCRS ``W``.

    ``out[b, f, y, x] = sum_{c, r, s} Xpad[b, g*C/groups + c, y*sh + r*dh, x*sw + s*dw]
    * W[f, c, r, s]`` with ``g = f // (K/groups)``: the channels split into ``groups``
    groups, ``W`` has shape ``(K, C/groups, R, S)``.  ``groups == C == K`` (``W`` of shape
    ``(K, 1, R, S)``) is a depthwise convolution.

    Example::

        >>> X = tc.placeholder((1, 4, 8, 8), name="X")
        >>> W = tc.placeholder((6, 2, 3, 3), name="W")
        >>> Y = tc.ops.conv2d(X, W, padding=1, groups=2)
        >>> Y.shape
        (1, 6, 8, 8)
        >>> dX, dW = tc.gradient(Y, [X, W])
    """
    if X.ndim != 4 or W.ndim != 4:
        raise DeclarationError(f"conv2d: X ({X.name}) and W ({W.name}) must be 4-D (NCHW, KCRS)")
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    n, c, h, w = X.shape
    k, cg, r, s = W.shape
    if not all(isinstance(v, Expr) and hasattr(v, "value") for v in (r, s)):
        raise DeclarationError(f"conv2d: the kernel size of {W.name} must be constant")
    r_, s_ = int(r.value), int(s.value)
    kg = 1 if groups == 1 else _check_groups(groups, c, k, cg, X, W, name)
    oh = _out_extent(h, ph, r_, sh, dh, f"conv2d {name}")
    ow = _out_extent(w, pw, s_, sw, dw, f"conv2d {name}")
    P = pad2d(X, (ph, pw))
    ry = tc.reduce_axis(r_, name="ry")
    rx = tc.reduce_axis(s_, name="rx")
    if groups == 1:
        rc = tc.reduce_axis(cg, name="rc")
        return tc.compute(
            (n, k, oh, ow),
            lambda b, f, y, x: tc.sum(
                P[b, rc, y * sh + ry * dh, x * sw + rx * dw] * W[f, rc, ry, rx],
                axis=[rc, ry, rx]),
            name=name, tag="conv2d")
    if cg == 1 and kg == 1:
        return tc.compute(
            (n, k, oh, ow),
            lambda b, f, y, x: tc.sum(
                P[b, f, y * sh + ry * dh, x * sw + rx * dw]
                * W[f, 0, ry, rx], axis=[ry, rx]),
            name=name, tag="depthwise_conv2d")
    rc = tc.reduce_axis(cg, name="rc")
    return tc.compute(
        (n, k, oh, ow),
        lambda b, f, y, x: tc.sum(
            P[b, (f // kg) * cg + rc, y * sh + ry * dh, x * sw + rx * dw] * W[f, rc, ry, rx],
            axis=[rc, ry, rx]),
        name=name, tag="grouped_conv2d")


def _check_groups(groups: int, c: Expr, k: Expr, cg: Expr, X: Tensor, W: Tensor,
                  name: str) -> int:
    """``K / groups`` (the output channels per group), after checking the channel counts."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise DeclarationError(f"conv2d {name}: groups must be a positive int, got {groups!r}")
    if not (hasattr(k, "value") and hasattr(cg, "value")):
        raise DeclarationError(
            f"conv2d {name}: with groups={groups} the output channels (axis 0) and input "
            f"channels per group (axis 1) of {W.name} must be constant")
    if int(k.value) % groups:
        raise DeclarationError(
            f"conv2d {name}: {W.name}'s {k.value} output channels (axis 0) are not divisible "
            f"by groups={groups}")
    if hasattr(c, "value") and int(c.value) != groups * int(cg.value):
        raise DeclarationError(
            f"conv2d {name}: {X.name} has {c.value} channels (axis 1) but groups={groups} "
            f"times {W.name}'s {cg.value} channels per group (axis 1) is "
            f"{groups * int(cg.value)}")
    return int(k.value) // groups


def _pool(X: Tensor, kernel, stride, padding, dilation, kind: str, name: str) -> Tensor:
    if X.ndim != 4:
        raise DeclarationError(f"{kind}_pool2d: {X.name} must be 4-D (NCHW)")
    kh, kw = _pair(kernel, "kernel")
    sh, sw = _pair(stride if stride is not None else kernel, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    n, c, h, w = X.shape
    oh = _out_extent(h, ph, kh, sh, dh, f"{kind}_pool2d {name}")
    ow = _out_extent(w, pw, kw, sw, dw, f"{kind}_pool2d {name}")
    pad_value = float("-inf") if kind == "max" else 0.0
    P = pad2d(X, (ph, pw), pad_value)
    ry = tc.reduce_axis(kh, name="ry")
    rx = tc.reduce_axis(kw, name="rx")
    if kind == "max":
        return tc.compute(
            (n, c, oh, ow),
            lambda b, ch, y, x: tc.max(P[b, ch, y * sh + ry * dh, x * sw + rx * dw],
                                       axis=[ry, rx]),
            name=name, tag="max_pool2d")
    return tc.compute(
        (n, c, oh, ow),
        lambda b, ch, y, x: tc.sum(P[b, ch, y * sh + ry * dh, x * sw + rx * dw],
                                   axis=[ry, rx]) * (1.0 / (kh * kw)),
        name=name, tag="avg_pool2d")


def max_pool2d(X: Tensor, kernel: int | Sequence[int], stride=None, padding=0, dilation=1,
               name: str = "max_pool2d") -> Tensor:
    """Max pooling over NCHW windows (padding counts as -inf)."""
    return _pool(X, kernel, stride, padding, dilation, "max", name)


def avg_pool2d(X: Tensor, kernel: int | Sequence[int], stride=None, padding=0, dilation=1,
               name: str = "avg_pool2d") -> Tensor:
    """Average pooling over NCHW windows (padding counts as zeros in the average)."""
    return _pool(X, kernel, stride, padding, dilation, "avg", name)


def _same_extent(a: Expr, b: Expr, what_a: str, what_b: str) -> None:
    """Raise when two extents certainly differ (constants that disagree, or different
    expressions in the same sizes); symbolic extents that may agree are checked at call time."""
    if a == b:
        return
    if hasattr(a, "value") and hasattr(b, "value"):
        raise DeclarationError(f"{what_a} is {a.value} but {what_b} is {b.value}")


def dense(X: Tensor, W: Tensor, bias: Tensor | None = None, name: str = "dense") -> Tensor:
    """``X @ W.T + bias`` with ``X`` (batch, in), ``W`` (out, in), ``bias`` (out,)."""
    if X.ndim != 2 or W.ndim != 2:
        raise DeclarationError(f"dense: {X.name} and {W.name} must be 2-D")
    _same_extent(X.shape[1], W.shape[1], f"dense {name}: {X.name} axis 1 (in features)",
                 f"{W.name} axis 1 (W is (out, in))")
    if bias is not None:
        if bias.ndim != 1:
            raise DeclarationError(f"dense {name}: bias {bias.name} must be 1-D")
        _same_extent(W.shape[0], bias.shape[0], f"dense {name}: {W.name} axis 0 (out features)",
                     f"bias {bias.name} axis 0")
    k = tc.reduce_axis(X.shape[1], name="k")
    if bias is None:
        return tc.compute((X.shape[0], W.shape[0]),
                          lambda i, j: tc.sum(X[i, k] * W[j, k], axis=k), name=name, tag="dense")
    return tc.compute((X.shape[0], W.shape[0]),
                      lambda i, j: tc.sum(X[i, k] * W[j, k], axis=k) + bias[j],
                      name=name, tag="dense")


def _last_axis_stages(X: Tensor, name: str) -> tuple[Tensor, Tensor, Tensor]:
    """Row maximum, shifted exponentials and their row sums along the last axis."""
    *lead, m = X.shape
    nd = X.ndim
    k = tc.reduce_axis(m, name="k")
    mx = tc.compute(tuple(lead), lambda *i: tc.max(X[(*i, k)], axis=k), name=f"{name}_max")
    mx.attrs[CANCELLING_DERIVATIVE] = True  # every reader below is invariant to the shift
    ex = tc.compute(X.shape, lambda *i: tc.exp(X[i] - mx[i[: nd - 1]]), name=f"{name}_exp")
    k2 = tc.reduce_axis(m, name="k")
    sm = tc.compute(tuple(lead), lambda *i: tc.sum(ex[(*i, k2)], axis=k2), name=f"{name}_sum")
    return mx, ex, sm


def softmax(X: Tensor, name: str = "softmax") -> Tensor:
    """Softmax along the last axis (max-shifted for stability)."""
    _, ex, sm = _last_axis_stages(X, name)
    nd = X.ndim
    return tc.compute(X.shape, lambda *i: ex[i] / sm[i[: nd - 1]], name=name, tag="softmax")


def log_softmax(X: Tensor, name: str = "log_softmax") -> Tensor:
    """``log(softmax(X))`` along the last axis, computed stably."""
    mx, _, sm = _last_axis_stages(X, name)
    nd = X.ndim
    return tc.compute(X.shape, lambda *i: X[i] - mx[i[: nd - 1]] - tc.log(sm[i[: nd - 1]]),
                      name=name, tag="log_softmax")


def layer_norm(X: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None,
               eps: float = 1e-5, name: str = "layer_norm") -> Tensor:
    """Normalise over the last axis: ``(x - mean) / sqrt(var + eps) * gamma + beta``."""
    *lead, m = X.shape
    nd = X.ndim
    inv_m = 1.0 / float(m.value) if hasattr(m, "value") else None
    k = tc.reduce_axis(m, name="k")
    if inv_m is None:
        mf = tc.cast(m, X.dtype)
        mean = tc.compute(tuple(lead), lambda *i: tc.sum(X[(*i, k)], axis=k) / mf,
                          name=f"{name}_mean")
    else:
        mean = tc.compute(tuple(lead), lambda *i: tc.sum(X[(*i, k)], axis=k) * inv_m,
                          name=f"{name}_mean")
    k2 = tc.reduce_axis(m, name="k")

    def _var(*i):
        d = X[(*i, k2)] - mean[i]
        s = tc.sum(d * d, axis=k2)
        return s * inv_m if inv_m is not None else s / tc.cast(m, X.dtype)

    var = tc.compute(tuple(lead), _var, name=f"{name}_var")

    def _out(*i):
        y = (X[i] - mean[i[: nd - 1]]) / tc.sqrt(var[i[: nd - 1]] + eps)
        if gamma is not None:
            y = y * gamma[i[nd - 1]]
        if beta is not None:
            y = y + beta[i[nd - 1]]
        return y

    return tc.compute(X.shape, _out, name=name, tag="layer_norm")


def take(E: Tensor, indices: Tensor, axis: int = 0, name: str = "take") -> Tensor:
    """Gather along ``axis`` with integer ``indices`` of any rank, as ``numpy.take``.

    ``out[i..., j..., k...] = E[i..., indices[j...], k...]``: the result's shape is
    ``E.shape[:axis] + indices.shape + E.shape[axis + 1:]``.  Its gradient is a scatter-add
    into ``E``.

    Example::

        >>> E = tc.placeholder((1000, 64), name="E")        # an embedding table
        >>> idx = tc.placeholder((8, 16), name="idx", dtype="int64")
        >>> tc.ops.take(E, idx).shape
        (8, 16, 64)
        >>> e, ix = np.arange(6.0).reshape(3, 2), np.array([[2, 0], [1, 1]])
        >>> T, I = tc.placeholder((3, 2), dtype="float64"), tc.placeholder((2, 2), dtype="int64")
        >>> bool((tc.evaluate(tc.ops.take(T, I, axis=0), {T: e, I: ix})[0]
        ...       == np.take(e, ix, axis=0)).all())
        True
    """
    if indices.dtype not in ("int32", "int64"):
        raise DeclarationError(
            f"take: indices {indices.name} must be an integer tensor, not {indices.dtype}")
    if not -E.ndim <= axis < E.ndim:
        raise DeclarationError(f"take: axis {axis} is out of range for {E.name} "
                               f"with {E.ndim} dimension(s)")
    axis = axis % E.ndim
    m = indices.ndim
    shape = E.shape[:axis] + indices.shape + E.shape[axis + 1:]

    def _f(*i):
        at = tc.cast(indices[tuple(i[axis:axis + m])], "int64")
        return E[tuple(i[:axis]) + (at,) + tuple(i[axis + m:])]

    return tc.compute(shape, _f, name=name, tag="take")
