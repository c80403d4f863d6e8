"""Fusion of consecutive parallel loops over the same rows (a CPU scheduling pass).

Lowering gives every stage its own loop nest, so a softmax is four passes over its rows
(max, exp, sum, divide), each a separate ``"parallel"`` loop: four fork-joins, and each row is
brought into cache four times.  Consecutive top-level parallel loops with the same bounds are
fused into one (loop fusion, Kennedy & McKinley, "Maximizing Loop Parallelism and Improving
Data Locality via Loop Fusion and Distribution", LCPC 1993)::

    parallel for (i0, 0, 256) { m[i0] = max_k X[i0, k] }        parallel for (i0, 0, 256) {
    parallel for (i0, 0, 256) {                         ==>       m[i0] = max_k X[i0, k]
      for (i1) { e[i0, i1] = exp(X[i0, i1] - m[i0]) } }           for (i1) { e[i0, i1] = .. }
                                                                }

Legality.  Fusing ``for v: A(v)`` and ``for v: B(v)`` into ``for v: A(v); B(v)`` reorders
``A(w)`` after ``B(v)`` for ``v < w``, which is harmless when no iteration touches what
another iteration writes.  The fused loop is kept only when that holds syntactically: every
buffer stored in it (outside the loop's own allocations) has, at one position ``d``, the bare
loop variable in the index of every store to it and of every load of it.  Then iteration
``v`` writes and reads only the slice ``d = v`` of such buffers, and reads other buffers that
no iteration writes, so the iterations are independent and may also still run in parallel.
The top-level allocations around the loops are hoisted to enclose the fused loop (they were
nested around the rest of the program already, so no buffer lives longer than before in
practice).

Rows of a batch.  A softmax over the last axis of ``S[h, i, j]`` (attention's heads) lowers
to nests of a short parallel loop over ``h`` around a serial loop over the rows ``i``; such
nests with equal bounds at both levels, whose row loops hold loops (not the element loop
itself, which :func:`.schedule.fuse_parallel` keeps innermost), are fused at both levels when
each level keeps to its own slice (the check above, once per level), and
:func:`.schedule.fuse_parallel` then collapses the nest as before (``BATCH_ROWS``; with
:mod:`.contract_rows`, the 8x512x64 attention's forward 1.21x faster on one and two cores).

Only loops with at least ``min_trips`` iterations are fused: a shorter parallel loop (a batch
of 1) is left for :func:`.schedule.fuse_parallel` to collapse with its inner loops, which needs
a perfect nest.  A loop over a symbolic count (a sequence length ``n``) is fused as a long one:
:func:`.schedule.fuse_parallel` never collapses it (it needs constant bounds), so fusing only
saves fork-joins.  A transformer block of symbolic length (``benchmarks/compile_time.py``) had
19 parallel loops in its forward kernel and 41 in its gradient's, 12 and 32 so (its layer norm
and softmax rows one loop each): 40 -> 31 separately compiled LLVM modules, but only 1.08 ->
1.01 s of LLVM on one thread (the same loops, in fewer modules) and 1% off its cold build; the
kernels a little faster (n = 512, one core: forward 1.43 -> 1.38 ms, gradient 4.92 -> 4.86 ms;
two: 1.11 -> 1.04 and 3.37 -> 3.32 ms).
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LoweredFunc, Seq, Stmt
from tecomp.stmt_functor import walk_stmt

from .dot import subst
from .schedule import bound_names, collect_accesses, trip_count


def fuse_row_loops(func: LoweredFunc, *, min_trips: int = 64) -> LoweredFunc:
    """``func`` with consecutive top-level parallel loops of equal bounds fused (see above)."""
    allocs: list[Buffer] = []
    items: list[Stmt] = []
    _flatten(func.body, allocs, items)
    out: list[Stmt] = []
    fused_any = False
    for s in items:
        prev = out[-1] if out else None
        if isinstance(prev, For) and isinstance(s, For) and _candidate(prev, min_trips) \
                and _candidate(s, min_trips) and prev.lo == s.lo and prev.hi == s.hi:
            merged = _merge(prev, s)
            if merged is not None:
                out[-1] = merged
                fused_any = True
                continue
        if isinstance(prev, For) and isinstance(s, For) and BATCH_ROWS \
                and _nest_candidate(prev, min_trips) and _nest_candidate(s, min_trips) \
                and prev.lo == s.lo and prev.hi == s.hi:
            merged = _merge_nests(prev, s)
            if merged is not None:
                out[-1] = merged
                fused_any = True
                continue
        out.append(s)
    if not fused_any:
        return func
    body: Stmt = out[0] if len(out) == 1 else Seq(tuple(out))
    for b in reversed(allocs):
        body = Allocate(b, body)
    return replace(func, body=body)


def _flatten(s: Stmt, allocs: list[Buffer], items: list[Stmt]) -> None:
    """The top-level statements of ``s`` in order, and the allocations around them."""
    if isinstance(s, Seq):
        for x in s.stmts:
            _flatten(x, allocs, items)
    elif isinstance(s, Allocate):
        allocs.append(s.buffer)
        _flatten(s.body, allocs, items)
    else:
        items.append(s)


#: loops whose trip count is symbolic (a sequence length ``n``) are fused as long ones; False:
#: only constant trip counts of at least ``min_trips`` (an A/B switch)
SYMBOLIC_TRIPS = True


def _candidate(s: For, min_trips: int) -> bool:
    if s.kind != "parallel" or s.step != 1:
        return False
    n = trip_count(s)
    if n is None:
        return SYMBOLIC_TRIPS
    return n >= min_trips


def _merge(a: For, b: For) -> For | None:
    """``a`` and ``b`` as one loop over ``a``'s variable, or None when not provably legal."""
    body_b = _body_as(b, a.var)
    if body_b is None:
        return None
    fused = For(a.var, a.lo, a.hi, _joined(a.body, body_b), kind="parallel")
    return fused if _row_local(fused) else None


def _body_as(b: For, var: E.Var) -> Stmt | None:
    """``b``'s body with its variable renamed ``var``, or None when the renaming would capture
    a loop inside it."""
    if b.var == var:
        return b.body
    if var.name in bound_names(b.body):
        return None
    return subst(b.body, {b.var: var})


def _joined(first: Stmt, then: Stmt) -> Seq:
    """The statements of ``first``, then those of ``then``, as one sequence."""
    return Seq((*(first.stmts if isinstance(first, Seq) else (first,)),
                *(then.stmts if isinstance(then, Seq) else (then,))))


#: rows of a batch fused as well: two loops of a short parallel loop (fewer than ``min_trips``
#: iterations: the heads of an attention, ``S[h, i, :]``) around one serial loop over rows,
#: with equal bounds at both levels, become one such nest (an A/B switch)
BATCH_ROWS = True


def _nest_candidate(s: For, min_trips: int) -> bool:
    if s.kind != "parallel" or s.step != 1 or not isinstance(s.body, For):
        return False
    n, inner = trip_count(s), s.body
    if n is None or n >= min_trips or inner.step != 1 or inner.kind != "serial":
        return False
    if not any(isinstance(x, For) for x in walk_stmt(inner.body)):
        return False  # the element loop itself: fuse_parallel keeps it innermost
    m = trip_count(inner)
    return (m is None and SYMBOLIC_TRIPS) or (m is not None and n * m >= min_trips)


def _merge_nests(a: For, b: For) -> For | None:
    """``a`` and ``b`` (each a short parallel loop around a loop over rows) as one such nest
    over ``a``'s variables, or None when not provably legal: each level must keep to its own
    slice (:func:`_row_local`)."""
    ai, bi = a.body, _body_as(b, a.var)
    assert isinstance(ai, For)
    if not isinstance(bi, For) or (bi.lo, bi.hi) != (ai.lo, ai.hi):
        return None
    inner_b = _body_as(bi, ai.var)
    if inner_b is None:
        return None
    inner = replace(ai, body=_joined(ai.body, inner_b))
    fused = replace(a, body=inner)
    return fused if _row_local(fused) and _row_local(inner) else None


def _row_local(loop: For) -> bool:
    """Whether every buffer ``loop`` stores to (not allocated inside it) is indexed by the bare
    loop variable at one position in all its stores and loads (see the module doc)."""
    stores: dict[Buffer, list[tuple[E.Expr, ...]]] = {}
    loads: list[BufferLoad] = []
    local: set[Buffer] = set()
    collect_accesses(loop.body, stores, loads, local)
    for buf, idxs in stores.items():
        if buf in local:
            continue
        reads = [ld.indices for ld in loads if ld.buffer == buf]
        rank = len(idxs[0])
        if not any(all(len(i) == rank and i[d] == loop.var for i in idxs + reads)
                   for d in range(rank)):
            return False
    return True

