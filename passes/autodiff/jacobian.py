"""The Jacobian mutator: differentiate one stage's body with respect to one element of a tensor.

Given a stage ``Y[i] = f(i)`` and a tensor ``X`` it reads, :class:`Jacobian` builds the
expression ``J(i, j) = ∂f(i) / ∂X[j]`` in the free variables ``i`` (Y's axes) and ``j`` (fresh
variables, one per axis of X), forward mode over the expression tree (Urban & van der Smagt,
"Automatic Differentiation for Tensor Algebras", 2017, section 4; TVM's ``JacobianMutator``).
The rules themselves live in :mod:`.rules` (element-wise) and :mod:`.reductions`; this module
holds what they need from their context:

* ``d(e)`` — the derivative of a sub-expression, memoised; any expression that is not a float,
  or that reads no element of X, has the symbolic derivative ``Zero`` (integer sub-expressions
  are piecewise constant, so their derivative is zero where it exists).
* ``d_under(e, cond, axes)`` — the same inside an ``if_then_else`` arm or a reduction body: the
  guard (the condition under which ``e``'s value matters) and the scope of bound axes grow.
* ``value(e, kind)`` — the forward value of ``e``: a read ``Y[i]`` of the stage itself when
  ``e`` is the whole body (the rules for tanh, sigmoid, exp, sqrt, division and max reuse it),
  else an auxiliary stage named ``kind``, else ``fwd(e)``.
* ``fwd(e)`` — a forward operand as it may appear inside a derivative: every reduction in it
  is replaced by a read of an auxiliary stage.  The contribution of a consumer is a sum over
  the Jacobian index too, so a forward reduction left in place (a softmax denominator, say)
  would be recomputed for every Jacobian index.
* ``stage(kind, body, dtype, default)`` — an *auxiliary stage*: ``body`` computed once per point
  of the enclosing domain (the axes in scope that ``body`` or the guard mention) and read back.
  Max/min/prod derivatives use it so that no reduction is recomputed per Jacobian index.  Its
  body is wrapped in ``select(guard, body, default)`` so that it never evaluates a read the
  forward program guards.  When an enclosing axis has bounds that depend on another axis in
  scope (a triangular domain), the stage cannot be a box and ``body`` is used in place
  (correct, but recomputed per use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import ExprMutator, children, free_vars, fresh_name, substitute
from tecomp.tensor import ComputeOp, Tensor

from .rules import RULES

if TYPE_CHECKING:
    from collections.abc import Sequence


class AuxStages:
    """Auxiliary stages created while differentiating, shared by every Jacobian of one call.

    The cache is keyed by the stage being differentiated, the kind of stage, its body and the
    guard, so that e.g. the index of the maximum of ``Y`` is computed once however many of Y's
    inputs need it.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple, Tensor] = {}

    def read(self, owner: Tensor, kind: str, body: E.Expr, dtype: str, default: E.ExprLike,
             scope: Sequence[E.IterVar], guard: E.Expr | None) -> E.Expr:
        """A read of ``body`` stored as a stage over the axes of ``scope`` it depends on."""
        need = free_vars(body) | (free_vars(guard) if guard is not None else set())
        scope_vars = {ax.var for ax in scope}
        axes = [ax for ax in scope if ax.var in need]
        for ax in axes:
            if (free_vars(ax.lo) | free_vars(ax.extent)) & scope_vars:
                return body  # a non-rectangular domain: compute in place
        key = (id(owner), kind, body, guard, tuple(axes))
        t = self._cache.get(key)
        if t is None:
            t = _make_stage(f"{owner.name}_{kind}", axes, body, dtype, default, guard)
            self._cache[key] = t
        idx = tuple(ax.var if _is_zero_const(ax.lo) else E.sub(ax.var, ax.lo) for ax in axes)
        return E.TensorRead(t, idx, t.dtype)


def _is_zero_const(e: E.Expr) -> bool:
    return isinstance(e, E.Const) and e.value == 0


def _make_stage(name: str, axes: list[E.IterVar], body: E.Expr, dtype: str,
                default: E.ExprLike, guard: E.Expr | None) -> Tensor:
    if guard is not None:
        body = E.select(guard, body, E.as_expr(default, dtype))
    taken = {v.name for v in free_vars(body)} | {ax.var.name for ax in axes}
    mapping: dict[E.Var, E.Expr] = {}
    new_axes = []
    for ax in axes:
        ext = E.cast(ax.extent, "int64")
        if _is_zero_const(ax.lo):
            new_axes.append(E.IterVar(ax.var, E.Const(0, "int64"), ext, "data"))
            continue
        nv = E.Var(fresh_name(ax.var.name + "_o", taken), ax.var.dtype)
        taken.add(nv.name)
        mapping[ax.var] = E.add(nv, ax.lo)
        new_axes.append(E.IterVar(nv, E.Const(0, "int64"), ext, "data"))
    body = substitute(body, mapping)
    if body.dtype != dtype:
        body = E.cast(body, dtype)
    shape = tuple(ax.extent for ax in new_axes)
    return Tensor(name, shape, dtype, ComputeOp(tuple(new_axes), body, None))


class Jacobian:
    """``∂body / ∂target[jvars]`` for the body of one stage (see the module docstring).

    ``owner`` is the stage whose body is differentiated (it names auxiliary stages and, when
    ``top_read`` is given, ``top_read`` is the forward value of the whole body).  ``scope`` are
    the axes free in ``body`` (the stage's output axes, or a scatter's domain axes).
    """

    def __init__(self, owner: Tensor, body: E.Expr, scope: Sequence[E.IterVar],
                 target: Tensor, jvars: Sequence[E.Var], aux: AuxStages,
                 top_read: E.Expr | None = None) -> None:
        self.owner = owner
        self.body = body
        self.target = target
        self.jvars = tuple(jvars)
        self.aux = aux
        self.top_read = top_read
        self._scope: list[E.IterVar] = list(scope)
        self._guard: E.Expr | None = None
        self._memo: dict[tuple, E.Expr] = {}
        self._deps: dict[E.Expr, bool] = {}
        self._fwd_memo: dict[tuple, E.Expr] = {}
        self._reduces: dict[E.Expr, bool] = {}

    def run(self) -> E.Expr:
        """The Jacobian of the whole body."""
        return self.d(self.body)

    # ------------------------------------------------------------------ what rules call
    def d(self, e: E.Expr) -> E.Expr:
        """The derivative of the sub-expression ``e`` with respect to ``target[jvars]``."""
        if not dtypes.is_float(e.dtype) or not self.depends(e):
            return E.Zero(e.dtype)
        key = (e, self._guard, tuple(self._scope))
        out = self._memo.get(key)
        if out is None:
            rule = RULES.get(type(e))
            if rule is None:
                raise DifferentiationError(
                    f"no derivative rule for {type(e).__name__} in {e} "
                    f"(differentiating tensor {self.owner.name!r})")
            out = rule(e, self)
            self._memo[key] = out
        return out

    def d_under(self, e: E.Expr, cond: E.Expr | None = None,
                axes: Sequence[E.IterVar] = ()) -> E.Expr:
        """``d(e)`` where ``e`` only matters when ``cond`` holds, inside the bound ``axes``."""
        saved_guard, saved_scope = self._guard, list(self._scope)
        if cond is not None:
            self._guard = cond if self._guard is None else E.logical_and(self._guard, cond)
        self._scope.extend(axes)
        try:
            return self.d(e)
        finally:
            self._guard, self._scope = saved_guard, saved_scope

    def is_top(self, e: E.Expr) -> bool:
        """Whether ``e`` is the whole body (so the stage's own output holds its value)."""
        return self.top_read is not None and e is self.body

    def value(self, e: E.Expr, kind: str | None = None) -> E.Expr:
        """The forward value of ``e``: the stage's output, an auxiliary stage named ``kind``,
        or ``fwd(e)``."""
        if self.is_top(e):
            return self.top_read  # type: ignore[return-value]
        if kind is None:
            return self.fwd(e)
        return self.stage(kind, e, e.dtype, 0)

    def fwd(self, e: E.Expr, cond: E.Expr | None = None,
            axes: Sequence[E.IterVar] = ()) -> E.Expr:
        """``e`` for use inside a derivative: the stage's output if ``e`` is the whole body,
        and every reduction in it replaced by a read of an auxiliary stage, so that no forward
        reduction is recomputed per Jacobian index.  ``cond``/``axes`` as in :meth:`d_under`.
        """
        if self.is_top(e):
            return self.top_read  # type: ignore[return-value]
        if not self._has_reduce(e):
            return e
        saved_guard, saved_scope = self._guard, list(self._scope)
        if cond is not None:
            self._guard = cond if self._guard is None else E.logical_and(self._guard, cond)
        self._scope.extend(axes)
        try:
            key = (e, self._guard, tuple(self._scope))
            out = self._fwd_memo.get(key)
            if out is None:
                out = _Forward(self).visit(e)
                self._fwd_memo[key] = out
            return out
        finally:
            self._guard, self._scope = saved_guard, saved_scope

    def _has_reduce(self, e: E.Expr) -> bool:
        r = self._reduces.get(e)
        if r is None:
            r = isinstance(e, E.Reduce) or any(self._has_reduce(c) for c in children(e))
            self._reduces[e] = r
        return r

    def stage(self, kind: str, body: E.Expr, dtype: str, default: E.ExprLike) -> E.Expr:
        """``body`` computed once per point of the enclosing domain (see the module doc)."""
        return self.aux.read(self.owner, kind, body, dtype, default, self._scope, self._guard)

    def depends(self, e: E.Expr) -> bool:
        """Whether ``e`` reads an element of the target tensor."""
        r = self._deps.get(e)
        if r is None:
            if isinstance(e, E.TensorRead) and e.tensor is self.target:
                r = True
            else:
                r = any(self.depends(c) for c in children(e))
            self._deps[e] = r
        return r


class _Forward(ExprMutator):
    """Replace each outermost reduction by a read of an auxiliary stage (see ``fwd``)."""

    def __init__(self, jac: Jacobian) -> None:
        super().__init__()
        self.jac = jac

    def visit(self, e: E.Expr) -> E.Expr:
        if not self.jac._has_reduce(e):
            return e
        return super().visit(e)

    def visit_Reduce(self, e: E.Reduce) -> E.Expr:
        return self.jac.stage(e.combiner, e, e.dtype, 0)

    def visit_Select(self, e: E.Select) -> E.Expr:
        c = self.visit(e.cond)
        t = self.jac.fwd(e.t, e.cond)
        f = self.jac.fwd(e.f, E.logical_not(e.cond))
        if c is e.cond and t is e.t and f is e.f:
            return e
        return E.select(c, t, f)
