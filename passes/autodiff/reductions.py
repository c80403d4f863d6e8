"""Derivative rules for reductions: sum, max/min (first-index rule) and prod (zero-safe).

No rule recomputes a reduction per Jacobian index (TVM 0.19's ``te.gradient`` did, making the
gradients of max pooling and softmax O(n·m²)); the values a rule needs are computed once per
output element in *auxiliary stages* (see :mod:`.jacobian`), and the derivative is a flat sum
with a delta inside, the form zero elimination consumes.

**sum** — ``d Σ_{k | w} g = Σ_{k | w} dg``: the same axes and ``where``.

**max / min** — the whole derivative goes to ONE index, the first index in row-major order of
the reduce axes at which the extremum is attained (PyTorch's rule for ties).  With the
row-major linear position ``lin(k) = ((k_0 - lo_0)·n_1 + (k_1 - lo_1))·n_2 + ...``::

    First[i] = min_{k | w} select(g(i, k) == Y[i], lin(k), BIG)        (int64, once per i)
    d max_{k | w} g = Σ_{k | w} delta(lin(k), First[i]) · dg(i, k)

``Y[i]`` is the stage itself when the max is its whole body, else an auxiliary stage holding
the max.  The delta on a data-dependent value becomes a gather in zero elimination: O(|X|)
instead of O(|X|·K).  Example: ``Y[i] = max_k A[i, k]`` with ``A[0] = [1, 3, 3]`` gives
``First[0] = 1`` and ``dA[0] = [0, dY[0], 0]``.  A max whose later axes have extents depending
on earlier axes of the same reduction has no such linear position and is rejected.

**prod** — correct with zeros and O(K) per output.  With the auxiliary stages ``Z[i]`` (the
number of zero factors) and ``P[i]`` (the product of the non-zero factors), the product of
all factors but the k-th is::

    Π_{k' ≠ k} g(k') = select(g(k) != 0, select(Z == 0, P / g(k), Z == 1: S P / g(k), 0),
                                         select(Z == 1, P, Z == 2: (S - g(k)) P, 0))
    d Π_{k | w} g = Σ_{k | w} dg(k) · Π_{k' ≠ k} g(k')

``S[i]`` is the sum of the zero factors: its value is 0, so the arms ``S P / g(k)`` and
``(S - g(k)) P`` are 0 like the plain ``0`` they replace, but their derivatives are those of
``Π_{k' ≠ k} g(k')`` (one zero factor ``z`` among the others: ``dg(z) · P / g(k)``; two, ``k``
and ``z``: ``dg(z) · P``).  Differentiating the gradient again -- forward over reverse for
``tc.hessian``, which treats select conditions as locally constant -- is then exact at zeros:
for ``prod([2, 0, 3, 5])`` the entry ``H[0, 1] = 3 · 5`` would otherwise be lost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import free_vars, make_reduce

if TYPE_CHECKING:
    from .jacobian import Jacobian

BIG = 2**62  # larger than any linear position; the argmin sentinel


def diff_reduce(e: E.Reduce, D: Jacobian) -> E.Expr:
    """Dispatch on the combiner (the ``Reduce`` entry of the rule table)."""
    rule = _REDUCE_RULES.get(e.combiner)
    if rule is None:
        raise DifferentiationError(
            f"no derivative rule for the {e.combiner!r} reduction {e} "
            f"(differentiating tensor {D.owner.name!r})")
    return rule(e, D)


def _dbody(e: E.Reduce, D: Jacobian) -> E.Expr:
    return D.d_under(e.body, e.where, e.axes)


def _sum(e: E.Reduce, D: Jacobian) -> E.Expr:
    return make_reduce("sum", _dbody(e, D), e.axes, e.where, e.dtype)


def linear_position(e: E.Reduce, who: str) -> E.Expr:
    """``lin(k)``: the row-major position of a point of ``e``'s reduction domain."""
    own = {ax.var for ax in e.axes}
    lin: E.Expr | None = None
    for ax in e.axes:
        if lin is not None and (free_vars(ax.extent) | free_vars(ax.lo)) & own:
            raise DifferentiationError(
                f"cannot differentiate the {e.combiner} reduction {e} in tensor {who!r}: the "
                f"bounds of its axis {ax.var.name!r} depend on another axis of the same "
                "reduction, so its first extremal index is not defined by a row-major order")
        pos = E.sub(E.cast(ax.var, "int64"), E.cast(ax.lo, "int64"))
        lin = pos if lin is None else E.add(E.mul(lin, E.cast(ax.extent, "int64")), pos)
    assert lin is not None
    return lin


def _extremum(e: E.Reduce, D: Jacobian) -> E.Expr:
    dg = _dbody(e, D)
    if isinstance(dg, E.Zero):
        return dg
    lin = linear_position(e, D.owner.name)
    value = D.value(e, e.combiner)
    hit = E.select(E.compare(E.EQ, e.body, value), lin, E.Const(BIG, "int64"))
    first = D.stage(f"arg{e.combiner}", make_reduce("min", hit, e.axes, e.where, "int64"),
                    "int64", BIG)
    return make_reduce("sum", E.mul(E.delta(lin, first, e.dtype), dg), e.axes, e.where,
                       e.dtype)


def _prod(e: E.Reduce, D: Jacobian) -> E.Expr:
    dg = _dbody(e, D)
    if isinstance(dg, E.Zero):
        return dg
    g, dt = e.body, e.dtype
    is_zero = E.compare(E.EQ, g, 0)
    count = make_reduce("sum", E.select(is_zero, E.Const(1, "int64"), E.Const(0, "int64")),
                        e.axes, e.where, "int64")
    nonzero = make_reduce("prod", E.select(is_zero, E.Const(1.0, dt), g), e.axes, e.where, dt)
    zeros = D.stage("zeros", count, "int64", 0)
    partial = D.stage("nzprod", nonzero, dt, 1.0)
    # zsum = the sum of the zero factors: always 0, but its derivative is that of the zero
    # factors, which keeps the derivative of ``others`` right at zeros (see the docstring)
    zsum = D.stage("zsum", make_reduce("sum", E.select(is_zero, g, E.Const(0.0, dt)), e.axes,
                                       e.where, dt), dt, 0.0)
    g = D.fwd(g, e.where, e.axes)  # inside the derivative: no nested forward reductions

    def z_is(n: int) -> E.Expr:
        return E.compare(E.EQ, zeros, n)
    nz_arm = E.select(z_is(0), E.div(partial, g),
                      E.select(z_is(1), E.div(E.mul(zsum, partial), g), E.Zero(dt)))
    z_arm = E.select(z_is(1), partial,
                     E.select(z_is(2), E.mul(E.sub(zsum, g), partial), E.Zero(dt)))
    others = E.select(E.compare(E.NE, g, 0), nz_arm, z_arm)
    return make_reduce("sum", E.mul(dg, others), e.axes, e.where, dt)


_REDUCE_RULES = {
    "sum": _sum,      # Σ g -> Σ dg
    "max": _extremum,  # max g -> Σ delta(lin(k), First) dg
    "min": _extremum,  # min g -> Σ delta(lin(k), First) dg
    "prod": _prod,    # Π g -> Σ dg Π_{k' != k} g   (zero-safe)
}
