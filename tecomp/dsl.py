"""The declaration language: ``tc.var``, ``tc.placeholder``, ``tc.compute``, reductions, math.

These functions only build IR; they never evaluate anything.  Errors a user can make while
declaring raise :class:`~tecomp.errors.DeclarationError` naming the tensor or axis at fault.
"""

from __future__ import annotations

import builtins
import inspect
import itertools
from typing import Any, Callable, Iterable, Sequence

from . import dtypes
from . import expr as E
from .errors import DeclarationError
from .functor import free_vars, make_reduce
from .tensor import ComputeOp, ConstantOp, PlaceholderOp, Tensor

ExprLike = E.ExprLike
_unnamed_axes = itertools.count()


def var(name: str, dtype: str = "int64") -> E.Var:
    """A symbolic scalar (a size such as ``n``), bound at call time."""
    dtype = dtypes.check(dtype)
    if not dtypes.is_int(dtype):
        raise DeclarationError(f"tc.var {name!r}: symbolic sizes are integers, got {dtype}")
    if not isinstance(name, str) or not name.isidentifier():
        raise DeclarationError(f"tc.var: the name {name!r} is not an identifier")
    return E.Var(name, dtype)


def const(value: int | float | bool, dtype: str | None = None) -> E.Expr:
    """A constant; the dtype defaults to int64 for ints, float32 for floats."""
    if dtype is None:
        return E.as_expr(value)
    return E.cast(E.as_expr(value), dtypes.check(dtype))


def _extent(x: ExprLike, what: str) -> E.Expr:
    try:
        e = E.as_expr(x)
    except DeclarationError as err:
        raise DeclarationError(f"{what}: {err}") from None
    if not dtypes.is_int(e.dtype):
        raise DeclarationError(f"{what}: extent {e} has dtype {e.dtype}; extents are integers")
    if isinstance(e, E.Const) and e.value < 0:
        raise DeclarationError(f"{what}: negative extent {e.value}")
    return E.cast(e, "int64")


def _shape(shape: Any, who: str) -> tuple[E.Expr, ...]:
    if isinstance(shape, (int, E.Expr, E.IterVar)):
        shape = (shape,)
    try:
        items = tuple(shape)
    except TypeError:
        raise DeclarationError(f"{who}: shape {shape!r} is not a sequence") from None
    return tuple(_extent(s, f"{who}, axis {d}") for d, s in enumerate(items))


def placeholder(shape: Any, name: str | None = None, dtype: str = "float32") -> Tensor:
    """An input tensor of the given shape (ints or symbolic ``tc.var`` sizes)."""
    name = name or "placeholder"
    return Tensor(name, _shape(shape, f"placeholder {name!r}"), dtypes.check(dtype),
                  PlaceholderOp())


def constant(data: Any, name: str | None = None, dtype: str | None = None) -> Tensor:
    """A tensor holding fixed NumPy data (copied); kernels receive it as a hidden input."""
    import numpy as np

    name = name or "constant"
    arr = np.asarray(data)
    dt = dtypes.check(dtype or arr.dtype.name)
    arr = np.array(arr, dtype=dtypes.to_numpy(dt), order="C", copy=True)
    arr.setflags(write=False)
    shape = tuple(E.Const(int(s), "int64") for s in arr.shape)
    return Tensor(name, shape, dt, ConstantOp(arr))


def reduce_axis(dom: ExprLike | tuple[ExprLike, ExprLike], name: str | None = None) -> E.IterVar:
    """A reduction axis over ``range(extent)`` or ``range(lo, hi)``."""
    name = name or f"r{next(_unnamed_axes)}"
    if isinstance(dom, (tuple, list)):
        if len(dom) != 2:
            raise DeclarationError(f"reduce_axis {name!r}: expected (lo, hi), got {dom!r}")
        lo = _extent(dom[0], f"reduce_axis {name!r}") if not (
            isinstance(dom[0], int) and dom[0] < 0) else E.Const(int(dom[0]), "int64")
        hi = E.cast(E.as_expr(dom[1]), "int64")
        ext = E.sub(hi, lo)
        if isinstance(ext, E.Const) and ext.value < 0:
            raise DeclarationError(f"reduce_axis {name!r}: empty range [{lo}, {hi})")
    else:
        lo, ext = E.Const(0, "int64"), _extent(dom, f"reduce_axis {name!r}")
    return E.IterVar(E.Var(name, "int64"), lo, ext, "reduce")


def compute(shape: Any, fcompute: Callable[..., ExprLike], name: str | None = None,
            tag: str | None = None) -> Tensor:
    """``T[i, j, ...] = fcompute(i, j, ...)``; axes are named after the lambda's parameters."""
    name = name or "compute"
    who = f"compute {name!r}"
    shp = _shape(shape, who)
    params = _param_names(fcompute, len(shp), who)
    taken = {v.name for s in shp for v in free_vars(s)}
    axes = []
    for p, ext in zip(params, shp):
        n = p
        while n in taken:
            n = n + "_"
        taken.add(n)
        axes.append(E.IterVar(E.Var(n, "int64"), E.Const(0, "int64"), ext, "data"))
    try:
        body = fcompute(*axes)
    except DeclarationError as err:  # name the tensor being declared (once)
        if str(err).startswith(who):
            raise
        raise type(err)(f"{who}: {err}") from None
    try:
        body = E.as_expr(body)
    except DeclarationError:
        raise DeclarationError(
            f"{who}: the lambda returned {body!r}, not an expression") from None
    if isinstance(body, E.Zero):
        body = E.Const(0.0 if dtypes.is_float(body.dtype) else 0, body.dtype)
    return Tensor(name, shp, body.dtype, ComputeOp(tuple(axes), body, tag))


def _param_names(f: Callable[..., Any], ndim: int, who: str) -> list[str]:
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)]
    ps = list(sig.parameters.values())
    if builtins.any(p.kind == p.VAR_POSITIONAL for p in ps):
        fixed = [p.name for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return (fixed + [f"i{d}" for d in range(len(fixed), ndim)])[:ndim]
    required = [p for p in ps if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not (len(required) <= ndim <= len(positional)):
        raise DeclarationError(
            f"{who}: the shape has {ndim} dimension(s) but the lambda takes "
            f"{len(required)} index argument(s)")
    return [p.name for p in positional[:ndim]]


# ---------------------------------------------------------------------------- reductions
def _axes(axis: Any, who: str) -> tuple[E.IterVar, ...]:
    if isinstance(axis, E.IterVar):
        axis = [axis]
    try:
        axes = tuple(axis)
    except TypeError:
        raise DeclarationError(f"{who}: axis must be a reduce_axis or a list of them") from None
    if not axes:
        raise DeclarationError(f"{who}: no reduction axis given")
    for a in axes:
        if not isinstance(a, E.IterVar):
            raise DeclarationError(f"{who}: {a!r} is not an axis made by tc.reduce_axis")
        if a.kind != "reduce":
            # summing over an output axis would give every output the total (a wrong answer)
            raise DeclarationError(
                f"{who}: {a.var.name!r} is an axis of the tensor being computed, not a "
                "reduction axis; make one with tc.reduce_axis")
    names = [a.var.name for a in axes]
    if len(set(names)) != len(names):
        raise DeclarationError(f"{who}: the axis names {names} repeat")
    return axes


def _reduce(combiner: str, value: ExprLike, axis: Any, where: ExprLike | None) -> E.Expr:
    who = f"tc.{combiner}"
    value = E.as_expr(value)
    if dtypes.is_bool(value.dtype):
        raise DeclarationError(f"{who} of the boolean {value}; cast it first")
    w = None
    if where is not None:
        E.reject_python_bool(where, f"{who}, where=")
        w = E.as_expr(where)
        if not dtypes.is_bool(w.dtype):
            raise DeclarationError(f"{who}: where={w} is not a boolean condition")
    axes = _axes(axis, who)
    if isinstance(value, E.Zero) and combiner == "sum":
        return value
    return make_reduce(combiner, value, axes, w, value.dtype)


def sum(value: ExprLike, axis: Any, where: ExprLike | None = None) -> E.Expr:  # noqa: A001
    """Sum of ``value`` over ``axis`` (one reduce axis or a list), optionally where ``where``."""
    return _reduce("sum", value, axis, where)


def prod(value: ExprLike, axis: Any, where: ExprLike | None = None) -> E.Expr:
    """Product over ``axis``."""
    return _reduce("prod", value, axis, where)


def max(value: ExprLike, axis: Any, where: ExprLike | None = None) -> E.Expr:  # noqa: A001
    """Maximum over ``axis`` (-inf, or the type's minimum, on an empty domain)."""
    return _reduce("max", value, axis, where)


def min(value: ExprLike, axis: Any, where: ExprLike | None = None) -> E.Expr:  # noqa: A001
    """Minimum over ``axis`` (+inf, or the type's maximum, on an empty domain)."""
    return _reduce("min", value, axis, where)


# ---------------------------------------------------------------------------- element-wise
def exp(x: ExprLike) -> E.Expr:
    return E.call("exp", x)


def log(x: ExprLike) -> E.Expr:
    return E.call("log", x)


def sqrt(x: ExprLike) -> E.Expr:
    return E.call("sqrt", x)


def tanh(x: ExprLike) -> E.Expr:
    return E.call("tanh", x)


def sigmoid(x: ExprLike) -> E.Expr:
    return E.call("sigmoid", x)


def sin(x: ExprLike) -> E.Expr:
    return E.call("sin", x)


def cos(x: ExprLike) -> E.Expr:
    return E.call("cos", x)


def abs(x: ExprLike) -> E.Expr:  # noqa: A001
    return E.call("abs", x)


def erf(x: ExprLike) -> E.Expr:
    return E.call("erf", x)


def floor(x: ExprLike) -> E.Expr:
    return E.call("floor", x)


def ceil(x: ExprLike) -> E.Expr:
    return E.call("ceil", x)


def pow(x: ExprLike, y: ExprLike) -> E.Expr:  # noqa: A001
    return E.power(x, y)


def maximum(a: ExprLike, b: ExprLike) -> E.Expr:
    return E.maximum(a, b)


def minimum(a: ExprLike, b: ExprLike) -> E.Expr:
    return E.minimum(a, b)


def if_then_else(cond: ExprLike, a: ExprLike, b: ExprLike) -> E.Expr:
    """``a`` where ``cond`` holds, else ``b``; only the chosen arm is evaluated."""
    E.reject_python_bool(cond, "tc.if_then_else")
    return E.select(cond, a, b)


def cast(x: ExprLike, dtype: str) -> E.Expr:
    return E.cast(x, dtype)


def eq(a: ExprLike, b: ExprLike) -> E.Expr:
    """The condition ``a == b`` (Python's ``==`` on expressions compares structure)."""
    return E.compare(E.EQ, a, b)


def ne(a: ExprLike, b: ExprLike) -> E.Expr:
    return E.compare(E.NE, a, b)


def all(*conds: ExprLike) -> E.Expr:  # noqa: A001
    """The conjunction of the conditions (True when none is given)."""
    conds = _flatten(conds)
    out: E.Expr = E.Const(True, "bool")
    for n, c in enumerate(conds):
        E.reject_python_bool(c, f"tc.all, condition {n}")
        out = E.logical_and(out, c)
    return out


def any(*conds: ExprLike) -> E.Expr:  # noqa: A001
    """The disjunction of the conditions (False when none is given)."""
    conds = _flatten(conds)
    out: E.Expr = E.Const(False, "bool")
    for n, c in enumerate(conds):
        E.reject_python_bool(c, f"tc.any, condition {n}")
        out = E.logical_or(out, c)
    return out


def _flatten(conds: Sequence[Any]) -> list[Any]:
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        return list(conds[0])
    return list(conds)


def axis_names(axes: Iterable[E.IterVar]) -> list[str]:
    return [a.var.name for a in axes]


_ = builtins  # the module shadows sum/max/min/abs/pow/all/any on purpose
