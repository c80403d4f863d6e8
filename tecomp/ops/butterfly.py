"""Kronecker-sparse products and real butterfly transforms in the DSL.

A Kronecker-sparse factor of pattern ``(a, b, c, d)`` is stored compactly as ``T`` of shape
``(a, b, c, d)``: the matrix of shape ``(a·b·d, a·c·d)`` whose entry
``[i·b·d + j·d + l, i·c·d + k·d + l]`` is ``T[i, j, k, l]`` (support ``I_a ⊗ 1_{b×c} ⊗ I_d``).
:func:`kron_sparse_matmul` applies it to a batch with ``a·b·c·d·batch`` multiply-adds.
:func:`dct` chains the fully real factors of :func:`real_butterfly` (see
:mod:`tecomp.ops.butterfly_factors` for their construction).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import dsl as tc
from ..errors import DeclarationError
from ..tensor import Tensor
from .butterfly_factors import check_chainable, real_butterfly


def _check_pattern(pattern: Sequence[int], who: str) -> tuple[int, int, int, int]:
    p = tuple(int(v) for v in pattern)
    if len(p) != 4 or any(v <= 0 for v in p):
        raise DeclarationError(f"{who}: pattern must be four positive ints (a, b, c, d), got "
                               f"{tuple(pattern)!r}")
    return p  # type: ignore[return-value]


def kron_sparse_matmul(T: Tensor, X: Tensor, pattern: Sequence[int],
                       name: str = "kron_sparse") -> Tensor:
    """Apply the Kronecker-sparse factor held by ``T`` (shape ``pattern``) to ``X``.

    ``X`` has shape ``(a·c·d, batch)``; the result has shape ``(a·b·d, batch)``.
    """
    a, b, c, d = _check_pattern(pattern, f"kron_sparse_matmul {name}")
    shape = tuple(int(s.value) if hasattr(s, "value") else None for s in T.shape)
    if shape != (a, b, c, d):
        raise DeclarationError(
            f"kron_sparse_matmul {name}: {T.name} has shape {shape}, the pattern says "
            f"{(a, b, c, d)}")
    if X.ndim != 2:
        raise DeclarationError(f"kron_sparse_matmul {name}: {X.name} must be 2-D (rows, batch)")
    rows = X.shape[0]
    if hasattr(rows, "value") and rows.value != a * c * d:
        raise DeclarationError(
            f"kron_sparse_matmul {name}: {X.name} has {rows.value} rows, the pattern "
            f"{(a, b, c, d)} needs a·c·d = {a * c * d}")
    k = tc.reduce_axis(c, name="k")
    bd, cd = b * d, c * d
    return tc.compute(
        (a * b * d, X.shape[1]),
        lambda r, n: tc.sum(T[r // bd, (r // d) % b, k, r % d]
                            * X[(r // bd) * cd + k * d + r % d, n], axis=k),
        name=name, tag="kron_sparse")


def butterfly_chain(X: Tensor, patterns: Sequence[Sequence[int]],
                    factors: Sequence[Tensor], name: str = "butterfly") -> Tensor:
    """``M_1 ⋯ M_L · X`` for Kronecker-sparse factors (``factors[0]`` is applied last)."""
    check_chainable([tuple(p) for p in patterns], strict=False)
    Y = X
    for level in range(len(factors) - 1, -1, -1):
        Y = kron_sparse_matmul(factors[level], Y, patterns[level], name=f"{name}{level + 1}")
    return Y


def dct(X: Tensor, kind: str = "dct2", name: str | None = None) -> Tensor:
    """The orthonormal DCT-II / DST-II / DHT of ``X`` (shape ``(n, batch)``) along axis 0.

    Matches ``scipy.fft.dct(x, type=2, norm="ortho", axis=0)`` (``dst`` for ``"dst2"``; the
    DHT is ``Re((1+i)·F)/√n``).  ``n`` must be a power of two.
    """
    if X.ndim != 2 or not hasattr(X.shape[0], "value"):
        raise DeclarationError(f"dct: {X.name} must be 2-D (n, batch) with a constant n")
    if X.dtype not in ("float16", "float32", "float64"):
        raise DeclarationError(f"dct: {X.name} must be a float tensor, got {X.dtype}")
    n = int(X.shape[0].value)
    try:
        perm, patterns, factors, out_perm = real_butterfly(n, kind)
    except ValueError as err:
        raise DeclarationError(f"dct of {X.name}: {err}") from None
    name = name or kind
    P = tc.constant(np.asarray(perm, dtype=np.int64), name=f"{name}_perm")
    G = tc.compute(X.shape, lambda m, b: X[P[m], b], name=f"{name}_in")
    Ts = [tc.constant(np.asarray(f, dtype=np.float64).astype(X.dtype), name=f"{name}_T{i + 1}")
          for i, f in enumerate(factors)]
    Y = butterfly_chain(G, patterns, Ts, name=f"{name}_M")
    if out_perm is not None:
        Q = tc.constant(np.asarray(out_perm, dtype=np.int64), name=f"{name}_outperm")
        Y = tc.compute(Y.shape, lambda m, b: Y[Q[m], b], name=f"{name}_out")
    return Y


__all__ = ["kron_sparse_matmul", "butterfly_chain", "real_butterfly", "dct"]
