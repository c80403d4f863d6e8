"""Reverse mode through a scan: the adjoint recurrence, itself a scan running backward in time.

A forward scan with states ``S_k`` (``L`` given steps, time extent ``T``) and steps
``S_k[t] = U_k(t; S[t - d], X)`` for ``t >= L`` has, for heads ``G_k = dℓ/dS_k`` (what the
rest of the graph contributes), full adjoints ``A_k`` that satisfy the backward recurrence

    A_k[t] = G_k[t] + Σ_m Σ_d (∂U_m[t + d] / ∂S_k[t])ᵀ A_m[t + d]        (t + d >= L)

so ``A_k`` is a *reverse* scan (no given steps; ``t = T - 1`` down to ``0``) whose step reads its
own states only at ``t + d``.  Its step comes from the existing reverse-mode pass applied to one
scalar: with new placeholders ``Q_m`` standing for ``A_m``,

    J = Σ_m Σ_{t, i} select(t >= L, Q_m[t, i], 0) · U_m[t, i]

``∂J/∂state_k`` is the sum above (a tensor of the state's shape reading ``Q`` at ``t + d``
after zero elimination), and ``∂J/∂X`` is each outer tensor's contribution.  The masked head
keeps the rows ``t < L``, which the forward scan never computed, out of the derivative.  The
step is differentiated as written, except that (:func:`guarded_body`) a step tensor read at
another step is guarded (``select(t - 1 >= 0, B[t - 1], 0)``) and a step whose body is one
call of a sum (``tanh(Σ_j W[i, j] h[t - 1, j] + ...)``) gets its argument as a step tensor of
its own, so that its derivative is ``tanh'`` once per element and then a plain product.

Forward values in these derivatives are read back from the stored states
(:func:`read_stored_states`): ``U_k`` becomes ``S_k`` (``tanh'`` reads ``1 - S[t]²``), a read
``state_k[e]`` becomes ``pad_k[e + D]`` of ``S_k`` zero-padded by its largest lag ``D`` (rows
before the steps read zeros, never out of bounds), and other step tensors are recomputed from
those outside the scan (O(T)).  Zero elimination runs on the adjoint step, with everything
outside it hidden behind placeholders and long sums split first (it expands a bounded number
of terms per stage), before the adjoint scan is built: the step order needs constant time
offsets.  Finally ``Q_m`` becomes the adjoint scan's result ``A_m`` in the outer
contributions, and init ``k`` receives ``A_k[r]`` for its rows ``r < L``.

Worked example, cumsum (``L = 1``): ``U[t, i] = state[t - 1, i] + X[t, i]``.  Then
``∂J/∂state[j0, j1] = Σ_{t,i} select(t >= 1, Q[t, i], 0) · δ(j0, t - 1) δ(j1, i)``, which zero
elimination turns into ``select(j0 + 1 <= T - 1, dU[j0 + 1, j1], 0)`` with
``dU[t, j] = select(t >= 1, Q[t, j], 0)``, so the adjoint step is
``A[t, j] = G[t, j] + (t + 1 < T ? A[t + 1, j] : 0)`` (a reverse cumsum, O(T·n)), and
``dX[t, j] = select(t >= 1, A[t, j], 0)``, ``dinit[0, j] = A[0, j]``.

Outer tensors are cut behind placeholders while ``J`` is differentiated, so that each gets
only its direct contribution (the enclosing reverse pass carries the rest).  A gather from a
state (``state[t - 1, perm[i]]``) gives a scatter into the state's adjoint row, which the
adjoint scan runs as a step scatter (:func:`tecomp.scan.row_scatter`).

The scan's derivative is O(T) in time; as built here it reads every forward state back.
``tc.gradient(..., checkpoint=k)`` marks the adjoint scan, and lowering then tiles the time
loop of the whole gradient program (:mod:`tecomp.passes.lower_checkpoint`): every k-th state
stored, each segment recomputed, O(T/k + k) rows.
"""

from __future__ import annotations

from typing import Any, Sequence

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import (
    ExprMutator,
    input_tensors,
    op_exprs,
    rewrite_stages,
    tensor_reads,
    topo_order,
    walk,
)
from tecomp.scan import make_scan, replace_tensors, scatter_time, time_offset
from tecomp.scan_op import Scan, ScanOp
from tecomp.tensor import ComputeOp, PlaceholderOp, ScatterOp, Tensor


def _axes(shape: Sequence[E.Expr], base: str, kind: str = "data") -> tuple[E.IterVar, ...]:
    return tuple(E.IterVar(E.Var(f"{base}{m}", "int64"), E.Const(0, "int64"), s, kind)
                 for m, s in enumerate(shape))


def _compute(name: str, shape: Sequence[E.Expr], dtype: str, fn: Any) -> Tensor:
    axes = _axes(shape, "a")
    body = E.as_expr(fn(*[a.var for a in axes]))
    if isinstance(body, E.Zero):
        body = E.Const(0.0, dtype)
    return Tensor(name, tuple(shape), dtype, ComputeOp(axes, E.cast(body, dtype), None))


def step_condition(sc: Scan, t: E.Expr) -> E.Expr | None:
    """Where ``sc`` computes a step at time ``t`` (None: at every t)."""
    if sc.steps == 0:
        return None
    if sc.reverse:
        return E.compare(E.LT, t, E.sub(sc.extent, E.Const(sc.steps, "int64")))
    return E.compare(E.GE, t, E.Const(sc.steps, "int64"))


class _GuardReads(ExprMutator):
    """Reads of a step tensor at another step, guarded to stay in bounds."""

    def __init__(self, sc: Scan, t: E.Var, inner: dict[int, Tensor]) -> None:
        super().__init__()
        self.sc, self.t, self.inner = sc, t, inner
        self.ids = {id(b) for b in sc.body}

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        idx = tuple(self.visit(i) for i in e.indices)
        src = self.inner.get(id(e.tensor), e.tensor)
        read = E.TensorRead(src, idx, e.dtype)
        if id(e.tensor) not in self.ids:
            return e if src is e.tensor and all(x is y for x, y in zip(idx, e.indices)) else read
        d = time_offset(idx[0], self.t)
        if d == 0:
            return read
        if d is not None and d < 0:
            cond = E.compare(E.GE, idx[0], E.Const(0, "int64"))
        elif d is not None:
            cond = E.compare(E.LT, idx[0], self.sc.extent)
        else:
            cond = E.logical_and(E.compare(E.GE, idx[0], E.Const(0, "int64")),
                                 E.compare(E.LT, idx[0], self.sc.extent))
        return E.select(cond, read, E.Zero(e.dtype))


def guarded_body(sc: Scan) -> dict[int, Tensor]:
    """Every step tensor with its reads of step tensors at other steps guarded
    (``select(t - 1 >= 0, B[t - 1], 0)``), so that its rows outside the scan's steps read
    nothing out of bounds (state reads are made safe by :func:`read_stored_states`); the
    top-level operation of each body is kept (its derivative may read the value back)."""
    ids = {id(b) for b in sc.body}
    new: dict[int, Tensor] = {}
    for b in topo_order(list(sc.update)):
        if id(b) not in ids:
            continue
        op = b.op
        if isinstance(op, ScatterOp):  # a step scatter (an adjoint's): reads guarded alike
            g = _GuardReads(sc, op.axes[scatter_time(b)[0]].var, new)
            init = None if op.init is None else new.get(id(op.init), op.init)
            sop = ScatterOp(op.axes, tuple(g.visit(i) for i in op.indices), g.visit(op.value),
                            None if op.where is None else g.visit(op.where), init)
            new[id(b)] = Tensor(b.name, b.shape, b.dtype, sop, dict(b.attrs))
            continue
        body = _GuardReads(sc, op.axes[0].var, new).visit(op.body)
        if (isinstance(body, E.Call) and len(body.args) == 1
                and any(isinstance(x, E.Reduce) for x in walk(body.args[0]))):
            # f(Σ ...): the argument becomes a step tensor of its own, so the derivative
            # is f'(value) once per element, then a plain sum (not f' inside the sum)
            pre = Tensor(f"{b.name}_arg", b.shape, body.args[0].dtype,
                         ComputeOp(op.axes, body.args[0], None))
            body = E.Call(body.name, (E.TensorRead(pre, tuple(a.var for a in op.axes),
                                                   pre.dtype),), body.dtype)
        new[id(b)] = Tensor(b.name, b.shape, b.dtype, ComputeOp(op.axes, body, op.tag))
    return new


class _ShiftReads(ExprMutator):
    """Reads of a state placeholder become shifted reads of its zero-padded stored value."""

    def __init__(self, done: dict[int, Tensor], shifts: dict[int, tuple[Tensor, int]]) -> None:
        super().__init__()
        self.done, self.shifts = done, shifts

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        idx = tuple(self.visit(i) for i in e.indices)
        hit = self.shifts.get(id(e.tensor))
        if hit is not None:
            pad, shift = hit
            return E.TensorRead(pad, (E.add(idx[0], E.Const(shift, "int64")),) + idx[1:],
                                e.dtype)
        t = self.done.get(id(e.tensor), e.tensor)
        if t is e.tensor and all(x is y for x, y in zip(idx, e.indices)):
            return e
        return E.TensorRead(t, idx, e.dtype)


def read_stored_states(roots: Sequence[Tensor], sc: Scan, updates: Sequence[Tensor],
                       ) -> list[Tensor]:
    """``roots`` with the primal values of ``sc``'s step read back from its stored states: a
    read of the update ``updates[k]`` becomes a read of state ``k``'s result, and a read of
    ``state_k[e, ...]`` a read of that result zero-padded by the largest lag ``D`` (at the
    front for a forward scan: ``pad[e + D]``), so rows before the scan's steps read zeros,
    never out of bounds."""
    outs = sc.outputs
    roots = replace_tensors(list(roots), {id(u): o for u, o in zip(updates, outs)})
    lag = {id(s): 0 for s in sc.state}
    for b in sc.body:
        tv, shift = b.op.axes[0].var, 0
        if isinstance(b.op, ScatterOp):
            m, shift = scatter_time(b)
            tv = b.op.axes[m].var
        for r in (r for e in op_exprs(b) for r in tensor_reads(e)):
            if id(r.tensor) in lag:
                d = time_offset(r.indices[0], tv)
                lag[id(r.tensor)] = max(lag[id(r.tensor)], abs((d or 0) - shift))
    shifts: dict[int, tuple[Tensor, int]] = {}
    for s, o in zip(sc.state, outs):
        D = lag[id(s)]
        ext = E.add(o.shape[0], E.Const(D, "int64"))
        shift = 0 if sc.reverse else D
        pad = _compute(f"{o.name}_padded", (ext,) + o.shape[1:], o.dtype,
                       lambda t, *r, o=o, shift=shift: _inside(o, t, shift, r))
        shifts[id(s)] = (pad, shift)
    done: dict[int, Tensor] = {}
    for t in topo_order(roots):
        if isinstance(t.op, ComputeOp):
            body = _ShiftReads(done, shifts).visit(t.op.body)
            if body is not t.op.body:
                done[id(t)] = Tensor(t.name, t.shape, t.dtype,
                                     ComputeOp(t.op.axes, body, t.op.tag), dict(t.attrs))
        elif isinstance(t.op, ScatterOp):
            op, sh = t.op, _ShiftReads(done, shifts)
            init = None if op.init is None else done.get(id(op.init), op.init)
            sop = ScatterOp(op.axes, tuple(sh.visit(i) for i in op.indices), sh.visit(op.value),
                            None if op.where is None else sh.visit(op.where), init)
            if any(a is not b for a, b in zip(op_exprs(Tensor(t.name, t.shape, t.dtype, sop)),
                                              op_exprs(t))) or init is not op.init:
                done[id(t)] = Tensor(t.name, t.shape, t.dtype, sop, dict(t.attrs))
        elif any(id(d) in done or id(d) in shifts for d in input_tensors(t)):
            done[id(t)] = replace_tensors([t], done)[0]
    return [done.get(id(t), t) for t in roots]


def _inside(o: Tensor, t: E.Expr, shift: int, rest: tuple[E.Expr, ...]) -> E.Expr:
    """``o[t - shift, rest]`` where that row exists, else 0 (a padded state)."""
    src = E.sub(t, E.Const(shift, "int64"))
    cond = E.logical_and(E.compare(E.GE, src, E.Const(0, "int64")),
                         E.compare(E.LT, src, o.shape[0]))
    return E.select(cond, E.TensorRead(o, (src,) + rest, o.dtype), E.Zero(o.dtype))


def _depends(roots: Sequence[Tensor], leaves: set[int]) -> dict[int, bool]:
    dep: dict[int, bool] = {}
    for t in topo_order(list(roots)):
        dep[id(t)] = id(t) in leaves or any(dep.get(id(d), False) for d in input_tensors(t))
    return dep


SPLIT_TERMS = 16  # additive terms of one adjoint stage above which it is split for zero elim.


def _terms(e: E.Expr) -> list[E.Expr]:
    if isinstance(e, E.Add):
        return _terms(e.a) + _terms(e.b)
    if isinstance(e, E.Sub):
        return _terms(e.a) + [E.neg(x) for x in _terms(e.b)]
    if isinstance(e, E.Neg):
        return [E.neg(x) for x in _terms(e.a)]
    return [e]


def _split_terms(t: Tensor, body: E.Expr) -> Tensor | None:
    """A stage that is a sum of many terms as a sum of reads of stages of at most
    ``SPLIT_TERMS`` terms each (zero elimination expands a bounded number of terms a stage;
    an adjoint of a long step, e.g. RK4, has more, each with its own delta)."""
    terms = _terms(body)
    if len(terms) <= SPLIT_TERMS:
        return None
    axes = t.op.axes
    idx = tuple(a.var for a in axes)
    total: E.Expr = E.Zero(t.dtype)
    for n in range(0, len(terms), SPLIT_TERMS):
        part: E.Expr = E.Zero(t.dtype)
        for x in terms[n:n + SPLIT_TERMS]:
            part = E.add(part, x)
        piece = Tensor(f"{t.name}_part{n // SPLIT_TERMS}", t.shape, t.dtype,
                       ComputeOp(axes, part, None))
        total = E.add(total, E.TensorRead(piece, idx, t.dtype))
    return Tensor(t.name, t.shape, t.dtype, ComputeOp(axes, total, t.op.tag), dict(t.attrs))


def _optimize_step(updates: list[Tensor], states: list[Tensor]) -> list[Tensor]:
    """Zero elimination and simplification on the tensors of an adjoint step only: every
    tensor that does not depend on a state is hidden behind a placeholder meanwhile."""
    from tecomp.passes.simplify import simplify
    from tecomp.passes.zero_elimination import eliminate_zeros

    dep = _depends(updates, {id(s) for s in states})
    hide: dict[int, Tensor] = {}
    back: dict[int, Tensor] = {}
    for t in topo_order(updates):
        if dep.get(id(t)) or t.is_placeholder or t.is_constant:
            continue
        if any(dep.get(id(c)) and any(d is t for d in input_tensors(c))
               for c in topo_order(updates)):
            ph = Tensor(t.name, t.shape, t.dtype, PlaceholderOp())
            hide[id(t)] = ph
            back[id(ph)] = t
    hidden = rewrite_stages(replace_tensors(updates, hide), _split_terms)
    done = simplify(eliminate_zeros(hidden))
    return replace_tensors(done, back)


def scan_vjp(sc: Scan, heads: dict[int, Tensor], targets: Sequence[Tensor]) -> dict[int, Tensor]:
    """The contribution of ``sc`` to the adjoint of each target (``id -> tensor`` of the
    target's shape), given the heads ``{state index: adjoint of that state}``."""
    from .reverse import differentiate

    outs = sc.outputs
    dtype = outs[0].dtype
    K = len(outs)
    floats = [x for x in targets if dtypes.is_float(x.dtype)]
    if isinstance(sc.extent, E.Const) and int(sc.extent.value) == sc.steps:
        # no step runs: each state is its init, and the step (never evaluated, so none of its
        # reads is either) contributes nothing; its derivative would scatter through rows the
        # scan never computes
        adjoint = [heads.get(k) for k in range(K)]
        return _init_contributions(sc, adjoint, floats, {})
    # the outer tensors are cut behind placeholders: J's derivative w.r.t. an outer tensor
    # is its direct contribution only (one that reads another, xin = U X with a step that
    # reads both, gets the rest through the enclosing reverse pass, not twice)
    cut: dict[int, Tensor] = {}
    back: dict[int, Tensor] = {}
    for x in sc.outer:
        if not (x.is_placeholder or x.is_constant):
            cut[id(x)] = Tensor(x.name, x.shape, x.dtype, PlaceholderOp())
            back[id(cut[id(x)])] = x
    guarded = guarded_body(sc)
    upd = replace_tensors([guarded[id(u)] for u in sc.update], cut)
    masked = {id(u): m for u, m in zip(sc.update, upd)}
    adj_states = [Tensor(f"{o.name}_adj", o.shape, o.dtype, PlaceholderOp()) for o in outs]
    j_axes = []
    total: E.Expr = E.Zero(dtype)
    for k, (q, u) in enumerate(zip(adj_states, sc.update)):
        r = _axes(q.shape, f"r{k}_", "reduce")
        idx = tuple(a.var for a in r)
        head = _guard(sc, idx[0], E.TensorRead(q, idx, q.dtype))
        term = E.mul(head, E.TensorRead(masked[id(u)], idx, u.dtype))
        total = E.add(total, E.cast(E.Reduce("sum", term, r, None, q.dtype), dtype))
        j_axes.append(r)
    J = Tensor(f"{sc.name}_vjp", (), dtype, ComputeOp((), total, None))
    one = Tensor(f"{sc.name}_one", (), dtype, ComputeOp((), E.Const(1.0, dtype), None))
    wrt = list(sc.state) + [cut.get(id(x), x) for x in floats]
    grads = differentiate(J, wrt, one)
    d_state, d_outer = grads[:K], grads[K:]
    # the adjoint step: A_k = G_k + dJ/dstate_k, forward values read from the stored states
    updates = []
    for k, o in enumerate(outs):
        g = heads.get(k)
        d = d_state[k]
        updates.append(_compute(f"{o.name}_adj_step", o.shape, o.dtype,
                                lambda *ix, g=g, d=d: _plus(g, d, ix)))
    k = len(updates)
    both = replace_tensors(read_stored_states(updates + d_outer, sc, upd), back)
    updates, d_outer = both[:k], both[k:]
    updates = _optimize_step(updates, adj_states)
    inits = [_compute(f"{o.name}_adj_init", (E.Const(0, "int64"),) + o.shape[1:], o.dtype,
                      lambda *ix: 0.0) for o in outs]
    try:
        A = make_scan(f"{sc.name}_adj", inits, updates, adj_states, reverse=not sc.reverse,
                      internal=True)
    except Exception as err:  # noqa: BLE001 - reported as a derivative failure
        raise DifferentiationError(
            f"the derivative of scan {sc.name!r} has a step that cannot run as a scan: "
            f"{err}") from err
    d_outer = replace_tensors(d_outer, {id(q): a for q, a in zip(adj_states, A)})
    return _init_contributions(sc, A, floats, {id(x): c for x, c in zip(floats, d_outer)})


def _init_contributions(sc: Scan, adjoint: Sequence[Tensor | None], floats: Sequence[Tensor],
                        result: dict[int, Tensor]) -> dict[int, Tensor]:
    """``result`` with each float init's share of the states' adjoints (its rows) added."""
    for k, i0 in enumerate(sc.init):
        a = adjoint[k]
        if a is None or not any(i0 is x for x in floats):
            continue
        off = E.sub(sc.extent, E.Const(sc.steps, "int64")) if sc.reverse else None
        c = _compute(f"{i0.name}_from_{sc.name}", i0.shape, i0.dtype,
                     lambda *ix, a=a, off=off: E.TensorRead(
                         a, ((ix[0] if off is None else E.add(off, ix[0])),) + ix[1:], a.dtype))
        prev = result.get(id(i0))
        if prev is not None:
            c = _compute(c.name, i0.shape, i0.dtype,
                         lambda *ix, c=c, prev=prev: E.add(E.TensorRead(c, ix, c.dtype),
                                                           E.TensorRead(prev, ix, prev.dtype)))
        result[id(i0)] = c
    return result


def _plus(g: Tensor | None, d: Tensor, ix: tuple[E.Expr, ...]) -> E.Expr:
    read = E.TensorRead(d, ix, d.dtype)
    return read if g is None else E.add(E.TensorRead(g, ix, g.dtype), read)


def _guard(sc: Scan, t: E.Expr, value: E.Expr) -> E.Expr:
    cond = step_condition(sc, t)
    return value if cond is None else E.select(cond, value, E.Zero(value.dtype))


def scan_contributions(ctx: Any, y: Tensor, adjoint: dict[int, Tensor], order: list[Tensor],
                       reach: dict[int, bool], jvars: dict[int, tuple[E.Var, ...]]):
    """``(x, [terms])`` for the outer tensors of ``y``'s scan, once the adjoints of all of the
    scan's states in ``order`` are known (at the state that comes first in ``order``)."""
    sc = y.op.scan
    members = [t for t in order if isinstance(t.op, ScanOp) and t.op.scan is sc
               and reach.get(id(t))]
    if members[0] is not y:
        return
    if ctx.prefix:
        raise DifferentiationError(
            f"tc.jacobian through the scan {sc.name!r} is not supported; use tc.gradient "
            "with a head, or tc.jvp")
    heads: dict[int, Tensor] = {}
    for m in members:
        h = adjoint.get(id(m))
        if h is None:
            continue
        k = m.op.index
        if k in heads:
            prev = heads[k]
            h = _compute(h.name, h.shape, h.dtype,
                         lambda *ix, h=h, prev=prev: E.add(E.TensorRead(h, ix, h.dtype),
                                                           E.TensorRead(prev, ix, prev.dtype)))
        heads[k] = h
    targets = [x for x in input_tensors(y) if reach.get(id(x))]
    if not targets:
        return
    contrib = scan_vjp(sc, heads, targets)
    for x in targets:
        c = contrib.get(id(x))
        if c is None:
            continue
        if id(x) not in jvars:
            jvars[id(x)] = ctx.fresh_vars(x)
        yield x, [E.TensorRead(c, ctx.prefix + jvars[id(x)], c.dtype)]
