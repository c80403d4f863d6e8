"""Readable, deterministic text for the loop IR (C-like pseudo-code).

Expressions are printed by :func:`tecomp.printer.format_expr`; statements one a line, nested
blocks indented by two spaces::

    func matmul(A: float32[n, 64], B: float32[64, 32]) -> (C: float32[n, 32]) params(n) {
      parallel for (i, 0, n) {
        for (j, 0, 32) {
          C[i, j] = 0.0
        }
        for (k, 0, 64) {
          for (j, 0, 32) {
            C[i, j] += A[i, k] * B[k, j]
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

_INDENT = "  "


def _shape(buf: Buffer) -> str:
    dims = ", ".join(format_expr(s) for s in buf.shape)
    return f"{buf.dtype}[{dims}]"


def _target(buf: Buffer, indices: tuple) -> str:
    if not indices:
        return buf.name
    return f"{buf.name}[{', '.join(format_expr(i) for i in indices)}]"


def _lines(s: Stmt, depth: int, out: list[str]) -> None:
    pad = _INDENT * depth
    if isinstance(s, Seq):
        for x in s.stmts:
            _lines(x, depth, out)
    elif isinstance(s, For):
        head = "for" if s.kind == "serial" else f"{s.kind} for"
        step = "" if s.step == 1 else f", step {s.step}"
        lo, hi = format_expr(fold_offsets(s.lo)), format_expr(fold_offsets(s.hi))
        out.append(f"{pad}{head} ({s.var.name}, {lo}, {hi}"
                   f"{step}) {{")
        _lines(s.body, depth + 1, out)
        out.append(pad + "}")
    elif isinstance(s, Store):
        lhs = _target(s.buffer, s.indices)
        v = format_expr(s.value)
        if s.reduce is None:
            out.append(f"{pad}{lhs} = {v}")
        elif s.reduce == "sum":
            out.append(f"{pad}{lhs} += {v}")
        elif s.reduce == "prod":
            out.append(f"{pad}{lhs} *= {v}")
        else:
            out.append(f"{pad}{lhs} = {s.reduce}({lhs}, {v})")
    elif isinstance(s, Allocate):
        scope = "" if s.buffer.scope == "temp" else f" ({s.buffer.scope})"
        out.append(f"{pad}allocate {s.buffer.name}: {_shape(s.buffer)}{scope} {{")
        _lines(s.body, depth + 1, out)
        out.append(pad + "}")
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if ({format_expr(s.cond)}) {{")
        _lines(s.then, depth + 1, out)
        if s.else_ is not None:
            out.append(pad + "} else {")
            _lines(s.else_, depth + 1, out)
        out.append(pad + "}")
    elif isinstance(s, LetStmt):
        out.append(f"{pad}let {s.var.name} = {format_expr(s.value)} {{")
        _lines(s.body, depth + 1, out)
        out.append(pad + "}")
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def format_stmt(stmt: Stmt, indent: int = 0) -> str:
    """One statement (and everything nested in it) as indented text."""
    out: list[str] = []
    _lines(stmt, indent, out)
    return "\n".join(out)


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
