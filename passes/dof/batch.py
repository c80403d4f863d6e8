"""Which axes of each tensor carry x's batch (its leading axes), checked structurally.

``diff_operator(output, x, A)`` differentiates with respect to ``x[..., i]`` sample by sample:
it seeds every sample with the same directions, which is right exactly when ``output[b, ...]``
depends on ``x[b, :]`` only.  This pass proves that cheaply from the index expressions: a
tensor that depends on ``x`` must read every ``x``-dependent tensor with plain data-axis
variables at the batch positions, the same axis for every read, and the output's batch axes
must be its leading axes.  A read such as ``sum_b u[b]`` or ``u[b + 1]`` raises a
:class:`~tecomp.errors.TecompError` naming the tensor and the index.
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.errors import TecompError
from tecomp.functor import tensor_reads, topo_order
from tecomp.scan_op import Scan, ScanOp
from tecomp.tensor import ComputeOp, Tensor


def batch_positions(output: Tensor, x: Tensor, who: str) -> dict[int, tuple[int, ...]]:
    """``id(tensor) -> positions of x's batch axes`` for every tensor depending on ``x``."""
    nb = x.ndim - 1
    pos: dict[int, tuple[int, ...]] = {id(x): tuple(range(nb))}
    for t in topo_order([output]):
        if id(t) in pos:
            continue
        if isinstance(t.op, ScanOp):
            _scan_positions(t.op.scan, pos, nb, x, who)
        elif isinstance(t.op, ComputeOp):
            found = _stage_positions(t, pos, nb, x, who)
            if found is not None:
                pos[id(t)] = found
    if id(output) in pos and pos[id(output)] != tuple(range(nb)):
        raise TecompError(
            f"{who}: the leading axes of the output {output.name!r} must be the batch axes of "
            f"{x.name!r} (x has shape ({', '.join(str(s) for s in x.shape)}); its batch "
            f"axes land on output axes {pos[id(output)]})")
    return pos


def _stage_positions(t: Tensor, pos: dict[int, tuple[int, ...]], nb: int, x: Tensor,
                     who: str) -> tuple[int, ...] | None:
    """The axes of the compute ``t`` that carry the batch (None: t does not depend on x)."""
    axis_of = {a.var: p for p, a in enumerate(t.op.axes)}
    found: tuple[int, ...] | None = None
    for r in tensor_reads(t.op.body):
        src = pos.get(id(r.tensor))
        if src is None:
            continue
        mine = []
        for d in range(nb):
            ix = r.indices[src[d]]
            p = axis_of.get(ix) if isinstance(ix, E.Var) else None
            if p is None:
                raise TecompError(
                    f"{who}: tensor {t.name!r} reads {r.tensor.name!r} at index {ix} on "
                    f"the axis that carries batch axis {d} of {x.name!r}; the output must "
                    f"depend on each sample x[b, :] separately (index the batch with the "
                    f"output's own axes)")
            mine.append(p)
        got = tuple(mine)
        if len(set(got)) != nb:
            raise TecompError(
                f"{who}: tensor {t.name!r} reads {r.tensor.name!r} with one axis for two "
                f"batch axes of {x.name!r}")
        if found is not None and found != got:
            raise TecompError(
                f"{who}: tensor {t.name!r} reads samples of {x.name!r} along different "
                f"axes ({found} and {got}); the output must depend on each sample "
                "separately")
        found = got
    return found


def _scan_positions(sc: Scan, pos: dict[int, tuple[int, ...]], nb: int, x: Tensor,
                    who: str) -> None:
    """The batch axes of a scan's states: those of its inits, or else those its updates
    find from the outer tensors; the step must keep each sample on the same axes, and the
    time axis carries no batch."""
    K = len(sc.state)
    known: list[tuple[int, ...] | None] = [pos.get(id(i0)) for i0 in sc.init]
    for _ in range(K + 1):
        local = dict(pos)
        for s, p in zip(sc.state, known):
            if p is not None:
                local[id(s)] = p
        for b in sc.body:
            found = _stage_positions(b, local, nb, x, who)
            if found is not None:
                local[id(b)] = found
        got = [local.get(id(u)) for u in sc.update]
        grew = False
        for k in range(K):
            if got[k] is not None and known[k] is None:
                known[k], grew = got[k], True
            elif known[k] is not None and got[k] not in (None, known[k]):
                raise TecompError(
                    f"{who}: the step {sc.update[k].name!r} of scan {sc.name!r} moves the "
                    f"samples from axes {known[k]} of the state {sc.state[k].name!r} to axes "
                    f"{got[k]}; a step must keep each sample on its axes")
        if not grew:
            break
    for k, p in enumerate(known):
        if p is None:
            continue
        if 0 in p:
            raise TecompError(
                f"{who}: the batch of x runs along the time axis of scan {sc.name!r} (state "
                f"{sc.state[k].name!r}); the samples must lie on the other axes")
        pos[id(sc.outputs[k])] = p
