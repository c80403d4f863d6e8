"""The statement functor (tecomp.stmt_functor): dispatch, identity when nothing changes,
substitution, loop mapping, walks and size arithmetic."""

from __future__ import annotations

import pytest

from tecomp import expr as E
from tecomp.errors import ArgumentError
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, IfThenElse, LetStmt, Seq, Store
from tecomp.stmt_functor import (
    StmtMutator,
    StmtVisitor,
    bound_names,
    eval_int,
    expr_vars,
    map_loops,
    subst,
    walk_stmt,
)

I64 = "int64"
ZERO = E.Const(0, I64)


def _program():
    n, i, j, t = (E.Var(x, I64) for x in ("n", "i", "j", "t"))
    x = Buffer("x", (n,), "float32", "input")
    y = Buffer("y", (n,), "float32", "output")
    acc = Buffer("acc", (), "float32", "local")
    inner = For(j, ZERO, n, Store(acc, (), BufferLoad(x, (j,), "float32"), reduce="sum"))
    body = Allocate(acc, Seq((Store(acc, (), E.Const(0.0, "float32")), inner,
                              IfThenElse(E.LT(i, n, "bool"),
                                         LetStmt(t, E.add(i, E.Const(1, I64)),
                                                 Store(y, (i,), BufferLoad(acc, (), "float32")))))))
    return For(i, ZERO, n, body, kind="parallel"), (n, i, j, t)


def test_mutator_returns_the_same_tree_when_nothing_changes():
    s, _ = _program()
    assert StmtMutator().visit(s) is s


def test_subst_replaces_variables_in_every_expression():
    s, (n, i, j, t) = _program()
    m = E.Var("m", I64)
    out = subst(s, {n: m})
    assert out != s
    assert all(n not in expr_vars(e) for x in walk_stmt(out)
               for e in (getattr(x, "lo", ZERO), getattr(x, "hi", ZERO)))
    assert subst(out, {m: n}) == s
    assert subst(s, {}) is s


def test_map_loops_replaces_outermost_matches_only():
    s, (n, i, j, t) = _program()
    seen = []

    def fn(loop):
        seen.append(loop.var.name)
        return replace_kind(loop) if loop.var == j else None

    def replace_kind(loop):
        return For(loop.var, loop.lo, loop.hi, loop.body, kind="vectorized")

    out = map_loops(s, fn)
    assert seen == ["i", "j"]
    kinds = {x.var.name: x.kind for x in walk_stmt(out) if isinstance(x, For)}
    assert kinds == {"i": "parallel", "j": "vectorized"}


def test_visitor_dispatch_and_missing_method():
    s, _ = _program()

    class Count(StmtVisitor):
        def __init__(self):
            self.stores = 0
            self.exprs = 0

        def visit_Store(self, st):
            self.stores += 1
            self.generic_visit(st)

        def visit_expr(self, e):
            self.exprs += 1

    c = Count()
    c.visit(s)
    assert c.stores == 3 and c.exprs > 0

    class Partial(StmtVisitor):
        visit_For = None

    with pytest.raises(TypeError, match="no visit method for the statement For"):
        Partial().visit(s)


def test_bound_names_and_eval_int():
    s, (n, i, j, t) = _program()
    assert bound_names(s) == {"i", "j", "t"}
    e = E.add(E.Mul(n, E.Const(3, I64), I64), E.FloorDiv(n, E.Const(2, I64), I64))
    assert eval_int(e, {n: 7}) == 24
    with pytest.raises(ArgumentError, match="'n' is not bound"):
        eval_int(e, {})
