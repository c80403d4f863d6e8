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

The inverse gather (gradients)
------------------------------
The adjoint of ``y[m] = x[perm[m]]`` is the gather ``dx[p] = dy[perm^-1(p)]``.  The chains'
inverses are *bit-affine*: ``perm^-1(p) = offset XOR (XOR over the set bits s of p of
columns[s])``, an affine map over GF(2) on the ``L`` bits of ``p``.  The bit reversal permutes
bits; Makhoul's reordering is ``m' = (p // 2) XOR (p % 2)·(n - 1)`` (an odd ``p = 2n - 1 - 2m'``
gives ``m' = n - 1 - p // 2``, the complement of ``p // 2`` in ``L`` bits); the DST's reversal
XORs ``n - 1``.  :func:`bit_affine_form` reads ``offset`` and ``columns`` off the table
(``offset = f(0)``, ``columns[s] = f(2^s) XOR f(0)``) and verifies every entry.  A bit field of
the result is index arithmetic: bit ``t`` of ``f(p)`` is the parity
``(offset_t + sum_{s in S_t} p // 2^s) % 2`` over the input bits ``S_t`` whose column sets bit
``t`` (``p // 2^s`` has the parity of bit ``s``).  Worked example, the DCT-II at ``n = 8``:
``perm = perm^-1 = [0, 7, 4, 3, 2, 5, 6, 1]``, ``offset = 0``, ``columns = [7, 4, 2]``: bit 0 of
``perm^-1(p)`` is ``p % 2``, bit 1 is ``(p + p // 4) % 2``, bit 2 is ``(p + p // 2) % 2``; for
``p = 6`` that is ``0, 1, 1``: ``perm^-1(6) = 6``.  No projection and no table.  Written so, a
sum of bits taken modulo 2 costs the isl bounds proofs about a second an access at ``n = 1024``
(a ``%`` of a sum over a wide range); :meth:`BitAffineMap.field` instead fixes the bits whose
column sets several bits (here ``p % 2``, column ``7``) in a ``select`` and writes each case as
pure bit moves, flipped where the case's constant says: bit 1 of ``perm^-1(p)`` is
``select(p % 2 == 0, p // 4 % 2, 1 - p // 4 % 2)``.  Those prove in milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import dsl as tc
from ..tensor import Tensor

__all__ = ["BitAffineMap", "BitLinearGather", "bit_affine_form", "bit_linear_split",
           "inverse_permutation"]


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


@dataclass(frozen=True)
class BitAffineMap:
    """``f(p) = offset XOR (XOR over the set bits s of p of columns[s])`` on ``[0, 2^L)``."""

    offset: int
    columns: tuple[int, ...]

    def __call__(self, p: np.ndarray) -> np.ndarray:
        """``f`` on an int array (the oracle the DSL form is checked against)."""
        p = np.asarray(p, dtype=np.int64)
        out = np.full(p.shape, self.offset, dtype=np.int64)
        for s, col in enumerate(self.columns):
            out ^= ((p >> s) & 1) * col
        return out

    def field(self, p, lo: int, hi: int):
        """Bits ``[lo, hi)`` of ``f(p)``, shifted down by ``lo``, as a DSL index expression.

        Input bits whose column sets several bits (Makhoul's ``p % 2``) are fixed case by case
        (a ``select`` on them, at most two such bits): in each case the rest is a pure bit move
        with some outputs flipped, i.e. runs of ``(p // 2^s) % 2^r`` (flipped: ``2^r - 1``
        minus it), which the bounds prover handles piece by piece.  Other maps fall back to
        the parities ``(offset_t + sum_s p // 2^s) % 2``.
        """
        wide = [s for s, col in enumerate(self.columns) if col & (col - 1)]
        rest = [(s, col) for s, col in enumerate(self.columns) if s not in wide and col]
        outs = [col for _, col in rest]
        if len(wide) > 2 or len(set(outs)) != len(outs):
            return self._parity_field(p, lo, hi)
        src = {col.bit_length() - 1: s for s, col in rest}  # output bit -> its input bit
        if not wide:
            return _moved_bits(p, src, self.offset, lo, hi)
        return self._select_cases(p, wide, src, lo, hi)

    def _select_cases(self, p, wide: list[int], src: dict[int, int], lo: int, hi: int):
        def build(fixed: int, b: int):
            if b == len(wide):
                mask = self.offset
                for t, s in enumerate(wide):
                    if fixed >> t & 1:
                        mask ^= self.columns[s]
                return _moved_bits(p, src, mask, lo, hi)
            s = wide[b]
            zero, one = build(fixed, b + 1), build(fixed | 1 << b, b + 1)
            if isinstance(zero, int) and isinstance(one, int) and zero == one:
                return zero
            return tc.if_then_else(tc.eq(p // (1 << s) % 2 if s else p % 2, 0), zero, one)
        return build(0, 0)

    def _parity_field(self, p, lo: int, hi: int):
        out = 0
        for t in range(lo, hi):
            srcs = [s for s, col in enumerate(self.columns) if col >> t & 1]
            parity = self.offset >> t & 1
            for s in srcs:
                parity = parity + (p // (1 << s) if s else p)
            bit = parity % 2 if srcs else parity
            out = out + bit * (1 << (t - lo)) if t > lo else out + bit
        return out


def _moved_bits(p, src: dict[int, int], mask: int, lo: int, hi: int):
    """``sum_t 2^(t-lo) · (bit src[t] of p, flipped where mask has bit t)`` for ``t`` in
    ``[lo, hi)``, runs of consecutive moves taken at once."""
    out = 0
    t = lo
    while t < hi:
        flip = mask >> t & 1
        if t not in src:
            part, run = flip, 1
        else:
            run = 1
            while t + run < hi and src.get(t + run) == src[t] + run and \
                    (mask >> (t + run) & 1) == flip:
                run += 1
            s = src[t]
            part = p // (1 << s) % (1 << run) if s else p % (1 << run)
            if flip:
                part = ((1 << run) - 1) - part
        if isinstance(part, int) and part == 0:
            pass
        elif t == lo:
            out = out + part
        else:
            out = out + part * (1 << (t - lo))
        t += run
    return out


def inverse_permutation(perm: Sequence[int] | np.ndarray) -> np.ndarray:
    """``perm^-1`` of an int table; raises ``ValueError`` unless ``perm`` is a bijection of
    ``[0, len(perm))`` (checked, never assumed)."""
    p = np.asarray(perm, dtype=np.int64)
    n = p.shape[0] if p.ndim == 1 else -1
    if n < 0 or (n and (p.min() < 0 or p.max() >= n)):
        raise ValueError(f"not a permutation of range({max(n, 0)}): {p[:8].tolist()}...")
    inv = np.full(n, -1, dtype=np.int64)
    inv[p] = np.arange(n, dtype=np.int64)
    if n and inv.min() < 0:  # an index missed: another one repeats (no np.unique, which
        # imports numpy.ma, 15 ms of a warm process's 40)
        raise ValueError(f"not a permutation of range({n}): {p[:8].tolist()}...")
    return inv


def bit_affine_form(table: Sequence[int] | np.ndarray) -> BitAffineMap | None:
    """The bit-affine form of ``table`` (length a power of two), verified on every entry;
    ``None`` when it has none."""
    t = np.asarray(table, dtype=np.int64)
    n = t.shape[0] if t.ndim == 1 else 0
    if n < 1 or n & (n - 1):
        return None
    offset = int(t[0])
    cols = tuple(int(t[1 << s]) ^ offset for s in range(n.bit_length() - 1))
    form = BitAffineMap(offset, cols)
    return form if np.array_equal(form(np.arange(n)), t) else None
