"""Readable, deterministic text for the loop IR (C-like pseudo-code).

Expressions are printed by :func:`tecomp.printer.format_expr`; statements one a line, nested
blocks indented by two spaces::

    func matmul(A: float32[n, 64], B: float32[64, 32]) -> (C: float32[n, 32]) params(n) {
      parallel for (i, 0, n) {
        for (j, 0, 32) {
          allocate C_sum: float32[] (local) {
            C_sum = 0.0
            for (k, 0, 64) {
              C_sum += A[i, k] * B[k, j]
            }
            C[i, j] = C_sum
          }
        }
      }
    }

Loop bounds print with the constant offsets of their sums collected (``n - 1 + 1`` prints
``n``; :func:`tecomp.int_fold.fold_offsets`).  A scalar buffer (shape ``()``) is written by
its name alone.  ``Store(reduce="sum")`` prints
``+=``, ``"prod"`` prints ``*=`` and ``"max"``/``"min"`` print ``x = max(x, v)``.  The text holds
no object ids and no hash-ordered collections, so the same program prints byte-identical text.
"""

from __future__ import annotations

from .int_fold import fold_offsets
from .loopir import Allocate, Buffer, For, IfThenElse, LetStmt, LoweredFunc, Seq, Stmt, Store
from .printer import format_expr
from .stmt_functor import StmtVisitor

_INDENT = "  "


def _shape(buf: Buffer) -> str:
    dims = ", ".join(format_expr(s) for s in buf.shape)
    return f"{buf.dtype}[{dims}]"


def _target(buf: Buffer, indices: tuple) -> str:
    if not indices:
        return buf.name
    return f"{buf.name}[{', '.join(format_expr(i) for i in indices)}]"


class _Printer(StmtVisitor):
    """The lines of a statement, nested blocks indented by one level each."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.out: list[str] = []

    def line(self, text: str) -> None:
        self.out.append(_INDENT * self.depth + text)

    def block(self, head: str, *bodies: Stmt | None) -> None:
        """``head {``, each body one level deeper (``} else {`` between two), ``}``."""
        self.line(head + " {")
        for n, body in enumerate(bodies):
            if n:
                self.line("} else {")
            self.depth += 1
            self.visit(body)
            self.depth -= 1
        self.line("}")

    def visit(self, s: Stmt) -> None:
        if getattr(self, "visit_" + type(s).__name__, None) is None:
            self.line(f"<{type(s).__name__}>")
        else:
            super().visit(s)

    def visit_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_For(self, s: For) -> None:
        head = "for" if s.kind == "serial" else f"{s.kind} for"
        step = "" if s.step == 1 else f", step {s.step}"
        step += "" if s.unroll == 1 else f", unroll {s.unroll}"
        step += "" if s.slot is None else f", slot {s.slot.name}"
        lo, hi = format_expr(fold_offsets(s.lo)), format_expr(fold_offsets(s.hi))
        self.block(f"{head} ({s.var.name}, {lo}, {hi}{step})", s.body)

    def visit_Store(self, s: Store) -> None:
        lhs = _target(s.buffer, s.indices)
        v = format_expr(s.value)
        if s.reduce is None:
            self.line(f"{lhs} = {v}")
        elif s.reduce in ("sum", "prod"):
            self.line(f"{lhs} {'+' if s.reduce == 'sum' else '*'}= {v}")
        else:
            self.line(f"{lhs} = {s.reduce}({lhs}, {v})")

    def visit_Allocate(self, s: Allocate) -> None:
        scope = "" if s.buffer.scope == "temp" else f" ({s.buffer.scope})"
        self.block(f"allocate {s.buffer.name}: {_shape(s.buffer)}{scope}", s.body)

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        bodies = (s.then,) if s.else_ is None else (s.then, s.else_)
        self.block(f"if ({format_expr(s.cond)})", *bodies)

    def visit_LetStmt(self, s: LetStmt) -> None:
        self.block(f"let {s.var.name} = {format_expr(s.value)}", s.body)


def format_stmt(stmt: Stmt, indent: int = 0) -> str:
    """One statement (and everything nested in it) as indented text."""
    printer = _Printer(indent)
    printer.visit(stmt)
    return "\n".join(printer.out)


def format_signature(func: LoweredFunc) -> str:
    """``func name(inputs) -> (outputs) params(...)``: the header line of :func:`format_func`."""
    ins = ", ".join(f"{b.name}: {_shape(b)}" for b in func.inputs)
    outs = ", ".join(f"{b.name}: {_shape(b)}" for b in func.outputs)
    params = ""
    if func.params:
        params = f" params({', '.join(p.name for p in func.params)})"
    return f"func {func.name}({ins}) -> ({outs}){params}"


def format_func(func: LoweredFunc) -> str:
    """A whole lowered function: its signature, then its body in braces."""
    return f"{format_signature(func)} {{\n{format_stmt(func.body, 1)}\n}}"
