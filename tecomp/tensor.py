"""Tensors and the operations that produce them.

A :class:`Tensor` is either a placeholder (an input) or the result of a :class:`ComputeOp`
(an element-wise definition over its output axes).  Tensors compare and hash by identity: two
separately declared placeholders are different inputs even when their names agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import dtypes
from .errors import DeclarationError
from .expr import Expr, IterVar, TensorRead, as_expr


@dataclass(frozen=True, eq=False)
class PlaceholderOp:
    """An input tensor: its values are bound at evaluation or call time."""


@dataclass(frozen=True, eq=False)
class ConstantOp:
    """A tensor whose values are known when it is declared (e.g. transform factors).

    Backends pass the data as a hidden input; the evaluator reads it directly.
    """

    data: Any  # a read-only, C-contiguous NumPy array of the tensor's dtype and shape


@dataclass(frozen=True, eq=False)
class ComputeOp:
    """``T[axes] = body``; ``axes`` are the output iteration variables, one per dimension."""

    axes: tuple[IterVar, ...]
    body: Expr
    tag: str | None = None


@dataclass(frozen=True, eq=False)
class ScatterOp:
    """``T = init (or zeros); for each point of axes where `where`: T[indices] += value``.

    Zero elimination produces it for contributions whose destination is data-dependent (the
    gradient of a gather such as ``E[idx[i], j]``): O(|domain|) work instead of a dense mask
    over every destination.  Axis bounds may depend on earlier axes.
    """

    axes: tuple[IterVar, ...]
    indices: tuple[Expr, ...]
    value: Expr
    where: Expr | None = None
    init: Tensor | None = None


class Shape(tuple):
    """A tensor's shape: a tuple of integer expressions, printed as ``(n, 64)``.

    A constant entry behaves as a Python int (``int()``, ``operator.index``, ``range``,
    ``==``), so ``X.shape == (3, 4)`` and ``np.zeros(X.shape)`` work; ``int()`` of a symbolic
    entry raises a :class:`~tecomp.errors.DeclarationError` naming its variables.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        inner = ", ".join(str(s) for s in self)
        return f"({inner},)" if len(self) == 1 else f"({inner})"


#: ``Tensor.attrs`` key an op sets on an internal stage whose derivative cancels exactly in the
#: stages that read it, such as the row maximum softmax subtracts for stability
#: (``softmax(x - m) == softmax(x)`` for every ``m``): reverse mode, forward mode and DOF treat
#: such a stage as a constant (as ``jax.nn.softmax`` stops the gradient at its maximum), which
#: saves the argmax pass and the two reductions whose sum is zero.  The stage is still
#: differentiated as usual when it is itself the output being differentiated.
CANCELLING_DERIVATIVE = "cancelling_derivative"


@dataclass(frozen=True, eq=False)
class Tensor:
    """A tensor of a given shape and dtype; index it (``T[i, j]``) to read an element.

    ``shape`` is a :class:`Shape` (constant entries behave as ints), ``ndim`` its length.
    """

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    op: PlaceholderOp | ConstantOp | ComputeOp | ScatterOp
    attrs: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if type(self.shape) is not Shape:
            object.__setattr__(self, "shape", Shape(self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def is_constant(self) -> bool:
        return isinstance(self.op, ConstantOp)

    @property
    def tag(self) -> str | None:
        return self.op.tag if isinstance(self.op, ComputeOp) else None

    def __getitem__(self, index: Any) -> Expr:
        if not isinstance(index, tuple):
            index = (index,)
        if len(index) != self.ndim:
            raise DeclarationError(
                f"tensor {self.name!r} has {self.ndim} dimension(s) but is indexed with "
                f"{len(index)} index(es)")
        exprs = []
        for axis, ix in enumerate(index):
            if isinstance(ix, slice):
                raise DeclarationError(
                    f"tensor {self.name!r}, axis {axis}: slices are not supported in index "
                    "expressions; index with integer expressions")
            try:
                e = as_expr(ix)
            except DeclarationError as err:
                raise DeclarationError(f"tensor {self.name!r}, axis {axis}: {err}") from None
            if not dtypes.is_int(e.dtype):
                raise DeclarationError(
                    f"tensor {self.name!r}, axis {axis}: index {e} has dtype {e.dtype}; "
                    "indices must be integers (int32/int64)")
            exprs.append(e)
        return TensorRead(self, tuple(exprs), self.dtype)

    def __repr__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        kind = type(self.op).__name__.replace("Op", "").lower()
        return f"Tensor({self.name!r}, shape=({dims}), dtype={self.dtype}, {kind})"

    def __bool__(self) -> bool:
        return True

    def __iter__(self):  # guard against accidental unpacking / list(tensor)
        raise DeclarationError(f"tensor {self.name!r} is not iterable; index it with T[i, ...]")
