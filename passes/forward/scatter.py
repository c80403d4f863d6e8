"""Forward mode through a scatter stage (``T = init; for p where w: T[idx(p)] += v(p)``).

A scatter is linear in its init and its values, and its destinations are integers (no
tangent), so its tangent is the same scatter of the values' tangents onto the init's tangent:

    dT[j, dirs] = dinit[j, dirs] + Σ_{p | w(p), idx(p) = j} dv(p, dirs)

built as a scatter over the domain and the direction axes.  ``dv`` is the tangent rule of
:mod:`.rules` applied to ``v`` as the body of a stage over the scatter's domain (the values
the rules read back, ``tanh'`` from ``tanh``, come from that stage).  Scatters appear in
optimised gradients (``dE[idx[i]] += ...`` of a gather), so a Hessian by forward over
reverse mode passes through them.  A domain whose bounds are not plain extents from 0
(a triangular one) is refused with a :class:`~tecomp.errors.DifferentiationError`.
"""

from __future__ import annotations

from typing import Any

from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import free_vars
from tecomp.tensor import ComputeOp, ScatterOp, Tensor

from .context import Names, StageContext, TangentTensor, zero_to_const


def scatter_tangent(t: Tensor, tangents: dict[int, Any], dirs: tuple[E.IterVar, ...],
                    names: Names, prefix: str) -> TangentTensor | None:
    """The tangent of the scatter ``t`` (None when neither its init nor its values have one)."""
    from .propagate import materialize

    op = t.op
    assert isinstance(op, ScatterOp)
    dvalue: E.Expr = E.Zero(t.dtype)
    if op.axes:
        domain = {a.var for a in op.axes}
        if any(not (isinstance(a.lo, E.Const) and a.lo.value == 0)
               or free_vars(a.extent) & domain for a in op.axes):
            if _reads_tangent(op, tangents):
                raise DifferentiationError(
                    f"forward mode through the scatter {t.name!r}: its domain "
                    f"({', '.join(f'{a.var.name} from {a.lo}' for a in op.axes)}) is not a "
                    "box from 0")
            return _init_only(t, tangents, dirs, prefix)
        axes = tuple(E.IterVar(a.var, E.Const(0, "int64"), a.extent, "data") for a in op.axes)
        shape = tuple(a.extent for a in axes)
        values = Tensor(f"{t.name}_values", shape, t.dtype, ComputeOp(axes, op.value, None))
        dvalue = StageContext(values, tangents, dirs, names).d(values.op.body)
    dinit = tangents.get(id(op.init)) if op.init is not None else None
    if isinstance(dvalue, E.Zero):
        return _init_only(t, tangents, dirs, prefix)
    init = None if op.init is None else materialize(dinit, op.init, dirs,
                                                    name=f"{prefix}_{op.init.name}")
    dir_axes = tuple(E.IterVar(d.var, E.Const(0, "int64"), d.extent, "data") for d in dirs)
    dop = ScatterOp(op.axes + dir_axes, op.indices + tuple(d.var for d in dirs),
                    E.cast(zero_to_const(dvalue), t.dtype), op.where, init)
    ext = tuple(d.extent for d in dirs)
    out = Tensor(f"{prefix}_{t.name}", t.shape + ext, t.dtype, dop)
    return TangentTensor(out, tuple(range(out.ndim)))


def _init_only(t: Tensor, tangents: dict[int, Any], dirs: tuple[E.IterVar, ...],
               prefix: str) -> TangentTensor | None:
    """Values without a tangent: the scatter's tangent is its init's."""
    init = t.op.init
    if init is None or id(init) not in tangents:
        return None
    return tangents[id(init)]


def _reads_tangent(op: ScatterOp, tangents: dict[int, Any]) -> bool:
    from tecomp.functor import tensor_reads

    return any(id(r.tensor) in tangents for r in tensor_reads(op.value))
