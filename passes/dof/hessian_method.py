"""The Hessian baseline of ``diff_operator``: per-sample Hessians contracted with ``A``.

For each scalar output per sample (every element of the output's trailing axes in turn), the
reverse-mode gradient ``G[b, n] = d out[b] / dx[b, n]`` is differentiated once more in forward
mode with the ``N`` basis directions along one direction axis (:func:`sample_hessian`), giving
``H[b, n, d]``; then ``sum_ij A[i, j] H[b, i, j]`` (``sum_i A[i, i] H[b, i, i]`` for a diagonal
``A``).  This is the method the DOF paper compares against: ``N`` tangents through the forward
*and* the reverse graph (its eqs. 13-14), plus ``N^2`` per sample for the contraction.  Output
trailing axes must have constant extents (one gradient is built per element).
"""

from __future__ import annotations

import itertools

import numpy as np

from tecomp import expr as E
from tecomp.errors import TecompError
from tecomp.tensor import Tensor

from ..forward.context import Names, new_stage
from ..forward.hessian import Gradient, sample_hessian
from ..forward.propagate import materialize
from .batch import batch_positions
from .decompose import constant_stage


def _contract(h, a: np.ndarray, a_t: Tensor, batch: list[E.IterVar], names: Names,
              dtype: str, name: str) -> Tensor:
    """``C[b] = sum_ij A[i, j] H[b, i, j]`` (the diagonal only when ``A`` is diagonal)."""
    n = a.shape[0]
    bvars = tuple(ax.var for ax in batch)
    i = names.axis("hi", n, kind="reduce")
    if np.count_nonzero(a - np.diag(np.diag(a))) == 0:
        hv = h.read(bvars + (i.var, i.var))
        w = hv if np.all(np.diag(a) == 1.0) else E.mul(E.TensorRead(a_t, (i.var, i.var),
                                                                    dtype), hv)
        body = E.Reduce("sum", w, (i,), None, dtype)
    else:
        j = names.axis("hj", n, kind="reduce")
        w = E.mul(E.TensorRead(a_t, (i.var, j.var), dtype), h.read(bvars + (i.var, j.var)))
        body = E.Reduce("sum", w, (i, j), None, dtype)
    return new_stage(name, batch, body)


def hessian_operator(output: Tensor, x: Tensor, a: np.ndarray, *, who: str = "diff_operator",
                     name: str | None = None, gradient: Gradient) -> Tensor:
    """``sum_ij A_ij d2 output / dx[..., i] dx[..., j]`` through per-sample Hessians;
    ``gradient(out, x)`` gives the reverse-mode gradient they start from."""
    name = name or f"hess_op_{output.name}"
    batch_positions(output, x, who)
    nb = x.ndim - 1
    trailing = output.shape[nb:]
    for d, s in enumerate(trailing):
        if not isinstance(s, E.Const):
            raise TecompError(
                f"{who}: method='hessian' needs constant extents on the output's non-batch "
                f"axes; {output.name!r} axis {nb + d} has extent {s}")
    names = Names([output])
    a_t = constant_stage(a, "hess_A", x.dtype, names)
    batch = [names.axis(f"b{d}", s) for d, s in enumerate(output.shape[:nb])]
    bvars = tuple(ax.var for ax in batch)
    parts: list[tuple[tuple[int, ...], Tensor]] = []
    for m in itertools.product(*(range(int(s.value)) for s in trailing)):
        idx = bvars + tuple(E.Const(v, "int64") for v in m)
        om = output if not m else new_stage(
            f"{output.name}_{'_'.join(map(str, m))}", batch,
            E.TensorRead(output, idx, output.dtype))
        h, _ = sample_hessian(om, x, gradient=gradient)
        if h is None:
            continue
        part_name = f"{name}_part" if trailing else name
        parts.append((m, _contract(h, a, a_t, batch, names, output.dtype, part_name)))
    if not trailing and parts:
        return parts[0][1]
    if not parts:
        return materialize(None, output, name=name)
    out_axes = batch + [names.axis(f"m{d}", s) for d, s in enumerate(trailing)]
    body: E.Expr = E.Const(0.0, output.dtype)
    for m, part in parts:
        cond: E.Expr = E.Const(True, "bool")
        for ax, v in zip(out_axes[nb:], m):
            cond = E.logical_and(cond, E.compare(E.EQ, ax.var, v))
        body = E.select(cond, E.TensorRead(part, bvars, output.dtype), body)
    return new_stage(name, out_axes, body)
