"""Triangular "i, k, j" sums cut into a rectangle per block of rows and a small triangle.

A causal mask leaves sums whose reduction range moves with the row: the gradient of causal
attention has ``dQ[i, j] = sum_{t <= i} G[i, t] K[t, j]`` and ``dK[i, j] = sum_{t >= i}
G[t, i] Q[t, j]``, cumulative sums written with ``where=`` have ``t <= i``.  In the "i, k, j"
order (:mod:`.sum_order`) the row loop's reduction bounds use the row variable, which the
register tiles of :mod:`.microkernel` cannot take (their ``mr`` rows share every step of
``k``).  This is the blocking of triangular matrix products in level-3 BLAS (the diagonal
blocks of TRMM apart, the rest a GEMM; Goto & van de Geijn, "High-performance implementation
of the level-3 BLAS", ACM TOMS 35(1), 2008): the rows are cut into blocks of ``B`` and, for a
block ``[ib, ib + B)``, the reduction range into the part every row of the block has and the
part only some have::

    for (i, ilo, ihi) {                   for (ib, ilo, ihi, step B) {
      C[i, :] = 0                           for (i, ib, min(ib + B, ihi)) {
      for (k, klo, i + c) {       ==>         C[i, :] = 0
        for (j) C[i, j] += v } }              for (k, klo, max(klo, ib + c)) { C[i, :] += v } }
                                            for (i, ib, min(ib + B, ihi)) {
                                              for (k, max(klo, ib + c), i + c) { C[i, :] += v } } }

The first nest of each block is a rectangular "i, k, j" sum (its bounds use ``ib``, not
``i``) that :mod:`.gemm` computes in register tiles; the second, ``B / 2`` steps of ``k`` per
row on average, keeps the plain row loop.  A lower bound that moves with the row (``k`` from
``i + c`` to ``khi``) is cut the same way at the block's last row: the rectangle is ``k`` from
``min(khi, i_last + c)`` on, the triangle below it.  ``B`` is four register tiles of rows
(:func:`.microkernel.tile_shape`), so the triangles are about ``B / n`` of the work and a
packed panel serves ``B`` rows.

Legality.  Every row still receives each of its terms exactly once: for an upper bound
``h(i)`` nondecreasing in ``i``, ``h(ib) <= h(i)`` on the block, so ``[klo, max(klo,
h(ib)))`` and ``[max(klo, h(ib)), h(i))`` partition ``[klo, h(i))`` (``h`` is any expression
built from ``i`` by adding terms free of ``i`` and taking ``min``/``max`` with them or with
other such expressions); likewise for a nondecreasing lower bound with the block's last row.
The zero fill runs before any term of its row, in the rectangle's nest.  Upper bounds keep
the order of each row's additions; for moving lower bounds the triangle's terms (the lowest
``k``) are added after the rectangle's, a different rounding of the same float sum.  Blocks
write disjoint rows, so a parallel row loop stays parallel over ``ib``.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.host import Host
from tecomp.loopir import For, LoweredFunc, Seq, Stmt
from tecomp.stmt_functor import bound_names, expr_vars, map_loops, subst_expr

from .microkernel import fresh_var, tile_shape
from .tile import const_extent, match_row_loop

#: float dtypes whose register tiles :mod:`.microkernel` emits, with their sizes in bytes
_ITEMSIZE = {"float32": 4, "float64": 8}


def split_triangles(func: LoweredFunc, host: Host) -> LoweredFunc:
    """``func`` with its triangular "i, k, j" sums cut into rectangles and triangles per
    block of rows (module doc)."""
    names = bound_names(func.body) | {p.name for p in func.params}

    def rewrite(loop: For) -> Stmt | None:
        return _split(loop, host, names)

    body = map_loops(func.body, rewrite)
    return func if body is func.body else replace(func, body=body)


def _rising(e: E.Expr, i: E.Var) -> bool:
    """Whether ``e`` is nondecreasing in ``i`` by construction: ``i``, a sum of a rising term
    and one free of ``i``, a difference of a rising term and one free of ``i``, or a
    ``min``/``max`` whose sides are rising or free of ``i`` (``min(i + 2, 74) + 1``)."""
    if e == i:
        return True
    if isinstance(e, (E.Min, E.Max)):
        return all(_rising(x, i) for x in (e.a, e.b) if i in expr_vars(x))
    if isinstance(e, E.Add):
        moving = [x for x in (e.a, e.b) if i in expr_vars(x)]
        return len(moving) == 1 and _rising(moving[0], i)
    if isinstance(e, E.Sub):
        return i not in expr_vars(e.b) and _rising(e.a, i)
    return False


def _split(loop: For, host: Host, names: set[str]) -> Stmt | None:
    m = match_row_loop(loop, strict=False)
    if m is None or match_row_loop(loop) is not None:
        return None  # not an "i, k, j" row loop, or a rectangular one already
    init, ks, inner, st = m
    itemsize = _ITEMSIZE.get(st.buffer.dtype)
    if len(ks) != 1 or itemsize is None:
        return None
    (kloop,) = ks
    i = loop.var
    lo_moves, hi_moves = i in expr_vars(kloop.lo), i in expr_vars(kloop.hi)
    if lo_moves == hi_moves or not _rising(kloop.hi if hi_moves else kloop.lo, i):
        return None
    mr, nr = tile_shape(host, itemsize)
    block = 4 * mr
    rows, cols = const_extent(loop.lo, loop.hi), const_extent(inner.lo, inner.hi)
    if (rows is not None and rows < 2 * block) or (cols is not None and cols < nr):
        return None
    ib = fresh_var(f"{i.name}b", names, i.dtype)
    last = E.minimum(E.add(ib, E.Const(block, i.dtype)), loop.hi)
    if hi_moves:  # k from klo up to h(i): every row of the block has [klo, h(ib))
        cut = E.maximum(kloop.lo, subst_expr(kloop.hi, {i: ib}))
        rect = replace(kloop, hi=cut)
        tri = replace(kloop, lo=cut)
    else:  # k from l(i) up to khi: every row has [l(last row), khi)
        cut = E.minimum(kloop.hi, subst_expr(kloop.lo, {i: E.sub(last, E.Const(1, i.dtype))}))
        rect = replace(kloop, lo=cut)
        tri = replace(kloop, hi=cut)
    square = For(i, ib, last, Seq((init, rect)))
    corner = For(i, ib, last, tri)
    return For(ib, loop.lo, loop.hi, Seq((square, corner)), step=block, kind=loop.kind)
