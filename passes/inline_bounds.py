"""Which reads of a stage may be inlined without losing their bounds check.

Inlining ``P[idx]`` replaces the read by ``P``'s body with its axes set to ``idx``
(:mod:`.inline`), so the read of ``P`` -- and with it the bounds check that the reference
evaluator makes (:func:`tecomp.evaluate` raises when ``idx`` leaves ``P``) -- is gone.  When
the body does not use an axis (``F[i, j] = float(j % 2)`` read as ``F[idx[i], 2]``), keeps
it in range (``X[i % 4]``) or guards it (padding ``select(1 <= i <= 4, X[i - 1], 0)`` read as
``P[i + 3]``), the kernel then returned a value where the evaluator raised.

:func:`reads_checked_in_place` keeps such reads as reads of a buffer, where the bounds pass
(:mod:`.bounds_check`, :mod:`.bounds_affine`) decides them exactly: ``P`` is not inlined when
one of its read sites has

* an index that reads data (a gather ``P[idx[i]]``): it can only be checked at run time --
  unless ``P``'s body itself reads a tensor with that axis as an index over the same extent
  wherever it is evaluated (``ls[i, j] = X[i, j] - m[i]``, a log-softmax, read as
  ``ls[i, y[i]]``): the inlined read ``X[i, y[i]]`` is checked against the same range (the
  error then names ``X``);
* an index whose range, found by interval arithmetic over the enclosing loops (data axes,
  reduction axes, the conditions of the ``select``, ``&`` and ``where`` that lead to the
  read), may leave ``P``'s constant extent.

Interval arithmetic is sound and conservative (``[lo, hi]`` of ``+ - *``, ``//`` and ``%`` by
positive constants, ``min``, ``max``, ``select``), so a read it cannot place inside ``P``
merely keeps ``P``'s buffer; over axes with constant bounds, each used once, it is exact.
An index over a symbolic size or an axis whose bounds depend on another variable, or into a
symbolic extent of ``P``, is not analysed and the read is inlined: such an affine read of an
inlined stage, out of range, is not reported (docs/robustness.md).
"""

from __future__ import annotations

from typing import Iterable

from tecomp import expr as E
from tecomp.functor import children, walk
from tecomp.tensor import ComputeOp, ScatterOp, Tensor

from .value_range import const_int, value_range

Env = dict[E.Var, tuple[int, int]]


def reads_checked_in_place(reader: Tensor, exprs: Iterable[E.Expr], p: Tensor) -> bool:
    """Whether some read of ``p`` in ``exprs`` (the defining expressions of ``reader``) needs
    a bounds check that inlining ``p`` would drop."""
    env: Env = {}
    op = reader.op
    if isinstance(op, (ComputeOp, ScatterOp)):
        _bind_axes(op.axes, env)
    if isinstance(op, ScatterOp) and op.where is not None:
        rest = [e for e in exprs if e is not op.value]
        return (any(_unsafe(e, p, env) for e in rest)
                or _unsafe(op.value, p, _refine(op.where, env)))
    return any(_unsafe(e, p, env) for e in exprs)


def _bind_axes(axes: Iterable[E.IterVar], env: Env) -> None:
    """Bind the axes with constant bounds; an axis whose bounds depend on another variable
    (zero elimination's ``t`` in ``[max(0, j - 2), min(4, j)]``) stays unknown: its interval
    would lose that dependence and call in-range reads (``j - t``) unsafe."""
    for ax in axes:
        lo, ext = const_int(ax.lo), const_int(ax.extent)
        if lo is not None and ext is not None:
            env[ax.var] = (lo, lo + ext - 1)


def _witnessed(p: Tensor) -> set[int]:
    """The axes ``k`` of ``p`` whose index any inlined read keeps checked: ``p``'s body reads
    a tensor wherever it is evaluated (not under a ``select``, ``&``/``|`` or reduction) with
    ``p``'s axis ``k`` itself as an index, over the same extent (``ls[i, j] = X[i, j] - m[i]``
    read as ``ls[i, y[i]]`` reads ``X[i, y[i]]``, checked against the same extent)."""
    op = p.op
    if not isinstance(op, ComputeOp):
        return set()
    axis = {ax.var: k for k, ax in enumerate(op.axes)}
    out: set[int] = set()
    stack = [op.body]
    while stack:
        e = stack.pop()
        if isinstance(e, E.TensorRead) and e.tensor is not p:
            for a, i in enumerate(e.indices):
                k = axis.get(i)
                if k is not None and a < len(e.tensor.shape) and e.tensor.shape[a] == p.shape[k]:
                    out.add(k)
        if isinstance(e, E.Select):
            stack.append(e.cond)
        elif isinstance(e, (E.And, E.Or)):
            stack.append(e.a)
        elif not isinstance(e, E.Reduce):
            stack.extend(children(e))
    return out


def _unsafe(e: E.Expr, p: Tensor, env: Env) -> bool:
    if isinstance(e, E.TensorRead) and e.tensor is p:
        kept = _witnessed(p)
        return any(_index_unsafe(i, s, env, k in kept)
                   for k, (i, s) in enumerate(zip(e.indices, p.shape))) or \
            any(_unsafe(i, p, env) for i in e.indices)
    if isinstance(e, E.Select):
        return (_unsafe(e.cond, p, env) or _unsafe(e.t, p, _refine(e.cond, env))
                or _unsafe(e.f, p, _refine(E.Not(e.cond), env)))
    if isinstance(e, E.And):
        return _unsafe(e.a, p, env) or _unsafe(e.b, p, _refine(e.a, env))
    if isinstance(e, E.Reduce):
        inner = dict(env)
        for ax in e.axes:
            inner.pop(ax.var, None)
        _bind_axes(e.axes, inner)
        if any(_unsafe(x, p, env) for ax in e.axes for x in (ax.lo, ax.extent)):
            return True
        if e.where is not None:
            return _unsafe(e.where, p, inner) or _unsafe(e.body, p, _refine(e.where, inner))
        return _unsafe(e.body, p, inner)
    return any(_unsafe(c, p, env) for c in children(e))


def _index_unsafe(index: E.Expr, extent: E.Expr, env: Env, kept: bool) -> bool:
    if any(isinstance(x, E.TensorRead) for x in walk(index)):
        return not kept  # a gather: checked at run time only (by a read of the body: kept)
    ext = const_int(extent)
    r = value_range(index, env)
    if ext is None or r is None or r[0] > r[1]:
        return False  # symbolic (not analysed) or never evaluated
    return r[0] < 0 or r[1] >= ext


# ------------------------------------------------------------------ whole stages
def reads_every_element(reader: Tensor, exprs: Iterable[E.Expr], p: Tensor) -> bool:
    """Whether ``reader`` (defined by ``exprs``) reads every element of ``p`` at one read
    site that runs wherever ``reader``'s loops run (not under a ``select`` arm, the right
    operand of ``&``/``|`` or a reduction's ``where``): the indices are distinct loop
    variables, each starting at 0 with ``p``'s extent, and every other enclosing loop has a
    constant extent ``>= 1`` (``H[i, j] = G[i, j] * 2``, ``sum_j G[i, j]``)."""
    op = reader.op
    if not isinstance(op, ComputeOp):
        return False
    loops = {ax.var: ax for ax in op.axes}
    return any(_whole_read(e, p, loops) for e in exprs)


def _whole_read(e: E.Expr, p: Tensor, loops: dict[E.Var, E.IterVar]) -> bool:
    if isinstance(e, E.TensorRead) and e.tensor is p and _covers(e.indices, p, loops):
        return True
    if isinstance(e, E.Select):
        return _whole_read(e.cond, p, loops)
    if isinstance(e, (E.And, E.Or)):
        return _whole_read(e.a, p, loops)
    if isinstance(e, E.Reduce):
        inner = {**loops, **{ax.var: ax for ax in e.axes}}
        if e.where is not None:
            return _whole_read(e.where, p, inner)
        return _whole_read(e.body, p, inner)
    return any(_whole_read(c, p, loops) for c in children(e))


def _covers(indices: tuple[E.Expr, ...], p: Tensor, loops: dict[E.Var, E.IterVar]) -> bool:
    used: set[E.Var] = set()
    for i, s in zip(indices, p.shape):
        ax = loops.get(i) if isinstance(i, E.Var) else None
        if ax is None or i in used or const_int(ax.lo) != 0 or not _same(ax.extent, s):
            return False
        used.add(i)
    return all(const_int(ax.lo) is not None and (const_int(ax.extent) or 0) >= 1
               for v, ax in loops.items() if v not in used)


def _same(a: E.Expr, b: E.Expr) -> bool:
    ca, cb = const_int(a), const_int(b)
    return ca == cb if ca is not None or cb is not None else a == b


def body_in_range(p: Tensor, body: E.Expr) -> bool:
    """Whether every read in ``body`` (``p``'s body) is in range wherever it is evaluated at
    every point of ``p``'s domain, by a syntactic test: each index is an axis starting at 0
    with the extent of the tensor's axis (``X[i, j]`` in a stage of ``X``'s shape), or its
    interval (as for :func:`reads_checked_in_place`) lies inside a constant extent.  False
    also when the test cannot tell (a gather, a symbolic shift): the caller decides exactly."""
    op = p.op
    if not isinstance(op, ComputeOp):
        return False
    env: Env = {}
    _bind_axes(op.axes, env)
    return _in_range(body, env, {ax.var: ax for ax in op.axes})


def _in_range(e: E.Expr, env: Env, loops: dict[E.Var, E.IterVar]) -> bool:
    if isinstance(e, E.TensorRead):
        return (all(_index_in_range(i, s, env, loops)
                    for i, s in zip(e.indices, e.tensor.shape))
                and all(_in_range(i, env, loops) for i in e.indices))
    if isinstance(e, E.Select):
        return (_in_range(e.cond, env, loops) and _in_range(e.t, _refine(e.cond, env), loops)
                and _in_range(e.f, _refine(E.Not(e.cond), env), loops))
    if isinstance(e, E.And):
        return _in_range(e.a, env, loops) and _in_range(e.b, _refine(e.a, env), loops)
    if isinstance(e, E.Or):
        return _in_range(e.a, env, loops) and _in_range(e.b, _refine(E.Not(e.a), env), loops)
    if isinstance(e, E.Reduce):
        if not all(_in_range(x, env, loops) for ax in e.axes for x in (ax.lo, ax.extent)):
            return False
        inner = dict(env)
        for ax in e.axes:
            inner.pop(ax.var, None)
        _bind_axes(e.axes, inner)
        scope = {**loops, **{ax.var: ax for ax in e.axes}}
        if e.where is not None:
            return (_in_range(e.where, inner, scope)
                    and _in_range(e.body, _refine(e.where, inner), scope))
        return _in_range(e.body, inner, scope)
    return all(_in_range(c, env, loops) for c in children(e))


def _index_in_range(index: E.Expr, extent: E.Expr, env: Env,
                    loops: dict[E.Var, E.IterVar]) -> bool:
    if any(isinstance(x, E.TensorRead) for x in walk(index)):
        return False
    ax = loops.get(index) if isinstance(index, E.Var) else None
    if ax is not None and const_int(ax.lo) == 0 and _same(ax.extent, extent):
        return True
    ext, r = const_int(extent), value_range(index, env)
    return ext is not None and r is not None and (r[0] > r[1] or 0 <= r[0] <= r[1] < ext)


# ------------------------------------------------------------------ conditions
def _refine(cond: E.Expr, env: Env) -> Env:
    """``env`` narrowed by the conjuncts ``v < e``, ``v <= e``, ``v == e`` (and mirrored) of
    ``cond`` for loop variables ``v`` (``v + c`` too)."""
    out = dict(env)
    for c in _conjuncts(cond):
        _narrow(c, out)
    return out


def _conjuncts(cond: E.Expr) -> list[E.Expr]:
    if isinstance(cond, E.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    if isinstance(cond, E.Not) and isinstance(cond.a, E.Or):  # !(a || b) = !a && !b
        return _conjuncts(E.Not(cond.a.a)) + _conjuncts(E.Not(cond.a.b))
    if isinstance(cond, E.Not) and isinstance(cond.a, E.CmpOp):
        flip = {E.LT: E.GE, E.GE: E.LT, E.LE: E.GT, E.GT: E.LE}.get(type(cond.a))
        return [] if flip is None else [flip(cond.a.a, cond.a.b, cond.a.dtype)]
    return [cond]


_MIRROR = {E.LT: E.GT, E.GT: E.LT, E.LE: E.GE, E.GE: E.LE, E.EQ: E.EQ}


def _narrow(c: E.Expr, env: Env) -> None:
    kind = type(c)
    if kind not in _MIRROR:
        return
    for lhs, rhs, k in ((c.a, c.b, kind), (c.b, c.a, _MIRROR[kind])):
        var, off = _var_offset(lhs)
        if var is None or var not in env:
            continue
        r = value_range(rhs, env)
        if r is None:
            continue
        lo, hi = env[var]
        r = (r[0] - off, r[1] - off)  # var + off  (cmp)  rhs
        if k is E.LT:
            hi = min(hi, r[1] - 1)
        elif k is E.LE:
            hi = min(hi, r[1])
        elif k is E.GT:
            lo = max(lo, r[0] + 1)
        elif k is E.GE:
            lo = max(lo, r[0])
        else:
            lo, hi = max(lo, r[0]), min(hi, r[1])
        env[var] = (lo, hi)


def _var_offset(e: E.Expr) -> tuple[E.Var | None, int]:
    if isinstance(e, E.Var):
        return e, 0
    if isinstance(e, (E.Add, E.Sub)) and isinstance(e.a, E.Var):
        c = const_int(e.b)
        if c is not None:
            return e.a, c if isinstance(e, E.Add) else -c
    return None, 0
