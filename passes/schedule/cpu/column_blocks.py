"""Column blocks: a chain of stages that never mixes columns runs one block of columns at a time.

A butterfly or Kronecker-sparse chain (:func:`tecomp.ops.butterfly_chain`) over a batch is a
sequence of stages, each a loop nest whose innermost loop runs along the batch (the last,
unit-stride axis) and reads its input only at the column it writes::

    parallel for (i, 0, 64) { for (j, 0, 8) { for (n, 0, 128) {
      M4[i, 0, j, n] = T4[i, j, 0, 0] * X[2 * i, n] + T4[i, j, 1, 0] * X[255 - 2 * i, n] } } }
    parallel for (i, 0, 16) { ... for (n, 0, 128) { M3[i, l, j, n] = ... M4[., ., ., n] } }
    ...

Run stage after stage, each stage streams its whole input and output through the caches: at
``n = 4096`` rows (``2n`` in the intermediate stages) and 128 float64 columns that is 8 MiB a
stage, from the last-level cache or memory, for 8 multiply-adds per element.  Since column
``n`` of every stage depends only on column ``n`` of the stages before it, the columns can be
cut into blocks of ``B`` and the whole chain run for one block before the next (loop tiling
of the column axis, then fusion of the tiled nests under the block loop: Wolfe, "More
Iteration Space Tiling", Supercomputing 1989; the same blocking as running an FFT over a few
vectors at a time)::

    parallel for (t, 0, T) { for (nb, t·128/(B·T), (t+1)·128/(B·T)) {
      for (i, 0, 64) { for (j, 0, 8) { lanes for (n, 0, B) {
        M4[t, i, 0, j, n] = T4[i, j, 0, 0] * X[2 * i, nb * B + n] + ... } } }
      for (i, 0, 16) { ... lanes for (n, 0, B) { M3[t, i, l, j, n] = ... M4[t, ., ., ., n] } }
      ... } }

The blocks are dealt to ``T`` chunks (the host's cores, at most one a block), the parallel
loop; each chunk runs its blocks one after another and keeps one block's part of every
intermediate, laid out with a slot first (``(T, ..., B)``): a block's part of a stage is
contiguous, rows ``B`` elements long rather than ``N`` elements apart (rows a power of two
apart would share a few cache sets), and the next block rewrites the same memory.  The slot
is the parallel loop's ``slot`` (:class:`tecomp.loopir.For`: the first chunk of the part one
thread runs), not the chunk: threads that run at the same time write different slots, and a
call on fewer threads than chunks reuses one slot's memory for each thread's chunks instead
of walking through ``T`` sets (``SLOTS``; a kernel compiled for two cores and called on one
thread, ``python -m benchmarks.ab_cpu_steps --only slots --unpinned``, an Intel Xeon with
AVX-512: the DCT-II at 1024x128 float32 1.19x faster, its gradient 1.23x, at 512 points
1.10-1.20x, 4096 points 1.00-1.01x; on two threads unchanged, 0.99-1.01x).  ``B`` is
the widest multiple of the host's vector width, up to :data:`VECTORS` vectors, that divides
``N`` into two blocks or more: a stage computes each row from ``c`` rows of the one before with
``c`` factor values and addresses a row, which two vectors a row pay back (one vector a row
was 1.5x slower at 4096 points, before the row groups below) -- unless the block's part of
the largest intermediate would then exceed half of L2 and a narrower block's would not, as
at 4096 points (8192 realified rows: 1 MiB at two float64 vectors, 512 KiB at one), where
one vector a row is faster (``FIT_L2``; ``python -m benchmarks.ab_cpu_steps --only fit_l2
--programs DCT``, one AMD EPYC core: DCT-II 4096x128 float64 1-2% faster, float32 8-18%, the
gradients 0-8%; at 1024 and 2048 points, where two vectors fit, one vector was 2-6% slower);
the innermost loop becomes a lane loop
(:mod:`tecomp.lanes`) where its body has that form, emitted as ``B``-wide vector operations.
Where a block's part of a stage exceeds L1 (256 KiB at 1024 points and 32 float32 columns),
stages shaped as a tree (each block of rows of a stage made of whole blocks of the one before,
as the early butterfly factors are) run group of rows by group within the block
(:mod:`.row_groups`), so that they meet closer to the core (:data:`GROUP_IN_L1`; the rule
before grouped only above half of L2, where an earlier measurement had found the groups'
loops 5% slower at 1024 points: on this project's current machine they are 5-14% faster
there).

Legality.  A run of consecutive top-level nests qualifies when each is a perfect nest (loops
and lets) whose innermost loop ``for (n, 0, N)`` (constant ``N``, the same for the run) holds
one store, and ``n`` occurs in that store's indices and value only as the bare last index of
a store or load (in no loop bound, let or other index); every buffer stored in the run is
indexed that way in every access in the run.  Then column ``c`` of each stage is computed from
column ``c`` of buffers the run writes (and from anything the run only reads), so running the
nests in order for each block of columns computes exactly what running them in order over all
columns does, and distinct blocks touch distinct columns.  Runs of two or more nests with
intermediates (buffers allocated at the top and used only in the run) are blocked, however
small (:data:`SMALL_RUNS`: the stages of a run that fits in L2 also meet closer to the core a
block at a time).
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.functor import children, fresh_name
from tecomp.host import Host
from tecomp.lanes import vector_form
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LetStmt, LoweredFunc, Seq, Stmt, Store
from tecomp.stmt_functor import bound_names, walk_expr

from .copy_forward import forward_copies
from .fuse_loops import _flatten
from .row_groups import Redirect, accesses, group_rows

#: block the column axis of stage chains (False: leave them; an A/B switch of
#: ``benchmarks/ab_cpu_steps.py``)
COLUMN_BLOCKS = True

#: the widest block, in vectors: a stage computes each of its rows from ``c`` rows of the
#: stage before, with ``c`` factor values and addresses per row, which two vectors a row pay
#: back while a block's stages stay small (DCT-II, batch 128, float64, one AVX-512 core,
#: time / SciPy's at n = 256, 1024, 4096: blocks of 1 vector 1.02, 0.99, 1.48; of 2 vectors
#: 1.08, 0.92, 0.98; of 4 vectors 1.08, 1.02, 1.00)
VECTORS = 2

#: copy each block's columns of an input read in a scattered row order first (False: read
#: them where they lie; an A/B switch)
PACK = True

#: index each chunk's intermediates by the slot of the thread that runs it (``For.slot``: one
#: set a running thread, a serial call reusing one set for all chunks) rather than by the
#: chunk (one set a chunk; an A/B switch)
SLOTS = True

#: block runs whose intermediates fit in half of L2 too (False: only larger ones, the rule
#: before: "below that the stages already meet in cache").  Meeting in L2 was not enough: the
#: DCT-II of batch 128 (one Intel Xeon core, in one process, time unblocked / blocked) at 64
#: points 2.3x (float32) and 2.0x (float64), at 128 points float32 1.45-1.6x (its gradient
#: 1.6x), at 256 points float32 1.04-1.06x (gradient 1.3x); no other program of the CPU
#: benchmark's suites or of ``benchmarks/ab_cpu_steps.py`` has such a run (their code is the
#: same either way)
SMALL_RUNS = True

#: the widest block whose part of the largest intermediate fits in L1, where one does (False:
#: the widest within half of L2).  The DCT-II of batch 128 at 256 points is the case (a row
#: of 2 float32 vectors: 64 KiB of the largest intermediate, of one: 32 KiB in a 48 KiB L1):
#: one vector a row 1.08-1.14x faster than two, its gradient 1.05-1.06x (one Intel Xeon core;
#: float64 0.99-1.02x); every larger transform keeps the rule below
FIT_L1 = True

#: run tree-shaped stages group of rows by group wherever a block's part of the largest
#: intermediate exceeds L1 (False: only where it exceeds half of L2, so that they meet in
#: L2).  DCT-II of batch 128, one Intel Xeon core, in one process, time without / with: at
#: 1024 points float32 1.07-1.14x, float64 1.05-1.09x; 2048 points float32 1.12x, float64
#: 1.13-1.17x; 4096 points float32 1.19-1.25x, float64 1.21x; 512 points 0.97-1.02x (the
#: gradients, whose transposed stages are no tree, 0.98-1.02x)
GROUP_IN_L1 = True

#: a fixed block width instead of the rule above (the A/B tools' override; None: the rule)
WIDTH: int | None = None

#: narrow the block to one vector where two would not fit the largest intermediate's part in
#: half of L2 (module doc; False: always the widest; an A/B switch)
FIT_L2 = True

_ELEM = {"float16": 2, "float32": 4, "float64": 8}


def block_columns(func: LoweredFunc, host: Host) -> LoweredFunc:
    """``func`` with each qualifying run of column-wise stages blocked (see the module doc)."""
    if not COLUMN_BLOCKS:
        return func
    allocs: list[Buffer] = []
    items: list[Stmt] = []
    _flatten(func.body, allocs, items)
    nests = [_column_nest(s) for s in items]
    if sum(n is not None for n in nests) < 2:
        return func
    names = bound_names(func.body) | {p.name for p in func.params}
    out: list[Stmt] = []
    reshaped: dict[Buffer, Buffer] = {}
    i = 0
    while i < len(items):
        j = i + 1
        while nests[i] is not None and j < len(items) and nests[j] is not None \
                and nests[j][1] == nests[i][1]:
            j += 1
        blocked = None
        if j - i >= 2:
            blocked = _block_run(items[i:j], [n for n in nests[i:j] if n is not None],
                                 items[:i] + items[j:], allocs, host, names, reshaped)
        if blocked is None:
            out.append(items[i])
            i += 1
        else:
            out.append(blocked)
            i = j
    if not reshaped:
        return func
    body: Stmt = out[0] if len(out) == 1 else Seq(tuple(out))
    for b in reversed(allocs):
        body = Allocate(reshaped.get(b, b), body)
    return replace(func, body=body)


def _column_nest(s: Stmt) -> tuple[For, int] | None:
    """``(innermost loop, N)`` when ``s`` is a perfect nest whose innermost loop runs over
    ``[0, N)`` and stores once with its variable as the bare last index of the store and of
    every load that uses it (and nowhere else), else None."""
    outer: list[Stmt] = []
    while True:
        if isinstance(s, For) and isinstance(s.body, Store):
            break
        if isinstance(s, (For, LetStmt)):
            outer.append(s)
            s = s.body
            continue
        return None
    if s.step != 1 or not (isinstance(s.lo, E.Const) and s.lo.value == 0
                           and isinstance(s.hi, E.Const)):
        return None
    n, store = s.var, s.body
    for x in outer:
        exprs = (x.lo, x.hi) if isinstance(x, For) else (x.value,)
        if any(_uses(e, n) for e in exprs):
            return None
    if not (store.indices and store.indices[-1] == n
            and not any(_uses(x, n) for x in store.indices[:-1])
            and _column_only(store.value, n, {})):
        return None
    return s, int(s.hi.value)


def _uses(e: E.Expr, v: E.Var) -> bool:
    return any(x == v for x in walk_expr(e))


def _column_only(e: E.Expr, n: E.Var, memo: dict[int, bool]) -> bool:
    """Whether ``n`` occurs in ``e`` only as the bare last index of loads."""
    got = memo.get(id(e))
    if got is not None:
        return got
    if e == n:
        ok = False
    elif isinstance(e, BufferLoad):
        ok = not any(_uses(x, n) for x in e.indices[:-1]) and (
            not e.indices or e.indices[-1] == n or not _uses(e.indices[-1], n))
    else:
        ok = all(_column_only(c, n, memo) for c in children(e))
    memo[id(e)] = ok
    return ok


def _block_run(run: list[Stmt], nests: list[tuple[For, int]], rest: list[Stmt],
               allocs: list[Buffer], host: Host, names: set[str],
               reshaped: dict[Buffer, Buffer]) -> Stmt | None:
    """The nests of ``run`` under one loop over blocks of columns, or None when the run does
    not qualify or would not gain (see the module doc)."""
    N = nests[0][1]
    stored = {x.body.buffer for x, _ in nests}
    touched = [(acc, inner.var) for s, (inner, _) in zip(run, nests) for acc in accesses(s)]
    for (buf, idx), n in touched:
        last = buf.shape[-1] if buf.shape else None
        if buf in stored and not (idx and idx[-1] == n and isinstance(last, E.Const)
                                  and last.value == N):
            return None
    temps = [b for b in allocs if b in stored and b.dtype in _ELEM
             and all(isinstance(d, E.Const) for d in b.shape)]
    half_l2 = host.l2 // 2
    floor = 0 if SMALL_RUNS else half_l2
    if not temps or sum(_elements(b) // N * _ELEM[b.dtype] for b in temps) * N <= floor:
        return None  # too small even before the ones used outside the run are left out
    # (checked first: the rest of the program is walked only for runs that may qualify)
    outside = {buf for s in rest for buf, _ in accesses(s)}
    temps = [b for b in temps if b not in outside]
    per_column = sum(_elements(b) // N * _ELEM[b.dtype] for b in temps)
    if not temps or per_column * N <= floor:
        return None
    lanes = host.lanes(min(_ELEM[b.dtype] for b in temps))
    largest = max(_elements(b) // N * _ELEM[b.dtype] for b in temps)  # bytes a column
    width = WIDTH or _block_width(N, lanes, largest if FIT_L2 else 0, half_l2,
                                  host.l1d if FIT_L1 else 0)
    if width is None:
        return None
    blocks = N // width
    chunks = max(1, min(host.cores, blocks))
    while blocks % chunks:
        chunks -= 1
    t = E.Var(fresh_name("nt", names), "int64")
    nb = E.Var(fresh_name("nb", names), "int64")
    names.update((t.name, nb.name))
    # the part of the chunk loop one thread runs indexes its intermediates by its slot (the
    # first chunk it runs): one set a running thread, one for every chunk of a serial call
    slot = E.Var(fresh_name("ns", names), "int64") if SLOTS and chunks > 1 else t
    names.add(slot.name)
    for b in temps:
        shape = (E.Const(chunks, "int64"), *b.shape[:-1], E.Const(width, "int64"))
        reshaped[b] = Buffer(b.name, shape, b.dtype, b.scope)
    start = E.Mul(nb, E.Const(width, "int64"), "int64")
    packed = {b: Buffer(f"{b.name}_cols", (E.Const(chunks, "int64"), *b.shape[:-1],
                                            E.Const(width, "int64")), b.dtype, "temp")
              for b in (_scattered_inputs(touched, stored, N) if PACK else ())
              if _elements(b) * _ELEM.get(b.dtype, 8) > host.l2}
    allocs.extend(packed.values())
    views = {**reshaped, **packed}
    body = [_Columns(inner.var, slot, start, views, width).visit(s)
            for s, (inner, _) in zip(run, nests)]
    cut: dict[Buffer, Buffer] = {}
    if largest * width > (host.l1d if GROUP_IN_L1 else half_l2):
        body, cut = group_rows(body, {reshaped[b] for b in temps}, names)
    body = [_pack(b, new, slot, start, width, names) for b, new in packed.items()] + body
    body, dropped = forward_copies(body, {cut.get(reshaped[b], reshaped[b]) for b in temps})
    for b in temps:
        reshaped[b] = cut.get(reshaped[b], reshaped[b])
        if reshaped[b] in dropped:
            allocs.remove(b)
    per = blocks // chunks
    first = E.Mul(t, E.Const(per, "int64"), "int64")
    inner_loop = For(nb, first, E.Add(first, E.Const(per, "int64"), "int64"), Seq(tuple(body)))
    return For(t, E.Const(0, "int64"), E.Const(chunks, "int64"), inner_loop, kind="parallel",
               slot=None if slot is t else slot)


def _scattered_inputs(touched: list, stored: set[Buffer], N: int) -> list[Buffer]:
    """The buffers the run only reads, at the column, with rows through ``//`` or ``%`` (a
    permutation: the DCT's input, read in bit-reversed order).  Where such a buffer is larger
    than L2, each block copies its columns of it in row order first (:func:`_pack`), so that
    the scattered reads find them in cache rather than one short piece of a row of the whole
    array at a time from memory (the DCT-II of 4096 points on 128 float64 columns: 3.6 -> 3.0
    ms on one AVX-512 core)."""
    rows: dict[Buffer, bool] = {}
    for (buf, idx), n in touched:
        if buf in stored or buf.scope == "local":
            continue
        columnwise = bool(idx) and idx[-1] == n and isinstance(buf.shape[-1], E.Const) \
            and buf.shape[-1].value == N and all(isinstance(d, E.Const) for d in buf.shape)
        if not columnwise:
            if any(_uses(x, n) for x in idx):
                rows[buf] = False
            continue
        scattered = any(isinstance(x, (E.FloorDiv, E.Mod)) for i in idx[:-1] for x in walk_expr(i))
        rows[buf] = rows.get(buf, False) or scattered
    return [b for b, scattered in rows.items() if scattered]


def _pack(buf: Buffer, new: Buffer, t: E.Expr, start: E.Expr, width: int,
          names: set[str]) -> Stmt:
    """``new[t, r..., n] = buf[r..., start + n]`` over every row, the columns in lanes."""
    n = E.Var(fresh_name("nc", names), "int64")
    rows = [E.Var(fresh_name(f"r{d}", names), "int64") for d in range(len(buf.shape) - 1)]
    names.update(v.name for v in [n, *rows])
    value = BufferLoad(buf, (*rows, E.Add(start, n, "int64")), buf.dtype)
    s: Stmt = For(n, E.Const(0, "int64"), E.Const(width, "int64"),
                  Store(new, (t, *rows, n), value), kind="lanes")
    for v, extent in reversed(list(zip(rows, buf.shape[:-1]))):
        s = For(v, E.Const(0, "int64"), extent, s)
    return s


def _elements(b: Buffer) -> int:
    count = 1
    for d in b.shape:
        count *= int(d.value)
    return count


def _block_width(N: int, lanes: int, column_bytes: int = 0, fits: int = 0,
                 near: int = 0) -> int | None:
    """The widest block of at most :data:`VECTORS` vectors of ``lanes`` that divides ``N``
    into two blocks or more and whose part of the largest intermediate (``column_bytes`` a
    column) is at most ``near`` bytes (L1, :data:`FIT_L1`), else at most ``fits`` (half of
    L2); the narrowest when none is that small; None when no width divides ``N``."""
    widths = [w for w in range(lanes, min(VECTORS * lanes, N // 2) + 1, lanes) if N % w == 0]
    if not widths:
        return None
    close = [w for w in widths if w * column_bytes <= near]
    if close:
        return max(close)
    small = [w for w in widths if w * column_bytes <= fits]
    return max(small) if small else min(widths)


class _Columns(Redirect):
    """One nest of a blocked run: its column loop over ``[0, width)`` (a lane loop where it
    has that form), the outer loops serial, re-laid-out buffers indexed ``[t, ..., n]`` and
    the others at column ``nb·width + n``."""

    def __init__(self, n: E.Var, t: E.Var, start: E.Expr, reshaped: dict[Buffer, Buffer],
                 width: int) -> None:
        super().__init__()
        self.n, self.t, self.reshaped, self.width = n, t, reshaped, width
        self.column = E.Add(start, n, "int64")

    def index(self, buf: Buffer, idx: tuple[E.Expr, ...]) -> tuple[Buffer, tuple[E.Expr, ...]]:
        if not idx or idx[-1] != self.n:
            return buf, idx
        new = self.reshaped.get(buf)
        if new is not None:
            return new, (self.t, *idx)
        return buf, (*idx[:-1], self.column)

    def visit_For(self, s: For) -> Stmt:
        if s.var == self.n:
            inner = For(s.var, s.lo, E.Const(self.width, "int64"), self.visit(s.body),
                        kind="lanes")
            return inner if vector_form(inner) is not None else replace(inner, kind="serial")
        return replace(s, body=self.visit(s.body), kind="serial")


__all__ = ["COLUMN_BLOCKS", "block_columns"]
