"""Register and cache blocking of sum contractions on loop IR (CPU scheduling).

The loop-order step of the CPU schedule (:mod:`.sum_order`) rewrites a sum whose unit-stride
data axis ``j`` should run innermost to the "i, k, j" form (:mod:`.loop_order`)::

    for (i, ilo, ihi) {
      for (j, jlo, jhi) { C[.., i, .., j] = 0 }
      for (k1, ..) { .. for (k, ..) { for (j, jlo, jhi) { C[.., i, .., j] += v(i, k, j) } } }
    }

Its innermost loop loads and stores ``C[i, j]`` once per multiply-add, and every row ``i``
streams all of ``B`` through the cache again (a 512^3 float32 matmul: 4.4 ms on one core of
the reference machine against OpenBLAS's 2.1 ms).  :func:`block_rows` applies two classic
rewrites at once:

* unroll-and-jam of the row loop by ``rows`` (Callahan, Carr & Kennedy, "Improving register
  allocation for subscripted variables", PLDI 1990; Carr & Kennedy, TOPLAS 1994): each loaded
  ``B[k, j]`` (any term not using ``i``) serves ``rows`` rows, which divides the traffic of
  ``B`` by ``rows``;
* unrolling of the innermost reduction loop by ``factor`` (completely when its extent is a
  constant up to ``max_full``: the 3-wide window of a convolution) with scalar replacement:
  the ``factor`` terms are folded into one update, so ``C[i, j]`` is loaded and stored once
  per ``factor`` multiply-adds.

The result, for ``rows = 2``, ``factor = 2`` (``U`` = factor, ``R`` = rows)::

    for (i, ilo, ilo + (ihi - ilo) // R * R, step R) {      # keeps the row loop's kind
      for (j, jlo, jhi) { C[i, j] = 0;  C[i + 1, j] = 0 }
      for (k1, ..) { ..
        for (k, klo, klo + (khi - klo) // U * U, step U) {
          for (j, jlo, jhi) {
            C[i, j] = (C[i, j] + v(i, k, j)) + v(i, k + 1, j)
            C[i + 1, j] = (C[i + 1, j] + v(i + 1, k, j)) + v(i + 1, k + 1, j)
          }
        }
        for (k, klo + (khi - klo) // U * U, khi) {          # the last k (when U does not divide)
          for (j, jlo, jhi) { C[i, j] += v(i, k, j);  C[i + 1, j] += v(i + 1, k, j) }
        }
      .. }
    }
    for (i, ilo + (ihi - ilo) // R * R, ihi) { the original body }   # the last rows

When the ``j`` range moves with a short innermost reduction loop (a convolution's input
gradient: ``j`` in ``[k, k + 32)``), rows are not blocked; the reduction steps are folded on
the part of the ``j`` range where every step is valid, and the edges keep the plain loop
(index-set splitting, :func:`_split_fold`).  Nests whose reduction bounds use the row variable
fold reduction steps without blocking rows.

LLVM vectorises the ``j`` loop (unit stride everywhere) and hoists the ``A[i + r, k + u]``
broadcasts out of it: 1.6 ms for the 512^3 matmul with ``rows = factor = 4``, ahead of
single-threaded OpenBLAS on the same core.  For a convolution after the loop-order pass,
``i`` is the output row ``y``, ``j`` the column ``x`` and the reduction nest ``(rc, ry, rx)``:
the same rewrite is a register-blocked implicit GEMM.

Legality.  Every element ``C[i, j]`` still receives exactly its own terms in increasing
``(k1, .., k)`` order, as the same left-to-right chain of additions starting from 0, so
integer sums are exact and float sums bit-identical to the nest before (up to the backend's
fast-math contraction, which applies to both).  The rewrite applies only when: the row loop
has step 1 and its body is exactly the zero-fill loop over ``j`` followed by a perfect nest of
reduction loops (steps 1) around the accumulating ``j`` loop with the same bounds and a single
unguarded ``Store(C, idx, v, reduce="sum")``; ``idx`` ends with the bare ``j`` and holds the
bare row variable, and no other index uses ``j``, the row variable or a reduction variable;
the reduction and ``j`` bounds do not use the row variable or ``j``; and ``v`` does not read
``C``.  Then distinct ``(i, j)`` pairs are distinct elements, and the rows and reduction steps
that one statement combines touch only their own elements.  A parallel row loop stays
parallel: each of its iterations (now ``R`` rows) still writes its own elements.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.loopir import (
    BufferLoad,
    For,
    LetStmt,
    LoweredFunc,
    Seq,
    Stmt,
    Store,
)
from tecomp.stmt_functor import expr_vars, map_loops, subst_expr, walk_expr

from .residue_split import window_overlap


def block_rows(func: LoweredFunc, *, rows: int = 4, factor: int = 4,
               max_full: int = 8) -> LoweredFunc:
    """Share each loaded term of an "i, k, j" sum between ``rows`` rows and fold ``factor``
    steps of the innermost reduction loop into one update of ``C`` (see the module doc)."""
    if rows < 1 or factor < 1:
        raise ValueError("block_rows: rows and factor must be positive")

    def rewrite(loop: For) -> Stmt | None:
        return _rows(loop, rows, factor, max_full)

    body = map_loops(func.body, rewrite)
    return func if body is func.body else replace(func, body=body)


def match_row_loop(loop: For, strict: bool = True):
    """``(init, knest loops, inner j loop, store)`` when ``loop`` is an "i, k, j" row loop.

    Not ``strict``: the reduction bounds may use the row variable and the inner ``j`` bounds
    may differ from the zero fill's (and use the reduction variables); only the reduction
    steps can then be folded, not rows blocked."""
    if loop.step != 1 or not isinstance(loop.body, Seq) or len(loop.body.stmts) != 2:
        return None
    init, nest = loop.body.stmts
    if not (isinstance(init, For) and init.step == 1 and isinstance(init.body, Store)):
        return None
    zero = init.body
    if zero.reduce is not None or not isinstance(zero.value, E.Const) or zero.value.value != 0:
        return None
    j = init.var
    ks: list[For] = []
    s: Stmt = nest
    while isinstance(s, For) and s.var != j:
        ks.append(s)
        s = s.body
    if not ks or not isinstance(s, For) or any(k.step != 1 for k in ks):
        return None
    inner = s
    if inner.step != 1 or (strict and (inner.lo, inner.hi) != (init.lo, init.hi)):
        return None
    if j in expr_vars(inner.lo) | expr_vars(inner.hi):
        return None
    st = inner.body
    if not (isinstance(st, Store) and st.reduce == "sum" and st.buffer == zero.buffer
            and st.indices == zero.indices and st.buffer.scope != "local"):
        return None
    i = loop.var
    kvars = {k.var for k in ks}
    idx = st.indices
    if not idx or idx[-1] != j or i not in idx[:-1]:
        return None
    for e in idx[:-1]:
        if expr_vars(e) & (kvars | {j}) or (i in expr_vars(e) and e != i):
            return None
    for k in ks:
        if expr_vars(k.lo) & {i, j} or expr_vars(k.hi) & {i, j}:
            if strict or j in expr_vars(k.lo) | expr_vars(k.hi):
                return None
    if expr_vars(init.lo) & {i, j} or expr_vars(init.hi) & {i, j}:
        return None
    if any(isinstance(x, BufferLoad) and x.buffer == st.buffer for x in walk_expr(st.value)):
        return None
    return init, ks, inner, st


def const_extent(lo: E.Expr, hi: E.Expr) -> int | None:
    if isinstance(lo, E.Const) and isinstance(hi, E.Const):
        return int(hi.value) - int(lo.value)
    return None


def split_end(lo: E.Expr, hi: E.Expr, n: int) -> E.Expr:
    """``lo + (hi - lo) // n * n``: the end of the whole blocks of ``n`` in ``[lo, hi)``."""
    ext = const_extent(lo, hi)
    if ext is not None:
        return E.Const(int(lo.value) + max(ext, 0) // n * n, lo.dtype)
    span = E.maximum(E.sub(hi, lo), E.Const(0, lo.dtype))
    q = E.FloorDiv(span, E.Const(n, lo.dtype), lo.dtype)
    return E.add(lo, E.Mul(q, E.Const(n, lo.dtype), lo.dtype))


def strips_end(c: E.Var, chi: E.Expr, n: int, lo: E.Expr, hi: E.Expr, step: int) -> E.Expr:
    """:func:`split_end` of the block ``[c, chi)`` of a loop over ``[lo, hi)`` by ``step``:
    ``chi`` itself when every block is whole strips of ``n`` (the extent and ``step``
    multiples of ``n``), so that the strips past the whole ones are known to be none."""
    ext = const_extent(lo, hi)
    if WHOLE_STRIPS and ext is not None and ext % n == 0 and step % n == 0:
        return chi
    return split_end(c, chi, n)


#: blocks known to be whole strips get no tails (:func:`strips_end`; an A/B switch of
#: ``benchmarks/ab_cpu_steps.py``)
WHOLE_STRIPS = True


def plus(v: E.Var, n: int) -> E.Expr:
    return v if n == 0 else E.add(v, E.Const(n, v.dtype))


def _rows(loop: For, rows: int, factor: int, max_full: int) -> Stmt | None:
    m = match_row_loop(loop)
    if m is None:
        m = match_row_loop(loop, strict=False)
        if m is None:
            return None
        init, ks, inner, st = m
        if (inner.lo, inner.hi) != (init.lo, init.hi):
            return _split_fold(loop, m, max_full)
        rows = 1  # the reduction bounds use the row variable: fold reduction steps only
    init, ks, inner, st = m
    return unroll_rows(loop, init, ks, inner, st, rows, factor, max_full)


def unroll_rows(loop: For, init: For | None, ks: list[For], inner: For, st: Store,
                rows: int, factor: int, max_full: int) -> Stmt | None:
    """The rewrite of the module doc on the matched parts of a row loop; without ``init``
    (``C`` already holds the partial sums of earlier reduction blocks) no zero fill is made."""
    i, kin = loop.var, ks[-1]
    iext = const_extent(loop.lo, loop.hi)
    r_n = rows if iext is None or iext >= rows else max(iext, 1)
    kext = const_extent(kin.lo, kin.hi)
    u = kext if kext is not None and kext <= max_full else factor
    if kext is not None:
        u = max(1, min(u, kext))
    if r_n == 1 and u == 1:
        return None
    subs = [{i: plus(i, r)} if r else {} for r in range(r_n)]
    vals = [subst_expr(st.value, sb) for sb in subs]
    dsts = [tuple(subst_expr(e, sb) for e in st.indices) for sb in subs]
    dt = st.buffer.dtype
    folded = []
    for r in range(r_n):
        acc: E.Expr = BufferLoad(st.buffer, dsts[r], dt)
        for n in range(u):
            acc = E.add(acc, vals[r] if n == 0 else
                        subst_expr(vals[r], {kin.var: plus(kin.var, n)}))
        folded.append(Store(st.buffer, dsts[r], acc))
    kend = split_end(kin.lo, kin.hi, u)
    jloop = replace(inner, body=seq(folded))
    if kext is not None and kext == u:  # unrolled completely: one step, no loop left
        parts: list[Stmt] = [LetStmt(kin.var, kin.lo, jloop)]
    else:
        parts = [replace(kin, hi=kend, step=u, body=jloop)]
    if not (kext is not None and kext % u == 0):
        plain = [Store(st.buffer, dsts[r], vals[r], "sum") for r in range(r_n)]
        parts.append(replace(kin, lo=kend, body=replace(inner, body=seq(plain))))
    nest: Stmt = seq(parts)
    for k in reversed(ks[:-1]):
        nest = replace(k, body=nest)
    if init is not None:
        zero = init.body
        inits = replace(init, body=seq([Store(zero.buffer, dsts[r], zero.value)
                                          for r in range(r_n)]))
        nest = Seq((inits, nest))
    if r_n == 1:
        return replace(loop, body=nest)
    imain = split_end(loop.lo, loop.hi, r_n)
    main = For(i, loop.lo, imain, nest, step=r_n, kind=loop.kind)
    if iext is not None and iext % r_n == 0:
        return main
    return Seq((main, replace(loop, lo=imain)))


def seq(items: list[Stmt]) -> Stmt:
    return items[0] if len(items) == 1 else Seq(tuple(items))


def _split_fold(loop: For, m: tuple, max_full: int) -> Stmt | None:
    """Fold a short innermost reduction loop whose ``j`` range moves with it (index-set
    splitting).  With ``k`` in ``[klo, klo + U)`` and ``j`` in ``[lo(k), hi(k))``, every ``k``
    is valid for ``j`` in ``[P, M)``, ``P = max_k lo(k)``, ``M = max(P, min_k hi(k))``::

        for (k) { for (j, lo(k), min(hi(k), P)) { C[j] += v(k, j) } }      # j < P
        let k = klo { for (j, P, M) { C[j] = ((C[j] + v(k, j)) + v(k + 1, j)) + .. } }
        for (k) { for (j, max(lo(k), M), hi(k)) { C[j] += v(k, j) } }      # j >= M

    Each ``j`` falls in exactly one of the three parts and receives there the same terms in
    the same increasing ``k`` as before (the input gradient of a convolution: ``j`` in
    ``[k, k + 32)`` for ``k < 3``, folded for ``j`` in ``[2, 32)``)."""
    init, ks, inner, st = m
    kin = ks[-1]
    kext = const_extent(kin.lo, kin.hi)
    if kext is None or not 1 < kext <= max_full or ks[:-1] and any(
            kin.var in expr_vars(x.lo) | expr_vars(x.hi) for x in ks[:-1]):
        return None
    k = kin.var
    los = [subst_expr(inner.lo, {k: _plus_const(kin.lo, n)}) for n in range(kext)]
    his = [subst_expr(inner.hi, {k: _plus_const(kin.lo, n)}) for n in range(kext)]
    p, mid = window_overlap(los, his)
    acc: E.Expr = BufferLoad(st.buffer, st.indices, st.buffer.dtype)
    for n in range(kext):
        acc = E.add(acc, st.value if n == 0 else subst_expr(st.value, {k: plus(k, n)}))
    low = replace(kin, body=replace(inner, hi=E.minimum(inner.hi, p)))
    fold = LetStmt(k, kin.lo, replace(inner, lo=p, hi=mid, body=Store(
        st.buffer, st.indices, acc)))
    high = replace(kin, body=replace(inner, lo=E.maximum(inner.lo, mid)))
    nest: Stmt = Seq((low, fold, high))
    for x in reversed(ks[:-1]):
        nest = replace(x, body=nest)
    return replace(loop, body=Seq((init, nest)))


def _plus_const(e: E.Expr, n: int) -> E.Expr:
    return e if n == 0 else E.add(e, E.Const(n, e.dtype))
