"""Recurrences: ``tc.scan`` (TVM's ``te.scan`` shape) and the :class:`ScanOp` node.

A scan computes states ``S_k`` whose first axis is time::

    S_k[t] = init_k[t]                         for t < L   (L = init_k.shape[0], the given steps)
    S_k[t] = update_k[t]                       for L <= t < T

``update_k`` is an ordinary compute over ``(T, ...)`` that reads the scan's own result through
the placeholder ``state_k`` at ``state_k[t - d, ...]`` for constant lags ``1 <= d <= L``.  The
tensors between the states and the updates (those that depend on a state) form the *body* of
the scan: one step computes row ``t`` of every body tensor, in an order in which every
same-step read (a body tensor read at its reader's own ``t``) comes after its producer.  Every
other tensor the body reads is *outer*: computed once, before the scan.  The scan node's
dependencies in the tensor DAG are the inits and the outer tensors, so passes that do not
know scans see it as an opaque stage.

A *reverse* scan (internal: the adjoint of a scan, see :mod:`tecomp.passes.autodiff.scan`)
runs ``t = T - L - 1`` down to ``0``; its init fills the last ``L`` rows and it reads its
states at ``t + d``.  Its body may also read a state at the current step (``d = 0``): that read
is ordered after the state's own update in the step, and it may hold a *step scatter* (the
adjoint of a gather from a state, ``adj[t - 1, perm[i]] += ...``): a scatter whose first
index is one of its axes plus a constant ``c``; row ``t`` of it is its init's row plus the
adds with that axis at ``t - c`` (:func:`row_scatter`), and its reads' time offsets count from
that row.

Declaration errors (:class:`~tecomp.errors.DeclarationError`): a state read at ``t`` or later,
a lag that is not a constant or exceeds the given steps, init/update/state shapes or dtypes
that disagree, a state used by the init, listed as an input, or used by a second scan, and a
body tensor without the time axis first.  A state read by a tensor outside its scan is
reported when that tensor is evaluated or lowered (:func:`check_not_state`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from . import expr as E
from .dtypes import is_int
from .errors import DeclarationError
from .functor import RemapReads, input_tensors, op_exprs, substitute, tensor_reads, topo_order
from .scan_op import Scan, ScanOp
from .tensor import ComputeOp, ScatterOp, Tensor

STATE_ATTR = "scan_state_of"
#: on the state placeholders of an adjoint (reverse) scan: ``k`` of ``tc.gradient(checkpoint=k)``
CHECKPOINT_ATTR = "checkpoint"
#: on a scan's compute body stages: ``(first, count)``, the rows of the time axis its steps
#: compute (``L, T - L`` forward; ``0, T - L`` reverse).  A pass that moves part of a body stage
#: into a stage of its own computes only these rows, as the scan itself does.
STEP_ROWS_ATTR = "scan_step_rows"


def is_scan(t: Tensor) -> bool:
    return isinstance(t.op, ScanOp)


# ------------------------------------------------------------------------------ analysis
def linear_form(e: E.Expr) -> dict[Any, int] | None:
    """``e`` as ``{var: coefficient, 1: constant}`` when it is affine in its variables with
    integer coefficients (a float constant, or a cast of a float, is not: ``int(i * 0.5)``
    is no multiple of ``i``)."""
    if isinstance(e, E.Const):
        v = e.value
        return {1: v} if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(e, E.Var):
        return {e: 1}
    if isinstance(e, E.Cast):
        return linear_form(e.value) if is_int(e.value.dtype) else None
    if isinstance(e, E.Neg):
        f = linear_form(e.a)
        return None if f is None else {k: -v for k, v in f.items()}
    if isinstance(e, (E.Add, E.Sub)):
        a, b = linear_form(e.a), linear_form(e.b)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(e, E.Add) else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v != 0}
    if isinstance(e, E.Mul):
        a, b = linear_form(e.a), linear_form(e.b)
        if a is None or b is None:
            return None
        for x, y in ((a, b), (b, a)):
            if set(x) <= {1}:
                c = x.get(1, 0)
                return {k: c * v for k, v in y.items() if c * v != 0}
    return None


def time_offset(index: E.Expr, t: E.Var) -> int | None:
    """``d`` when ``index == t + d`` for a constant ``d``, else None."""
    f = linear_form(E.sub(index, t))
    if f is None or set(f) - {1}:
        return None
    return f.get(1, 0)


def _fmt_shape(t: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def _same(a: E.Expr, b: E.Expr) -> bool:
    if isinstance(a, E.Const) and isinstance(b, E.Const):
        return a.value == b.value
    return a == b


def _body_tensors(updates: Sequence[Tensor], states: Sequence[Tensor]) -> tuple[list, list]:
    """The tensors between the states and the updates, producers first, and the outer
    tensors they read (first appearance first)."""
    sids = {id(s) for s in states}
    uids = {id(u) for u in updates}
    inside: dict[int, bool] = {}
    body: list[Tensor] = []
    for t in topo_order(list(updates)):
        if id(t) in sids:
            inside[id(t)] = True
            continue
        deps = input_tensors(t)
        inside[id(t)] = id(t) in uids or any(inside.get(id(d), False) for d in deps)
        if inside[id(t)]:
            body.append(t)
    outer: list[Tensor] = []
    seen: set[int] = set()
    for t in body:
        for d in input_tensors(t):
            if not inside.get(id(d)) and id(d) not in seen and id(d) not in sids:
                seen.add(id(d))
                outer.append(d)
    return body, outer


def _step_order(name: str, body: list[Tensor], updates: Sequence[Tensor],
                states: Sequence[Tensor], steps: int, reverse: bool,
                internal: bool) -> list[Tensor]:
    """The body in an order where every same-step read follows its producer; checks lags."""
    sign = -1 if reverse else 1  # a read of an earlier step has offset * sign < 0
    state_of = {id(s): k for k, s in enumerate(states)}
    bids = {id(b) for b in body}
    deps: dict[int, set[int]] = {id(b): set() for b in body}
    for b in body:
        scatter = isinstance(b.op, ScatterOp) and internal
        if not isinstance(b.op, ComputeOp) and not scatter:
            kind = "scatter" if isinstance(b.op, ScatterOp) else type(b.op).__name__
            raise DeclarationError(
                f"scan {name!r}: the step tensor {b.name!r} is a {kind}; a step holds "
                "compute tensors only")
        if b.ndim == 0 or not _same(b.shape[0], states[0].shape[0]):
            raise DeclarationError(
                f"scan {name!r}: the step tensor {b.name!r} of shape {_fmt_shape(b)} depends "
                f"on a state but its first axis is not the time axis of extent "
                f"{states[0].shape[0]}")
        if scatter:
            found = scatter_time(b)
            if found is None:
                raise DeclarationError(
                    f"scan {name!r}: the step scatter {b.name!r} writes row "
                    f"{b.op.indices[0]}, not one of its axes plus a constant")
            tv, shift = b.op.axes[found[0]].var, found[1]
            reads = [r for e in op_exprs(b) for r in tensor_reads(e)]
            if b.op.init is not None and id(b.op.init) in bids:
                deps[id(b)].add(id(b.op.init))           # its row first, then the adds
        else:
            tv, shift, reads = b.op.axes[0].var, 0, tensor_reads(b.op.body)
        for r in reads:
            src = r.tensor
            if id(src) not in state_of and id(src) not in bids:
                continue
            d = time_offset(r.indices[0], tv)
            d = None if d is None else d - shift       # relative to the row written
            if id(src) in state_of:
                if d is None:
                    raise DeclarationError(
                        f"scan {name!r}: {b.name!r} reads the state {src.name!r} at time "
                        f"{r.indices[0]}, not at {tv.name} - d for a constant lag d (in {r})")
                if d * sign > 0 or (d == 0 and not internal):
                    raise DeclarationError(
                        f"scan {name!r}: {b.name!r} reads the state {src.name!r} at step "
                        f"{r.indices[0]}, the current or a later step; a state can be read "
                        f"only at {tv.name} - d with a constant d >= 1 (in {r})")
                if abs(d) > steps and not internal:
                    raise DeclarationError(
                        f"scan {name!r}: {b.name!r} reads the state {src.name!r} with lag "
                        f"{abs(d)}, but init gives only {steps} step(s); make init's first "
                        f"extent at least {abs(d)}")
                if d == 0:
                    deps[id(b)].add(id(updates[state_of[id(src)]]))
            else:
                if d is None or d * sign > 0:
                    raise DeclarationError(
                        f"scan {name!r}: {b.name!r} reads the step tensor {src.name!r} at time "
                        f"{r.indices[0]}; step tensors are read at {tv.name} - d, d >= 0 "
                        f"(in {r})")
                if d == 0 and src is not b:
                    deps[id(b)].add(id(src))
    order: list[Tensor] = []
    state: dict[int, int] = {}
    by_id = {id(b): b for b in body}

    def visit(b: Tensor) -> None:
        if state.get(id(b)) == 2:
            return
        if state.get(id(b)) == 1:
            raise DeclarationError(
                f"scan {name!r}: the step tensors depend on each other within one step in a "
                f"cycle through {b.name!r}")
        state[id(b)] = 1
        for d in sorted(deps[id(b)], key=lambda k: [id(x) for x in body].index(k)):
            visit(by_id[d])
        state[id(b)] = 2
        order.append(b)

    for b in body:
        visit(b)
    return order


def scatter_time(b: Tensor) -> tuple[int, int] | None:
    """``(m, c)`` when the scatter ``b`` writes row ``axes[m] + c`` (its first index)."""
    for m, ax in enumerate(b.op.axes):
        c = time_offset(b.op.indices[0], ax.var)
        if c is not None:
            return m, c
    return None


def row_scatter(op: ScatterOp, m: int, c: int, row: E.Expr) -> ScatterOp:
    """The part of a step scatter (time axis ``m``, rows ``axes[m] + c``) that lands in row
    ``row``: that axis fixed at ``row - c`` (nothing where it is out of the axis' range),
    without ``init``.  A step computes row ``t`` of a step scatter as ``init[t]`` plus it."""
    ax = op.axes[m]
    v = E.sub(row, E.Const(c, "int64"))
    sub = {ax.var: v}
    rest = tuple(E.IterVar(a.var, substitute(a.lo, sub), substitute(a.extent, sub), a.kind)
                 for n, a in enumerate(op.axes) if n != m)
    guard = E.logical_and(E.compare(E.GE, v, ax.lo),
                          E.compare(E.LT, v, E.add(ax.lo, ax.extent)))
    where = guard if op.where is None else E.logical_and(guard, substitute(op.where, sub))
    return ScatterOp(rest, tuple(substitute(i, sub) for i in op.indices),
                     substitute(op.value, sub), where, None)


# ------------------------------------------------------------------------------ building
def make_scan(name: str, init: Sequence[Tensor], update: Sequence[Tensor],
              state: Sequence[Tensor], *, reverse: bool = False,
              internal: bool = False) -> list[Tensor]:
    """Build the scan node and its output tensors (one per state); checks as ``tc.scan``."""
    init, update, state = tuple(init), tuple(update), tuple(state)
    steps: int | None = None
    for k, (i0, u, s) in enumerate(zip(init, update, state)):
        what = f"scan {name!r}, state {k} ({s.name!r})"
        if not s.is_placeholder:
            raise DeclarationError(f"{what}: the state must be a tc.placeholder, got {s!r}")
        if s.ndim == 0:
            raise DeclarationError(f"{what}: a state needs a time axis (its first axis)")
        for t, role in ((i0, "init"), (u, "update")):
            if t.dtype != s.dtype:
                raise DeclarationError(
                    f"{what}: {role} {t.name!r} has dtype {t.dtype}, the state {s.dtype}")
        if u.ndim != s.ndim or not all(_same(a, b) for a, b in zip(u.shape, s.shape)):
            raise DeclarationError(
                f"{what}: update {u.name!r} has shape {_fmt_shape(u)}, the state "
                f"{_fmt_shape(s)}; they must agree")
        if i0.ndim != s.ndim or not all(_same(a, b) for a, b in zip(i0.shape[1:], s.shape[1:])):
            raise DeclarationError(
                f"{what}: init {i0.name!r} has shape {_fmt_shape(i0)}; it must be (L,) + the "
                f"state's shape after the time axis {_fmt_shape(s)[1:]}")
        if not isinstance(i0.shape[0], E.Const):
            raise DeclarationError(
                f"{what}: the number of given steps (init's first extent {i0.shape[0]}) must "
                "be a constant")
        if steps is not None and int(i0.shape[0].value) != steps:
            raise DeclarationError(
                f"{what}: init {i0.name!r} gives {i0.shape[0]} step(s), the other states "
                f"{steps}; every state starts with the same number of steps")
        steps = int(i0.shape[0].value)
        if not _same(s.shape[0], state[0].shape[0]):
            raise DeclarationError(
                f"{what}: time extent {s.shape[0]} differs from the first state's "
                f"{state[0].shape[0]}")
        other = s.attrs.get(STATE_ATTR)
        if other is not None:
            raise DeclarationError(
                f"{what}: the placeholder is already the state of scan {other!r}; declare a "
                "new placeholder for each scan")
    if len({id(s) for s in state}) != len(state):
        raise DeclarationError(f"scan {name!r}: a state placeholder is listed twice")
    sids = {id(s) for s in state}
    for i0 in init:
        for t in topo_order([i0]):
            if id(t) in sids:
                raise DeclarationError(
                    f"scan {name!r}: init {i0.name!r} reads the state {t.name!r}; the given "
                    "steps cannot depend on the scan's own result")
    body, outer = _body_tensors(update, state)
    order = _step_order(name, body, update, state, steps or 0, reverse, internal)
    outer_all: list[Tensor] = []
    for t in list(init) + outer:
        if not any(t is x for x in outer_all):
            outer_all.append(t)
    sc = Scan(name, init, update, state, tuple(order), tuple(outer_all), steps or 0, reverse)
    rows = (E.Const(0 if reverse else steps or 0, "int64"),
            E.sub(sc.extent, E.Const(steps or 0, "int64")))
    for b in order:
        if isinstance(b.op, ComputeOp):
            b.attrs[STEP_ROWS_ATTR] = rows
    for k, s in enumerate(state):
        s.attrs[STATE_ATTR] = name
        sc.outputs.append(Tensor(name if len(state) == 1 else f"{name}.{k}", s.shape, s.dtype,
                                 ScanOp(sc, k)))
    return list(sc.outputs)


def _as_list(x: Any, what: str, name: str) -> tuple[list[Tensor], bool]:
    if isinstance(x, Tensor):
        return [x], True
    try:
        items = list(x)
    except TypeError:
        raise DeclarationError(f"scan {name!r}: {what} must be a tensor or a list of tensors, "
                               f"got {x!r}") from None
    for t in items:
        if not isinstance(t, Tensor):
            raise DeclarationError(f"scan {name!r}: {what} holds {t!r}, not a tensor")
    return items, False


def scan(init: Tensor | Sequence[Tensor], update: Tensor | Sequence[Tensor],
         state: Tensor | Sequence[Tensor], inputs: Sequence[Tensor] | None = None,
         name: str | None = None) -> Tensor | list[Tensor]:
    """A recurrence over the first (time) axis: ``S[t] = init[t]`` for ``t < init.shape[0]``,
    else ``update[t]``, where ``update`` reads ``state`` (a placeholder of the result's shape)
    only at ``t - d`` for constant lags ``d >= 1``.  Lists of init/update/state give several
    states at once and return a list.  ``inputs`` (optional) names the tensors the step reads
    from outside; each must not depend on a state.
    """
    name = name or "scan"
    inits, single = _as_list(init, "init", name)
    updates, _ = _as_list(update, "update", name)
    states, _ = _as_list(state, "state", name)
    if not (len(inits) == len(updates) == len(states)) or not states:
        raise DeclarationError(
            f"scan {name!r}: {len(inits)} init(s), {len(updates)} update(s) and "
            f"{len(states)} state(s); give one of each per state")
    sids = {id(s) for s in states}
    for x in inputs or ():
        if not isinstance(x, Tensor):
            raise DeclarationError(f"scan {name!r}: inputs holds {x!r}, not a tensor")
        if any(id(t) in sids for t in topo_order([x])):
            raise DeclarationError(
                f"scan {name!r}: the input {x.name!r} is (or reads) a state of the scan; "
                "states are read only by the update")
    outs = make_scan(name, inits, updates, states)
    return outs[0] if single else outs


def checkpoint_of(roots: Sequence[Tensor]) -> int | None:
    """``k`` when a scan below ``roots`` is an adjoint built by ``tc.gradient(checkpoint=k)``."""
    for t in topo_order(list(roots)):
        if isinstance(t.op, ScanOp):
            k = t.op.scan.state[0].attrs.get(CHECKPOINT_ATTR)
            if k is not None:
                return int(k)
    return None


def check_not_state(t: Tensor, reader: Tensor | None) -> None:
    """Raise when the placeholder ``t`` is a scan's state reached from outside that scan."""
    owner = t.attrs.get(STATE_ATTR)
    if owner is not None:
        where = f"by {reader.name!r}" if reader is not None else "as an output"
        raise DeclarationError(
            f"the state {t.name!r} of scan {owner!r} is used outside its scan ({where}); "
            "read the scan's result instead")


# ------------------------------------------------------------------------------ rewriting
def rescan(sc: Scan, init: Sequence[Tensor], update: Sequence[Tensor]) -> Scan:
    """``sc`` with new init and update tensors (same states, direction and name)."""
    for s in sc.state:
        s.attrs.pop(STATE_ATTR, None)
    try:
        outs = make_scan(sc.name, init, update, sc.state, reverse=sc.reverse,
                         internal=True)
    finally:
        for s in sc.state:
            s.attrs[STATE_ATTR] = sc.name
    return outs[0].op.scan


def replace_tensors(roots: Sequence[Tensor], new: Mapping[int, Tensor]) -> list[Tensor]:
    """``roots`` with the tensors in ``new`` (``id(old) -> new``) substituted everywhere below
    them; tensors that read a replaced tensor are rebuilt, others kept."""
    done: dict[int, Tensor] = dict(new)
    scans: dict[int, Scan] = {}
    for t in topo_order(list(roots)):
        if id(t) in done:
            continue
        op = t.op
        if isinstance(op, ComputeOp):
            body = RemapReads(done).visit(op.body)
            if body is not op.body:
                done[id(t)] = Tensor(t.name, t.shape, t.dtype, ComputeOp(op.axes, body, op.tag),
                                     dict(t.attrs))
        elif isinstance(op, ScatterOp):
            rm = RemapReads(done)
            init = done.get(id(op.init), op.init) if op.init is not None else None
            sop = ScatterOp(tuple(rm.visit_axis(a) for a in op.axes),
                            tuple(rm.visit(i) for i in op.indices), rm.visit(op.value),
                            None if op.where is None else rm.visit(op.where), init)
            done[id(t)] = Tensor(t.name, t.shape, t.dtype, sop, dict(t.attrs))
        elif isinstance(op, ScanOp):
            if any(id(d) in done for d in input_tensors(t)):
                sc = op.scan
                nsc = scans.get(id(sc))
                if nsc is None:
                    k = len(sc.update)
                    rem = replace_tensors(list(sc.update) + list(sc.init), done)
                    nsc = scans[id(sc)] = rescan(sc, rem[k:], rem[:k])
                done[id(t)] = nsc.outputs[op.index]
    return [done.get(id(t), t) for t in roots]
