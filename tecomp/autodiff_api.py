"""Public differentiation API: ``tc.gradient`` and ``tc.jacobian`` (reverse mode).

Both validate their arguments, build the naive derivative with the reverse-mode pass
(:func:`tecomp.passes.autodiff.differentiate`: one adjoint stage per tensor, Kronecker
``Delta`` nodes for every read) and, unless ``optimize=False``, hand the result to zero
elimination; both through the pipeline (:func:`tecomp.pipeline.differentiate`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from . import dtypes
from . import expr as E
from .errors import DifferentiationError
from .tensor import ComputeOp, Tensor

Override = Callable[[Tensor, list[Tensor], Tensor], Sequence[Any]]


def gradient(output: Tensor, inputs: Tensor | Sequence[Tensor], head: Tensor | None = None,
             *, optimize: bool = True,
             overrides: Mapping[Tensor | str, Override] | None = None,
             checkpoint: int | None = None) -> list[Tensor]:
    """The adjoints ``head · ∂output/∂input`` of each input (reverse mode).

    ``head`` is a float tensor of ``output``'s shape and dtype (None: ones, i.e. the gradient
    of ``sum(output)``).  Returns one tensor per input, with the input's shape and dtype;
    inputs may be placeholders or intermediate compute tensors, and an input the output does
    not depend on gets a zero tensor.

    ``optimize=True`` runs zero elimination and simplification on the result.  Without them
    (``optimize=False``) the gradients are correct but slow: each adjoint is a dense sum over
    the consumer's whole domain with ``Delta`` nodes inside, O(|X|·|Y|·|K|) to evaluate; the
    results record that choice, and ``tc.lower``, ``tc.cost`` and ``tc.build`` keep them as
    written (:mod:`tecomp.pipeline`).

    ``overrides`` replaces the derivative of chosen tensors: it maps a tensor, or a tag string
    (every compute declared with ``tag=``), to ``fn(out, inputs, head) -> list``.  ``inputs``
    are the tensors ``out`` reads directly (first-read order), ``head`` is the adjoint of
    ``out`` (a tensor of ``out``'s shape) and ``fn`` returns, for each input, the tensor
    contributed to that input's adjoint (same shape as the input) or None.  A tensor key
    takes precedence over a tag.  The contributions of ``out``'s other consumers and the rest
    of the graph are differentiated as usual.

    ``checkpoint=k`` (a graph with one ``tc.scan``) lowers the gradient with checkpointing:
    the forward pass stores every k-th state, the reverse pass recomputes each segment of k
    steps, so the scan's values take O(T/k + k) rows instead of T; the results are the same.
    The class of programs it lowers, and the error for the others, are in
    docs/recurrences.md ("Checkpointing").  The LLVM target only (CUDA raises).

    Raises :class:`~tecomp.errors.DifferentiationError` for a non-float output, an integer or
    non-tensor input, a head of the wrong shape or dtype, or a ``checkpoint`` that is not a
    positive int or finds no scan.

    Example::

        >>> X = tc.placeholder((3,), name="X", dtype="float64")
        >>> Y = tc.compute((3,), lambda i: X[i] * X[i], name="Y")
        >>> (dX,) = tc.gradient(Y, [X])                  # d sum(Y) / dX = 2 X
        >>> tc.evaluate(dX, {X: np.array([1.0, 2.0, 3.0])})[0]
        array([2., 4., 6.])
        >>> H = tc.placeholder((3,), name="H", dtype="float64")
        >>> (dXh,) = tc.gradient(Y, [X], head=H)         # d sum(H * Y) / dX
        >>> tc.evaluate(dXh, {X: np.ones(3), H: np.array([1.0, 0.0, -1.0])})[0]
        array([ 2.,  0., -2.])
    """
    _check_output(output, "gradient")
    ins = _check_inputs(inputs, output, "gradient")
    if head is None:
        head = default_head(output)
    else:
        _check_head(head, output)
    _check_overrides(overrides)
    _check_checkpoint(checkpoint, output)
    from .pipeline import differentiate

    grads = differentiate(output, ins, head, overrides=overrides, optimize=optimize,
                          check=check_forward_bounds)
    if checkpoint is not None:
        _mark_checkpoint(grads, checkpoint)
    return grads


def jacobian(output: Tensor, input: Tensor, *, optimize: bool = True) -> Tensor:
    """``J[i..., j...] = ∂output[i...] / ∂input[j...]``, of shape ``output.shape + input.shape``.

    Computed in reverse mode with the identity head ``δ(p, i)`` (one adjoint per output
    element, all at once); a graph with a scan (``tc.scan``) in forward mode instead, with
    the identity seed over ``input`` (one tangent per input element, through the tangent
    scan).  ``optimize`` as in :func:`gradient`.

    Example::

        >>> X = tc.placeholder((2,), name="X", dtype="float64")
        >>> Y = tc.compute((2,), lambda i: X[i] * X[1 - i], name="Y")   # (x0 x1, x1 x0)
        >>> J = tc.jacobian(Y, X)
        >>> J.shape
        (2, 2)
        >>> tc.evaluate(J, {X: np.array([2.0, 3.0])})[0]
        array([[3., 2.],
               [3., 2.]])
    """
    _check_output(output, "jacobian")
    (x,) = _check_inputs([input], output, "jacobian")
    from .pipeline import differentiate, forward_jacobian

    if _has_scan(output):
        check_forward_bounds(output)
        return forward_jacobian(output, x, optimize=optimize)
    (jac,) = differentiate(output, [x], _identity(output), optimize=optimize,
                           check=check_forward_bounds)
    return jac


# --------------------------------------------------------------------------- helpers
def check_forward_bounds(output: Tensor) -> None:
    """Refuse to differentiate a program whose forward ``tc.build`` refuses: an affine read out
    of range wherever it runs raises :class:`~tecomp.errors.LoweringError`, the same error
    as the forward's build.  Without this the adjoint of such a read (a scatter written as a
    Kronecker delta) would silently drop the out-of-range part.  A forward that cannot be
    lowered for another reason is left to its own build to report."""
    from .diagnostics import pass_log
    from .errors import TecompError
    from .lowering_api import default_inputs, lower
    from .proof_cache import bounds_checked

    with pass_log(costs=False):  # the forward's passes stay out of the caller's pass log
        try:
            func = lower(output, default_inputs([output]), optimize=False).func
        except TecompError:
            return
        bounds_checked(func, check_bounds=False)



def _check_checkpoint(k: Any, output: Tensor) -> None:
    if k is None:
        return
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise DifferentiationError(
            f"tc.gradient: checkpoint must be a positive int (steps per segment), got {k!r}")
    if not _has_scan(output):
        raise DifferentiationError(
            f"tc.gradient: checkpoint={k} needs a tc.scan below {output.name!r}; the graph "
            "has none")


def _mark_checkpoint(grads: list[Tensor], k: int) -> None:
    """Record ``k`` on the adjoint scans of ``grads`` (their state placeholders), which the
    lowering reads (:mod:`tecomp.passes.lower_checkpoint`)."""
    from .functor import topo_order
    from .scan import CHECKPOINT_ATTR
    from .scan_op import ScanOp

    for t in topo_order(list(grads)):
        if isinstance(t.op, ScanOp) and t.op.scan.reverse:
            for s in t.op.scan.state:
                s.attrs[CHECKPOINT_ATTR] = k


def _has_scan(output: Tensor) -> bool:
    from .functor import topo_order
    from .scan_op import ScanOp

    return any(isinstance(t.op, ScanOp) for t in topo_order([output]))


def _check_output(output: Any, who: str) -> None:
    if not isinstance(output, Tensor):
        raise DifferentiationError(f"tc.{who}: the output {output!r} is not a tensor")
    if not dtypes.is_float(output.dtype):
        raise DifferentiationError(
            f"tc.{who}: the output tensor {output.name!r} has dtype {output.dtype}; only float "
            "outputs can be differentiated")


def _check_inputs(inputs: Any, output: Tensor, who: str) -> list[Tensor]:
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    try:
        ins = list(inputs)
    except TypeError:
        raise DifferentiationError(
            f"tc.{who}: inputs must be a tensor or a list of tensors, got {inputs!r}") from None
    for n, t in enumerate(ins):
        if not isinstance(t, Tensor):
            raise DifferentiationError(
                f"tc.{who}: input {n} is {t!r} of type {type(t).__name__}, not a tensor "
                f"(differentiating {output.name!r})")
        if not dtypes.is_float(t.dtype):
            raise DifferentiationError(
                f"tc.{who}: cannot differentiate {output.name!r} with respect to the "
                f"{t.dtype} tensor {t.name!r}; derivatives exist only for float tensors")
    return ins


def _same_extent(a: E.Expr, b: E.Expr) -> bool:
    if isinstance(a, E.Const) and isinstance(b, E.Const):
        return a.value == b.value
    return a == b


def _fmt(t: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def _check_head(head: Any, output: Tensor) -> None:
    if not isinstance(head, Tensor):
        raise DifferentiationError(
            f"tc.gradient: head {head!r} for output {output.name!r} is not a tensor")
    if head.ndim != output.ndim or not all(
            _same_extent(a, b) for a, b in zip(head.shape, output.shape)):
        raise DifferentiationError(
            f"tc.gradient: head {head.name!r} has shape {_fmt(head)} but output "
            f"{output.name!r} has shape {_fmt(output)}")
    if head.dtype != output.dtype:
        raise DifferentiationError(
            f"tc.gradient: head {head.name!r} has dtype {head.dtype} but output "
            f"{output.name!r} has dtype {output.dtype}")


def _check_overrides(overrides: Any) -> None:
    if overrides is None:
        return
    if not isinstance(overrides, Mapping):
        raise DifferentiationError(
            f"tc.gradient: overrides must map tensors or tags to functions, got {overrides!r}")
    for key, fn in overrides.items():
        if not isinstance(key, (Tensor, str)):
            raise DifferentiationError(
                f"tc.gradient: override key {key!r} is neither a tensor nor a tag string")
        if not callable(fn):
            what = key.name if isinstance(key, Tensor) else key
            raise DifferentiationError(
                f"tc.gradient: the override for {what!r} is {fn!r}, not a function "
                "fn(out, inputs, head) -> list of tensors")


def _axes(prefix: str, shape: Sequence[E.Expr], start: int = 0) -> tuple[E.IterVar, ...]:
    return tuple(E.IterVar(E.Var(f"{prefix}{m + start}", "int64"), E.Const(0, "int64"), s,
                           "data") for m, s in enumerate(shape))


def default_head(output: Tensor) -> Tensor:
    """The head of ``tc.gradient(output, inputs)``: ones of ``output``'s shape and dtype."""
    axes = _axes("i", output.shape)
    return Tensor(f"{output.name}_head", output.shape, output.dtype,
                  ComputeOp(axes, E.Const(1.0, output.dtype), None))


def _identity(output: Tensor) -> Tensor:
    """The Jacobian head ``I[p, i] = Π_m δ(p_m, i_m)`` of shape ``output.shape * 2``."""
    p = _axes("p", output.shape)
    i = _axes("i", output.shape)
    body: E.Expr = E.Const(1.0, output.dtype)
    for a, b in zip(p, i):
        body = E.mul(body, E.delta(a.var, b.var, output.dtype))
    return Tensor(f"{output.name}_identity", output.shape * 2, output.dtype,
                  ComputeOp(p + i, body, None))
