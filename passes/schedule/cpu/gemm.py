"""Cache blocking of "i, k, j" sums for the CPU (the loop structure of Goto's GEMM).

:func:`.tile.block_rows` turns the row loop of ``C[i, j] = sum_k v(i, k, j)`` (lowered in the
"i, k, j" order) into a register-blocked loop: ``R`` rows share each loaded ``B[k, j]`` and
``U`` steps of ``k`` fold into one update of ``C``.  Every block of ``R`` rows still streams the
whole ``K x N`` operand ``B`` and its ``R x N`` rows of ``C``, which is slow once ``B``
outgrows the level-2 cache: a float32 matmul on one core of an AVX-512 host ran at about 90
GFLOP/s at ``n = 512`` but 40-48 at ``n = 1024, 2048`` (56 and 66 with this pass; OpenBLAS
100-140).  :func:`block_caches` adds the cache blocking of Goto & van de Geijn ("Anatomy of
high-performance matrix multiplication", ACM TOMS 34(3), 2008) in the loop order of BLIS
(Van Zee & van de Geijn, "BLIS: a framework for rapidly instantiating BLAS functionality",
ACM TOMS 41(3), 2015): the ``j`` range is cut into columns of ``nc``, the reduction into
slices of ``kc``, the rows into blocks of ``mc``::

    for (ic, ilo, ihi, step mc) {                                   # keeps the row loop's kind
      for (i, ic, min(ic + mc, ihi)) { for (j, jlo, jhi) { C[i, j] = 0 } }
      for (jc, jlo, jhi, step nc) { for (kc, klo, khi, step kc_) {
        for (i, ic, min(ic + mc, ihi)) {                            # then block_rows' rewrite
          for (k, kc, min(kc + kc_, khi)) { for (j, jc, min(jc + nc, jhi)) {
            C[i, j] += v(i, k, j) } } } } }
    }

Block sizes, from the host's caches (:class:`tecomp.host.Host`; ``e`` bytes an element)::

    nc = L1 / (2 (R + U) e)   rounded down to whole vectors: the R rows of C and the U rows of
                              B that one folded step touches stay in half of L1
    kc = L2 / (2 nc e)        rounded down to a multiple of U: the kc x nc panel of B that a
                              block of rows reuses sits in half of L2 (the other half: A, C)
    mc = L3 / (4 kc e)        rounded down to a multiple of R, at most 512; with threads and
                              a constant row count, shrunk so that the number of row blocks
                              is a multiple of the cores (every core gets whole blocks)

With ``pack`` (the default) and a float result, each block is computed by the register-tiled
micro-kernel of :mod:`.microkernel` instead (blocks from :func:`micro_block_sizes`): the
``kc x nc`` panel of the operand that does not move with the row is packed in micro-panel
order and ``mr x nr`` tiles of ``C`` accumulate in vector registers over the slice; this
also applies when ``B`` fits in L2 (the panel then removes the strided reads of a
transposed operand), and plain-order reductions (``x @ W.T``) take the same path with their
epilogue (:mod:`.gemm_dot`).  When the row operand is packed as well, the ``kc`` loop runs
outside the ``jc`` loop, so that each slice of rows is copied once for all column blocks.
Otherwise (integers, or a tile the backend cannot emit as
vectors) the register tile is the ``R x (vector)`` one of :func:`.tile.block_rows`: LLVM
keeps the ``R`` rows' partial sums of one vector of ``j`` in registers over ``U`` steps of
``k`` and broadcasts ``A[i + r, k + u]``.

Legality.  The rewrite applies to the row loops :func:`.tile.match_row_loop` accepts with one
reduction loop, when ``B`` (``K x N`` elements) does not already fit in half of L2 (symbolic
sizes are always blocked).  Every element ``C[i, j]`` is zeroed once, in its own row block,
before any of its terms is added, then receives exactly its own terms in increasing ``k`` (the
``kc`` slices run in increasing order, the ``k`` within one in increasing order) as the same
left-to-right chain of additions, so results are bit-identical to the nest before.  Row blocks
write disjoint rows of ``C``, so a parallel row loop stays parallel over ``ic``.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.functor import fresh_name
from tecomp.host import Host
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LoweredFunc, Seq, Stmt, Store
from tecomp.stmt_functor import (
    bound_names,
    expr_vars,
    map_loops,
    replace_expr,
    walk_expr,
)

from . import microkernel
from .gemm_dot import dot_blocked
from .microkernel import (
    clamp_blocks,
    micro_tiles,
    pack_panel,
    pack_rows,
    row_operand,
    tile_shape,
    transpose_block,
)
from .tile import const_extent, match_row_loop, seq, strips_end, unroll_rows

#: bytes of an element, by dtype (others: 4)
_BYTES = {"float64": 8, "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "int16": 2,
          "int8": 1, "uint8": 1, "bool": 1}


def block_sizes(host: Host, itemsize: int, rows: int, factor: int,
                cores: int = 1, m: int | None = None) -> tuple[int, int, int]:
    """``(mc, kc, nc)`` for ``host`` (the formulas of the module doc)."""
    lanes = max(1, host.vector_bits // (8 * itemsize))
    nc = max(lanes, host.l1d // (2 * (rows + factor) * itemsize) // lanes * lanes)
    kc = max(factor, host.l2 // (2 * nc * itemsize) // factor * factor)
    l3 = host.l3 if host.l3 > 0 else host.l2
    mc = max(rows, min(512, l3 // (4 * kc * itemsize)) // rows * rows)
    if m is not None and cores > 1:  # whole blocks for every core
        blocks = _cdiv(_cdiv(m, mc), cores) * cores
        mc = max(rows, _cdiv(_cdiv(m, blocks), rows) * rows)
    return mc, kc, nc


def micro_block_sizes(host: Host, itemsize: int, mr: int, nr: int, cores: int = 1,
                      m: int | None = None) -> tuple[int, int, int]:
    """``(mc, kc, nc)`` around an ``mr x nr`` register tile (:mod:`.microkernel`)::

        kc = L1 / (2 mr e)          64 to 384, a multiple of 8: a tile's slice of A (mr x
                                    kc), reused by every tile of the row, in half of L1;
                                    the packed panel streams through the other half
        nc = L2 / (2 kc e)          a multiple of nr: the packed kc x nc panel in half of L2
        mc = L3 / (4 kc e)          a multiple of mr, at most 60 tiles; whole blocks for
                                    every core as in :func:`block_sizes`
    """
    kc = max(64, min(384, host.l1d // (2 * mr * itemsize)) // 8 * 8)
    nc = max(nr, host.l2 // (2 * kc * itemsize) // nr * nr)
    l3 = host.l3 if host.l3 > 0 else host.l2
    mc = max(mr, min(60 * mr, l3 // (4 * kc * itemsize)) // mr * mr)
    if m is not None and cores > 1:
        blocks = _cdiv(_cdiv(m, mc), cores) * cores
        mc = max(mr, _cdiv(_cdiv(m, blocks), mr) * mr)
    return mc, kc, nc


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_caches(func: LoweredFunc, host: Host, *, rows: int = 4, factor: int = 4,
                 max_full: int = 8, threads: bool = True, pack: bool = True) -> LoweredFunc:
    """Cache-block the "i, k, j" sums of ``func`` and register-block them as
    :func:`.tile.block_rows` does (see the module doc); ``pack`` copies each ``kc x nc``
    panel of the operand that does not depend on the row into a contiguous buffer and
    computes the blocks in register tiles (:mod:`.microkernel`), and takes plain-order
    reductions too (:mod:`.gemm_dot`)."""
    names = bound_names(func.body) | {p.name for p in func.params}

    def rewrite(loop: For) -> Stmt | None:
        out = _blocked(loop, host, rows, factor, max_full, threads, names, pack)
        if out is None and pack:
            cores = host.cores if threads and loop.kind == "parallel" else 1
            out = dot_blocked(loop, host, cores, names, micro_block_sizes, max_full)
        return out

    body = map_loops(func.body, rewrite)
    return func if body is func.body else replace(func, body=body)


def _fresh(base: str, names: set[str], dtype: str) -> E.Var:
    name = fresh_name(base, names)
    names.add(name)
    return E.Var(name, dtype)


def _panel_reads(st: Store, i: E.Var, k: E.Var, j: E.Var) -> list[BufferLoad]:
    """The reads of ``st``'s value that move with ``k`` and ``j`` but not with the row ``i``
    (``B[k, j]``, or ``B[j, k]`` of a transposed product), from buffers the nest does not
    write: the operand whose panel every block of rows streams again."""
    out: list[BufferLoad] = []
    for x in walk_expr(st.value):
        if not isinstance(x, BufferLoad) or x in out:
            continue
        used = expr_vars(x)
        if i in used or k not in used or j not in used:
            continue
        if any(isinstance(y, BufferLoad) and y.buffer == st.buffer for y in walk_expr(x)):
            continue
        out.append(x)
    return [x for x in out if not any(x is not y and x in set(walk_expr(y)) for y in out)]


def _blocked(loop: For, host: Host, rows: int, factor: int, max_full: int, threads: bool,
             names: set[str], pack: bool = True) -> Stmt | None:
    m = match_row_loop(loop)
    if m is None:
        return None
    init, ks, inner, st = m
    if len(ks) != 1:
        return None
    (kloop,) = ks
    itemsize = _BYTES.get(st.buffer.dtype, 4)
    kext = const_extent(kloop.lo, kloop.hi)
    jext = const_extent(inner.lo, inner.hi)
    if kext is not None and kext <= max_full:
        return None  # a short window (a convolution's): block_rows unrolls it completely
    iext = const_extent(loop.lo, loop.hi)
    cores = host.cores if threads and loop.kind == "parallel" else 1
    if pack and st.buffer.dtype in ("float32", "float64"):
        mr, nr = tile_shape(host, itemsize)
        if (iext is None or iext >= mr) and (jext is None or jext >= nr):
            micro = _micro_blocked(loop, init, kloop, inner, st, host, cores, iext, names)
            if micro is not None:
                return micro
    if kext is not None and jext is not None and kext * jext * itemsize <= host.l2 // 2:
        return None
    i, k, j = loop.var, kloop.var, inner.var
    mc, kc_, nc = block_sizes(host, itemsize, rows, factor, cores, iext)
    ic = _fresh(f"{i.name}c", names, i.dtype)
    kc = _fresh(f"{k.name}c", names, k.dtype)
    jc = _fresh(f"{j.name}c", names, j.dtype)

    def upto(v: E.Var, n: int, hi: E.Expr) -> E.Expr:
        return E.minimum(E.add(v, E.Const(n, v.dtype)), hi)

    ihi = upto(ic, mc, loop.hi)
    khi, jhi = upto(kc, kc_, kloop.hi), upto(jc, nc, inner.hi)
    packs: list[Stmt] = []
    panels: list[Buffer] = []
    for x in _panel_reads(st, i, k, j) if pack else []:
        # the panel read again by every block of rows, copied once per (kc, jc) block into
        # contiguous memory: unit stride along j, no cache-set conflicts between its rows
        # (a row stride of 4 or 8 KiB maps every row of B onto the same L1 and L2 sets)
        buf = Buffer(fresh_name(f"{x.buffer.name}_panel", names),
                     (E.Const(kc_, "int64"), E.Const(nc, "int64")), x.dtype, "temp")
        names.add(buf.name)
        at = (E.sub(k, kc), E.sub(j, jc))
        packs.append(For(k, kc, khi, For(j, jc, jhi, Store(buf, at, x))))
        st = replace(st, value=replace_expr(st.value, x, BufferLoad(buf, at, x.dtype)))
        panels.append(buf)
    jloop = replace(inner, lo=jc, hi=jhi, body=st)
    kslice = replace(kloop, lo=kc, hi=khi, body=jloop)
    rowloop = For(i, ic, ihi, kslice)
    tile = unroll_rows(rowloop, None, [kslice], jloop, st, rows, factor, max_full) or rowloop
    slices = For(jc, inner.lo, inner.hi,
                 For(kc, kloop.lo, kloop.hi, seq(packs + [tile]), step=kc_), step=nc)
    zero = For(i, ic, ihi, init)
    body: Stmt = Seq((zero, slices))
    for buf in panels:  # one panel per row block: per thread when the row loop is parallel
        body = Allocate(buf, body)
    return For(ic, loop.lo, loop.hi, body, step=mc, kind=loop.kind)


def _micro_blocked(loop: For, init: For, kloop: For, inner: For, st: Store, host: Host,
                   cores: int, iext: int | None, names: set[str]) -> Stmt | None:
    """The blocked nest of the module doc with packed panels and register tiles
    (:mod:`.microkernel`) inside each block; None when the tile is not a vector lane loop."""
    itemsize = _BYTES.get(st.buffer.dtype, 4)
    mr, nr = tile_shape(host, itemsize)
    mc, kc_, nc = clamp_blocks(micro_block_sizes(host, itemsize, mr, nr, cores, iext),
                               const_extent(kloop.lo, kloop.hi),
                               const_extent(inner.lo, inner.hi), nr)
    i, k, j = loop.var, kloop.var, inner.var
    trial = set(names)
    ic = _fresh(f"{i.name}c", trial, i.dtype)
    kc = _fresh(f"{k.name}c", trial, k.dtype)
    jc = _fresh(f"{j.name}c", trial, j.dtype)

    def upto(v: E.Var, n: int, hi: E.Expr) -> E.Expr:
        return E.minimum(E.add(v, E.Const(n, v.dtype)), hi)

    ihi, khi, jhi = upto(ic, mc, loop.hi), upto(kc, kc_, kloop.hi), upto(jc, nc, inner.hi)
    panels = []
    for x in _panel_reads(st, i, k, j):
        buf = Buffer(fresh_name(f"{x.buffer.name}_panel", trial),
                     (E.Const(nc // nr, "int64"), E.Const(kc_, "int64"), E.Const(nr, "int64")),
                     x.dtype, "temp")
        trial.add(buf.name)
        panels.append((x, buf))
    rows = None
    a = row_operand(st.value, i, j, k, st.buffer)
    if a is not None:  # the whole tiles broadcast it from a packed copy
        if iext is not None:
            mc = min(mc, -(-iext // mr) * mr)
        buf = Buffer(fresh_name(f"{st.buffer.name}_rows", trial),
                     (E.Const(mc // mr, "int64"), E.Const(kc_, "int64"), E.Const(mr, "int64")),
                     a.dtype, "temp")
        trial.add(buf.name)
        rows = (a, buf)
        ihi = upto(ic, mc, loop.hi)
    ends = (strips_end(ic, ihi, mr, loop.lo, loop.hi, mc),
            strips_end(jc, jhi, nr, inner.lo, inner.hi, nc))
    tiles = micro_tiles(st, i, k, j, ic, ihi, kc, khi, jc, jhi, mr, nr,
                        host.lanes(itemsize), panels, trial, rows, ends)
    if tiles is None:
        return None
    names |= trial
    packs = [pack_panel(x, buf, k, j, kc, khi, jc, jhi, nr, names, host.lanes(itemsize),
                        block=transpose_block(host, nr, itemsize), whole=ends[1] is jhi)
             for x, buf in panels]
    row_pack = None if rows is None else pack_rows(
        rows[0], rows[1], i, k, ic, ends[0], kc, khi, mr, names)
    if row_pack is not None and microkernel.ROWS_BEFORE_COLUMNS:
        # the rows' copy depends on the slice only: made once for all column blocks
        slices = For(kc, kloop.lo, kloop.hi, seq([row_pack, For(
            jc, inner.lo, inner.hi, seq(packs + [tiles]), step=nc)]), step=kc_)
    else:
        packs += [] if row_pack is None else [row_pack]
        slices = For(jc, inner.lo, inner.hi,
                     For(kc, kloop.lo, kloop.hi, seq(packs + [tiles]), step=kc_), step=nc)
    body: Stmt = Seq((For(i, ic, ihi, init), slices))
    for _, buf in panels:  # one panel per row block: per thread when the row loop is parallel
        body = Allocate(buf, body)
    if rows is not None:
        body = Allocate(rows[1], body)
    return For(ic, loop.lo, loop.hi, body, step=mc, kind=loop.kind)
