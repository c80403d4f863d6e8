"""Smart constructors for expression nodes: they fold constants and symbolic zeros and
nothing else (simplification is a pass).  Python operators on expressions call them; they are
re-exported by :mod:`tecomp.expr`, so ``tecomp.expr.add`` and friends keep working.
"""

from __future__ import annotations

from typing import Any

from . import dtypes
from .errors import DeclarationError
from .expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Call,
    Cast,
    Const,
    Delta,
    Div,
    Expr,
    ExprLike,
    FloorDiv,
    IterVar,
    Max,
    Min,
    Mod,
    Mul,
    Neg,
    Not,
    Or,
    Select,
    Sub,
    Zero,
)
from .intrinsics import lookup


def as_expr(x: ExprLike, like: str | None = None) -> Expr:
    """Convert a Python number, axis or expression to an :class:`Expr`.

    Python numbers take the dtype ``like`` when given (weak typing, as in JAX), else int64 /
    float32 / bool.
    """
    if isinstance(x, Expr):
        return x
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, bool):
        return Const(bool(x), "bool")
    if isinstance(x, int):
        if like is not None and dtypes.is_float(like):
            return Const(float(x), like)
        if like is not None and dtypes.is_int(like):
            return Const(int(x), like)
        return Const(int(x), "int64")
    if isinstance(x, float):
        if like is not None and dtypes.is_float(like):
            return Const(float(x), like)
        if like is not None and dtypes.is_int(like):
            raise DeclarationError(
                f"cannot mix the float constant {x!r} with an integer expression; "
                "use tc.cast to convert the integer expression to a float dtype")
        return Const(float(x), "float32")
    if hasattr(x, "dtype") and hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
        return as_expr(x.item(), like)
    raise DeclarationError(f"cannot use {x!r} of type {type(x).__name__} as an expression")


def _pair(a: ExprLike, b: ExprLike) -> tuple[Expr, Expr]:
    if isinstance(a, (Expr, IterVar)):
        a = as_expr(a)
        b = as_expr(b, a.dtype)
    else:
        b = as_expr(b)
        a = as_expr(a, b.dtype)
    return a, b


def _arith_dtype(a: Expr, b: Expr, op: str) -> str:
    if a.dtype == b.dtype and not dtypes.is_bool(a.dtype):
        return a.dtype
    if dtypes.is_bool(a.dtype) or dtypes.is_bool(b.dtype):
        raise DeclarationError(
            f"arithmetic '{op}' on a boolean in ({a}) {op} ({b}); use tc.cast(x, dtype) first")
    return dtypes.promote(a.dtype, b.dtype, f"({a}) {op} ({b})")


def _fold(op: str, x: Any, y: Any) -> Any:
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        return x / y
    if op == "//":
        return x // y
    if op == "%":
        return x % y
    if op == "min":
        return x if x <= y else y
    return x if x >= y else y


def _const(value: Any, dtype: str) -> Const:
    if dtypes.is_float(dtype):
        return Const(float(value), dtype)
    if dtypes.is_bool(dtype):
        return Const(bool(value), dtype)
    return Const(int(value), dtype)


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Zero) or (isinstance(e, Const) and e.value == 0 and not
                                   dtypes.is_bool(e.dtype))


def _is_one(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 1 and not dtypes.is_bool(e.dtype)


def add(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "+")
    if isinstance(a, Const) and isinstance(b, Const):
        return _const(a.value + b.value, dt)
    if isinstance(a, Zero) or (_is_zero(a) and a.dtype == dt):
        return b if b.dtype == dt else Cast(b, dt)
    if isinstance(b, Zero) or (_is_zero(b) and b.dtype == dt):
        return a if a.dtype == dt else Cast(a, dt)
    return Add(a, b, dt)


def sub(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "-")
    if isinstance(a, Const) and isinstance(b, Const):
        return _const(a.value - b.value, dt)
    if isinstance(b, Zero) or (_is_zero(b) and b.dtype == dt):
        return a if a.dtype == dt else Cast(a, dt)
    if isinstance(a, Zero):
        return neg(b if b.dtype == dt else Cast(b, dt))
    return Sub(a, b, dt)


def mul(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "*")
    if isinstance(a, Const) and isinstance(b, Const):
        return _const(a.value * b.value, dt)
    if isinstance(a, Zero) or isinstance(b, Zero):
        return Zero(dt)
    if _is_one(a) and b.dtype == dt:
        return b
    if _is_one(b) and a.dtype == dt:
        return a
    return Mul(a, b, dt)


def div(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "/")
    if not dtypes.is_float(dt):
        raise DeclarationError(
            f"true division ({a}) / ({b}) of integers; use // for floor division or "
            "tc.cast to a float dtype")
    if isinstance(a, Zero):
        return Zero(dt)
    if isinstance(a, Const) and isinstance(b, Const) and b.value != 0:
        return _const(a.value / b.value, dt)
    if _is_one(b) and a.dtype == dt:
        return a
    return Div(a, b, dt)


def _check_divisor(a: Expr, b: Expr, op: str, dt: str) -> None:
    """An integer division by the constant 0 is an error where it is written (the backends
    would otherwise have to invent a value; docs/robustness.md)."""
    zero = isinstance(b, Zero) or (isinstance(b, Const) and b.value == 0)
    if zero and dtypes.is_int(dt):
        raise DeclarationError(f"integer division by zero in ({a}) {op} ({b})")


def floordiv(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "//")
    _check_divisor(a, b, "//", dt)
    if isinstance(a, Const) and isinstance(b, Const) and b.value != 0:
        return _const(a.value // b.value, dt)
    if _is_one(b) and a.dtype == dt:
        return a
    return FloorDiv(a, b, dt)


def mod(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "%")
    _check_divisor(a, b, "%", dt)
    if isinstance(a, Const) and isinstance(b, Const) and b.value != 0:
        return _const(a.value % b.value, dt)
    if _is_one(b) and dtypes.is_int(dt):
        return Const(0, dt)
    return Mod(a, b, dt)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "min")
    if isinstance(a, Const) and isinstance(b, Const):
        return _const(_fold("min", a.value, b.value), dt)
    return Min(a, b, dt)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "max")
    if isinstance(a, Const) and isinstance(b, Const):
        return _const(_fold("max", a.value, b.value), dt)
    return Max(a, b, dt)


def neg(a: ExprLike) -> Expr:
    a = as_expr(a)
    if dtypes.is_bool(a.dtype):
        raise DeclarationError(f"negation of the boolean {a}; use ~ for logical not")
    if isinstance(a, Const):
        return _const(-a.value, a.dtype)
    if isinstance(a, Zero):
        return a
    if isinstance(a, Neg):
        return a.a
    return Neg(a, a.dtype)


def power(a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    dt = _arith_dtype(a, b, "**")
    if not dtypes.is_float(dt):
        raise DeclarationError(f"power ({a}) ** ({b}) of integers; cast to a float dtype")
    return call("pow", a, b)


def compare(cls: type, a: ExprLike, b: ExprLike) -> Expr:
    a, b = _pair(a, b)
    if dtypes.is_bool(a.dtype) != dtypes.is_bool(b.dtype):
        raise DeclarationError(f"cannot compare {a.dtype} with {b.dtype} in ({a}) vs ({b})")
    if a.dtype != b.dtype and not dtypes.is_bool(a.dtype):
        dtypes.promote(a.dtype, b.dtype, f"comparison of ({a}) and ({b})")
    if isinstance(a, Const) and isinstance(b, Const):
        x, y = a.value, b.value
        r = {LT: x < y, LE: x <= y, GT: x > y, GE: x >= y, EQ: x == y, NE: x != y}[cls]
        return Const(bool(r), "bool")
    return cls(a, b)


def _check_bool(e: Expr, op: str) -> None:
    if not dtypes.is_bool(e.dtype):
        raise DeclarationError(
            f"'{op}' needs boolean operands, got {e.dtype} in {e}; compare first (e.g. x > 0)")


def reject_python_bool(x: Any, where: str) -> None:
    """Raise when a condition is a Python (or NumPy) bool rather than an expression.

    ``a == b`` on expressions is Python's structural equality and gives a bool; letting it
    through would fold the condition to a constant without a word (``tc.eq`` is the
    comparison).  ``tc.const(True)`` is the way to write a constant condition."""
    numpy_bool = getattr(getattr(x, "dtype", None), "kind", "") == "b" and \
        getattr(x, "ndim", 1) == 0
    if isinstance(x, bool) or numpy_bool:
        raise DeclarationError(
            f"{where}: the condition is the Python value {bool(x)}, not an expression; "
            "'==' and '!=' on expressions compare their structure, use tc.eq(a, b) / "
            "tc.ne(a, b) (or tc.const(True) for a constant condition)")


def logical_and(a: ExprLike, b: ExprLike) -> Expr:
    a, b = as_expr(a), as_expr(b)
    _check_bool(a, "&")
    _check_bool(b, "&")
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const):
            return y if x.value else Const(False, "bool")
    return And(a, b)


def logical_or(a: ExprLike, b: ExprLike) -> Expr:
    a, b = as_expr(a), as_expr(b)
    _check_bool(a, "|")
    _check_bool(b, "|")
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const):
            return Const(True, "bool") if x.value else y
    return Or(a, b)


def logical_not(a: ExprLike) -> Expr:
    a = as_expr(a)
    _check_bool(a, "~")
    if isinstance(a, Const):
        return Const(not a.value, "bool")
    if isinstance(a, Not):
        return a.a
    return Not(a)


def select(cond: ExprLike, t: ExprLike, f: ExprLike) -> Expr:
    cond = as_expr(cond)
    _check_bool(cond, "if_then_else")
    t, f = _pair(t, f)
    if dtypes.is_bool(t.dtype) and dtypes.is_bool(f.dtype):
        dt = "bool"
    else:
        dt = _arith_dtype(t, f, "if_then_else")
    if t.dtype != dt:
        t = Zero(dt) if isinstance(t, Zero) else Cast(t, dt)
    if f.dtype != dt:
        f = Zero(dt) if isinstance(f, Zero) else Cast(f, dt)
    if isinstance(cond, Const):
        return t if cond.value else f
    if isinstance(t, Zero) and isinstance(f, Zero):
        return Zero(dt)
    return Select(cond, t, f, dt)


def cast(x: ExprLike, dtype: str) -> Expr:
    x = as_expr(x)
    dtype = dtypes.check(dtype)
    if x.dtype == dtype:
        return x
    if isinstance(x, Zero):
        return Zero(dtype)
    if isinstance(x, Const):
        return _const(x.value, dtype)
    return Cast(x, dtype)


def call(name: str, *args: ExprLike) -> Expr:
    """The math function ``name`` (an entry of :data:`tecomp.intrinsics.INTRINSICS`) of
    ``args``: its dtype rule checked, folded when every argument is a constant."""
    op = lookup(name)
    if op is None:
        raise DeclarationError(f"unknown math function {name!r}")
    if len(args) != op.arity:
        raise DeclarationError(f"tc.{name} takes {op.arity} argument(s), got {len(args)}")
    if op.arity == 2:
        a, b = _pair(*args)
        dt = _arith_dtype(a, b, name)
        xs = [a if a.dtype == dt else Cast(a, dt), b if b.dtype == dt else Cast(b, dt)]
    else:
        xs = [as_expr(x) for x in args]
        dt = xs[0].dtype
    for x in xs:  # the dtype rule: floats only, or any number (integer_ok)
        allowed = not dtypes.is_bool(x.dtype) if op.integer_ok else dtypes.is_float(x.dtype)
        if not allowed:
            kind = "a non-boolean" if op.integer_ok else "a float"
            raise DeclarationError(
                f"tc.{name} needs {kind} argument, got {x.dtype} in {x}; use tc.cast first")
    if all(isinstance(x, Const) for x in xs):
        try:
            return _const(op.fold(*(x.value for x in xs)), dt)
        except (ValueError, OverflowError):
            pass
    return Call(name, tuple(xs), dt)


def delta(a: ExprLike, b: ExprLike, dtype: str = "float32") -> Expr:
    """The Kronecker delta of two integer expressions, folded when both are constants."""
    a, b = _pair(a, b)
    if not (dtypes.is_int(a.dtype) and dtypes.is_int(b.dtype)):
        raise DeclarationError(f"a Kronecker delta compares integers, got ({a}) and ({b})")
    if isinstance(a, Const) and isinstance(b, Const):
        return _const(1 if a.value == b.value else 0, dtype) if a.value == b.value else Zero(dtype)
    if a == b:
        return _const(1, dtype)
    return Delta(a, b, dtype)
