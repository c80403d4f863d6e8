"""Hessians by forward over reverse mode.

The reverse-mode gradient ``G = d f / d x`` is an ordinary compute DAG (the forward stages and
the adjoint stages).  Forward mode through it, with one basis direction per element of ``x``
carried along extra direction axes, gives ``dG[i, d] = d2 f / dx_i dx_d``: the Hessian
(Pearlmutter 1994, "Fast exact multiplication by the Hessian", with all basis vectors at
once; the seed DOF paper's baseline, its eqs. 13-14).

Cost: every stage of the forward and the reverse graph gets a tangent stage ``|x|`` times its
size, so about ``|x|`` times the cost of the gradient, plus the Hessian's own ``|x|^2`` size.
The basis seed is the identity ``I[i, d] = delta(i, d)`` (resolved by zero elimination in its
consumers); stages whose tangent does not depend on a sample are stored once (see
:mod:`.context`).

Forward mode treats the condition of a ``select`` as locally constant, which is right for
piecewise functions but not for a select that only guards a removable singularity; reverse
mode's zero-safe product rule is written so that its derivative is right at zero factors too
(:mod:`tecomp.passes.autodiff.reductions`), so Hessians through products are exact there.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tecomp import expr as E
from tecomp.tensor import Tensor

from .context import ExprTangent, Names
from .propagate import Tangent, forward_tangents, materialize

#: ``gradient(output, x)``: the (optimised) reverse-mode gradient of ``output`` w.r.t. ``x``,
#: supplied by the caller (the API), as passes do not run the pipeline themselves
Gradient = Callable[[Tensor, Tensor], Tensor]


def identity_seed(x: Tensor, names: Names) -> tuple[ExprTangent, tuple[E.IterVar, ...]]:
    """The seed ``I[i..., d...] = prod_m delta(i_m, d_m)`` over ``x.shape + x.shape`` and its
    direction axes (Kronecker deltas: zero elimination resolves them in the consumers)."""
    dirs = tuple(names.axis(f"hd{m}", s) for m, s in enumerate(x.shape))
    nd = x.ndim

    def fn(ix: Sequence[E.Expr]) -> E.Expr:
        out: E.Expr = E.Const(1.0, x.dtype)
        for m in range(nd):
            out = E.mul(out, E.delta(ix[m], ix[nd + m], x.dtype))
        return out
    return ExprTangent(fn), dirs


def full_hessian(output: Tensor, x: Tensor, name: str | None = None, *,
                 gradient: Gradient) -> Tensor:
    """``H[i..., j...] = d2 output / dx[i...] dx[j...]`` for a scalar ``output``."""
    grad = gradient(output, x)
    names = Names([grad])
    seed, dirs = identity_seed(x, names)
    tans = forward_tangents([grad], {id(x): seed}, dirs=dirs, names=names, prefix="h")
    return materialize(tans.get(id(grad)), grad, dirs, name=name or f"hessian_{output.name}")


def forward_jacobian(output: Tensor, x: Tensor, name: str | None = None) -> Tensor:
    """``J[i..., j...] = d output[i...] / dx[j...]`` by forward mode: the identity seed over
    ``x`` (one basis direction per element, along direction axes), so the tangent of
    ``output`` has shape ``output.shape + x.shape``.  Used for graphs with a scan, whose
    tangent is a forward scan (reverse mode with a Jacobian head has no scan rule)."""
    names = Names([output])
    seed, dirs = identity_seed(x, names)
    tans = forward_tangents([output], {id(x): seed}, dirs=dirs, names=names, prefix="jf")
    return materialize(tans.get(id(output)), output, dirs, name=name or f"{output.name}_jacobian")


def sample_hessian(output: Tensor, x: Tensor, *,
                   gradient: Gradient) -> tuple[Tangent | None, E.IterVar]:
    """Per-sample Hessians of ``output`` (one value per sample of ``x``'s leading axes).

    The seed is ``delta(n, d)`` over x's last axis, so the tangent of the gradient is
    ``H[b..., n, d] = d2 output[b...] / dx[b..., n] dx[b..., d]``, provided samples are
    independent.  Returns the tangent tensor (None when ``output`` is linear in ``x``) and
    its direction axis ``d``.
    """
    grad = gradient(output, x)
    names = Names([grad])
    dir_axis = names.axis("hd", x.shape[-1])
    nd = x.ndim
    seed = ExprTangent(lambda ix: E.delta(ix[nd - 1], ix[nd], x.dtype))
    tans = forward_tangents([grad], {id(x): seed}, dirs=(dir_axis,), names=names, prefix="h")
    return tans.get(id(grad)), dir_axis
