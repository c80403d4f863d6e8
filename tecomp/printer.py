"""Readable, deterministic text for expressions and compute DAGs (``tc.show``).

The same program always prints byte-identical text: tensors are listed in a deterministic
topological order and tensors sharing a name are told apart as ``name``, ``name#1``, ...
"""

from __future__ import annotations

from typing import Iterable

from . import expr as E
from .functor import topo_order
from .loopir import BufferLoad
from .scan_op import ScanOp
from .tensor import ComputeOp, ScatterOp, Tensor

_BIN = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.Div: "/", E.FloorDiv: "//", E.Mod: "%"}
_PREC = {E.Or: 1, E.And: 2, E.Not: 3, E.CmpOp: 4, E.Add: 5, E.Sub: 5, E.Mul: 6, E.Div: 6,
         E.FloorDiv: 6, E.Mod: 6, E.Neg: 7}


def _prec(e: E.Expr) -> int:
    for cls, p in _PREC.items():
        if isinstance(e, cls):
            return p
    return 10


def _const(c: E.Const) -> str:
    if c.dtype == "bool":
        return "True" if c.value else "False"
    if isinstance(c.value, float):
        s = repr(c.value)
        return s if c.dtype in ("float32",) else f"{s}:{c.dtype}"
    return str(c.value) if c.dtype in ("int64",) else f"{c.value}:{c.dtype}"


class _Printer:
    def __init__(self, names: dict[int, str] | None = None) -> None:
        self.names = names or {}

    def tname(self, t: Tensor) -> str:
        return self.names.get(id(t), t.name)

    def fmt(self, e: E.Expr, parent: int = 0) -> str:
        s, p = self._fmt(e)
        return f"({s})" if p < parent else s

    def _fmt(self, e: E.Expr) -> tuple[str, int]:
        if isinstance(e, E.IterVar):
            return e.var.name, 10
        if isinstance(e, E.Var):
            return e.name, 10
        if isinstance(e, E.Const):
            return _const(e), 10
        if isinstance(e, E.Zero):
            return f"zero:{e.dtype}", 10
        p = _prec(e)
        if type(e) in _BIN:
            # left-associative: the right operand needs parentheses at equal precedence
            return f"{self.fmt(e.a, p)} {_BIN[type(e)]} {self.fmt(e.b, p + 1)}", p
        if isinstance(e, (E.Min, E.Max)):
            return f"{type(e).__name__.lower()}({self.fmt(e.a)}, {self.fmt(e.b)})", 10
        if isinstance(e, E.Neg):
            return f"-{self.fmt(e.a, p + 1)}", p
        if isinstance(e, E.CmpOp):
            return f"{self.fmt(e.a, p + 1)} {E.CMP_NAMES[type(e)]} {self.fmt(e.b, p + 1)}", p
        if isinstance(e, E.And):
            return f"{self.fmt(e.a, p)} && {self.fmt(e.b, p + 1)}", p
        if isinstance(e, E.Or):
            return f"{self.fmt(e.a, p)} || {self.fmt(e.b, p + 1)}", p
        if isinstance(e, E.Not):
            return f"!{self.fmt(e.a, p + 1)}", p
        if isinstance(e, E.Select):
            return f"select({self.fmt(e.cond)}, {self.fmt(e.t)}, {self.fmt(e.f)})", 10
        if isinstance(e, E.Cast):
            return f"{e.dtype}({self.fmt(e.value)})", 10
        if isinstance(e, E.Call):
            return f"{e.name}({', '.join(self.fmt(a) for a in e.args)})", 10
        if isinstance(e, E.TensorRead):
            return f"{self.tname(e.tensor)}[{', '.join(self.fmt(i) for i in e.indices)}]", 10
        if isinstance(e, BufferLoad):
            if not e.indices:
                return e.buffer.name, 10
            return f"{e.buffer.name}[{', '.join(self.fmt(i) for i in e.indices)}]", 10
        if isinstance(e, E.Delta):
            return f"delta({self.fmt(e.a)}, {self.fmt(e.b)})", 10
        if isinstance(e, E.Reduce):
            axes = ", ".join(self.axis(a) for a in e.axes)
            where = "" if e.where is None else f", where={self.fmt(e.where)}"
            return f"{e.combiner}({self.fmt(e.body)}, axis=[{axes}]{where})", 10
        return f"<{type(e).__name__}>", 10

    def axis(self, a: E.IterVar) -> str:
        if isinstance(a.lo, E.Const) and a.lo.value == 0:
            return f"{a.var.name}:{self.fmt(a.extent)}"
        ext = a.extent
        if (isinstance(ext, E.Add) and isinstance(ext.a, E.Sub) and ext.a.b == a.lo
                and isinstance(ext.b, E.Const)):
            return f"{a.var.name}:[{self.fmt(a.lo)}, {self.fmt(ext.a.a + ext.b)})"
        return f"{a.var.name}:[{self.fmt(a.lo)}, {self.fmt(a.lo + a.extent)})"


def format_expr(e: E.Expr, names: dict[int, str] | None = None) -> str:
    """One expression as text."""
    return _Printer(names).fmt(e)


def unique_names(tensors: Iterable[Tensor]) -> dict[int, str]:
    """Deterministic distinct display names for tensors sharing a name."""
    names: dict[int, str] = {}
    count: dict[str, int] = {}
    for t in tensors:
        n = count.get(t.name, 0)
        count[t.name] = n + 1
        names[id(t)] = t.name if n == 0 else f"{t.name}#{n}"
    return names


def show(tensors: Tensor | Iterable[Tensor]) -> str:
    """The whole compute DAG of ``tensors`` as text, producers first, one stage a line.

    Each line is ``name[axes] = body    : dtype[shape]``; reductions print their axes with
    extents (``sum(..., axis=[k:8])``).  The text is deterministic (names that repeat get a
    suffix), so it can be compared and diffed.

    Example::

        >>> A = tc.placeholder((4, 8), name="A")
        >>> k = tc.reduce_axis(8, name="k")
        >>> S = tc.compute((4,), lambda i: tc.sum(A[i, k] * 2.0, axis=k), name="S")
        >>> print(tc.show(S))
        A = placeholder    : float32[4, 8]
        S[i] = sum(A[i, k] * 2.0, axis=[k:8])    : float32[4]
    """
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    order = topo_order(list(tensors))
    names = unique_names(order)
    p = _Printer(names)
    lines = []
    for t in order:
        shape = ", ".join(p.fmt(s) for s in t.shape)
        if isinstance(t.op, ComputeOp):
            axes = ", ".join(a.var.name for a in t.op.axes)
            tag = f"  # tag={t.op.tag}" if t.op.tag else ""
            lines.append(f"{names[id(t)]}[{axes}] = {p.fmt(t.op.body)}"
                         f"    : {t.dtype}[{shape}]{tag}")
        elif isinstance(t.op, ScatterOp):
            op = t.op
            axes = ", ".join(p.axis(a) for a in op.axes)
            where = "" if op.where is None else f" where {p.fmt(op.where)}"
            init = "0" if op.init is None else names[id(op.init)]
            idx = ", ".join(p.fmt(i) for i in op.indices)
            lines.append(f"{names[id(t)]} = {init}; for [{axes}]{where}: "
                         f"{names[id(t)]}[{idx}] += {p.fmt(op.value)}    : {t.dtype}[{shape}]")
        elif isinstance(t.op, ScanOp):
            lines.extend(_scan_lines(t, p, names))
        elif t.is_constant:
            lines.append(f"{names[id(t)]} = constant    : {t.dtype}[{shape}]")
        else:
            lines.append(f"{names[id(t)]} = placeholder    : {t.dtype}[{shape}]")
    return "\n".join(lines)


def _scan_lines(t: Tensor, p: _Printer, names: dict[int, str]) -> list[str]:
    """A scan state: ``S = scan(init, steps t = L..T-1 { body })``, the body one stage a line."""
    sc = t.op.scan
    shape = ", ".join(p.fmt(s) for s in t.shape)
    k = t.op.index
    when = (f"t = {p.fmt(sc.extent)} - {sc.steps} - 1 down to 0" if sc.reverse
            else f"t = {sc.steps} .. {p.fmt(sc.extent)} - 1")
    out = [f"{names[id(t)]} = scan {sc.name!r} state {k} ({sc.state[k].name}): "
           f"init {names.get(id(sc.init[k]), sc.init[k].name)}, update "
           f"{sc.update[k].name}, steps {when}    : {t.dtype}[{shape}]"]
    if k == 0 or not any(id(o) in names for o in sc.outputs[:k]):
        for b in sc.body:
            axes = ", ".join(a.var.name for a in b.op.axes)
            if isinstance(b.op, ScatterOp):
                op = b.op
                dom = ", ".join(f"{a.var.name}:{p.fmt(a.extent)}" for a in op.axes)
                dst = ", ".join(p.fmt(i) for i in op.indices)
                init = op.init.name if op.init is not None else "0"
                out.append(f"    | {b.name} = {init}; for [{dom}]: {b.name}[{dst}] += "
                           f"{p.fmt(op.value)}")
                continue
            out.append(f"    | {b.name}[{axes}] = {p.fmt(b.op.body)}")
    return out
