"""The forward-mode driver: one tangent stage per primal stage, producers first.

Forward mode (tangent propagation, Griewank & Walther, *Evaluating Derivatives*, ch. 3) walks
the compute DAG in topological order.  For every stage ``T[i] = f(reads)`` that depends on a
seeded tensor it builds the tangent stage ``dT[i, dirs] = sum_reads df/dread * dread`` with the
rule table of :mod:`.rules`; stages that do not depend on the seeds have a symbolic zero
tangent and no stage at all.  A tangent stage reads the primal tensors for the values it needs
and keeps only the axes its body uses (see :mod:`.context`), so direction-independent or
batch-invariant tangent work is computed once.

With direction axes (``dirs``) the same driver propagates several tangents at once: the rank
axis of DOF's ``L``, or the basis directions of a Hessian (forward over reverse).
"""

from __future__ import annotations

from typing import Sequence

from tecomp import expr as E
from tecomp.functor import free_vars, fresh_name, topo_order
from tecomp.scan_op import ScanOp
from tecomp.tensor import CANCELLING_DERIVATIVE, ComputeOp, ScatterOp, Tensor

from .context import ExprTangent, Names, StageContext, TangentTensor, new_stage

Tangent = TangentTensor | ExprTangent


def forward_tangents(outputs: Sequence[Tensor], seeds: dict[int, Tangent], *,
                     dirs: tuple[E.IterVar, ...] = (), names: Names | None = None,
                     prefix: str = "d") -> dict[int, Tangent]:
    """Tangent tensors (by ``id`` of the primal) of every stage between seeds and outputs.

    ``seeds`` maps ``id(tensor)`` to its given tangent; the seeded tensors are not
    differentiated further.  Outputs get full tangent stages (no axis dropped).  A primal
    absent from the result has a zero tangent.
    """
    names = names or Names(outputs)
    out_ids = {id(t) for t in outputs}
    tangents: dict[int, Tangent] = {}
    scans: dict[int, list | None] = {}
    for t in topo_order(list(outputs)):
        if id(t) in seeds:
            tangents[id(t)] = seeds[id(t)]
            continue
        if isinstance(t.op, ScanOp):  # every state of the scan at once (:mod:`.scan`)
            from .scan import scan_tangents

            sc = t.op.scan
            if id(sc) not in scans:
                scans[id(sc)] = scan_tangents(sc, tangents, dirs, names, prefix)
            if scans[id(sc)] is not None:
                tangents[id(t)] = scans[id(sc)][t.op.index]
            continue
        if isinstance(t.op, ScatterOp):  # the scatter of the values' tangents (:mod:`.scatter`)
            from .scatter import scatter_tangent

            tt = scatter_tangent(t, tangents, dirs, names, prefix)
            if tt is not None:
                tangents[id(t)] = tt
            continue
        if not isinstance(t.op, ComputeOp):
            continue
        if t.attrs.get(CANCELLING_DERIVATIVE) and id(t) not in out_ids:
            continue  # its readers do not depend on it: a zero tangent is exact for them
        ctx = StageContext(t, tangents, dirs, names)
        body = ctx.d(t.op.body)
        if isinstance(body, E.Zero):
            continue
        body = ctx.hoist_invariant(body, f"{prefix}_{t.name}_inv")
        tangents[id(t)] = ctx.tangent_stage(body, f"{prefix}_{t.name}", full=id(t) in out_ids)
    return tangents


def materialize(tt: Tangent | None, primal: Tensor, dirs: tuple[E.IterVar, ...] = (),
                name: str | None = None) -> Tensor:
    """A tensor of shape ``primal.shape + dir extents`` holding the tangent ``tt``."""
    name = name or f"d_{primal.name}"
    extents = list(primal.shape) + [a.extent for a in dirs]
    taken = {v.name for s in extents for v in free_vars(s)}
    axes = []
    for d, s in enumerate(extents):
        v = E.Var(fresh_name(f"i{d}", taken), "int64")
        taken.add(v.name)
        axes.append(E.IterVar(v, E.Const(0, "int64"), s, "data"))
    if isinstance(tt, TangentTensor) and tt.keep == tuple(range(len(axes))):
        return tt.tensor
    if tt is None:
        body: E.Expr = E.Const(0.0, primal.dtype)
    else:
        body = E.cast(tt.read(tuple(a.var for a in axes)), primal.dtype)
    return new_stage(name, axes, body)
