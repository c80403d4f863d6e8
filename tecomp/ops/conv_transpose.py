"""Transposed 2-D convolution (the adjoint of a strided, padded, dilated ``conv2d``).

``conv_transpose2d(X, W, stride=s, padding=p, output_padding=q, dilation=d)`` with ``X`` of
shape (N, C, H, W_) and ``W`` of shape (C, K, R, S) (PyTorch's layout: input channels first)
gives ``Y`` of shape (N, K, OH, OW) with

    OH = (H - 1)·s - 2p + d·(R - 1) + q + 1

and ``Y[n, k, y, x] = Σ_{c, ry, rx} X[n, c, iy, ix] · W[c, k, ry, rx]`` summed over the taps
whose source pixel exists: ``iy·s = y + p - ry·d`` exactly, ``0 <= iy < H`` (the same for x).
This is the scatter ``Y[n, k, iy·s - p + ry·d, …] += X[n, c, iy, …]·W[c, k, ry, …]`` written
as a gather, so every output element is produced by one reduction.

The divisibility and range conditions are ``where=`` conditions with ``//`` and ``%`` by the
constant stride.  Zero elimination (:mod:`tecomp.passes.zero_elimination`) turns them into exact
loops: ``q = y + p - ry·d`` with ``q ≡ 0 (mod s)`` leaves, for each output row, the taps of one
residue class, so the lowered program costs the forward conv2d's multiply-adds
(N·K·C·H·W_·R·S), not ``s²`` times more as a convolution of the zero-stuffed input would.
Worked example, 1-D, s = 2, p = 1, R = 3, d = 1: output ``y = 4`` reads ``q = 5 - ry`` for
``ry ∈ {0, 1, 2}``; only ``ry = 1`` gives an even ``q``, so ``Y[4] = X[2]·W[1]``.
"""

from __future__ import annotations

from typing import Sequence

from .. import dsl as tc
from ..errors import DeclarationError
from ..expr import Expr, as_expr
from ..tensor import Tensor


def _pair(v: int | Sequence[int], what: str) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, int) else tuple(v)
    if len(pair) != 2 or not all(isinstance(x, int) for x in pair):
        raise DeclarationError(f"conv_transpose2d: {what} must be an int or a pair of ints, "
                               f"got {v!r}")
    return pair  # type: ignore[return-value]


def _constant(e: Expr, what: str) -> int:
    value = getattr(e, "value", None)
    if not isinstance(value, int):
        raise DeclarationError(f"conv_transpose2d: {what} must be a constant, got {e}")
    return value


def conv_transpose2d(X: Tensor, W: Tensor, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0,
                     output_padding: int | Sequence[int] = 0,
                     dilation: int | Sequence[int] = 1,
                     name: str = "conv_transpose2d") -> Tensor:
    """Transposed convolution of NCHW ``X`` with ``W`` of shape (C_in, C_out, R, S).

    The adjoint of ``tc.ops.conv2d`` with the same stride, padding and dilation (PyTorch's
    ``conv_transpose2d``); ``output_padding`` (< stride or < dilation) adds rows and columns at
    the end.  Sizes may be symbolic except the kernel's.  Its gradients are those of any
    tecomp tensor: ``tc.gradient(Y, [X, W])``.

    Example::

        X = tc.placeholder((8, 32, 16, 16), name="X")
        W = tc.placeholder((32, 16, 3, 3), name="W")
        Y = tc.ops.conv_transpose2d(X, W, stride=2, padding=1, output_padding=1)
        Y.shape   # (8, 16, 32, 32)
    """
    if X.ndim != 4 or W.ndim != 4:
        raise DeclarationError(f"conv_transpose2d {name}: X ({X.name}) and W ({W.name}) must be "
                               "4-D (NCHW and (C_in, C_out, R, S))")
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    oph, opw = _pair(output_padding, "output_padding")
    dh, dw = _pair(dilation, "dilation")
    for what, a, b in (("stride", sh, sw), ("dilation", dh, dw)):
        if a < 1 or b < 1:
            raise DeclarationError(f"conv_transpose2d {name}: {what} must be >= 1, got {(a, b)}")
    if min(ph, pw, oph, opw) < 0:
        raise DeclarationError(f"conv_transpose2d {name}: padding and output_padding must be "
                               ">= 0")
    if not (oph < max(sh, dh) and opw < max(sw, dw)):
        raise DeclarationError(
            f"conv_transpose2d {name}: output_padding {(oph, opw)} must be smaller than the "
            f"stride {(sh, sw)} or the dilation {(dh, dw)}")
    n, c, h, w = X.shape
    cw, k, r, s = W.shape
    r_, s_ = _constant(r, f"the kernel height of {W.name}"), _constant(s, f"the kernel width "
                                                                          f"of {W.name}")
    if hasattr(c, "value") and hasattr(cw, "value") and c.value != cw.value:
        raise DeclarationError(
            f"conv_transpose2d {name}: {X.name} has {c.value} channels (axis 1) but "
            f"{W.name} expects {cw.value} (axis 0)")
    oh = (as_expr(h) - 1) * sh - 2 * ph + dh * (r_ - 1) + oph + 1
    ow = (as_expr(w) - 1) * sw - 2 * pw + dw * (s_ - 1) + opw + 1
    for what, ext in (("height", oh), ("width", ow)):
        if hasattr(ext, "value") and ext.value <= 0:
            raise DeclarationError(f"conv_transpose2d {name}: the output {what} would be "
                                   f"{ext.value}")
    rc = tc.reduce_axis(c, name="rc")
    ry = tc.reduce_axis(r_, name="ry")
    rx = tc.reduce_axis(s_, name="rx")

    def body(b, f, y, x):
        qy = y + ph - ry * dh
        qx = x + pw - rx * dw
        conds = [qy >= 0, qx >= 0]
        if sh > 1:
            conds.append(tc.eq(qy % sh, 0))
        if sw > 1:
            conds.append(tc.eq(qx % sw, 0))
        iy = qy // sh if sh > 1 else qy
        ix = qx // sw if sw > 1 else qx
        conds += [iy < h, ix < w]
        return tc.sum(X[b, rc, iy, ix] * W[rc, f, ry, rx], axis=[rc, ry, rx],
                      where=tc.all(*conds))

    return tc.compute((n, k, oh, ow), body, name=name, tag="conv_transpose2d")
