"""Reverse-mode differentiation of a tensor DAG: one adjoint stage per tensor.

Algorithm (Urban & van der Smagt 2017, section 5; TVM's ``Differentiate`` /
``DiffBuildingBlock``): walk the DAG from the output in reverse topological order.  Every
tensor ``T`` on a path from an input to the output gets an adjoint ``dT``, its own compute
stage, computed once and read by all contributions it feeds.  ``dT`` is the sum of one
contribution per consumer; a consumer ``Y[i] = f(i)`` that reads ``X`` contributes

    dX[j] += Σ_i dY[i] · ∂f(i)/∂X[j]

with ``∂f/∂X[j]`` from the Jacobian mutator (:mod:`.jacobian`; it contains ``Delta`` nodes and
the inner reductions of f).  The contribution is written as FLAT sums: the Jacobian is split
into its additive terms, and each term ``Σ_{k | w} g`` (after pulling scalar factors, negations
and float casts into the sum that carries the delta) becomes ONE reduction over Y's output
axes (copied as new reduce axes) and k, with the ``where`` kept::

    Reduce(sum, dY[i] * g, axes=[i..., k...], where=w)

``if_then_else`` arms stay selects inside the body, one term per arm
(``select(cond, ∂t, 0)`` and ``select(cond, 0, ∂f)``); zero elimination lifts them (see
:mod:`.flatten` for the exact splitting rules).  Worked example, the shifted read of the review
thread::

    A = placeholder((12,));   B[i, j] = A[i + j]          (shape (10, 3))
    dA[j0] = sum(dB[i, j] * delta(j0, i + j), axis=[i:10, j:3])

and a matrix product ``C[i, j] = Σ_k A[i, k] B[k, j]`` gives, for A,

    dA[j0, j1] = sum(dC[i, j] * (delta(j0, i) * delta(j1, k) * B[k, j]), axis=[i, j, k])

A tensor that is also differentiated through another path simply receives several
contributions.  Integer tensors carry no adjoint (their derivative is zero almost
everywhere).  A scatter stage ``T[idx(p)] += v(p)`` (as zero elimination emits) contributes
``Σ_p dT[idx(p)] · ∂v(p)/∂X[j]``, and ``dT`` flows unchanged into its ``init`` tensor, so
gradients of optimised gradients work too.

``head`` may have extra leading axes (a *prefix*): adjoints then have shape
``prefix + T.shape`` and every contribution keeps the prefix indices free.  ``jacobian`` uses
this with the identity head ``δ(p, i)``.

Custom derivatives: ``overrides`` maps a tensor, or a compute tag, to
``fn(out, inputs, head) -> list[Tensor | None]`` where ``inputs`` are the tensors ``out`` reads
directly (in first-read order), ``head`` is the adjoint of ``out`` and the result holds the
contribution of ``out`` to the adjoint of each input (``None``: no contribution).  A tensor may
also carry its own rule of that form in ``attrs["vjp"]`` (an op that knows its transpose, e.g.
the Kronecker-sparse stages of ``tc.ops``); it is used when no override names the tensor or its
tag and the head has no prefix, and it may return ``None`` to decline (the body is then
differentiated as usual).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import fresh_name, input_tensors, make_reduce
from tecomp.functor import topo_order as _topo
from tecomp.scan_op import ScanOp
from tecomp.tensor import CANCELLING_DERIVATIVE, ComputeOp, ScatterOp, Tensor

from .flatten import conj, flat_terms, rename_axes
from .flatten import names as expr_names
from .jacobian import AuxStages, Jacobian
from .scan import scan_contributions

Override = Callable[[Tensor, list[Tensor], Tensor], Sequence[Any]]


def differentiate(output: Tensor, inputs: Sequence[Tensor], head: Tensor, *,
                  overrides: Mapping[Any, Override] | None = None) -> list[Tensor]:
    """The adjoints of ``inputs`` for the adjoint ``head`` of ``output`` (naive form).

    ``head`` has shape ``prefix + output.shape`` for some (possibly empty) prefix; each result
    has shape ``prefix + input.shape`` and the input's dtype.  Inputs the output does not
    depend on get a zero tensor.  The caller validates dtypes and shapes (see
    :func:`tecomp.gradient`).  Guarantees: the result is mathematically the vector-Jacobian
    product; every derivative of a read is a product of ``Delta`` nodes; no reduction other
    than a sum is recomputed per Jacobian index.
    """
    nprefix = head.ndim - output.ndim
    order = _topo([output])
    wanted = {id(t) for t in inputs}
    reach = _reachable(order, wanted, output)
    taken = _all_names(order) | _all_names([head])
    prefix = tuple(E.Var(fresh_name(f"p{m}", taken), "int64") for m in range(nprefix))
    taken |= {v.name for v in prefix}
    ctx = _Context(head.shape[:nprefix], prefix, taken, AuxStages(), dict(overrides or {}))
    adjoint: dict[int, Tensor] = {id(output): head}
    pending: dict[int, list[E.Expr]] = {}
    jvars: dict[int, tuple[E.Var, ...]] = {}
    for y in reversed(order):
        if not reach.get(id(y)):
            continue
        if id(y) != id(output):
            terms = pending.pop(id(y), [])
            if terms:
                adjoint[id(y)] = ctx.adjoint_stage(y, jvars[id(y)], terms)
            elif not isinstance(y.op, ScanOp):
                continue
        if isinstance(y.op, ScanOp):  # all states of a scan at once, at its first state
            for x, terms in scan_contributions(ctx, y, adjoint, order, reach, jvars):
                pending.setdefault(id(x), []).extend(terms)
            continue
        dy = adjoint[id(y)]
        targets = [x for x in input_tensors(y) if reach.get(id(x))]
        if not targets:
            continue
        for x in targets:
            if id(x) not in jvars:
                jvars[id(x)] = ctx.fresh_vars(x)
        for x, terms in ctx.contributions(y, dy, targets, jvars):
            pending.setdefault(id(x), []).extend(terms)
    out = []
    for t in inputs:
        if id(t) in adjoint:
            out.append(adjoint[id(t)])
        else:
            out.append(ctx.adjoint_stage(t, jvars.get(id(t)) or ctx.fresh_vars(t), []))
    return out


def _reachable(order: list[Tensor], wanted: set[int], output: Tensor) -> dict[int, bool]:
    """Float tensors on a path from a wanted tensor (producers first in ``order``); a stage
    whose derivative cancels in its readers (:data:`CANCELLING_DERIVATIVE`) is no path."""
    reach: dict[int, bool] = {}
    for t in order:
        if id(t) in wanted:
            reach[id(t)] = True
        elif t.attrs.get(CANCELLING_DERIVATIVE) and t is not output:
            reach[id(t)] = False
        elif dtypes.is_float(t.dtype):
            reach[id(t)] = any(reach.get(id(d), False) for d in input_tensors(t))
    return reach


def _all_names(tensors: Sequence[Tensor]) -> set[str]:
    """Every variable name used by the tensors (axes, bodies, shapes)."""
    names: set[str] = set()
    for t in tensors:
        exprs = list(t.shape)
        if isinstance(t.op, ComputeOp):
            names |= {a.var.name for a in t.op.axes}
            exprs.append(t.op.body)
        elif isinstance(t.op, ScatterOp):
            names |= {a.var.name for a in t.op.axes}
            exprs += [x for a in t.op.axes for x in (a.lo, a.extent)] + list(t.op.indices)
            exprs += [t.op.value] + ([t.op.where] if t.op.where is not None else [])
        for e in exprs:
            names |= expr_names(e)
    return names


class _Context:
    """What every contribution of one ``differentiate`` call shares."""

    def __init__(self, prefix_shape: tuple[E.Expr, ...], prefix: tuple[E.Var, ...],
                 taken: set[str], aux: AuxStages, overrides: dict[Any, Override]) -> None:
        self.prefix_shape = prefix_shape
        self.prefix = prefix
        self.taken = taken
        self.aux = aux
        self.overrides = overrides

    def fresh_vars(self, x: Tensor) -> tuple[E.Var, ...]:
        """Axis variables of X's adjoint: distinct from every name of the DAG (they are bound
        only in that adjoint, so adjoints of different tensors may share names)."""
        taken = set(self.taken)
        out = []
        for m in range(x.ndim):
            v = E.Var(fresh_name(f"j{m}", taken), "int64")
            taken.add(v.name)
            out.append(v)
        return tuple(out)

    def adjoint_stage(self, x: Tensor, jv: tuple[E.Var, ...], terms: list[E.Expr]) -> Tensor:
        """``dX[p, j] = Σ terms`` (each cast to X's dtype), or zeros without terms."""
        body: E.Expr = E.Zero(x.dtype)
        for t in terms:
            body = E.add(body, E.cast(t, x.dtype))
        if isinstance(body, E.Zero):
            body = E.Const(0.0, x.dtype)
        axes = tuple(E.IterVar(v, E.Const(0, "int64"), ext, "data")
                     for v, ext in zip(self.prefix + jv, self.prefix_shape + x.shape))
        return Tensor(f"{x.name}_grad", self.prefix_shape + x.shape, x.dtype,
                      ComputeOp(axes, body, None))

    def override_for(self, y: Tensor) -> Override | None:
        for key, fn in self.overrides.items():
            if isinstance(key, Tensor) and key is y:
                return fn
        if y.tag is not None:
            return self.overrides.get(y.tag)
        return None

    # ------------------------------------------------------------------ contributions
    def contributions(self, y: Tensor, dy: Tensor, targets: list[Tensor],
                      jvars: dict[int, tuple[E.Var, ...]]):
        """``(x, [terms of dX[p, j]])`` for every target ``x`` that ``y`` reads."""
        fn = self.override_for(y)
        if fn is not None:
            yield from self._overridden(fn, y, dy, targets, jvars)
            return
        declared = y.attrs.get("vjp") if not self.prefix else None
        result = declared(y, input_tensors(y), dy) if declared is not None else None
        if result is not None:
            yield from self._overridden(lambda *_: result, y, dy, targets, jvars)
            return
        for x in targets:
            yield x, self._terms(y, dy, x, jvars[id(x)])
        if isinstance(y.op, ScatterOp) and y.op.init is not None:
            init = y.op.init
            if any(x is init for x in targets):
                idx = self.prefix + jvars[id(init)]
                yield init, [E.TensorRead(dy, idx, dy.dtype)]

    def _terms(self, y: Tensor, dy: Tensor, x: Tensor, jv: tuple[E.Var, ...]) -> list[E.Expr]:
        op = y.op
        if isinstance(op, ComputeOp):
            outer = tuple(E.IterVar(a.var, a.lo, a.extent, "reduce") for a in op.axes)
            read = E.TensorRead(dy, self.prefix + tuple(a.var for a in op.axes), dy.dtype)
            top = E.TensorRead(y, tuple(a.var for a in op.axes), y.dtype)
            jac = Jacobian(y, op.body, op.axes, x, jv, self.aux, top)
            where = None
        elif isinstance(op, ScatterOp):
            outer = tuple(E.IterVar(a.var, a.lo, a.extent, "reduce") for a in op.axes)
            read = E.TensorRead(dy, self.prefix + tuple(op.indices), dy.dtype)
            jac = Jacobian(y, op.value, op.axes, x, jv, self.aux, None)
            where = op.where
        else:  # pragma: no cover - leaves have no inputs
            return []
        out = []
        avoid = {a.var.name for a in outer} | {v.name for v in self.prefix + jv}
        for form in flat_terms(jac.run()):
            body, axes, w = rename_axes(form, avoid)
            body = E.mul(read, body)
            cond = conj(where, w)
            if outer or axes:
                out.append(make_reduce("sum", body, outer + axes, cond, y.dtype))
            else:
                out.append(body if cond is None else E.select(cond, body, E.Zero(y.dtype)))
        return [t for t in out if not isinstance(t, E.Zero)]

    def _overridden(self, fn: Override, y: Tensor, dy: Tensor, targets: list[Tensor],
                    jvars: dict[int, tuple[E.Var, ...]]):
        reads = input_tensors(y)
        name = getattr(fn, "__name__", repr(fn))
        result = fn(y, reads, dy)
        try:
            result = list(result)
        except TypeError:
            raise DifferentiationError(
                f"the gradient override {name} for tensor {y.name!r} returned {result!r}, "
                f"not a list of {len(reads)} tensor(s)") from None
        if len(result) != len(reads):
            raise DifferentiationError(
                f"the gradient override {name} for tensor {y.name!r} returned "
                f"{len(result)} adjoint(s) for its {len(reads)} input(s) "
                f"({', '.join(repr(t.name) for t in reads)})")
        for x, c in zip(reads, result):
            if c is None or not any(x is t for t in targets):
                continue
            _check_override_result(name, y, x, c, self.prefix_shape)
            idx = self.prefix + jvars[id(x)]
            yield x, [E.TensorRead(c, idx, c.dtype)]


def _check_override_result(name: str, y: Tensor, x: Tensor, c: Any,
                           prefix_shape: tuple[E.Expr, ...]) -> None:
    want = prefix_shape + x.shape
    if not isinstance(c, Tensor):
        raise DifferentiationError(
            f"the gradient override {name} for tensor {y.name!r} returned {c!r} as the "
            f"adjoint of {x.name!r}; expected a tensor or None")
    if c.ndim != len(want) or any(not _same_extent(a, b) for a, b in zip(c.shape, want)):
        raise DifferentiationError(
            f"the gradient override {name} for tensor {y.name!r} returned the adjoint "
            f"{c.name!r} of shape ({', '.join(map(str, c.shape))}) for input {x.name!r} of "
            f"shape ({', '.join(map(str, want))})")
    if not dtypes.is_float(c.dtype):
        raise DifferentiationError(
            f"the gradient override {name} for tensor {y.name!r} returned the adjoint "
            f"{c.name!r} of dtype {c.dtype} for input {x.name!r}; adjoints are floats")


def _same_extent(a: E.Expr, b: E.Expr) -> bool:
    if isinstance(a, E.Const) and isinstance(b, E.Const):
        return a.value == b.value
    return a == b
