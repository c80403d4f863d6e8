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

The class of programs (anything else raises :class:`~tecomp.errors.LoweringError` naming the
stage and why): one forward scan and its adjoint (no other scan), no step scatter (a gather
from a state); every other stage that depends on the scan is either *time-local* (a compute
whose first axis is time and that reads every scan-dependent tensor at ``t + d`` for a
constant ``d``; a read at a constant row inside ``select(t == c, ...)`` counts as ``t + d``),
or a *sum over t* (a compute whose body is one sum with an axis ``r`` at which it reads every
scan-dependent tensor, ``r + d``, over rows inside ``[0, T)``), or reads only sums over t
(computed after the sweeps).  Adjoint values are read only at the same or later steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tecomp import expr as E
from tecomp.errors import LoweringError
from tecomp.functor import ExprMutator, make_reduce, substitute, tensor_reads
from tecomp.loopir import Buffer, BufferLoad, For, IfThenElse, LetStmt, Stmt, Store
from tecomp.scan import linear_form, time_offset
from tecomp.scan_op import Scan, ScanOp
from tecomp.tensor import ComputeOp, PlaceholderOp, ScatterOp, Tensor

from .lower_scan import lower_scan
from .lower_stage import AllocMark, Context, block, fill, lower_scatter, lower_stage

I64 = "int64"


def _c(v: int) -> E.Expr:
    return E.Const(v, I64)


def _err(msg: str) -> LoweringError:
    return LoweringError(f"checkpoint: {msg}")


def _le(x: E.Expr, y: E.Expr) -> bool:
    """``x <= y`` provably (their difference a non-negative constant)."""
    f = linear_form(E.sub(y, x))
    return f is not None and set(f) <= {1} and f.get(1, 0) >= 0


@dataclass
class Win:
    """The window of one time-axis tensor: its buffer, the placeholder reads are mapped to,
    its kind (``"F"`` forward-valued, ``"A"`` adjoint-valued) and its extra rows."""

    tensor: Tensor
    kind: str
    lo: int = 0
    hi: int = 0
    buf: Buffer | None = None
    alias: Tensor | None = None
    carry: Buffer | None = None


@dataclass
class Plan:
    fwd: Scan | None
    adj: Scan
    k: int
    wins: dict[int, Win] = field(default_factory=dict)  # id(tensor) -> its window
    kind: dict[int, str] = field(default_factory=dict)  # id(stage) -> pre/S/A/F/tl/sum/post
    pins: dict[tuple[int, int], Pin] = field(default_factory=dict)
    lag: int = 0
    carry: int = 0


# ------------------------------------------------------------------------------ analysis
def find_checkpointed(stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]]
                      ) -> tuple[Scan | None, Scan, int] | None:
    """``(forward scan, adjoint, k)`` when the program holds a checkpointed adjoint; the
    forward scan is the one the adjoint's side reads (None for a linear recurrence, whose
    adjoint reads no forward value).  Other forward scans are lowered as usual."""
    from tecomp.scan import CHECKPOINT_ATTR

    scans: list[Scan] = []
    for t in stages:
        if isinstance(t.op, ScanOp) and not any(t.op.scan is s for s in scans):
            scans.append(t.op.scan)
    marked = [s for s in scans if s.reverse and s.state[0].attrs.get(CHECKPOINT_ATTR)]
    if not marked:
        return None
    adj = marked[0]
    if len([s for s in scans if s.reverse]) > 1:
        names = ", ".join(repr(s.name) for s in scans if s.reverse)
        raise _err(f"the program holds the adjoint scans {names}; checkpointing lowers the "
                   "gradient of one tc.scan")
    for b in adj.body:
        if isinstance(b.op, ScatterOp):
            raise _err(f"the scan {adj.name!r} has the step scatter {b.name!r} (the adjoint "
                       "of a gather from a state); checkpointing does not lower step scatters")
    side = {id(x) for x in adj.outputs} | {id(m) for m in stages
                                           if isinstance(m.op, ScanOp) and m.op.scan is adj}
    read: list[Scan] = []

    def note(src: Tensor) -> None:
        if isinstance(src.op, ScanOp) and not src.op.scan.reverse and not any(
                src.op.scan is r for r in read):
            read.append(src.op.scan)

    for b in adj.body:
        for r in tensor_reads(b.op.body):
            note(r.tensor)
    for x in adj.outer:
        note(x)
    for t in stages:
        if isinstance(t.op, ScanOp):
            continue
        srcs = [r.tensor for e in exprs.get(id(t), ()) for r in tensor_reads(e)]
        if any(id(x) in side for x in srcs):
            side.add(id(t))
            for x in srcs:
                note(x)
    if len(read) > 1:
        names = ", ".join(repr(s.name) for s in read)
        raise _err(f"the gradient reads the scans {names}; checkpointing recomputes one "
                   "forward scan (the gradient of one tc.scan)")
    return (read[0] if read else None), adj, int(adj.state[0].attrs[CHECKPOINT_ATTR])


class _FixRows(ExprMutator):
    """Inside ``select(t == c, x, y)``: a read at the constant row ``c'`` of a windowed tensor
    in ``x`` becomes a read at ``t + (c' - c)`` (the same element where ``x`` is taken)."""

    def __init__(self, t: E.Var, ids: set[int], c: int | None = None) -> None:
        super().__init__()
        self.t, self.ids, self.c = t, ids, c

    def visit_Select(self, e: E.Select) -> E.Expr:
        c = _fixed_row(e.cond, self.t)
        t = self.visit(e.t) if c is None else _FixRows(self.t, self.ids, c).visit(e.t)
        cond, f = self.visit(e.cond), self.visit(e.f)
        if cond is e.cond and t is e.t and f is e.f:
            return e
        return E.Select(cond, t, f, e.dtype)

    def visit_Reduce(self, e: E.Reduce) -> E.Expr:
        # a sum whose extent is select(t == c, n, 0) is empty unless t == c
        for ax in e.axes:
            if (isinstance(ax.extent, E.Select) and isinstance(ax.extent.f, E.Const)
                    and ax.extent.f.value == 0):
                c = _fixed_row(ax.extent.cond, self.t)
                if c is not None:
                    inner = _FixRows(self.t, self.ids, c)
                    return make_reduce(e.combiner, inner.visit(e.body), e.axes, e.where,
                                       e.dtype)
        return super().visit_Reduce(e)

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        out = super().visit_TensorRead(e)
        if self.c is None or id(e.tensor) not in self.ids:
            return out
        f = linear_form(out.indices[0])
        if f is None or set(f) - {1}:
            return out
        row = E.add(self.t, _c(f.get(1, 0) - self.c))
        return E.TensorRead(out.tensor, (row,) + tuple(out.indices[1:]), out.dtype)


@dataclass
class Pin:
    """Row ``row`` of a windowed tensor, copied out when its segment is computed."""

    win: Win
    row: int
    alias: Tensor
    buf: Buffer | None = None


class _PinReads(ExprMutator):
    """Reads of windowed tensors at constant rows become reads of pinned row copies;
    ``all_constant`` says whether every windowed read was one."""

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan, self.all_constant = plan, True

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        out = super().visit_TensorRead(e)
        w = self.plan.wins.get(id(e.tensor))
        if w is None:
            return out
        f = linear_form(out.indices[0])
        if f is None or set(f) - {1}:
            self.all_constant = False
            return out
        row = f.get(1, 0)
        pin = self.plan.pins.get((id(w), row))
        if pin is None:
            t = w.tensor
            alias = Tensor(f"{t.name}_row{row}", (_c(1),) + tuple(t.shape[1:]), t.dtype,
                           PlaceholderOp())
            pin = self.plan.pins[(id(w), row)] = Pin(w, row, alias)
        return E.TensorRead(pin.alias, (_c(0),) + tuple(out.indices[1:]), out.dtype)


def _fixed_row(cond: E.Expr, t: E.Var) -> int | None:
    """``c`` when ``cond`` (or a conjunct of it) is ``t == c``."""
    if isinstance(cond, E.And):
        return _fixed_row(cond.a, t) if _fixed_row(cond.a, t) is not None else \
            _fixed_row(cond.b, t)
    if not isinstance(cond, E.EQ):
        return None
    f = linear_form(E.sub(cond.a, cond.b))
    if f is None or set(f) - {1, t} or f.get(t, 0) not in (1, -1):
        return None
    return -f.get(1, 0) * f[t]


def _body(t: Tensor, exprs: dict[int, tuple[E.Expr, ...]]) -> E.Expr:
    return exprs.get(id(t), (t.op.body,))[0]


def _sweep_reads(e: E.Expr, plan: Plan, who: str, tv: E.Var) -> list[tuple[Win, int]]:
    """``(window, d)`` for every read of a windowed tensor in ``e`` at ``tv + d``."""
    out = []
    for r in tensor_reads(e):
        w = plan.wins.get(id(r.tensor))
        if w is None:
            continue
        d = time_offset(r.indices[0], tv)
        if d is None:
            raise _err(f"{who} reads {r.tensor.name!r} at row {r.indices[0]}, not at "
                       f"{tv.name} + d for a constant d (in {r}); only stages that read the "
                       "scan's values step by step can run segment by segment")
        out.append((w, d))
    return out


def _reads_windows(e: E.Expr, plan: Plan) -> bool:
    return any(id(r.tensor) in plan.wins for r in tensor_reads(e))


def _time_axis(r: E.Reduce, plan: Plan) -> E.IterVar | None:
    """The axis of the sum ``r`` at which it reads every windowed tensor (``ax + d``)."""
    reads = [x for x in tensor_reads(r.body) if id(x.tensor) in plan.wins]
    if r.combiner != "sum" or not reads or (r.where is not None
                                           and _reads_windows(r.where, plan)):
        return None
    if any(_reads_windows(a.lo, plan) or _reads_windows(a.extent, plan) for a in r.axes):
        return None
    for ax in r.axes:
        if all(time_offset(x.indices[0], ax.var) is not None for x in reads):
            return ax
    return None


def sum_terms(e: E.Expr, plan: Plan) -> list[tuple[E.Reduce, E.IterVar]] | None:
    """The sums over time of ``e`` when ``e`` is a linear combination of them (coefficients
    that read no windowed tensor, no term without one), else None."""
    if isinstance(e, E.Reduce):
        ax = _time_axis(e, plan)
        return None if ax is None else [(e, ax)]
    if isinstance(e, (E.Add, E.Sub)):
        a, b = sum_terms(e.a, plan), sum_terms(e.b, plan)
        return None if a is None or b is None else a + b
    if isinstance(e, E.Neg):
        return sum_terms(e.a, plan)
    if isinstance(e, E.Cast):
        return sum_terms(e.value, plan)
    if isinstance(e, (E.Mul, E.Div)):
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if not _reads_windows(y, plan) and (x is e.a or isinstance(e, E.Mul)):
                return sum_terms(x, plan)
    return None


def _arms(e: E.Expr) -> list[E.Expr]:
    if isinstance(e, E.Select):
        return _arms(e.t) + _arms(e.f)
    return [e]


def _need(plan: Plan, reads: list[tuple[Win, int]], lo: int, hi: int, who: str) -> None:
    for w, d in reads:
        if w.kind == "A":
            if lo - d > 0:
                raise _err(f"{who} reads the adjoint value {w.tensor.name!r} at an earlier "
                           f"step (offset {d}); the reverse sweep has not computed it yet")
            plan.carry = max(plan.carry, hi + d)
        else:
            w.lo, w.hi = max(w.lo, lo - d), max(w.hi, hi + d)


def plan_program(stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                 fwd: Scan | None, adj: Scan, k: int) -> Plan:
    """Classify every stage and size every window; raise for a program outside the class."""
    plan = Plan(fwd, adj, k)
    T = adj.extent
    scans = [sc for sc in (fwd, adj) if sc is not None]
    if adj.steps or (fwd is not None and not (_le(fwd.extent, T) and _le(T, fwd.extent))):
        raise _err(f"the adjoint {adj.name!r} does not run over the steps of its scan")
    for b in fwd.body if fwd is not None else ():
        if not isinstance(b.op, ComputeOp):
            raise _err(f"the scan {fwd.name!r} has the step tensor {b.name!r}, not a compute")
    kinds = plan.kind
    for t in stages:
        if isinstance(t.op, ScanOp):
            sc = t.op.scan
            kinds[id(t)] = "S" if sc is fwd else ("adj" if sc is adj else "pre")
            continue
        srcs = [r.tensor for e in exprs[id(t)] for r in tensor_reads(e)]
        ks = {kinds.get(id(s), "pre") for s in srcs}
        kinds[id(t)] = "pre" if ks <= {"pre"} else ("A" if ks & {"A", "adj"} else "F")
    for sc in scans:
        kind = "A" if sc is adj else "F"
        for n, s in enumerate(sc.state):
            w = Win(s, kind)
            plan.wins[id(s)] = w
            for o in sc.outputs:
                if o.op.index == n:
                    plan.wins[id(o)] = w
            for m in stages:
                if isinstance(m.op, ScanOp) and m.op.scan is sc and m.op.index == n:
                    plan.wins[id(m)] = w
        for b in sc.body:
            plan.wins[id(b)] = Win(b, kind)
    # stages after the scan: time-local (a window), sums over t, or after the sweeps
    for t in stages:
        kind = kinds[id(t)]
        if kind in ("pre", "S", "adj"):
            continue
        if not isinstance(t.op, ComputeOp):
            raise _err(f"the scatter {t.name!r} depends on the scan; checkpointing lowers "
                       "compute stages only")
        srcs = {id(r.tensor) for e in exprs[id(t)] for r in tensor_reads(e)}
        if not srcs & set(plan.wins):
            kinds[id(t)] = "post"
            continue
        pinned = _PinReads(plan)
        body = pinned.visit(_body(t, exprs))
        if pinned.all_constant:  # reads constant rows only: after the sweeps, from copies
            exprs[id(t)] = (body,)
            kinds[id(t)] = "post"
            continue
        tv = t.op.axes[0].var if t.ndim else None
        if tv is not None:
            fixed = _FixRows(tv, set(plan.wins)).visit(_body(t, exprs))
            reads = [r for r in tensor_reads(fixed) if id(r.tensor) in plan.wins]
            if all(time_offset(r.indices[0], tv) is not None for r in reads):
                exprs[id(t)] = (fixed,)
                kinds[id(t)] = "Atl" if kind == "A" else "Ftl"
                plan.wins[id(t)] = Win(t, kind[0])
                continue
        terms = sum_terms(_body(t, exprs), plan)
        if terms is None:
            raise _err(f"the stage {t.name!r} reads the scan's values neither step by step "
                       "(its first axis the time, reads at t + d), nor at constant rows only, "
                       "nor in sums over t (a linear combination of them)")
        for _, ax in terms:
            if not (_le(_c(0), ax.lo) and all(_le(E.add(ax.lo, x), T)
                                              for x in _arms(ax.extent))):
                raise _err(f"a sum over time in {t.name!r} runs over rows [{ax.lo}, "
                           f"{ax.lo} + {ax.extent}), not inside [0, {T})")
        kinds[id(t)] = "sum"
    for t in stages:
        if kinds[id(t)] in ("Ftl", "Atl", "S", "adj"):
            for r in (r for e in exprs.get(id(t), ()) for r in tensor_reads(e)):
                if kinds.get(id(r.tensor)) in ("sum", "post"):
                    raise _err(f"{t.name!r} reads {r.tensor.name!r}, a sum over all steps, "
                               "inside the steps")
    for x in adj.outer:
        if kinds.get(id(x)) in ("sum", "post"):
            raise _err(f"the adjoint step reads {x.name!r}, a sum over all steps")
    _size(plan, stages, exprs)
    return plan


def _size(plan: Plan, stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]]) -> None:
    """Extra rows of every forward window (from its readers, last reader first), the carry
    rows of the adjoint windows and the restart rows of the forward states."""
    fwd, adj = plan.fwd, plan.adj
    done: set[int] = set()
    for t in reversed(stages):
        kind = plan.kind[id(t)]
        if kind in ("Ftl", "Atl"):
            w = plan.wins[id(t)]
            lo, hi = (w.lo, w.hi) if kind == "Ftl" else (0, 0)
            _need(plan, _sweep_reads(_body(t, exprs), plan, repr(t.name), t.op.axes[0].var),
                  lo, hi, repr(t.name))
        elif kind == "sum":
            for r, ax in sum_terms(_body(t, exprs), plan):
                _need(plan, _sweep_reads(r.body, plan, repr(t.name), ax.var), 0, 0,
                      repr(t.name))
        elif kind == "adj" and id(adj) not in done:
            done.add(id(adj))
            for b in adj.body:
                _need(plan, _sweep_reads(b.op.body, plan, repr(b.name), b.op.axes[0].var),
                      0, 0, repr(b.name))
    state_ids = {id(s) for s in fwd.state} if fwd is not None else set()
    for b in fwd.body if fwd is not None else ():
        for w, d in _sweep_reads(b.op.body, plan, repr(b.name), b.op.axes[0].var):
            if id(w.tensor) in state_ids:
                plan.lag = max(plan.lag, -d)
            elif d != 0:
                raise _err(f"the step tensor {b.name!r} of {fwd.name!r} reads the step "
                           f"tensor {w.tensor.name!r} at another step")


# ------------------------------------------------------------------------------ emission
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
            c = _c(pin.row)
            inside = E.logical_and(E.compare(E.LE, a, c), E.compare(E.LT, c, b))
            items.append(IfThenElse(inside, _copy(ctx, pin.buf, _c(-pin.row), pin.win.buf,
                                                  E.sub(_c(0), self.base), (c, E.add(c, _c(1))))))
        for w in carried:
            items.append(_copy(ctx, w.carry, _c(0), w.buf, _c(self.LO), (_c(0), _c(plan.carry))))
        return block(items)

    def to_output(self, t: Tensor) -> Stmt:
        w = self.plan.wins[id(t)]
        dst = self.ctx.buffers[id(t)]
        if not _le(t.shape[0], self.T):
            raise _err(f"the output {t.name!r} has {t.shape[0]} rows, more than the "
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
        ax = _time_axis(e, self.plan)
        if ax is None:
            return e
        lo = E.maximum(ax.lo, self.a)
        hi = E.minimum(E.add(ax.lo, ax.extent), self.b)
        nax = E.IterVar(ax.var, lo, E.maximum(E.sub(hi, lo), _c(0)), ax.kind)
        axes = tuple(nax if x is ax else x for x in e.axes)
        return E.Reduce(e.combiner, _ToWindows(self.plan, self.base).visit(e.body), axes,
                        e.where, e.dtype)


def _ident(name: str) -> str:
    import re

    s = re.sub(r"[^A-Za-z0-9_]", "_", name or "t")
    return s if s and not s[0].isdigit() else "_" + s


def lower_checkpointed(ctx: Context, stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                       found: tuple[Scan | None, Scan, int], outs: set[int]) -> list:
    """Statement items computing ``stages`` (inlined ones removed) with the checkpointed
    schedule of the module docstring."""
    fwd, adj, k = found
    plan = plan_program(stages, exprs, fwd, adj, k)
    return _Emitter(ctx, plan, stages, exprs, outs).emit()
