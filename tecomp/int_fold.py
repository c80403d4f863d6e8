"""Collecting the constant offsets of integer sums: ``n - 1 + 1 -> n``.

Bounds that lowering and zero elimination build step by step (an inclusive upper bound plus
one, a padding added and taken off again) carry offsets that cancel.  :func:`fold_offsets`
flattens every integer chain of ``+``/``-``, sums its constants into one trailing offset,
drops terms that cancel (``x + a - a -> x``, structurally equal terms of opposite signs) and
keeps the other terms in their order, so the result reads like the input minus the noise::

    n - 1 + 1                  ->  n
    (m + 2 - 2 - 1) // 2 + 1   ->  (m - 1) // 2 + 1
    j2 - 2 * t + 1             ->  j2 - 2 * t + 1      (nothing to collect)

Exact for integers (no division or reordering across non-sum nodes); floats are left alone.
"""

from __future__ import annotations

from . import dtypes
from . import expr as E
from .functor import children, rebuild


def _terms(e: E.Expr, sign: int, out: list[tuple[int, E.Expr]]) -> int:
    """Append the signed non-constant terms of the sum ``e`` to ``out``; return its constant."""
    if isinstance(e, E.Add):
        return _terms(e.a, sign, out) + _terms(e.b, sign, out)
    if isinstance(e, E.Sub):
        return _terms(e.a, sign, out) + _terms(e.b, -sign, out)
    if isinstance(e, E.Const):
        return sign * int(e.value)
    out.append((sign, fold_offsets(e)))
    return 0


def _cancel(terms: list[tuple[int, E.Expr]]) -> list[tuple[int, E.Expr]]:
    kept: list[tuple[int, E.Expr]] = []
    for sign, t in terms:
        opposite = next((n for n, (s, u) in enumerate(kept) if s == -sign and u == t), None)
        if opposite is None:
            kept.append((sign, t))
        else:
            del kept[opposite]
    return kept


def fold_offsets(e: E.Expr) -> E.Expr:
    """``e`` with the constants of each integer sum collected (see the module docstring)."""
    if not dtypes.is_int(e.dtype) or isinstance(e, (E.Reduce, E.TensorRead)):
        return e
    if isinstance(e, (E.Add, E.Sub)):
        terms: list[tuple[int, E.Expr]] = []
        offset = _terms(e, 1, terms)
        terms = _cancel(terms)
        if not terms:
            return E.Const(offset, e.dtype)
        sign, first = terms[0]
        out = first if sign > 0 else E.neg(first)
        for sign, t in terms[1:]:
            out = E.add(out, t) if sign > 0 else E.sub(out, t)
        if offset:
            out = E.add(out, offset) if offset > 0 else E.sub(out, -offset)
        return out
    kids = children(e)
    if not kids:
        return e
    new = tuple(fold_offsets(k) for k in kids)
    return e if all(a is b for a, b in zip(new, kids)) else rebuild(e, *new)
