"""First-derivative rules of forward mode, one short entry per node class.

Each rule maps a node ``e`` to its tangent ``de`` given the tangents of its operands
(``c.d(child, bound)``), the JVP rules of JAX's ``primitive_jvps`` written for this IR.  A
tangent is an expression in the same variables as ``e`` plus the direction variables of the
context; a symbolic :class:`~tecomp.expr.Zero` stands for "does not depend on the inputs" and
the smart constructors fold it, so no ``0 * x`` tree is ever built.

Conventions that matter for consistency with reverse mode:

* integer and boolean sub-expressions have a zero tangent (indices, comparisons, casts to an
  integer, ``floor``/``ceil``), as have Kronecker deltas;
* ``max(a, b)`` routes the tangent of ``a`` when ``a >= b`` (ties go to the first operand),
  ``min(a, b)`` when ``a <= b``; ``abs`` has derivative ``sign(x)`` (0 at 0);
* reductions: see :mod:`.reductions` (sum is linear, max/min take the first extremal index,
  prod has a zero-safe O(K) form).

Math functions take ``f'`` (or the partials of a binary op) from the op table
(:mod:`tecomp.intrinsics`), as reverse mode and DOF do.
"""

from __future__ import annotations

from typing import Callable

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import make_reduce
from tecomp.intrinsics import Point, lookup

from .context import StageContext, literal_zeros, select
from .reductions import extremum_tangent, product_tangent

Rule = Callable[[E.Expr, StageContext, frozenset], E.Expr]


def _zero(e: E.Expr, c: StageContext, b: frozenset) -> E.Expr:
    return E.Zero(e.dtype)


def _add(e: E.Add, c: StageContext, b: frozenset) -> E.Expr:
    return E.add(c.d(e.a, b), c.d(e.b, b))                      # a + b -> da + db


def _sub(e: E.Sub, c: StageContext, b: frozenset) -> E.Expr:
    return E.sub(c.d(e.a, b), c.d(e.b, b))                      # a - b -> da - db


def _neg(e: E.Neg, c: StageContext, b: frozenset) -> E.Expr:
    return E.neg(c.d(e.a, b))                                   # -a -> -da


def _mul(e: E.Mul, c: StageContext, b: frozenset) -> E.Expr:
    if e.a == e.b:                                              # a a -> 2 a da
        return E.mul(E.mul(2.0, c.operand_value(e.a, b)), c.d(e.a, b))
    da, db = c.d(e.a, b), c.d(e.b, b)                           # a b -> a db + da b
    return E.add(E.mul(c.operand_value(e.a, b), db), E.mul(da, c.operand_value(e.b, b)))


def _div(e: E.Div, c: StageContext, b: frozenset) -> E.Expr:
    da, db = c.d(e.a, b), c.d(e.b, b)                           # a / b -> (da - y db) / b
    return E.div(E.sub(da, E.mul(c.value(e), db)), c.operand_value(e.b, b))


def _mod(e: E.Mod, c: StageContext, b: frozenset) -> E.Expr:
    q = E.call("floor", E.div(e.a, e.b))                        # a % b -> da - floor(a/b) db
    return E.sub(c.d(e.a, b), E.mul(q, c.d(e.b, b)))


def _max(e: E.Max, c: StageContext, b: frozenset) -> E.Expr:
    return select(E.compare(E.GE, e.a, e.b), c.d(e.a, b), c.d(e.b, b))


def _min(e: E.Min, c: StageContext, b: frozenset) -> E.Expr:
    return select(E.compare(E.LE, e.a, e.b), c.d(e.a, b), c.d(e.b, b))


def _select(e: E.Select, c: StageContext, b: frozenset) -> E.Expr:
    return select(e.cond, c.d(e.t, b), c.d(e.f, b))             # piecewise


def _cast(e: E.Cast, c: StageContext, b: frozenset) -> E.Expr:
    if not dtypes.is_float(e.value.dtype):
        return E.Zero(e.dtype)                                  # int -> float: constant
    return E.cast(c.d(e.value, b), e.dtype)


def _call(e: E.Call, c: StageContext, b: frozenset) -> E.Expr:
    """``f(u) -> f'(u) du`` from the op table (partials for a binary op)."""
    op = lookup(e.name)
    if op is None or not op.differentiable:
        raise DifferentiationError(f"no derivative rule for tc.{e.name} in {e}")
    if op.zero_derivative:
        return E.Zero(e.dtype)                                  # piecewise constant
    if op.partials is not None:                                 # sum_i df/du_i du_i
        ds = [c.d(x, b) for x in e.args]
        p = Point(op, [c.operand_value(x, b) for x in e.args], c.value(e))
        out: E.Expr = E.Zero(e.dtype)
        for part, du in zip(op.partials(p, [not isinstance(d, E.Zero) for d in ds]), ds):
            if part is not None:
                out = E.add(out, E.mul(literal_zeros(part), du))
        return out
    du = c.d(e.args[0], b)
    if isinstance(du, E.Zero):
        return du
    p = Point(op, [c.operand_value(e.args[0], b)], lambda: c.value(e))
    return E.mul(p.f1, du)


def _read(e: E.TensorRead, c: StageContext, b: frozenset) -> E.Expr:
    return c.tangent_read(e)


def _reduce(e: E.Reduce, c: StageContext, b: frozenset) -> E.Expr:
    inner = b | {a.var for a in e.axes}
    if e.combiner == "sum":                                     # linear
        return make_reduce("sum", c.d(e.body, inner), e.axes, e.where, e.dtype)
    if e.combiner in ("max", "min"):
        return extremum_tangent(e, c, b, c.d(e.body, inner))
    if e.combiner == "prod":
        return product_tangent(e, c, b, c.d(e.body, inner))
    raise DifferentiationError(f"no derivative rule for the reduction {e.combiner} in {e}")


RULES: dict[type, Rule] = {
    E.Const: _zero, E.Zero: _zero, E.Var: _zero, E.Delta: _zero,
    E.Add: _add, E.Sub: _sub, E.Neg: _neg, E.Mul: _mul, E.Div: _div,
    E.FloorDiv: _zero, E.Mod: _mod,
    E.Max: _max, E.Min: _min, E.Select: _select, E.Cast: _cast, E.Call: _call,
    E.TensorRead: _read, E.Reduce: _reduce,
}


def tangent_rule(e: E.Expr, c: StageContext, bound: frozenset) -> E.Expr:
    """Dispatch ``e`` to its rule; integer and boolean expressions have zero tangents."""
    if not dtypes.is_float(e.dtype):
        return E.Zero(e.dtype)
    rule = RULES.get(type(e))
    if rule is None:
        raise DifferentiationError(
            f"forward mode has no rule for {type(e).__name__} in {e}")
    return rule(e, c, bound)
