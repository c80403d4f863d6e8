"""CPU scheduling of lowered loop nests: enough parallel iterations for every core.

:func:`schedule_cpu` is the whole CPU schedule: the loop order of reductions
(:mod:`.sum_order`: "i, k, j" sums, residue splitting), unit-stride reads for innermost
loops (:mod:`.strided`), register/cache blocking of "i, k, j" sums
(:mod:`.tile`, :mod:`.dot`), strip-mining by index divisors
(:mod:`.mod`), fusion of consecutive row loops (:mod:`.fuse_loops`), then
:func:`fuse_parallel`, described here.

Lowering marks the outermost data loop of each stage ``"parallel"``.  When that loop is short
(a batch of 1 in a convolution, 3 output channels), only one or a few threads get work.
:func:`fuse_parallel` collapses it with the perfectly nested loops below it (the classic
``collapse`` clause of OpenMP; loop coalescing, Polychronopoulos 1987) until the fused loop has
at least ``min_trips`` iterations or the next loop is a nest's innermost (whose body is a
store): that one stays a loop for the vectoriser, since collapsed into the others its index
is a remainder of the fused one at every element (a 16-point DCT on 128 columns ran 36 us
that way, scalar, and 9.4 us as vector loops)::

    parallel for (b, 0, 1) {                 parallel for (f, 0, 16) {
      for (c, 0, 16) {            ==>           let b = f // 16 { let c = f % 16 {
        body(b, c) } }                              body(b, c) } }

Legality.  The outer loop is parallel (lowering guarantees its iterations write disjoint
elements).  A nested loop joins it only when (1) its bounds are constants and its step is 1,
(2) it is the whole body of the loop above (a perfect nest), and (3) its variable is an index,
as a bare variable, of every store in its body to a buffer allocated outside it, and every
load of such a stored buffer uses exactly the index tuple of a store to it, or has the bare
variable at a position where every store to that buffer has it too (it reads the slice of
the buffer that only its own iteration writes: a row of phases read back by
:mod:`.residue_split`).  Then distinct ``(outer, inner)`` pairs write distinct elements and
read only what they write themselves, so the fused iterations are independent.  A nested
loop with a step ``R > 1`` (rows blocked by :mod:`.tile`) joins under the same
condition with ``v + c`` (``0 <= c < R``) in place of the bare variable: its iterations own
disjoint blocks of ``R`` slices.  Scatter loops are never parallel and are left alone.

The pass keeps the program's meaning exactly (the same statements run with the same variable
values; only the thread that runs them changes).

A parallel loop of one iteration whose body is a loop meeting condition (3) hands its mark to
that loop before the blocking passes run (:func:`hand_inward`): collapsing waits until the
end, and by then the register and cache blocking (:mod:`.gemm_dot`) has rewritten the nest
below it into blocked loops whose independence (3) no longer shows, and, seeing no parallel
row loop, blocked it for one core.  A 3x3 convolution of one 16-channel 32x32 image to 32
channels then ran its whole contraction on one thread behind a parallel loop of one
iteration (2 threads 80 us, one thread 67 us); handed inward, its row loop is the parallel
one and the blocking splits the work between the cores.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from tecomp import expr as E
from tecomp.functor import children, fresh_name
from tecomp.host import Host, describe
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LetStmt,
    LoweredFunc,
    Seq,
    Stmt,
    Store,
)
from tecomp.stmt_functor import bound_names

#: :func:`fuse_parallel` never collapses a nest's innermost loop (False: it may, to reach
#: ``min_trips``; an A/B switch)
KEEP_INNERMOST = True

#: a parallel loop of one iteration hands its mark to the loop inside (:func:`hand_inward`);
#: False: it waits for :func:`fuse_parallel` (an A/B switch)
HAND_INWARD = True

#: split bordered copies where their guard changes (:func:`.borders.split_borders`); False:
#: keep the guarded store (an A/B switch of ``benchmarks/ab_cpu_steps.py``)
BORDERS = True


def schedule_cpu(func: LoweredFunc, *, threads: bool = True,
                 host: Host | None = None, gemm: bool = True,
                 pack: bool = True, strided: bool = True) -> LoweredFunc:
    """The CPU schedule of a lowered program: the CPU loop order of reductions
    (:func:`.sum_order.order_sums`), loops of one iteration dropped
    (:func:`.flat_loops.drop_unit_loops`), then with ``strided``, unit-stride reads for the
    innermost loops (:func:`.strided.unit_stride`: exact divisions folded, strided reads from a
    polyphase copy), then with ``gemm``, triangular sums cut into rectangles per block of rows
    (:func:`.triangle.split_triangles`, with ``pack``), the guards of sums a select discards
    dropped for the register tiles (:func:`.unguard.unguard_sums`), cache blocking of large "i,
    k, j" sums (:func:`.gemm.block_caches`, with ``pack``: panels of the shared operand copied
    to contiguous memory and register tiles), register blocking of the others
    (:func:`.tile.block_rows`) and of plain-order reductions
    (:func:`.dot.block_dots`), vector partial sums kept across reduction nests whose innermost
    loop is short (:func:`.vector_sums.vector_sums`), strip-mining of innermost loops by their index
    divisor (:func:`.mod.split_mod_loops`), fusion of consecutive parallel row loops
    (:func:`.fuse_loops.fuse_row_loops`) and their row temporaries kept to a row
    (:func:`.contract_rows.contract_rows`), zero-bordered copies split where their guard
    changes (:func:`.borders.split_borders`), blocked float64-combined partial sums of long
    float32 reductions (:func:`.reduce_accumulators.block_sums`, blocks of 256 vectors of
    ``host``: default :func:`tecomp.host.describe`), the code constant bounds make dead or
    run once dropped (:func:`.flat_loops.drop_dead_code`), chains of stages that keep to their
    columns run a block of columns at a time (:func:`.column_blocks.block_columns`), then,
    with ``threads``, :func:`fuse_parallel`.

    Each keeps the program's meaning (see their docstrings); the LLVM backend compiles the
    result.  The result relaxes one convention of :mod:`.lower`: a ``"parallel"`` loop may
    step by ``R > 1`` and its stores index their buffer with ``v + r`` (constant ``0 <= r <
    R``) where lowering put the bare ``v``; iterations still write disjoint elements.  It is
    meant for the CPU backend only (the CUDA backend maps lowered loops itself).
    """
    from .borders import split_borders
    from .column_blocks import block_columns
    from .contract_rows import contract_rows
    from .dot import block_dots
    from .flat_loops import drop_dead_code, drop_unit_loops
    from .fuse_loops import fuse_row_loops
    from .gemm import block_caches
    from .mod import split_mod_loops
    from .reduce_accumulators import block_sums
    from .strided import unit_stride
    from .sum_order import order_sums
    from .tile import block_rows
    from .triangle import split_triangles
    from .unguard import reguard, unguard_sums
    from .vector_sums import vector_sums

    host = describe() if host is None else host
    func = order_sums(func, host)  # the order reads lowering's own nests
    if threads and HAND_INWARD:
        func = hand_inward(func)
    func = drop_unit_loops(func)
    if strided:
        func = unit_stride(func, host)
    if gemm:
        if pack:
            func, unguarded = unguard_sums(split_triangles(func, host))
        func = block_caches(func, host, threads=threads, pack=pack)
        if pack:
            func = reguard(func, unguarded)
    func = fuse_row_loops(split_mod_loops(vector_sums(block_dots(block_rows(func)), host)))
    func = contract_rows(func)
    if BORDERS:
        func = split_borders(func)
    func = drop_dead_code(block_sums(func, block=256 * host.lanes(4), parallel=threads))
    func = block_columns(func, host)
    return fuse_parallel(func) if threads else func


def hand_inward(func: LoweredFunc) -> LoweredFunc:
    """Each top-level parallel loop of one iteration whose whole body is a loop of
    independent iterations (condition (3)) becomes serial, that loop parallel (module
    docstring); repeated inward while the new parallel loop has one iteration too."""
    body = _top(func.body, _hand)
    return func if body is func.body else replace(func, body=body)


def _hand(s: For) -> Stmt:
    inner = s.body
    if s.step == 1 and s.slot is None and trip_count(s) == 1 and isinstance(inner, For) \
            and inner.kind == "serial" and _independent(inner):
        return replace(s, kind="serial", body=_hand(replace(inner, kind="parallel")))
    return s


def fuse_parallel(func: LoweredFunc, *, min_trips: int = 64) -> LoweredFunc:
    """Collapse short top-level parallel loops with their nested data loops (see above)."""
    names = bound_names(func.body) | {p.name for p in func.params}
    body = _top(func.body, lambda loop: _fuse(loop, min_trips, names))
    return func if body is func.body else replace(func, body=body)


def _top(s: Stmt, rewrite: Callable[[For], Stmt]) -> Stmt:
    """``s`` with ``rewrite`` applied to each top-level parallel loop (inside sequences and
    allocations only)."""
    if isinstance(s, Seq):
        items = tuple(_top(x, rewrite) for x in s.stmts)
        return s if all(a is b for a, b in zip(items, s.stmts)) else Seq(items)
    if isinstance(s, Allocate):
        body = _top(s.body, rewrite)
        return s if body is s.body else Allocate(s.buffer, body)
    if isinstance(s, For) and s.kind == "parallel":
        return rewrite(s)
    return s


def _const(e: E.Expr) -> int | None:
    return int(e.value) if isinstance(e, E.Const) else None


def trip_count(s: For) -> int | None:
    lo, hi = _const(s.lo), _const(s.hi)
    if lo is None or hi is None:
        return None
    return max(0, -(-(hi - lo) // s.step))


def _fuse(loop: For, min_trips: int, names: set[str]) -> Stmt:
    chain = [loop]
    total = trip_count(loop)
    if total is None or loop.step != 1:
        return loop
    while total < min_trips:
        inner = chain[-1].body
        if not (isinstance(inner, For) and trip_count(inner) is not None
                and _const(inner.lo) == 0 and _independent(inner)):
            break
        if KEEP_INNERMOST and isinstance(inner.body, Store):
            break  # the innermost loop stays a loop, for the vectoriser
        chain.append(inner)
        total *= trip_count(inner)
    if len(chain) == 1:
        return loop
    if _const(loop.lo) != 0:
        return loop
    fused = E.Var(fresh_name("fused", names), loop.var.dtype)
    names.add(fused.name)
    body = chain[-1].body
    stride = 1
    for s in reversed(chain):
        n = trip_count(s)
        idx: E.Expr = fused if stride == 1 else E.FloorDiv(fused, E.Const(stride, "int64"),
                                                            "int64")
        if s is not chain[0]:
            idx = E.Mod(idx, E.Const(n, "int64"), "int64")
        if s.step != 1:
            idx = E.Mul(idx, E.Const(s.step, "int64"), "int64")
        body = LetStmt(s.var, _as(idx, s.var.dtype), body)
        stride *= n
    return For(fused, E.Const(0, fused.dtype), E.Const(total, fused.dtype), body,
               kind="parallel")


def _as(e: E.Expr, dtype: str) -> E.Expr:
    return e if e.dtype == dtype else E.Cast(e, dtype)


def _independent(loop: For) -> bool:
    """Whether distinct iterations of ``loop`` write distinct elements and read only their own
    (condition (3) of the module docstring)."""
    stores: dict[Buffer, list[tuple[E.Expr, ...]]] = {}
    loads: list[BufferLoad] = []
    local: set[Buffer] = set()
    collect_accesses(loop.body, stores, loads, local)
    if loop.step != 1:  # a blocked loop: each iteration owns the slices [v, v + step)
        return all(buf in local or _own_slice(loop.var, idxs, idxs[0], loop.step)
                   for buf, idxs in stores.items()) and all(
            ld.buffer not in stores or ld.buffer in local
            or _own_slice(loop.var, stores[ld.buffer], ld.indices, loop.step) for ld in loads)
    for buf, idxs in stores.items():
        if buf in local:
            continue
        if any(loop.var not in idx for idx in idxs):
            return False
    for ld in loads:
        if ld.buffer in stores and ld.buffer not in local and ld.indices not in stores[ld.buffer]:
            if not _own_slice(loop.var, stores[ld.buffer], ld.indices):
                return False
    return True


def _own_slice(v: E.Var, stored: list[tuple[E.Expr, ...]], load: tuple[E.Expr, ...],
               step: int = 1) -> bool:
    """Whether one position holds ``v + c`` (``0 <= c < step``; the bare ``v`` for step 1) in
    ``load`` and in every index of ``stored``."""
    return any(_offset(x, v, step) and all(len(i) == len(load) and _offset(i[d], v, step)
                                           for i in stored)
               for d, x in enumerate(load))


def _offset(e: E.Expr, v: E.Var, step: int) -> bool:
    """Whether ``e`` is ``v`` or ``v + c`` with a constant ``0 <= c < step``."""
    if e == v:
        return True
    return (isinstance(e, E.Add) and e.a == v and isinstance(e.b, E.Const)
            and not isinstance(e.b.value, (bool, float)) and 0 <= e.b.value < step)


def collect_accesses(s: Stmt, stores: dict, loads: list, local: set) -> None:
    if isinstance(s, Seq):
        for x in s.stmts:
            collect_accesses(x, stores, loads, local)
    elif isinstance(s, For):
        _loads(s.lo, loads)
        _loads(s.hi, loads)
        collect_accesses(s.body, stores, loads, local)
    elif isinstance(s, Allocate):
        local.add(s.buffer)
        collect_accesses(s.body, stores, loads, local)
    elif isinstance(s, IfThenElse):
        _loads(s.cond, loads)
        collect_accesses(s.then, stores, loads, local)
        if s.else_ is not None:
            collect_accesses(s.else_, stores, loads, local)
    elif isinstance(s, LetStmt):
        _loads(s.value, loads)
        collect_accesses(s.body, stores, loads, local)
    elif isinstance(s, Store):
        stores.setdefault(s.buffer, []).append(s.indices)
        for i in s.indices:
            _loads(i, loads)
        _loads(s.value, loads)
    else:  # an unknown statement: refuse by pretending it writes everywhere
        stores.setdefault(Buffer("?", (), "float32"), []).append(())


def _loads(e: E.Expr, out: list) -> None:
    stack = [e]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, BufferLoad):
            out.append(x)
            stack.extend(x.indices)
        else:
            stack.extend(children(x))
