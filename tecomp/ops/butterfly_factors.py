"""Kronecker-sparse (butterfly) factors and fully real fast DCT-II / DST-II / DHT chains.

Kronecker-sparse factors
------------------------
A factor of pattern ``(a, b, c, d)`` is stored as a 4-D array ``T`` of shape ``(a, b, c, d)``.
It represents the matrix ``M`` of shape ``(a*b*d, a*c*d)`` with support
``I_a (x) 1_{b x c} (x) I_d``::

    M[i*b*d + j*d + l, i*c*d + k*d + l] = T[i, j, k, l]

and zero elsewhere.  Applying it to ``X`` of shape ``(a*c*d, batch)`` is
``Y[i, j, l, n] = sum_k T[i, j, k, l] * X[i, k, l, n]`` (``a*b*c*d`` multiply-adds per column).

Chainability.  ``M_1 M_2 ... M_L`` is defined when, for every ``l``, the column count of
``M_l`` equals the row count of ``M_{l+1}``: ``a_l c_l d_l = a_{l+1} b_{l+1} d_{l+1}``.
The butterfly-factorization literature (Le, Zheng, Riccietti, Gribonval) additionally asks
the block structures to nest: ``r_l = a_l c_l / a_{l+1} = b_{l+1} d_{l+1} / d_l`` must be a
positive integer (given the size equality, the two ratios are equal, so it suffices that
``a_{l+1}`` divides ``a_l c_l``).  ``r_l`` is the "rank" of the chain at that junction; it is
1 for the square-dyadic and Monarch chains and 2 for the real chains built below.

The complex DFT as a butterfly
------------------------------
Radix-2 decimation in time: ``F_m = B_m (I_2 (x) F_{m/2}) S_m`` with ``S_m`` the even/odd split
and ``B_m = [[I, W], [I, -W]]``, ``W = diag(w_m^l)``, ``w_m = exp(-2i*pi/m)``, ``l < m/2``.
Unrolling, ``F = K_1 ... K_L P`` (``n = 2^L``) where ``P`` is the bit-reversal permutation and
``K_l = I_{2^(l-1)} (x) B_{n/2^(l-1)}`` has pattern ``(2^(l-1), 2, 2, n/2^l)`` with
``K_l[i, j, 0, l] = 1`` and ``K_l[i, j, 1, l] = (-1)^j w_{2d}^l`` (``d = n/2^l``).

Transforms as real parts
------------------------
* DCT-II (Makhoul).  With ``v = R x = [x0, x2, x4, ..., x5, x3, x1]`` (even samples, then odd
  samples reversed: ``v[m] = x[2m]`` for ``m < n/2``, ``v[m] = x[2n-1-2m]`` otherwise),
  ``sum_m x_m cos(pi k (2m+1) / (2n)) = Re(exp(-i pi k / (2n)) * FFT(v)_k)``.  Hence the
  orthonormal DCT-II is ``Re(D F R x)`` with ``D = diag(s_k exp(-i pi k / (2n)))``,
  ``s_0 = 1/sqrt(n)``, ``s_k = sqrt(2/n)``.
* DST-II.  Writing ``k + 1 = n - k'`` gives ``sin(pi (k+1)(2m+1)/(2n)) =
  (-1)^m cos(pi k'(2m+1)/(2n))``, so ``DST(x)[k] = DCT((-1)^m x_m)[n-1-k]`` -- including the
  orthonormal scales (scipy scales the last DST output like the first DCT output).  So
  ``DST = J * DCT * diag((-1)^m)`` with ``J`` the reversal.
* DHT.  ``H = Re((1+i) F) / sqrt(n)``, i.e. ``D = (1+i)/sqrt(n) * I`` and no ``R``.

In all three cases the transform is ``Re(D K_1 ... K_L Q x)`` with ``Q = P R`` (or ``P``), i.e. a
single gather ``x[perm]`` with ``perm[m] = r(bitrev(m))``.

Realification without inter-factor permutations
-----------------------------------------------
A complex vector of length ``N`` is stored as a real vector of length ``2N`` by inserting one
real/imaginary bit ``s`` somewhere in the binary expansion of the index.  A complex entry ``t``
acts on ``(Re z, Im z)`` through the block ``[[Re t, -Im t], [Im t, Re t]]``.  For a complex
factor of pattern ``(a, b, c, d)`` the real factor keeps the Kronecker-sparse support as long
as the row bit ``r`` sits inside the ``b`` digit and the column bit ``s`` inside the ``c``
digit.  We put ``r`` *before* ``j`` (row digit ``2r + j``) and ``s`` *after* ``k`` (column
digit ``2k + s``).  For ``K_l`` the ``k`` digit is bit ``l`` of the complex index (from the
most significant side) so its input stores the real/imag bit between bits ``l`` and ``l+1``;
for ``K_{l+1}`` the ``j`` digit is bit ``l+1``, so its output stores the bit at the very same
place.  Consecutive real factors therefore compose directly: every permutation one would
insert between them is the identity and nothing is materialised between factors.

* ``M_1`` (output side): only ``Re`` is kept and ``D`` is folded in, pattern ``(1, 2, 4, n/2)``
  with ``M_1[0, j, 2k+s, l] = Re(u)`` for ``s = 0`` and ``-Im(u)`` for ``s = 1``,
  ``u = D[j*n/2 + l] * K_1[0, j, k, l]``.
* ``M_l`` (``1 < l < L``): pattern ``(2^(l-1), 4, 4, n/2^l)``, full ``2 x 2`` blocks.
* ``M_L`` (input side, real input): pattern ``(n/2, 4, 2, 1)``, ``M_L[i, 2r+j, k, 0] = Re`` /
  ``Im`` of ``K_L[i, j, k, 0]`` for ``r = 0 / 1``.
* ``n = 2``: a single real factor ``Re(D K_1)``, pattern ``(1, 2, 2, 1)``.

Cost (multiply-adds per column, ``sum a*b*c*d``): ``4n + 8n(L-2) + 4n = 8 n (L-1)`` for
``n >= 4`` and ``4`` for ``n = 2``.

DST reversal.  Reversing all rows and all columns of a Kronecker-sparse factor maps the entry
at ``(i, j, k, l)`` to ``(a-1-i, b-1-j, c-1-k, d-1-l)``: the support is unchanged and the new
array is ``T[::-1, ::-1, ::-1, ::-1]``.  Therefore ``J M_1 ... M_L x[perm] = (J M_1 J) ...
(J M_L J) x[perm[::-1]]``: the output reversal is folded into the factors and the gather, and
``out_perm`` is ``None`` for every kind (``fold_output_perm=False`` keeps it explicit instead).
The DST sign ``(-1)^m`` is folded into the columns of ``M_L``.

Worked example, DCT-II with n = 4 (L = 2)
-----------------------------------------
``bitrev = [0, 2, 1, 3]``, ``R``: ``v = [x0, x2, x3, x1]``, so ``perm = [0, 3, 2, 1]``.
Complex chain: ``K_2`` pattern ``(2, 2, 2, 1)`` holds two blocks ``[[1, 1], [1, -1]]``;
``K_1`` pattern ``(1, 2, 2, 2)``: ``K_1[0, j, 0, l] = 1``, ``K_1[0, j, 1, l] = (-1)^j (-i)^l``.
Real chain: ``M_2`` pattern ``(2, 4, 2, 1)``: rows ``r = 0`` repeat ``[[1, 1], [1, -1]]`` and
rows ``r = 1`` are zero (``K_L`` is real); its 8 outputs are laid out as ``(i, r, j)``, which is
exactly the ``(k, s, l)`` column layout of ``M_1`` (pattern ``(1, 2, 4, 2)``).  ``M_1`` maps
them to ``y[2j + l] = Re(D_{2j+l} (z_{0,l} + (-1)^j (-i)^l z_{1,l}))``.  Cost ``16 + 16 = 32
= 8 * 4 * 1``.  Then ``y = M_1 M_2 x[perm]`` equals ``scipy.fft.dct(x, 2, norm="ortho")``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Pattern = tuple[int, int, int, int]

__all__ = [
    "Pattern",
    "apply_kron_sparse",
    "apply_real_butterfly",
    "butterfly_cost",
    "check_chainable",
    "dft_butterfly",
    "kron_sparse_dense",
    "monarch_patterns",
    "real_butterfly",
    "square_dyadic_patterns",
]

_KINDS = ("dct2", "dst2", "dht")


# ----------------------------------------------------------------------------------------------
# Kronecker-sparse factors
# ----------------------------------------------------------------------------------------------


def _pattern_of(T: np.ndarray) -> Pattern:
    if T.ndim != 4:
        raise ValueError(f"a Kronecker-sparse factor must be 4-D (a, b, c, d), got shape {T.shape}")
    a, b, c, d = (int(s) for s in T.shape)
    return a, b, c, d


def kron_sparse_dense(T: np.ndarray) -> np.ndarray:
    """Dense ``(a*b*d, a*c*d)`` matrix of the Kronecker-sparse factor ``T`` (shape (a,b,c,d))."""
    T = np.asarray(T)
    a, b, c, d = _pattern_of(T)
    i = np.arange(a)[:, None, None, None]
    j = np.arange(b)[None, :, None, None]
    k = np.arange(c)[None, None, :, None]
    l_ = np.arange(d)[None, None, None, :]
    rows = np.broadcast_to(i * b * d + j * d + l_, T.shape)
    cols = np.broadcast_to(i * c * d + k * d + l_, T.shape)
    M = np.zeros((a * b * d, a * c * d), dtype=T.dtype)
    M[rows, cols] = T
    return M


def apply_kron_sparse(T: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Apply the factor ``T`` to ``X`` of shape ``(a*c*d,)`` or ``(a*c*d, batch)``."""
    T = np.asarray(T)
    X = np.asarray(X)
    a, b, c, d = _pattern_of(T)
    vector = X.ndim == 1
    if vector:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] != a * c * d:
        raise ValueError(
            f"factor of pattern {(a, b, c, d)} needs {a * c * d} input rows, got shape {X.shape}"
        )
    batch = X.shape[1]
    Y = np.einsum("ijkl,ikln->ijln", T, X.reshape(a, c, d, batch))
    Y = Y.reshape(a * b * d, batch)
    return Y[:, 0] if vector else Y


def butterfly_cost(patterns: Sequence[Sequence[int]]) -> int:
    """Multiply-adds per column of a chain: ``sum(a*b*c*d)``."""
    return int(sum(math.prod(int(v) for v in p) for p in patterns))


# ----------------------------------------------------------------------------------------------
# Pattern families and chainability
# ----------------------------------------------------------------------------------------------


def _as_pattern(p: Sequence[int], pos: int) -> Pattern:
    vals = tuple(p)
    if len(vals) != 4 or any(int(v) != v or int(v) < 1 for v in vals):
        raise ValueError(f"pattern at position {pos} must be 4 positive integers, got {p!r}")
    a, b, c, d = (int(v) for v in vals)
    return a, b, c, d


def check_chainable(patterns: Sequence[Sequence[int]], *, strict: bool = True) -> None:
    """Raise ``ValueError`` unless the patterns form a chain ``M_1 M_2 ... M_L``.

    Always checked, for each consecutive pair (positions ``l`` and ``l+1``, 0-based): the column
    count ``a_l*c_l*d_l`` of ``M_l`` equals the row count ``a_{l+1}*b_{l+1}*d_{l+1}``.  With
    ``strict`` (default) also the chainability condition of the butterfly literature:
    ``a_{l+1}`` divides ``a_l*c_l`` (equivalently ``d_l`` divides ``b_{l+1}*d_{l+1}``; the
    common quotient is the junction rank ``r_l``).
    """
    pats = [_as_pattern(p, pos) for pos, p in enumerate(patterns)]
    if not pats:
        raise ValueError("a chain needs at least one pattern")
    for pos in range(len(pats) - 1):
        a, _, c, d = pats[pos]
        a2, b2, _, d2 = pats[pos + 1]
        if a * c * d != a2 * b2 * d2:
            raise ValueError(
                f"patterns at positions {pos} and {pos + 1} do not compose: factor {pos} "
                f"{pats[pos]} has {a * c * d} columns but factor {pos + 1} {pats[pos + 1]} "
                f"has {a2 * b2 * d2} rows"
            )
        if strict and ((a * c) % a2 != 0 or (b2 * d2) % d != 0):
            raise ValueError(
                f"patterns at positions {pos} and {pos + 1} are not chainable: "
                f"a_{pos + 1}={a2} must divide a_{pos}*c_{pos}={a * c} "
                f"(and d_{pos}={d} must divide b_{pos + 1}*d_{pos + 1}={b2 * d2})"
            )


def _log2_exact(n: int, what: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2 or n & (n - 1):
        raise ValueError(f"{what} must be a power of two >= 2, got {n!r}")
    return int(n).bit_length() - 1


def square_dyadic_patterns(n: int) -> list[Pattern]:
    """Patterns ``(2^(l-1), 2, 2, n/2^l)`` for ``l = 1..log2(n)`` (``n`` a power of two >= 2)."""
    L = _log2_exact(n)
    return [(2 ** (ell - 1), 2, 2, n >> ell) for ell in range(1, L + 1)]


def monarch_patterns(m: int, n: int, p: int, q: int) -> list[Pattern]:
    """Monarch patterns ``[(1, p, q, m/p), (q, m/p, n/q, 1)]`` of an ``m x n`` matrix."""
    for name, v in (("m", m), ("n", n), ("p", p), ("q", q)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if m % p:
        raise ValueError(f"p={p} must divide m={m}")
    if n % q:
        raise ValueError(f"q={q} must divide n={n}")
    return [(1, int(p), int(q), int(m // p)), (int(q), int(m // p), int(n // q), 1)]


# ----------------------------------------------------------------------------------------------
# Complex DFT butterfly
# ----------------------------------------------------------------------------------------------


def _bit_reversal(L: int) -> np.ndarray:
    idx = np.arange(1 << L, dtype=np.int64)
    rev = np.zeros_like(idx)
    for bit in range(L):
        rev |= ((idx >> bit) & 1) << (L - 1 - bit)
    return rev


def _dft_factor(n: int, ell: int) -> np.ndarray:
    """Complex ``K_ell`` of pattern ``(2^(ell-1), 2, 2, n/2^ell)``."""
    a, d = 1 << (ell - 1), n >> ell
    twiddle = np.exp(-2j * np.pi * np.arange(d) / (2 * d))
    K = np.empty((a, 2, 2, d), dtype=np.complex128)
    K[:, :, 0, :] = 1.0
    K[:, 0, 1, :] = twiddle
    K[:, 1, 1, :] = -twiddle
    return K


def dft_butterfly(n: int) -> tuple[np.ndarray, list[Pattern], list[np.ndarray]]:
    """Radix-2 factorization ``F = K_1 ... K_L P`` of the (unnormalised) DFT matrix.

    Returns ``(perm, patterns, factors)`` with ``F x = K_1 ... K_L x[perm]`` (``perm`` is the
    bit reversal) and ``factors[0] = K_1`` complex of pattern ``(1, 2, 2, n/2)``.
    """
    L = _log2_exact(n)
    factors = [_dft_factor(n, ell) for ell in range(1, L + 1)]
    return _bit_reversal(L), square_dyadic_patterns(n), factors


# ----------------------------------------------------------------------------------------------
# Real butterflies of DCT-II / DST-II / DHT
# ----------------------------------------------------------------------------------------------


def _realify(K: np.ndarray, complex_out: bool, complex_in: bool) -> np.ndarray:
    """Real factor acting on (re, im) splits: row digit ``2r + j``, column digit ``2k + s``."""
    a, b, c, d = K.shape
    re, im = K.real, K.imag
    if not complex_out and not complex_in:
        R = re.copy()
    elif not complex_out:  # real output only: [Re, -Im] along s
        R = np.stack([re, -im], axis=3).reshape(a, b, 2 * c, d)
    elif not complex_in:  # real input only: [Re; Im] along r
        R = np.stack([re, im], axis=1).reshape(a, 2 * b, c, d)
    else:
        top = np.stack([re, -im], axis=3)
        bottom = np.stack([im, re], axis=3)
        R = np.stack([top, bottom], axis=1).reshape(a, 2 * b, 2 * c, d)
    return np.ascontiguousarray(R, dtype=np.float64)


def _output_weights(n: int, kind: str) -> np.ndarray:
    """Diagonal ``D`` applied to the DFT output (length ``n``, complex)."""
    if kind == "dht":
        return np.full(n, (1.0 + 1.0j) / math.sqrt(n))
    k = np.arange(n)
    scale = np.full(n, math.sqrt(2.0 / n))
    scale[0] = 1.0 / math.sqrt(n)
    return scale * np.exp(-1j * np.pi * k / (2 * n))


def _input_perm(n: int, L: int, kind: str) -> np.ndarray:
    rev = _bit_reversal(L)
    if kind == "dht":
        return rev
    m = np.arange(n, dtype=np.int64)
    makhoul = np.where(m < n // 2, 2 * m, 2 * n - 1 - 2 * m)  # v = x[makhoul]
    return makhoul[rev]


def real_butterfly(
    n: int, kind: str, *, fold_output_perm: bool = True
) -> tuple[np.ndarray, list[Pattern], list[np.ndarray], np.ndarray | None]:
    """Fully real Kronecker-sparse factorization of an orthonormal real transform.

    ``kind`` is ``"dct2"`` (``scipy.fft.dct(x, 2, norm="ortho", axis=0)``), ``"dst2"``
    (``scipy.fft.dst(x, 2, norm="ortho", axis=0)``) or ``"dht"`` (``(Re - Im)(fft(x)) / sqrt(n)``);
    ``n`` a power of two >= 2.

    Returns ``(perm, patterns, factors, out_perm)`` such that
    ``y = factors[0] @ factors[1] @ ... @ factors[-1] @ x[perm]`` (each factor read as its
    Kronecker-sparse matrix, ``factors[-1]`` applied first) and the transform is ``y`` if
    ``out_perm is None`` else ``y[out_perm]``.  ``perm`` is an int64 gather on axis 0,
    ``patterns[l] == factors[l].shape``, all factors are float64.  ``out_perm`` is always
    ``None`` unless ``fold_output_perm=False``, which returns the DST-II with an explicit output
    reversal ``out_perm = [n-1, ..., 0]`` instead of reversing every factor.

    Patterns (``L = log2 n >= 2``): ``(1, 2, 4, n/2)``, ``(2^(l-1), 4, 4, n/2^l)`` for
    ``1 < l < L``, ``(n/2, 4, 2, 1)``; ``n = 2`` gives ``[(1, 2, 2, 1)]``.  Cost ``8 n (L-1)``
    multiply-adds per column (``4`` for ``n = 2``).
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    L = _log2_exact(n)
    weights = _output_weights(n, kind)
    complex_factors = [_dft_factor(n, ell) for ell in range(1, L + 1)]
    complex_factors[0] = complex_factors[0] * weights.reshape(1, 2, 1, n // 2)
    factors = [
        _realify(K, complex_out=ell > 0, complex_in=ell < L - 1)
        for ell, K in enumerate(complex_factors)
    ]
    perm = _input_perm(n, L, kind)
    out_perm: np.ndarray | None = None
    if kind == "dst2":
        # DST(x) = J DCT(diag((-1)^m) x): the sign goes onto the input columns of M_L.
        last = factors[-1]
        a, _, c, d = last.shape
        sign = np.where(perm % 2 == 0, 1.0, -1.0).reshape(a, 1, c, d)
        factors[-1] = last * sign
        if fold_output_perm:
            factors = [np.ascontiguousarray(T[::-1, ::-1, ::-1, ::-1]) for T in factors]
            perm = np.ascontiguousarray(perm[::-1])
        else:
            out_perm = np.arange(n - 1, -1, -1, dtype=np.int64)
    patterns: list[Pattern] = [_pattern_of(T) for T in factors]
    return perm.astype(np.int64), patterns, factors, out_perm


def apply_real_butterfly(
    data: tuple[np.ndarray, Sequence[Pattern], Sequence[np.ndarray], np.ndarray | None],
    X: np.ndarray,
) -> np.ndarray:
    """Apply ``(perm, patterns, factors, out_perm)`` to ``X`` of shape ``(n,)``/``(n, batch)``."""
    perm, patterns, factors, out_perm = data
    X = np.asarray(X)
    if X.ndim not in (1, 2) or X.shape[0] != len(perm):
        raise ValueError(f"expected input of shape ({len(perm)},) or ({len(perm)}, batch)")
    if [tuple(p) for p in patterns] != [_pattern_of(np.asarray(T)) for T in factors]:
        raise ValueError("patterns do not match the factor shapes")
    Y = X[perm]
    for T in reversed(factors):
        Y = apply_kron_sparse(T, Y)
    if out_perm is not None:
        Y = Y[out_perm]
    return Y
