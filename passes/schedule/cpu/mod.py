"""Strip-mining of innermost loops by the divisor of their ``//`` and ``%`` indices (a CPU
scheduling pass).

A pooling gradient, an upsampling or a reshape reads ``head[.., j // 2]`` and tests
``j % 2``: the loop over ``j`` walks ``head`` at half speed, which the loop vectoriser can
only do with gathers.  When every ``//`` and ``%`` of the loop variable in the body divides by
the same constant ``c`` (2 to 4) and the trip count is a multiple of ``c``, the loop becomes
(strip-mining with the strip unrolled; Allen & Kennedy, "Optimizing Compilers for Modern
Architectures", 2001, ch. 8)::

    for (j, 0, 2 * m) { body(j) }   ==>   for (q, 0, m) { let j = 2 * q { body(j) }
                                                         let j = 2 * q + 1 { body(j) } }

LLVM folds ``(2q + r) // 2`` to ``q`` and ``(2q + r) % 2`` to ``r`` (the multiply and add carry
no-overflow flags), so each copy reads ``head[.., q]`` with unit stride and the stores form an
interleaved group the vectoriser handles.  Legality: the iterations run in exactly the same
order (``j = c*q + r``, ``r`` inner), so nothing about the program changes.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.functor import fresh_name
from tecomp.loopir import Allocate, For, LetStmt, LoweredFunc, Seq, Stmt
from tecomp.stmt_functor import bound_names, map_loops, stmt_exprs, walk_expr, walk_stmt

from .schedule import trip_count

MAX_DIVISOR = 4


def split_mod_loops(func: LoweredFunc) -> LoweredFunc:
    """``func`` with innermost loops strip-mined by their index divisor (see above)."""
    names = bound_names(func.body) | {p.name for p in func.params}

    def rewrite(loop: For) -> Stmt | None:
        if _has_loop(loop.body):
            return None
        c = _divisor(loop)
        if c is None:
            return None
        q = E.Var(fresh_name(f"{loop.var.name}_q", names), loop.var.dtype)
        names.add(q.name)
        copies = []
        for r in range(c):
            v: E.Expr = E.Mul(E.Const(c, q.dtype), q, q.dtype)
            if r:
                v = E.Add(v, E.Const(r, q.dtype), q.dtype)
            copies.append(LetStmt(loop.var, v, loop.body))
        hi = E.Const(trip_count(loop) // c, q.dtype)
        return replace(loop, var=q, lo=E.Const(0, q.dtype), hi=hi, body=Seq(tuple(copies)))

    body = map_loops(func.body, rewrite)
    return func if body is func.body else replace(func, body=body)


def _has_loop(s: Stmt) -> bool:
    return any(isinstance(x, For) for x in walk_stmt(s))


def _divisor(loop: For) -> int | None:
    """The one constant ``c`` (2..MAX_DIVISOR) that divides the loop's trip count and by
    which every ``//``/``%`` of the loop variable in the body divides, else None."""
    if loop.kind != "serial" or loop.step != 1 or not (
            isinstance(loop.lo, E.Const) and loop.lo.value == 0):
        return None
    n = trip_count(loop)
    if n is None:
        return None
    found: set[int] = set()
    for e in _stmt_exprs(loop.body):
        for x in walk_expr(e):
            if isinstance(x, (E.FloorDiv, E.Mod)) and loop.var in _free(x.a):
                if not isinstance(x.b, E.Const) or isinstance(x.b.value, (bool, float)):
                    return None
                found.add(int(x.b.value))
    if len(found) != 1:
        return None
    (c,) = found
    return c if 2 <= c <= MAX_DIVISOR and n % c == 0 and n >= 4 * c else None


def _free(e: E.Expr) -> set[E.Var]:
    return {x for x in walk_expr(e) if isinstance(x, E.Var)}


def _stmt_exprs(s: Stmt) -> list[E.Expr]:
    """The expressions of a loop-free statement (values, indices, conditions, let values)."""
    return [e for x in walk_stmt(s) if not isinstance(x, Allocate) for e in stmt_exprs(x)]
