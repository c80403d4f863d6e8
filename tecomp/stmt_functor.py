"""The statement functor: walks and rewrites of loop-IR statements (:mod:`tecomp.loopir`),
beside the expression functor (:mod:`tecomp.functor`).

* :class:`StmtVisitor` / :class:`StmtMutator` — dispatch on the statement's type to
  ``visit_<Node>`` (a missing method raises an error naming the node); the mutator returns
  the same node when no child changed (TVM's ``StmtFunctor``/``StmtMutator``);
* :func:`expr_children` / :func:`walk_expr` / :func:`expr_vars` — the nodes of a loop-IR
  expression, buffer-load indices included; :func:`subst_expr` / :func:`rebuild_expr`;
* :func:`stmt_exprs` / :func:`stmt_children` / :func:`walk_stmt` — the expressions a statement
  holds directly, the statements nested in it, every statement in pre-order;
* :func:`subst` (variables replaced in a statement), :func:`map_loops` (a function applied to
  the outermost loops), :func:`bound_names` (names bound by loops and lets);
* :func:`eval_int` — the value of an integer size expression given the sizes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping

from . import expr as E
from .errors import ArgumentError
from .functor import children, rebuild
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


def expr_vars(e: E.Expr) -> set[E.Var]:
    """The variables of a loop-IR expression (buffer-load indices included)."""
    return {x for x in walk_expr(e) if isinstance(x, E.Var)}


def rebuild_expr(e: E.Expr, new: tuple[E.Expr, ...]) -> E.Expr:
    """``e`` with its children (:func:`expr_children`) replaced by ``new``."""
    if isinstance(e, BufferLoad):
        return replace(e, indices=tuple(new))
    if isinstance(e, E.Select):
        return replace(e, cond=new[0], t=new[1], f=new[2])
    if isinstance(e, E.Cast):
        return replace(e, value=new[0])
    if isinstance(e, E.Call):
        return replace(e, args=new)
    return rebuild(e, *new)


def replace_expr(e: E.Expr, old: E.Expr, new: E.Expr) -> E.Expr:
    """``e`` with every occurrence of the sub-expression ``old`` replaced by ``new``."""
    if e == old:
        return new
    kids = expr_children(e)
    if not kids:
        return e
    got = tuple(replace_expr(x, old, new) for x in kids)
    return e if all(a is b for a, b in zip(got, kids)) else rebuild_expr(e, got)


def subst_expr(e: E.Expr, mapping: Mapping[E.Var, E.Expr], memo: dict | None = None) -> E.Expr:
    """Substitute variables in a loop-IR expression (loads included); shared nodes once."""
    memo = {} if memo is None else memo
    key = id(e)
    if key in memo:
        return memo[key][1]
    if isinstance(e, E.Var):
        out = mapping.get(e, e)
    elif isinstance(e, BufferLoad):
        idx = tuple(subst_expr(x, mapping, memo) for x in e.indices)
        out = e if idx == e.indices else BufferLoad(e.buffer, idx, e.dtype)
    else:
        cs = children(e)
        new = tuple(subst_expr(x, mapping, memo) for x in cs)
        out = e if all(a is b for a, b in zip(new, cs)) else rebuild_expr(e, new)
    memo[key] = (e, out)
    return out


# ---------------------------------------------------------------------------- the functor
class StmtVisitor:
    """Visit a statement tree: ``visit(s)`` calls ``visit_<Node>(s)``; the defaults visit the
    nested statements and call :meth:`visit_expr` on each expression a statement holds."""

    def visit(self, s: Stmt) -> Any:
        method = getattr(self, "visit_" + type(s).__name__, None)
        if method is None:
            raise TypeError(f"{type(self).__name__}: no visit method for the statement "
                            f"{type(s).__name__}")
        return method(s)

    def visit_expr(self, e: E.Expr) -> None:
        """Called on every expression a statement holds directly (default: nothing)."""

    def generic_visit(self, s: Stmt) -> None:
        for e in stmt_exprs(s):
            self.visit_expr(e)
        for c in stmt_children(s):
            self.visit(c)

    visit_For = visit_Store = visit_Allocate = generic_visit
    visit_IfThenElse = visit_Seq = visit_LetStmt = generic_visit


class StmtMutator:
    """Rewrite a statement tree: ``visit(s)`` calls ``visit_<Node>(s)``; the defaults rebuild
    the node from its visited statements and :meth:`mutate_expr` of its expressions, and
    return ``s`` itself when nothing changed."""

    def visit(self, s: Stmt) -> Stmt:
        method = getattr(self, "visit_" + type(s).__name__, None)
        if method is None:
            raise TypeError(f"{type(self).__name__}: no visit method for the statement "
                            f"{type(s).__name__}")
        return method(s)

    def mutate_expr(self, e: E.Expr) -> E.Expr:
        """The rewritten form of an expression a statement holds (default: ``e``)."""
        return e

    def visit_For(self, s: For) -> Stmt:
        lo, hi, body = self.mutate_expr(s.lo), self.mutate_expr(s.hi), self.visit(s.body)
        if lo is s.lo and hi is s.hi and body is s.body:
            return s
        return replace(s, lo=lo, hi=hi, body=body)

    def visit_Store(self, s: Store) -> Stmt:
        idx = tuple(self.mutate_expr(x) for x in s.indices)
        value = self.mutate_expr(s.value)
        if value is s.value and all(a is b for a, b in zip(idx, s.indices)):
            return s
        return replace(s, indices=idx, value=value)

    def visit_Allocate(self, s: Allocate) -> Stmt:
        body = self.visit(s.body)
        return s if body is s.body else replace(s, body=body)

    def visit_LetStmt(self, s: LetStmt) -> Stmt:
        value, body = self.mutate_expr(s.value), self.visit(s.body)
        return s if value is s.value and body is s.body else replace(s, value=value, body=body)

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt:
        cond, then = self.mutate_expr(s.cond), self.visit(s.then)
        else_ = None if s.else_ is None else self.visit(s.else_)
        if cond is s.cond and then is s.then and else_ is s.else_:
            return s
        return IfThenElse(cond, then, else_)

    def visit_Seq(self, s: Seq) -> Stmt:
        items = tuple(self.visit(x) for x in s.stmts)
        return s if all(a is b for a, b in zip(items, s.stmts)) else Seq(items)


class _Subst(StmtMutator):
    def __init__(self, mapping: Mapping[E.Var, E.Expr]) -> None:
        self.mapping = mapping
        self.memo: dict = {}  # one for the whole statement: nodes its expressions share

    def mutate_expr(self, e: E.Expr) -> E.Expr:
        return subst_expr(e, self.mapping, self.memo)


def subst(s: Stmt, mapping: Mapping[E.Var, E.Expr]) -> Stmt:
    """``s`` with the variables of ``mapping`` replaced in every expression it holds."""
    return s if not mapping else _Subst(mapping).visit(s)


class _MapLoops(StmtMutator):
    def __init__(self, fn: Callable[[For], Stmt | None]) -> None:
        self.fn = fn

    def visit_For(self, s: For) -> Stmt:
        out = self.fn(s)
        if out is not None:
            return out
        body = self.visit(s.body)
        return s if body is s.body else replace(s, body=body)

    def visit_Store(self, s: Store) -> Stmt:
        return s


def map_loops(s: Stmt, fn: Callable[[For], Stmt | None]) -> Stmt:
    """``s`` with each outermost loop ``L`` for which ``fn(L)`` is not None replaced by it;
    loops where ``fn`` gives None are searched inside."""
    return _MapLoops(fn).visit(s)


def bound_names(s: Stmt) -> set[str]:
    """The names of the variables that loops and lets in ``s`` bind."""
    return {x.var.name for x in walk_stmt(s) if isinstance(x, (For, LetStmt))}


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
