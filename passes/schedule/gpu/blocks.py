"""Block-level schedules: a block per output for short row reductions, shared-memory tiles for
contractions.

After :mod:`.schedule` has mapped a stage's loops onto the grid one thread per element, two
patterns get a block-level mapping instead when a static rule says it pays:

**Block reduction** (:class:`BlockReduce`).  A stage ``for o..: allocate acc { acc = init;
for r..: acc <op>= v; rest }`` (op sum, prod, max or min; ``rest`` reads ``acc`` and stores
the outputs) gets one thread block per output element ``o`` (a grid-stride loop over the
outputs), the block's threads taking strided parts of the flattened reduction loops.  Each
thread accumulates in a register from the combiner's identity, the block combines the
registers with ``__shfl_down_sync`` inside each warp and shared memory across warps (the tree
of CUB's ``BlockReduce``, warp-reduce variant), and thread 0 combines ``init`` with the total and
runs ``rest``: one plain store per output.  ``tc_max``/``tc_min`` propagate NaN whatever the
order of the operands, so max and min keep the CPU's NaN semantics; float sums are re-associated
(results differ from the sequential order in the last bits), integer sums are exact.

Rule ("where worth it"): the number of outputs is a constant no larger than
:data:`BLOCK_REDUCE_MAX_OUTPUTS` (with a thread per output, at most 1/16 of an H200's 270 000
resident threads would have work, each reading its row alone) and the reduction's trip count is
symbolic or at least :data:`BLOCK_REDUCE_MIN_LENGTH` (two iterations per thread of a 32-thread
warp; below that a thread per output is as good).  A trip count that depends on the output
(``for k in [0, i]``) counts as its largest value over the corners of the output box.

Reductions into thread-invariant destinations (a sum into a scalar; ``Stage.private``) keep
their grid-stride loop; the thread-private accumulators are combined across the block the same
way, and one atomic per block (not per thread) adds the block's total.

**Contraction tiling** (:class:`Tiling`).  A stage ``for o..: allocate acc { acc = init;
for k..: acc += x * y; rest }`` is a contraction when the mapped loops split into *rows* (used
by ``x`` only), *columns* (used by ``y`` only, among them the innermost loop) and *batch* loops
(the others): ``C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]`` whatever the index expressions, and
also a convolution ``Y[n, f, y, x] = sum_{c, ry, rx} W[f, c, ry, rx] * X[n, c, y + ry, x + rx]``
(rows ``f``, columns ``n, y, x``: implicit GEMM).  Rows, columns and the ``k`` loops are each
flattened, and the contraction is computed by 32 x 32 output tiles: a block of 256 threads
stages a 32 x 16 tile of ``x`` and a 16 x 32 tile of ``y`` in shared memory per step of 16 along
the flattened ``k`` loops, between ``__syncthreads``, and each thread keeps a 2 x 2 register
tile of outputs (rows ``ty + 16r``, columns ``tx + 16c``, so neighbouring threads take
neighbouring columns).  Elements outside the iteration space load as zero; outputs outside it
are not stored.  Each output still receives its terms in increasing ``k`` order (the classical
shared-memory GEMM of the CUDA programming guide, with register blocking as in Volkov &
Demmel, SC 2008).

Rule: row, column and ``k`` trip counts symbolic or at least :data:`TILE_MIN_EXTENT` (smaller
tiles would be mostly padding).  When a block reduction applies as well and there would be
fewer than :data:`TILE_MIN_BLOCKS` tiles (one per H200 multiprocessor; a weight gradient's long
reduction into few outputs), the block reduction is taken instead.  Anything that matches
neither keeps the thread-per-element mapping.
"""

from __future__ import annotations

import itertools

from tecomp import expr as E
from tecomp.errors import ArgumentError
from tecomp.gpuir import TILE_M, TILE_N, BlockReduce, Tiling
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, Seq, Stmt, Store
from tecomp.stmt_functor import eval_int, expr_vars, stmt_exprs, walk_expr, walk_stmt

BLOCK_REDUCE_MAX_OUTPUTS = 16384
BLOCK_REDUCE_MIN_LENGTH = 64
TILE_MIN_EXTENT = 16
TILE_MIN_BLOCKS = 132  # an H200's multiprocessors
REDUCE_DTYPES = ("float32", "float64", "int32", "int64")


def _loop_free(loop: For) -> set[E.Var]:
    return expr_vars(loop.lo) | expr_vars(loop.hi)


def _reads(s: Stmt, buf: Buffer) -> bool:
    return any(isinstance(n, BufferLoad) and n.buffer == buf
               for x in walk_stmt(s) for e in stmt_exprs(x) for n in walk_expr(e))


def _const_trips(loops: tuple[For, ...]) -> int | None:
    """The product of the loops' trip counts when every bound is a constant, else None."""
    total = 1
    for lp in loops:
        if not (isinstance(lp.lo, E.Const) and isinstance(lp.hi, E.Const)):
            return None
        lo, hi = int(lp.lo.value), int(lp.hi.value)
        total *= max(0, -(-(hi - lo) // lp.step))
    return total


def _corner_trips(outer: tuple[For, ...], inner: tuple[For, ...]) -> int | None:
    """An estimate of the longest reduction when its bounds depend on the (constant) output
    loops only, e.g. ``for k in [0, i]``: the largest trip count over the corners of the
    output box (exact for affine bounds), or None (symbolic, or too many loops)."""
    if len(outer) > 6 or any(_const_trips((lp,)) == 0 for lp in outer):
        return None
    ends = [(int(lp.lo.value), int(lp.lo.value) + (_const_trips((lp,)) - 1) * lp.step)
            for lp in outer]
    best = 0
    for corner in itertools.product(*ends):
        env = {lp.var: x for lp, x in zip(outer, corner)}
        total = 1
        try:
            for lp in inner:
                lo, hi = eval_int(lp.lo, env), eval_int(lp.hi, env)
                total *= max(0, -(-(hi - lo) // lp.step))
        except (ArgumentError, TypeError, ZeroDivisionError):
            return None
        best = max(best, total)
    return best


def _reduction_nest(loop: Stmt, acc: Buffer) -> str | None:
    """The combiner when every store of ``loop`` is ``acc <op>= ...`` with one op and nothing
    in it reads ``acc`` or allocates; else None."""
    ops = set()
    for x in walk_stmt(loop):
        if isinstance(x, Allocate):
            return None
        if isinstance(x, Store):
            if x.buffer != acc or x.reduce is None:
                return None
            ops.add(x.reduce)
    if len(ops) != 1 or _reads(loop, acc):
        return None
    return ops.pop()


def _accumulator(mapped: list[For]) -> tuple[Allocate, Store, For, tuple[Stmt, ...]] | None:
    """``allocate acc { acc = init; <reduction loop>; rest }`` directly under the mapped loops
    (which must be perfectly nested), or None."""
    body = mapped[-1].body
    for outer, inner in zip(mapped, mapped[1:]):
        if outer.body is not inner:
            return None
    if not isinstance(body, Allocate):
        return None
    acc = body.buffer
    if acc.ndim != 0 or acc.scope != "local" or acc.dtype not in REDUCE_DTYPES:
        return None
    seq = body.body
    if not (isinstance(seq, Seq) and len(seq.stmts) >= 3):
        return None
    init, red, *rest = seq.stmts
    if not (isinstance(init, Store) and init.buffer == acc and init.reduce is None
            and not _reads(init, acc) and isinstance(red, For)):
        return None
    if any(isinstance(x, Store) and x.buffer == acc for r in rest for x in walk_stmt(r)):
        return None
    return body, init, red, tuple(rest)


def match_block_reduce(mapped: list[For], has_atomics: bool) -> BlockReduce | None:
    """A :class:`BlockReduce` for a stage whose grid-mapped loops are ``mapped`` (see the
    module doc for the pattern and the rule), or None."""
    if has_atomics or not mapped:
        return None
    found = _accumulator(mapped)
    if found is None:
        return None
    alloc, init, red, rest = found
    op = _reduction_nest(red, alloc.buffer)
    if op is None:
        return None
    inner = [red]
    body = red.body
    while isinstance(body, For) and not (_loop_free(body) & {lp.var for lp in inner}):
        inner.append(body)
        body = body.body
    outputs = _const_trips(tuple(mapped))
    if outputs is None or outputs > BLOCK_REDUCE_MAX_OUTPUTS:
        return None
    length = _const_trips(tuple(inner))
    if length is None:
        length = _corner_trips(tuple(mapped), tuple(inner))
    if length is not None and length < BLOCK_REDUCE_MIN_LENGTH:
        return None
    return BlockReduce(tuple(mapped), alloc.buffer, init, tuple(inner), body, op, rest)


def _groups(mapped: list[For], x: E.Expr, y: E.Expr
            ) -> tuple[tuple[For, ...], tuple[For, ...], tuple[For, ...], E.Expr, E.Expr] | None:
    """(batch, rows, columns, row factor, column factor): loops used by one factor only are
    rows (that factor) or columns (the other one); the rest are batch loops.  The columns hold
    the innermost mapped loop (neighbouring threads, neighbouring output elements)."""
    fx, fy = expr_vars(x), expr_vars(y)
    last = mapped[-1].var
    if last in fx and last not in fy:
        x, y, fx, fy = y, x, fy, fx
    if not (last in fy and last not in fx):
        return None
    rows = tuple(lp for lp in mapped if lp.var in fx and lp.var not in fy)
    cols = tuple(lp for lp in mapped if lp.var in fy and lp.var not in fx)
    batch = tuple(lp for lp in mapped if lp not in rows and lp not in cols)
    if not rows:
        return None
    return batch, rows, cols, x, y


def match_tiling(mapped: list[For], has_atomics: bool, written: frozenset[Buffer]
                 ) -> Tiling | None:
    """A :class:`Tiling` for a stage whose grid-mapped loops are ``mapped`` (see the module
    doc), or None.  ``written``: the buffers the stage writes (the factors must not read
    them)."""
    if has_atomics or len(mapped) < 2:
        return None
    found = _accumulator(mapped)
    if found is None:
        return None
    alloc, init, red, rest = found
    acc = alloc.buffer
    if acc.dtype not in ("float32", "float64"):
        return None
    kloops = [red]
    body: Stmt = red.body
    while isinstance(body, For):
        kloops.append(body)
        body = body.body
    if not (isinstance(body, Store) and body.buffer == acc and body.reduce == "sum"
            and body.indices == () and isinstance(body.value, E.Mul)
            and body.value.a.dtype == body.value.b.dtype == body.value.dtype == acc.dtype):
        return None
    loop_vars = {lp.var for lp in mapped} | {lp.var for lp in kloops}
    if any(_loop_free(lp) & loop_vars for lp in kloops) or _reads(body, acc):
        return None
    groups = _groups(mapped, body.value.a, body.value.b)
    if groups is None:
        return None
    batch, rows, cols, a, b = groups
    kvars = {lp.var for lp in kloops}
    if expr_vars(init.value) & kvars:
        return None
    for f in (a, b):
        if any(isinstance(n, BufferLoad) and n.buffer in written for n in walk_expr(f)):
            return None
    for ext in (_const_trips(rows), _const_trips(cols), _const_trips(tuple(kloops))):
        if ext is not None and ext < TILE_MIN_EXTENT:
            return None
    return Tiling(batch, rows, cols, acc, init, tuple(kloops), a, b, rest)


def choose(tiling: Tiling | None, block: BlockReduce | None
           ) -> tuple[Tiling | None, BlockReduce | None]:
    """At most one schedule: tiles, unless a block reduction applies as well and the tiled
    grid would have fewer than :data:`TILE_MIN_BLOCKS` tiles (long reductions into few outputs,
    e.g. a convolution's weight gradient)."""
    if tiling is None or block is None:
        return tiling, block
    tiles = tile_count(tiling)
    if tiles is not None and tiles < TILE_MIN_BLOCKS:
        return None, block
    return tiling, None


def tile_count(tl: Tiling) -> int | None:
    """The number of output tiles when every extent is a constant."""
    nb, ni, nj = _const_trips(tl.batch), _const_trips(tl.rows), _const_trips(tl.cols)
    if nb is None or ni is None or nj is None:
        return None
    return nb * -(-ni // TILE_M) * -(-nj // TILE_N)
