"""DOF through a scan: ``(g, s)`` of the states is a forward scan of its own.

For a scan ``S_k[t] = U_k(t; S[t - d], X)`` (``t >= L``), DOF's pair of each state,
``g_k = L grad S_k`` (shape ``S_k.shape + (r,)``) and ``s_k`` (the operator value, ``S_k``'s
shape), satisfies the step's own DOF rules (:mod:`.rules`) with the reads of ``state_m``
seeded by the pair of the state at the earlier step: a recurrence over new state placeholders
``gstate_k``, ``sstate_k`` with the same lags and direction, whose given steps are the pairs of
the inits.  The step is propagated stage by stage like any other part of the graph (the same
:class:`~.propagate.DofContext`, with the direction axes after the primal axes so that every
step stage keeps time first), and the primal values the rules need are read back from the
stored states, as in forward mode (:mod:`tecomp.passes.forward.scan`: the update ``U_k``
becomes ``S_k``, a state read a read of the zero-padded ``S_k``, other step tensors are
recomputed outside the scan).

Worked example, ``S[t] = tanh(S[t - 1] + x)`` with one sample: the step's pair is
``g[t] = (1 - S[t]^2) g[t - 1] + (1 - S[t]^2) g_x`` and
``s[t] = (1 - S[t]^2) s[t - 1] - 2 S[t] (1 - S[t]^2) Q(g[t - 1] + g_x, g[t - 1] + g_x)``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from tecomp import expr as E
from tecomp.errors import DifferentiationError
from tecomp.functor import input_tensors, topo_order
from tecomp.scan import make_scan
from tecomp.scan_op import Scan
from tecomp.tensor import ComputeOp, PlaceholderOp, Tensor

from ..forward.context import TangentTensor
from ..forward.propagate import materialize

if TYPE_CHECKING:
    from .propagate import RankLayout


def dof_scan(sc: Scan, gmap: dict[int, Any], smap: dict[int, TangentTensor],
             layout: RankLayout, names: Any) -> list[tuple[TangentTensor, TangentTensor]] | None:
    """The ``(g, s)`` pair of every state of ``sc`` as stored tangents (None when no outer
    tensor of the scan depends on x)."""
    from tecomp.passes.autodiff.scan import guarded_body, read_stored_states

    from .propagate import DofContext

    if not any(id(x) in gmap or id(x) in smap for x in sc.outer):
        return None
    plain = dataclasses.replace(layout, width_last=False)
    dirs = plain.dirs
    ext = tuple(a.extent for a in dirs)
    gstates = [Tensor(f"g_{s.name}", s.shape + ext, s.dtype, PlaceholderOp()) for s in sc.state]
    sstates = [Tensor(f"s_{s.name}", s.shape, s.dtype, PlaceholderOp()) for s in sc.state]
    masked = guarded_body(sc)
    updates = [masked[id(u)] for u in sc.update]
    g_in: dict[int, Any] = dict(gmap)
    s_in: dict[int, TangentTensor] = dict(smap)
    for s, gs, ss in zip(sc.state, gstates, sstates):
        g_in[id(s)] = TangentTensor(gs, tuple(range(gs.ndim)))
        s_in[id(s)] = TangentTensor(ss, tuple(range(ss.ndim)))
    inner = {id(s) for s in sc.state}         # the step: what depends on a state
    for t in topo_order(updates):
        if not any(id(d) in inner for d in input_tensors(t)):
            continue
        if not isinstance(t.op, ComputeOp):
            raise DifferentiationError(
                f"diff_operator: the step of scan {sc.name!r} holds the scatter {t.name!r} "
                "(the adjoint of a gather from a state); DOF has no scatter rule, use "
                "method='hessian'")
        inner.add(id(t))
        ctx = DofContext(t, g_in, s_in, plain, names)
        g, s = ctx.pair(t.op.body)
        if not isinstance(g, E.Zero):
            g_in[id(t)] = ctx.stored(g) or ctx.tangent_stage(g, f"g_{t.name}")
        if not isinstance(s, E.Zero):
            s_in[id(t)] = ctx.tangent_stage(s, f"s_{t.name}", with_dirs=False)
    g_steps = [materialize(g_in.get(id(u)), u, dirs, name=f"g_{u.name}_step") for u in updates]
    s_steps = [materialize(s_in.get(id(u)), u, name=f"s_{u.name}_step") for u in updates]
    steps = read_stored_states(g_steps + s_steps, sc, updates)
    g_init = [materialize(gmap.get(id(i0)), i0, dirs, name=f"g_{i0.name}") for i0 in sc.init]
    s_init = [materialize(smap.get(id(i0)), i0, name=f"s_{i0.name}") for i0 in sc.init]
    outs = make_scan(f"dof_{sc.name}", g_init + s_init, steps, gstates + sstates,
                     reverse=sc.reverse, internal=True)
    K = len(sc.state)
    return [(TangentTensor(g, tuple(range(g.ndim))), TangentTensor(s, tuple(range(s.ndim))))
            for g, s in zip(outs[:K], outs[K:])]
