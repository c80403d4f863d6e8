"""Inlining of cheap element-wise stages into their consumers (before lowering).

A compute stage ``P[axes] = body`` is *inlined* when every read ``P[idx]`` in the remaining
stages is replaced by ``body`` with ``axes := idx`` (:func:`tecomp.functor.substitute`), so
``P`` needs no buffer.  A read whose bounds check inlining would drop (a gather
``P[idx[i]]``, an index that may leave ``P``; :mod:`.inline_bounds`) keeps ``P`` a buffer, so
the kernel raises wherever the reference evaluator does; so does a body whose own reads may
leave their tensors when no reader reads every element of ``P`` (the evaluator computes all
of ``P``; :mod:`.whole_stage`).  As in TVM's ``compute_inline`` /
Halide's default inlining of pure functions, only element-wise stages are candidates, and only
when inlining does not raise the cost:

* ``P`` is not an output and its body holds no ``Reduce`` (a reduction is never recomputed).
* Size: (tree size of ``body``) x (number of read sites of ``P``) <= ``budget`` nodes, so a
  stage read many times by a large consumer stays a buffer -- unless ``P.attrs["inline"]``
  says the op that declared it wants it inlined whatever its size (a re-indexing view, such
  as the butterfly gradient's adjoints in the next stage's layout); the other rules hold.
* A body with flops that depend on its axes (see :mod:`tecomp.cost`; a factor like
  ``-head / n`` is computed once outside the loops) is inlined only into a single read site whose
  indices use every loop variable enclosing the read (the consumer's axes and the axes of
  the reductions around it), with no more such variables than ``P`` has dimensions: each
  element is then computed about once, as with a buffer.  Several reads in one consumer
  through the same indices count as one site (``y * (1 - y)`` in a sigmoid's gradient):
  the code generator computes the repeated subexpression once.  A body without flops (padding with
  ``if_then_else``, transposes, reshapes with ``//``/``%``, casts, gathers) only moves reads,
  so it is inlined wherever the size allows -- except a guarded body (``select``: padding)
  read through a sliding window inside a reduction (an index like ``y + ry``): there the
  bounds test and the guarded load would run once per term of the reduction (9 times per
  element for a 3x3 convolution), and they keep the loop
  vectoriser from using plain loads; one pass that writes the padded buffer is cheaper (a
  1x16x32x32 convolution with 32 3x3 filters: 0.49 ms with the padding inlined, 0.11 ms
  reading a padded copy, one core).

Stages are visited consumers-first (reverse topological order), so the read sites counted for
``P`` are those left after ``P``'s consumers were inlined into theirs.  Worked example: with
``Xp = pad(X)`` read by an element-wise stage ``Y``, ``Xp`` has no flops and is inlined:
``Y`` reads ``select(in_bounds(h), X[.., h - 1, ..], 0)`` directly (read by a convolution's
window, it keeps its buffer).  With ``R = relu(X)`` read by a
matmul ``sum_k R[i, k] * W[k, j]``, the read does not use ``j``, so ``R`` stays a buffer.
"""

from __future__ import annotations

from typing import Iterable

from tecomp import expr as E
from tecomp.cost import varying_flops
from tecomp.functor import ExprMutator, children, free_vars, make_reduce, op_exprs, substitute, walk
from tecomp.tensor import ComputeOp, ScatterOp, Tensor

from .inline_bounds import reads_checked_in_place, reads_every_element
from .whole_stage import needs_whole_domain

INLINE_BUDGET = 512


def _tree_size(e: E.Expr, memo: dict[int, int]) -> int:
    k = id(e)
    if k not in memo:
        memo[k] = 1 + sum(_tree_size(c, memo) for c in children(e))
    return memo[k]


def _has_reduce(e: E.Expr) -> bool:
    return any(isinstance(x, E.Reduce) for x in walk(e))


def _has_select(e: E.Expr) -> bool:
    return any(isinstance(x, E.Select) for x in walk(e))


def _window_read(e: E.Expr, t: Tensor, raxes: frozenset[E.Var]) -> bool:
    """Whether ``e`` reads ``t`` through a sliding window inside a reduction: an index that
    combines a reduction axis with another variable (``y + ry``), so each element of ``t`` is
    read by several terms."""
    if isinstance(e, E.TensorRead) and e.tensor is t and raxes:
        for i in e.indices:
            vs = set(_vars(i))
            if vs & raxes and len(vs) > 1:
                return True
    if isinstance(e, E.Reduce):
        inner = raxes | {ax.var for ax in e.axes}
        parts = [e.body] + ([] if e.where is None else [e.where])
        return any(_window_read(x, t, inner) for x in parts)
    return any(_window_read(c, t, raxes) for c in children(e))


def _read_sites(e: E.Expr, t: Tensor, memo: dict[int, int]) -> int:
    """Occurrences (counted as a tree) of reads of ``t`` in ``e``."""
    k = id(e)
    if k not in memo:
        own = 1 if isinstance(e, E.TensorRead) and e.tensor is t else 0
        memo[k] = own + sum(_read_sites(c, t, memo) for c in children(e))
    return memo[k]


def _covering(e: E.Expr, t: Tensor, loops: frozenset[E.Var]) -> bool:
    """Every read of ``t`` in ``e`` uses all enclosing loop variables, at most ``t.ndim``."""
    if isinstance(e, E.TensorRead) and e.tensor is t:
        used: set[E.Var] = set()
        for i in e.indices:
            used |= {v for v in _vars(i)}
        if not (loops <= used and len(loops) <= t.ndim):
            return False
    if isinstance(e, E.Reduce):
        for ax in e.axes:
            if not (_covering(ax.lo, t, loops) and _covering(ax.extent, t, loops)):
                return False
        inner = loops | {ax.var for ax in e.axes}
        parts = [e.body] + ([] if e.where is None else [e.where])
        return all(_covering(p, t, inner) for p in parts)
    return all(_covering(c, t, loops) for c in children(e))


def _read_indices(exprs: Iterable[E.Expr], t: Tensor) -> set[tuple[E.Expr, ...]]:
    """The distinct index tuples through which ``exprs`` read ``t``."""
    return {x.indices for e in exprs for x in walk(e)
            if isinstance(x, E.TensorRead) and x.tensor is t}


def _vars(e: E.Expr) -> Iterable[E.Var]:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.Var):
            yield x
        stack.extend(children(x))


class _Replace(ExprMutator):
    """Replace reads of one tensor by its body with the axes substituted."""

    def __init__(self, t: Tensor, axes: tuple[E.IterVar, ...], body: E.Expr) -> None:
        super().__init__()
        self.t, self.axes, self.body = t, axes, body

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        idx = tuple(self.visit(i) for i in e.indices)
        if e.tensor is not self.t:
            if all(x is y for x, y in zip(idx, e.indices)):
                return e
            return E.TensorRead(e.tensor, idx, e.dtype)
        return substitute(self.body, {ax.var: i for ax, i in zip(self.axes, idx)})

    def visit_Reduce(self, e: E.Reduce) -> E.Expr:
        out = super().visit_Reduce(e)
        return _point_sum(out) if out is not e else out


def _point_sum(e: E.Expr) -> E.Expr:
    """``Σ_{t in [lo, lo + n)} g · select(t == v, f(t), 0)`` with ``v`` free of the sum's axes
    as ``select(lo <= v < lo + n, (g · f)(t := v), 0)`` (the sum kept over its other axes).

    Zero elimination removes such deltas inside one stage; inlining creates new ones when a
    stage whose body is a delta on a data-dependent index (the one-hot adjoint
    ``select(j1 == y[j0], -head / n, 0)`` of a cross-entropy) is substituted into a sum of
    another stage.  Without this the sum would run over every ``t`` to pick one term.  The
    delta is looked for along the factors of the body (products, negation, a numerator)."""
    if not isinstance(e, E.Reduce) or e.combiner != "sum":
        return e
    bound = {a.var for a in e.axes}
    found = _delta_factor(e.body, bound)
    if found is None:
        return e
    t, v, rest_body = found
    if e.where is not None and t in free_vars(e.where):
        return e
    ax = next(a for a in e.axes if a.var == t)
    body = E.cast(substitute(rest_body, {t: v}), e.dtype)
    inside = E.logical_and(E.compare(E.GE, v, ax.lo),
                           E.compare(E.LT, v, E.add(ax.lo, ax.extent)))
    rest = tuple(a for a in e.axes if a is not ax)
    if rest:
        body = make_reduce("sum", body, rest, e.where, e.dtype)
    elif e.where is not None:
        inside = E.logical_and(inside, e.where)
    return E.select(inside, body, E.Zero(e.dtype))


def _delta_factor(e: E.Expr, bound: set[E.Var]) -> tuple[E.Var, E.Expr, E.Expr] | None:
    """``(t, v, e')`` when ``e = e'`` times ``[t == v]`` for a summation variable ``t`` and a
    ``v`` free of every summation variable, where ``e'`` is ``e`` with the factor
    ``select(t == v, a, 0)`` replaced by ``a``; else None."""
    if isinstance(e, E.Select) and isinstance(e.cond, E.EQ) and (
            isinstance(e.f, E.Zero) or isinstance(e.f, E.Const) and e.f.value == 0):
        for t, v in ((e.cond.a, e.cond.b), (e.cond.b, e.cond.a)):
            if isinstance(t, E.Var) and t in bound and not free_vars(v) & bound:
                return t, v, e.t
        return None
    if isinstance(e, E.Mul):
        for first, put in ((e.a, lambda x: E.Mul(x, e.b, e.dtype)),
                           (e.b, lambda x: E.Mul(e.a, x, e.dtype))):
            got = _delta_factor(first, bound)
            if got is not None:
                return got[0], got[1], put(got[2])
        return None
    if isinstance(e, (E.Neg, E.Div)):
        got = _delta_factor(e.a, bound)
        if got is None:
            return None
        return got[0], got[1], E.Neg(got[2], e.dtype) if isinstance(e, E.Neg) else \
            E.Div(got[2], e.b, e.dtype)
    if isinstance(e, E.Cast):
        got = _delta_factor(e.value, bound)
        return None if got is None else (got[0], got[1], E.Cast(got[2], e.dtype))
    return None


def inline_stages(stages: list[Tensor], keep: set[int], *, budget: int = INLINE_BUDGET
                  ) -> tuple[dict[int, tuple[E.Expr, ...]], set[int]]:
    """Decide and perform inlining over ``stages`` (compute/scatter tensors, producers first).

    ``keep`` holds the ids of tensors that must keep a buffer (outputs).  Returns, for every
    stage that is not inlined (keyed by ``id``), its defining expressions in the order of
    :func:`tecomp.functor.op_exprs` with inlined reads substituted, and the ids of the
    inlined stages.  A stage no remaining stage reads is reported as inlined: it needs no
    code.  Scatter stages and their ``init`` tensors are never inlined; scatters receive only
    stages without flops.
    """
    exprs: dict[int, tuple[E.Expr, ...]] = {id(t): tuple(op_exprs(t)) for t in stages}
    keep = set(keep) | {id(t.op.init) for t in stages
                        if isinstance(t.op, ScatterOp) and t.op.init is not None}
    inlined: set[int] = set()
    for p in reversed(stages):
        if id(p) in keep or not isinstance(p.op, ComputeOp) or _has_reduce(p.op.body):
            continue
        body = exprs[id(p)][0]
        readers = []
        sites = 0
        for s in stages:
            if id(s) in inlined or s is p:
                continue
            memo: dict[int, int] = {}
            n = sum(_read_sites(e, p, memo) for e in exprs[id(s)])
            if n:
                readers.append(s)
                sites += n
        if sites and not p.attrs.get("inline") and _tree_size(body, {}) * sites > budget:
            continue
        if any(reads_checked_in_place(s, exprs[id(s)], p) for s in readers):
            continue  # a gather or a read that may leave ``p``: the bounds pass decides it
        if sites and _has_select(body) and any(
                _window_read(e, p, frozenset()) for s in readers for e in exprs[id(s)]):
            continue  # a padded window: one pass to pad beats a bounds test per term
        if sites and varying_flops(body, frozenset(a.var.name for a in p.op.axes)) > 0:
            s = readers[0]
            if len(readers) != 1 or not isinstance(s.op, ComputeOp):
                continue
            if sites != 1 and len(_read_indices(exprs[id(s)], p)) != 1:
                continue
            if not _covering(exprs[id(s)][0], p, frozenset(ax.var for ax in s.op.axes)):
                continue
        if (sites and not any(reads_every_element(s, exprs[id(s)], p) for s in readers)
                and needs_whole_domain(p, body)):
            continue  # computed only where read, it would skip a bad index elsewhere
        rep = _Replace(p, p.op.axes, body)
        for s in readers:
            exprs[id(s)] = tuple(rep.visit(e) for e in exprs[id(s)])
        inlined.add(id(p))
    return {k: v for k, v in exprs.items() if k not in inlined}, inlined
