"""Cumulative sums and products along an axis, built on :func:`tecomp.scan`.

``cumsum(X, axis)[..., t, ...] = Σ_{s <= t} X[..., s, ...]`` as the recurrence
``S[t] = S[t - 1] + X[t]`` (``cumprod``: ``S[t] = S[t - 1] · X[t]``), O(n) work forward and
backward.  The scan's time axis is its first axis, so another ``axis`` is moved to the front
and back (two copies that lowering inlines).  ``cumprod``'s gradient comes from the adjoint
recurrence, ``A[t] = G[t] + X[t + 1] · A[t + 1]``, ``dX[t] = A[t] · S[t - 1]``: no division,
so it is exact where ``X`` has zeros.
"""

from __future__ import annotations

from typing import Callable

from .. import dsl
from .. import expr as E
from ..errors import DeclarationError
from ..scan import scan
from ..tensor import Tensor


def _axis(X: Tensor, axis: int, who: str) -> int:
    if not isinstance(X, Tensor):
        raise DeclarationError(f"{who}: {X!r} is not a tensor")
    if X.ndim == 0:
        raise DeclarationError(f"{who}: {X.name!r} is a scalar; it has no axis to scan")
    if not isinstance(axis, int) or not -X.ndim <= axis < X.ndim:
        raise DeclarationError(f"{who}: axis {axis!r} out of range for {X.name!r} of rank "
                               f"{X.ndim}")
    return axis % X.ndim


def _moved(shape: tuple, axis: int) -> tuple:
    return (shape[axis],) + shape[:axis] + shape[axis + 1:]


def _cumulative(X: Tensor, axis: int, combine: Callable[[E.Expr, E.Expr], E.Expr],
                name: str) -> Tensor:
    a = _axis(X, axis, f"tc.ops.{name}")
    front = X
    if a != 0:
        front = dsl.compute(_moved(X.shape, a), lambda t, *r: X[r[:a] + (t,) + r[a:]],
                            name=f"{X.name}_{name}_in")
    state = dsl.placeholder(front.shape, name=f"{X.name}_{name}_state", dtype=X.dtype)
    init = dsl.compute((1,) + front.shape[1:], lambda _, *r: front[(0,) + r],
                       name=f"{X.name}_{name}_init")
    update = dsl.compute(front.shape,
                         lambda t, *r: combine(state[(t - 1,) + r], front[(t,) + r]),
                         name=f"{X.name}_{name}_step")
    S = scan(init, update, state, inputs=[front], name=f"{X.name}_{name}")
    if a == 0:
        return S
    return dsl.compute(X.shape, lambda *ix: S[(ix[a],) + ix[:a] + ix[a + 1:]],
                       name=f"{X.name}_{name}")


def cumsum(X: Tensor, axis: int = 0) -> Tensor:
    """The cumulative sum of ``X`` along ``axis`` (a scan: O(n) forward and backward)."""
    return _cumulative(X, axis, lambda s, x: s + x, "cumsum")


def cumprod(X: Tensor, axis: int = 0) -> Tensor:
    """The cumulative product of ``X`` along ``axis``; its gradient is exact with zeros."""
    return _cumulative(X, axis, lambda s, x: s * x, "cumprod")
