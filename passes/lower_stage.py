"""Lowering one compute stage to a loop nest, with every reduction hoisted into a local.

A stage ``T[axes] = body`` becomes one loop per data axis around a store of ``body`` into
``T``'s buffer.  Expressions are converted to loop IR on the way: a read of a tensor becomes a
:class:`~tecomp.loopir.BufferLoad` of its buffer, ``Delta(a, b)`` becomes
``select(a == b, 1, 0)`` and a symbolic ``Zero`` a constant.

Every :class:`~tecomp.expr.Reduce` node, wherever it sits in the body (nested reductions
included), becomes a scalar ``"local"`` buffer::

    allocate acc: float32[] (local) {
      acc = <identity of the combiner>           # 0, 1, -inf/+inf or the integer min/max
      for (k, lo, lo + extent) {                 # one loop per reduction axis, in order
        if (where) {                             # only when the reduction has a where
          acc += body                            # Store(acc, (), body, reduce=combiner)
        }
      }
      ... the expression, with the Reduce replaced by a load of acc ...
    }

Accumulation always uses ``Store(local, (), value, reduce=combiner)``.  Bounds of a
reduction axis may refer to data axes and to earlier axes of the same reduction: loop bounds
are plain expressions.  A reduction that does not depend on the innermost enclosing loop is
*hoisted* out of it (loop-invariant code motion at the granularity of scopes: each data loop
and each reduction loop is a scope); hoisting stops at a guard (a ``select`` arm, the right
operand of ``&``/``|``, a ``where``) and at a loop whose range may be empty, and a hoisted
reduction keeps the guards it was under as an ``IfThenElse`` around its loops, so it reads
memory only where the original program would.  Worked example::

    Y[i, j] = exp(X[i, j] - max(X[i, k], axis=k))     # the max depends on i only

lowers to ``for i { acc = -inf; for k { acc = max(acc, X[i, k]) }; for j { Y[i, j] =
exp(X[i, j] - acc) } }``: the max is computed once per ``i``, not once per ``(i, j)``.
Structurally equal reductions under the same guards in one scope share one local.

Reduction axes are renamed (``k`` -> ``k_1``) when their name is already bound by an
enclosing loop or is a size parameter, so no loop variable ever shadows another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import LoweringError
from tecomp.functor import free_vars, fresh_name, substitute
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, IfThenElse, Seq, Stmt, Store
from tecomp.tensor import ScatterOp, Tensor


@dataclass(frozen=True)
class AllocMark:
    """A marker in a statement list: the rest of the list runs inside ``Allocate(buffer)``."""

    buffer: Buffer


def block(items: list) -> Stmt:
    """Fold a list of statements and :class:`AllocMark` markers into one statement."""
    out: list[Stmt] = []
    for n, it in enumerate(items):
        if isinstance(it, AllocMark):
            out.append(Allocate(it.buffer, block(items[n + 1:])))
            break
        if isinstance(it, Seq):
            out.extend(it.stmts)
        else:
            out.append(it)
    return out[0] if len(out) == 1 else Seq(tuple(out))


def identity(combiner: str, dtype: str) -> E.Const:
    """The identity of a combiner: the value of an empty reduction."""
    if combiner == "sum":
        return E.Const(0.0 if dtypes.is_float(dtype) else 0, dtype)
    if combiner == "prod":
        return E.Const(1.0 if dtypes.is_float(dtype) else 1, dtype)
    if dtypes.is_float(dtype):
        return E.Const(float("-inf") if combiner == "max" else float("inf"), dtype)
    info = np.iinfo(dtypes.to_numpy(dtype))
    return E.Const(int(info.min if combiner == "max" else info.max), dtype)


def upper(lo: E.Expr, extent: E.Expr) -> E.Expr:
    """``lo + extent`` without the round trip of ``reduce_axis((lo, hi))``'s ``hi - lo``."""
    if isinstance(extent, E.Sub) and extent.b == lo:
        return extent.a  # lo + (hi - lo) -> hi
    if (isinstance(extent, E.Add) and isinstance(extent.a, E.Sub) and extent.a.b == lo
            and isinstance(extent.b, E.Const)):
        return E.add(extent.a.a, extent.b)  # lo + ((hi - lo) + c) -> hi + c
    return E.add(lo, extent)


def nonempty(lo: E.Expr, hi: E.Expr) -> E.Expr | None:
    """The condition ``hi > lo`` (None when it holds for constants)."""
    c = E.compare(E.GT, hi, lo)
    if isinstance(c, E.Const):
        return None if c.value else c
    return c


def rename_axes(axes: tuple[E.IterVar, ...], inside: tuple[E.Expr | None, ...],
                taken: set[str]) -> tuple[tuple[E.IterVar, ...], tuple[E.Expr | None, ...]]:
    """Rename ``axes`` away from the names in ``taken``.

    ``inside`` are the expressions in the scope of all axes (a reduction's body and where);
    the bounds of an axis see the axes before it.  Returns the new axes and ``inside``.
    """
    if not any(ax.var.name in taken for ax in axes):
        return axes, inside
    avoid = set(taken) | {ax.var.name for ax in axes}
    for e in inside:
        if e is not None:
            avoid |= {v.name for v in free_vars(e)}
    for ax in axes:
        avoid |= {v.name for v in free_vars(ax.lo) | free_vars(ax.extent)}
    mapping: dict[E.Var, E.Expr] = {}
    out = []
    for ax in axes:
        lo, ext = substitute(ax.lo, mapping), substitute(ax.extent, mapping)
        var = ax.var
        if var.name in taken:
            var = E.Var(fresh_name(var.name, avoid), var.dtype)
            avoid.add(var.name)
            mapping[ax.var] = var
        out.append(E.IterVar(var, lo, ext, ax.kind))
    return tuple(out), tuple(None if e is None else substitute(e, mapping) for e in inside)


class Scope:
    """A loop body being built: the variables its loop binds and the statements in it."""

    def __init__(self, parent: Scope | None, bound: tuple[E.Var, ...],
                 origin_guards: tuple[E.Expr, ...] = (), enter: E.Expr | None = None) -> None:
        self.parent = parent
        self.bound = bound
        self.origin_guards = origin_guards  # guards in the parent where this loop starts
        self.enter = enter  # condition for the loop to run at least once (None: always)
        self.items: list = []
        self.memo: dict[tuple[E.Expr, tuple[E.Expr, ...]], Buffer] = {}

    def names(self) -> set[str]:
        out: set[str] = set()
        s: Scope | None = self
        while s is not None:
            out |= {v.name for v in s.bound}
            s = s.parent
        return out


@dataclass
class Context:
    """What lowering a stage needs from the whole function."""

    buffers: dict[int, Buffer]  # id(tensor) -> buffer that holds it
    params: set[str]
    taken: set[str] = field(default_factory=set)  # names no new buffer may take

    def fresh(self, base: str) -> str:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        return name

    def buffer_of(self, t: Tensor) -> Buffer:
        try:
            return self.buffers[id(t)]
        except KeyError:
            raise LoweringError(f"internal: tensor {t.name!r} has no buffer") from None


def _and_all(conds: tuple[E.Expr, ...]) -> E.Expr:
    out: E.Expr = E.Const(True, "bool")
    for c in conds:
        out = E.logical_and(out, c)
    return out


class ExprLowerer:
    """Convert tensor-IR expressions of one stage to loop IR, hoisting reductions."""

    def __init__(self, ctx: Context, stage: str) -> None:
        self.ctx = ctx
        self.stage = stage
        self._memo: dict[tuple[E.Expr, int, tuple[E.Expr, ...]], E.Expr] = {}

    def conv(self, e: E.Expr, scope: Scope, guards: tuple[E.Expr, ...] = ()) -> E.Expr:
        key = (e, id(scope), guards)
        out = self._memo.get(key)
        if out is None:
            out = self._conv(e, scope, guards)
            self._memo[key] = out
        return out

    def _conv(self, e: E.Expr, sc: Scope, g: tuple[E.Expr, ...]) -> E.Expr:
        c = self.conv
        if isinstance(e, (E.Const, E.Var)):
            return e
        if isinstance(e, E.IterVar):
            return e.var
        if isinstance(e, E.Zero):
            return E.Const(0.0 if dtypes.is_float(e.dtype) else 0, e.dtype)
        if isinstance(e, (E.BinaryOp, E.CmpOp)):
            return type(e)(c(e.a, sc, g), c(e.b, sc, g), e.dtype)
        if isinstance(e, E.And):
            a = c(e.a, sc, g)
            return E.And(a, c(e.b, sc, g + (a,)))
        if isinstance(e, E.Or):
            a = c(e.a, sc, g)
            return E.Or(a, c(e.b, sc, g + (E.logical_not(a),)))
        if isinstance(e, E.Neg):
            return E.Neg(c(e.a, sc, g), e.dtype)
        if isinstance(e, E.Not):
            return E.Not(c(e.a, sc, g))
        if isinstance(e, E.Select):
            cond = c(e.cond, sc, g)
            return E.Select(cond, c(e.t, sc, g + (cond,)),
                            c(e.f, sc, g + (E.logical_not(cond),)), e.dtype)
        if isinstance(e, E.Cast):
            return E.Cast(c(e.value, sc, g), e.dtype)
        if isinstance(e, E.Call):
            return E.Call(e.name, tuple(c(a, sc, g) for a in e.args), e.dtype)
        if isinstance(e, E.Delta):
            one = E.Const(1.0 if dtypes.is_float(e.dtype) else 1, e.dtype)
            zero = E.Const(0.0 if dtypes.is_float(e.dtype) else 0, e.dtype)
            return E.Select(E.EQ(c(e.a, sc, g), c(e.b, sc, g)), one, zero, e.dtype)
        if isinstance(e, E.TensorRead):
            buf = self.ctx.buffer_of(e.tensor)
            return BufferLoad(buf, tuple(c(i, sc, g) for i in e.indices), e.dtype)
        if isinstance(e, BufferLoad):
            return e
        if isinstance(e, E.Reduce):
            return self.hoist(e, sc, g)
        raise LoweringError(f"cannot lower the expression {e} ({type(e).__name__}) in stage "
                            f"{self.stage!r}")

    def hoist(self, r: E.Reduce, scope: Scope, guards: tuple[E.Expr, ...]) -> E.Expr:
        """Compute ``r`` into a local in the outermost legal scope; return its load."""
        fv = free_vars(r)
        while scope.parent is not None and not guards and not (fv & set(scope.bound)):
            guards = scope.origin_guards + (() if scope.enter is None else (scope.enter,))
            scope = scope.parent
        key = (r, guards)
        if key in scope.memo:
            return BufferLoad(scope.memo[key], (), r.dtype)
        if r.combiner not in E.REDUCERS:
            raise LoweringError(f"unknown combiner {r.combiner!r} in {r} (stage {self.stage!r})")
        local = Buffer(self.ctx.fresh(f"{self.stage}_{r.combiner}"), (), r.dtype, "local")
        scope.memo[key] = local
        scope.items.append(AllocMark(local))
        scope.items.append(Store(local, (), identity(r.combiner, r.dtype)))
        axes, (body, where) = rename_axes(r.axes, (r.body, r.where),
                                          scope.names() | self.ctx.params)
        stmt = self.nest(scope, guards, axes, body, where,
                         lambda inner, g, value: Store(local, (), value, r.combiner))
        if guards:
            stmt = IfThenElse(_and_all(guards), stmt)
        scope.items.append(stmt)
        return BufferLoad(local, (), r.dtype)

    def nest(self, scope: Scope, guards: tuple[E.Expr, ...], axes: tuple[E.IterVar, ...],
             value: E.Expr, where: E.Expr | None,
             store: Callable[[Scope, tuple[E.Expr, ...], E.Expr], Stmt]) -> Stmt:
        """Loops over ``axes`` (bounds converted in ``scope`` under ``guards``) around
        ``store(innermost scope, guards there, converted value)``, guarded by ``where``."""
        loops: list[tuple[E.Var, E.Expr, E.Expr, Scope]] = []
        parent, pguards = scope, guards
        for ax in axes:
            lo = self.conv(ax.lo, parent, pguards)
            hi = self.conv(upper(ax.lo, ax.extent), parent, pguards)
            inner = Scope(parent, (ax.var,), pguards, nonempty(lo, hi))
            loops.append((ax.var, lo, hi, inner))
            parent, pguards = inner, ()
        innermost = loops[-1][3] if loops else scope
        if where is None:
            stmt: Stmt = store(innermost, (), self.conv(value, innermost))
        else:
            w = self.conv(where, innermost)
            stmt = IfThenElse(w, store(innermost, (w,), self.conv(value, innermost, (w,))))
        stmt = block(innermost.items + [stmt])
        for n in range(len(loops) - 1, -1, -1):
            var, lo, hi, _ = loops[n]
            loop = For(var, lo, hi, stmt)
            stmt = block(loops[n - 1][3].items + [loop]) if n > 0 else loop
        return stmt


def lower_stage(ctx: Context, stage: str, axes: tuple[E.IterVar, ...], body: E.Expr,
                buf: Buffer, *, parallel: bool = True) -> Stmt:
    """``buf[axes] = body`` as a loop nest (outermost data loop ``"parallel"``)."""
    low = ExprLowerer(ctx, stage)
    scopes = [Scope(None, ())]
    bounds = []
    for ax in axes:
        lo = low.conv(ax.lo, scopes[-1])
        hi = low.conv(upper(ax.lo, ax.extent), scopes[-1])
        bounds.append((lo, hi))
        scopes.append(Scope(scopes[-1], (ax.var,), (), nonempty(lo, hi)))
    value = low.conv(body, scopes[-1])
    scopes[-1].items.append(Store(buf, tuple(ax.var for ax in axes), value))
    stmt = block(scopes[-1].items)
    for n in range(len(axes) - 1, -1, -1):
        kind = "parallel" if n == 0 and parallel else "serial"
        stmt = block(scopes[n].items + [For(axes[n].var, *bounds[n], stmt, kind=kind)])
    return stmt


def expression_lowerer(ctx: Context, stage: str) -> Callable[[E.Expr], E.Expr]:
    """A converter for reduction-free expressions (reads become loads)."""
    low = ExprLowerer(ctx, stage)
    root = Scope(None, ())

    def conv(e: E.Expr) -> E.Expr:
        out = low.conv(e, root)
        if root.items:
            raise LoweringError(f"internal: a reduction in {e} needs lower_stage")
        return out

    return conv


def lower_scatter(ctx: Context, stage: str, op: ScatterOp, exprs: tuple[E.Expr, ...],
                  buf: Buffer) -> Stmt:
    """``for axes where w: buf[indices] += value`` (serial: destinations may repeat).

    ``exprs`` are the scatter's expressions in :func:`tecomp.functor.op_exprs` order (after
    inlining); ``buf`` must already hold the initial values.
    """
    n, ni = len(op.axes), len(op.indices)
    axes = tuple(E.IterVar(ax.var, exprs[2 * m], exprs[2 * m + 1], ax.kind)
                 for m, ax in enumerate(op.axes))
    indices = exprs[2 * n:2 * n + ni]
    value = exprs[2 * n + ni]
    where = exprs[2 * n + ni + 1] if op.where is not None else None
    axes, inside = rename_axes(axes, (value, where) + indices, set(ctx.params))
    value, where, indices = inside[0], inside[1], inside[2:]
    low = ExprLowerer(ctx, stage)
    root = Scope(None, ())

    def store(inner: Scope, g: tuple[E.Expr, ...], v: E.Expr) -> Stmt:
        idx = tuple(low.conv(i, inner, g) for i in indices)
        return Store(buf, idx, v, "sum")

    return block(root.items + [low.nest(root, (), axes, value, where, store)])


def fill(dst: Buffer, src: Buffer | None, taken: set[str]) -> Stmt:
    """``dst[...] = src[...]`` (or the dtype's zero) over the whole shape, outermost loop
    ``"parallel"``."""
    names = set(taken)
    loop_vars = []
    for d in range(len(dst.shape)):
        v = E.Var(fresh_name(f"i{d}", names))
        names.add(v.name)
        loop_vars.append(v)
    idx = tuple(loop_vars)
    val = identity("sum", dst.dtype) if src is None else BufferLoad(src, idx, src.dtype)
    stmt: Stmt = Store(dst, idx, val)
    for d in range(len(dst.shape) - 1, -1, -1):
        stmt = For(loop_vars[d], E.Const(0, "int64"), dst.shape[d], stmt,
                   kind="parallel" if d == 0 else "serial")
    return stmt
