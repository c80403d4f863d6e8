"""Public forward-mode API: ``jvp``, ``hessian``, ``diff_operator`` and ``laplacian``.

* :func:`jvp` -- forward-mode tangent propagation (:mod:`tecomp.passes.forward`).
* :func:`hessian` -- forward over reverse: the reverse-mode gradient, then forward mode with
  one basis direction per input element (propagated together along one direction axis).
* :func:`diff_operator` / :func:`laplacian` -- ``sum_ij A[i,j] d2 out / dx_i dx_j`` over the
  last axis of ``x``, by forward propagation of ``(value, L grad, operator)`` (the DOF method,
  :mod:`tecomp.passes.dof`) or by the Hessian baseline.

Every result is an ordinary compute tensor: it can be evaluated, built, inspected, and
differentiated again (``tc.gradient`` of a loss made of a Laplacian).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import dtypes
from . import expr as E
from .errors import DifferentiationError, TecompError
from .tensor import Tensor


def _shape_str(t: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def _check_tensor(t: Any, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise TecompError(f"{what} must be a tensor, got {type(t).__name__}: {t!r}")
    return t


def _check_float(t: Tensor, what: str) -> None:
    if not dtypes.is_float(t.dtype):
        raise DifferentiationError(
            f"{what} {t.name!r} has dtype {t.dtype}; derivatives are taken with respect to "
            "float tensors only")


def jvp(output: Tensor, inputs: Sequence[Tensor], tangents: Sequence[Tensor]) -> Tensor:
    """The directional derivative of ``output`` along ``tangents`` (forward mode).

    ``inputs`` are placeholders or intermediate tensors; ``tangents`` has one tensor of the
    same shape per input.  Returns a tensor of ``output``'s shape:
    ``sum_inputs sum_idx d output / d input[idx] * tangent[idx]``.

    Example::

        >>> X = tc.placeholder((3,), name="X", dtype="float64")
        >>> V = tc.placeholder((3,), name="V", dtype="float64")
        >>> Y = tc.compute((3,), lambda i: tc.sin(X[i]), name="Y")
        >>> dY = tc.jvp(Y, [X], [V])                     # cos(X) * V
        >>> tc.evaluate(dY, {X: np.zeros(3), V: np.array([1.0, 2.0, 3.0])})[0]
        array([1., 2., 3.])
    """
    from .passes.forward import TangentTensor, forward_tangents, materialize

    output = _check_tensor(output, "jvp: output")
    if isinstance(inputs, Tensor) or isinstance(tangents, Tensor):
        raise TecompError("jvp: inputs and tangents are lists of tensors")
    inputs, tangents = list(inputs), list(tangents)
    if len(inputs) != len(tangents):
        raise TecompError(
            f"jvp: {len(inputs)} input(s) but {len(tangents)} tangent(s); give one tangent "
            "per input")
    seeds = {}
    for x, t in zip(inputs, tangents):
        x = _check_tensor(x, "jvp: an input")
        t = _check_tensor(t, f"jvp: the tangent of {x.name!r}")
        _check_float(x, "jvp: input")
        _check_float(t, f"jvp: the tangent of {x.name!r},")
        if len(x.shape) != len(t.shape) or any(a != b for a, b in zip(x.shape, t.shape)):
            raise TecompError(
                f"jvp: the tangent {t.name!r} has shape {_shape_str(t)} but the input "
                f"{x.name!r} has shape {_shape_str(x)}")
        if id(x) in seeds:
            raise TecompError(f"jvp: the input {x.name!r} is listed twice")
        seeds[id(x)] = TangentTensor(t, tuple(range(x.ndim)))
    _check_float(output, "jvp: output")
    tans = forward_tangents([output], seeds)
    return materialize(tans.get(id(output)), output, name=f"jvp_{output.name}")


def hessian(output: Tensor, input: Tensor) -> Tensor:
    """``H[i..., j...] = d2 output / d input[i...] d input[j...]`` for a scalar ``output``.

    Forward over reverse: the reverse-mode gradient, then forward mode with one basis
    direction per element of ``input`` (all along extra direction axes).  Cost: about
    ``|input|`` times the gradient's, plus the ``|input|^2`` result.

    Example::

        >>> X = tc.placeholder((2,), name="X", dtype="float64")
        >>> k = tc.reduce_axis(2, name="k")
        >>> f = tc.compute((), lambda: tc.sum(X[k] * X[k] * X[k], axis=k), name="f")
        >>> tc.evaluate(tc.hessian(f, X), {X: np.array([1.0, 2.0])})[0]    # diag(6 x)
        array([[ 6.,  0.],
               [ 0., 12.]])
    """
    from .passes.forward.hessian import full_hessian

    output = _check_tensor(output, "hessian: output")
    x = _check_tensor(input, "hessian: input")
    _check_float(output, "hessian: output")
    _check_float(x, "hessian: input")
    if output.ndim != 0:
        raise TecompError(
            f"hessian: the output {output.name!r} has shape {_shape_str(output)}; tc.hessian "
            "needs a scalar output (shape ()); use tc.diff_operator for per-sample operators")
    return full_hessian(output, x, gradient=_gradient)


def _last_extent(x: Tensor, who: str) -> int:
    if x.ndim == 0:
        raise TecompError(f"{who}: x {x.name!r} is a scalar; it needs a last axis to "
                          "differentiate along")
    n = x.shape[-1]
    if not isinstance(n, E.Const):
        raise TecompError(
            f"{who}: the last axis of {x.name!r} has the symbolic extent {n}; the operator "
            "matrix fixes its size, so declare it as an integer")
    return int(n.value)


def diff_operator(output: Tensor, x: Tensor, A: Any, method: str = "dof") -> Tensor:
    """``sum_ij A[i,j] d2 output / dx[..., i] dx[..., j]``, a tensor of ``output``'s shape.

    ``i, j`` run over the last axis of ``x``; x's leading axes are independent samples (a
    batch): ``output[b, ...]`` must depend on ``x[b, :]`` only, and ``output``'s leading
    axes must be x's batch axes (checked from the index expressions; a TecompError says
    which tensor breaks it).  ``A`` is a constant symmetric NumPy matrix of size
    ``x.shape[-1]``.

    ``method="dof"`` forward-propagates ``(value, L grad, operator)`` with ``A = L^T D L``
    (r = rank A tangent components per tensor); through a scan (``tc.scan``) the triple of
    every state is a forward scan of its own (the samples must lie off the time axis).  A
    graph with a scatter stage that depends on ``x`` (the gradient of a gather) is computed by
    the Hessian method: DOF has no scatter rule.
    ``method="hessian"`` is the baseline that builds each sample's Hessian by forward over
    reverse mode and contracts it with ``A`` (N tangent components through the forward and
    the reverse graph, then an N x N contraction per sample).

    Example::

        >>> X = tc.placeholder((4, 2), name="X", dtype="float64")   # 4 samples in 2-D
        >>> u = tc.compute((4,), lambda b: X[b, 0] * X[b, 0] * X[b, 1], name="u")
        >>> A = np.array([[2.0, 1.0], [1.0, 0.0]])
        >>> L = tc.diff_operator(u, X, A)      # 2 u_00 + 2 u_01 = 4 x1 + 4 x0
        >>> tc.evaluate(L, {X: np.array([[1.0, 1.0], [1.0, 2.0], [0.0, 0.0], [2.0, 0.5]])})[0]
        array([ 8., 12.,  0., 10.])
    """
    from .passes.dof import check_operator_matrix, decompose, dof_operator

    who = "diff_operator"
    output = _check_tensor(output, f"{who}: output")
    x = _check_tensor(x, f"{who}: x")
    _check_float(x, f"{who}: x")
    _check_float(output, f"{who}: output")
    a = check_operator_matrix(A, _last_extent(x, who), who)
    if method == "dof" and _scatter_depends_on(output, x):
        method = "hessian"  # DOF has no scatter rule (a gradient of a gather): the baseline
    if method == "dof":
        return dof_operator(output, x, decompose(a), who=who)
    if method == "hessian":
        from .passes.dof.hessian_method import hessian_operator

        return hessian_operator(output, x, a, who=who, gradient=_gradient)
    raise TecompError(f"{who}: unknown method {method!r}; use 'dof' or 'hessian'")


def _scatter_depends_on(output: Tensor, x: Tensor) -> bool:
    """Whether a scatter stage between ``x`` and ``output`` depends on ``x``."""
    from .functor import input_tensors, topo_order
    from .tensor import ScatterOp

    dep: dict[int, bool] = {}
    for t in topo_order([output]):
        dep[id(t)] = t is x or any(dep.get(id(d), False) for d in input_tensors(t))
        if dep[id(t)] and isinstance(t.op, ScatterOp):
            return True
    return False


def laplacian(output: Tensor, x: Tensor, method: str = "dof") -> Tensor:
    """The Laplacian of ``output`` over x's last axis (``diff_operator`` with ``A = I``).

    ``method="dof"`` (forward propagation of the operator) or ``"hessian"`` (the baseline);
    x's leading axes are a batch of independent samples.

    Example::

        >>> X = tc.placeholder((3, 2), name="X", dtype="float64")
        >>> u = tc.compute((3,), lambda b: X[b, 0] * X[b, 0] + X[b, 1] * X[b, 1] * X[b, 1],
        ...                name="u")
        >>> tc.evaluate(tc.laplacian(u, X), {X: np.array([[0.0, 0.0], [0.0, 1.0], [5.0, 2.0]])})[0]
        array([ 2.,  8., 14.])
    """
    x = _check_tensor(x, "laplacian: x")
    n = _last_extent(x, "laplacian")
    return diff_operator(output, x, np.eye(n), method=method)


def _gradient(output: Tensor, x: Tensor) -> Tensor:
    """``tc.gradient(output, [x])[0]``: the reverse-mode gradient the Hessians start from."""
    from .autodiff_api import gradient

    return gradient(output, [x])[0]


__all__ = ["diff_operator", "hessian", "jvp", "laplacian"]
