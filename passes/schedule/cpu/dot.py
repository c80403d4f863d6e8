"""Register blocking of reductions kept in the plain order ("dot products") on loop IR.

A reduction whose innermost axis is unit-stride in its reads stays in the plain order
(:mod:`.lower_stage`): ``C[i, k] = sum_j A[i, j] * B[k, j]`` (a dense layer ``x @ W.T``, the
input gradient of a matmul) lowers to ::

    for (i, ..) { for (k, ..) {
      allocate acc (local) { acc = 0;  for (j, ..) { acc += v(i, k, j) };  C[i, k] = f(acc) }
    } }

LLVM vectorises the ``j`` loop as a reduction, but each multiply-add loads two vectors, and
every row ``A[i, :]`` and ``B[k, :]`` is read once per partner.  :func:`block_dots` computes an
``rows x cols`` block of ``(i, k)`` pairs at once, each in its own local (the register
blocking of Lam, Rothberg & Wolf, ASPLOS 1991; the dot-product micro-kernel of BLIS's
``gemmt`` / "inner product" order)::

    for (i, ilo, <whole blocks>, step R) {
      for (k, klo, <whole blocks>, step U) {
        acc_0_0 = 0 ... acc_{R-1}_{U-1} = 0
        for (j, ..) { acc_r_u += v(i + r, k + u, j)  for every r < R, u < U }
        C[i + r, k + u] = f(acc_r_u)                  for every r, u
      }
      for (k, <last columns>) { the original body for rows i, .., i + R - 1 }
    }
    for (i, <last rows>) { the original body }

so that one vector of ``A[i + r, j]`` serves ``U`` accumulators and one of ``B[k + u, j]``
serves ``R``: ``R + U`` loads per ``R * U`` multiply-adds instead of ``2`` per ``1``.  The
vectoriser keeps the ``R * U`` partial sums in vector registers.  A nest where every load
uses both ``i`` and ``k`` (the maxima of a batch of rows, ``max_j S[h, i, j]``) shares nothing
and is left alone (``SHARED_ONLY``): blocked, it only kept a softmax's first stage from being
fused with the others (the 8x512x64 attention's forward 1.22x slower so, one or two cores).

Legality.  Each local accumulates exactly the terms of its own element in the original order
with the original combiner (any of sum, prod, max, min), so results are bit-identical to the
plain loop (up to the backend's fast-math reassociation, which applies to both).  With
``fold`` (sums only), the terms of ``fold`` consecutive steps of the next-outer reduction loop
are added together before the local (``acc += v(c, k) + v(c + 1, k) + ..``): the same terms,
reassociated, so float results differ from the plain order by rounding only.  The rewrite
applies only when: the row loop's whole body is the column loop (steps 1), whose whole body
is one ``Allocate`` of a scalar local holding, in order, its initialisation, a perfect nest of
reduction loops around one unguarded accumulation into the local, and one store of the
element; the reduction bounds and the column bounds do not use the row variable (and the
reduction bounds not the column variable); the element's index holds both bare variables and
no reduction variable; and neither the accumulated value nor the stored expression reads the
stored buffer.  Distinct ``(i, k)`` pairs then write distinct elements and read nothing any
other pair writes.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.functor import children, fresh_name
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    LoweredFunc,
    Seq,
    Stmt,
    Store,
)
from tecomp.stmt_functor import (
    bound_names,
    expr_vars,
    map_loops,
    rebuild_expr,
    subst,
    subst_expr,
    walk_expr,
    walk_stmt,
)

from .tile import const_extent, plus, seq, split_end


def block_dots(func: LoweredFunc, *, rows: int = 4, cols: int = 4,
               min_inner: int = 8, fold: int = 8) -> LoweredFunc:
    """Compute ``rows x cols`` blocks of plain-order reductions in separate locals (above).

    A nest whose innermost reduction loop has a constant extent below ``min_inner`` (the
    3-wide window of a strided convolution) is left alone: the vectoriser cannot use so short
    a loop, and the blocked scalar code is slower than the plain one.  ``fold`` steps of the
    loop around the innermost reduction loop are summed in each update of a ``sum``
    (:func:`_fold_outer`; 1 turns it off).
    """
    if rows < 1 or cols < 1:
        raise ValueError("block_dots: rows and cols must be positive")
    names = _names(func)

    def rewrite(loop: For) -> Stmt | None:
        m = match_dot(loop)
        if m is None or (SHARED_ONLY and not _shares_a_load(m[4].value, loop.var, m[0].var)):
            return None
        inner = m[3][-1]
        ext = const_extent(inner.lo, inner.hi)
        if ext is not None and ext < min_inner:
            return None
        return _block(loop, m, rows, cols, names, fold)

    body = map_loops(func.body, rewrite)
    return func if body is func.body else replace(func, body=body)


#: block only nests where some load serves several accumulators (an A/B switch; off: every
#: matching nest, also rows of a batch that share nothing, such as a softmax's maxima over
#: ``S[h, i, k]``, which blocking only keeps from being fused with the stages after them)
SHARED_ONLY = True


def _shares_a_load(value: E.Expr, i: E.Var, k: E.Var) -> bool:
    """Whether ``value`` reads some buffer at an index without ``i`` or without ``k`` (a load
    a block of ``(i, k)`` pairs shares)."""
    for x in walk_expr(value):
        if isinstance(x, BufferLoad) and x.indices:  # a scalar is a register already
            used = set().union(*(expr_vars(e) for e in x.indices))
            if i not in used or k not in used:
                return True
    return False


def match_dot(loop: For):
    """``(column loop, local, init, reduction loops, update, final store)`` when ``loop`` is
    a plain-order reduction nest (the form of the module doc), else None."""
    col = loop.body
    if loop.step != 1 or not isinstance(col, For) or col.step != 1:
        return None
    alloc = col.body
    if not (isinstance(alloc, Allocate) and alloc.buffer.scope == "local"
            and not alloc.buffer.shape and isinstance(alloc.body, Seq)
            and len(alloc.body.stmts) == 3):
        return None
    acc = alloc.buffer
    init, nest, fin = alloc.body.stmts
    if not (isinstance(init, Store) and init.buffer == acc and init.reduce is None
            and isinstance(init.value, E.Const)):
        return None
    ks: list[For] = []
    s: Stmt = nest
    while isinstance(s, For) and s.step == 1:
        ks.append(s)
        s = s.body
    if not ks or not (isinstance(s, Store) and s.buffer == acc and s.reduce is not None):
        return None
    upd = s
    if not (isinstance(fin, Store) and fin.reduce is None and fin.buffer != acc
            and fin.buffer.scope != "local"):
        return None
    i, k = loop.var, col.var
    kvars = {x.var for x in ks}
    if i not in fin.indices or k not in fin.indices:
        return None
    if any(expr_vars(e) & kvars for e in fin.indices):
        return None
    for x in ks:
        if expr_vars(x.lo) & {i, k} or expr_vars(x.hi) & {i, k}:
            return None
    if expr_vars(col.lo) & {i} or expr_vars(col.hi) & {i}:
        return None
    for e in (upd.value, fin.value):
        if any(isinstance(x, BufferLoad) and x.buffer == fin.buffer for x in walk_expr(e)):
            return None
    return col, acc, init, ks, upd, fin


def _block(loop: For, m: tuple, rows: int, cols: int, names: set[str],
           fold: int = 8) -> Stmt | None:
    col, acc, init, ks, upd, fin = m
    i, k = loop.var, col.var
    iext, kext = const_extent(loop.lo, loop.hi), const_extent(col.lo, col.hi)
    r_n = rows if iext is None else max(1, min(rows, iext))
    u_n = cols if kext is None else max(1, min(cols, kext))
    if r_n * u_n == 1:
        return None
    accs: dict[tuple[int, int], Buffer] = {}
    for r in range(r_n):
        for u in range(u_n):
            b = Buffer(fresh_name(f"{acc.name}{r}_{u}", names), (), acc.dtype, "local")
            names.add(b.name)
            accs[r, u] = b
    inits, sums, outs = [], [], []
    for (r, u), b in accs.items():
        sub = {i: plus(i, r), k: plus(k, u)}
        load = {acc: BufferLoad(b, (), b.dtype)}
        inits.append(Store(b, (), init.value))
        sums.append(Store(b, (), subst_expr(upd.value, sub), upd.reduce))
        outs.append(Store(fin.buffer, tuple(subst_expr(e, sub) for e in fin.indices),
                          _swap_acc(subst_expr(fin.value, sub), load)))
    ks, sums = _fold_outer(ks, sums, fold)
    body: Stmt = seq(sums)
    for x in reversed(ks):
        body = replace(x, body=body)
    tile: Stmt = Seq((*inits, body, *outs))
    for b in reversed(list(accs.values())):
        tile = Allocate(b, tile)
    kmain = split_end(col.lo, col.hi, u_n)
    parts: list[Stmt] = [For(k, col.lo, kmain, tile, step=u_n)]
    if not (kext is not None and kext % u_n == 0):
        last = replace(col, lo=kmain)
        parts += [subst(last, {i: plus(i, r)} if r else {}) for r in range(r_n)]
    if r_n == 1:
        return replace(loop, body=seq(parts))
    imain = split_end(loop.lo, loop.hi, r_n)
    main = For(i, loop.lo, imain, seq(parts), step=r_n, kind=loop.kind)
    if iext is not None and iext % r_n == 0:
        return main
    return Seq((main, replace(loop, lo=imain)))


def _fold_outer(ks: list[For], sums: list[Store], fold: int) -> tuple[list[For], list[Store]]:
    """Fold ``fold`` steps of the loop around the innermost reduction loop into each update
    (``acc += v(c, k) + v(c + 1, k) + ..``, stepping ``c`` by ``fold``) when that loop has a
    constant extent divisible by ``fold`` (or 4, or 2) and no inner bound uses it: the vectoriser
    then reduces its vector partial sums once per ``fold`` rows of a short dot product
    (a 3x3 weight gradient: rows of 32) instead of once per row."""
    if len(ks) < 2 or any(st.reduce != "sum" for st in sums):
        return ks, sums
    c, inner = ks[-2], ks[-1]
    ext = const_extent(c.lo, c.hi)
    if ext is None or c.step != 1 or c.var in expr_vars(inner.lo) | expr_vars(inner.hi):
        return ks, sums
    f = next((x for x in (fold, 4, 2) if 1 < x <= fold and ext % x == 0 and ext > x), None)
    if f is None:
        return ks, sums
    out = []
    for st in sums:
        v: E.Expr = st.value
        for n in range(1, f):
            v = E.add(v, subst_expr(st.value, {c.var: plus(c.var, n)}))
        out.append(Store(st.buffer, st.indices, v, st.reduce))
    return ks[:-2] + [replace(c, step=f), inner], out


def _swap_acc(e: E.Expr, load: dict[Buffer, E.Expr]) -> E.Expr:
    """``e`` with loads of the old local replaced by loads of the block's local."""
    (old, new), = load.items()
    if isinstance(e, BufferLoad):
        return new if e.buffer == old else e
    cs = children(e)
    if not cs:
        return e
    kids = tuple(_swap_acc(x, load) for x in cs)
    return e if all(a is b for a, b in zip(kids, cs)) else rebuild_expr(e, kids)


def _names(func: LoweredFunc) -> set[str]:
    out = {p.name for p in func.params} | {b.name for b in func.inputs + func.outputs}
    return out | bound_names(func.body) | {
        x.buffer.name for x in walk_stmt(func.body) if isinstance(x, Allocate)}
