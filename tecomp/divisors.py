"""Integer divisions whose divisor is known before a program runs.

Division semantics (``docs/robustness.md``): an integer ``//`` or ``%`` whose divisor is

* the constant 0 is refused where it is written (:func:`tecomp.construct.floordiv`);
* an expression of sizes and scalar arguments only (``X[i // n]``) is checked once the sizes
  are known: a kernel call (or ``tc.evaluate``) with a zero divisor raises before anything
  is allocated or run, wherever the division sits (also in an arm that would not run);
* computed from loop indices or tensor data: as if the divisor were 1 (``x // 0 == x``,
  ``x % 0 == 0``), identically in the evaluator, the LLVM and the CUDA code, never a trap;
  an index computed that way is checked like any data-dependent index.

:func:`size_divisors` finds the second kind in a program (tensor graph or loop IR: both are
frozen dataclasses and are walked generically, each shared node once), and
:func:`zero_divisor` evaluates them for given sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, is_dataclass
from typing import Any, Iterable, Mapping

from . import dtypes
from . import expr as E
from .loopir import BufferLoad, Store

# nodes that make a divisor data-dependent (BufferLoad is the loop IR's read)
_DATA_NODES = (E.TensorRead, BufferLoad, E.Reduce)


@dataclass(frozen=True)
class SizeDivision:
    """A division ``division`` whose ``divisor`` depends only on sizes, inside ``site`` (the
    tensor read or store whose index holds it, or None in a value)."""

    division: E.Expr
    divisor: E.Expr
    site: Any


def size_divisors(roots: Iterable[Any], sizes: Iterable[E.Var]) -> list[SizeDivision]:
    """Every integer ``//``/``%`` reachable from ``roots`` whose divisor is an expression of
    ``sizes`` only (not a constant), each once."""
    known = set(sizes)
    found: list[SizeDivision] = []
    if not known:  # a divisor of sizes only needs a size: none to find (and no walk)
        return found
    seen: set[int] = set()
    keep: list[Any] = []
    stack: list[tuple[Any, Any]] = [(r, None) for r in roots]
    fields = _FIELDS
    while stack:
        node, site = stack.pop()
        cls = type(node)
        if cls is tuple:
            stack.extend((x, site) for x in node)
            continue
        names = fields.get(cls)
        if names is None:  # a class met first: its fields, () for a leaf (str, int, a type)
            names = fields[cls] = E.field_names(cls) if is_dataclass(cls) else ()
        if not names or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        if cls in _SITES:
            site = node
        elif cls in _DIVISIONS and dtypes.is_int(node.dtype) and \
                not isinstance(node.b, E.Const) and _sizes_only(node.b, known):
            found.append(SizeDivision(node, node.b, site))
        for f in names:
            x = getattr(node, f)
            if type(x) not in _LEAVES:
                stack.append((x, site))
    return found


#: field names by class for :func:`size_divisors` (a walk of every node of a program: the
#: scheduled transformer block's took 28 ms with ``is_dataclass`` and ``isinstance`` per node)
_FIELDS: dict[type, tuple[str, ...]] = {}
_SITES = frozenset({E.TensorRead, BufferLoad, Store})
_DIVISIONS = frozenset({E.FloorDiv, E.Mod})
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _sizes_only(e: Any, known: set[E.Var]) -> bool:
    stack, any_var = [e], False
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
            continue
        if not is_dataclass(x):
            continue
        if isinstance(x, _DATA_NODES):
            return False
        if isinstance(x, E.Var):
            if x not in known:
                return False
            any_var = True
            continue
        stack.extend(getattr(x, f) for f in E.field_names(type(x)))
    return any_var


_INT_OPS = {
    E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
    E.FloorDiv: lambda a, b: a // (b or 1), E.Mod: lambda a, b: a % (b or 1),
    E.Min: min, E.Max: max,
}


def size_value(e: E.Expr, sizes: Mapping[E.Var, int]) -> int | None:
    """The value of the size expression ``e``, or None when it uses something else."""
    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        v = sizes.get(e)
        return None if v is None else int(v)
    if isinstance(e, E.Cast):
        return size_value(e.value, sizes)
    if isinstance(e, E.Neg):
        a = size_value(e.a, sizes)
        return None if a is None else -a
    op = _INT_OPS.get(type(e))
    if op is None:
        return None
    a, b = size_value(e.a, sizes), size_value(e.b, sizes)
    return None if a is None or b is None else int(op(a, b))


def zero_divisor(divisions: Iterable[SizeDivision], sizes: Mapping[E.Var, int]) -> str | None:
    """A message for the first division whose divisor is 0 for ``sizes``, or None."""
    for d in divisions:
        if size_value(d.divisor, sizes) != 0:
            continue
        used = sorted(set(_vars(d.divisor)), key=lambda v: v.name)
        bound = ", ".join(f"{v.name} = {sizes[v]}" for v in used if v in sizes)
        where = ""
        if d.site is not None:
            name = getattr(getattr(d.site, "tensor", None) or getattr(d.site, "buffer", None),
                           "name", "?")
            where = f" in the index of tensor {name!r}"
        return (f"integer division by zero{where}: the divisor {d.divisor} of {d.division} "
                f"is 0 for {bound}")
    return None


def _vars(e: Any) -> list[E.Var]:
    out, stack = [], [e]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif isinstance(x, E.Var):
            out.append(x)
        elif is_dataclass(x):
            stack.extend(getattr(x, f) for f in E.field_names(type(x)))
    return out
