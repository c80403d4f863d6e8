"""Checkpointed lowering of a scan's gradient (``tc.gradient(..., checkpoint=k)``): the time
loop of the whole adjoint program tiled into segments of ``k`` steps.

The schedule is the classic "store every k-th state" checkpointing of reverse-mode AD
(Griewank and Walther, *Evaluating Derivatives*, ch. 12, the uniform case; Chen et al. 2016,
"Training deep nets with sublinear memory cost").  With ``nseg = ceil(T / k)`` segments
``[a, b) = [s k, min(s k + k, T))`` and ``P`` the rows a recurrence needs to restart (its
largest lag, or more when a stage reads the state further back)::

    forward sweep:  for s = 0 .. nseg - 1:
                        window <- checkpoint[s]            # rows [a - P, a)
                        rows [a, b) of the states          # init rows, then steps
                        checkpoint[s + 1] <- rows [b - P, b)
    reverse sweep:  for s = nseg - 1 .. 0:
                        window <- checkpoint[s]; rows [a, b + hi) of the states recomputed
                        every forward-valued stage on its rows [a - lo, b + hi)
                        adjoint steps t = b - 1 .. a, every adjoint-valued stage on [a, b)
                        sums over t: their part t in [a, b) added to the result
                        rows [a, b) of the outputs with a time axis

Every tensor with a time axis that depends on the scan lives in a *window* of
``LO + k + HI`` rows (row ``t`` at ``t - a + LO``); an adjoint-valued tensor read at
``t + d`` (``d > 0``) finds rows ``[b, b + d)`` in a carry buffer filled by the segment after
it.  The state buffers therefore hold ``nseg * P`` checkpoint rows and ``O(k)`` window rows:
``O(T / k + k)`` instead of ``T``.  Results equal the uncheckpointed program's (the same
operations on the same values, sums over t added segment by segment).

:mod:`.checkpoint_plan` classifies the stages and sizes the windows (and says which programs
are outside the class this lowers).
"""

from __future__ import annotations

import re

from tecomp import expr as E
from tecomp.functor import ExprMutator, substitute
from tecomp.loopir import Buffer, BufferLoad, For, IfThenElse, LetStmt, Stmt, Store
from tecomp.scan_op import Scan, ScanOp
from tecomp.tensor import PlaceholderOp, ScatterOp, Tensor

from .checkpoint_plan import (
    I64,
    Plan,
    plan_program,
    provably_le,
    refuse,
    time_axis,
)
from .checkpoint_plan import iconst as _c
from .lower_scan import lower_scan
from .lower_stage import AllocMark, Context, block, fill, lower_scatter, lower_stage


class _ToWindows(ExprMutator):
    """Reads of windowed tensors at row ``e`` become reads of their window at ``e - base``."""

    def __init__(self, plan: Plan, base: E.Expr) -> None:
        super().__init__()
        self.plan, self.base = plan, base

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        idx = tuple(self.visit(i) for i in e.indices)
        w = self.plan.wins.get(id(e.tensor))
        if w is None:
            if all(x is y for x, y in zip(idx, e.indices)):
                return e
            return E.TensorRead(e.tensor, idx, e.dtype)
        return E.TensorRead(w.alias, (E.sub(idx[0], self.base),) + idx[1:], e.dtype)


def _loops(ctx: Context, shape: tuple[E.Expr, ...], body_of, first: tuple[E.Expr, E.Expr]
           ) -> Stmt:
    """A serial loop nest over ``shape`` (the first axis over ``first``), ``body_of(vars)``."""
    vs = [E.Var(ctx.fresh(f"c{d}"), I64) for d in range(len(shape))]
    stmt = body_of(vs)
    for d in range(len(shape) - 1, -1, -1):
        lo, hi = first if d == 0 else (_c(0), shape[d])
        stmt = For(vs[d], lo, hi, stmt)
    return stmt


def _copy(ctx: Context, dst: Buffer, dst0: E.Expr, src: Buffer, src0: E.Expr,
          rows: tuple[E.Expr, E.Expr]) -> Stmt:
    """``dst[dst0 + r] = src[src0 + r]`` for ``r`` in ``rows``."""
    def body(vs: list[E.Var]) -> Stmt:
        rest = tuple(vs[1:])
        return Store(dst, (E.add(dst0, vs[0]),) + rest,
                     BufferLoad(src, (E.add(src0, vs[0]),) + rest, src.dtype))
    return _loops(ctx, src.shape, body, rows)


class _Emitter:
    def __init__(self, ctx: Context, plan: Plan, stages: list[Tensor],
                 exprs: dict[int, tuple[E.Expr, ...]], outs: set[int]) -> None:
        self.ctx, self.plan, self.stages, self.exprs, self.outs = ctx, plan, stages, exprs, outs
        self.T = plan.adj.extent
        self.fstates = list(plan.fwd.state) if plan.fwd is not None else []
        self.k = plan.k
        if isinstance(self.T, E.Const):
            self.k = max(1, min(self.k, int(self.T.value)))
        self.P = plan.lag
        for w in plan.wins.values():
            if w.kind == "F" and id(w.tensor) in {id(s) for s in self.fstates}:
                self.P = max(self.P, w.lo)
        fw = [w for w in plan.wins.values() if w.kind == "F"]
        self.LO = max([self.P] + [w.lo for w in fw])
        self.HI = max([plan.carry] + [w.hi for w in fw])
        self.parts: dict[int, Buffer] = {}
        self.plain_scans: list[Scan] = []
        self.nseg = E.floordiv(E.add(self.T, _c(self.k - 1)), _c(self.k))

    def name(self, base: str) -> str:
        return self.ctx.fresh(base)

    def buffer(self, t: Tensor, shape: tuple[E.Expr, ...], tag: str, items: list) -> Buffer:
        b = Buffer(self.name(f"{_ident(t.name)}_{tag}"), shape, t.dtype, "temp")
        items.append(AllocMark(b))
        items.append(fill(b, None, self.ctx.params))
        return b

    # -------------------------------------------------------------- the program
    def emit(self) -> list:
        ctx, plan = self.ctx, self.plan
        items: list = []
        for t in self.stages:
            if plan.kind[id(t)] == "pre":
                items.extend(self.plain(t))
        rows = _c(self.LO + self.k + self.HI)
        seen: set[int] = set()
        for w in plan.wins.values():
            if id(w) in seen:
                continue
            seen.add(id(w))
            w.buf = self.buffer(w.tensor, (rows,) + tuple(w.tensor.shape[1:]), "window", items)
            w.alias = Tensor(w.buf.name, w.buf.shape, w.buf.dtype, PlaceholderOp())
            ctx.buffers[id(w.alias)] = w.buf
            if w.kind == "A" and plan.carry:
                w.carry = self.buffer(w.tensor, (_c(plan.carry),) + tuple(w.tensor.shape[1:]),
                                      "carry", items)
        for pin in plan.pins.values():
            pin.buf = self.buffer(pin.alias, pin.alias.shape, "pin", items)
            ctx.buffers[id(pin.alias)] = pin.buf
        self.ckpt = []
        for s in self.fstates:
            shape = (E.mul(self.nseg, _c(self.P)),) + tuple(s.shape[1:])
            self.ckpt.append(self.buffer(s, shape, "checkpoint", items))
        for t in self.stages:
            if plan.kind[id(t)] == "sum":
                self.sum_buffer(t, items)
        if plan.fwd is not None:
            items.append(self.sweep(reverse=False))
        items.append(self.sweep(reverse=True))
        for t in self.stages:
            if plan.kind[id(t)] == "post":
                items.extend(self.plain(t))
        return items

    def plain(self, t: Tensor) -> list:
        """A stage outside the sweeps, lowered as usual."""
        ctx = self.ctx
        if isinstance(t.op, ScanOp):  # another forward scan, as usual (at its first member)
            if any(t.op.scan is x for x in self.plain_scans):
                return []
            self.plain_scans.append(t.op.scan)
            members = [x for x in self.stages if isinstance(x.op, ScanOp)
                       and x.op.scan is t.op.scan]
            return lower_scan(ctx, t.op.scan, members)
        items: list = []
        buf = ctx.buffers.get(id(t))
        if buf is None:
            buf = Buffer(self.name(_ident(t.name)), t.shape, t.dtype, "temp")
            ctx.buffers[id(t)] = buf
            items.append(AllocMark(buf))
        if isinstance(t.op, ScatterOp):
            init = None if t.op.init is None else ctx.buffer_of(t.op.init)
            items.append(fill(buf, init, ctx.params))
            items.append(lower_scatter(ctx, buf.name, t.op, self.exprs[id(t)], buf))
        else:
            items.append(lower_stage(ctx, buf.name, t.op.axes, self.exprs[id(t)][0], buf))
        return items

    def sum_buffer(self, t: Tensor, items: list) -> None:
        buf = self.ctx.buffers.get(id(t))
        if buf is None:
            buf = Buffer(self.name(_ident(t.name)), t.shape, t.dtype, "temp")
            self.ctx.buffers[id(t)] = buf
            items.append(AllocMark(buf))
        items.append(fill(buf, None, self.ctx.params))
        part = Buffer(self.name(f"{_ident(t.name)}_part"), t.shape, t.dtype, "temp")
        items.append(AllocMark(part))
        self.parts[id(t)] = part

    # -------------------------------------------------------------- the sweeps
    def sweep(self, reverse: bool) -> Stmt:
        s = E.Var(self.name("seg"), I64)
        a, b, base = (E.Var(self.name(n), I64) for n in ("seg_lo", "seg_hi", "seg_base"))
        self.a, self.b, self.base = a, b, base
        body = self.reverse_segment() if reverse else self.forward_segment()
        stmt: Stmt = LetStmt(a, E.mul(s, _c(self.k)),
                             LetStmt(b, E.minimum(E.add(a, _c(self.k)), self.T),
                                     LetStmt(base, E.sub(a, _c(self.LO)), body)))
        if not reverse:
            return For(s, _c(0), self.nseg, stmt)
        u = E.Var(self.name("seg_rev"), I64)
        return For(u, _c(0), self.nseg, LetStmt(s, E.sub(E.sub(self.nseg, _c(1)), u), stmt))

    def forward_segment(self) -> Stmt:
        fwd = self.plan.fwd
        items: list = [self.load_checkpoints()]
        items.extend(self.forward_rows(self.b))
        seg = E.floordiv(self.a, _c(self.k))
        if self.P:
            for n, s in enumerate(fwd.state):
                w = self.plan.wins[id(s)]
                dst0 = E.mul(E.add(seg, _c(1)), _c(self.P))
                copy = _copy(self.ctx, self.ckpt[n], dst0, w.buf,
                             E.add(_c(self.LO - self.P), E.sub(self.b, self.a)),
                             (_c(0), _c(self.P)))
                last = E.compare(E.LT, E.add(seg, _c(1)), self.nseg)
                items.append(IfThenElse(last, copy))
        for m in self.stages:
            if self.plan.kind[id(m)] == "S" and id(m) in self.outs:
                items.append(self.to_output(m))
        return block(items)

    def load_checkpoints(self) -> Stmt:
        seg = E.floordiv(self.a, _c(self.k))
        out = []
        for n, s in enumerate(self.fstates):
            if self.P:
                w = self.plan.wins[id(s)]
                out.append(_copy(self.ctx, w.buf, _c(self.LO - self.P), self.ckpt[n],
                                 E.mul(seg, _c(self.P)), (_c(0), _c(self.P))))
        return block(out) if out else block([])

    def forward_rows(self, end: E.Expr) -> list:
        """Rows ``[a, end)`` of the forward states (init rows, then steps) in the windows."""
        fwd, ctx = self.plan.fwd, self.ctx
        items: list = []
        L = _c(fwd.steps)
        for n, i0 in enumerate(fwd.init):
            if fwd.steps:
                w = self.plan.wins[id(fwd.state[n])]
                lo, hi = E.minimum(self.a, L), E.minimum(end, L)
                items.append(_copy(ctx, w.buf, E.sub(_c(0), self.base), ctx.buffer_of(i0),
                                   _c(0), (lo, hi)))
        tv = E.Var(self.name("t_step"), I64)
        step = self.step_rows(fwd, tv)
        items.append(For(tv, E.maximum(self.a, L), end, step))
        return items

    def step_rows(self, sc: Scan, tv: E.Var) -> Stmt:
        """Row ``tv`` of every body stage of ``sc`` and the updates' rows into the states."""
        rows: list[Stmt] = []
        updates = {id(u): n for n, u in enumerate(sc.update)}
        for bt in sc.body:
            rows.append(self.window_rows(bt, bt.op.body, (tv, E.add(tv, _c(1))), False))
            if id(bt) in updates:
                w = self.plan.wins[id(sc.state[updates[id(bt)]])]
                src = self.plan.wins[id(bt)]
                at = E.sub(tv, self.base)
                rows.append(_copy(self.ctx, w.buf, at, src.buf, at, (_c(0), _c(1))))
        return block(rows)

    def window_rows(self, t: Tensor, body: E.Expr, rows: tuple[E.Expr, E.Expr],
                    parallel: bool) -> Stmt:
        """Rows ``rows`` of the time-axis tensor ``t`` (defined by ``body``) in its window."""
        w = self.plan.wins[id(t)]
        axes = t.op.axes
        wv = E.Var(self.name(f"w_{axes[0].var.name}"), I64)
        first = E.IterVar(wv, E.sub(rows[0], self.base), E.sub(rows[1], rows[0]), "data")
        body = substitute(_ToWindows(self.plan, self.base).visit(body),
                          {axes[0].var: E.add(wv, self.base)})
        return lower_stage(self.ctx, w.buf.name, (first,) + tuple(axes[1:]), body, w.buf,
                           parallel=parallel)

    def reverse_segment(self) -> Stmt:
        plan, ctx = self.plan, self.ctx
        a, b = self.a, self.b
        items: list = []
        seen: set[int] = set()
        carried = []
        for w in plan.wins.values():
            if w.carry is not None and id(w) not in seen:
                seen.add(id(w))
                carried.append(w)
                items.append(_copy(ctx, w.buf, _c(self.LO + self.k), w.carry, _c(0),
                                   (_c(0), _c(plan.carry))))
        if plan.fwd is not None:
            items.append(self.load_checkpoints())
            s_hi = max([w.hi for w in plan.wins.values()
                        if any(w.tensor is s for s in self.fstates)] + [0])
            items.extend(self.forward_rows(E.minimum(E.add(b, _c(s_hi)), self.T)))
        adj_done = False
        for t in self.stages:
            kind = plan.kind[id(t)]
            if kind == "Ftl":
                w = plan.wins[id(t)]
                rows = (E.maximum(E.sub(a, _c(w.lo)), _c(0)),
                        E.minimum(E.add(b, _c(w.hi)), t.shape[0]))
                items.append(self.window_rows(t, self.exprs[id(t)][0], rows, True))
            elif kind == "Atl":
                rows = (a, E.minimum(b, t.shape[0]))
                items.append(self.window_rows(t, self.exprs[id(t)][0], rows, True))
            elif kind == "adj" and not adj_done:
                adj_done = True
                u = E.Var(self.name("u_step"), I64)
                tv = E.Var(self.name("t_step"), I64)
                step = self.step_rows(plan.adj, tv)
                items.append(For(u, _c(0), E.sub(b, a),
                                 LetStmt(tv, E.sub(E.sub(b, _c(1)), u), step)))
            elif kind == "sum":
                items.extend(self.sum_part(t))
            if kind in ("Ftl", "Atl", "adj") and id(t) in self.outs:
                items.append(self.to_output(t))
        for pin in plan.pins.values():  # every window holds rows [a, b) here
            c = pin.row
            inside = E.logical_and(E.compare(E.LE, a, c), E.compare(E.LT, c, b))
            copy = _copy(ctx, pin.buf, E.neg(c), pin.win.buf, E.sub(_c(0), self.base),
                         (c, E.add(c, _c(1))))
            items.append(IfThenElse(inside, copy))
        for w in carried:
            items.append(_copy(ctx, w.carry, _c(0), w.buf, _c(self.LO), (_c(0), _c(plan.carry))))
        return block(items)

    def to_output(self, t: Tensor) -> Stmt:
        w = self.plan.wins[id(t)]
        dst = self.ctx.buffers[id(t)]
        if not provably_le(t.shape[0], self.T):
            raise refuse(f"the output {t.name!r} has {t.shape[0]} rows, more than the "
                       f"{self.T} steps")
        hi = E.minimum(self.b, t.shape[0])
        return _copy(self.ctx, dst, _c(0), w.buf, E.sub(_c(0), self.base), (self.a, hi))

    def sum_part(self, t: Tensor) -> list:
        """The part ``r`` in ``[a, b)`` of the sums over time of ``t``, added to its result."""
        ctx = self.ctx
        body = _Restrict(self.plan, self.base, self.a, self.b).visit(self.exprs[id(t)][0])
        part = self.parts[id(t)]
        dst = ctx.buffers[id(t)]
        out = [lower_stage(ctx, part.name, t.op.axes, body, part)]

        def add(vs: list[E.Var]) -> Stmt:
            idx = tuple(vs)
            return Store(dst, idx, E.add(BufferLoad(dst, idx, dst.dtype),
                                         BufferLoad(part, idx, part.dtype)))
        if t.ndim:
            out.append(_loops(ctx, t.shape, add, (_c(0), t.shape[0])))
        else:
            out.append(add([]))
        return out


class _Restrict(ExprMutator):
    """Each sum over time restricted to ``[a, b)``, its reads moved to the windows."""

    def __init__(self, plan: Plan, base: E.Expr, a: E.Expr, b: E.Expr) -> None:
        super().__init__()
        self.plan, self.base, self.a, self.b = plan, base, a, b

    def visit_Reduce(self, e: E.Reduce) -> E.Expr:
        ax = time_axis(e, self.plan)
        if ax is None:
            return e
        lo = E.maximum(ax.lo, self.a)
        hi = E.minimum(E.add(ax.lo, ax.extent), self.b)
        nax = E.IterVar(ax.var, lo, E.maximum(E.sub(hi, lo), _c(0)), ax.kind)
        axes = tuple(nax if x is ax else x for x in e.axes)
        return E.Reduce(e.combiner, _ToWindows(self.plan, self.base).visit(e.body), axes,
                        e.where, e.dtype)


def _ident(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name or "t")
    return s if s and not s[0].isdigit() else "_" + s


def lower_checkpointed(ctx: Context, stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                       found: tuple[Scan | None, Scan, int], outs: set[int]) -> list:
    """Statement items computing ``stages`` (inlined ones removed) with the checkpointed
    schedule of the module docstring."""
    fwd, adj, k = found
    plan = plan_program(stages, exprs, fwd, adj, k)
    return _Emitter(ctx, plan, stages, exprs, outs).emit()
