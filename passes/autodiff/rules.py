"""The derivative-rule table: one short entry per node kind, apart from the driver.

Each rule maps a node ``e`` and the differentiation context ``D`` (a
:class:`~.jacobian.Jacobian`) to ``de``, the derivative of ``e`` with respect to the element
``X[j]`` of the target tensor; ``D.d(child)`` is a child's derivative.  Rules build results with
the smart constructors of :mod:`tecomp.expr`, so a symbolic ``Zero`` propagates instead of
``0 * x`` trees (JAX's ``Zero`` in ``ad_util.py``; the tables follow tinygrad's
``gradient.py`` and JAX's ``primitive_jvps``).  The context already answers ``Zero`` for every
non-float node and every node that does not read X, so a rule runs only where a derivative
exists.

Conventions worth knowing:

* A read ``X[e_0, ..., e_{d-1}]`` of the target gives ``delta(j_0, e_0) * ... *
  delta(j_{d-1}, e_{d-1})`` — first-class :class:`~tecomp.expr.Delta` nodes, which zero
  elimination solves; a read through an integer tensor (``E[idx[i], j]``) gives
  ``delta(j_0, idx[i]) * delta(j_1, j)`` (a scatter-add once zero elimination runs).
* ``min(a, b)`` / ``max(a, b)``: at a tie the whole derivative goes to the first argument
  (``maximum(x, 0)`` has derivative 1 at ``x == 0``).
* Math functions (``Call``) take their derivative from the op table
  (:mod:`tecomp.intrinsics`): ``dx * f'(x)``, or ``dx / q`` where the entry writes ``f' = 1/q``;
  a binary op sums ``d(x_i) * df/dx_i`` over its operands.
* ``abs``: ``sign(x)``, and 0 at 0.  ``floor``, ``ceil``, ``//`` and casts to integers: 0.
* ``pow(a, b)``: ``da * b * a^(b-1) + db * a^b * log(a)``, with PyTorch's conventions at the
  singular points: the first term is 0 where ``b == 0`` and the second is 0 where ``a == 0``
  and ``b >= 0`` (so ``x ** 2`` at 0 and ``0 ** y`` give finite derivatives, not NaN).  When
  only one argument depends on X the other term is never built.
* ``exp``, ``sqrt``, ``tanh``, ``sigmoid`` (and ``a / b``): the derivative reuses the forward
  value — the stage's own output ``Y[i]`` when the node is the whole body of ``Y``, else the
  node itself.  Forward operands that a rule multiplies by go through ``D.fwd``, which turns
  the reductions in them into reads of auxiliary stages computed once.
* Casts between floats cast the derivative; the driver casts each adjoint contribution back to
  the dtype of the tensor it is accumulated into.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.intrinsics import Point, lookup

from . import reductions

if TYPE_CHECKING:
    from .jacobian import Jacobian

    Rule = Callable[[E.Expr, Jacobian], E.Expr]

def _zero(e: E.Expr, D: Jacobian) -> E.Expr:
    return E.Zero(e.dtype)


def _read(e: E.TensorRead, D: Jacobian) -> E.Expr:
    if e.tensor is not D.target:
        return E.Zero(e.dtype)
    out: E.Expr = E.Const(1.0, e.dtype)
    for j, ix in zip(D.jvars, e.indices):
        out = E.mul(out, E.delta(j, ix, e.dtype))
    return out


def _scale(de: E.Expr, D: Jacobian, factor: E.Expr, left: bool = False) -> E.Expr:
    """``de * fwd(factor)`` (or ``fwd(factor) * de``); the factor is not built for a zero."""
    if isinstance(de, E.Zero):
        return de
    f = D.fwd(factor)
    return E.mul(f, de) if left else E.mul(de, f)


def _mul(e: E.Mul, D: Jacobian) -> E.Expr:
    return E.add(_scale(D.d(e.a), D, e.b), _scale(D.d(e.b), D, e.a, left=True))


def _div(e: E.Div, D: Jacobian) -> E.Expr:
    da, db = D.d(e.a), D.d(e.b)
    b = D.fwd(e.b)
    if isinstance(db, E.Zero):
        return E.div(da, b)
    if D.is_top(e):  # (da - y db) / b with the stage's own output y = a / b
        return E.sub(E.div(da, b), E.div(E.mul(D.value(e), db), b))
    return E.sub(E.div(da, b), E.div(E.mul(D.fwd(e.a), db), E.mul(b, b)))


def _mod(e: E.Mod, D: Jacobian) -> E.Expr:
    db = D.d(e.b)
    if isinstance(db, E.Zero):
        return D.d(e.a)
    return E.sub(D.d(e.a), E.mul(db, E.floordiv(D.fwd(e.a), D.fwd(e.b))))


def _select(e: E.Select, D: Jacobian) -> E.Expr:
    dt = D.d_under(e.t, e.cond)
    df = D.d_under(e.f, E.logical_not(e.cond))
    return E.select(D.fwd(e.cond), dt, df)


def _recast(de: E.Expr, dtype: str) -> E.Expr:
    """``cast(de, dtype)`` pushed through products onto deltas, constants and zeros."""
    if isinstance(de, E.Delta):
        return E.delta(de.a, de.b, dtype)
    if isinstance(de, E.Mul):
        return E.mul(_recast(de.a, dtype), _recast(de.b, dtype))
    return E.cast(de, dtype)


def _cast(e: E.Cast, D: Jacobian) -> E.Expr:
    if not dtypes.is_float(e.value.dtype):
        return E.Zero(e.dtype)
    return _recast(D.d(e.value), e.dtype)


def _call(e: E.Call, D: Jacobian) -> E.Expr:
    """``f(x) -> dx f'(x)`` from the op table (partials for a binary op)."""
    op = lookup(e.name)
    if op is None or not op.differentiable:
        raise DifferentiationError(
            f"no derivative rule for the math function {e.name!r} in {e} "
            f"(differentiating tensor {D.owner.name!r})")
    if op.zero_derivative:                                          # floor, ceil
        return E.Zero(e.dtype)
    p = Point(op, [lambda x=x: D.fwd(x) for x in e.args], lambda: D.value(e))
    if op.partials is not None:                                     # sum_i d(x_i) df/dx_i
        ds = [D.d(x) for x in e.args]
        out: E.Expr = E.Zero(e.dtype)
        for dx, part in zip(ds, op.partials(p, [not isinstance(d, E.Zero) for d in ds])):
            if part is not None:
                out = E.add(out, E.mul(dx, part))
        return out
    dx = D.d(e.args[0])
    if isinstance(dx, E.Zero):
        return dx
    if op.d1_divisor is not None:                                   # dx / q, f' = 1/q
        return E.div(dx, op.d1_divisor(p))
    return _times(dx, p.f1)


def _times(dx: E.Expr, f1: E.Expr) -> E.Expr:
    """``dx * f1``, distributed over a select of constants (``abs' = sign``: the adjoint is
    routed, ``x > 0 ? dx : x < 0 ? -dx : 0``, not multiplied)."""
    if isinstance(f1, E.Select):
        t, f = _times(dx, f1.t), _times(dx, f1.f)
        return E.select(f1.cond, t, f)
    if isinstance(f1, E.Const) and f1.value == 0:
        return E.Zero(dx.dtype)
    if isinstance(f1, E.Const) and f1.value == -1:
        return E.neg(dx)
    return E.mul(dx, f1)


RULES: dict[type, Rule] = {
    E.Const: _zero,                                               # c -> 0
    E.Zero: _zero,                                                # 0 -> 0
    E.Var: _zero,                                                 # sizes, indices -> 0
    E.Delta: _zero,                                               # delta(a, b) -> 0
    E.TensorRead: _read,                                          # X[e] -> Π delta(j, e)
    E.Add: lambda e, D: E.add(D.d(e.a), D.d(e.b)),                # a + b -> da + db
    E.Sub: lambda e, D: E.sub(D.d(e.a), D.d(e.b)),                # a - b -> da - db
    E.Neg: lambda e, D: E.neg(D.d(e.a)),                          # -a -> -da
    E.Mul: _mul,                                                  # a b -> da b + a db
    E.Div: _div,                                                  # a / b -> da/b - a db/b²
    E.FloorDiv: _zero,                                            # a // b -> 0
    E.Mod: _mod,                                                  # a % b -> da - db (a // b)
    E.Min: lambda e, D: E.select(E.compare(E.LE, D.fwd(e.a), D.fwd(e.b)),  # min(a,b) ->
                                 D.d(e.a), D.d(e.b)),             #   a <= b ? da : db
    E.Max: lambda e, D: E.select(E.compare(E.GE, D.fwd(e.a), D.fwd(e.b)),  # max(a,b) ->
                                 D.d(e.a), D.d(e.b)),             #   a >= b ? da : db
    E.Select: _select,                                            # c ? t : f -> c ? dt : df
    E.Cast: _cast,                                                # float(x) -> float(dx)
    E.Call: _call,                                                # f(x) -> dx f'(x)
    E.Reduce: reductions.diff_reduce,                             # see reductions.py
}
