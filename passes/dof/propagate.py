"""DOF: forward propagation of ``(v, L grad v, L v)`` through the compute DAG.

Li et al., "DOF: Accelerating High-order Differential Operators with Forward Propagation"
(2024), eqs. 16-18: with ``A = L^T D L`` (:mod:`.decompose`), every tensor ``T`` that depends
on ``x`` gets two stages -- ``g_T`` of shape ``T.shape + (r,)`` holding ``L grad T`` and
``s_T`` of ``T``'s shape holding the operator value -- built from its operands' stages by the
rules of :mod:`.rules`.  Tensors that do not depend on ``x`` (weights, constants) have
``g = 0, s = 0``: symbolic zeros, no stage.  The seed is ``g_x[b, n, k] = L[k, n]`` for every
sample ``b`` (``s_x = 0``), stored once as an ``(N, r)`` constant stage; its first consumer,
``sum_n W[j, n] x[b, n]``, then has the batch-invariant tangent ``sum_n W[j, n] L[k, n]``,
which the stage machinery stores once with shape ``(width, r)`` (not per sample).

Cost.  Per edge of the graph ``g`` costs ``r`` multiply-adds and ``s`` one; the Gram terms
``Q(p, q) = p^T D q`` cost ``r`` per nonlinear node.  Against the Hessian method (``N``
tangents of the forward *and* of the reverse graph) that is about half for a dense ``A``
(``r = N``) and ``r/N`` of it for a low-rank one.

MLP layers (seed eqs. 20-23).  Node by node, a layer ``T = f(z)``, ``z = sum_n W[j, n] u[b, n]
+ c[j]``, is linear in ``z`` (no Gram term) and unary in ``f``: its second-order term is
``f''(z) Q(g_z, g_z)``, r flops per unit instead of the r |R| of a layer-level Hessian -- the
saving of eq. 23.  ``g_z`` is used twice (in ``g_T = f'(z) g_z`` and in ``Q``), so it is
stored as a stage of its own (:meth:`DofContext.operands`) whose body is a plain sum: that
is the form the CPU lowering runs in the unit-stride ``i, k, j`` order (the rank axis
innermost, contiguous), and it is where almost all of DOF's time goes (``B W_in W_out r``
multiply-adds per layer).  Eq. 23 as written, ``f''/f'^2 (z) Q(g_T, g_T)``, would save the
``g_z`` buffer but make the tangent stage a scaled sum ``f'(z) * sum(...)``, which the
lowering keeps in the strided ``i, j, k`` order: 15x slower on a width-256 MLP.

Batch-invariant work.  In a first layer ``g_z = sum_n W[j, n] L[k, n]`` does not depend on the
sample: it is one ``(width, r)`` stage and ``Q(g_z, g_z)`` one ``(width,)`` stage
(:meth:`~tecomp.passes.forward.context.StageContext.hoist_invariant`), so the per-sample term
costs O(1) per unit.  For a diagonal ``A`` the seed is a Kronecker delta
(:func:`~.decompose.seed_tangent`) and that stage is ``W[j, k] l_k`` after zero elimination.
"""

from __future__ import annotations

from typing import Sequence

from tecomp import expr as E
from tecomp.functor import make_reduce, substitute, topo_order
from tecomp.tensor import ComputeOp, Tensor

from ..forward.context import (
    ExprTangent,
    Names,
    StageContext,
    TangentTensor,
    contains_reduce,
)
from ..forward.propagate import materialize
from .batch import batch_positions
from .decompose import Decomposition, seed_tangent
from .rules import Pair, pair_rule


class DofContext(StageContext):
    """Per-stage state of DOF: ``(g, s)`` of sub-expressions and the Gram form ``Q``."""

    def __init__(self, primal: Tensor, gmap: dict[int, TangentTensor],
                 smap: dict[int, TangentTensor], rank_axis: E.IterVar, positives: int,
                 names: Names) -> None:
        super().__init__(primal, gmap, (rank_axis,), names)
        self.smap = smap
        self.rank = int(rank_axis.extent.value)  # type: ignore[attr-defined]
        self.positives = positives
        self._pairs: dict[tuple[E.Expr, frozenset], Pair] = {}

    def s_read(self, r: E.TensorRead) -> E.Expr:
        tt = self.smap.get(id(r.tensor))
        if tt is None:
            return E.Zero(r.dtype)
        return tt.read(tuple(r.indices))

    def pair(self, e: E.Expr, bound: frozenset = frozenset()) -> Pair:
        key = (e, bound)
        out = self._pairs.get(key)
        if out is None:
            out = pair_rule(e, self, bound)
            self._pairs[key] = out
        return out

    def operands(self, es: Sequence[E.Expr], bound: frozenset,
                 only_if_all: bool = False) -> list[Pair]:
        """``(g, s)`` of the operands of a nonlinear node.  An operand's ``g`` that is an
        expensive expression (a reduction) is stored as a stage, since the node uses it twice
        (in its own ``g`` and in ``Q``); ``only_if_all``: only when every operand has a ``g``
        (a product is linear in one operand when the other is constant)."""
        pairs = [self.pair(e, bound) for e in es]
        live = [not isinstance(g, E.Zero) for g, _ in pairs]
        if only_if_all and not all(live):
            return pairs
        out = []
        for e, (g, s), on in zip(es, pairs, live):
            if on and contains_reduce(g):
                g = self.hoist(g, bound, f"g_{self.primal.name}_arg")
                self._pairs[(e, bound)] = (g, s)
            out.append((g, s))
        return out

    def q(self, ga: E.Expr, gb: E.Expr) -> E.Expr:
        """``Q(ga, gb) = sum_k D_kk ga[k] gb[k]`` (positive rows first, then negative)."""
        if isinstance(ga, E.Zero) or isinstance(gb, E.Zero):
            return E.Zero(ga.dtype if isinstance(ga, E.Zero) else gb.dtype)
        kv = self.dir_vars[0]
        out: E.Expr = E.Zero(ga.dtype)
        for lo, hi, neg in ((0, self.positives, False), (self.positives, self.rank, True)):
            if hi <= lo:
                continue
            kq = self.names.axis("kq", hi - lo, lo, "reduce")
            a = substitute(ga, {kv: kq.var})
            b = a if gb == ga else substitute(gb, {kv: kq.var})
            term = make_reduce("sum", E.mul(a, b), (kq,), None)
            out = E.sub(out, term) if neg else E.add(out, term)
        return out


def dof_operator(output: Tensor, x: Tensor, dec: Decomposition, *, who: str = "diff_operator",
                 name: str | None = None) -> Tensor:
    """``sum_ij A_ij d2 output / dx[..., i] dx[..., j]`` by DOF, with ``A = L^T D L``."""
    name = name or f"dof_{output.name}"
    batch_positions(output, x, who)
    if dec.rank == 0:
        return materialize(None, output, name=name)
    names = Names([output])
    rank_axis = names.axis("kr", dec.rank)
    gmap: dict[int, TangentTensor | ExprTangent] = {id(x): seed_tangent(dec, x, names)}
    smap: dict[int, TangentTensor] = {}
    for t in topo_order([output]):
        if t is x or not isinstance(t.op, ComputeOp):
            continue
        ctx = DofContext(t, gmap, smap, rank_axis, dec.positives, names)
        g, s = ctx.pair(t.op.body)
        if not isinstance(g, E.Zero):
            g = ctx.hoist_invariant(g, f"g_{t.name}_inv")
            gmap[id(t)] = ctx.tangent_stage(g, f"g_{t.name}")
        if not isinstance(s, E.Zero):
            s = ctx.hoist_invariant(s, f"s_{t.name}_inv")
            smap[id(t)] = ctx.tangent_stage(s, f"s_{t.name}", full=t is output,
                                            with_dirs=False)
    return materialize(smap.get(id(output)), output, name=name)
