"""Per-stage state of forward propagation: tangent tensors, direction axes, hoisting.

A *tangent tensor* of a primal tensor ``T`` (shape ``S``) is stored as a stage whose index
space is ``S`` followed by zero or more *direction* axes (none for a plain JVP; the rank axis
of ``L`` for DOF; the basis directions for a Hessian).  A tangent stage keeps only the axes its
body depends on: the tangent of a first layer ``Z[b, j] = sum_n W[j, n] * x[b, n]`` under a
seed that is the same for every sample ``b`` does not depend on ``b``, so it is stored once,
with shape ``(width, r)`` (:class:`TangentTensor` records which axes are kept).

:class:`StageContext` holds what the rules need while one primal stage is differentiated:

* ``value(e)`` -- the primal value of a sub-expression; the stage's whole body is read back
  from the primal tensor instead of recomputed (``tanh'`` uses ``1 - T[i]**2``).
* ``hoist(e, bound)`` -- put a sub-expression in a stage of its own, over the stage axes (and
  direction axes) it uses, unless it depends on an enclosing reduction's variables (``bound``).
  Used for the values a rule needs once per output point (a maximum, its first index, a count
  of zeros) so that they are not recomputed per reduction index.
* ``hoist_invariant(body)`` -- loop-invariant code motion for tangent bodies: a reduction that
  does not use every stage axis the body uses becomes its own, smaller stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tecomp import dtypes
from tecomp import expr as E
from tecomp.functor import children, free_vars, fresh_name, make_reduce, rebuild, topo_order
from tecomp.scan_op import ScanOp
from tecomp.tensor import ComputeOp, Tensor


@dataclass(frozen=True, eq=False)
class TangentTensor:
    """A tangent stored in ``tensor``: entry ``(idx..., dirs...)`` is ``tensor[kept ones]``.

    ``keep`` lists positions in the concatenated index (primal axes, then direction axes).
    """

    tensor: Tensor
    keep: tuple[int, ...]

    def read(self, index: Sequence[E.Expr]) -> E.Expr:
        idx = tuple(E.as_expr(index[p]) for p in self.keep)
        return E.TensorRead(self.tensor, idx, self.tensor.dtype)


@dataclass(frozen=True, eq=False)
class ExprTangent:
    """A seed tangent given as an expression of the index (primal axes, then direction axes):
    ``read(index) = fn(index)``.  Used for identity-like seeds written with Kronecker deltas
    (``delta(n, d)``), which zero elimination resolves in the first consumer
    (``sum_n W[j, n] delta(n, d)`` becomes ``W[j, d]``) instead of summing over a stored
    identity matrix."""

    fn: Callable[[Sequence[E.Expr]], E.Expr]

    def read(self, index: Sequence[E.Expr]) -> E.Expr:
        return self.fn(tuple(E.as_expr(i) for i in index))


class Names:
    """Fresh variable names for one differentiation (no clash with any name in the DAG)."""

    def __init__(self, outputs: Sequence[Tensor]) -> None:
        taken: set[str] = set()
        tensors = topo_order(list(outputs))
        scans = {id(t.op.scan): t.op.scan for t in tensors if isinstance(t.op, ScanOp)}
        for sc in scans.values():         # a scan's step stages are not in the DAG's order
            tensors.extend(sc.body)
        for t in tensors:
            for s in t.shape:
                taken |= {v.name for v in free_vars(s)}
            if isinstance(t.op, ComputeOp):
                taken |= {a.var.name for a in t.op.axes}
                stack = [t.op.body]
                while stack:
                    x = stack.pop()
                    if isinstance(x, E.Var):
                        taken.add(x.name)
                    elif isinstance(x, E.Reduce):
                        taken |= {a.var.name for a in x.axes}
                    stack.extend(children(x))
        self.taken = taken

    def fresh(self, base: str) -> E.Var:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        return E.Var(name, "int64")

    def axis(self, base: str, extent: E.ExprLike, lo: E.ExprLike = 0,
             kind: str = "data") -> E.IterVar:
        return E.IterVar(self.fresh(base), E.as_expr(lo), E.as_expr(extent), kind)


def contains_reduce(e: E.Expr) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.Reduce):
            return True
        stack.extend(children(x))
    return False


def zero_to_const(e: E.Expr) -> E.Expr:
    """A symbolic zero becomes the literal 0 (for select arms and stage bodies)."""
    if isinstance(e, E.Zero):
        return E.Const(0.0 if dtypes.is_float(e.dtype) else 0, e.dtype)
    return e


def select(cond: E.Expr, t: E.Expr, f: E.Expr) -> E.Expr:
    """``if_then_else`` that folds two symbolic zeros and writes one as the literal 0."""
    if isinstance(t, E.Zero) and isinstance(f, E.Zero):
        return E.Zero(t.dtype)
    if isinstance(t, E.Zero):
        t = E.Const(0.0, f.dtype) if dtypes.is_float(f.dtype) else zero_to_const(t)
    if isinstance(f, E.Zero):
        f = E.Const(0.0, t.dtype) if dtypes.is_float(t.dtype) else zero_to_const(f)
    return E.select(cond, t, f)


def literal_zeros(e: E.Expr) -> E.Expr:
    """``e`` (an op-table partial) with the symbolic zeros of its selects written as the
    literal 0, as :func:`select` writes them."""
    if isinstance(e, E.Select):
        return select(e.cond, literal_zeros(e.t), literal_zeros(e.f))
    return e


class StageContext:
    """Differentiation state of one primal compute stage (see the module docstring)."""

    def __init__(self, primal: Tensor, tangents: dict[int, TangentTensor | ExprTangent],
                 dirs: tuple[E.IterVar, ...], names: Names) -> None:
        assert isinstance(primal.op, ComputeOp)
        self.primal = primal
        self.axes = primal.op.axes
        self.body = primal.op.body
        self.dirs = dirs
        self.dir_vars: tuple[E.Var, ...] = tuple(d.var for d in dirs)
        self.tangents = tangents
        self.names = names
        self.cache: dict[Any, Any] = {}
        self._memo: dict[tuple[E.Expr, frozenset], E.Expr] = {}
        self._self_read = E.TensorRead(primal, tuple(a.var for a in self.axes), primal.dtype)

    # ------------------------------------------------------------------ values and reads
    def value(self, e: E.Expr) -> E.Expr:
        """The primal value of ``e``: the stage's own body is read back from the primal."""
        return self._self_read if e is self.body else e

    def operand_value(self, e: E.Expr, bound: frozenset) -> E.Expr:
        """The value of an operand a rule multiplies a tangent by: one that contains a
        reduction is computed once, in a stage of its own, when it can be."""
        if e is self.body or not contains_reduce(e):
            return self.value(e)
        return self.hoist(e, bound, f"{self.primal.name}_val")

    def tangent_read(self, r: E.TensorRead) -> E.Expr:
        """The tangent of the read ``r`` (a symbolic zero when its tensor has none)."""
        tt = self.tangents.get(id(r.tensor))
        if tt is None or not dtypes.is_float(r.dtype):
            return E.Zero(r.dtype)
        return tt.read(tuple(r.indices) + self.dir_vars)

    # ------------------------------------------------------------------ first order
    def d(self, e: E.Expr, bound: frozenset = frozenset()) -> E.Expr:
        """The tangent of sub-expression ``e`` (``bound``: enclosing reduction variables)."""
        key = (e, bound)
        out = self._memo.get(key)
        if out is None:
            from .rules import tangent_rule

            out = tangent_rule(e, self, bound)
            self._memo[key] = out
        return out

    # ------------------------------------------------------------------ stages
    def stage_axes(self, fv: set[E.Var]) -> list[E.IterVar]:
        axes = [a for a in self.axes if a.var in fv] + [d for d in self.dirs if d.var in fv]
        return self.arrange(axes)

    def arrange(self, axes: list[E.IterVar]) -> list[E.IterVar]:
        """The order of a new stage's axes (primal axes, then direction axes; the DOF
        context blocks its rank axis, see :mod:`tecomp.passes.dof.propagate`)."""
        return axes

    def hoist(self, e: E.Expr, bound: frozenset, name: str) -> E.Expr:
        """``e`` as a read of a new stage over the axes it uses, or ``e`` itself when it
        depends on an enclosing reduction's variables (or is a plain read already)."""
        if isinstance(e, (E.TensorRead, E.Const, E.Zero, E.Var)):
            return e
        fv = free_vars(e)
        if fv & bound:
            return e
        key = ("hoist", e)
        got = self.cache.get(key)
        if got is not None:
            return got
        axes = self.stage_axes(fv)
        t = new_stage(name, axes, self.hoist_invariant(e, name + "_inv"))
        out = E.TensorRead(t, tuple(a.var for a in axes), t.dtype)
        self.cache[key] = out
        return out

    def hoist_invariant(self, body: E.Expr, name: str) -> E.Expr:
        """Hoist every maximal reduction of ``body`` that uses fewer stage axes than ``body``."""
        axis_vars = {a.var for a in self.axes}
        used = free_vars(body) & axis_vars
        memo: dict[tuple[E.Expr, frozenset], E.Expr] = {}

        def go(e: E.Expr, bound: frozenset) -> E.Expr:
            key = (e, bound)
            if key in memo:
                return memo[key]
            out = e
            if isinstance(e, E.Reduce):
                fv = free_vars(e)
                if not (fv & bound) and (fv & axis_vars) < used:
                    out = self.hoist(e, bound, name)
                else:
                    inner = bound | {a.var for a in e.axes}
                    b2 = go(e.body, inner)
                    w2 = None if e.where is None else go(e.where, inner)
                    if b2 is not e.body or w2 is not e.where:
                        out = make_reduce(e.combiner, b2, e.axes, w2, e.dtype)
            elif isinstance(e, (E.TensorRead, E.Const, E.Zero, E.Var, E.Delta)):
                pass
            else:
                kids = children(e)
                new = tuple(go(c, bound) for c in kids)
                if any(a is not b for a, b in zip(new, kids)):
                    out = _rebuild(e, new)
            memo[key] = out
            return out

        if not used:
            return body
        return go(body, frozenset())

    def tangent_stage(self, body: E.Expr, name: str, full: bool = False,
                      with_dirs: bool = True) -> TangentTensor:
        """A stage holding the tangent ``body`` of this primal stage (unused axes dropped
        unless ``full``; ``with_dirs=False`` for a value without direction axes)."""
        body = E.cast(zero_to_const(body), self.primal.dtype)
        all_axes = list(self.axes) + (list(self.dirs) if with_dirs else [])
        if full:
            keep = tuple(range(len(all_axes)))
        else:
            fv = free_vars(body)
            keep = tuple(p for p, a in enumerate(all_axes) if a.var in fv)
        if not full:
            pos = {a.var: p for p, a in enumerate(all_axes)}
            keep = tuple(pos[a.var] for a in self.arrange([all_axes[p] for p in keep]))
        t = new_stage(name, [all_axes[p] for p in keep], body)
        return TangentTensor(t, keep)


def new_stage(name: str, axes: Sequence[E.IterVar], body: E.Expr) -> Tensor:
    """A compute stage over ``axes`` (reused as its own data axes, lower bound 0)."""
    body = zero_to_const(body)
    data_axes = []
    for a in axes:
        if a.kind != "data" or not (isinstance(a.lo, E.Const) and a.lo.value == 0):
            a = E.IterVar(a.var, E.Const(0, "int64"), a.extent, "data")
        data_axes.append(a)
    shape = tuple(a.extent for a in data_axes)
    return Tensor(name, shape, body.dtype, ComputeOp(tuple(data_axes), body))


def _rebuild(e: E.Expr, kids: tuple[E.Expr, ...]) -> E.Expr:
    if isinstance(e, E.Select):
        return E.select(*kids)
    if isinstance(e, E.Cast):
        return E.cast(kids[0], e.dtype)
    if isinstance(e, E.Call):
        return E.call(e.name, *kids)
    return rebuild(e, *kids)
