"""The register-blocked micro-kernel of the CPU GEMM schedule (BLIS's micro-kernel).

Inside one ``kc x nc`` block of :func:`.gemm.block_caches`, the ``mr x nr`` tiles of ``C``
are computed one at a time with the tile held in registers over the whole ``kc`` slice
(Goto & van de Geijn, "Anatomy of high-performance matrix multiplication", 2008, section 5;
Van Zee & van de Geijn, "BLIS", 2015, the micro-kernel)::

    for (i0, ic, <whole tiles of mr>, step mr) {
      for (j0, jc, <whole tiles of nr>, step nr) {
        allocate acc: T[mr, nr] (local) {
          lanes for (jj, 0, nr) { acc[r, jj] = C[i0 + r, j0 + jj] }             r < mr
          for (k, kc, khi) {
            lanes for (jj, 0, nr) { acc[r, jj] = acc[r, jj] + v(i0 + r, k, j0 + jj) } }
          lanes for (jj, 0, nr) { C[i0 + r, j0 + jj] = acc[r, jj] } } }
      <the columns past the whole tiles, mr rows at a time, the j loop innermost>
    }
    for (i0, <rows past the whole tiles>) { <the same with 1 x nr tiles> }

``lanes`` loops (:mod:`tecomp.lanes`, one vector register wide; each row of the tile is
``nr / lanes`` statements) are emitted as vector operations: ``acc`` lives in
``mr * nr / lanes`` vector registers, each ``k`` loads ``nr / lanes`` vectors of the packed
panel, broadcasts ``mr`` elements of ``A`` and issues ``mr * nr / lanes`` fused multiply-adds.
The tile fills most of the vector register file: ``nr = 2`` vectors and ``mr`` rows such
that ``2 mr + 3 <= registers``, at most 8: 8 x 32 float32 with 32 AVX-512 registers (16
accumulators; 12 rows measured slower, by 7% at n = 1024 and 30% at n = 512, where 12 also
leaves a tail of rows), 6 x 16 with 16 AVX2 registers (BLIS's Haswell shape).

The shared operand (``B[k, j]``) is packed per block in micro-panel order, ``panel[(j - jc)
// nr, k - kc, (j - jc) % nr]``, so that the tile streams ``kc x nr`` contiguous elements.
The row operand (``A[i, k]``, broadcast) is read in place when it is a plain read with unit
stride along ``k``; a fused prologue (a ReLU layer's weight gradient broadcasts
``select(h[k, i] >= 0, g[k, i], 0)``) or a read strided along ``k`` is packed per block
too, ``rows[(i - ic) // mr, k - kc, (i - ic) % mr]`` (:func:`row_operand`,
:func:`pack_rows`), so that it is computed once per block instead of once per tile: an MLP's
gradient (784-1024-10, batch 256) 23% faster, a 1024^3 matmul's 17%, one AVX-512 core.
The schedules copy it once per slice of ``k``, before the column blocks (the slice loop
outside them; legal as the slices of each element still come in increasing order): once
per column block, the same gradient took 12.3 ms instead of 10.0 on one Zen 4 core.

Legality: each ``C[i, j]`` still receives its own terms in increasing ``k`` as one chain of
additions (the accumulator starts from ``C``'s partial sum of the earlier slices), so the
result equals the scalar nest's up to the fused multiply-adds the fast-math flags allow.
The lanes of a tile are distinct columns of ``C``, so they are independent.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.functor import fresh_name
from tecomp.host import Host
from tecomp.lanes import vector_form
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, IfThenElse, Seq, Stmt, Store
from tecomp.stmt_functor import (
    eval_int,
    expr_children,
    expr_vars,
    replace_expr,
    subst,
    subst_expr,
    walk_expr,
)

from .digits import by_period, fresh_var, index_const
from .tile import const_extent, plus, seq, split_end

#: copy a packed row operand once per slice of ``k``, before the column blocks (module doc);
#: False: once per column block, inside them (an A/B switch of ``benchmarks/ab_cpu_steps.py``)
ROWS_BEFORE_COLUMNS = True

#: read a sliding window's image in place instead of packing it (:func:`window_in_place`);
#: False: always pack (an A/B switch of ``benchmarks/ab_cpu_steps.py``)
IN_PLACE = True

#: copy a transposed panel (``W[j, k]``) by blocks of rows, the reduction innermost
#: (:func:`pack_panel`, :func:`transpose_block`); False: a strided gather per row (an A/B
#: switch of ``benchmarks/ab_cpu_steps.py``)
TRANSPOSED_COPY = True

#: copy a strip known to be whole (every block whole strips, :func:`.tile.strips_end`) by
#: its lane loop alone (:func:`pack_panel`'s ``whole``); False: the lane loop behind a test
#: of the strip's width, with the partial copies beside it (an A/B switch of
#: ``benchmarks/ab_cpu_steps.py``)
WHOLE_PACKS = True

#: copy a strip of a flattened image by image rows when they are at least ROW_LEAST elements
#: wide (:func:`pack_panel`); False: only rows of half a strip or more (an A/B switch of
#: ``benchmarks/ab_cpu_steps.py``)
NARROW_ROWS = True
ROW_LEAST = 8


def vector_registers(host: Host) -> int:
    """Vector registers of the host's instruction set (32 with AVX-512 or NEON, else 16)."""
    feats = set(host.features.split(","))
    return 32 if {"+avx512f", "+neon", "+sve"} & feats else 16


def tile_shape(host: Host, itemsize: int) -> tuple[int, int]:
    """``(mr, nr)``: ``nr`` two vectors, ``mr`` rows filling the registers (module doc)."""
    nr = 2 * host.lanes(itemsize)
    mr = max(1, min(8, (vector_registers(host) - 3) // 2))
    return mr, nr


def clamp_blocks(blocks: tuple[int, int, int], kext: int | None, jext: int | None,
                 nr: int) -> tuple[int, int, int]:
    """``(mc, kc, nc)`` no larger than constant extents need (smaller packed panels)."""
    mc, kc, nc = blocks
    if kext is not None:
        kc = max(1, min(kc, kext))
    if jext is not None:
        nc = max(nr, min(nc, -(-jext // nr) * nr))
    return mc, kc, nc


def pack_panel(x: BufferLoad, buf: Buffer, k: E.Var, j: E.Var, kc: E.Var, khi: E.Expr,
               jc: E.Var, jhi: E.Expr, nr: int, names: set[str],
               width: int | None = None, period: int = 1, block: int = 0,
               whole: bool = False) -> Stmt:
    """Copy the read ``x`` (of ``k`` and ``j``) over the block into ``buf`` in micro-panel
    order: strip ``jb`` holds columns ``jc + jb*nr ...``, row ``k - kc``, unit stride.

    When ``x`` reads a flattened image (``X[.., j // w + ry, j % w + rx]``, an implicit
    GEMM's columns) with rows of at least :data:`ROW_LEAST` elements, each strip is copied by
    image rows:
    for ``j`` in the part of the strip inside row ``y``, ``j // w = y`` and ``j % w = j - y*w``
    exactly, so every copy loop reads and writes with unit stride instead of dividing per
    element (a 3x3 convolution's forward over 32x32 images, 64 -> 64 channels, 24% faster on
    one AVX-512 core; a 1x1 one over 16x16, 256 -> 64, 35%; rows of 8 in strips of 32, a
    stride-2 3x3 forward over 8x128x16x16 -> 256, 11% on an AVX-512 AMD EPYC, where rows of
    half a strip or more were the rule before).  With ``width`` (the lanes of
    a vector register), a copy of a whole strip is a lane loop of ``nr / width`` vector
    loads and stores: LLVM's loop vectoriser, interleaving four vectors, would leave a
    32-element copy to its scalar remainder.  When ``x`` runs with unit stride along ``k``
    and ``j`` enters it through divisions (a strided convolution's weight gradient), each
    column is copied with ``k`` innermost instead: the stride-2 3x3 weight gradient of
    ``8x64x32x32 -> 128`` spent about 8 ns an element gathering a strip per ``k``; with
    ``period`` (slices of whole periods of ``k``'s box), that column loop runs over the
    box's digits, :func:`by_period`, without a division per element).  ``whole``: every strip
    of every block is known to be whole (:func:`.tile.strips_end`), so a strip is copied by
    the lane loop alone, with no branch to a partial copy (a transformer block's weight
    gradient spent 190 ms in LLVM on the eight unswitched, unrolled copies of a branch that
    never ran).

    A transposed operand (a dense layer's ``W[j, k]``: unit stride along ``k``, not along
    ``j``) with ``block`` (:func:`transpose_block`) is copied by blocks of ``block`` rows of
    the strip, each column's part of the block with ``k`` innermost: the reads walk memory
    with unit stride and the block's lines stay in L1 while its columns fill them, where a
    strip row at a time gathered ``nr`` elements a row stride apart (``x @ W.T`` over
    512x3072 -> 768: 30.5 -> 24.6 ms, one core of an AVX-512 AMD EPYC)."""
    jb = fresh_var("jb", names)
    start = E.add(jc, E.mul(jb, index_const(nr)))
    strips = E.floordiv(E.add(E.sub(jhi, jc), index_const(nr - 1)), index_const(nr))
    end = E.minimum(E.add(start, index_const(nr)), jhi)
    c = fresh_var("jx", names)
    w = _row_width(x, j, ROW_LEAST if NARROW_ROWS else max(8, nr // 2))
    along_k = w is None and _unit_stride(x, k) and not _unit_stride(x, j)
    # the source runs along k, not along j: each column of the strip copied with k
    # innermost, so the loads walk memory with unit stride
    copy = Store(buf, (jb, E.sub(k, kc), E.sub(c, start)), subst_expr(x, {j: c}))
    if along_k and _divided(x, j):
        # j enters it through divisions (a strided convolution's weight gradient reads its
        # image at X[n, c, 2 y + ky, 2 x + kx] with j = (c, ky, kx), k = (n, y, x)): the
        # column's part of the address (its divisions) is computed once per column, not once
        # per element; k in the digits of its box when the slices are whole periods
        column = by_period(k, kc, khi, copy, period, names, K_UNROLL) or For(k, kc, khi, copy)
        return For(jb, index_const(0), strips, For(c, start, end, column))
    if along_k and block and TRANSPOSED_COPY:
        # a transposed operand (a dense layer's W[j, k]): ``block`` rows of the strip at a
        # time, so that their lines stay in L1 while the columns fill them
        kb = fresh_var("kb", names)
        bhi = E.minimum(E.add(kb, index_const(block)), khi)
        return For(jb, index_const(0), strips, For(kb, kc, khi, For(
            c, start, end, For(k, kb, bhi, copy)), step=block))
    if w is None:
        copy = _strip_copy(buf, (jb, E.sub(k, kc)), start, x, j, c, start, end, nr, width, names,
                           whole)
        return For(jb, index_const(0), strips, For(k, kc, khi, copy))
    y = fresh_var("jy", names)
    first = E.maximum(start, E.mul(y, index_const(w)))
    last = E.minimum(end, E.mul(E.add(y, index_const(1)), index_const(w)))
    quot, rem = E.floordiv(j, index_const(w)), E.mod(j, index_const(w))
    read = BufferLoad(x.buffer, tuple(
        replace_expr(replace_expr(e, quot, y), rem, E.sub(j, E.mul(y, index_const(w))))
        for e in x.indices), x.dtype)
    rows = For(y, E.floordiv(start, index_const(w)),
               E.add(E.floordiv(E.sub(end, index_const(1)), index_const(w)), index_const(1)),
               _strip_copy(buf, (jb, E.sub(k, kc)), start, read, j, c, first, last, nr, width,
                           names))
    return For(jb, index_const(0), strips, For(k, kc, khi, rows))


def transpose_block(host: Host, nr: int, itemsize: int) -> int:
    """Rows of a strip copied together by :func:`pack_panel` from a transposed operand: a
    block of ``nr`` columns that fills a quarter of L1 (at least 8 rows)."""
    return max(8, host.l1d // (4 * nr * itemsize) // 8 * 8)


def _strip_copy(buf: Buffer, at: tuple[E.Expr, ...], start: E.Expr, read: BufferLoad,
                j: E.Var, c: E.Var, lo: E.Expr, hi: E.Expr, nr: int, width: int | None,
                names: set[str], whole: bool = False) -> Stmt:
    """``buf[at.., j - start] = read(j)`` for ``j`` in ``[lo, hi)`` (at most ``nr``), as
    lane loops when the range is a whole strip or one vector (``pack_panel``); ``whole``:
    the range is known to be a whole strip."""
    plain = For(c, lo, hi, Store(buf, at + (E.sub(c, start),), subst_expr(read, {j: c})))
    if width is None or nr % width:
        return plain
    jj = fresh_var("jj", names)

    def lanes(n: int) -> For:
        items = []
        for h in range(0, n, width):
            col = E.add(lo, plus(jj, h))
            items.append(Store(buf, at + (E.sub(col, start),), subst_expr(read, {j: col})))
        return For(jj, index_const(0), index_const(width), Seq(tuple(items)), kind="lanes")

    strip = lanes(nr)
    if vector_form(strip) is None:
        return plain
    if whole and WHOLE_PACKS:
        return strip
    if nr > width:  # a row of one vector (16-wide images in strips of 32)
        plain = IfThenElse(E.compare(E.EQ, E.sub(hi, lo), index_const(width)), lanes(width),
                           plain)
    return IfThenElse(E.compare(E.EQ, E.sub(hi, lo), index_const(nr)), strip, plain)


def _terms(e: E.Expr) -> list[E.Expr]:
    """The summands of ``e`` (through ``+``; a subtracted term keeps its ``Sub``)."""
    if isinstance(e, E.Add):
        return _terms(e.a) + _terms(e.b)
    if isinstance(e, E.Sub):
        return _terms(e.a) + [E.Sub(E.Const(0, e.dtype), e.b, e.dtype)]
    return [e]


def _unit_stride(x: BufferLoad, v: E.Var, least: int = 8) -> bool:
    """Whether the last index of ``x`` steps by one with ``v`` (over runs of at least
    ``least``): exactly one of its summands involves ``v``, and it is ``v`` or ``v % c``
    (``c >= least``)."""
    if not x.indices:
        return False
    moving = [t for t in _terms(x.indices[-1]) if v in expr_vars(t)]
    if len(moving) != 1:
        return False
    (t,) = moving
    if t == v:
        return True
    return (isinstance(t, E.Mod) and t.a == v and isinstance(t.b, E.Const)
            and not isinstance(t.b.value, bool) and int(t.b.value) >= least)


def _divided(x: BufferLoad, v: E.Var) -> bool:
    """Whether ``v`` enters an index of ``x`` through a division or a remainder."""
    return any(isinstance(e, (E.FloorDiv, E.Mod)) and v in expr_vars(e) for e in walk_expr(x))


def _row_width(x: BufferLoad, j: E.Var, least: int) -> int | None:
    """The one constant ``w >= least`` such that ``j`` enters ``x``'s indices through
    ``j // w`` and ``j % w`` (and affine terms) only, else None (rows narrower than
    ``least``: copy loops of a few elements measured slower than the division per
    element)."""
    found: set[int] = set()
    for e in walk_expr(x):
        if isinstance(e, (E.FloorDiv, E.Mod)) and j in expr_vars(e):
            if e.a != j or not isinstance(e.b, E.Const) or isinstance(e.b.value, bool):
                return None
            found.add(int(e.b.value))
        elif isinstance(e, (E.Min, E.Max, E.Select)) and j in expr_vars(e):
            return None
    if len(found) != 1:
        return None
    (w,) = found
    return w if w >= least else None


def window_in_place(x: BufferLoad, j: E.Var, k: E.Var, jlo: E.Expr, width: int,
                    nr: int) -> int | None:
    """The image row width ``w`` when the tiles may read the panel read ``x`` where it
    lies instead of from a packed copy (:data:`IN_PLACE`), else None.

    ``x`` must read a flattened image (``X[.., j // w + ry, j % w + rx]`` through a 3x3
    window, ``X[.., j // w, j % w]`` for a 1x1 kernel: ``j`` in the last index through ``j
    % w`` with unit coefficient), with ``w`` a multiple of the vector width and the column
    range starting at a multiple of it.  Every tile then starts at a multiple of the width,
    so each of its vectors lies inside one image row: for ``j = s + jj`` (``s`` the
    vector's first column, ``0 <= jj < width``), ``j // w = s // w`` and ``j % w = s % w +
    jj`` exactly, and the vector is ``width`` consecutive elements of the image (read by
    :func:`aligned_read`).  A window's overlapping rows and taps then hit the cache lines
    of the step before, where the packed copy held each of a 3x3 window's nine shifted
    copies of the image; a 1x1 kernel's rows are read once per tile instead of copied and
    read (8x256x16x16 -> 64: 0.49 -> 0.45 ms, one AVX-512 core), unless a step of ``k``
    moves a multiple of 4 KiB (:data:`ALIASING`): then the tile's reads of consecutive
    steps share their cache sets and falsely depend on each other's addresses, and the
    packed copy is faster (a 32x32 image's 1x1 convolution, 64 -> 128: 1.07 -> 1.14 ms read
    in place)."""
    if not IN_PLACE or not isinstance(jlo, E.Const) or int(jlo.value) % width:
        return None
    w = _row_width(x, j, max(8, nr // 2))
    if w is None or w % width or not x.indices:
        return None
    last = _terms(x.indices[-1])
    if E.Mod(j, index_const(w), j.dtype) not in last:
        return None
    if not any(k in expr_vars(t) for t in last):  # no window: one row of the image a step
        at = addresses(x, k, 2)
        if at is None or (at[1] - at[0]) * _BYTES.get(x.dtype, 4) % ALIASING == 0:
            return None
    start, lane = E.Var("start", j.dtype), E.Var("lane", j.dtype)
    probe = aligned_read(x, j, w, start, lane)
    if j in expr_vars(probe) or any(lane in expr_vars(e) for e in probe.indices[:-1]):
        return None
    moving = [t for t in _terms(probe.indices[-1]) if lane in expr_vars(t)]
    return w if moving == [lane] else None


#: bytes apart at which two reads share their L1 sets and 4K-alias (a page: the way size
#: of the x86 L1 data caches and the span of their address disambiguation)
ALIASING = 4096

_BYTES = {"float64": 8, "float32": 4}


def aligned_read(x: BufferLoad, j: E.Var, w: int, start: E.Expr, lane: E.Expr) -> BufferLoad:
    """``x`` at ``j = start + lane`` for a ``start`` that is a multiple of the vector width
    and a lane inside that vector, when ``w`` is a multiple of the width
    (:func:`window_in_place`): ``j // w`` becomes ``start // w``, ``j % w`` becomes
    ``start % w + lane``."""
    quot = E.FloorDiv(j, index_const(w), j.dtype)
    rem = E.Mod(j, index_const(w), j.dtype)
    row = E.floordiv(start, index_const(w))
    col = E.add(E.mod(start, index_const(w)), lane)
    return BufferLoad(x.buffer, tuple(replace_expr(replace_expr(e, quot, row), rem, col)
                                      for e in x.indices), x.dtype)


def micro_tiles(st: Store, i: E.Var, k: E.Var, j: E.Var, ic: E.Var, ihi: E.Expr,
                kc: E.Var, khi: E.Expr, jc: E.Var, jhi: E.Expr, mr: int, nr: int,
                width: int, panels: list[tuple[BufferLoad, Buffer]],
                names: set[str], rows: tuple[E.Expr, Buffer] | None = None,
                ends: tuple[E.Expr, E.Expr] | None = None) -> Stmt | None:
    """One block's computation as register tiles (module doc), or None when the tile's
    update is not a lane loop the backend emits as vectors.  ``st`` is the update
    ``C[.., i, .., j] += v(i, k, j)``; ``width`` the lanes of one vector register (``nr``
    a multiple of it); ``panels`` the packed reads and their buffers; ``rows`` the row
    operand (:func:`row_operand`) and its packed copy (:func:`pack_rows`), which the whole
    tiles' rows read instead; ``ends`` the ends of the whole tiles' rows and columns
    (:func:`.tile.strips_end`; default :func:`.tile.split_end`): no tails are made where
    they are ``ihi`` and ``jhi`` themselves."""
    i0, j0 = fresh_var(f"{i.name}0", names), fresh_var(f"{j.name}0", names)
    jj = fresh_var("jj", names)
    dt = st.buffer.dtype
    iend, jend = ends or (split_end(ic, ihi, mr), split_end(jc, jhi, nr))

    def value_at(col: E.Expr, strip: E.Expr, lane: E.Expr, packed: bool) -> E.Expr:
        """The update's value at column ``col``, held at ``lane`` of the panel's ``strip``
        (``packed``: the row operand from its packed copy)."""
        v = st.value
        for x, buf in panels:
            v = replace_expr(v, x, BufferLoad(buf, (strip, E.sub(k, kc), lane), x.dtype))
        if packed and rows is not None:
            a, buf = rows
            at = (E.floordiv(E.sub(i0, ic), index_const(mr)), E.sub(k, kc), E.sub(i, i0))
            v = replace_expr(v, a, BufferLoad(buf, at, a.dtype))
        return subst_expr(v, {j: col})

    tile_strip = E.floordiv(E.sub(j0, jc), index_const(nr))

    def lanes(items: list[Stmt]) -> For:
        return For(jj, index_const(0), index_const(width), Seq(tuple(items)), kind="lanes")

    def tile(nrows: int) -> tuple[Stmt, For, For]:
        acc = Buffer(fresh_name("acc", names), (index_const(nrows), index_const(nr)), dt,
                     "local")
        names.add(acc.name)
        tile_value = value_at(E.add(j0, jj), tile_strip, jj, nrows == mr)
        loads, updates, stores = [], [], []
        for r in range(nrows):
            for h in range(0, nr, width):  # one statement per vector register of the tile
                lane = plus(jj, h)
                row = {i: plus(i0, r), jj: lane}
                dst = tuple(subst_expr(e, row | {j: E.add(j0, lane)}) for e in st.indices)
                here = (index_const(r), lane)
                loads.append(Store(acc, here, BufferLoad(st.buffer, dst, dt)))
                updates.append(Store(acc, here, E.add(BufferLoad(acc, here, dt),
                                                      subst_expr(tile_value, row))))
                stores.append(Store(st.buffer, dst, BufferLoad(acc, here, dt)))
        update, first = lanes(updates), lanes(loads)
        steps = (unrolled_steps(k, kc, khi, update, names) if nrows == mr and rows is None
                 else For(k, kc, khi, update))
        body = Allocate(acc, Seq((first, steps, lanes(stores))))
        return body, update, first

    def columns_past_tiles(nrows: int) -> list[Stmt]:
        if jend is jhi:
            return []
        # j in [jend, jhi): the panel's strip (jend - jc) // nr, lane j - jend; affine in j
        v = value_at(j, E.floordiv(E.sub(jend, jc), index_const(nr)), E.sub(j, jend),
                     nrows == mr)
        return [For(k, kc, khi, For(j, jend, jhi, Seq(tuple(
            replace(st, indices=tuple(subst_expr(e, {i: plus(i0, r)}) for e in st.indices),
                    value=subst_expr(v, {i: plus(i0, r)}))
            for r in range(nrows)))))]

    full_tile, update, first = tile(mr)
    if vector_form(update) is None or vector_form(first) is None:
        return None
    full = For(i0, ic, iend, seq([For(j0, jc, jend, full_tile, step=nr)]
                                 + columns_past_tiles(mr)), step=mr)
    if iend is ihi:
        return full
    row_tile, _, _ = tile(1)
    return Seq((full, For(i0, iend, ihi, seq([For(j0, jc, jend, row_tile, step=nr)]
                                             + columns_past_tiles(1)))))


#: steps of the reduction in one trip of a tile's loop (:func:`unrolled_steps`)
K_UNROLL = 4

#: the tile's loop carries the steps a trip as its ``unroll`` hint and the code generator
#: makes the copies (LLVM's unroller, the remainder apart); False: the schedule writes them
#: out (an A/B switch of ``benchmarks/ab_cpu_steps.py``, step ``backend_unroll``)
UNROLL_IN_BACKEND = True

#: the unrolled tile loop of a slice counts its steps from 0 (:func:`unrolled_steps`); False:
#: from the slice's start (an A/B switch of ``benchmarks/ab_cpu_steps.py``)
FROM_ZERO = True


def unrolled_steps(k: E.Var, lo: E.Expr, hi: E.Expr, body: Stmt,
                   names: set[str] | None = None) -> Stmt:
    """``for (k, lo, hi) body`` run :data:`K_UNROLL` steps a trip over the whole groups of
    steps, then the rest one step a trip.  LLVM leaves the tile's loop rolled otherwise, and
    its counter, compare and branch then issue beside every ``mr x nr / lanes``
    multiply-adds: four steps a trip took a float32 matmul from 130 to 147 GFLOP/s at 1024^3
    and 129 to 145 at 2048^3 on one AVX-512 core (eight: no further gain).  The steps run
    in the same order, so the sums are unchanged.  Only the whole tiles that broadcast the
    row operand in place take it: with a packed row operand (an MLP's gradient, a matmul's)
    and on the row tails it measured no faster, and the copies cost LLVM time (the symbolic
    transformer block's gradient: 37k -> 70k lines of IR, 3.4 -> 4.0 s to compile).

    With :data:`UNROLL_IN_BACKEND` the loop stays one loop with ``unroll=K_UNROLL``, and
    LLVM's unroller makes the copies and the remainder: the same multiply-adds a trip, the
    kernels within noise of the written-out copies (``python -m benchmarks.ab_cpu_steps
    --only backend_unroll``, one Intel Xeon core with AVX-512: 0.98-1.02x over its
    contractions), while Python emits and prints a quarter of the tile's IR: cold builds in
    pairs of fresh processes (``python benchmarks/compile_time.py --ab
    tecomp.passes.schedule.cpu.microkernel.UNROLL_IN_BACKEND=False --pairs 3``, medians,
    written-out / hint) of the symbolic transformer block 2.02 / 1.68 s, attention 0.81 /
    0.72 s, the DOF Laplacian 0.50 / 0.43 s, the others within 4%.  Otherwise the schedule
    writes the copies out: trips of ``K_UNROLL`` copies of ``body`` with ``k`` stepping by
    ``K_UNROLL``, then the rest one step a trip; a loop a constant extent leaves empty is
    dropped.

    With :data:`FROM_ZERO` and ``names`` (the names in use), a loop whose start is not a
    constant (the ``k`` slice of a blocked contraction, ``kc``) counts from 0 to ``hi - lo``
    instead, the body reading ``lo + t``: the same steps in the same order.  Unrolled by LLVM
    with its start a loop variable, the loop's forty addresses (eight broadcasts and two
    vectors, four steps a trip) cost loop strength reduction about 30 ms of a 65 ms body
    (the symbolic transformer block's ``W1`` gradient, ``-time-passes``); counted from 0,
    such bodies compile in 46 instead of 64 ms, and the block's modules in 0.88-0.92x the
    LLVM time (two measurements), the kernels within 2% (``python -m benchmarks.ab_cpu_steps
    --only from_zero``, one Intel Xeon core: 0.99-1.02x over its contractions)."""
    u = K_UNROLL
    if u <= 1:
        return For(k, lo, hi, body)
    if UNROLL_IN_BACKEND:
        if FROM_ZERO and names is not None and not isinstance(lo, E.Const):
            t = fresh_var(f"{k.name}_step", names)
            return For(t, index_const(0), E.sub(hi, lo), subst(body, {k: E.add(lo, t)}),
                       unroll=u)
        return For(k, lo, hi, body, unroll=u)
    mid = split_end(lo, hi, u)
    copies = Seq(tuple(subst(body, {k: plus(k, s)}) if s else body for s in range(u)))
    parts = [For(k, lo, mid, copies, step=u), For(k, mid, hi, body)]
    kept = tuple(x for x in parts if const_extent(x.lo, x.hi) != 0)
    return kept[0] if len(kept) == 1 else Seq(kept)


def row_operand(value: E.Expr, i: E.Var, j: E.Var, k: E.Var, out: Buffer) -> E.Expr | None:
    """The one largest part of a tile's update ``value`` that moves with the row ``i`` and
    ``k`` but not ``j`` (``A[i, k]``, or a fused prologue such as a ReLU gradient's
    ``select(h[k, i] >= 0, g[k, i], 0)``), when it is worth packing: a computed expression
    (evaluated once per row and step instead of once per tile), or a read that does not walk
    memory with unit stride along ``k`` (a transposed convolution's weights ``W[t, c, 1, 1]``:
    a step's ``mr`` broadcasts then touch ``mr`` cache lines, and every step new ones); else
    None."""
    found: list[E.Expr] = []

    def visit(e: E.Expr) -> None:
        used = expr_vars(e)
        if j in used:
            for c in expr_children(e):
                visit(c)
        elif {i, k} <= used and e not in found:
            found.append(e)

    visit(value)
    if len(found) != 1:
        return None
    (a,) = found
    if any(isinstance(x, BufferLoad) and x.buffer == out for x in walk_expr(a)):
        return None
    if isinstance(a, BufferLoad) and unit_steps(a, k) is not False:
        return None
    return a


def unit_steps(x: BufferLoad, k: E.Var, probe: int = 16) -> bool | None:
    """Whether ``probe`` consecutive steps of ``k`` (the other variables 0) read consecutive
    elements of ``x``'s buffer (row-major): a weight gradient's or convolution's linearised
    ``W[f, k // 9, k // 3 % 3, k % 3]`` does; None when the buffer's shape or an index is
    not a constant form :func:`tecomp.stmt_functor.eval_int` reads."""
    addrs = addresses(x, k, probe)
    return None if addrs is None else all(b - a == 1 for a, b in zip(addrs, addrs[1:]))


def addresses(x: BufferLoad, k: E.Var, steps: int) -> list[int] | None:
    """The row-major element offsets ``x`` reads at ``k = 0, 1, .., steps - 1`` with every
    other variable 0; None when the buffer's shape or an index is not a constant form
    :func:`tecomp.stmt_functor.eval_int` reads."""
    shape = [const_extent(index_const(0), d) for d in x.buffer.shape]
    if None in shape or len(shape) != len(x.indices):
        return None
    env = {v: 0 for v in set().union(*(expr_vars(e) for e in x.indices))}
    addrs = []
    try:
        for step in range(steps):
            env[k] = step
            addr = 0
            for e, n in zip(x.indices, shape):
                addr = addr * n + eval_int(e, env)
            addrs.append(addr)
    except Exception:  # noqa: BLE001 - a form eval_int does not read
        return None
    return addrs


def pack_rows(a: E.Expr, buf: Buffer, i: E.Var, k: E.Var, ic: E.Var, iend: E.Expr,
              kc: E.Var, khi: E.Expr, mr: int, names: set[str]) -> Stmt:
    """Copy the row operand ``a`` (of ``i`` and ``k``) over the block's whole tiles into
    ``buf`` in micro-panel order: strip ``ib`` holds rows ``ic + ib*mr ...``, step
    ``k - kc``, the ``mr`` rows of one step contiguous."""
    ib, r = fresh_var("ib", names), fresh_var("ir", names)
    row = E.add(ic, E.add(E.mul(ib, index_const(mr)), r))
    strips = E.floordiv(E.sub(iend, ic), index_const(mr))
    copy = Store(buf, (ib, E.sub(k, kc), r), subst_expr(a, {i: row}))
    return For(ib, index_const(0), strips,
               For(k, kc, khi, For(r, index_const(0), index_const(mr), copy)))
