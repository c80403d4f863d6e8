"""Hessians by forward over reverse mode.

The reverse-mode gradient ``G = d f / d x`` is an ordinary compute DAG (the forward stages and
the adjoint stages).  Forward mode through it, with one basis direction per element of ``x``
carried along extra direction axes, gives ``dG[i, d] = d2 f / dx_i dx_d``: the Hessian
(Pearlmutter 1994, "Fast exact multiplication by the Hessian", with all basis vectors at
once; the seed DOF paper's baseline, its eqs. 13-14).

Cost: every stage of the forward and the reverse graph gets a tangent stage ``|x|`` times its
size, so about ``|x|`` times the cost of the gradient, plus the Hessian's own ``|x|^2`` size.
The basis seed is the identity ``I[i, d]``, a compute stage of one comparison; stages whose
tangent does not depend on a sample are stored once (see :mod:`.context`).

Limit: forward mode treats the condition of a ``select`` as locally constant, which is right
for piecewise functions but not for a select that only guards a removable singularity.
Reverse mode's zero-safe product rule is such a form, so at a point where a product has a zero
factor the Hessian of that product comes out wrong (``d2 prod / dx_z dx_l`` is lost).  The
DOF rule for products (:mod:`tecomp.passes.dof.product`) is exact there.
"""

from __future__ import annotations

from typing import Sequence

from tecomp import expr as E
from tecomp.tensor import Tensor

from .context import Names, TangentTensor, new_stage
from .propagate import forward_tangents, materialize


def _gradient(output: Tensor, x: Tensor) -> Tensor:
    from tecomp.autodiff_api import gradient

    return gradient(output, [x])[0]


def identity_seed(shape: Sequence[E.Expr], dtype: str, names: Names,
                  name: str) -> tuple[Tensor, tuple[E.IterVar, ...]]:
    """``I[i..., d...] = 1 if i == d`` over ``shape + shape``, and the direction axes."""
    idx = [names.axis(f"hi{m}", s) for m, s in enumerate(shape)]
    dirs = tuple(names.axis(f"hd{m}", s) for m, s in enumerate(shape))
    cond: E.Expr = E.Const(True, "bool")
    for a, d in zip(idx, dirs):
        cond = E.logical_and(cond, E.compare(E.EQ, a.var, d.var))
    body = E.select(cond, E.Const(1.0, dtype), E.Const(0.0, dtype))
    return new_stage(name, idx + list(dirs), body), dirs


def full_hessian(output: Tensor, x: Tensor, name: str | None = None) -> Tensor:
    """``H[i..., j...] = d2 output / dx[i...] dx[j...]`` for a scalar ``output``."""
    grad = _gradient(output, x)
    names = Names([grad])
    seed, dirs = identity_seed(x.shape, x.dtype, names, f"{x.name}_basis")
    tans = forward_tangents([grad], {id(x): TangentTensor(seed, tuple(range(2 * x.ndim)))},
                            dirs=dirs, names=names, prefix="h")
    return materialize(tans.get(id(grad)), grad, dirs, name=name or f"hessian_{output.name}")


def sample_hessian(output: Tensor, x: Tensor, seed: Tensor) -> tuple[
        TangentTensor | None, E.IterVar]:
    """Per-sample Hessians of ``output`` (one value per sample of ``x``'s leading axes).

    ``seed[n, d]`` is the identity over x's last axis, so the tangent of the gradient is
    ``H[b..., n, d] = d2 output[b...] / dx[b..., n] dx[b..., d]``, provided samples are
    independent.  Returns the tangent tensor (None when ``output`` is linear in ``x``) and
    its direction axis ``d``.
    """
    grad = _gradient(output, x)
    names = Names([grad])
    dir_axis = names.axis("hd", x.shape[-1])
    nd = x.ndim
    tans = forward_tangents([grad], {id(x): TangentTensor(seed, (nd - 1, nd))},
                            dirs=(dir_axis,), names=names, prefix="h")
    return tans.get(id(grad)), dir_axis
