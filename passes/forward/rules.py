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

``UNARY_D1[name](u, y)`` gives ``f'(u)`` from the argument ``u`` and the value ``y = f(u)``;
the DOF rules reuse it.
"""

from __future__ import annotations

import math
from typing import Callable

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import make_reduce

from .context import StageContext, select
from .reductions import extremum_tangent, product_tangent

Rule = Callable[[E.Expr, StageContext, frozenset], E.Expr]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

# name: (u, y) -> f'(u)                                         # f -> f'
UNARY_D1: dict[str, Callable[[E.Expr, E.Expr], E.Expr]] = {
    "exp": lambda u, y: y,                                      # exp -> exp
    "log": lambda u, y: E.div(1.0, u),                          # log -> 1/u
    "sqrt": lambda u, y: E.div(0.5, y),                         # sqrt -> 1/(2 sqrt u)
    "tanh": lambda u, y: E.sub(1.0, E.mul(y, y)),               # tanh -> 1 - tanh^2
    "sigmoid": lambda u, y: E.mul(y, E.sub(1.0, y)),            # sigmoid -> s (1 - s)
    "sin": lambda u, y: E.call("cos", u),                       # sin -> cos
    "cos": lambda u, y: E.neg(E.call("sin", u)),                # cos -> -sin
    "erf": lambda u, y: E.mul(_TWO_OVER_SQRT_PI, E.call("exp", E.neg(E.mul(u, u)))),
}


def sign(u: E.Expr) -> E.Expr:
    """sign(u) as an expression (0 at 0)."""
    return E.select(E.compare(E.GT, u, 0.0), E.Const(1.0, u.dtype),
                    E.select(E.compare(E.LT, u, 0.0), E.Const(-1.0, u.dtype),
                             E.Const(0.0, u.dtype)))


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


def pow_partials(a: E.Expr, p: E.Expr, y: E.Expr, need_a: bool,
                 need_p: bool) -> tuple[E.Expr | None, E.Expr | None]:
    """(d/da, d/dp) of ``y = a ** p``, each only when needed, with reverse mode's conventions
    at the singular points: d/da is 0 where ``p == 0``, d/dp is 0 where ``a == 0, p >= 0``."""
    d_a = d_p = None
    zero = E.Const(0.0, y.dtype)
    if need_a:
        if isinstance(p, E.Const):
            d_a = E.mul(p, E.power(a, E.sub(p, 1.0))) if p.value != 0 else E.Zero(y.dtype)
        else:
            d_a = E.select(E.compare(E.EQ, p, zero), zero,
                           E.mul(p, E.power(a, E.sub(p, 1.0))))
    if need_p:
        singular = E.logical_and(E.compare(E.EQ, a, zero), E.compare(E.GE, p, zero))
        d_p = E.select(singular, zero, E.mul(y, E.call("log", a)))
    return d_a, d_p


def _call(e: E.Call, c: StageContext, b: frozenset) -> E.Expr:
    if e.name == "pow":
        da, dp = c.d(e.args[0], b), c.d(e.args[1], b)
        a, p = (c.operand_value(x, b) for x in e.args)
        fa, fp = pow_partials(a, p, c.value(e), not isinstance(da, E.Zero),
                              not isinstance(dp, E.Zero))
        out: E.Expr = E.Zero(e.dtype)
        if fa is not None:
            out = E.add(out, E.mul(fa, da))
        if fp is not None:
            out = E.add(out, E.mul(fp, dp))
        return out
    if e.name in ("floor", "ceil"):
        return E.Zero(e.dtype)                                  # piecewise constant
    du = c.d(e.args[0], b)
    if isinstance(du, E.Zero):
        return du
    u = c.operand_value(e.args[0], b)
    if e.name == "abs":
        return E.mul(sign(u), du)                               # abs -> sign
    rule = UNARY_D1.get(e.name)
    if rule is None:
        raise DifferentiationError(f"no derivative rule for tc.{e.name} in {e}")
    return E.mul(rule(u, c.value(e)), du)


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
