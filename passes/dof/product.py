"""DOF rule for product reductions, zero-safe, in O(K r) per output point.

For ``P = prod_k g_k`` with ``G_k = L grad g_k`` and ``s_k`` the operator on ``g_k``::

    L grad P = sum_k (prod_{k' != k} g_k') G_k
    op(P)    = sum_k (prod_{k' != k} g_k') s_k + sum_{k != l} (prod_{k' != k, l} g_k') Q(G_k, G_l)

Dividing by factors is only safe where they are non-zero.  With ``Z`` the number of zero
factors and ``Pnz`` the product of the non-zero ones (:func:`product_parts`), let
``V = sum_{g_k != 0} G_k / g_k`` and ``W = sum_{g_k = 0} G_k``.  The pair sum is then

    Z = 0:  Pnz (Q(V, V) - sum_k Q(G_k, G_k) / g_k^2)
    Z = 1:  2 Pnz Q(W, V)                        (the zero factor paired with each other one)
    Z = 2:  Pnz (Q(W, W) - sum_{g_k = 0} Q(G_k, G_k))   (= 2 Pnz Q(G_z1, G_z2))
    Z > 2:  0

``V`` and ``W`` are stages over the output point and the rank axis, computed once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tecomp import expr as E
from tecomp.functor import make_reduce

from ..forward.context import select
from ..forward.reductions import product_parts

if TYPE_CHECKING:
    from .propagate import DofContext


def product_pair(e: E.Reduce, c: DofContext, bound: frozenset, gb: E.Expr,
                 sb: E.Expr) -> tuple[E.Expr, E.Expr]:
    """``(g, s)`` of the prod reduction ``e`` from ``(g, s)`` of its body."""
    if isinstance(gb, E.Zero) and isinstance(sb, E.Zero):
        return E.Zero(e.dtype), E.Zero(e.dtype)
    dt = e.dtype
    z, p = product_parts(e, c, bound)
    zero = E.Const(0.0, dt)
    is0 = E.compare(E.EQ, e.body, zero)

    def zis(n: int) -> E.Expr:
        return E.compare(E.EQ, z, E.Const(n, "int64"))

    def total(x: E.Expr) -> E.Expr:
        return make_reduce("sum", x, e.axes, e.where, dt)

    inv = E.select(is0, zero, E.div(1.0, e.body))
    others = E.select(is0, E.select(zis(1), p, zero), E.select(zis(0), E.mul(p, inv), zero))
    g = total(E.mul(gb, others))
    s = total(E.mul(sb, others))
    if isinstance(gb, E.Zero):
        return g, s
    name = c.primal.name
    v = c.hoist(total(E.mul(gb, inv)), bound, f"g_{name}_prodv")
    w = c.hoist(total(select(is0, gb, E.Zero(dt))), bound, f"g_{name}_prodw")
    qkk = c.q(gb, gb)
    c1 = total(E.mul(qkk, E.mul(inv, inv)))
    c0 = total(select(is0, qkk, E.Zero(dt)))
    pairs = E.select(zis(0), E.mul(p, E.sub(c.q(v, v), c1)),
                     E.select(zis(1), E.mul(E.mul(2.0, p), c.q(w, v)),
                              E.select(zis(2), E.mul(p, E.sub(c.q(w, w), c0)), zero)))
    return g, E.add(s, pairs)
