"""Register tiles for contractions in the plain ("dot product") order, with their epilogue.

A dense layer ``h[i, j] = sum_k x[i, k] * W[j, k] + b[j]`` and attention's ``Q K^T`` read both
operands with unit stride along the reduction, so lowering keeps the plain order
(:mod:`.dot`)::

    for (i) { for (j) { allocate s (local) { s = 0; for (k) { s += v(i, j, k) };
                                             C[i, j] = f(s, i, j) } } }

:func:`dot_blocked` computes it with the GEMM structure of :mod:`.gemm` and the register
tiles of :mod:`.microkernel` instead: the operand that does not move with ``i``
(``W[j, k]``) is packed per ``kc x nc`` block in micro-panel order — which also transposes
it, so that the tile's lanes run along ``j`` with unit stride — and each ``mr x nr`` tile
accumulates in registers over the block's ``k`` slice.  The epilogue ``f`` (bias,
activation, scaling: whatever the store applies to ``s``) is applied to the tile in
registers when the last slice ends, so a dense layer with its bias is one pass over ``C``::

    for (ic, step mc) { allocate panel {
      for (jc, step nc) { for (kc, step kc_) {
        <pack the slice of W>
        for (i0, step mr) { for (j0, step nr) { allocate acc (local) {
          if (kc == klo) { lanes: acc = 0 } else { lanes: acc = C[i0 + r, j0 + jj] }
          for (k, kc, khi) { lanes: acc += v(i0 + r, j0 + jj, k) }
          if (kc + kc_ >= khi) { lanes: C = f(acc) } else { lanes: C = acc } } } } } } } }

A convolution's implicit GEMM whose shared operand is a flattened image over rows a
multiple of the vector wide (``X_pad[b, k // 9, j // 32 + k // 3 % 3, j % 32 + k % 3]``) is
not packed: the tiles read the image where it lies, each vector inside one image row
(:func:`.microkernel.window_in_place`), and a window's tile loop runs over its digits,
``k = 9 q + 3 a + t`` with the divisions folded (:func:`.digits.by_period`; slices of
``kc`` a multiple of the period), so a step's address is affine in the loops.  The packed
copy held nine shifted copies of the image and took two divisions a step: a 3x3 forward
over 8x64x32x32 -> 64 went from 4.3 to 3.2 ms, a 4x4/2 transposed convolution's forward
from 1.21 to 0.86 ms, one AVX-512 core.

The row operand (``x[i, k]``) is broadcast in place when it walks memory with unit stride
along ``k``; otherwise (a transposed convolution's weights ``W[t, c, 1, 1]``, which step 576
elements per ``k`` and 9 per row, so that each step's ``mr`` broadcasts touch ``mr`` new
cache lines) the whole tiles' rows are packed per slice as well, ``x_rows[(i - ic) // mr, k
- kc, (i - ic) % mr]``, the ``mr`` broadcasts of a step then one cache line (BLIS packs both
operands; packing a row-major ``x`` as well changed a 512x768 -> 3072 dense layer by less
than the noise, and made a 3x3 convolution's forward 8% slower, its weights packed again
for every image; one core of an AVX-512 host).  The slice loop then runs outside the column
blocks, so that each slice of the rows is copied once for all of them, not once per block.

Threads take the row blocks (``ic``), unless the rows fit in fewer one-core blocks than
there are cores: then the column blocks (``jc``) are the parallel loop, outside ``ic``, so
that no thread packs another's panel (:func:`_split_columns`).

Between slices ``C`` holds the partial sums (nothing else reads it: the match requires
that neither ``v`` nor ``f`` reads ``C``).  Tails: 1-row tiles for the rows past the whole
tiles; for the columns past them, a column at a time, one reduction loop updating the tile's
rows in scalar accumulators (the same first/last-slice logic).  A loop a row made eight
reduction loops a column, each vectorised along ``k`` by LLVM: the symbolic transformer
block's attention gradient body took 92 ms of LLVM with them, 74 ms with one
(:data:`ONE_COLUMN_LOOP`).

Legality: every element receives its own terms in increasing ``k`` as one chain of
additions starting from 0, then ``f`` once, as in the plain nest; distinct tiles write
distinct elements.  Only sums with a zero start and one output element per ``(i, j)`` are
taken, the rest stays with :mod:`.dot`; a nest of reduction loops with constant bounds (a
weight gradient's ``(n, y, x)``) is read as one loop over its box
(:func:`.flat_loops.linear_nest`, the same terms in the same order).
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.functor import fresh_name
from tecomp.host import Host
from tecomp.lanes import vector_form
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, IfThenElse, Seq, Stmt, Store
from tecomp.stmt_functor import expr_vars, replace_expr, subst, subst_expr, walk_expr

from . import microkernel
from .digits import by_period, window_period
from .dot import match_dot
from .flat_loops import linear_nest
from .microkernel import (
    aligned_read,
    clamp_blocks,
    fresh_var,
    index_const,
    pack_panel,
    pack_rows,
    row_operand,
    tile_shape,
    transpose_block,
    unrolled_steps,
    window_in_place,
)
from .tile import const_extent, plus, seq, strips_end

_BYTES = {"float32": 4, "float64": 8}

#: the whole tiles that broadcast their row operand in place take :data:`.microkernel.K_UNROLL`
#: steps a trip (:func:`.microkernel.unrolled_steps`); False: one (an A/B switch of
#: ``benchmarks/ab_cpu_steps.py``)
UNROLL = True


def _panel_read(upd: Store, i: E.Var, j: E.Var, k: E.Var) -> BufferLoad | None:
    """The one read of the update that moves with ``j`` and ``k`` but not ``i``."""
    found = [x for x in walk_expr(upd.value) if isinstance(x, BufferLoad)
             and {j, k} <= expr_vars(x) and i not in expr_vars(x)]
    found = list(dict.fromkeys(found))
    return found[0] if len(found) == 1 else None


def _leading(st: Store) -> tuple[E.Expr, ...]:
    """``st``'s indices without the trailing zeros into dimensions of extent 1 (a 1x1
    kernel's ``[o, c, 0, 0]``): the last one left has the unit stride."""
    idx = st.indices
    while idx and idx[-1] == index_const(0) and st.buffer.shape[len(idx) - 1] == index_const(1):
        idx = idx[:-1]
    return idx


#: the columns past the whole tiles by one reduction loop for all the tile's rows (module
#: doc); False: a loop a row (an A/B switch of ``benchmarks/ab_cpu_steps.py``)
ONE_COLUMN_LOOP = True


def dot_blocked(loop: For, host: Host, cores: int, names: set[str], sizes,
                max_full: int = 8) -> Stmt | None:
    """The nest of the module doc for the plain-order reduction ``loop``, or None."""
    m = match_dot(loop)
    if m is None:
        return None
    col, acc, init, ks, upd, fin = m
    dt = fin.buffer.dtype
    if (upd.reduce != "sum" or dt not in _BYTES or acc.dtype != dt
            or not isinstance(init.value, E.Const) or init.value.value != 0):
        return None
    kloop = ks[0]
    if len(ks) > 1:  # a weight gradient's (n, y, x): one loop over the box
        flat = linear_nest(ks, names)
        if flat is None:
            return None
        kloop, digits = flat
        upd = subst(upd, digits)
    old_acc = BufferLoad(acc, (), acc.dtype)  # the plain nest's accumulator, in f
    i, j, k = loop.var, col.var, kloop.var
    lead = _leading(fin)
    if not lead or lead[-1] != j or i not in lead[:-1]:
        return None
    if any(j in expr_vars(e) or (i in expr_vars(e) and e != i) for e in lead[:-1]):
        return None
    if (expr_vars(col.lo) | expr_vars(col.hi)) & {i} or (
            expr_vars(kloop.lo) | expr_vars(kloop.hi)) & {i, j}:
        return None
    itemsize = _BYTES[dt]
    mr, nr = tile_shape(host, itemsize)
    width = host.lanes(itemsize)
    iext, jext = const_extent(loop.lo, loop.hi), const_extent(col.lo, col.hi)
    kext = const_extent(kloop.lo, kloop.hi)
    if (kext is not None and kext <= max_full) or (iext is not None and iext < mr) or (
            jext is not None and jext < nr):
        return None
    x = _panel_read(upd, i, j, k)
    if x is None:
        return None
    mc, kc_, nc = clamp_blocks(sizes(host, itemsize, mr, nr, cores, iext), kext, jext, nr)
    by_columns = _split_columns(loop, host, itemsize, mr, nr, cores, iext, jext, kext, sizes)
    if by_columns is not None:
        mc, kc_, nc = by_columns
    trial = set(names)
    ic, kc, jc = (fresh_var(f"{v.name}c", trial) for v in (i, k, j))
    i0, j0 = fresh_var(f"{i.name}0", trial), fresh_var(f"{j.name}0", trial)
    jj = fresh_var("jj", trial)

    def upto(v: E.Var, n: int, hi: E.Expr) -> E.Expr:
        return E.minimum(E.add(v, index_const(n)), hi)

    w = window_in_place(x, j, k, col.lo, width, nr)  # None: pack the panel
    # the tiles' steps in the digits of the reduction (by_period): over the packed panel's
    # rows (k - kc) when it is packed, its own window's when read in place
    seen = upd.value if w is not None else replace_expr(
        upd.value, x, BufferLoad(x.buffer, (E.sub(k, kloop.lo),), x.dtype))
    period = _whole_periods(seen, kloop, k, kc_)
    if period > 1:  # slices of whole periods: every trip of by_period starts one
        kc_ = kc_ // period * period
    ihi, khi, jhi = upto(ic, mc, loop.hi), upto(kc, kc_, kloop.hi), upto(jc, nc, col.hi)
    panel = Buffer(fresh_name(f"{x.buffer.name}_panel", trial),
                   (index_const(nc // nr), index_const(kc_), index_const(nr)), x.dtype, "temp")
    trial.add(panel.name)
    first = E.compare(E.EQ, kc, kloop.lo)
    last = E.compare(E.GE, E.add(kc, index_const(kc_)), kloop.hi)
    iend = strips_end(ic, ihi, mr, loop.lo, loop.hi, mc)
    jend = strips_end(jc, jhi, nr, col.lo, col.hi, nc)

    def value(col_e: E.Expr, strip: E.Expr, lane: E.Expr, start: E.Expr | None = None) -> E.Expr:
        """The update at column ``col_e`` (``lane`` of the panel's ``strip``; ``start``: the
        first column of the vector, when the panel is read in place)."""
        if w is None:
            v = replace_expr(upd.value, x, BufferLoad(panel, (strip, E.sub(k, kc), lane),
                                                      x.dtype))
        else:
            v = upd.value if start is None else replace_expr(
                upd.value, x, aligned_read(x, j, w, start, jj))
        return subst_expr(v, {j: col_e})

    def tile(rows: int, unroll: bool = False) -> tuple[Stmt, list[For]]:
        t = Buffer(fresh_name("acc", trial), (index_const(rows), index_const(nr)), dt, "local")
        trial.add(t.name)
        zero, load, add, done, keep = [], [], [], [], []
        strip = E.floordiv(E.sub(j0, jc), index_const(nr))
        vs = {h: value(E.add(j0, plus(jj, h)), strip, plus(jj, h), plus(j0, h))
              for h in range(0, nr, width)}
        for r in range(rows):
            for h in range(0, nr, width):
                lane = plus(jj, h)
                sub = {i: plus(i0, r)}
                v = vs[h]
                dst = tuple(subst_expr(e, sub | {jj: lane, j: E.add(j0, lane)})
                            for e in fin.indices)
                here = (index_const(r), lane)
                cur = BufferLoad(t, here, dt)
                zero.append(Store(t, here, E.Const(0.0, dt)))
                load.append(Store(t, here, BufferLoad(fin.buffer, dst, dt)))
                add.append(Store(t, here, E.add(cur, subst_expr(v, sub))))
                epi = subst_expr(fin.value, {i: plus(i0, r), j: E.add(j0, lane)})
                done.append(Store(fin.buffer, dst, replace_expr(epi, old_acc, cur)))
                keep.append(Store(fin.buffer, dst, cur))
        loops = [For(jj, index_const(0), index_const(width), Seq(tuple(s)), kind="lanes")
                 for s in (zero, load, add, done, keep)]
        plain = For(k, kc, khi, loops[2])
        steps = by_period(k, kc, khi, loops[2], period, trial, microkernel.K_UNROLL) or (
            unrolled_steps(k, kc, khi, loops[2], trial) if unroll and UNROLL else plain)
        body = Seq((IfThenElse(first, loops[0], loops[1]), steps,
                    IfThenElse(last, loops[3], loops[4])))
        return Allocate(t, body), loops

    def scalar_columns(rows: int) -> list[Stmt]:
        if jend is jhi:  # every block is whole strips
            return []
        v = value(j, E.floordiv(E.sub(jend, jc), index_const(nr)), E.sub(j, jend))
        groups = [range(rows)] if ONE_COLUMN_LOOP else [range(r, r + 1) for r in range(rows)]
        return [For(j, jend, jhi, seq([column(v, g) for g in groups]))]

    def column(v: E.Expr, rows: range) -> Stmt:
        """Column ``j`` of the tile's ``rows``: one reduction loop, a scalar accumulator
        a row."""
        s = Buffer(fresh_name("acc", trial), (index_const(len(rows)),), dt, "local")
        trial.add(s.name)
        zero, load, add, done, keep = [], [], [], [], []
        for n, r in enumerate(rows):
            sub = {i: plus(i0, r)}
            dst = tuple(subst_expr(e, sub) for e in fin.indices)
            at = (index_const(n),)
            cur = BufferLoad(s, at, dt)
            zero.append(Store(s, at, E.Const(0.0, dt)))
            load.append(Store(s, at, BufferLoad(fin.buffer, dst, dt)))
            add.append(Store(s, at, E.add(cur, subst_expr(v, sub))))
            done.append(Store(fin.buffer, dst,
                              replace_expr(subst_expr(fin.value, sub), old_acc, cur)))
            keep.append(Store(fin.buffer, dst, cur))
        return Allocate(s, Seq((IfThenElse(first, seq(zero), seq(load)), For(k, kc, khi, seq(add)),
                                IfThenElse(last, seq(done), seq(keep)))))

    rest: list[Stmt] = []  # the rows past the whole tiles read the row operand as it is
    if iend is not ihi:
        one, _ = tile(1)
        rest = [For(i0, iend, ihi, seq([For(j0, jc, jend, one, step=nr)] + scalar_columns(1)))]
    a = row_operand(upd.value, i, j, k, fin.buffer)
    rows_panel = None
    if a is not None:  # whole tiles broadcast from a packed copy of it
        if iext is not None:
            mc = min(mc, -(-iext // mr) * mr)
        base = a.buffer.name if isinstance(a, BufferLoad) else fin.buffer.name
        rows_panel = Buffer(fresh_name(f"{base}_rows", trial),
                            (index_const(mc // mr), index_const(kc_), index_const(mr)),
                            a.dtype, "temp")
        trial.add(rows_panel.name)
        strip = E.floordiv(E.sub(i0, ic), index_const(mr))
        upd = replace(upd, value=replace_expr(upd.value, a, BufferLoad(
            rows_panel, (strip, E.sub(k, kc), E.sub(i, i0)), a.dtype)))
    full, loops = tile(mr, unroll=rows_panel is None)
    if any(vector_form(x) is None for x in loops):
        return None
    tiles = seq([For(i0, ic, iend, seq([For(j0, jc, jend, full, step=nr)]
                                     + scalar_columns(mr)), step=mr)]
                + rest)
    names |= trial
    packs = [] if w is not None else [pack_panel(
        x, panel, k, j, kc, khi, jc, jhi, nr, names, width, period,
        transpose_block(host, nr, itemsize))]
    row_pack = [] if rows_panel is None else [
        pack_rows(a, rows_panel, i, k, ic, iend, kc, khi, mr, names)]

    def held(buf: Buffer | None, body: Stmt) -> Stmt:
        return body if buf is None else Allocate(buf, body)

    panel_held = None if w is not None else panel
    ks_loop = For(kc, kloop.lo, kloop.hi, seq(packs + row_pack + [tiles]), step=kc_)
    if by_columns is not None:  # the column blocks are the parallel loop (_split_columns)
        body: Stmt = held(panel_held, For(ic, loop.lo, loop.hi, ks_loop, step=mc))
        return For(jc, col.lo, col.hi, held(rows_panel, body), step=nc, kind=loop.kind)
    if rows_panel is not None and microkernel.ROWS_BEFORE_COLUMNS:
        # the rows' copy, made once per slice for all column blocks
        body = held(panel_held, For(kc, kloop.lo, kloop.hi, Seq((row_pack[0], For(
            jc, col.lo, col.hi, seq(packs + [tiles]), step=nc))), step=kc_))
        return For(ic, loop.lo, loop.hi, Allocate(rows_panel, body), step=mc, kind=loop.kind)
    body = held(panel_held, For(jc, col.lo, col.hi, ks_loop, step=nc))
    return For(ic, loop.lo, loop.hi, held(rows_panel, body), step=mc, kind=loop.kind)


def _whole_periods(value: E.Expr, kloop: For, k: E.Var, limit: int) -> int:
    """The period of ``value``'s digits in ``k`` (:func:`.digits.window_period`, at
    most ``limit``) when the reduction's constant bounds are whole periods, else 1."""
    period = window_period(value, k, limit)
    lo, hi = kloop.lo, kloop.hi
    if period > 1 and isinstance(lo, E.Const) and isinstance(hi, E.Const) and (
            int(lo.value) % period == 0 and int(hi.value) % period == 0):
        return period
    return 1


def _split_columns(loop: For, host: Host, itemsize: int, mr: int, nr: int, cores: int,
                   iext: int | None, jext: int | None, kext: int | None,
                   sizes) -> tuple[int, int, int] | None:
    """``(mc, kc, nc)`` when the threads should take blocks of columns instead of rows, else
    None.  Every row block packs the whole shared operand again, so shrinking the row blocks
    until each core has one multiplies that packing by the cores when one block would hold
    all the rows: a stride-2 convolution's weight gradient (128 x 576, 2048 terms, its panel
    gathered from the image) ran no faster on two threads than on one.  When the rows fit
    in fewer blocks than there are cores and the columns make at least one strip per core,
    the column blocks (the one-core row blocking, ``nc`` cut into a multiple of the cores)
    are the parallel loop: each thread packs only its own columns' panels.  Legal as the row
    split: distinct column blocks write distinct elements of ``C``."""
    if loop.kind != "parallel" or cores <= 1 or iext is None or jext is None:
        return None
    mc, kc, nc = clamp_blocks(sizes(host, itemsize, mr, nr, 1, iext), kext, jext, nr)
    if _cdiv(iext, mc) >= cores or jext < cores * nr:
        return None
    blocks = _cdiv(_cdiv(jext, nc), cores) * cores
    return mc, kc, _cdiv(_cdiv(jext, blocks), nr) * nr


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
