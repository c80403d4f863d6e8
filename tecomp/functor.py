"""Visitors and mutators over the expression IR, plus small traversal helpers.

:class:`ExprFunctor` dispatches on the node's class to ``visit_<Class>``; a missing method
raises an error naming the node.  :class:`ExprMutator` rebuilds only what changed (a node
whose children are unchanged is returned as is) and memoises shared subexpressions, as TVM's
``ExprMutator`` and Halide's ``IRGraphMutator`` do.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from . import expr as E
from .errors import TecompError
from .scan_op import ScanOp
from .tensor import ComputeOp, ScatterOp, Tensor


class ExprFunctor:
    """Dispatch ``visit(node)`` to ``visit_<NodeClass>``."""

    def visit(self, e: Any) -> Any:
        method = getattr(self, "visit_" + type(e).__name__, None)
        if method is None:
            raise TecompError(f"{type(self).__name__} has no rule for {type(e).__name__}: {e}")
        return method(e)


def children(e: E.Expr) -> tuple[E.Expr, ...]:
    """The direct sub-expressions of ``e`` (axis bounds of a reduction included)."""
    if isinstance(e, (E.BinaryOp, E.CmpOp, E.And, E.Or, E.Delta)):
        return (e.a, e.b)
    if isinstance(e, (E.Neg, E.Not)):
        return (e.a,)
    if isinstance(e, E.Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, E.Cast):
        return (e.value,)
    if isinstance(e, E.Call):
        return e.args
    if isinstance(e, E.TensorRead):
        return e.indices
    if isinstance(e, E.Reduce):
        out: list[E.Expr] = []
        for ax in e.axes:
            out += [ax.lo, ax.extent]
        out.append(e.body)
        if e.where is not None:
            out.append(e.where)
        return tuple(out)
    return ()


class ExprMutator(ExprFunctor):
    """Rebuild an expression bottom-up; unchanged subtrees are returned as they are."""

    def __init__(self) -> None:
        self._memo: dict[E.Expr, E.Expr] = {}

    def visit(self, e: Any) -> Any:
        try:
            return self._memo[e]
        except KeyError:
            pass
        out = super().visit(e)
        self._memo[e] = out
        return out

    def _leaf(self, e: E.Expr) -> E.Expr:
        return e

    visit_Const = visit_Zero = visit_Var = _leaf

    def _binary(self, e: E.BinaryOp) -> E.Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        if a is e.a and b is e.b:
            return e
        return rebuild(e, a, b)

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_FloorDiv = visit_Mod = _binary
    visit_Min = visit_Max = _binary
    visit_LT = visit_LE = visit_GT = visit_GE = visit_EQ = visit_NE = _binary
    visit_And = visit_Or = visit_Delta = _binary

    def _unary(self, e: E.Expr) -> E.Expr:
        a = self.visit(e.a)
        return e if a is e.a else rebuild(e, a)

    visit_Neg = visit_Not = _unary

    def visit_Select(self, e: E.Select) -> E.Expr:
        c, t, f = self.visit(e.cond), self.visit(e.t), self.visit(e.f)
        if c is e.cond and t is e.t and f is e.f:
            return e
        return E.select(c, t, f)

    def visit_Cast(self, e: E.Cast) -> E.Expr:
        v = self.visit(e.value)
        return e if v is e.value else E.cast(v, e.dtype)

    def visit_Call(self, e: E.Call) -> E.Expr:
        args = tuple(self.visit(a) for a in e.args)
        if all(x is y for x, y in zip(args, e.args)):
            return e
        return E.call(e.name, *args)

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        idx = tuple(self.visit(i) for i in e.indices)
        if all(x is y for x, y in zip(idx, e.indices)):
            return e
        return E.TensorRead(e.tensor, idx, e.dtype)

    def visit_axis(self, ax: E.IterVar) -> E.IterVar:
        lo, ext = self.visit(ax.lo), self.visit(ax.extent)
        if lo is ax.lo and ext is ax.extent:
            return ax
        return E.IterVar(ax.var, lo, ext, ax.kind)

    def visit_Reduce(self, e: E.Reduce) -> E.Expr:
        axes = tuple(self.visit_axis(a) for a in e.axes)
        body = self.visit(e.body)
        where = None if e.where is None else self.visit(e.where)
        if body is e.body and where is e.where and all(x is y for x, y in zip(axes, e.axes)):
            return e
        return make_reduce(e.combiner, body, axes, where, e.dtype)


def make_reduce(combiner: str, body: E.Expr, axes: tuple[E.IterVar, ...],
                where: E.Expr | None, dtype: str | None = None) -> E.Expr:
    """A reduction node; a symbolic-zero sum folds to zero, an always-true ``where`` drops."""
    dtype = dtype or body.dtype
    if isinstance(where, E.Const) and where.value:
        where = None
    if combiner == "sum" and isinstance(body, E.Zero):
        return E.Zero(dtype)
    if combiner == "sum" and isinstance(where, E.Const) and not where.value:
        return E.Zero(dtype)
    if body.dtype != dtype:
        body = E.cast(body, dtype)
    return E.Reduce(combiner, body, tuple(axes), where, dtype)


_REBUILD: dict[type, Callable[..., E.Expr]] = {
    E.Add: E.add, E.Sub: E.sub, E.Mul: E.mul, E.Div: E.div, E.FloorDiv: E.floordiv,
    E.Mod: E.mod, E.Min: E.minimum, E.Max: E.maximum, E.Neg: E.neg, E.Not: E.logical_not,
    E.And: E.logical_and, E.Or: E.logical_or,
    E.LT: lambda a, b: E.compare(E.LT, a, b), E.LE: lambda a, b: E.compare(E.LE, a, b),
    E.GT: lambda a, b: E.compare(E.GT, a, b), E.GE: lambda a, b: E.compare(E.GE, a, b),
    E.EQ: lambda a, b: E.compare(E.EQ, a, b), E.NE: lambda a, b: E.compare(E.NE, a, b),
}


def rebuild(e: E.Expr, *args: E.Expr) -> E.Expr:
    """Rebuild a node of ``e``'s kind from new children (through the smart constructors)."""
    if isinstance(e, E.Delta):
        return E.delta(args[0], args[1], e.dtype)
    if isinstance(e, E.Select):
        return E.select(*args)
    if isinstance(e, E.Cast):
        return E.cast(args[0], e.dtype)
    return _REBUILD[type(e)](*args)


class Substitute(ExprMutator):
    """Replace free variables; bound reduction axes are renamed when they would capture."""

    def __init__(self, mapping: dict[E.Var, E.Expr]) -> None:
        super().__init__()
        self.mapping = mapping
        self._avoid: set[str] | None = None

    def avoid(self) -> set[str]:
        if self._avoid is None:
            names: set[str] = set()
            for v in self.mapping.values():
                names |= {x.name for x in free_vars(v)}
            self._avoid = names
        return self._avoid

    def visit_Var(self, e: E.Var) -> E.Expr:
        return self.mapping.get(e, e)

    def visit_Reduce(self, e: E.Reduce) -> E.Expr:
        bound = {ax.var for ax in e.axes}
        inner = {k: v for k, v in self.mapping.items() if k not in bound}
        clash = [ax for ax in e.axes if ax.var.name in self.avoid()]
        axes = list(e.axes)
        if clash:
            taken = self.avoid() | {v.name for v in free_vars(e)} | {a.var.name for a in axes}
            for n, ax in enumerate(axes):
                if ax in clash:
                    nv = E.Var(fresh_name(ax.var.name, taken), ax.var.dtype)
                    taken.add(nv.name)
                    inner[ax.var] = nv
                    axes[n] = E.IterVar(nv, ax.lo, ax.extent, ax.kind)
        if inner.keys() == self.mapping.keys() and not clash:
            return super().visit_Reduce(e)
        sub = Substitute(inner)
        new_axes = tuple(E.IterVar(a.var, sub.visit(a.lo), sub.visit(a.extent), a.kind)
                         for a in axes)
        body = sub.visit(e.body)
        where = None if e.where is None else sub.visit(e.where)
        return make_reduce(e.combiner, body, new_axes, where, e.dtype)


def substitute(e: E.Expr, mapping: dict[E.Var, E.Expr]) -> E.Expr:
    """``e`` with free variables replaced according to ``mapping`` (capture-avoiding)."""
    if not mapping:
        return e
    return Substitute(mapping).visit(e)


def fresh_name(base: str, taken: Iterable[str]) -> str:
    """``base`` if unused, else ``base_1``, ``base_2``, ... (deterministic)."""
    taken = set(taken)
    if base not in taken:
        return base
    n = 1
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"


def free_vars(e: E.Expr) -> set[E.Var]:
    """Variables of ``e`` not bound by a reduction inside it."""
    out: set[E.Var] = set()
    memo: dict[int, frozenset[E.Var]] = {}

    def go(x: E.Expr) -> frozenset[E.Var]:
        k = id(x)
        if k in memo:
            return memo[k]
        if isinstance(x, E.Var):
            r = frozenset((x,))
        elif isinstance(x, E.Reduce):
            inner: set[E.Var] = set(go(x.body))
            if x.where is not None:
                inner |= go(x.where)
            inner -= {a.var for a in x.axes}
            earlier: set[E.Var] = set()  # an axis's bounds may use the axes before it
            for a in x.axes:
                inner |= (go(a.lo) | go(a.extent)) - earlier
                earlier.add(a.var)
            r = frozenset(inner)
        else:
            acc: set[E.Var] = set()
            for c in children(x):
                acc |= go(c)
            r = frozenset(acc)
        memo[k] = r
        return r

    out |= go(e)
    return out


def walk(e: E.Expr) -> Iterable[E.Expr]:
    """Every distinct node of ``e`` in pre-order (each shared node once)."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(reversed(children(x)))


def unconditional(e: E.Expr) -> list[E.Expr]:
    """Sub-expressions of ``e`` evaluated whenever ``e`` is (not inside select arms or
    reductions), outermost first."""
    out: list[E.Expr] = []
    stack = [e]
    seen: set[int] = set()
    while stack:
        x = stack.pop(0)
        if id(x) in seen:
            continue
        seen.add(id(x))
        out.append(x)
        if isinstance(x, E.Select):
            stack.append(x.cond)
        elif isinstance(x, (E.Reduce, E.And, E.Or)):
            continue
        elif isinstance(x, (E.BinaryOp, E.CmpOp)):
            stack += [x.a, x.b]
        elif isinstance(x, (E.Neg, E.Not)):
            stack.append(x.a)
        elif isinstance(x, E.Cast):
            stack.append(x.value)
        elif isinstance(x, E.Call):
            stack += list(x.args)
    return out


def tensor_reads(e: E.Expr) -> list[E.TensorRead]:
    """The tensor reads in ``e``, in order of first appearance."""
    return [x for x in walk(e) if isinstance(x, E.TensorRead)]


def op_exprs(t: Tensor) -> list[E.Expr]:
    """The expressions that define ``t`` (body; for a scatter: bounds, indices, value, where)."""
    op = t.op
    if isinstance(op, ComputeOp):
        return [op.body]
    if isinstance(op, ScatterOp):
        out = [x for a in op.axes for x in (a.lo, a.extent)] + list(op.indices) + [op.value]
        return out + ([op.where] if op.where is not None else [])
    return []


def input_tensors(t: Tensor) -> list[Tensor]:
    """The tensors ``t`` reads directly (shape expressions excluded), first appearance first."""
    if isinstance(t.op, ScanOp):  # a scan reads its inits and the outer tensors of its step
        return list(t.op.scan.outer)
    out: list[Tensor] = []
    seen: set[int] = set()
    if isinstance(t.op, ScatterOp) and t.op.init is not None:
        seen.add(id(t.op.init))
        out.append(t.op.init)
    reads = [r for e in op_exprs(t) for r in tensor_reads(e)]
    for r in reads:
        if id(r.tensor) not in seen:
            seen.add(id(r.tensor))
            out.append(r.tensor)
    return out


def topo_order(outputs: Iterable[Tensor]) -> list[Tensor]:
    """All tensors the outputs depend on, producers before consumers, deterministic."""
    order: list[Tensor] = []
    state: dict[int, int] = {}
    for root in outputs:
        stack: list[tuple[Tensor, int]] = [(root, 0)]
        while stack:
            t, i = stack.pop()
            if i == 0:
                if state.get(id(t)) == 2:
                    continue
                state[id(t)] = 1
            deps = input_tensors(t)
            if i < len(deps):
                stack.append((t, i + 1))
                d = deps[i]
                if state.get(id(d)) != 2:
                    stack.append((d, 0))
            else:
                if state.get(id(t)) != 2:
                    state[id(t)] = 2
                    order.append(t)
    return order


def consumers(order: list[Tensor]) -> dict[int, list[Tensor]]:
    """Map ``id(tensor)`` to the tensors in ``order`` that read it."""
    out: dict[int, list[Tensor]] = {id(t): [] for t in order}
    for t in order:
        for d in input_tensors(t):
            out.setdefault(id(d), []).append(t)
    return out


class RemapReads(ExprMutator):
    """Point tensor reads at rewritten producers (``new`` maps ``id(old)`` to the new one)."""

    def __init__(self, new: dict[int, Tensor]) -> None:
        super().__init__()
        self.new = new

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        idx = tuple(self.visit(i) for i in e.indices)
        t = self.new.get(id(e.tensor), e.tensor)
        if t is e.tensor and all(x is y for x, y in zip(idx, e.indices)):
            return e
        return E.TensorRead(t, idx, e.dtype)


def rewrite_stages(outputs: Sequence[Tensor],
                   rewrite: Callable[[Tensor, E.Expr], Tensor | None]) -> list[Tensor]:
    """Rewrite a DAG stage by stage, producers first (the driver of tensor-level passes).

    Each compute stage's body, with its reads pointed at already rewritten producers, goes to
    ``rewrite(t, body)``; it returns the new tensor, or None to keep the stage (rebuilt only
    when its reads changed).  Scatter stages are rebuilt with re-pointed reads.
    """
    new: dict[int, Tensor] = {}
    _rewrite_into(list(outputs), rewrite, new, set(), {})
    return [new.get(id(t), t) for t in outputs]


def _rewrite_into(outputs: list[Tensor], rewrite: Callable[[Tensor, E.Expr], Tensor | None],
                  new: dict[int, Tensor], done: set[int], scans: dict[int, Any]) -> None:
    for t in topo_order(list(outputs)):
        if id(t) in done:
            continue
        done.add(id(t))
        remap = RemapReads(new)
        op = t.op
        if isinstance(op, ComputeOp):
            body = remap.visit(op.body)
            out = rewrite(t, body)
            if out is None and body is not op.body:
                out = Tensor(t.name, t.shape, t.dtype, ComputeOp(op.axes, body, op.tag),
                             dict(t.attrs))
            if out is not None:
                new[id(t)] = out
        elif isinstance(op, ScatterOp):
            init = new.get(id(op.init), op.init) if op.init is not None else None
            axes = tuple(remap.visit_axis(a) for a in op.axes)
            idx = tuple(remap.visit(i) for i in op.indices)
            value = remap.visit(op.value)
            where = None if op.where is None else remap.visit(op.where)
            changed = (init is not op.init or value is not op.value or where is not op.where
                       or any(x is not y for x, y in zip(axes + idx, op.axes + op.indices)))
            if changed:
                new[id(t)] = Tensor(t.name, t.shape, t.dtype,
                                    ScatterOp(axes, idx, value, where, init), dict(t.attrs))
        elif isinstance(op, ScanOp):  # the step's stages are rewritten too
            sc = op.scan
            if id(sc) not in scans:
                from .scan import rescan

                parts = list(sc.update) + list(sc.init)
                _rewrite_into(parts, rewrite, new, done, scans)
                got = [new.get(id(x), x) for x in parts]
                k = len(sc.update)
                changed = any(a is not b for a, b in zip(got, parts))
                scans[id(sc)] = rescan(sc, got[k:], got[:k]) if changed else sc
            if scans[id(sc)] is not sc:
                new[id(t)] = scans[id(sc)].outputs[op.index]
