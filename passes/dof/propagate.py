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
saving of eq. 23.  Almost all of DOF's time goes into the tangent contraction ``g_z = sum_n
W[j, n] g_u[b, n, k]`` (``B W_in W_out r`` multiply-adds per layer).

Tangent layout.  When the network is narrow enough (below), a tangent stage keeps its
direction axis right before its last primal axis (:meth:`DofContext.arrange`): ``g_T[b, k,
j]``, not ``g_T[b, j, k]``.  The contraction over the width ``n`` then reads ``W[j, n]`` and
``g_u[b, k, n]`` both at unit stride in ``n``; it is lowered in the plain (dot-product) order
and register-blocked over ``(k, j)`` pairs by the CPU schedule, and a factor outside the sum
(``f'(z) * sum(...)``) is applied once per element after the dot product.  (With the rank
axis last, that scaled sum runs strided, 2.5x slower than the plain sum on the width-256 MLP.)
That schedule streams the whole ``(W_out, W_in)`` weight once per block of tangent rows, which
is cheap while the weight stays in the L2 cache: the width-last layout is used when the widest
x-dependent tensor's ``width^2`` elements take at most :data:`WIDTH_LAST_MAX_BYTES`.  Wider
networks keep the rank axis last (``g_T[b, j, k]``, the contraction in the ``i, k, j`` order,
register-blocked over rows ``j``, which reuses the per-sample ``g_u[b]`` from the cache
instead) and the plain layer form.  Measured on the depth-4 tanh MLPs (CPU time, same runs),
the width-last layout with scaled layers against the rank-last one: N = 100, width 256: -8%;
N = 1000, width 256: -17%; N = 100, width 512: +10%.

Blocked rank axis.  In the rank-last layout a tangent stage of a layer loops ``for b, j: for
n: for k`` with the rank axis ``k`` innermost; each ``j`` streams the whole per-sample tangent
``g[b, :, :]`` of the layer below (``W_in * r`` values).  For a large rank (``r > BLOCK_OVER``)
that no longer fits in the L2 cache, so the rank axis is split into two direction axes ``k = kb
* block + ki`` (``block`` about ``BLOCK``, the last block padded with zero directions) and
tangent stages are laid out ``(b, kb, j, ki)``: the loops run block by block over a ``W_in *
block`` slab (the N=1000, width-256 MLP in that layout: 580 -> 315 ms).  The width-last layout
needs no blocking: each dot product streams one ``W_in``-row of ``g_u``.

Scaled layers (seed eq. 23 proper).  For ``f`` whose op-table entry gives ``f''/f'`` (tanh,
sigmoid, exp, erf: ``f' = 0`` only where ``f'' = 0``), a per-sample ``g_z``, and a layer that
some stage other than the output reads (:attr:`DofContext.g_read_on`), the rule of
:mod:`.rules` stores ``g_T = f'(z) * sum(...)`` as one stage and forms the second-order term
as ``(f''/f') Q(g_T, g_T) / f'``: no ``g_z`` buffer and no element-wise pass ``f'(z) g_z``
over a ``(B, r, W)`` tensor per layer (a depth-4, width-256 MLP with N = 100 keeps four such
tensors instead of six).  The last layer before a linear read-out keeps the plain form: its
``g_T`` is needed by nobody, ``Q(g_z, g_z)`` is.

Batch-invariant work.  In a first layer ``g_z = sum_n W[j, n] L[k, n]`` does not depend on the
sample: it is one ``(width, r)`` stage (``(r, width)`` in the width-last layout) and
``Q(g_z, g_z)`` one ``(width,)`` stage
(:meth:`~tecomp.passes.forward.context.StageContext.hoist_invariant`), so the per-sample term
costs O(1) per unit.  For a diagonal ``A`` the seed is a Kronecker delta
(:func:`~.decompose.seed_tangent`) and that stage is ``W[j, k] l_k`` after zero elimination.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import consumers, input_tensors, make_reduce, substitute, topo_order
from tecomp.scan_op import ScanOp
from tecomp.tensor import CANCELLING_DERIVATIVE, ComputeOp, ScatterOp, Tensor

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
from .scan import dof_scan

#: the largest ``width^2 * itemsize`` (the weight one contraction streams) for the width-last
#: tangent layout (see "Tangent layout" above): about the L2 cache of one core
WIDTH_LAST_MAX_BYTES = 1 << 20
#: in the rank-last layout, rank axes longer than this are blocked ("Blocked rank axis" above)
BLOCK_OVER = 192
#: the target length of one block of the rank axis
BLOCK = 128


@dataclass(frozen=True)
class RankLayout:
    """The direction axes of DOF: ``(kr,)``, or ``(kb, ki)`` with ``k = kb * block + ki`` when
    the rank axis is blocked (``block`` is then the extent of ``ki``; ``rank <= kb * ki``, the
    padding directions have zero tangents).  The first ``positives`` rows of ``L`` have the
    sign +1, the rest -1.  ``width_last``: tangents keep the direction axis before their last
    primal axis (never blocked), else after it."""

    dirs: tuple[E.IterVar, ...]
    block: int | None
    rank: int
    positives: int
    width_last: bool

    @staticmethod
    def make(dec: Decomposition, names: Names, widths: Sequence[int],
             itemsize: int) -> RankLayout:
        r = dec.rank
        width = max(widths, default=0)
        width_last = width * width * itemsize <= WIDTH_LAST_MAX_BYTES
        if width_last or r <= BLOCK_OVER:
            return RankLayout((names.axis("kr", r),), None, r, dec.positives, width_last)
        nblocks = -(-r // BLOCK)
        block = -(-r // nblocks)
        return RankLayout((names.axis("kb", nblocks), names.axis("ki", block)), block, r,
                          dec.positives, False)


class DofContext(StageContext):
    """Per-stage state of DOF: ``(g, s)`` of sub-expressions and the Gram form ``Q``."""

    def __init__(self, primal: Tensor, gmap: dict[int, TangentTensor | ExprTangent],
                 smap: dict[int, TangentTensor], layout: RankLayout, names: Names,
                 g_read_on: bool = True) -> None:
        super().__init__(primal, gmap, layout.dirs, names)
        self.smap = smap
        self.layout = layout
        #: whether a stage other than the output reads this one (so that its own tangent
        #: is needed downstream, not only in its Gram term; see "Scaled layers" above)
        self.g_read_on = g_read_on
        self._pairs: dict[tuple[E.Expr, frozenset], Pair] = {}

    def arrange(self, axes: list[E.IterVar]) -> list[E.IterVar]:
        """In the width-last layout the direction axis goes right before the last primal
        axis: ``(b, j, k)`` is laid out ``(b, k, j)``, ``(j, k)`` as ``(k, j)``; else it
        goes last, and a blocked rank axis is laid out ``(b, kb, j, ki)`` (see "Tangent
        layout" and "Blocked rank axis" above)."""
        dirs = [a for a in axes if any(a is d for d in self.dirs)]
        prim = [a for a in axes if not any(a is d for d in self.dirs)]
        if self.layout.width_last:
            return prim[:-1] + dirs + prim[-1:]
        if self.layout.block is None or not any(a is self.dirs[0] for a in dirs):
            return prim + dirs
        at = 1 if prim else 0                       # kb right after the batch axis
        return prim[:at] + dirs[:1] + prim[at:] + dirs[1:]

    def stored(self, g: E.Expr) -> TangentTensor | None:
        """``g`` as a stored tangent when it is a read of a stage at bare, distinct axis
        variables of this stage's tangent (a stage a rule built, or a tangent copied as it
        is): reused as it is instead of copied into a new stage."""
        if (not isinstance(g, E.TensorRead) or not isinstance(g.tensor.op, ComputeOp)
                or g.dtype != self.primal.dtype):
            return None
        pos = {a.var: p for p, a in enumerate(list(self.axes) + list(self.dirs))}
        keep = tuple(pos.get(i, -1) if isinstance(i, E.Var) else -1 for i in g.indices)
        if -1 in keep or len(set(keep)) != len(keep):
            return None
        return TangentTensor(g.tensor, keep)

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
    depends = batch_positions(output, x, who)
    if dec.rank == 0:
        return materialize(None, output, name=name)
    names = Names([output])
    order = topo_order([output])
    widths = [int(t.shape[-1].value) for t in order          # last axes that are no batch
              if t is not x and t.ndim - 1 not in depends.get(id(t), (t.ndim - 1,))
              and isinstance(t.shape[-1], E.Const)]
    layout = RankLayout.make(dec, names, widths, dtypes.to_numpy(x.dtype).itemsize)
    gmap: dict[int, TangentTensor | ExprTangent] = {
        id(x): seed_tangent(dec, x, names, layout.block)}
    smap: dict[int, TangentTensor] = {}
    readers = consumers(order)
    scans: dict[int, list | None] = {}
    for t in order:
        if isinstance(t.op, ScanOp):          # every state of the scan at once (:mod:`.scan`)
            sc = t.op.scan
            if id(sc) not in scans:
                scans[id(sc)] = dof_scan(sc, gmap, smap, layout, names)
            if scans[id(sc)] is not None:
                gmap[id(t)], smap[id(t)] = scans[id(sc)][t.op.index]
            continue
        if (isinstance(t.op, ScatterOp) and any(id(d) in gmap or id(d) in smap
                                                for d in input_tensors(t))):
            raise DifferentiationError(
                f"{who}: DOF has no rule for the scatter {t.name!r}, which depends on "
                f"{x.name!r} (a gradient of a gather); use method='hessian'")
        if t is x or not isinstance(t.op, ComputeOp):
            continue
        if t.attrs.get(CANCELLING_DERIVATIVE) and t is not output:
            continue  # its readers do not depend on it: zero first and second derivatives
        ctx = DofContext(t, gmap, smap, layout, names,
                         any(r is not output for r in readers.get(id(t), ())))
        g, s = ctx.pair(t.op.body)
        if not isinstance(g, E.Zero):
            g = ctx.hoist_invariant(g, f"g_{t.name}_inv")
            gmap[id(t)] = ctx.stored(g) or ctx.tangent_stage(g, f"g_{t.name}")
        if not isinstance(s, E.Zero):
            s = ctx.hoist_invariant(s, f"s_{t.name}_inv")
            smap[id(t)] = ctx.tangent_stage(s, f"s_{t.name}", full=t is output,
                                            with_dirs=False)
    return materialize(smap.get(id(output)), output, name=name)
