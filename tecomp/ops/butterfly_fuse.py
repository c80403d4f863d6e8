"""Fusing adjacent Kronecker-sparse factors into fewer, larger ones.

Fewer factors mean fewer passes over the batch and fewer intermediate buffers; this is the
lever of lazylinop's chain optimiser and of Gonon et al. (ICML 2025, "Fast inference with
Kronecker-sparse matrices"), who show that the time goes into moving data between factors,
not into the multiply-adds.  Fusion multiplies factors *compactly* -- no dense matrix and no
permutation is materialised.

Product of two factors
----------------------
Let ``M`` have pattern ``(a, b, c, d)`` and ``M'`` pattern ``(a', b', c', d')`` with
``a*c*d = a'*b'*d'`` (they compose), ``a | a'`` and ``d' | d`` (true for square-dyadic,
Monarch and the real DCT chains).  Put ``alpha = a'/a`` and ``delta = d/d'``; then
``c*delta = alpha*b'``.  Split ``M``'s inner index ``l = l_hi*d' + l_lo`` (``l_hi < delta``).
The middle index ``i*c*d + k*d + l`` reads, in ``M'``'s row split ``(i', j', l')``::

    l' = l_lo,   i'*b' + j' = i*c*delta + k*delta + l_hi
    => i' = i*alpha + (k*delta + l_hi) // b',   j' = (k*delta + l_hi) % b'

so ``M M'`` is Kronecker-sparse of pattern ``(a, b*delta, alpha*c', d')`` with::

    P[i, (j, l_hi), (q, k'), l_lo] = sum over k with (k*delta + l_hi) // b' == q of
                                     T[i, j, k, l_hi*d' + l_lo] * T'[i*alpha + q, j', k', l_lo]

Its cost per column is ``a*b*delta*alpha*c'*d' = b*c'*a'*d``.

Worked example (real DCT chain, n = 16): ``M_2 (2, 4, 4, 4)`` and ``M_3 (4, 4, 4, 2)`` give
``alpha = 2, delta = 2`` and the fused ``(2, 8, 8, 2)``: 256 multiply-adds per column, as
many as ``128 + 128`` for the two factors apart.  In general two middle factors
``(a, 4, 4, d) (2a, 4, 4, d/2)`` fuse into ``(a, 8, 8, d/2)`` at equal cost, and the end pairs
are cheaper fused (``(1, 2, 4, n/2)(2, 4, 4, n/4) -> (1, 4, 8, n/4)``: ``8n`` instead of
``12n``), because the fused first factor never forms the imaginary parts it discards.
Fusing three middle factors gives ``(a, 16, 16, d/4)``: ``4/3`` of the multiply-adds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .butterfly_factors import Pattern, butterfly_cost, check_chainable

__all__ = ["auto_grouping", "best_grouping", "fuse_chain", "fuse_factors", "fused_pattern"]


def fused_pattern(p: Sequence[int], q: Sequence[int]) -> Pattern:
    """Pattern of the product of factors of patterns ``p`` (left) and ``q`` (right)."""
    a, b, c, d = (int(v) for v in p)
    a2, b2, c2, d2 = (int(v) for v in q)
    if a * c * d != a2 * b2 * d2:
        raise ValueError(f"factors {tuple(p)} and {tuple(q)} do not compose: "
                         f"{a * c * d} columns against {a2 * b2 * d2} rows")
    if a2 % a or d % d2:
        raise ValueError(f"factors {tuple(p)} and {tuple(q)} cannot be fused: need "
                         f"a={a} | a'={a2} and d'={d2} | d={d}")
    return a, b * (d // d2), (a2 // a) * c2, d2


def fuse_factors(T: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Compact values of the product ``M M'`` of the factors held by ``T`` and ``U``."""
    T, U = np.asarray(T), np.asarray(U)
    a, b, c, d = T.shape
    a2, b2, c2, d2 = U.shape
    _, bb, cc, _ = fused_pattern(T.shape, U.shape)
    alpha, delta = a2 // a, d // d2
    P = np.zeros((a, b, delta, alpha, c2, d2), dtype=np.result_type(T, U))
    U6 = U.reshape(a, alpha, b2, c2, d2)
    T5 = T.reshape(a, b, c, delta, d2)
    for k in range(c):
        for lh in range(delta):
            m = k * delta + lh
            q, jp = divmod(m, b2)
            # P[i, j, lh, q, k', l] += T[i, j, k, lh, l] * U[i*alpha + q, jp, k', l]
            P[:, :, lh, q, :, :] += np.einsum("ijl,ikl->ijkl", T5[:, :, k, lh, :],
                                              U6[:, q, jp, :, :])
    return P.reshape(a, bb, cc, d2)


def fuse_chain(patterns: Sequence[Sequence[int]], factors: Sequence[np.ndarray],
               group: int | Sequence[int] = 2) -> tuple[list[Pattern], list[np.ndarray]]:
    """Fuse consecutive factors of a chain (``factors[0]`` applied last).

    ``group`` is how many factors each fused factor takes: an int (the last group may be
    shorter) or the list of group sizes (summing to the chain length).  Returns the new
    ``(patterns, factors)``; the product of the chain is unchanged.
    """
    pats = [tuple(int(v) for v in p) for p in patterns]
    check_chainable(pats, strict=False)
    L = len(pats)
    if isinstance(group, int):
        if group < 1:
            raise ValueError(f"group must be >= 1, got {group}")
        sizes = [min(group, L - s) for s in range(0, L, group)]
    else:
        sizes = [int(g) for g in group]
        if any(g < 1 for g in sizes) or sum(sizes) != L:
            raise ValueError(f"group sizes {list(group)} must be positive and sum to {L}")
    out_p: list[Pattern] = []
    out_f: list[np.ndarray] = []
    start = 0
    for g in sizes:
        F = np.asarray(factors[start])
        for t in range(start + 1, start + g):
            F = fuse_factors(F, factors[t])
        out_f.append(np.ascontiguousarray(F))
        out_p.append(tuple(int(v) for v in F.shape))  # type: ignore[arg-type]
        start += g
    return out_p, out_f


def best_grouping(patterns: Sequence[Sequence[int]], max_group: int = 2) -> list[int]:
    """Group sizes (at most ``max_group``) with the fewest factors, then the fewest
    multiply-adds (dynamic programming over the chain)."""
    pats = [tuple(int(v) for v in p) for p in patterns]
    L = len(pats)
    best: list[tuple[int, int, list[int]] | None] = [None] * (L + 1)
    best[0] = (0, 0, [])
    for end in range(1, L + 1):
        for g in range(1, min(max_group, end) + 1):
            prev = best[end - g]
            if prev is None:
                continue
            p = pats[end - g]
            try:
                for q in pats[end - g + 1:end]:
                    p = fused_pattern(p, q)
            except ValueError:
                continue
            cand = (prev[0] + 1, prev[1] + butterfly_cost([p]), prev[2] + [g])
            if best[end] is None or cand[:2] < best[end][:2]:  # type: ignore[index]
                best[end] = cand
    assert best[L] is not None
    return best[L][2]


def auto_grouping(patterns: Sequence[Sequence[int]], *, fewer_passes: bool = False,
                  fewest_passes: bool = False) -> list[int]:
    """The grouping ``dct`` uses by default (measured, see below).

    Adjacent pairs keep the fewest multiply-adds (see above) with half the passes over the
    batch.  For an odd chain length the last three factors (the input end) form one factor:
    as many multiply-adds as a pair next to a single factor, one pass fewer.  With
    ``fewer_passes`` an even chain of at least 6 factors also takes the first three (the
    output end) as one and the last three as one (``[3, 2, ..., 2, 3]``): the same
    multiply-adds as pairs in one pass fewer, at the price of a 16-term output stage.
    Falls back to ``best_grouping(patterns, 2)`` where a triple cannot be fused.

    Measured with unrolled stages (one thread, batch 128, float64, interleaved with the other
    methods of ``benchmarks/bench_butterfly.py``): ``n = 2048``: ``[2, 2, 2, 2, 3]`` 1.14x
    SciPy's time, ``[2, 2, 2, 2, 2, 1]`` 1.24x; ``n = 1024``: ``[3, 2, 2, 3]`` 1.12x, pairs
    1.20x (with warm caches pairs were 5% faster); ``n = 256``, where the intermediate stages
    fit in L2: pairs 0.87x, ``[3, 2, 3]`` 1.28x.  ``dct`` sets ``fewer_passes`` from
    ``n >= 1024``.

    With ``fewest_passes``: ``best_grouping(patterns, 3)``, the fewest factors (groups of up
    to three), then the fewest multiply-adds -- ``[3, 3, 2, 3]`` at ``n = 2048``, ``[3, 3, 3,
    3]`` at 4096: one pass fewer than the grouping above for 11% and 20% more multiply-adds.
    Measured on an Intel Xeon with AVX-512 (family 6 model 167; one thread, batch 128,
    ``python benchmarks/bench_butterfly.py --sizes 2048 4096 8192 --fuse auto 3``, two runs):
    ``n = 2048`` 0.73-0.74x SciPy's time against 0.83-0.84x in float64 and 0.97-1.02x against
    1.09-1.15x in float32; 4096: 0.74-0.75x against 0.85-0.89x, 0.82-0.83x against
    0.92-0.93x; 8192: 1.18x against 1.37x, 0.93x against 1.02x; the gradient 0.85-0.94x of
    its time with the grouping above at 2048 and 4096 points (with the adjoints kept in
    their own order, :data:`tecomp.ops.butterfly_grad.KEEP_ADJOINTS`).  At ``n = 512``, where
    a stage's data fit in L2, the fewest passes were 1.1-1.5x slower than pairs; at 1024 the
    two groupings are the same.  ``dct`` sets ``fewest_passes`` from ``n >= 2048``.
    """
    pats = [tuple(int(v) for v in p) for p in patterns]
    if fewest_passes:
        return best_grouping(pats, 3)
    L = len(pats)
    if L % 2:
        sizes = [2] * ((L - 3) // 2) + [3] if L >= 3 else [1]
    elif fewer_passes and L >= 6:
        sizes = [3] + [2] * ((L - 6) // 2) + [3]
    else:
        return best_grouping(pats, 2)
    try:
        start = 0
        for g in sizes:
            p = pats[start]
            for q in pats[start + 1:start + g]:
                p = fused_pattern(p, q)
            start += g
    except ValueError:
        return best_grouping(pats, 2)
    return sizes
