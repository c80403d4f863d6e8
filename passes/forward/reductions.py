"""Tangents of the reductions that are not sums: max/min and prod.

**max / min** route the tangent of the body at the *first* index (lexicographic over the
reduction axes, in their declared order) where the extremum is attained -- the tie rule of
reverse mode.  The first index is computed once per output point, one auxiliary int64 stage
per reduction axis (a lexicographic argmin done axis by axis)::

    Y[i]  = max_k g(i, k)                      (the primal stage itself when it is the body)
    F0[i] = min_{k0,k1} select(g(i, k) == Y[i], k0, BIG)
    F1[i] = min_{k0,k1 : k0 == F0[i]} select(g(i, k) == Y[i], k1, BIG)
    dY[i] = select(F0[i] < BIG, dg(i, F0[i], F1[i]), 0)

Each stage costs O(K) per output point; the tangent itself is O(1) (no reduction).  An empty
domain (or a NaN maximum) gives ``F0 = BIG`` and a zero tangent.

**prod** uses the zero-safe form ``d(prod_k g_k) = sum_k (prod_{k' != k} g_k') dg_k`` in O(K):
with ``Z`` the number of zero factors and ``P`` the product of the non-zero ones,
``prod_{k' != k} g_k'`` is ``P / g_k`` when ``Z == 0``, ``P`` at the zero factor when
``Z == 1`` and 0 otherwise.  ``Z`` and ``P`` are auxiliary stages computed once.

Both forms are the ones the zero-elimination design asks of reverse mode (compute the winning
index once; divide by the element only when it is non-zero).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tecomp import expr as E
from tecomp.functor import make_reduce, substitute

from .context import select

if TYPE_CHECKING:
    from .context import StageContext

BIG = 2**63 - 1


def _renamed(e: E.Reduce, c: StageContext) -> tuple[tuple[E.IterVar, ...], dict]:
    """Fresh copies of ``e``'s axes (so an inline copy never shadows the original)."""
    mapping: dict[E.Var, E.Expr] = {}
    axes = []
    for a in e.axes:
        v = c.names.fresh(a.var.name)
        axes.append(E.IterVar(v, substitute(a.lo, mapping), substitute(a.extent, mapping),
                              "reduce"))
        mapping[a.var] = v
    return tuple(axes), mapping


def extremum_value(e: E.Reduce, c: StageContext, bound: frozenset) -> E.Expr:
    """The value of the max/min reduction ``e``, computed once."""
    if e is c.body:
        return c.value(e)
    return c.hoist(e, bound, f"{c.primal.name}_{e.combiner}")


def first_indices(e: E.Reduce, c: StageContext, bound: frozenset) -> list[E.Expr]:
    """The first index attaining ``e``'s extremum, one int64 expression per axis."""
    key = ("first", e, bound)
    got = c.cache.get(key)
    if got is not None:
        return got
    y = extremum_value(e, c, bound)
    big = E.Const(BIG, "int64")
    out: list[E.Expr] = []
    for d in range(len(e.axes)):
        axes, m = _renamed(e, c)
        body = substitute(e.body, m)
        cond = None if e.where is None else substitute(e.where, m)
        for j in range(d):
            eq = E.compare(E.EQ, axes[j].var, out[j])
            cond = eq if cond is None else E.logical_and(cond, eq)
        hit = E.compare(E.EQ, body, y)
        f = make_reduce("min", E.select(hit, axes[d].var, big), axes, cond, "int64")
        out.append(c.hoist(f, bound, f"{c.primal.name}_first{d}"))
    c.cache[key] = out
    return out


def at_first(e: E.Reduce, c: StageContext, bound: frozenset, inner: E.Expr) -> E.Expr:
    """``inner`` (an expression in ``e``'s axes) at the first extremal index, else 0."""
    if isinstance(inner, E.Zero):
        return inner
    fs = first_indices(e, c, bound)
    at = substitute(inner, {a.var: f for a, f in zip(e.axes, fs)})
    return select(E.compare(E.LT, fs[0], E.Const(BIG, "int64")), at, E.Zero(inner.dtype))


def extremum_tangent(e: E.Reduce, c: StageContext, bound: frozenset,
                     d_body: E.Expr) -> E.Expr:
    """Tangent of a max/min reduction given the tangent of its body."""
    return at_first(e, c, bound, d_body)


def product_parts(e: E.Reduce, c: StageContext, bound: frozenset) -> tuple[E.Expr, E.Expr]:
    """(Z, P): the number of zero factors (int64) and the product of the non-zero ones."""
    key = ("prod", e, bound)
    got = c.cache.get(key)
    if got is not None:
        return got
    is_zero = E.compare(E.EQ, e.body, E.Const(0.0, e.dtype))
    z = make_reduce("sum", E.select(is_zero, E.Const(1, "int64"), E.Const(0, "int64")),
                    e.axes, e.where, "int64")
    p = make_reduce("prod", E.select(is_zero, E.Const(1.0, e.dtype), e.body), e.axes,
                    e.where, e.dtype)
    out = (c.hoist(z, bound, f"{c.primal.name}_nzeros"),
           c.hoist(p, bound, f"{c.primal.name}_nzprod"))
    c.cache[key] = out
    return out


def product_tangent(e: E.Reduce, c: StageContext, bound: frozenset,
                    d_body: E.Expr) -> E.Expr:
    """Tangent of a prod reduction: ``sum_k (prod_{k' != k} g_k') dg_k`` in O(K)."""
    if isinstance(d_body, E.Zero):
        return E.Zero(e.dtype)
    z, p = product_parts(e, c, bound)
    g = e.body
    zero = E.Const(0.0, e.dtype)
    others = E.select(E.compare(E.EQ, g, zero),
                      E.select(E.compare(E.EQ, z, 1), p, zero),
                      E.select(E.compare(E.EQ, z, 0), E.div(p, g), zero))
    return make_reduce("sum", E.mul(d_body, others), e.axes, e.where, e.dtype)
