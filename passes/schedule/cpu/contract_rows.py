"""Array contraction of row temporaries inside a fused row loop (a CPU scheduling pass).

After :func:`.fuse_loops.fuse_row_loops` a softmax is one parallel loop over rows, but its
temporaries are still whole matrices: the exponentials ``e[i0, i1]`` are written to a 256 KiB
buffer (at 256 x 256) and read back a moment later by the same iteration, the row's maximum
and sum are vectors.  A temporary that only the loop touches, always at its own row, needs
only the current row: its dimension indexed by the loop variable is dropped and it is
allocated inside the loop (array contraction after loop fusion: Gao, Olsen, Sarkar and
Thekkath, "Collective Loop Fusion for Array Contraction", LCPC 1992)::

    allocate e: float32[256, 256] {           parallel for (i0, 0, 256) {
      parallel for (i0, 0, 256) {       ==>     allocate e: float32[256] {
        e[i0, i1] = ..; .. e[i0, i1] ..           e[i1] = ..; .. e[i1] ..
      } }                                       } }

The rows of a batch (a short parallel loop over heads around the loop over rows, fused by
:func:`.fuse_loops.fuse_row_loops`) own a row per pair of their variables: a temporary indexed
by both bare variables loses both dimensions and is allocated inside the inner loop.

Legality.  A temporary ``t`` allocated around the loop qualifies when no statement outside
the loop uses it, and at one position ``d`` every store and load of it inside the loop has
the bare loop variable: iteration ``v`` then touches only the slice ``d = v``, which no other
iteration reads, so each iteration may keep its slice to itself and drop it at the end.  Only
slices of a constant size up to the stack allocation limit are contracted, so the row lives
on the stack of whichever thread runs the iteration (a symbolic row would be a heap
allocation per iteration).

What it buys: the row stays in the first-level cache between the stage that writes it and
the one that reads it, instead of a round trip through the second-level cache or memory, and
the kernel needs no pooled temporary of the whole matrix (the softmax above: 256 KiB less).
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.dtypes import to_numpy
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LoweredFunc, Seq, Stmt

from .row_groups import Redirect
from .schedule import collect_accesses, trip_count

#: contract the row temporaries of fused row loops (an A/B switch)
CONTRACT_ROWS = True
#: the largest row contracted, in bytes: the LLVM backend keeps temporaries up to this size on
#: the stack (``codegen.llvm.layout.STACK_LIMIT``) and allocates larger ones on the heap
ROW_BYTES = 16384


def contract_rows(func: LoweredFunc, *, min_trips: int = 64) -> LoweredFunc:
    """``func`` with the row temporaries of its top-level parallel loops contracted (above).
    Loops of fewer than ``min_trips`` iterations are left alone, as by
    :func:`.fuse_loops.fuse_row_loops`: :func:`.schedule.fuse_parallel` collapses such a loop
    with the perfect nest inside it, which an allocation in between would break."""
    if not CONTRACT_ROWS:
        return func
    allocs: list[Buffer] = []
    body = func.body
    while isinstance(body, Allocate):
        allocs.append(body.buffer)
        body = body.body
    items = list(body.stmts) if isinstance(body, Seq) else [body]
    kept: list[Buffer] = []
    seen = [_accesses(s) for s in items]
    plans: dict[int, tuple[list[For], dict[Buffer, tuple[Buffer, list[int]]]]] = {}
    for buf in allocs:
        users = [n for n, (found, _, opaque) in enumerate(seen) if buf in found or opaque]
        chain, dims = [], []
        if len(users) == 1 and buf not in seen[users[0]][1] and not seen[users[0]][2]:
            chain, dims = _row_positions(items[users[0]], buf, seen[users[0]][0][buf], min_trips)
        if not chain or not _small_row(buf, dims):
            kept.append(buf)
            continue
        row = replace(buf, shape=tuple(x for k, x in enumerate(buf.shape) if k not in dims))
        plans.setdefault(users[0], (chain, {}))[1][buf] = (row, dims)
    if not plans:
        return func
    for n, (chain, rows) in plans.items():  # each loop rewritten once, for all its rows
        loop = items[n]
        assert isinstance(loop, For)
        items[n] = _contract(loop, chain, rows)
    out: Stmt = items[0] if len(items) == 1 else Seq(tuple(items))
    for b in reversed(kept):
        out = Allocate(b, out)
    return replace(func, body=out)


def _accesses(s: Stmt) -> tuple[dict[Buffer, list[tuple[E.Expr, ...]]], set[Buffer], bool]:
    """The indices of every store and load of each buffer in ``s`` (loop bounds included),
    the buffers ``s`` allocates, and whether it holds a statement of unknown accesses."""
    stores: dict[Buffer, list[tuple[E.Expr, ...]]] = {}
    loads: list[BufferLoad] = []
    allocated: set[Buffer] = set()
    collect_accesses(s, stores, loads, allocated)
    opaque = any(b.name == "?" for b in stores)  # collect_accesses' mark of such a statement
    for ld in loads:
        stores.setdefault(ld.buffer, []).append(ld.indices)
    return stores, allocated, opaque


def _row_loops(loop: Stmt, min_trips: int) -> list[For]:
    """The loops whose iterations own the rows of ``loop``: a parallel loop of at least
    ``min_trips`` iterations (or a symbolic count) alone; a shorter one with the loop over
    rows it holds (a batch of rows fused by :func:`.fuse_loops.fuse_row_loops`); else none."""
    if not isinstance(loop, For) or loop.kind != "parallel" or loop.step != 1:
        return []
    trips = trip_count(loop)
    if trips is None or trips >= min_trips:
        return [loop]
    inner = loop.body
    if isinstance(inner, For) and inner.kind == "serial" and inner.step == 1:
        return [loop, inner]
    return []


def _row_positions(loop: Stmt, buf: Buffer, idxs: list[tuple[E.Expr, ...]],
                   min_trips: int) -> tuple[list[For], list[int]]:
    """The row loops of ``loop`` and, for each, the position at which every access of ``buf``
    (``idxs``, all of them in ``loop``, bounds included) has its bare variable (([], []) when
    there are none or some has no such position: a load in a bound has none)."""
    chain = _row_loops(loop, min_trips) if buf.scope == "temp" and buf.shape else []
    if not chain:
        return [], []
    rank = len(buf.shape)
    dims: list[int] = []
    for x in chain:
        d = next((d for d in range(rank)
                  if all(len(i) == rank and i[d] == x.var for i in idxs)), None)
        if d is None or d in dims:
            return [], []
        dims.append(d)
    return chain, dims


def _small_row(buf: Buffer, dims: list[int]) -> bool:
    """Whether the slice of ``buf`` without dimensions ``dims`` has a constant size of at
    most :data:`ROW_BYTES`."""
    size = to_numpy(buf.dtype).itemsize
    for k, x in enumerate(buf.shape):
        if k in dims:
            continue
        if not isinstance(x, E.Const):
            return False
        size *= max(int(x.value), 0)
    return size <= ROW_BYTES


def _contract(loop: For, chain: list[For], rows: dict[Buffer, tuple[Buffer, list[int]]]
              ) -> For:
    """``loop`` with each buffer of ``rows`` replaced by its row (without the dimensions
    given beside it), allocated inside the innermost loop of ``chain``."""
    inner = chain[-1]
    body = _Rows(rows).visit(inner.body)
    for row, _ in rows.values():
        body = Allocate(row, body)
    inner = replace(inner, body=body)
    return inner if len(chain) == 1 else replace(loop, body=inner)


class _Rows(Redirect):
    """Accesses of each buffer of ``rows`` become accesses of its row, without the indices at
    the row loops' positions (indices that read a contracted buffer rewritten first)."""

    def __init__(self, rows: dict[Buffer, tuple[Buffer, list[int]]]) -> None:
        super().__init__()
        self.rows = rows

    def index(self, buf: Buffer, idx: tuple[E.Expr, ...]) -> tuple[Buffer, tuple[E.Expr, ...]]:
        new = tuple(self.mutate_expr(x) for x in idx)
        idx = idx if all(a is b for a, b in zip(new, idx)) else new
        found = self.rows.get(buf)
        return (buf, idx) if found is None else (found[0], _drop(idx, found[1]))


def _drop(idx: tuple[E.Expr, ...], dims: list[int]) -> tuple[E.Expr, ...]:
    return tuple(x for k, x in enumerate(idx) if k not in dims)
