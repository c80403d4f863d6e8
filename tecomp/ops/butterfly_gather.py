"""The input permutation of a butterfly chain as index arithmetic instead of a table read.

The real DCT-II / DST-II / DHT chains of :mod:`tecomp.ops.butterfly_factors` read their
input through one gather ``x[perm]`` with ``perm = makhoul ∘ bitrev`` (or its reversal, or
``bitrev`` alone).  Read from an index table inside the first factor, every term loads the
table and is bounds-checked at run time (a data-dependent index).  Here the gather becomes
arithmetic on the loop indices of the first factor, so the kernel reads no table and the
bounds are proved when it is built.

Bit-linear split
----------------
Let the first factor applied have pattern ``(a, b, c, 1)`` with ``a = 2^A`` (true at the input
end of the chains: ``(n/2, 4, 2, 1)``, fused ``(n/2^g, 2^(g+1), 2^g, 1)``).  Its block ``i``
reads rows ``perm[i*c + k]``, ``k < c``.  We look for integers ``base[k]``, ``scale[k]`` and
weights ``w[t]`` (``t < A``) with::

    perm[i*c + k] = base[k] + scale[k] * q(i),    q(i) = sum_t bit_t(i) * w[t]

for all ``i < a`` and ``k < c`` (``bit_t(i) = (i // 2^t) % 2``).  Then term ``k`` of block ``i``
reads ``x[base[k] + scale[k] * q(i)]``: ``k`` is a constant in the unrolled first factor and
``q(i)`` is computed once per block.

Why the chains split.  With ``n = 2^L`` and ``c = 2^g``, the bit reversal of ``m = i*c + k``
is ``rev_g(k) * n/c + rev_(L-g)(i)``: a constant per ``k`` plus ``q(i) = rev_(L-g)(i)``, which is
linear in the bits of ``i`` (``w[t] = 2^(L-g-1-t)``).  Makhoul's reordering reads
``v[m] = x[2m]`` for ``m < n/2`` and ``x[2n-1-2m]`` otherwise; ``m = rev_g(k)*n/c + q(i) < n/2``
holds exactly when ``rev_g(k) < c/2`` (as ``q(i) < n/c``), so it keeps the form with
``scale[k] = 2`` or ``-2``.  The DST's reversal ``perm[n-1-m]`` maps ``i`` to ``a-1-i`` and
``q(a-1-i) = (n/c - 1) - q(i)``: the form again, with the signs of ``scale`` flipped.

Worked example, DCT-II, n = 16, first factor ``(8, 4, 2, 1)`` (``A = 3``, ``c = 2``):
``perm = [0, 15, 8, 7, 4, 11, 12, 3, 2, 13, 10, 5, 6, 9, 14, 1]``, so ``base = [0, 15]``,
``w = [4, 2, 1]`` (``q`` is the 3-bit reversal) and ``scale = [2, -2]``: block ``i = 1`` reads
``x[0 + 2*4] = x[8]`` and ``x[15 - 2*4] = x[7]``.

:func:`bit_linear_split` finds ``base``, ``scale`` and ``w`` from ``perm`` alone and verifies
the identity for every entry; it returns ``None`` when ``perm`` has no such form (the chain
then keeps the table gather).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..tensor import Tensor

__all__ = ["BitLinearGather", "bit_linear_split"]


@dataclass(frozen=True)
class BitLinearGather:
    """``perm[i*c + k] = base[k] + scale[k] * sum_t bit_t(i) * weights[t]`` (see module)."""

    base: tuple[int, ...]
    scale: tuple[int, ...]
    weights: tuple[int, ...]

    def block_offset(self, i):
        """``q(i) = sum_t bit_t(i) * weights[t]`` as a DSL index expression (or 0)."""
        q = 0
        for t, w in enumerate(self.weights):
            if w:
                q = q + (i // (1 << t)) % 2 * w
        return q

    def read(self, X: Tensor, i, k: int, n):
        """``X[perm[i*c + k], n]`` for a constant term ``k`` of block ``i``."""
        return X[self.base[k] + self.scale[k] * self.block_offset(i), n]


def bit_linear_split(perm: Sequence[int] | np.ndarray, a: int, c: int) -> BitLinearGather | None:
    """The bit-linear form of ``perm`` over ``a`` blocks of ``c`` rows, or ``None``.

    ``a`` must be a power of two and ``len(perm) == a*c``; every entry is verified.
    """
    p = np.asarray(perm, dtype=np.int64)
    if a < 1 or a & (a - 1) or c < 1 or p.shape != (a * c,):
        return None
    P = p.reshape(a, c)
    base = P[0]
    bits = a.bit_length() - 1
    # column k's offsets from block 0 at the single-bit blocks i = 2^t
    W = np.stack([P[1 << t] - base for t in range(bits)], axis=0) if bits else \
        np.zeros((0, c), dtype=np.int64)
    ref = next((k for k in range(c) if np.any(W[:, k])), None)
    if ref is None:  # every block reads the same rows (a == 1, or a constant perm)
        weights = np.zeros(bits, dtype=np.int64)
        scale = np.zeros(c, dtype=np.int64)
    else:
        weights = W[:, ref]
        g = int(np.gcd.reduce(np.abs(weights)))
        weights = weights // g
        t0 = int(np.flatnonzero(weights)[0])
        scale = np.zeros(c, dtype=np.int64)
        for k in range(c):
            s, rem = divmod(int(W[t0, k]), int(weights[t0]))
            if rem or not np.array_equal(W[:, k], s * weights):
                return None
            scale[k] = s
    i = np.arange(a, dtype=np.int64)
    q = sum((((i >> t) & 1) * int(w) for t, w in enumerate(weights)), np.zeros(a, np.int64))
    if not np.array_equal(P, base[None, :] + q[:, None] * scale[None, :]):
        return None
    return BitLinearGather(tuple(int(v) for v in base), tuple(int(v) for v in scale),
                           tuple(int(v) for v in weights))
