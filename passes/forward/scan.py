"""Forward mode through a scan: the tangent recurrence is a scan of the same direction.

For ``S_k[t] = U_k(t; S[t - d], X)`` (``t >= L``) and tangents ``dX`` of the outer tensors,
the tangents ``dS_k`` satisfy ``dS_k[t] = Σ_m ∂U_k/∂S_m[t - d] · dS_m[t - d] + ∂U_k/∂X · dX``,
a scan over new state placeholders ``dstate_k`` (shape ``S_k.shape + direction extents``) whose
step is the forward-mode tangent of the step with ``state_m`` seeded by ``dstate_m``.  The
primal values the tangent step needs are read back from the stored states, as in reverse mode
(:mod:`tecomp.passes.autodiff.scan`: :func:`guarded_body`, :func:`read_stored_states`): the
update ``U_k`` becomes ``S_k``, a state read becomes a read of the zero-padded ``S_k``, and
other step tensors are recomputed from those outside the scan.  The given steps' tangents are
the tangents of the inits.

Worked example, cumprod ``S[t] = S[t - 1] · X[t]``: the tangent step is
``dS[t] = dS[t - 1] · X[t] + S[t - 1] · dX[t]``, with ``dS[0] = dX[0]``.
"""

from __future__ import annotations

from typing import Any

from tecomp import expr as E
from tecomp.scan import make_scan
from tecomp.scan_op import Scan
from tecomp.tensor import ComputeOp, PlaceholderOp, Tensor

from .context import TangentTensor


def _compute(name: str, shape: tuple, dtype: str, fn: Any) -> Tensor:
    axes = tuple(E.IterVar(E.Var(f"a{m}", "int64"), E.Const(0, "int64"), s, "data")
                 for m, s in enumerate(shape))
    body = E.cast(E.as_expr(fn(*[a.var for a in axes])), dtype)
    return Tensor(name, shape, dtype, ComputeOp(axes, body, None))


def scan_tangents(sc: Scan, tangents: dict[int, Any], dirs: tuple[E.IterVar, ...],
                  names: Any, prefix: str) -> list[TangentTensor] | None:
    """The tangents of every state of ``sc`` (None when no outer tensor has one)."""
    from tecomp.passes.autodiff.scan import guarded_body, read_stored_states

    from .propagate import forward_tangents, materialize

    if not any(id(x) in tangents for x in sc.outer):
        return None
    ext = tuple(a.extent for a in dirs)
    dstates = [Tensor(f"{prefix}_{s.name}", s.shape + ext, s.dtype, PlaceholderOp())
               for s in sc.state]
    masked = guarded_body(sc)
    updates = [masked[id(u)] for u in sc.update]
    seeds: dict[int, Any] = {id(x): tangents[id(x)] for x in sc.outer if id(x) in tangents}
    for s, ds in zip(sc.state, dstates):
        seeds[id(s)] = TangentTensor(ds, tuple(range(ds.ndim)))
    inner = forward_tangents(updates, seeds, dirs=dirs, names=names, prefix=prefix)
    steps = [materialize(inner.get(id(u)), u, dirs, name=f"{prefix}_{u.name}") for u in updates]
    steps = read_stored_states(steps, sc, updates)
    inits = [materialize(tangents.get(id(i0)), i0, dirs, name=f"{prefix}_{i0.name}")
             for i0 in sc.init]
    dS = make_scan(f"{prefix}_{sc.name}", inits, steps, dstates, reverse=sc.reverse,
                   internal=True)
    return [TangentTensor(t, tuple(range(t.ndim))) for t in dS]


