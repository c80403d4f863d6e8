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
from .intrinsics import INTRINSICS, Intrinsic
from .tensor import ComputeOp, ConstantOp, PlaceholderOp, Tensor

ExprLike = E.ExprLike
_unnamed_axes = itertools.count()


def var(name: str, dtype: str = "int64") -> E.Var:
    """A symbolic integer scalar, typically a size such as ``n``, bound at call time.

    Use it in shapes and index expressions; a kernel (and ``tc.evaluate``) binds it from the
    shape of an array passed for a placeholder whose extent it is, or from an explicit scalar
    argument when no shape determines it.  ``dtype`` is int64 or int32.

    Example::

        >>> n = tc.var("n")
        >>> A = tc.placeholder((n, 3), name="A")
        >>> A.shape
        (n, 3)
        >>> tc.evaluate(tc.compute((n,), lambda i: A[i, 0] * 2.0), {A: np.ones((4, 3))})[0]
        array([2., 2., 2., 2.], dtype=float32)
    """
    dtype = dtypes.check(dtype)
    if not dtypes.is_int(dtype):
        raise DeclarationError(f"tc.var {name!r}: symbolic sizes are integers, got {dtype}")
    if not isinstance(name, str) or not name.isidentifier():
        raise DeclarationError(f"tc.var: the name {name!r} is not an identifier")
    return E.Var(name, dtype)


def const(value: int | float | bool, dtype: str | None = None) -> E.Expr:
    """A scalar constant expression; ``dtype`` defaults to int64 for ints, float32 for floats.

    Python numbers mix with expressions directly (``A[i] * 2.0`` takes ``A``'s dtype); use
    ``tc.const`` for an explicit dtype.

    Example::

        >>> tc.const(0.5, "float64").dtype
        'float64'
        >>> int(tc.const(3) * 4)
        12
    """
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
    """An input tensor: its values are the array passed for it when a kernel is called.

    ``shape`` is a tuple of ints and integer expressions of ``tc.var`` sizes (``()`` for a
    scalar); ``dtype`` one of float16, float32, float64, int32, int64, bool.  Constant entries
    of ``.shape`` behave as ints (``int(A.shape[1])``, ``A.shape == (n, 3)``).

    Example::

        >>> n = tc.var("n")
        >>> A = tc.placeholder((n, 3), name="A", dtype="float64")
        >>> A
        Tensor('A', shape=(n, 3), dtype=float64, placeholder)
        >>> A.ndim, A.shape[1] == 3, int(A.shape[1])
        (2, True, 3)
    """
    name = name or "placeholder"
    return Tensor(name, _shape(shape, f"placeholder {name!r}"), dtypes.check(dtype),
                  PlaceholderOp())


def constant(data: Any, name: str | None = None, dtype: str | None = None) -> Tensor:
    """A tensor holding fixed NumPy data (copied); kernels receive it as a hidden input.

    Example::

        >>> T = tc.constant(np.arange(3.0), name="T")
        >>> tc.evaluate(tc.compute((3,), lambda i: T[i] * 2.0), {})[0]
        array([0., 2., 4.])
    """
    import numpy as np

    name = name or "constant"
    arr = np.asarray(data)
    dt = dtypes.check(dtype or arr.dtype.name)
    arr = np.array(arr, dtype=dtypes.to_numpy(dt), order="C", copy=True)
    arr.setflags(write=False)
    shape = tuple(E.Const(int(s), "int64") for s in arr.shape)
    return Tensor(name, shape, dt, ConstantOp(arr))


def reduce_axis(dom: ExprLike | tuple[ExprLike, ExprLike], name: str | None = None) -> E.IterVar:
    """A reduction axis over ``range(extent)`` or ``range(lo, hi)``, for tc.sum and friends.

    The bounds may be symbolic (``tc.reduce_axis(n)``, ``tc.reduce_axis((1, n - 1))``).

    Example::

        >>> A = tc.placeholder((4, 5), name="A")
        >>> k = tc.reduce_axis(5, name="k")
        >>> S = tc.compute((4,), lambda i: tc.sum(A[i, k], axis=k), name="S")
        >>> print(tc.show(S).splitlines()[-1])
        S[i] = sum(A[i, k], axis=[k:5])    : float32[4]
    """
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
    """A tensor defined element-wise: ``T[i, j, ...] = fcompute(i, j, ...)``.

    ``shape`` is a tuple of ints and integer expressions (``()`` gives a scalar tensor);
    ``fcompute`` takes one index per dimension (its parameters name the axes, or ``*i``) and
    returns an expression built from tensor reads ``A[i, k]``, Python numbers, operators,
    ``tc.sum``/``max``/``min``/``prod`` over ``tc.reduce_axis`` axes, ``tc.if_then_else``,
    the math functions and ``tc.cast``.  ``name`` names the tensor in printouts and errors;
    ``tag`` groups tensors for custom gradients (``tc.gradient(..., overrides={tag: fn})``).
    Nothing is evaluated here: the lambda runs once, on symbolic indices.  Exceptions the
    lambda raises propagate unchanged; an inconsistent declaration raises
    :class:`~tecomp.errors.DeclarationError` naming the tensor and axis.

    Example::

        >>> n = tc.var("n")
        >>> A = tc.placeholder((n, 8), name="A")
        >>> B = tc.placeholder((8, 4), name="B")
        >>> k = tc.reduce_axis(8, name="k")
        >>> C = tc.compute((n, 4), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
        >>> C.shape, C.dtype
        ((n, 4), 'float32')
        >>> a, b = np.ones((2, 8), np.float32), np.ones((8, 4), np.float32)
        >>> tc.evaluate(C, {A: a, B: b})[0]
        array([[8., 8., 8., 8.],
               [8., 8., 8., 8.]], dtype=float32)
    """
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
    """Sum of ``value`` over ``axis`` (one reduce axis or a list), where ``where`` holds.

    Use it inside a ``tc.compute`` lambda; ``where`` is a boolean condition on the axes (the
    points where it is false are skipped).  An empty domain sums to 0.

    Example::

        >>> A = tc.placeholder((3, 4), name="A")
        >>> r, c = tc.reduce_axis(3, name="r"), tc.reduce_axis(4, name="c")
        >>> total = tc.compute((), lambda: tc.sum(A[r, c], axis=[r, c]), name="total")
        >>> upper = tc.compute((), lambda: tc.sum(A[r, c], axis=[r, c], where=r < c))
        >>> [float(v) for v in tc.evaluate([total, upper], {A: np.ones((3, 4))})]
        [12.0, 6.0]
    """
    return _reduce("sum", value, axis, where)


def prod(value: ExprLike, axis: Any, where: ExprLike | None = None) -> E.Expr:
    """Product of ``value`` over ``axis`` (1 on an empty domain); see :func:`sum`.

    Example::

        >>> A = tc.placeholder((2, 3), name="A")
        >>> k = tc.reduce_axis(3, name="k")
        >>> P = tc.compute((2,), lambda i: tc.prod(A[i, k], axis=k), name="P")
        >>> tc.evaluate(P, {A: np.array([[1, 2, 3], [4, 5, 6]], np.float32)})[0]
        array([  6., 120.], dtype=float32)
    """
    return _reduce("prod", value, axis, where)


def max(value: ExprLike, axis: Any, where: ExprLike | None = None) -> E.Expr:  # noqa: A001
    """Maximum of ``value`` over ``axis`` (-inf, or the type's minimum, on an empty domain).

    Its gradient flows to the first maximal element; see :func:`sum` for ``axis``/``where``.

    Example::

        >>> A = tc.placeholder((2, 3), name="A")
        >>> k = tc.reduce_axis(3, name="k")
        >>> M = tc.compute((2,), lambda i: tc.max(A[i, k], axis=k), name="M")
        >>> tc.evaluate(M, {A: np.array([[1, 7, 3], [4, 5, 6]], np.float32)})[0]
        array([7., 6.], dtype=float32)
    """
    return _reduce("max", value, axis, where)


def min(value: ExprLike, axis: Any, where: ExprLike | None = None) -> E.Expr:  # noqa: A001
    """Minimum of ``value`` over ``axis`` (+inf, or the type's maximum, on an empty domain).

    Example::

        >>> A = tc.placeholder((2, 3), name="A")
        >>> k = tc.reduce_axis(3, name="k")
        >>> M = tc.compute((2,), lambda i: tc.min(A[i, k], axis=k), name="M")
        >>> tc.evaluate(M, {A: np.array([[1, 7, 3], [4, 5, 6]], np.float32)})[0]
        array([1., 4.], dtype=float32)
    """
    return _reduce("min", value, axis, where)


# ---------------------------------------------------------------------------- element-wise
def _elementwise(op: Intrinsic) -> Callable[..., E.Expr]:
    """``tc.<op.name>``: the public function of one entry of the op table."""
    sig = inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                               annotation="ExprLike") for p in op.params],
                            return_annotation="Expr")

    def function(*args: ExprLike, **kwargs: ExprLike) -> E.Expr:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as err:
            raise DeclarationError(f"tc.{op.name}: {err}") from None
        return E.call(op.name, *bound.args)

    function.__name__ = function.__qualname__ = op.name
    function.__doc__ = op.doc
    function.__signature__ = sig  # type: ignore[attr-defined]
    return function


#: ``tc.exp``, ``tc.log``, ...: one function per entry of the op table, defined in this
#: module's namespace (and re-exported by ``tecomp``)
ELEMENTWISE: dict[str, Callable[..., E.Expr]] = {
    name: _elementwise(op) for name, op in INTRINSICS.items()}
globals().update(ELEMENTWISE)


def maximum(a: ExprLike, b: ExprLike) -> E.Expr:
    return E.maximum(a, b)


def minimum(a: ExprLike, b: ExprLike) -> E.Expr:
    return E.minimum(a, b)


def if_then_else(cond: ExprLike, a: ExprLike, b: ExprLike) -> E.Expr:
    """``a`` where the boolean ``cond`` holds, else ``b``; only the chosen arm is evaluated.

    Use it instead of Python's ``if`` (which cannot see a symbolic condition), e.g. for
    padding: an arm that would read out of bounds is never evaluated.

    Example::

        >>> X = tc.placeholder((4,), name="X")
        >>> R = tc.compute((4,), lambda i: tc.if_then_else(X[i] > 0, X[i], 0.0), name="relu")
        >>> tc.evaluate(R, {X: np.array([-1, 2, -3, 4], np.float32)})[0]
        array([0., 2., 0., 4.], dtype=float32)
    """
    E.reject_python_bool(cond, "tc.if_then_else")
    return E.select(cond, a, b)


def cast(x: ExprLike, dtype: str) -> E.Expr:
    """``x`` converted to ``dtype`` (floats to ints truncate toward zero, as in C).

    Integer index expressions and float values do not mix implicitly: cast an index to use it
    as a value, or an integer tensor's element to use it as an index.

    Example::

        >>> X = tc.placeholder((3,), name="X")
        >>> Y = tc.compute((3,), lambda i: X[i] * tc.cast(i, "float32"), name="Y")
        >>> tc.evaluate(Y, {X: np.ones(3, np.float32)})[0]
        array([0., 1., 2.], dtype=float32)
    """
    return E.cast(x, dtype)


def eq(a: ExprLike, b: ExprLike) -> E.Expr:
    """The condition ``a == b`` (Python's ``==`` on expressions compares structure instead).

    Example::

        >>> X = tc.placeholder((3, 3), name="X")
        >>> D = tc.compute((3, 3), lambda i, j: tc.if_then_else(tc.eq(i, j), X[i, j], 0.0))
        >>> float(tc.evaluate(D, {X: np.ones((3, 3), np.float32)})[0].trace())
        3.0
    """
    return E.compare(E.EQ, a, b)


def ne(a: ExprLike, b: ExprLike) -> E.Expr:
    """The condition ``a != b``.

    Example::

        >>> X = tc.placeholder((3, 3), name="X")
        >>> O = tc.compute((3, 3), lambda i, j: tc.if_then_else(tc.ne(i, j), X[i, j], 0.0))
        >>> float(tc.evaluate(O, {X: np.ones((3, 3), np.float32)})[0].sum())
        6.0
    """
    return E.compare(E.NE, a, b)


def all(*conds: ExprLike) -> E.Expr:  # noqa: A001
    """The conjunction of the conditions (True when none is given); also ``a & b``.

    Example::

        >>> X = tc.placeholder((5,), name="X")
        >>> M = tc.compute((5,), lambda i: tc.if_then_else(tc.all(i >= 1, i < 4), X[i], 0.0))
        >>> tc.evaluate(M, {X: np.ones(5, np.float32)})[0]
        array([0., 1., 1., 1., 0.], dtype=float32)
    """
    conds = _flatten(conds)
    out: E.Expr = E.Const(True, "bool")
    for n, c in enumerate(conds):
        E.reject_python_bool(c, f"tc.all, condition {n}")
        out = E.logical_and(out, c)
    return out


def any(*conds: ExprLike) -> E.Expr:  # noqa: A001
    """The disjunction of the conditions (False when none is given); also ``a | b``.

    Example::

        >>> X = tc.placeholder((5,), name="X")
        >>> E = tc.compute((5,), lambda i: tc.if_then_else(
        ...     tc.any(tc.eq(i, 0), tc.eq(i, 4)), X[i], 0.0))
        >>> tc.evaluate(E, {X: np.ones(5, np.float32)})[0]
        array([1., 0., 0., 0., 1.], dtype=float32)
    """
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
