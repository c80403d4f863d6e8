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
  program guards is ever executed unguarded.
"""

from __future__ import annotations

from typing import Sequence

from tecomp import expr as E
from tecomp.functor import ExprMutator, free_vars, make_reduce, topo_order, walk
from tecomp.tensor import ComputeOp, ScatterOp, Tensor


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
        inv = [f for f in num if not (free_vars(f) & bound)]
        inv_den = [f for f in den if not (free_vars(f) & bound)]
        if not inv and not inv_den and sign > 0:
            return e2
        rest = [f for f in num if free_vars(f) & bound]
        rest_den = [f for f in den if free_vars(f) & bound]
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
        return out if sign > 0 else E.neg(out)


def hoist_sum_factors(e: E.Expr) -> E.Expr:
    """Move factors that do not depend on a sum's variables out of the sum."""
    return _HoistFactors().visit(e)


def _expensive(e: E.Expr) -> bool:
    return any(isinstance(x, (E.Call, E.Div, E.Reduce)) for x in walk(e))


def _unconditional(e: E.Expr) -> list[E.Expr]:
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


class _Replace(ExprMutator):
    def __init__(self, mapping: dict[E.Expr, E.Expr]) -> None:
        super().__init__()
        self.mapping = mapping

    def visit(self, e):  # type: ignore[override]
        if isinstance(e, E.Expr) and e in self.mapping:
            return self.mapping[e]
        return super().visit(e)


def stash_invariants(t: Tensor) -> list[Tensor]:
    """``[new stages..., t']``: ``t`` with lower-dimensional work moved into new stages."""
    if not isinstance(t.op, ComputeOp) or len(t.op.axes) < 1:
        return [t]
    axes = [a.var for a in t.op.axes]
    mapping: dict[E.Expr, E.Expr] = {}
    stages: list[Tensor] = []
    for x in _unconditional(t.op.body):
        if x in mapping or not _expensive(x) or isinstance(x, E.TensorRead):
            continue
        used = free_vars(x) & set(axes)
        if len(used) >= len(axes):
            continue
        if any(x in walk(m) for m in mapping):
            continue
        keep = [(a, s) for a, s in zip(t.op.axes, t.shape) if a.var in used]
        name = f"{t.name}_inv{len(stages)}"
        stage = Tensor(name, tuple(s for _, s in keep), x.dtype,
                       ComputeOp(tuple(a for a, _ in keep), x, None))
        stages.append(stage)
        mapping[x] = E.TensorRead(stage, tuple(a.var for a, _ in keep), x.dtype)
    if not stages:
        return [t]
    body = _Replace(mapping).visit(t.op.body)
    return stages + [Tensor(t.name, t.shape, t.dtype, ComputeOp(t.op.axes, body, t.op.tag),
                            dict(t.attrs))]


def simplify(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Apply :func:`hoist_sum_factors` and :func:`stash_invariants` to every compute stage."""
    new: dict[int, Tensor] = {}

    class _Remap(ExprMutator):
        def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
            idx = tuple(self.visit(i) for i in e.indices)
            tt = new.get(id(e.tensor), e.tensor)
            if tt is e.tensor and all(a is b for a, b in zip(idx, e.indices)):
                return e
            return E.TensorRead(tt, idx, e.dtype)

    for t in topo_order(list(outputs)):
        if isinstance(t.op, ScatterOp):
            r = _Remap()
            op = t.op
            init = new.get(id(op.init), op.init) if op.init is not None else None
            new[id(t)] = Tensor(t.name, t.shape, t.dtype, ScatterOp(
                tuple(r.visit_axis(a) for a in op.axes), tuple(r.visit(i) for i in op.indices),
                r.visit(op.value), None if op.where is None else r.visit(op.where), init),
                dict(t.attrs))
            continue
        if not isinstance(t.op, ComputeOp):
            continue
        body = hoist_sum_factors(_Remap().visit(t.op.body))
        t2 = t if body is t.op.body else Tensor(
            t.name, t.shape, t.dtype, ComputeOp(t.op.axes, body, t.op.tag), dict(t.attrs))
        t3 = stash_invariants(t2)[-1]
        if t3 is not t:
            new[id(t)] = t3
    return [new.get(id(t), t) for t in outputs]
