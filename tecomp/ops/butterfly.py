"""Kronecker-sparse products and real butterfly transforms in the DSL.

A Kronecker-sparse factor of pattern ``(a, b, c, d)`` is stored compactly as ``T`` of shape
``(a, b, c, d)``: the matrix of shape ``(a·b·d, a·c·d)`` whose entry
``[i·b·d + j·d + l, i·c·d + k·d + l]`` is ``T[i, j, k, l]`` (support ``I_a ⊗ 1_{b×c} ⊗ I_d``).
:func:`kron_sparse_matmul` applies it to a batch with ``a·b·c·d·batch`` multiply-adds.
:func:`dct` chains the fully real factors of :func:`real_butterfly` (see
:mod:`tecomp.ops.butterfly_factors` for their construction), fused mostly in pairs by
default (:mod:`tecomp.ops.butterfly_fuse`), each stage with its products written out and the input
permutation as index arithmetic (:mod:`tecomp.ops.butterfly_gather`).  Each stage declares its
adjoint, the transposed factor (:mod:`tecomp.ops.butterfly_grad`): a gradient costs what the
forward costs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import dsl as tc
from ..errors import DeclarationError
from ..tensor import Tensor
from .butterfly_factors import check_chainable, real_butterfly
from .butterfly_fuse import auto_grouping, best_grouping, fuse_chain
from .butterfly_gather import bit_affine_form, bit_linear_split
from .butterfly_grad import declare_stage_rule, permuted_input, row_input, stage_input


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
    Y = tc.compute(
        (a * b * d, X.shape[1]),
        lambda r, n: tc.sum(T[r // bd, (r // d) % b, k, r % d]
                            * X[(r // bd) * cd + k * d + r % d, n], axis=k),
        name=name, tag="kron_sparse")
    declare_stage_rule(Y, T, X, (a, b, c, d), row_input((a, b, c, d)),
                       lambda i, k_, l_, n: X[i * cd + k_ * d + l_, n],
                       canonical_out=True, unroll=False)
    return Y


def _reader(S: Tensor, b: int, d: int):
    """Read canonical row ``m = i·b·d + j·d + l`` of a stage stored as ``S[i, l, j, n]``."""
    bd = b * d
    return lambda m, n: S[m // bd, m % d, (m // d) % b, n]


#: leave out the products with structural zeros in :func:`dct` (its ``sparse``); False: write
#: them all whatever ``sparse`` says (an A/B switch of ``benchmarks/ab_cpu_steps.py``)
SPARSE_TERMS = True


def sparse_terms(T: np.ndarray, tol: float = 0.0) -> list | None:
    """The terms a stage of the constant factor ``T`` (shape ``(a, b, c, d)``) must write out
    when every output row ``j`` has the same number of structural zeros: ``T[:, j, k, :]``
    zero (``|.| <= tol``) for all blocks ``i`` and offsets ``l``.

    Row ``j`` keeps its nonzero ``k`` in increasing order, ``K_j``; term ``t`` reads
    ``K_j[t]``, a constant where all rows agree, else ``k0 + step·((j // s) % r)`` (the form
    the real butterfly's middle factors have: of the ``k = 0, 1`` pair, rows ``j < b/2`` keep
    ``k = 0`` and the others ``k = 1``, ``k = j // (b/2)``).  ``None`` where no row has a zero,
    the rows differ in their number of zeros, or a term's ``k`` has no such form: the stage
    then writes all ``c`` terms.
    """
    T = np.asarray(T)
    zero = np.all(np.abs(T) <= tol, axis=(0, 3))  # (b, c)
    counts = zero.sum(axis=1)
    b, c = zero.shape
    if counts[0] == 0 or np.any(counts != counts[0]) or counts[0] == c:
        return None
    keep = np.array([np.flatnonzero(~zero[j]) for j in range(b)])  # (b, m)
    terms: list = []
    for v in keep.T:
        if np.all(v == v[0]):
            terms.append(int(v[0]))
            continue
        form = _periodic_form(v)
        if form is None:
            return None
        terms.append(form)
    return terms


def _periodic_form(v: np.ndarray) -> tuple[int, int, int, int] | None:
    """``(k0, s, r, step)`` with ``v[j] == k0 + step·((j // s) % r)`` for all ``j``, or None."""
    j = np.arange(len(v))
    for s in range(1, len(v)):
        for r in range(2, len(v) // s + 1):
            step = int(v[s] - v[0])
            if step and np.array_equal(v, v[0] + step * ((j // s) % r)):
                return int(v[0]), s, r, step
    return None


def _term_k(term, j, b: int):
    """The ``k`` a term of :func:`sparse_terms` reads for output row ``j`` (of ``b``)."""
    if isinstance(term, int):
        return term
    k0, s, r, step = term
    q = j // s if s > 1 else j
    return k0 + step * (q % r if s * r < b else q)


#: the staged last factor keeps its buffer (``staged_out``): small enough, the inliner would
#: put its terms into the copy's loop, in the copy's row order (an A/B switch)
KEEP_STAGED = True


def _terms(T: Tensor, c: int, unroll: bool, read_k, i, j, l_, terms: list | None = None):
    """``sum_k T[i, j, k, l] * read_k(k)``: a ``tc.sum`` over a reduction axis, or with
    ``unroll`` the ``c`` products written out (``k`` a constant in each), or only the
    ``terms`` of :func:`sparse_terms` (the others are structural zeros)."""
    if unroll:
        ks = list(range(c)) if terms is None else [
            _term_k(t, j, int(T.shape[1].value)) for t in terms]
        total = T[i, j, ks[0], l_] * read_k(ks[0])
        for kk in ks[1:]:
            total = total + T[i, j, kk, l_] * read_k(kk)
        return total
    k = tc.reduce_axis(c, name="k")
    return tc.sum(T[i, j, k, l_] * read_k(k), axis=k)


def _input_reader(X: Tensor, perm, first: tuple[int, int, int, int], unroll: bool, name: str):
    """``(read, layout, tables)`` for the first factor applied: ``read(i, k, l, n) =
    X[perm[i·c·d + k·d + l], n]``, the layout of ``X``'s adjoint (None: no declared rule, the
    generic adjoint of a table gather) and the int tensors ``read`` uses."""
    a, _, c, d = first
    if perm is None:
        return lambda i, k, l_, n: X[i * (c * d) + k * d + l_, n], row_input(first), ()
    if isinstance(perm, Tensor):
        P = perm
        return lambda i, k, l_, n: X[P[i * (c * d) + k * d + l_], n], None, (P,)
    table = np.asarray(perm, dtype=np.int64)
    if table.shape != (a * c * d,) or table.min() < 0 or table.max() >= a * c * d:
        raise DeclarationError(f"butterfly_chain {name}: perm must hold {a * c * d} "
                               f"entries in [0, {a * c * d}), got shape {table.shape}")
    try:
        layout = permuted_input(first, table, name)
    except ValueError as err:
        raise DeclarationError(f"butterfly_chain {name}: perm {err}") from None
    split = bit_linear_split(table, a, c) if unroll and d == 1 else None
    form = bit_affine_form(table)
    if split is not None and form is not None:  # index arithmetic, no table (butterfly_gather)
        bits = (a * c).bit_length() - 1

        def read(i, k, l_, n):  # a constant k (the unrolled terms) or any k (gradients)
            if isinstance(k, int):
                return split.read(X, i, k, n)
            return X[form.field(i * c + k, 0, bits), n]
        return read, layout, ()
    P = tc.constant(table, name=f"{name}_perm")
    return lambda i, k, l_, n: X[P[i * (c * d) + k * d + l_], n], layout, (P,)


def _stage_reader(S: Tensor, b: int, d: int, c2: int, d2: int):
    """``read(i, k, l, n)`` for the factor of pattern ``(., ., c2, d2)`` that reads stage
    ``S`` (pattern ``(., b, ., d)``, stored as ``S[i, l, j, n]``): its row
    ``m = i·c2·d2 + k·d2 + l`` in the canonical order of ``S``."""
    flat = _reader(S, b, d)
    return lambda i, k, l_, n: flat(i * (c2 * d2) + k * d2 + l_, n)


def butterfly_chain(X: Tensor, patterns: Sequence[Sequence[int]],
                    factors: Sequence[Tensor], name: str = "butterfly",
                    perm: Tensor | np.ndarray | None = None, *, unroll: bool = False,
                    staged_out: bool = False,
                    terms: Sequence[list | None] | None = None) -> Tensor:
    """``M_1 ⋯ M_L · X[perm]`` for Kronecker-sparse factors (``factors[0]`` is applied last).

    ``X`` has shape ``(rows, batch)`` with ``rows = a_L·c_L·d_L``; the result has shape
    ``(a_1·b_1·d_1, batch)`` in the canonical row order.  ``perm`` (optional) gathers the input
    rows inside the first stage: an int tensor of length ``rows`` (read as a table), or a
    NumPy int array (a constant; with ``unroll``, a bit-linear one becomes index arithmetic,
    see :mod:`tecomp.ops.butterfly_gather`, else a constant table).

    Every intermediate stage of pattern ``(a, b, c, d)`` is stored as ``S[i, l, j, n]``
    (shape ``(a, d, b, batch)``) instead of the canonical ``(i, j, l)`` row order: the loops
    then run ``i, l, j, (k,) n`` and the ``c`` input rows and ``b`` output rows of one
    ``(i, l)`` stay in cache, while the next stage finds its rows by index arithmetic alone
    (no permutation is materialised).  Cost: ``sum a·b·c·d`` multiply-adds per column.

    ``unroll`` writes each stage's ``c`` products out instead of a ``tc.sum``: the innermost
    loop runs over the batch (unit stride) with the ``c`` factor values of one output row
    held in registers, and each output element is stored once.  (A ``tc.sum`` stage is
    zero-filled first and register-blocked by the CPU schedule over 4 output rows, whose
    ``4·c`` factor values do not fit the 16 AVX2 registers; the DCT of 1024 points on 128
    columns, same factors and gather, took 0.61 ms unrolled against 0.78 ms, one thread.)
    The multiplies are
    the same; ``tc.cost`` counts one add fewer per output element (no add to a zero start).

    Gradients: every stage declares its adjoint (:mod:`tecomp.ops.butterfly_grad`), the
    transposed factor with respect to its input and one product per entry with respect to its
    factor, each as many multiply-adds as the stage; a constant ``perm`` is inverted exactly
    (checked to be a bijection) and its inverse read as index arithmetic where it is bit-affine.
    A ``perm`` tensor leaves the first stage to the generic adjoint (a scatter).

    ``staged_out`` computes the last factor applied (pattern ``(a, b, c, d)``) as a stage
    ``S[i, l, j, n]`` too and then copies it into the canonical row order.  Computed in that
    order directly, its loops run ``r = i·b·d + j·d + l`` with ``l`` inside ``j``: each of the
    ``b`` output rows of one ``(i, l)`` re-reads the same ``c`` input rows after ``d - 1``
    others (``c`` rows ``d`` rows apart: a power-of-two stride that also maps them to the same
    cache sets).  Staged, the ``c`` rows stay in cache for the ``b`` outputs, at the price of
    one copy of the result -- the order the gradient's chain has (its first transposed stage
    is staged, its last step a gather).  Measured on the DCT-II with ``fuse="auto"``, batch
    128, float64, one thread (loaded machine, one process): ``n = 1024`` 1.55 -> 1.37 ms,
    ``n = 4096`` 17.1 -> 13.1 ms.  No effect when ``d == 1`` (the two orders agree).  The
    stage keeps its buffer (``attrs["keep_buffer"]``, :data:`KEEP_STAGED`): a stage of few
    terms (the DCT's at 2048 points: a pair of factors, 8 terms) was small enough for the
    inliner, which computed it in the copy's order after all (one Intel Xeon core, batch 128,
    2048 points, ``python -m benchmarks.ab_cpu_steps --only keep_staged``: float32 0.68 ->
    0.61 ms, float64 1.57 -> 1.52 ms; gradients 0.98-1.04x); the CPU schedule then forwards
    the copy into the stage's stores (``copy_forward``).

    ``terms`` (with ``unroll``; one entry per factor, ``None`` for all ``c`` terms) writes out
    only the terms :func:`sparse_terms` found in a constant factor: the products with its
    structural zeros are left out (an eighth of the middle factors of the real DCT chain).
    """
    pats = [_check_pattern(p, f"butterfly_chain {name}") for p in patterns]
    if len(pats) != len(factors):
        raise DeclarationError(f"butterfly_chain {name}: {len(pats)} patterns but "
                               f"{len(factors)} factors")
    try:
        check_chainable(pats, strict=False)
    except ValueError as err:
        raise DeclarationError(f"butterfly_chain {name}: {err}") from None
    if terms is not None and (len(terms) != len(pats) or not unroll):
        raise DeclarationError(f"butterfly_chain {name}: terms needs unroll and one entry per "
                               f"factor ({len(pats)}), got {len(terms)}")
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
    read, layout, tables = _input_reader(X, perm, pats[-1], unroll, name)  # read(i, k, l, n)
    src = X
    for level in range(len(pats) - 1, -1, -1):
        a, b, c, d = pats[level]
        T, bd = factors[level], b * d
        plan = terms[level] if terms is not None else None
        staged = level > 0 or (staged_out and d > 1)
        if not staged:  # the result, in canonical row order
            S = tc.compute(
                (a * b * d, batch),
                lambda r, n, T=T, read=read, b=b, c=c, d=d, bd=bd, plan=plan: _terms(
                    T, c, unroll, lambda k: read(r // bd, k, r % d, n),
                    r // bd, (r // d) % b, r % d, plan),
                name=name if len(pats) == 1 else f"{name}1", tag="kron_sparse")
        else:
            S = tc.compute(
                (a, d, b, batch),
                lambda i, l_, j, n, T=T, read=read, c=c, plan=plan: _terms(
                    T, c, unroll, lambda k: read(i, k, l_, n), i, j, l_, plan),
                name=f"{name}{level + 1}" if level else f"{name}1_staged", tag="kron_sparse")
        if layout is not None:  # the transposed factor as its adjoint (butterfly_grad)
            declare_stage_rule(S, T, src, pats[level], layout, read,
                               canonical_out=not staged, unroll=unroll, tables=tables)
        if level == 0:
            if not staged:
                return S
            S.attrs["keep_buffer"] = KEEP_STAGED  # inlined into the copy, it is not staged
            return tc.compute((a * bd, batch), lambda r, n, S=S, b=b, d=d, bd=bd: S[
                r // bd, r % d, (r // d) % b, n], name=name if len(pats) == 1 else f"{name}1")
        read = _stage_reader(S, b, d, pats[level - 1][2], pats[level - 1][3])
        layout = stage_input(pats[level - 1], b, d, (a, d, b))
        src, tables = S, ()
    raise AssertionError("unreachable")


def _factor_view(T: np.ndarray, name: str) -> Tensor:
    """The factor ``T`` (shape ``(a, b, c, d)``) as a view of a constant stored ``(a, d, b, c)``."""
    P = tc.constant(np.ascontiguousarray(T.transpose(0, 3, 1, 2)), name=f"{name}_p")
    return tc.compute(T.shape, lambda i, j, k, l_: P[i, l_, j, k], name=name)


def dct(X: Tensor, kind: str = "dct2", name: str | None = None, *,
        fuse: int | str = "auto", sparse: bool = True) -> Tensor:
    """The orthonormal DCT-II / DST-II / DHT of ``X`` (shape ``(n, batch)``) along axis 0.

    Matches ``scipy.fft.dct(x, type=2, norm="ortho", axis=0)`` (``dst`` for ``"dst2"``; the
    DHT is ``Re((1+i)·F)/√n``).  ``n`` must be a power of two.

    ``fuse=1`` applies the ``L`` real factors of :func:`real_butterfly` (``8·n·(L-1)``
    multiply-adds per column).  ``fuse=g > 1`` first multiplies up to ``g`` adjacent factors
    into one (:mod:`tecomp.ops.butterfly_fuse`): fewer passes over the batch; ``g = 2`` also
    needs fewer multiply-adds (``8·n·(L-1) - 8·n`` for ``L >= 4``: the end pairs shrink).
    ``fuse="auto"`` (the default) picks the grouping with
    :func:`~tecomp.ops.butterfly_fuse.auto_grouping`.

    The factors are constants: each stage is written with its products unrolled and the input
    permutation as index arithmetic (``butterfly_chain(..., unroll=True)``).  With ``sparse``
    (the default) a stage leaves out the products with its factor's structural zeros where
    every output row has as many (:func:`sparse_terms`; the fused middle factors of the chain,
    one term in eight; the result is the same for finite inputs, where ``0 · inf`` gave a
    NaN): ``sparse=False`` writes all of them.
    """
    if fuse != "auto" and (isinstance(fuse, bool) or not isinstance(fuse, int) or fuse < 1):
        raise DeclarationError(f"dct of {X.name}: fuse must be \"auto\" or an int >= 1, got "
                               f"{fuse!r}")
    if X.ndim != 2 or not hasattr(X.shape[0], "value"):
        raise DeclarationError(f"dct: {X.name} must be 2-D (n, batch) with a constant n")
    if X.dtype not in ("float16", "float32", "float64"):
        raise DeclarationError(f"dct: {X.name} must be a float tensor, got {X.dtype}")
    n = int(X.shape[0].value)
    try:
        perm, patterns, factors, out_perm = real_butterfly(n, kind)
    except ValueError as err:
        raise DeclarationError(f"dct of {X.name}: {err}") from None
    if fuse == "auto":
        groups = auto_grouping(patterns, fewer_passes=n >= 1024,  # stages beyond L2
                               fewest_passes=n >= 2048)
        patterns, factors = fuse_chain(patterns, factors, groups)
    elif fuse > 1:
        patterns, factors = fuse_chain(patterns, factors, best_grouping(patterns, fuse))
    name = name or kind
    terms = [sparse_terms(f) for f in factors] if sparse and SPARSE_TERMS else None
    Ts = [_factor_view(np.asarray(f, dtype=np.float64).astype(X.dtype), f"{name}_T{i + 1}")
          for i, f in enumerate(factors)]
    Y = butterfly_chain(X, patterns, Ts, name=f"{name}_M", perm=np.asarray(perm, np.int64),
                        unroll=True, staged_out=n >= 1024, terms=terms)
    if out_perm is not None:
        Q = tc.constant(np.asarray(out_perm, dtype=np.int64), name=f"{name}_outperm")
        Y = tc.compute(Y.shape, lambda m, b: Y[Q[m], b], name=f"{name}_out")
    return Y


__all__ = ["kron_sparse_matmul", "butterfly_chain", "real_butterfly", "dct", "sparse_terms"]
