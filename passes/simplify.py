"""Algebraic clean-up after zero elimination: hoisting work out of loops it does not need.

Two rewrites, both value-preserving up to float reassociation:

* :func:`hoist_sum_factors` — ``Σ_t a(j)·b(j, t)  ->  a(j) · Σ_t b(j, t)``: factors of a sum's
  body (through products, negation and division by an invariant) that do not depend on the
  summation variables move outside it (``# sum(x*y, t) -> x*sum(y, t)`` when ``t ∉ x``).
* :func:`stash_invariants` — a sub-expression of a stage ``T[i, j]`` that depends on a proper
  subset of its axes and contains real work (a math call, a division or a reduction) becomes
  its own stage ``S[i]``, computed once per ``i`` instead of once per ``(i, j)`` — the
  "factor out a new tensor only where it shrinks the iteration volume" rule of
  ZERO_ELIMINATION.md, and what keeps ``1/sqrt(var[i] + eps)`` of a layer-norm gradient
  from being recomputed per element.  Only sub-expressions evaluated unconditionally are
  moved (never out of an ``if_then_else`` arm or a reduction body), so no read that the
  program guards is ever executed unguarded; a part of a scan's step is computed at the rows
  the steps compute only (:func:`_stash_stage`), never at a row the scan skips.
"""

from __future__ import annotations

from typing import Sequence

from tecomp import expr as E
from tecomp.functor import (
    ExprMutator,
    free_vars,
    make_reduce,
    rewrite_stages,
    substitute,
    topo_order,
    unconditional,
    walk,
)
from tecomp.scan import STATE_ATTR, STEP_ROWS_ATTR
from tecomp.tensor import ComputeOp, Tensor


def _factors(e: E.Expr) -> tuple[list[E.Expr], list[E.Expr], int]:
    """``e`` as (numerator factors, denominator factors, sign)."""
    if isinstance(e, E.Mul):
        n1, d1, s1 = _factors(e.a)
        n2, d2, s2 = _factors(e.b)
        return n1 + n2, d1 + d2, s1 * s2
    if isinstance(e, E.Neg):
        n, d, s = _factors(e.a)
        return n, d, -s
    if isinstance(e, E.Div):
        n1, d1, s1 = _factors(e.a)
        return n1, d1 + [e.b], s1
    return [e], [], 1


def _product(fs: list[E.Expr], dtype: str) -> E.Expr | None:
    out: E.Expr | None = None
    for f in fs:
        out = f if out is None else E.mul(out, f)
    return out


class _HoistFactors(ExprMutator):
    def visit_Reduce(self, e: E.Reduce) -> E.Expr:
        e2 = super().visit_Reduce(e)
        if not isinstance(e2, E.Reduce) or e2.combiner != "sum" or not e2.dtype.startswith(
                ("float", "bfloat")):
            return e2
        bound = {a.var for a in e2.axes}
        num, den, sign = _factors(e2.body)
        guard, exact = _nonempty(e2, bound)
        # a factor moved out is evaluated where the sum's domain may be empty: one that reads
        # a tensor stays inside unless that domain's condition can guard it (zero-eliminated
        # extents such as ``select(j0 >= 1, 4, 0)`` protect reads like ``X[j0, j0 - 1]``)
        def reads(f: E.Expr) -> bool:
            return any(isinstance(x, E.TensorRead) for x in walk(f))

        def movable(f: E.Expr) -> bool:
            return not free_vars(f) & bound and (exact or not reads(f))

        inv = [f for f in num if movable(f)]
        inv_den = [f for f in den if movable(f)]
        if not inv and not inv_den and sign > 0:
            return e2
        rest = [f for f in num if not movable(f)]
        rest_den = [f for f in den if not movable(f)]
        if not rest:
            return e2  # a sum of an invariant: leave it (it is a count times a value)
        body = _product(rest, e2.dtype)
        for d in rest_den:
            body = E.div(body, d)
        out = make_reduce("sum", body, e2.axes, e2.where, e2.dtype)
        outer = _product(inv, e2.dtype)
        if outer is not None:
            out = E.mul(outer, out)
        for d in inv_den:
            out = E.div(out, d)
        out = out if sign > 0 else E.neg(out)
        if guard is None or not (inv_den or any(reads(f) for f in inv)):
            return out
        return E.select(guard, out, E.Zero(e2.dtype))


def _nonempty(red: E.Reduce, bound: set[E.Var]) -> tuple[E.Expr | None, bool]:
    """The condition under which ``red``'s domain can be non-empty (None: always), and
    whether it is exact (False when ``where`` has conjuncts on the summation variables)."""
    conds: list[E.Expr] = []
    exact, todo = True, [red.where] if red.where is not None else []
    for a in red.axes:
        if isinstance(a.extent, E.Const) and a.extent.value > 0:
            continue
        if free_vars(a.extent) & bound:  # a triangular range: no condition outside the sum
            exact = False
        else:
            conds.append(E.compare(E.GT, a.extent, E.Const(0, a.extent.dtype)))
    while todo:
        c = todo.pop()
        if isinstance(c, E.And):
            todo += [c.a, c.b]
        elif free_vars(c) & bound:
            exact = False
        else:
            conds.append(c)
    out = None
    for c in conds:
        out = c if out is None else E.logical_and(out, c)
    return out, exact


def hoist_sum_factors(e: E.Expr) -> E.Expr:
    """Move factors that do not depend on a sum's variables out of the sum."""
    return _HoistFactors().visit(e)


def _expensive(e: E.Expr) -> bool:
    return any(isinstance(x, (E.Call, E.Div, E.Reduce)) for x in walk(e))


class _Replace(ExprMutator):
    def __init__(self, mapping: dict[E.Expr, E.Expr]) -> None:
        super().__init__()
        self.mapping = mapping

    def visit(self, e):  # type: ignore[override]
        if isinstance(e, E.Expr) and e in self.mapping:
            return self.mapping[e]
        return super().visit(e)


def _flops(e: E.Expr) -> int:
    return sum(1 for x in walk(e) if isinstance(x, (E.BinaryOp, E.Neg, E.Call))
               and x.dtype.startswith(("float", "bfloat")))


def _regrouped(red: E.Reduce, axes: list[E.Var]) -> tuple[list[E.Expr], list[E.Expr], int]:
    """Split a sum's factors into a product that skips one output axis and the rest: for
    ``Σ_t dH[t, j] · X[t, c] · (1 - H[t, j]²)``, ``[dH[t, j], 1 - H[t, j]²]`` and ``[X[t, c]]``.
    """
    num, den, sign = _factors(red.body)
    if den or len(num) < 3:
        return [], num, sign
    best: list[E.Expr] = []
    for skip in axes:
        group = [f for f in num if skip not in free_vars(f)]
        if 2 <= len(group) < len(num) and len(group) > len(best):
            best = group
    rest = [f for f in num if not any(f is g for g in best)]
    return best, rest, sign


def _reads_state(x: E.Expr) -> bool:
    """Whether ``x`` depends on a scan's state (directly or through the step's stages)."""
    reads = [r.tensor for r in walk(x) if isinstance(r, E.TensorRead)]
    return any(STATE_ATTR in d.attrs for d in topo_order(reads))


def _stash_stage(t: Tensor, x: E.Expr, name: str, axes: list[tuple[E.IterVar, E.Expr]],
                 sub: dict[E.Var, E.Expr], idx: list[E.Expr]) -> E.TensorRead:
    """A new stage ``name`` computing ``x`` (``sub`` applied) over ``axes`` (each with its
    extent), read back at ``idx``.

    In a scan's step stage the time axis spans ``T`` rows but the steps compute only some
    (``STEP_ROWS_ATTR``), and a stashed part that does not read the state is computed once
    before the scan: it gets the step rows only (read at ``t - first``), and a part without
    the time axis is computed only if a step runs, so that it reads nothing the scan skips."""
    rows = t.attrs.get(STEP_ROWS_ATTR)
    if rows is not None and not _reads_state(x):
        first, count = rows
        time = t.op.axes[0]
        if any(a is time for a, _ in axes):
            v = E.Var(time.var.name, "int64")
            axes = [(E.IterVar(v, E.Const(0, "int64"), count, "data"), count)
                    if a is time else (a, ext) for a, ext in axes]
            idx = [E.sub(e, first) if e is time.var else e for e in idx]
            sub = {**sub, time.var: E.add(v, first)}
        else:
            x = E.select(E.compare(E.GT, count, E.Const(0, "int64")), x,
                         E.Const(0, x.dtype))
    body = substitute(x, sub) if sub else x
    stage = Tensor(name, tuple(ext for _, ext in axes), x.dtype,
                   ComputeOp(tuple(a for a, _ in axes), body, None))
    return E.TensorRead(stage, tuple(idx), x.dtype)


def _stash_in_sums(t: Tensor, body: E.Expr, axes: list[E.Var], stages: list[Tensor],
                   sizes: set[E.Var]) -> dict[E.Expr, E.Expr]:
    """Inside unconditional sums over a box, stash sub-expressions that skip an output axis.

    ``dW[j, c] = Σ_t dH[t, j] · (1 - H[t, j]²) · X[t, c]``: the first two factors depend on
    ``(j, t)`` only, so they become a stage ``S[j, t]`` computed once, not once per ``c``.
    """
    mapping: dict[E.Expr, E.Expr] = {}
    for red in unconditional(body):
        if not isinstance(red, E.Reduce) or red.where is not None:
            continue
        rvars = [a.var for a in red.axes]
        if any((free_vars(a.lo) | free_vars(a.extent)) - sizes for a in red.axes):
            continue  # not a box: a stage over it would need a shape depending on loops
        group, rest, sign = _regrouped(red, axes)
        prod = _product(group, red.dtype) if group else None
        for x in ([prod] if prod is not None else []) + unconditional(red.body):
            if x in mapping or _flops(x) < 2 or isinstance(x, E.TensorRead):
                continue
            used = free_vars(x)
            if used - set(axes) - set(rvars) - sizes:
                continue
            out_used = [a for a in t.op.axes if a.var in used]
            if len(out_used) >= len(axes):
                continue
            red_used = [a for a in red.axes if a.var in used]
            if not red_used or any(x in walk(m) for m in mapping):
                continue
            new_axes, idx, sub = [], [], {}
            for a in out_used:
                new_axes.append((a, t.shape[axes.index(a.var)]))
                idx.append(a.var)
            for a in red_used:
                v = E.Var(a.var.name, "int64")
                new_axes.append((E.IterVar(v, E.Const(0, "int64"), a.extent, "data"), a.extent))
                idx.append(E.sub(a.var, a.lo))
                sub[a.var] = E.add(v, a.lo)
            read = _stash_stage(t, x, f"{t.name}_inv{len(stages)}", new_axes, sub, idx)
            stages.append(read.tensor)
            if x is prod:
                body = E.mul(read, _product(rest, red.dtype))
                mapping[red] = make_reduce(red.combiner, body if sign > 0 else E.neg(body),
                                           red.axes, red.where, red.dtype)
                break
            mapping[x] = read
    return mapping


def stash_invariants(t: Tensor) -> list[Tensor]:
    """``[new stages..., t']``: ``t`` with lower-dimensional work moved into new stages."""
    if not isinstance(t.op, ComputeOp) or len(t.op.axes) < 1:
        return [t]
    axes = [a.var for a in t.op.axes]
    mapping: dict[E.Expr, E.Expr] = {}
    stages: list[Tensor] = []
    bound_anywhere = {a.var for x in walk(t.op.body) if isinstance(x, E.Reduce) for a in x.axes}
    sizes = free_vars(t.op.body) - set(axes) - bound_anywhere
    mapping.update(_stash_in_sums(t, t.op.body, axes, stages, sizes))
    for x in unconditional(t.op.body):
        if x in mapping or not _expensive(x) or isinstance(x, E.TensorRead):
            continue
        used = free_vars(x) & set(axes)
        if len(used) >= len(axes):
            continue
        if any(x in walk(m) for m in mapping):
            continue
        keep = [(a, ext) for a, ext in zip(t.op.axes, t.shape) if a.var in used]
        read = _stash_stage(t, x, f"{t.name}_inv{len(stages)}", keep, {},
                            [a.var for a, _ in keep])
        stages.append(read.tensor)
        mapping[x] = read
    if not stages:
        return [t]
    body = _Replace(mapping).visit(t.op.body)
    return stages + [Tensor(t.name, t.shape, t.dtype, ComputeOp(t.op.axes, body, t.op.tag),
                            dict(t.attrs))]


def simplify(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Apply :func:`hoist_sum_factors` and :func:`stash_invariants` to every compute stage."""

    def rewrite(t: Tensor, body: E.Expr) -> Tensor | None:
        hoisted = hoist_sum_factors(body)
        if hoisted is t.op.body:
            t2 = t
        else:
            t2 = Tensor(t.name, t.shape, t.dtype, ComputeOp(t.op.axes, hoisted, t.op.tag),
                        dict(t.attrs))
        t3 = stash_invariants(t2)[-1]
        return None if t3 is t else t3

    return rewrite_stages(outputs, rewrite)
