"""DOF propagation rules: ``(g, s)`` of a node from the ``(g, s)`` of its operands.

For every value ``v`` DOF keeps ``g = L grad v`` (an ``r``-vector: one direction variable) and
``s = sum_ij A_ij d2v/dx_i dx_j``.  For ``v = F(a, b, ...)`` (seed eqs. 17-18)::

    g_v = sum_i dF/da_i g_i
    s_v = sum_i dF/da_i s_i + sum_{i,l} d2F/da_i da_l Q(g_i, g_l),   Q(p, q) = p^T D q

One entry per node class.  Linear nodes (add, sub, neg, cast, select arms, sum reductions)
pass ``g`` and ``s`` through; a product adds ``2 Q(g_a, g_b)``; a unary function ``f`` adds
``f''(u) Q(g_u, g_u)`` (for a layer ``f(sum ...)`` read downstream, the scaled form of
:func:`_scaled_layer`); max/min take both at the first extremal index; prod is in
:mod:`.product`.  ``Q`` is computed by
the context (:class:`tecomp.passes.dof.propagate.DofContext`), which also stores an operand's
``g`` in a stage when it is an expensive expression used twice (in ``g_v`` and in ``Q``).

``f'`` and ``f''`` of a math function (the partials of a binary op) come from the op table
(:mod:`tecomp.intrinsics`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import free_vars, make_reduce
from tecomp.intrinsics import Intrinsic, Point, lookup

from ..forward.context import contains_reduce, literal_zeros, select
from ..forward.reductions import at_first
from .product import product_pair

if TYPE_CHECKING:
    from .propagate import DofContext

Pair = tuple[E.Expr, E.Expr]

#: the smallest positive normal number of each float type
_TINY = {"float64": 2.2250738585072014e-308, "float32": 1.1754943508222875e-38,
         "bfloat16": 1.1754943508222875e-38, "float16": 6.103515625e-05}


def _zeros(e: E.Expr) -> Pair:
    z = E.Zero(e.dtype)
    return z, z


def _leaf(e: E.Expr, c: DofContext, b: frozenset) -> Pair:
    return _zeros(e)


def _read(e: E.TensorRead, c: DofContext, b: frozenset) -> Pair:
    return c.tangent_read(e), c.s_read(e)


def _add(e: E.Add, c: DofContext, b: frozenset) -> Pair:
    (ga, sa), (gb, sb) = c.pair(e.a, b), c.pair(e.b, b)
    return E.add(ga, gb), E.add(sa, sb)


def _sub(e: E.Sub, c: DofContext, b: frozenset) -> Pair:
    (ga, sa), (gb, sb) = c.pair(e.a, b), c.pair(e.b, b)
    return E.sub(ga, gb), E.sub(sa, sb)


def _neg(e: E.Neg, c: DofContext, b: frozenset) -> Pair:
    ga, sa = c.pair(e.a, b)
    return E.neg(ga), E.neg(sa)


def _mul(e: E.Mul, c: DofContext, b: frozenset) -> Pair:
    if e.a == e.b:                                              # a^2
        ((ga, sa),) = c.operands((e.a,), b)
        two_a = E.mul(2.0, c.operand_value(e.a, b))
        return E.mul(two_a, ga), E.add(E.mul(two_a, sa), E.mul(2.0, c.q(ga, ga)))
    (ga, sa), (gb, sb) = c.operands((e.a, e.b), b, only_if_all=True)
    va, vb = c.operand_value(e.a, b), c.operand_value(e.b, b)
    g = E.add(E.mul(va, gb), E.mul(ga, vb))
    s = E.add(E.add(E.mul(va, sb), E.mul(sa, vb)), E.mul(2.0, c.q(ga, gb)))
    return g, s


def _div(e: E.Div, c: DofContext, b: frozenset) -> Pair:
    (ga, sa), (gb, sb) = c.operands((e.a, e.b), b)
    y, vb = c.value(e), c.operand_value(e.b, b)
    g = E.div(E.sub(ga, E.mul(y, gb)), vb)
    # y_ab = -1/b^2, y_bb = 2y/b^2:  s = (sa - y sb - 2 Q(ga,gb)/b + 2 y Q(gb,gb)/b) / b
    cross = E.div(E.sub(E.mul(y, c.q(gb, gb)), c.q(ga, gb)), vb)
    s = E.div(E.add(E.sub(sa, E.mul(y, sb)), E.mul(2.0, cross)), vb)
    return g, s


def _mod(e: E.Mod, c: DofContext, b: frozenset) -> Pair:
    (ga, sa), (gb, sb) = c.pair(e.a, b), c.pair(e.b, b)       # a % b = a - b floor(a/b)
    q = E.call("floor", E.div(e.a, e.b))
    return E.sub(ga, E.mul(q, gb)), E.sub(sa, E.mul(q, sb))


def _max(e: E.Max, c: DofContext, b: frozenset) -> Pair:
    return _route(E.compare(E.GE, e.a, e.b), e, c, b)


def _min(e: E.Min, c: DofContext, b: frozenset) -> Pair:
    return _route(E.compare(E.LE, e.a, e.b), e, c, b)


def _route(cond: E.Expr, e: E.BinaryOp, c: DofContext, b: frozenset) -> Pair:
    (ga, sa), (gb, sb) = c.pair(e.a, b), c.pair(e.b, b)
    return select(cond, ga, gb), select(cond, sa, sb)


def _select(e: E.Select, c: DofContext, b: frozenset) -> Pair:
    (gt, st), (gf, sf) = c.pair(e.t, b), c.pair(e.f, b)       # piecewise
    return select(e.cond, gt, gf), select(e.cond, st, sf)


def _cast(e: E.Cast, c: DofContext, b: frozenset) -> Pair:
    if not dtypes.is_float(e.value.dtype):
        return _zeros(e)
    g, s = c.pair(e.value, b)
    return E.cast(g, e.dtype), E.cast(s, e.dtype)


def _partials(e: E.Call, op: Intrinsic, c: DofContext, b: frozenset) -> Pair:
    """A binary op from its first and second partials (seed eqs. 17-18)."""
    pairs = c.operands(e.args, b)
    p = Point(op, [c.operand_value(x, b) for x in e.args], c.value(e))
    first = [None if f is None else literal_zeros(f)
             for f in op.partials(p, [not isinstance(g, E.Zero) for g, _ in pairs])]
    second = op.second_partials(p, first)
    g: E.Expr = E.Zero(e.dtype)
    s: E.Expr = E.Zero(e.dtype)
    for i, ((gi, si), fi) in enumerate(zip(pairs, first)):
        if fi is not None:
            g = E.add(g, E.mul(fi, gi))
            s = E.add(s, E.add(E.mul(fi, si), E.mul(second[i, i], c.q(gi, gi))))
    for (i, m), fim in second.items():
        if i < m:
            s = E.add(s, E.mul(E.mul(2.0, fim), c.q(pairs[i][0], pairs[m][0])))
    return g, s


def _call(e: E.Call, c: DofContext, b: frozenset) -> Pair:
    op = lookup(e.name)
    if op is None or not op.differentiable:
        raise DifferentiationError(f"no derivative rule for tc.{e.name} in {e}")
    if op.zero_derivative:
        return _zeros(e)                                        # piecewise constant
    if op.partials is not None:
        return _partials(e, op, c, b)
    gu, su = c.pair(e.args[0], b)
    if isinstance(gu, E.Zero) and isinstance(su, E.Zero):
        return _zeros(e)
    p = Point(op, [c.operand_value(e.args[0], b)], c.value(e))
    f1 = p.f1
    scaled = _scaled_layer(e, op, c, b, p, gu, su)
    if scaled is not None:
        return scaled
    ((gu, su),) = c.operands(e.args, b)
    f2 = op.second_derivative(p)
    if isinstance(f2, E.Zero):                                  # abs'' = 0 a.e.
        return E.mul(f1, gu), E.mul(f1, su)
    gram = c.hoist(c.q(gu, gu), b, f"q_{c.primal.name}")      # a stage: a reduction of its own
    return E.mul(f1, gu), E.add(E.mul(f1, su), E.mul(f2, gram))


def _scaled_layer(e: E.Call, op: Intrinsic, c: DofContext, b: frozenset, p: Point,
                  gu: E.Expr, su: E.Expr) -> Pair | None:
    """Seed eq. 23 for a layer ``f(z)`` whose ``g_z`` is a per-sample contraction: the
    tangent ``g = f'(z) g_z`` is one stage (the scaled contraction, no ``g_z`` buffer) and
    the second-order term is ``f''/f'^2 Q(g, g) = (f''/f') Q(g, g) / f'``.

    Only in the width-last tangent layout (where the scaled sum runs at unit stride), for the
    ``f`` whose entry gives ``d2_over_d1`` (``f' = 0`` implies ``f'' = 0``), and when ``g_z``
    uses every stage axis ``f'`` uses (else ``Q(g_z, g_z)`` is the cheaper, batch-invariant Gram
    of a first layer).  Where ``f'^2`` is below the smallest normal number the term is taken
    as 0: it is then ``(f''/f') f' Q(g_z, g_z)`` with ``|f'| < 1e-154`` in float64 (``tanh' =
    1 - tanh^2`` is either exactly 0 there or above 1e-16)."""
    ratio, f1 = op.d2_over_d1, p.f1
    if (ratio is None or e.dtype not in _TINY or not c.layout.width_last or not c.g_read_on
            or not contains_reduce(gu)):
        return None
    axis_vars = {a.var for a in c.axes}
    used = free_vars(gu)
    if used & b or not (free_vars(f1) & axis_vars) <= used:
        return None
    name = f"g_{c.primal.name}" if e is c.body else f"g_{c.primal.name}_call"
    g = c.hoist(E.mul(f1, gu), b, name)
    if not isinstance(g, E.TensorRead):
        return None
    dt = e.dtype
    gram = c.hoist(c.q(g, g), b, f"q_{c.primal.name}")
    term = E.div(E.mul(ratio(p), gram), f1)
    big = E.compare(E.GT, E.mul(f1, f1), E.Const(_TINY[dt], dt))
    return g, E.add(E.mul(f1, su), E.select(big, term, E.Const(0.0, dt)))


def _reduce(e: E.Reduce, c: DofContext, b: frozenset) -> Pair:
    inner = b | {a.var for a in e.axes}
    gb, sb = c.pair(e.body, inner)
    if e.combiner == "sum":                                     # linear
        return (make_reduce("sum", gb, e.axes, e.where, e.dtype),
                make_reduce("sum", sb, e.axes, e.where, e.dtype))
    if e.combiner in ("max", "min"):                            # at the first extremum
        return at_first(e, c, b, gb), at_first(e, c, b, sb)
    if e.combiner == "prod":                                    # zero-safe, see .product
        return product_pair(e, c, b, gb, sb)
    raise DifferentiationError(
        f"diff_operator: no second-order rule for the reduction {e.combiner} in {e}; "
        "use method='hessian'")


RULES: dict[type, Callable[..., Pair]] = {
    E.Const: _leaf, E.Zero: _leaf, E.Var: _leaf, E.Delta: _leaf,
    E.Add: _add, E.Sub: _sub, E.Neg: _neg, E.Mul: _mul, E.Div: _div,
    E.FloorDiv: _leaf, E.Mod: _mod, E.Max: _max, E.Min: _min, E.Select: _select, E.Cast: _cast,
    E.Call: _call, E.TensorRead: _read, E.Reduce: _reduce,
}


def pair_rule(e: E.Expr, c: DofContext, bound: frozenset) -> Pair:
    """Dispatch ``e`` to its rule; integer and boolean expressions have zero ``(g, s)``."""
    if not dtypes.is_float(e.dtype):
        return _zeros(e)
    rule = RULES.get(type(e))
    if rule is None:
        raise DifferentiationError(
            f"diff_operator has no second-order rule for {type(e).__name__} in {e}")
    return rule(e, c, bound)
