"""Loop nests in the one-loop forms the register tiles take: unit loops dropped, reduction
nests linearised.

The register tiles of :mod:`.microkernel` and :mod:`.gemm_dot` run one reduction loop ``k``
over a packed panel.  A convolution's sums reduce over a nest (channels, kernel rows and
columns: ``(c, ry, rx)``; a weight gradient over batch and image: ``(n, y, x)``), and a 1x1
convolution's weight gradient keeps data loops of one iteration (``ky``, ``kx``).

* :func:`drop_unit_loops` replaces every serial loop of exactly one iteration by its
  variable's value.
* :func:`drop_dead_code` (last, on the scheduled program): a serial loop of one iteration
  (any step: a cache block ``for (pc, 0, 256, step 256)`` over a 256-wide axis) is its body
  at the lower bound; a loop of no iteration, a branch whose condition folded to a constant
  and an allocation left with nothing in it go.  The register tiles' edge code for
  extents their tiles divide (``for (p, 256, 256)``) then never reaches LLVM.
* :func:`linear_nest` reads a nest of reduction loops with constant bounds as one loop ``k``
  over the product of their extents, each variable recovered by the mixed-radix digits of
  ``k``: ``c = k // 9``, ``ry = k // 3 % 3``, ``rx = k % 3`` (lexicographic order, so the
  terms are added in the order of the nest).

Legality: a one-iteration loop runs its body once with its lower bound; a loop of no
iteration runs nothing, a branch on a constant only its chosen arm; the digits are a
bijection from ``[0, prod e)`` onto the nest's box that enumerates it in the nest's order.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.loopir import Allocate, For, IfThenElse, LoweredFunc, Seq, Stmt
from tecomp.stmt_functor import StmtMutator, expr_vars, subst, subst_expr

from .microkernel import fresh_var, index_const
from .tile import const_extent


def drop_unit_loops(func: LoweredFunc) -> LoweredFunc:
    """``func`` with every serial one-iteration loop (constant bounds, step 1) replaced by
    its body at the loop's lower bound (a parallel one stays: :func:`.schedule.fuse_parallel`
    collapses it with the loops inside)."""
    body = _Unit().visit(func.body)
    return func if body is func.body else replace(func, body=body)


class _Unit(StmtMutator):
    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        if s.step == 1 and s.kind == "serial" and const_extent(s.lo, s.hi) == 1:
            return subst(body, {s.var: s.lo})
        return s if body is s.body else replace(s, body=body)


def drop_dead_code(func: LoweredFunc) -> LoweredFunc:
    """``func`` without the loops of one or no iteration, branches on constants and empty
    allocations its constant bounds leave (module docstring)."""
    body = _Dead().visit(func.body)
    return func if body is func.body else replace(func, body=body)


_NOTHING = Seq(())


def _empty(s: Stmt) -> bool:
    return isinstance(s, Seq) and not s.stmts


class _Dead(StmtMutator):
    """The single-trip loops' variables are substituted on the way down, all of those around
    a statement at once (``mapping``), so each expression is rebuilt once however many such
    loops enclose it, rather than once per loop (a tile body under three of them)."""

    def __init__(self) -> None:
        self.mapping: dict[E.Var, E.Expr] = {}
        self.memo: dict = {}  # subst_expr's, for the current mapping

    def mutate_expr(self, e: E.Expr) -> E.Expr:
        return subst_expr(e, self.mapping, self.memo) if self.mapping else e

    def visit_For(self, s: For) -> Stmt:
        lo, hi = self.mutate_expr(s.lo), self.mutate_expr(s.hi)
        first, end = index_value(lo), index_value(hi)
        if first is not None and end is not None:
            trips = max(0, -(-(end - first) // s.step))
            if trips == 0:
                return _NOTHING
            if trips == 1 and s.kind == "serial":
                outer = self.mapping, self.memo
                self.mapping, self.memo = {**self.mapping, s.var: lo}, {}
                try:
                    return self.visit(s.body)
                finally:
                    self.mapping, self.memo = outer
        body = self.visit(s.body)
        if _empty(body):
            return _NOTHING
        if lo is s.lo and hi is s.hi and body is s.body:
            return s
        return replace(s, lo=lo, hi=hi, body=body)

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt:
        cond = self.mutate_expr(s.cond)
        if isinstance(cond, E.Const):
            arm = s.then if cond.value else s.else_
            return _NOTHING if arm is None else self.visit(arm)
        then = self.visit(s.then)
        else_ = None if s.else_ is None else self.visit(s.else_)
        if cond is s.cond and then is s.then and else_ is s.else_:
            return s
        return IfThenElse(cond, then, else_)

    def visit_Allocate(self, s: Allocate) -> Stmt:
        body = self.visit(s.body)
        if _empty(body):
            return _NOTHING
        return s if body is s.body else replace(s, body=body)

    def visit_Seq(self, s: Seq) -> Stmt:
        items: list[Stmt] = []
        changed = False
        for x in s.stmts:
            y = self.visit(x)
            changed = changed or y is not x or isinstance(y, Seq)
            items.extend(y.stmts if isinstance(y, Seq) else (y,))
        if not changed:
            return s
        return items[0] if len(items) == 1 else Seq(tuple(items))


def index_value(e: E.Expr) -> int | None:
    return int(e.value) if isinstance(e, E.Const) else None


def linear_nest(ks: list[For], names: set[str]) -> tuple[For, dict[E.Var, E.Expr]] | None:
    """``(k, digits)``: one loop ``k`` over the box of the perfect nest ``ks`` (its body the
    innermost loop's, with the digits substituted) and the value of each nest variable in
    terms of ``k``; None unless every loop has constant bounds and at least one
    iteration."""
    extents = [const_extent(x.lo, x.hi) for x in ks]
    if any(e is None or e < 1 for e in extents) or any(
            expr_vars(x.lo) or expr_vars(x.hi) for x in ks):
        return None
    k = fresh_var(f"{ks[0].var.name}_flat", names)
    total, digits, stride = 1, {}, 1
    for x, e in zip(reversed(ks), reversed(extents)):
        q = k if stride == 1 else E.floordiv(k, index_const(stride))
        d = q if x is ks[0] else E.mod(q, index_const(e))
        digits[x.var] = E.add(x.lo, d) if not _zero(x.lo) else d
        stride *= e
        total *= e
    return For(k, index_const(0), index_const(total), subst(ks[-1].body, digits)), digits


def _zero(e: E.Expr) -> bool:
    return isinstance(e, E.Const) and e.value == 0
