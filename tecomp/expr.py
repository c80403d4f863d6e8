"""Scalar expression IR: immutable nodes, one frozen dataclass per node kind.

Nodes compare and hash structurally (by their fields); the hash is cached on the node.  Tensors
(see :mod:`tecomp.tensor`) compare by identity, so a read ``A[i]`` equals another ``A[i]`` only
when both read the same tensor object.

Index expressions (int32/int64) and value expressions (floats) are told apart by dtype; mixing
them without an explicit :func:`tecomp.cast` raises :class:`~tecomp.errors.DeclarationError`.

Two nodes exist for the autodiff and zero elimination: :class:`Delta` (the Kronecker delta, 1
where its two integer operands are equal) and :class:`Zero` (a symbolic zero that derivative
rules return instead of building ``0 * x`` trees).

The smart constructors at the bottom (``add``, ``mul``, ...) fold constants and symbolic zeros
and nothing else; simplification is a pass.  Python operators on expressions use them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Union

from .errors import DeclarationError, TecompError

if TYPE_CHECKING:
    from .tensor import Tensor

ExprLike = Union["Expr", "IterVar", int, float, bool]


@lru_cache(maxsize=1024)
def field_names(cls: type) -> tuple[str, ...]:
    """The field names of the dataclass ``cls`` in order (``dataclasses.fields`` once per
    class: the structural walks of the caches call it for every node)."""
    return tuple(f.name for f in fields(cls))


@lru_cache(maxsize=1024)
def field_prefixes(cls: type) -> tuple[tuple[str, str], ...]:
    """``(name, "name=")`` for each field of the dataclass ``cls``: how the structural texts
    of the caches write a node's fields."""
    return tuple((f, f"{f}=") for f in field_names(cls))


def _cached_hash(self: Any) -> int:
    try:
        return object.__getattribute__(self, "_h")
    except AttributeError:
        h = hash((type(self).__name__,) + tuple(getattr(self, f.name) for f in fields(self)))
        object.__setattr__(self, "_h", h)
        return h


def node(cls: type) -> type:
    """Make ``cls`` a frozen, slotted dataclass with a cached structural hash."""
    cls = dataclass(frozen=True, slots=True)(cls)
    cls.__hash__ = _cached_hash  # type: ignore[assignment]
    return cls


class _Arith:
    """Python operators for expressions; every operator builds nodes via smart constructors."""

    __slots__ = ()

    def __add__(self, o: ExprLike) -> Expr:
        return add(self, o)

    def __radd__(self, o: ExprLike) -> Expr:
        return add(o, self)

    def __sub__(self, o: ExprLike) -> Expr:
        return sub(self, o)

    def __rsub__(self, o: ExprLike) -> Expr:
        return sub(o, self)

    def __mul__(self, o: ExprLike) -> Expr:
        return mul(self, o)

    def __rmul__(self, o: ExprLike) -> Expr:
        return mul(o, self)

    def __truediv__(self, o: ExprLike) -> Expr:
        return div(self, o)

    def __rtruediv__(self, o: ExprLike) -> Expr:
        return div(o, self)

    def __floordiv__(self, o: ExprLike) -> Expr:
        return floordiv(self, o)

    def __rfloordiv__(self, o: ExprLike) -> Expr:
        return floordiv(o, self)

    def __mod__(self, o: ExprLike) -> Expr:
        return mod(self, o)

    def __rmod__(self, o: ExprLike) -> Expr:
        return mod(o, self)

    def __pow__(self, o: ExprLike) -> Expr:
        return power(self, o)

    def __rpow__(self, o: ExprLike) -> Expr:
        return power(o, self)

    def __neg__(self) -> Expr:
        return neg(self)

    def __pos__(self) -> Expr:
        return as_expr(self)

    def __lt__(self, o: ExprLike) -> Expr:
        return compare(LT, self, o)

    def __le__(self, o: ExprLike) -> Expr:
        return compare(LE, self, o)

    def __gt__(self, o: ExprLike) -> Expr:
        return compare(GT, self, o)

    def __ge__(self, o: ExprLike) -> Expr:
        return compare(GE, self, o)

    def __and__(self, o: ExprLike) -> Expr:
        reject_python_bool(o, "'&'")
        return logical_and(self, o)

    def __rand__(self, o: ExprLike) -> Expr:
        reject_python_bool(o, "'&'")
        return logical_and(o, self)

    def __or__(self, o: ExprLike) -> Expr:
        reject_python_bool(o, "'|'")
        return logical_or(self, o)

    def __ror__(self, o: ExprLike) -> Expr:
        reject_python_bool(o, "'|'")
        return logical_or(o, self)

    def __invert__(self) -> Expr:
        return logical_not(self)

    def __bool__(self) -> bool:
        raise TecompError(
            f"the truth value of the expression {self} is not known at declaration time; "
            "use tc.if_then_else(cond, a, b) instead of Python's if/and/or, and tc.eq for ==")


class Expr(_Arith):
    """Base class of scalar expression nodes.  Every node has a ``dtype``."""

    __slots__ = ("_h",)
    dtype: str

    def __str__(self) -> str:
        from .printer import format_expr

        return format_expr(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"

    def __index__(self) -> int:
        from .functor import free_vars

        names = sorted(v.name for v in free_vars(self))
        if names:
            raise SymbolicValueError(
                f"{self} is symbolic (it depends on {', '.join(map(repr, names))}): it has no "
                "integer value at declaration time; bind the variable when you evaluate or "
                "call a kernel, or declare the size as a Python int")
        raise SymbolicValueError(f"{self} (dtype {self.dtype}) is not an integer constant")

    def __int__(self) -> int:
        return self.__index__()


class SymbolicValueError(DeclarationError, TypeError):
    """``int()`` of an expression that is not an integer constant (e.g. a symbolic size).

    Also a :class:`TypeError`, as Python expects from ``__index__``.
    """


# --------------------------------------------------------------------------------------- leaves
@node
class Const(Expr):
    """A constant.  An integer constant behaves as a Python int where one is expected:
    ``int()``, ``operator.index`` (``range``, NumPy shapes) and ``==`` with ints, so that a
    constant shape entry reads as the int the user declared (``X.shape == (3, 4)``).
    """

    value: int | float | bool
    dtype: str

    def __eq__(self, other: object) -> bool:
        if type(other) is Const:
            return self.value == other.value and self.dtype == other.dtype
        if type(other) is int and _INT_DTYPE.get(self.dtype, False):
            return self.value == other
        return NotImplemented

    def __index__(self) -> int:
        if _INT_DTYPE.get(self.dtype, False):
            return int(self.value)
        raise SymbolicValueError(f"{self} (dtype {self.dtype}) is not an integer constant")


# integer constants hash as their value so that ``Const(3, "int64") == 3`` implies equal hashes
_INT_DTYPE = {"int32": True, "int64": True}


def _const_hash(self: Const) -> int:
    if _INT_DTYPE.get(self.dtype, False):
        return hash(self.value)
    return _cached_hash(self)


Const.__hash__ = _const_hash  # type: ignore[assignment,method-assign]


@node
class Zero(Expr):
    """A symbolic zero of the given dtype (derivative rules return it, constructors fold it)."""

    dtype: str


@node
class Var(Expr):
    """A named scalar variable: a loop index, a reduction index, or a symbolic size."""

    name: str
    dtype: str = "int64"


class _IterBase(_Arith):
    __slots__ = ("_h",)


@node
class IterVar(_IterBase):
    """An iteration variable with its range ``[lo, lo + extent)``; a data or reduction axis."""

    var: Var
    lo: Expr
    extent: Expr
    kind: str = "data"  # "data" (output axis) or "reduce"

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dtype(self) -> str:
        return self.var.dtype

    def __str__(self) -> str:
        return self.var.name

    def __bool__(self) -> bool:  # an axis is always a real object
        return True


# ------------------------------------------------------------------------------ arithmetic
@node
class BinaryOp(Expr):
    a: Expr
    b: Expr
    dtype: str


@node
class Add(BinaryOp):
    pass


@node
class Sub(BinaryOp):
    pass


@node
class Mul(BinaryOp):
    pass


@node
class Div(BinaryOp):
    """True division (floats only)."""


@node
class FloorDiv(BinaryOp):
    """Floor division with Python semantics on negative operands."""


@node
class Mod(BinaryOp):
    """Modulo with Python semantics: the result has the divisor's sign."""


@node
class Min(BinaryOp):
    pass


@node
class Max(BinaryOp):
    pass


@node
class Neg(Expr):
    a: Expr
    dtype: str


# ------------------------------------------------------------------------------ comparisons
@node
class CmpOp(Expr):
    a: Expr
    b: Expr
    dtype: str = "bool"


@node
class LT(CmpOp):
    pass


@node
class LE(CmpOp):
    pass


@node
class GT(CmpOp):
    pass


@node
class GE(CmpOp):
    pass


@node
class EQ(CmpOp):
    pass


@node
class NE(CmpOp):
    pass


@node
class And(Expr):
    a: Expr
    b: Expr
    dtype: str = "bool"


@node
class Or(Expr):
    a: Expr
    b: Expr
    dtype: str = "bool"


@node
class Not(Expr):
    a: Expr
    dtype: str = "bool"


# ------------------------------------------------------------------------------ others
@node
class Select(Expr):
    """``t`` where ``cond`` holds, else ``f`` (only the chosen arm is evaluated)."""

    cond: Expr
    t: Expr
    f: Expr
    dtype: str


@node
class Cast(Expr):
    value: Expr
    dtype: str


@node
class Call(Expr):
    """A math function call: ``name`` is an entry of :data:`tecomp.intrinsics.INTRINSICS`."""

    name: str
    args: tuple[Expr, ...]
    dtype: str


@node
class TensorRead(Expr):
    tensor: Tensor
    indices: tuple[Expr, ...]
    dtype: str


REDUCERS = ("sum", "prod", "max", "min")


@node
class Reduce(Expr):
    """``combiner`` over ``axes`` of ``body``, restricted to the points where ``where`` holds."""

    combiner: str
    body: Expr
    axes: tuple[IterVar, ...]
    where: Expr | None
    dtype: str


@node
class Delta(Expr):
    """The Kronecker delta: 1 where ``a == b`` (integers), else 0, in ``dtype``."""

    a: Expr
    b: Expr
    dtype: str


CMP_NAMES = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "==", NE: "!="}


# The smart constructors live in their own module; re-exported here (the operators above
# resolve them in this namespace at call time).
from .construct import (  # noqa: E402,F401
    add,
    as_expr,
    call,
    cast,
    compare,
    delta,
    div,
    floordiv,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    mod,
    mul,
    neg,
    power,
    reject_python_bool,
    select,
    sub,
)
