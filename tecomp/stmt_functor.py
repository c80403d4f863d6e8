"""Walks over loop-IR statements (:mod:`tecomp.loopir`), beside the expression functor.

* :func:`expr_children` / :func:`walk_expr` — the nodes of a loop-IR expression, buffer-load
  indices included;
* :func:`stmt_exprs` / :func:`stmt_children` / :func:`walk_stmt` — the expressions a statement
  holds directly, the statements nested in it, every statement in pre-order;
* :func:`eval_int` — the value of an integer size expression given the sizes.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from . import expr as E
from .errors import ArgumentError
from .functor import children
from .loopir import Allocate, BufferLoad, For, IfThenElse, LetStmt, Seq, Stmt, Store


def expr_children(e: E.Expr) -> tuple[E.Expr, ...]:
    """Sub-expressions of a loop-IR expression (buffer-load indices included)."""
    if isinstance(e, BufferLoad):
        return e.indices
    return children(e)


def walk_expr(e: E.Expr) -> Iterable[E.Expr]:
    """Every node of ``e`` (buffer-load indices included), pre-order, shared nodes once."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(reversed(expr_children(x)))


def stmt_exprs(s: Stmt) -> tuple[E.Expr, ...]:
    """The expressions a statement holds directly (not those of nested statements)."""
    if isinstance(s, For):
        return (s.lo, s.hi)
    if isinstance(s, Store):
        return tuple(s.indices) + (s.value,)
    if isinstance(s, IfThenElse):
        return (s.cond,)
    if isinstance(s, LetStmt):
        return (s.value,)
    if isinstance(s, Allocate):
        return tuple(s.buffer.shape)
    return ()


def stmt_children(s: Stmt) -> tuple[Stmt, ...]:
    """The statements nested directly in ``s``."""
    if isinstance(s, Seq):
        return s.stmts
    if isinstance(s, (For, Allocate, LetStmt)):
        return (s.body,)
    if isinstance(s, IfThenElse):
        return (s.then,) if s.else_ is None else (s.then, s.else_)
    return ()


def walk_stmt(s: Stmt) -> Iterable[Stmt]:
    """Every statement of ``s`` in pre-order."""
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(stmt_children(x)))


# ---------------------------------------------------------------------------- size arithmetic
INT_OPS = {
    E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
    E.FloorDiv: lambda a, b: a // (b or 1), E.Mod: lambda a, b: a % (b or 1),
    E.Min: min, E.Max: max,
}


def eval_int(e: E.Expr, sizes: Mapping[E.Var, int]) -> int:
    """The value of the integer size expression ``e`` given ``sizes``."""
    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        try:
            return sizes[e]
        except KeyError:
            raise ArgumentError(f"the size {e.name!r} is not bound") from None
    if isinstance(e, E.Cast):
        return eval_int(e.value, sizes)
    if isinstance(e, E.Neg):
        return -eval_int(e.a, sizes)
    op = INT_OPS.get(type(e))
    if op is None:
        raise ArgumentError(f"cannot evaluate the extent {e} from the arguments' shapes")
    return int(op(eval_int(e.a, sizes), eval_int(e.b, sizes)))
