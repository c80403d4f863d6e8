"""A kernel's arguments: what each must look like, and the sizes its arrays' shapes bind.

:class:`BufArg` and :class:`VarArg` describe a tensor and a scalar argument of a
:class:`~tecomp.codegen.kernel.Kernel`; :func:`check_array` and :func:`check_scalar` check one
argument against its description, :func:`bind_extents` binds the symbolic sizes an array's
shape fixes (a bare size variable, or an expression affine in one still-unbound size:
:func:`solve_affine`) and :func:`resolve_extents` checks the dimensions left once every size
is known.  Every failure raises :class:`~tecomp.errors.ArgumentError` naming the tensor and
the axis.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .. import dtypes
from .. import expr as E
from ..errors import ArgumentError
from ..loopir import Buffer
from ..stmt_functor import eval_int


class BufArg:
    """A tensor argument: where it goes and what it must look like."""

    __slots__ = ("label", "buffer", "dtype", "np_dtype", "dims")

    def __init__(self, label: str, buffer: Buffer) -> None:
        self.label = label
        self.buffer = buffer
        self.dtype = buffer.dtype
        self.np_dtype = dtypes.to_numpy(buffer.dtype)
        self.dims = tuple(buffer.shape)


class VarArg:
    __slots__ = ("label", "var")

    def __init__(self, var: E.Var) -> None:
        self.label = f"scalar {var.name!r}"
        self.var = var


# ---------------------------------------------------------------------------- argument checks
def size_vars(e: E.Expr) -> set[E.Var]:
    """The size variables ``e`` reads."""
    from ..functor import free_vars

    return free_vars(e)


def check_scalar(spec: VarArg, x: Any) -> int:
    """The integer value of the scalar argument ``x`` for ``spec`` (an error names it)."""
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iu":
        x = x.item()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise ArgumentError(f"{spec.label}: expected an integer, got {type(x).__name__}")
    v = int(x)
    info = np.iinfo(dtypes.to_numpy(spec.var.dtype))
    if not info.min <= v <= info.max:
        raise ArgumentError(f"{spec.label}: {v} does not fit in {spec.var.dtype}")
    return v


_PY_KIND = {bool: "b", int: "iu", float: "f"}


def check_array(spec: BufArg, x: Any, pos: int) -> np.ndarray:
    """``x`` as the array argument ``pos`` for ``spec``: type, ndim and dtype checked."""
    where = f"argument {pos} ({spec.label})"
    if not isinstance(x, np.ndarray):
        if isinstance(x, np.generic):
            x = np.asarray(x)
        elif spec.buffer.ndim == 0 and type(x) in _PY_KIND and \
                spec.np_dtype.kind in _PY_KIND[type(x)]:
            x = np.asarray(x, dtype=spec.np_dtype)
        else:
            raise ArgumentError(
                f"{where}: expected a NumPy array of dtype {spec.dtype}, got "
                f"{type(x).__name__}")
    if x.ndim != len(spec.dims):
        raise ArgumentError(
            f"{where}: expected {len(spec.dims)} dimension(s), got an array with {x.ndim} "
            f"(shape {x.shape})")
    if x.dtype != spec.np_dtype:
        raise ArgumentError(
            f"{where}: expected dtype {spec.dtype}, got {x.dtype}; tecomp does not cast "
            f"implicitly (use .astype(np.{spec.np_dtype.name}))")
    if not (x.flags.c_contiguous and x.flags.aligned):
        x = np.ascontiguousarray(x)
    return x


def bind_extents(spec: BufArg, shape: tuple[int, ...], sizes: dict[E.Var, int],
                 source: dict[E.Var, str], pending: list[tuple[BufArg, int, int]]) -> None:
    """Bind the sizes that ``shape`` determines; dimensions given by expressions go to
    ``pending`` (see :func:`resolve_extents`)."""
    for d, (e, got) in enumerate(zip(spec.dims, shape)):
        if isinstance(e, E.Const):
            if got != e.value:
                raise ArgumentError(f"{spec.label}, axis {d}: expected extent {e.value}, got {got}")
        elif isinstance(e, E.Var):
            if e in sizes:
                if sizes[e] != got:
                    raise ArgumentError(
                        f"{spec.label}, axis {d}: expected extent {e.name} = {sizes[e]} (bound "
                        f"from {source[e]}), got {got}")
            else:
                sizes[e] = got
                source[e] = f"{spec.label}, axis {d}"
        else:
            pending.append((spec, d, got))


def resolve_extents(pending: list[tuple[BufArg, int, int]], sizes: dict[E.Var, int],
                    source: dict[E.Var, str]) -> None:
    """Check (or solve for one unbound size) the dimensions that are expressions."""
    progress = True
    while pending and progress:
        progress = False
        rest = []
        for spec, d, got in pending:
            e = spec.dims[d]
            free = [v for v in size_vars(e) if v not in sizes]
            if len(free) == 1:
                v = solve_affine(e, free[0], got, sizes)
                if v is not None:
                    sizes[free[0]] = v
                    source[free[0]] = f"{spec.label}, axis {d}"
                    progress = True
                    continue
            if free:
                rest.append((spec, d, got))
                continue
            want = eval_int(e, sizes)
            if want != got:
                names = ", ".join(f"{v.name} = {sizes[v]}" for v in sorted(
                    size_vars(e), key=lambda v: v.name))
                raise ArgumentError(
                    f"{spec.label}, axis {d}: expected extent {e} = {want} ({names}), got {got}")
            progress = True
        pending[:] = rest
    for spec, d, got in pending:
        e = spec.dims[d]
        free = sorted(v.name for v in size_vars(e) if v not in sizes)
        raise ArgumentError(
            f"{spec.label}, axis {d}: extent {e} (= {got}) does not determine "
            f"{', '.join(free)}")


# ---------------------------------------------------------------------------- size arithmetic
def solve_affine(e: E.Expr, v: E.Var, target: int, sizes: Mapping[E.Var, int]) -> int | None:
    """The integer ``x`` with ``e[v := x] == target`` when ``e`` is affine in ``v``, else None.

    ``e`` is sampled at three points; a non-affine ``e`` (``v * v``, ``v // 2``) is detected by
    the samples or by the final check, and gives None.
    """
    env = dict(sizes)

    def at(x: int) -> int:
        env[v] = x
        return eval_int(e, env)

    b, a = at(0), at(1) - at(0)
    if a == 0 or at(2) != b + 2 * a or (target - b) % a:
        return None
    x = (target - b) // a
    return x if at(x) == target else None
