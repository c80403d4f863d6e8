"""The analysis behind the checkpointed lowering of a scan's gradient
(:mod:`.lower_checkpoint`): which stage runs where, and how many rows each window needs.

The class of programs (anything else raises :class:`~tecomp.errors.LoweringError` naming the
stage and why; :func:`find_checkpointed` and :func:`plan_program`):

* one adjoint scan and the one forward scan its side reads (none for a linear recurrence);
  other forward scans (the user's own output, say) are lowered as usual; no step scatter
  (the adjoint of a gather from a state), no scatter stage that depends on the scan;
* every other stage that depends on the scan is one of

  - *time-local*: a compute whose first axis is time and that reads every scan-dependent
    tensor at ``t + d`` for a constant ``d``.  A read at a constant row inside
    ``select(t == c, x, ...)`` or inside a sum whose extent is ``select(t == c, n, 0)`` counts
    as ``t + d`` (it is the same element wherever it is read);  adjoint values are read only
    at the same or later steps (``d >= 0``: the reverse sweep computes later ones first);
  - *constant rows*: it reads scan-dependent tensors at constant rows only (an init's
    gradient, ``dh0 = A[0]``): computed after the sweeps from copies of those rows;
  - *sums over t*: a linear combination (coefficients free of the scan) of sums, each with an
    axis ``r`` at which it reads every scan-dependent tensor (``r + d``) and running over rows
    inside ``[0, T)``; each segment adds its part;
  - after the sweeps: it reads only stages of the two previous kinds.

  A time-local stage cannot read a sum over t (it is complete only after the sweeps).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tecomp import expr as E
from tecomp.errors import LoweringError
from tecomp.functor import ExprMutator, make_reduce, tensor_reads, topo_order, walk
from tecomp.loopir import Buffer
from tecomp.scan import linear_form, time_offset
from tecomp.scan_op import Scan, ScanOp
from tecomp.tensor import ComputeOp, PlaceholderOp, ScatterOp, Tensor

I64 = "int64"


def iconst(v: int) -> E.Expr:
    return E.Const(v, I64)


def refuse(msg: str) -> LoweringError:
    return LoweringError(f"checkpoint: {msg}")


def provably_le(x: E.Expr, y: E.Expr) -> bool:
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
    # id(stage) -> "pre" (before the sweeps), "S" / "adj" (a member of the forward scan / the
    # adjoint), "Ftl" / "Atl" (time-local, forward / adjoint values), "sum", "post" (after)
    kind: dict[int, str] = field(default_factory=dict)
    pins: dict[tuple[int, E.Expr], Pin] = field(default_factory=dict)
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
        raise refuse(f"the program holds the adjoint scans {names}; checkpointing lowers the "
                   "gradient of one tc.scan")
    for b in adj.body:
        if isinstance(b.op, ScatterOp):
            raise refuse(f"the scan {adj.name!r} has the step scatter {b.name!r} (the adjoint "
                       "of a gather from a state); checkpointing does not lower step scatters")
    side = {id(x) for x in adj.outputs} | {id(m) for m in stages
                                           if isinstance(m.op, ScanOp) and m.op.scan is adj}
    roots: list[Tensor] = list(adj.outer)  # what the adjoint's side reads, transitively
    for b in adj.body:
        roots.extend(r.tensor for r in tensor_reads(b.op.body))
    for t in stages:
        if isinstance(t.op, ScanOp):
            continue
        srcs = [r.tensor for e in exprs.get(id(t), ()) for r in tensor_reads(e)]
        if any(id(x) in side for x in srcs):
            side.add(id(t))
            roots.extend(srcs)
    read: list[Scan] = []
    for x in topo_order(roots):
        if isinstance(x.op, ScanOp) and not x.op.scan.reverse and not any(
                x.op.scan is r for r in read):
            read.append(x.op.scan)
    if len(read) > 1:
        names = ", ".join(repr(s.name) for s in read)
        raise refuse(f"the gradient reads the scans {names}; checkpointing recomputes one "
                     "forward scan (the gradient of one tc.scan)")
    return (read[0] if read else None), adj, int(adj.state[0].attrs[CHECKPOINT_ATTR])


class _FixRows(ExprMutator):
    """Inside ``select(t == c, x, y)``: a read at row ``c'`` of a windowed tensor in ``x``,
    ``c' - c`` a constant, becomes a read at ``t + (c' - c)`` (the same element where ``x`` is
    taken); ``c`` is free of ``t`` (``T - 1``, say)."""

    def __init__(self, t: E.Var, ids: set[int], c: E.Expr | None = None) -> None:
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
        f = linear_form(E.sub(out.indices[0], self.c))
        if f is None or set(f) - {1}:
            return out
        row = E.add(self.t, iconst(f.get(1, 0)))
        return E.TensorRead(out.tensor, (row,) + tuple(out.indices[1:]), out.dtype)


@dataclass
class Pin:
    """Row ``row`` (free of the stage's axes) of a windowed tensor, copied out when its
    segment is computed."""

    win: Win
    row: E.Expr
    alias: Tensor
    buf: Buffer | None = None


class _PinReads(ExprMutator):
    """Reads of windowed tensors at fixed rows (affine in sizes only, free of ``local``: the
    stage's axes) become reads of pinned row copies; ``all_constant`` says whether every
    windowed read was one."""

    def __init__(self, plan: Plan, local: set[E.Var]) -> None:
        super().__init__()
        self.plan, self.local, self.all_constant = plan, local, True
        self.new: dict[tuple[int, E.Expr], Pin] = {}  # kept only when all reads are fixed

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        out = super().visit_TensorRead(e)
        w = self.plan.wins.get(id(e.tensor))
        if w is None:
            return out
        row = out.indices[0]
        f = linear_form(row)
        if f is None or set(f) & self.local:
            self.all_constant = False
            return out
        pin = self.plan.pins.get((id(w), row)) or self.new.get((id(w), row))
        if pin is None:
            t = w.tensor
            n = len(self.plan.pins) + len(self.new)
            alias = Tensor(f"{t.name}_row{n}", (iconst(1),) + tuple(t.shape[1:]), t.dtype,
                           PlaceholderOp())
            pin = self.new[(id(w), row)] = Pin(w, row, alias)
        return E.TensorRead(pin.alias, (iconst(0),) + tuple(out.indices[1:]), out.dtype)


def _fixed_row(cond: E.Expr, t: E.Var) -> E.Expr | None:
    """``c`` (free of ``t``) when ``cond`` (or a conjunct of it) is ``t == c``."""
    if isinstance(cond, E.And):
        return _fixed_row(cond.a, t) if _fixed_row(cond.a, t) is not None else \
            _fixed_row(cond.b, t)
    if not isinstance(cond, E.EQ):
        return None
    d = E.sub(cond.a, cond.b)
    f = linear_form(d)
    if f is None or f.get(t, 0) not in (1, -1):
        return None
    rest = E.sub(d, E.mul(iconst(f[t]), t))  # f[t] t + rest == 0
    return E.neg(rest) if f[t] == 1 else rest


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
            raise refuse(f"{who} reads {r.tensor.name!r} at row {r.indices[0]}, not at "
                       f"{tv.name} + d for a constant d (in {r}); only stages that read the "
                       "scan's values step by step can run segment by segment")
        out.append((w, d))
    return out


def _reads_windows(e: E.Expr, plan: Plan) -> bool:
    return any(id(r.tensor) in plan.wins for r in tensor_reads(e))


def time_axis(r: E.Reduce, plan: Plan) -> E.IterVar | None:
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
        ax = time_axis(e, plan)
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
                raise refuse(f"{who} reads the adjoint value {w.tensor.name!r} at an earlier "
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
    same = fwd is None or (provably_le(fwd.extent, T) and provably_le(T, fwd.extent))
    if adj.steps or not same:
        raise refuse(f"the adjoint {adj.name!r} does not run over the steps of its scan")
    for b in fwd.body if fwd is not None else ():
        if not isinstance(b.op, ComputeOp):
            raise refuse(f"the scan {fwd.name!r} has the step tensor {b.name!r}, not a compute")
    kinds = plan.kind
    for t in stages:
        if isinstance(t.op, ScanOp):
            sc = t.op.scan
            kinds[id(t)] = "S" if sc is fwd else ("adj" if sc is adj else "pre")
            if kinds[id(t)] == "pre" and any(kinds.get(id(x), "pre") != "pre"
                                             for x in sc.outer):
                raise refuse(f"the scan {sc.name!r} reads values of the scan that "
                             f"{adj.name!r} differentiates; checkpointing lowers one scan and "
                             "its gradient")
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
            raise refuse(f"the scatter {t.name!r} depends on the scan; checkpointing lowers "
                       "compute stages only")
        srcs = {id(r.tensor) for e in exprs[id(t)] for r in tensor_reads(e)}
        if not srcs & set(plan.wins):
            kinds[id(t)] = "post"
            continue
        # an adjoint value read at fixed rows only is complete after the sweeps (an init's
        # gradient); a forward value can be recomputed in any segment, so it is tried step by
        # step first (a head that reads the last state only, select(t == T - 1, S[T - 1]))
        tries = (_pinned, _time_local) if kind == "A" else (_time_local, _pinned)
        if any(f(t, exprs, plan) for f in tries):
            continue
        terms = sum_terms(_body(t, exprs), plan)
        if terms is None:
            raise refuse(f"the stage {t.name!r} reads the scan's values neither step by step "
                         "(its first axis the time, reads at t + d), nor at fixed rows only, "
                         "nor in sums over t (a linear combination of them)")
        for _, ax in terms:
            if not (provably_le(iconst(0), ax.lo)
                    and all(provably_le(E.add(ax.lo, x), T) for x in _arms(ax.extent))):
                raise refuse(f"a sum over time in {t.name!r} runs over rows [{ax.lo}, "
                             f"{ax.lo} + {ax.extent}), not inside [0, {T})")
        kinds[id(t)] = "sum"
    for t in stages:
        if kinds[id(t)] in ("Ftl", "Atl", "S", "adj"):
            for r in (r for e in exprs.get(id(t), ()) for r in tensor_reads(e)):
                if kinds.get(id(r.tensor)) in ("sum", "post"):
                    raise refuse(f"{t.name!r} reads {r.tensor.name!r} inside the steps, but "
                                 f"{r.tensor.name!r} is complete only after the reverse "
                                 "sweep (a sum over t, or computed from one)")
    for x in adj.outer:
        if kinds.get(id(x)) in ("sum", "post"):
            raise refuse(f"the adjoint step reads {x.name!r}, which needs a sum over all the "
                         "steps (complete only after the reverse sweep)")
    _size(plan, stages, exprs)
    return plan


def _pinned(t: Tensor, exprs: dict[int, tuple[E.Expr, ...]], plan: Plan) -> bool:
    """Classify ``t`` as computed after the sweeps from pinned rows, if it reads windowed
    tensors at fixed rows only."""
    local = {a.var for a in t.op.axes} | {a.var for x in walk(_body(t, exprs))
                                          if isinstance(x, E.Reduce) for a in x.axes}
    pinned = _PinReads(plan, local)
    body = pinned.visit(_body(t, exprs))
    if not pinned.all_constant:
        return False
    plan.pins.update(pinned.new)
    exprs[id(t)] = (body,)
    plan.kind[id(t)] = "post"
    return True


def _time_local(t: Tensor, exprs: dict[int, tuple[E.Expr, ...]], plan: Plan) -> bool:
    """Classify ``t`` as time-local (a window), if it reads windowed tensors at ``t + d``
    (after :class:`_FixRows`)."""
    if not t.ndim:
        return False
    tv = t.op.axes[0].var
    fixed = _FixRows(tv, set(plan.wins)).visit(_body(t, exprs))
    reads = [r for r in tensor_reads(fixed) if id(r.tensor) in plan.wins]
    if not all(time_offset(r.indices[0], tv) is not None for r in reads):
        return False
    kind = plan.kind[id(t)]
    exprs[id(t)] = (fixed,)
    plan.kind[id(t)] = "Atl" if kind == "A" else "Ftl"
    plan.wins[id(t)] = Win(t, kind)
    return True


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
                raise refuse(f"the step tensor {b.name!r} of {fwd.name!r} reads the step "
                           f"tensor {w.tensor.name!r} at another step")


# ------------------------------------------------------------------------------ emission
