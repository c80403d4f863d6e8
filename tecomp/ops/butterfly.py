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
from .butterfly_fuse import best_grouping, fuse_chain


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


def _reader(S: Tensor, b: int, d: int):
    """Read canonical row ``m = i·b·d + j·d + l`` of a stage stored as ``S[i, l, j, n]``."""
    bd = b * d
    return lambda m, n: S[m // bd, m % d, (m // d) % b, n]


def butterfly_chain(X: Tensor, patterns: Sequence[Sequence[int]],
                    factors: Sequence[Tensor], name: str = "butterfly",
                    perm: Tensor | None = None) -> Tensor:
    """``M_1 ⋯ M_L · X[perm]`` for Kronecker-sparse factors (``factors[0]`` is applied last).

    ``X`` has shape ``(rows, batch)`` with ``rows = a_L·c_L·d_L``; the result has shape
    ``(a_1·b_1·d_1, batch)`` in the canonical row order.  ``perm`` (an int tensor of length
    ``rows``, optional) gathers the input rows and is read inside the first stage.

    Every intermediate stage of pattern ``(a, b, c, d)`` is stored as ``S[i, l, j, n]``
    (shape ``(a, d, b, batch)``) instead of the canonical ``(i, j, l)`` row order: the loops
    then run ``i, l, j, k, n`` and the ``c`` input rows and ``b`` output rows of one ``(i, l)``
    stay in cache, while the next stage finds its rows by index arithmetic alone (no
    permutation is materialised).  Cost: ``sum a·b·c·d`` multiply-adds per column.
    """
    pats = [_check_pattern(p, f"butterfly_chain {name}") for p in patterns]
    if len(pats) != len(factors):
        raise DeclarationError(f"butterfly_chain {name}: {len(pats)} patterns but "
                               f"{len(factors)} factors")
    try:
        check_chainable(pats, strict=False)
    except ValueError as err:
        raise DeclarationError(f"butterfly_chain {name}: {err}") from None
    for pos, (T, p) in enumerate(zip(factors, pats)):
        shape = tuple(int(s.value) if hasattr(s, "value") else None for s in T.shape)
        if shape != p:
            raise DeclarationError(f"butterfly_chain {name}: factor {pos} {T.name} has shape "
                                   f"{shape}, the pattern says {p}")
    a, _, c, d = pats[-1]
    if X.ndim != 2 or (hasattr(X.shape[0], "value") and X.shape[0].value != a * c * d):
        raise DeclarationError(f"butterfly_chain {name}: {X.name} must have shape "
                               f"({a * c * d}, batch) for the last factor {pats[-1]}")
    batch = X.shape[1]
    if perm is None:
        def read(m, n):
            return X[m, n]
    else:
        def read(m, n):
            return X[perm[m], n]
    for level in range(len(pats) - 1, -1, -1):
        a, b, c, d = pats[level]
        T, k = factors[level], tc.reduce_axis(c, name="k")
        cd, bd = c * d, b * d
        if level == 0:  # the result, in canonical row order
            return tc.compute(
                (a * b * d, batch),
                lambda r, n, T=T, read=read, k=k, b=b, d=d, cd=cd, bd=bd: tc.sum(
                    T[r // bd, (r // d) % b, k, r % d] * read((r // bd) * cd + k * d + r % d, n),
                    axis=k),
                name=name if len(pats) == 1 else f"{name}1", tag="kron_sparse")
        S = tc.compute(
            (a, d, b, batch),
            lambda i, l_, j, n, T=T, read=read, k=k, d=d, cd=cd: tc.sum(
                T[i, j, k, l_] * read(i * cd + k * d + l_, n), axis=k),
            name=f"{name}{level + 1}", tag="kron_sparse")
        read = _reader(S, b, d)
    raise AssertionError("unreachable")


def dct(X: Tensor, kind: str = "dct2", name: str | None = None, *, fuse: int = 1) -> Tensor:
    """The orthonormal DCT-II / DST-II / DHT of ``X`` (shape ``(n, batch)``) along axis 0.

    Matches ``scipy.fft.dct(x, type=2, norm="ortho", axis=0)`` (``dst`` for ``"dst2"``; the
    DHT is ``Re((1+i)·F)/√n``).  ``n`` must be a power of two.

    ``fuse=1`` applies the ``L`` real factors of :func:`real_butterfly` (``8·n·(L-1)``
    multiply-adds per column).  ``fuse=g > 1`` first multiplies up to ``g`` adjacent factors
    into one (:mod:`tecomp.ops.butterfly_fuse`): fewer passes over the batch; ``g = 2`` also
    needs fewer multiply-adds (``8·n·(L-1) - 8·n`` for ``L >= 4``: the end pairs shrink).
    """
    if isinstance(fuse, bool) or not isinstance(fuse, int) or fuse < 1:
        raise DeclarationError(f"dct of {X.name}: fuse must be an int >= 1, got {fuse!r}")
    if X.ndim != 2 or not hasattr(X.shape[0], "value"):
        raise DeclarationError(f"dct: {X.name} must be 2-D (n, batch) with a constant n")
    if X.dtype not in ("float16", "float32", "float64"):
        raise DeclarationError(f"dct: {X.name} must be a float tensor, got {X.dtype}")
    n = int(X.shape[0].value)
    try:
        perm, patterns, factors, out_perm = real_butterfly(n, kind)
    except ValueError as err:
        raise DeclarationError(f"dct of {X.name}: {err}") from None
    if fuse > 1:
        patterns, factors = fuse_chain(patterns, factors, best_grouping(patterns, fuse))
    name = name or kind
    P = tc.constant(np.asarray(perm, dtype=np.int64), name=f"{name}_perm")
    Ts = [tc.constant(np.asarray(f, dtype=np.float64).astype(X.dtype), name=f"{name}_T{i + 1}")
          for i, f in enumerate(factors)]
    Y = butterfly_chain(X, patterns, Ts, name=f"{name}_M", perm=P)
    if out_perm is not None:
        Q = tc.constant(np.asarray(out_perm, dtype=np.int64), name=f"{name}_outperm")
        Y = tc.compute(Y.shape, lambda m, b: Y[Q[m], b], name=f"{name}_out")
    return Y


__all__ = ["kron_sparse_matmul", "butterfly_chain", "real_butterfly", "dct"]
