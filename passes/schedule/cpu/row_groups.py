"""Row groups: stages whose groups of rows depend on contiguous groups of the stage before run
group by group (for :mod:`.column_blocks`).

In a butterfly chain the factor applied first has pattern ``(a, b, c, d)`` with large ``a``:
``a`` independent blocks, block ``i`` writing rows ``[i·b·d, (i+1)·b·d)`` from rows
``[i·c·d, (i+1)·c·d)`` of its input; the next factor has fewer, larger blocks, each made of
whole blocks of the one before.  The stages (the nests of one block of columns, each with its
outer loop ``i`` over its blocks and its intermediate stored as ``M[t, i, ...]``) form a tree,
as the passes of a radix-2 FFT do (the recursive, cache-oblivious FFT of Frigo et al., "Cache-
Oblivious Algorithms", FOCS 1999, runs each subtree to the end before the next).  Fused under a
loop over the ``G`` blocks of the last stage of the tree::

    for (i, 0, 512) { M5[t, i, ...] = f(X ...) }             for (g, 0, 8) {
    for (i, 0, 128) { M4[t, i, ...] = f(M5[t, 4i..4i+3, ..]) }   for (i, 64g, 64g + 64) { M5 .. }
    for (i, 0, 32)  { M3[t, i, ...] = f(M4[t, 4i..4i+3, ..]) }   for (i, 16g, 16g + 16) { M4 .. }
    for (i, 0, 8)   { M2[t, i, ...] = f(M3[t, 4i..4i+3, ..]) }   for (i, 4g, 4g + 4) { M3 .. }
                                                                 for (i, g, g + 1) { M2 .. } }

each group's part of every stage is written and read back while it is in cache (a 1/8 of each
stage here: 256 KiB at 4096 points and 32 float64 columns, against 2 MiB for the whole stage).

Legality.  A nest joins the tree when its outer loop ``for (i, 0, A)`` has constant bounds
and ``A >= 2``, it stores only into an intermediate of the block with the bare ``i`` as its
first row index, ``A`` divides the outer trip count of every earlier member, and each of its
loads of an earlier member's intermediate (produced by a nest of ``A_p`` iterations) has its
first row index in ``[i·A_p/A, (i+1)·A_p/A)`` for every iteration -- checked by evaluating
the index over the nest's whole (constant) iteration space, the reads being affine forms with
``//`` and ``%`` that no interval rule bounds tightly.  Then iteration ``i`` of a member reads
only what iterations ``[i·A_p/A, (i+1)·A_p/A)`` of each earlier member wrote, which group
``g`` computes before it; other reads are of buffers the tree does not write.  An
intermediate that no statement outside the tree touches is cut to one group's rows (its
first row index less ``g·A_p/G``): each group rewrites the same memory, which stays in cache.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tecomp import dtypes
from tecomp import expr as E
from tecomp.cost import eval_index
from tecomp.errors import TecompError
from tecomp.functor import children, fresh_name
from tecomp.loopir import Buffer, BufferLoad, For, LetStmt, Seq, Stmt, Store
from tecomp.stmt_functor import StmtMutator, rebuild_expr, walk_expr

from .schedule import collect_accesses

#: run tree-shaped stages group by group (False: stage by stage; an A/B switch)
ROW_GROUPS = True

#: the largest iteration space evaluated to check a nest's reads
MAX_POINTS = 1 << 20

def group_rows(nests: list[Stmt], temps: set[Buffer], names: set[str]
               ) -> tuple[list[Stmt], dict[Buffer, Buffer]]:
    """``nests`` (the statements of one block of columns, in order) with each run of two or
    more tree-shaped stages fused under a loop over groups of rows (see the module doc), and
    the intermediates only the tree reads, cut to one group's rows: ``{old: new}``."""
    if not ROW_GROUPS:
        return nests, {}
    out: list[Stmt] = []
    cut: dict[Buffer, Buffer] = {}
    i = 0
    while i < len(nests):
        members: list[tuple[For, Buffer, int]] = []
        j = i
        while j < len(nests):
            member = _member(nests[j], temps, members)
            if member is None:
                break
            members.append(member)
            j += 1
        if len(members) < 2:
            out.append(nests[i])
            i += 1
            continue
        others = {b for s in nests[:i] + nests[j:] for b in _buffers(s)}
        out.append(_fuse(members, names, others, cut))
        i = j
    return out, cut


def _member(s: Stmt, temps: set[Buffer], members: list[tuple[For, Buffer, int]]
            ) -> tuple[For, Buffer, int] | None:
    """``(nest, stored buffer, outer trip count)`` when ``s`` may join the tree ``members``."""
    if not (isinstance(s, For) and s.step == 1 and isinstance(s.lo, E.Const)
            and s.lo.value == 0 and isinstance(s.hi, E.Const)):
        return None
    A = int(s.hi.value)
    loops, store = _chain(s)
    if store is None or store.buffer not in temps or len(store.indices) < 3 \
            or store.indices[1] != s.var:
        return None
    if A < 2 or any(p[2] % A for p in members):
        return None
    produced = {p[1]: p[2] for p in members}
    if store.buffer in produced:
        return None
    reads = [ld for ld in _loads(store.value) if ld.buffer in produced]
    if members and not reads:
        return None
    if reads:
        grid = _grid(loops)
        if grid is None:
            return None
        i = grid[s.var]
        for ld in reads:
            ratio = produced[ld.buffer] // A
            rows = _evaluate(ld.indices[1], grid)
            if rows is None:
                return None
            rows = np.broadcast_to(rows, np.broadcast_shapes(rows.shape, i.shape))
            axes = tuple(range(1, rows.ndim))
            low, high = rows.min(axis=axes), rows.max(axis=axes)
            first = np.arange(A) * ratio
            if low.shape != first.shape or (low < first).any() or (high >= first + ratio).any():
                return None
    return s, store.buffer, A


def _chain(s: Stmt) -> tuple[list[Stmt], Store | None]:
    """The loops and lets of a perfect nest, outermost first, and its one store."""
    loops: list[Stmt] = []
    while isinstance(s, (For, LetStmt)):
        loops.append(s)
        s = s.body
    return loops, s if isinstance(s, Store) else None


def _grid(loops: list[Stmt]) -> dict[E.Var, np.ndarray] | None:
    """Every loop variable (and let) of the nest as an array over its whole iteration space,
    one axis a loop, the outermost first; None when a bound is not a constant or the space is
    larger than :data:`MAX_POINTS`.  The innermost loop (the column lanes) is left out."""
    fors = [x for x in loops if isinstance(x, For)][:-1]
    env: dict[E.Var, np.ndarray] = {}
    total = 1
    for axis, x in enumerate(fors):
        if not (isinstance(x.lo, E.Const) and isinstance(x.hi, E.Const)):
            return None
        total *= max(0, (int(x.hi.value) - int(x.lo.value) + x.step - 1) // x.step)
        if total > MAX_POINTS or total == 0:
            return None
        shape = [1] * len(fors)
        shape[axis] = -1
        env[x.var] = np.arange(int(x.lo.value), int(x.hi.value), x.step,
                               dtype=np.int64).reshape(shape)
    for x in loops:
        if isinstance(x, LetStmt):
            value = _evaluate(x.value, env)
            if value is None:
                return None
            env[x.var] = value
    return env


def _evaluate(e: E.Expr, env: dict[E.Var, np.ndarray]) -> np.ndarray | None:
    """The integer expression ``e`` at every point of ``env``; None for a form
    :func:`tecomp.cost.eval_index` cannot evaluate (a load, a variable outside ``env``)."""
    if not dtypes.is_int(e.dtype):
        return None
    try:
        return np.asarray(eval_index(e, env, {}), dtype=np.int64)
    except TecompError:
        return None


def _loads(e: E.Expr) -> list[BufferLoad]:
    return [x for x in walk_expr(e) if isinstance(x, BufferLoad)]


def accesses(s: Stmt) -> list[tuple[Buffer, tuple[E.Expr, ...]]]:
    """Every load and store in ``s``: ``(buffer, indices)``."""
    stores: dict[Buffer, list[tuple[E.Expr, ...]]] = {}
    loads: list[BufferLoad] = []
    collect_accesses(s, stores, loads, set())
    return [(b, idx) for b, idxs in stores.items() for idx in idxs] + \
        [(ld.buffer, ld.indices) for ld in loads]


def _buffers(s: Stmt) -> set[Buffer]:
    """The buffers ``s`` loads or stores."""
    return {b for b, _ in accesses(s)}


def _fuse(members: list[tuple[For, Buffer, int]], names: set[str], others: set[Buffer],
          cut: dict[Buffer, Buffer]) -> For:
    """The members under ``for (g, 0, G)``, member ``s`` over ``[g·A_s/G, (g+1)·A_s/G)``;
    an intermediate no statement outside the tree touches holds one group's rows,
    ``M[t, i - g·A_s/G, ...]`` (recorded in ``cut``)."""
    G = members[-1][2]
    g = E.Var(fresh_name("g", names), "int64")
    names.add(g.name)
    shift: dict[Buffer, tuple[Buffer, E.Expr]] = {}
    for _, buf, A in members[:-1]:
        if buf in others:
            continue
        rows = A // G
        new = Buffer(buf.name, (buf.shape[0], E.Const(rows, "int64"), *buf.shape[2:]),
                     buf.dtype, buf.scope)
        cut[buf] = new
        shift[buf] = (new, E.Mul(g, E.Const(rows, "int64"), "int64"))
    body = []
    for nest, _, A in members:
        size = E.Const(A // G, "int64")
        lo = E.Mul(g, size, "int64") if A // G != 1 else g
        body.append(_Shift(shift).visit(replace(nest, lo=lo, hi=E.Add(lo, size, "int64"))))
    return For(g, E.Const(0, "int64"), E.Const(G, "int64"), Seq(tuple(body)))


class Redirect(StmtMutator):
    """Loads and stores re-indexed by :meth:`index` (``(buffer, indices)`` to
    ``(buffer, indices)``), shared sub-expressions rewritten once."""

    def __init__(self) -> None:
        self.memo: dict[int, tuple[E.Expr, E.Expr]] = {}

    def index(self, buf: Buffer, idx: tuple[E.Expr, ...]) -> tuple[Buffer, tuple[E.Expr, ...]]:
        raise NotImplementedError

    def mutate_expr(self, e: E.Expr) -> E.Expr:
        got = self.memo.get(id(e))
        if got is not None:
            return got[1]
        if isinstance(e, BufferLoad):
            buf, idx = self.index(e.buffer, e.indices)
            out = e if buf is e.buffer and idx is e.indices else BufferLoad(buf, idx, e.dtype)
        else:
            cs = children(e)
            new = tuple(self.mutate_expr(c) for c in cs)
            out = e if all(a is b for a, b in zip(new, cs)) else rebuild_expr(e, new)
        self.memo[id(e)] = (e, out)
        return out

    def visit_Store(self, s: Store) -> Stmt:
        buf, idx = self.index(s.buffer, s.indices)
        value = self.mutate_expr(s.value)
        if buf is s.buffer and idx is s.indices and value is s.value:
            return s
        return Store(buf, idx, value, s.reduce)


class _Shift(Redirect):
    """Accesses of the cut intermediates at ``[t, i - start, ...]``."""

    def __init__(self, shift: dict[Buffer, tuple[Buffer, E.Expr]]) -> None:
        super().__init__()
        self.shift = shift

    def index(self, buf: Buffer, idx: tuple[E.Expr, ...]) -> tuple[Buffer, tuple[E.Expr, ...]]:
        found = self.shift.get(buf)
        if found is None:
            return buf, idx
        new, start = found
        return new, (idx[0], E.Sub(idx[1], start, "int64"), *idx[2:])


__all__ = ["ROW_GROUPS", "Redirect", "accesses", "group_rows"]
