"""Lowering a scan (:class:`tecomp.scan_op.ScanOp`) to a sequential loop over time.

A scan with states ``S_k`` (buffers of shape ``(T, ...)``), ``L`` given steps and body stages
``B_1 .. B_n`` in step order becomes::

    S_k[...] = 0; B_j[...] = 0                       # rows never written read as zeros
    for (r, 0, L) { S_k[r, ...] = init_k[r, ...] }   # the given steps
    for (t, L, T) {                                  # serial: step t needs step t - d
      for (t_1, t, t + 1) { for (i, ...) { B_1[t_1, i] = body_1 } }
      ...                                            # one row of every body stage, in order
    }

An update ``U_k`` stores into its own buffer, whose row is then copied into ``S_k``'s (so no
stage writes the buffer it reads: the CPU scheduler's register blocking and the vectoriser
need that); the state placeholder reads ``S_k``'s buffer, so the state read
``state[t - 1, j]`` is a load of row ``t - 1`` of the result.  A
reverse scan runs ``u = 0 .. T - L - 1`` with ``t = T - L - 1 - u`` (a ``LetStmt``), and its
given steps fill the last ``L`` rows.  The body stages keep full ``(T, ...)`` buffers (a
reverse-mode derivative reads them back).  The row loop of a stage is the one-trip loop over
its own time axis, so each stage is lowered like any other stage
(:func:`.lower_stage.lower_stage`; the CPU schedule then orders its sums as any other); the
loop inside it (the first non-time axis) is ``"parallel"`` when the step is large enough to
be worth threads (``PARALLEL_ROW`` elements).
"""

from __future__ import annotations

import re

from tecomp import expr as E
from tecomp.functor import fresh_name, op_exprs, walk
from tecomp.loopir import Buffer, BufferLoad, For, LetStmt, Stmt, Store
from tecomp.scan import row_scatter, scatter_time
from tecomp.scan_op import Scan
from tecomp.tensor import ScatterOp, Tensor

from .lower_stage import (
    AllocMark,
    Context,
    block,
    fill,
    lower_scatter,
    lower_stage,
)

PARALLEL_ELEMENTWISE = False  # element-wise steps stay serial: a fork-join costs more
PARALLEL_ROW = 1 << 12  # elements of one step's row from which its loop may use threads


def _ident(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name or "t")
    return s if s and not s[0].isdigit() else "_" + s


def _names(sc: Scan) -> set[str]:
    names: set[str] = set()
    for b in sc.body:
        names |= {a.var.name for a in b.op.axes}
        for x in (x for e in op_exprs(b) for x in walk(e)):
            if isinstance(x, E.Var):
                names.add(x.name)
            elif isinstance(x, E.Reduce):
                names |= {a.var.name for a in x.axes}
    return names


def _copy_rows(dst: Buffer, src: Buffer, offset: E.Expr, taken: set[str]) -> Stmt:
    """``dst[offset + r, ...] = src[r, ...]`` over ``src``'s shape."""
    names = set(taken)
    vs = []
    for d in range(len(src.shape)):
        v = E.Var(fresh_name(f"r{d}", names))
        names.add(v.name)
        vs.append(v)
    stmt: Stmt = Store(dst, (E.add(offset, vs[0]),) + tuple(vs[1:]),
                       BufferLoad(src, tuple(vs), src.dtype))
    for d in range(len(src.shape) - 1, -1, -1):
        stmt = For(vs[d], E.Const(0, "int64"), src.shape[d], stmt)
    return stmt


def _copy_row(dst: Buffer, src: Buffer, t: E.Var, taken: set[str]) -> Stmt:
    """``dst[t, ...] = src[t, ...]`` (one row)."""
    names = set(taken)
    vs = []
    for d in range(1, len(src.shape)):
        v = E.Var(fresh_name(f"c{d}", names))
        names.add(v.name)
        vs.append(v)
    idx = (t,) + tuple(vs)
    stmt: Stmt = Store(dst, idx, BufferLoad(src, idx, src.dtype))
    for d in range(len(vs) - 1, -1, -1):
        stmt = For(vs[d], E.Const(0, "int64"), src.shape[d + 1], stmt)
    return stmt


def _row_elems(t: Tensor) -> int | None:
    n = 1
    for s in t.shape[1:]:
        if not isinstance(s, E.Const):
            return None
        n *= int(s.value)
    return n


def _scatter_row(ctx: Context, b: Tensor, tv: E.Var) -> list[Stmt]:
    """Row ``tv`` of a step scatter: its init's row (the buffer starts as zeros), then the
    adds that land in that row (:func:`tecomp.scan.row_scatter`), serial."""
    buf = ctx.buffer_of(b)
    out: list[Stmt] = []
    if b.op.init is not None:
        out.append(_copy_row(buf, ctx.buffer_of(b.op.init), tv, ctx.taken))
    m, c = scatter_time(b)
    part = Tensor(b.name, b.shape, b.dtype, row_scatter(b.op, m, c, tv))
    out.append(lower_scatter(ctx, buf.name, part.op, tuple(op_exprs(part)), buf))
    return out


def lower_scan(ctx: Context, sc: Scan, members: list[Tensor]) -> list:
    """Statement items (with :class:`AllocMark` markers) computing every state of ``sc``.

    ``members`` are the scan's output tensors in the program; those with a buffer in
    ``ctx.buffers`` (outputs) receive their state there, the others are bound to the state
    buffers.  The inits and the outer tensors must already have buffers.
    """
    ctx.taken |= _names(sc)
    items: list = []
    copies: list[Stmt] = []
    state_bufs: list[Buffer] = []
    for k, s in enumerate(sc.state):
        mine = [m for m in members if m.op.index == k]
        have = [m for m in mine if id(m) in ctx.buffers]
        if have:
            buf = ctx.buffers[id(have[0])]
        else:
            buf = Buffer(ctx.fresh(_ident(f"{sc.name}_{s.name}")), s.shape, s.dtype, "temp")
            items.append(AllocMark(buf))
        for m in mine:
            if id(m) not in ctx.buffers:
                ctx.buffers[id(m)] = buf
            elif ctx.buffers[id(m)] is not buf:
                copies.append(fill(ctx.buffers[id(m)], buf, ctx.params))
        ctx.buffers[id(s)] = buf
        state_bufs.append(buf)
    updates = {id(u): k for k, u in enumerate(sc.update)}
    body_bufs: list[Buffer] = []
    for b in sc.body:
        buf = Buffer(ctx.fresh(_ident(f"{sc.name}_{b.name}")), b.shape, b.dtype, "temp")
        items.append(AllocMark(buf))
        ctx.buffers[id(b)] = buf
        body_bufs.append(buf)
    for buf in state_bufs + body_bufs:
        items.append(fill(buf, None, ctx.params))
    extent = sc.extent
    offset = E.sub(extent, E.Const(sc.steps, "int64")) if sc.reverse else E.Const(0, "int64")
    for k, i0 in enumerate(sc.init):
        if sc.steps:
            items.append(_copy_rows(state_bufs[k], ctx.buffer_of(i0), offset, ctx.taken))
    tv = E.Var(ctx.fresh("t_step"))
    rows: list[Stmt] = []
    for b in sc.body:
        if isinstance(b.op, ScatterOp):
            rows.extend(_scatter_row(ctx, b, tv))
            if id(b) in updates:
                rows.append(_copy_row(state_bufs[updates[id(b)]], ctx.buffer_of(b), tv,
                                      ctx.taken))
            continue
        axes = b.op.axes
        first = E.IterVar(axes[0].var, tv, E.Const(1, "int64"), "data")
        n = _row_elems(b)
        wide = (len(axes) > 1 and (n is None or n >= PARALLEL_ROW) and PARALLEL_ELEMENTWISE
                or any(isinstance(x, E.Reduce) for x in walk(b.op.body)))
        wide = wide and len(axes) > 1 and (n is None or n >= PARALLEL_ROW)
        buf = ctx.buffer_of(b)
        stmt = lower_stage(ctx, buf.name, (first,) + axes[1:], b.op.body, buf, parallel=False)
        if wide and isinstance(stmt, For) and isinstance(stmt.body, For):
            inner = stmt.body
            stmt = For(stmt.var, stmt.lo, stmt.hi,
                       For(inner.var, inner.lo, inner.hi, inner.body, inner.step, "parallel"),
                       stmt.step, stmt.kind)
        rows.append(stmt)
        if id(b) in updates:
            rows.append(_copy_row(state_bufs[updates[id(b)]], buf, tv, ctx.taken))
    step = block(rows)
    count = E.sub(extent, E.Const(sc.steps, "int64"))
    if sc.reverse:
        u = E.Var(ctx.fresh("u_step"))
        last = E.sub(count, E.Const(1, "int64"))
        loop: Stmt = For(u, E.Const(0, "int64"), count, LetStmt(tv, E.sub(last, u), step))
    else:
        loop = For(tv, E.Const(sc.steps, "int64"), extent, step)
    items.append(loop)
    items.extend(copies)
    return items
