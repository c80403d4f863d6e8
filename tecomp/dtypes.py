"""Scalar data types and their promotion rules.

Dtypes are plain strings (``"float32"``, ``"int64"``, ...).  Floats promote among floats and
integers among integers; mixing an integer with a float, or a bool with arithmetic, is an error
unless the user casts explicitly.  This keeps index arithmetic and value arithmetic apart.
"""

from __future__ import annotations

import numpy as np

from .errors import DeclarationError

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int32", "int64")
BOOL = "bool"
ALL = FLOATS + INTS + (BOOL,)

_RANK = {"float16": 0, "bfloat16": 0, "float32": 1, "float64": 2, "int32": 0, "int64": 1}


def check(dtype: str) -> str:
    """Return ``dtype`` normalised to its canonical name, or raise for an unknown one."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = np.dtype(dtype).name
    if dtype == "float":
        dtype = "float32"
    if dtype == "int":
        dtype = "int64"
    if dtype not in ALL:
        raise DeclarationError(f"unknown dtype {dtype!r}; expected one of {', '.join(ALL)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def is_bool(dtype: str) -> bool:
    return dtype == BOOL


def promote(a: str, b: str, what: str = "expression") -> str:
    """The common dtype of two operands of an arithmetic operation."""
    if a == b:
        return a
    if is_float(a) and is_float(b):
        if {a, b} == {"float16", "bfloat16"}:
            return "float32"
        return a if _RANK[a] >= _RANK[b] else b
    if is_int(a) and is_int(b):
        return a if _RANK[a] >= _RANK[b] else b
    raise DeclarationError(
        f"cannot mix {a} and {b} in {what}; use tc.cast(x, dtype) to convert explicitly")


def to_numpy(dtype: str) -> np.dtype:
    """The NumPy dtype that stores values of ``dtype`` (bfloat16 is stored as float32)."""
    if dtype == "bfloat16":
        return np.dtype("float32")
    return np.dtype(dtype)
