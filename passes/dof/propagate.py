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

Blocked rank axis.  A tangent stage of a layer loops ``for b, j: for n: for k`` with the rank
axis ``k`` innermost; each ``j`` streams the whole per-sample tangent ``g[b, :, :]`` of the
layer below (``W_in * r`` values).  For a large rank (``r > BLOCK_OVER``; the N=1000 Laplacian)
that no longer fits in the L2 cache, so the rank axis is split into two direction axes
``k = kb * block + ki`` (``block`` about ``BLOCK``, the last block padded with zero directions)
and tangent stages are laid out ``(b, kb, j, ki)`` (:meth:`DofContext.arrange`): the loops run
block by block over a ``W_in * block`` slab.  On the N=1000, width-256 MLP this halves the
time (580 -> 315 ms, same run).

Batch-invariant work.  In a first layer ``g_z = sum_n W[j, n] L[k, n]`` does not depend on the
sample: it is one ``(width, r)`` stage and ``Q(g_z, g_z)`` one ``(width,)`` stage
(:meth:`~tecomp.passes.forward.context.StageContext.hoist_invariant`), so the per-sample term
costs O(1) per unit.  For a diagonal ``A`` the seed is a Kronecker delta
(:func:`~.decompose.seed_tangent`) and that stage is ``W[j, k] l_k`` after zero elimination.
"""

from __future__ import annotations

from dataclasses import dataclass
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

#: rank axes longer than this are blocked (see "Blocked rank axis" above)
BLOCK_OVER = 192
#: the target length of one block of the rank axis
BLOCK = 128


@dataclass(frozen=True)
class RankLayout:
    """The direction axes of DOF: ``(kr,)``, or ``(kb, ki)`` with ``k = kb * block + ki`` when
    the rank axis is blocked (``block`` is then the extent of ``ki``; ``rank <= kb * ki``, the
    padding directions have zero tangents)."""

    dirs: tuple[E.IterVar, ...]
    block: int | None
    rank: int
    positives: int

    @staticmethod
    def make(dec: Decomposition, names: Names) -> RankLayout:
        r = dec.rank
        if r <= BLOCK_OVER:
            return RankLayout((names.axis("kr", r),), None, r, dec.positives)
        nblocks = -(-r // BLOCK)
        block = -(-r // nblocks)
        return RankLayout((names.axis("kb", nblocks), names.axis("ki", block)), block, r,
                          dec.positives)


class DofContext(StageContext):
    """Per-stage state of DOF: ``(g, s)`` of sub-expressions and the Gram form ``Q``."""

    def __init__(self, primal: Tensor, gmap: dict[int, TangentTensor | ExprTangent],
                 smap: dict[int, TangentTensor], layout: RankLayout, names: Names) -> None:
        super().__init__(primal, gmap, layout.dirs, names)
        self.smap = smap
        self.layout = layout
        self._pairs: dict[tuple[E.Expr, frozenset], Pair] = {}

    def arrange(self, axes: list[E.IterVar]) -> list[E.IterVar]:
        """With a blocked rank axis, the block axis ``kb`` goes right after the first primal
        axis (the batch): each block of a tangent is then a contiguous slab."""
        if self.layout.block is None or self.dirs[0] not in axes:
            return axes
        rest = [a for a in axes if a is not self.dirs[0]]
        at = 1 if rest and rest[0] not in self.dirs else 0
        return rest[:at] + [self.dirs[0]] + rest[at:]

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
        lay = self.layout
        if lay.block is None:
            ranges = [((lo, hi), neg) for lo, hi, neg in
                      ((0, lay.positives, False), (lay.positives, lay.rank, True)) if hi > lo]
            out: E.Expr = E.Zero(ga.dtype)
            for (lo, hi), neg in ranges:
                kq = self.names.axis("kq", hi - lo, lo, "reduce")
                term = self._gram(ga, gb, (kq,), None)
                out = E.sub(out, term) if neg else E.add(out, term)
            return out
        kb, ki = self.dirs
        qb = self.names.axis("kqb", kb.extent, kind="reduce")
        qi = self.names.axis("kqi", ki.extent, kind="reduce")
        if lay.positives == lay.rank:                   # no negative direction
            return self._gram(ga, gb, (qb, qi), None)
        flat = E.add(E.mul(qb.var, lay.block), qi.var)
        pos = self._gram(ga, gb, (qb, qi), E.compare(E.LT, flat, lay.positives))
        neg = self._gram(ga, gb, (qb, qi), E.compare(E.GE, flat, lay.positives))
        return E.sub(pos, neg)

    def _gram(self, ga: E.Expr, gb: E.Expr, axes: tuple[E.IterVar, ...],
              where: E.Expr | None) -> E.Expr:
        m = {d.var: a.var for d, a in zip(self.dirs, axes)}
        a = substitute(ga, m)
        b = a if gb == ga else substitute(gb, m)
        return make_reduce("sum", E.mul(a, b), axes, where)


def dof_operator(output: Tensor, x: Tensor, dec: Decomposition, *, who: str = "diff_operator",
                 name: str | None = None) -> Tensor:
    """``sum_ij A_ij d2 output / dx[..., i] dx[..., j]`` by DOF, with ``A = L^T D L``."""
    name = name or f"dof_{output.name}"
    batch_positions(output, x, who)
    if dec.rank == 0:
        return materialize(None, output, name=name)
    names = Names([output])
    layout = RankLayout.make(dec, names)
    gmap: dict[int, TangentTensor | ExprTangent] = {
        id(x): seed_tangent(dec, x, names, layout.block)}
    smap: dict[int, TangentTensor] = {}
    for t in topo_order([output]):
        if t is x or not isinstance(t.op, ComputeOp):
            continue
        ctx = DofContext(t, gmap, smap, layout, names)
        g, s = ctx.pair(t.op.body)
        if not isinstance(g, E.Zero):
            g = ctx.hoist_invariant(g, f"g_{t.name}_inv")
            gmap[id(t)] = ctx.tangent_stage(g, f"g_{t.name}")
        if not isinstance(s, E.Zero):
            s = ctx.hoist_invariant(s, f"s_{t.name}_inv")
            smap[id(t)] = ctx.tangent_stage(s, f"s_{t.name}", full=t is output,
                                            with_dirs=False)
    return materialize(smap.get(id(output)), output, name=name)
