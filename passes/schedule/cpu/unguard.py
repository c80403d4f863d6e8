"""Guarded sums whose value a select discards computed unguarded, so the register tiles take them.

Lowering evaluates a reduction under a ``select`` only where the select keeps it: causal
attention's scores ``S = select(j <= i, sum(Q[i, c] * K[j, c], c) * 0.125, -1e30)`` become ::

    S_sum = 0
    if (j <= i) { for (c) S_sum += Q[i, c] * K[j, c] }
    S[i, j] = select(j <= i, S_sum * 0.125, -1e30)

which saves half the products but keeps the nest out of the plain-order register tiles of
:mod:`.gemm_dot` (a guard between the accumulator's start and its loop).  With the guard
dropped, every score is a product of the tiles, about twice as fast as the guarded scalar
nest although it computes the masked half too (4 x 256 x 256 scores: 0.64 -> 0.30 ms on one
core).  :func:`unguard_sums` drops the guard when the stored value is ``select(c, f(acc), g)``
with the guard's own condition ``c`` (so the sum is used exactly where it was computed) and
every read of the sum stays inside its buffer over the whole box of the enclosing loops
(affine indices of loop variables with constant bounds; otherwise the guard may be what keeps
a read in bounds, and the nest is kept).  A nest the register tiles then do not take gets its
guard back (:func:`reguard`).

Legality.  Where ``c`` holds the nest runs as before.  Where it does not, the sum now runs and
its value is discarded by the select; its reads are in bounds (checked above) and it writes
only its local accumulator, so nothing else observes it.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.loopir import Allocate, BufferLoad, For, IfThenElse, LoweredFunc, Seq, Stmt, Store
from tecomp.stmt_functor import StmtMutator, eval_int, expr_vars, walk_expr, walk_stmt

from ...affine_forms import coefficient
from .tile import const_extent


def unguard_sums(func: LoweredFunc) -> tuple[LoweredFunc, dict[int, tuple[Allocate, Allocate]]]:
    """``func`` with the guards of discarded sums dropped (module doc), and for each nest
    unguarded ``{id(new): (new, old)}``, for :func:`reguard`."""
    pass_ = _Unguard()
    body = pass_.visit(func.body)
    return (func if body is func.body else replace(func, body=body)), pass_.done


def reguard(func: LoweredFunc, done: dict[int, tuple[Allocate, Allocate]]) -> LoweredFunc:
    """``func`` with the nests :func:`unguard_sums` unguarded and no later step took (the very
    same statement objects are still there) guarded again: computing the discarded half pays
    only inside the register tiles."""
    if not done:
        return func
    body = _Reguard(done).visit(func.body)
    return func if body is func.body else replace(func, body=body)


class _Reguard(StmtMutator):
    def __init__(self, done: dict[int, tuple[Allocate, Allocate]]) -> None:
        super().__init__()
        self.done = done

    def visit_Allocate(self, s: Allocate) -> Stmt:
        pair = self.done.get(id(s))
        if pair is not None and pair[0] is s:
            return pair[1]
        return super().visit_Allocate(s)


class _Unguard(StmtMutator):
    def __init__(self) -> None:
        super().__init__()
        self.ranges: dict[E.Var, tuple[int, int]] = {}
        self.done: dict[int, tuple[Allocate, Allocate]] = {}

    def visit_For(self, s: For) -> Stmt:
        lo = s.lo.value if isinstance(s.lo, E.Const) else None
        n = const_extent(s.lo, s.hi)
        if lo is not None and n is not None and s.step == 1:
            self.ranges[s.var] = (int(lo), int(lo) + n)
        try:
            return super().visit_For(s)
        finally:
            self.ranges.pop(s.var, None)

    def visit_Allocate(self, s: Allocate) -> Stmt:
        out = self.unguard(s)
        return super().visit_Allocate(s) if out is None else out

    def unguard(self, s: Allocate) -> Stmt | None:
        acc = s.buffer
        if acc.scope != "local" or acc.shape or not isinstance(s.body, Seq):
            return None
        if len(s.body.stmts) != 3:
            return None
        init, guarded, fin = s.body.stmts
        if not (isinstance(guarded, IfThenElse) and guarded.else_ is None
                and isinstance(fin, Store) and isinstance(fin.value, E.Select)
                and fin.value.cond == guarded.cond and isinstance(init, Store)
                and init.buffer == acc):
            return None
        total = BufferLoad(acc, (), acc.dtype)
        if total in walk_expr(fin.value.f):
            return None
        nest = guarded.then
        ranges = dict(self.ranges)
        for x in walk_stmt(nest):
            if isinstance(x, For):
                lo = x.lo.value if isinstance(x.lo, E.Const) else None
                n = const_extent(x.lo, x.hi)
                if lo is None or n is None or x.step != 1:
                    return None
                ranges[x.var] = (int(lo), int(lo) + n)
            elif isinstance(x, Store) and x.buffer != acc:
                return None
        for x in walk_stmt(nest):
            if isinstance(x, Store) and not _reads_in_bounds(x, ranges):
                return None
        new = replace(s, body=Seq((init, nest, fin)))
        self.done[id(new)] = (new, s)
        return new


def _reads_in_bounds(st: Store, ranges: dict[E.Var, tuple[int, int]]) -> bool:
    exprs = [st.value, *st.indices]
    for e in exprs:
        for x in walk_expr(e):
            if not isinstance(x, BufferLoad) or x.buffer.scope == "local":
                continue
            for idx, dim in zip(x.indices, x.buffer.shape):
                span = _span(idx, ranges)
                if span is None or not isinstance(dim, E.Const):
                    return False
                if span[0] < 0 or span[1] >= int(dim.value):
                    return False
    return True


def _span(e: E.Expr, ranges: dict[E.Var, tuple[int, int]]) -> tuple[int, int] | None:
    """The least and greatest value of the affine ``e`` over ``ranges`` (None: not affine in
    variables with known ranges)."""
    names = expr_vars(e)
    if not names <= set(ranges):
        return None
    coef = {}
    for v in names:
        c = coefficient(e, v)
        if c is None:
            return None
        coef[v] = c
    try:
        base = eval_int(e, {v: 0 for v in names})
    except Exception:  # not an integer form eval_int reads
        return None
    lo = base + sum(min(c * ranges[v][0], c * (ranges[v][1] - 1)) for v, c in coef.items())
    hi = base + sum(max(c * ranges[v][0], c * (ranges[v][1] - 1)) for v, c in coef.items())
    return lo, hi
