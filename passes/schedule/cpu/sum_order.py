"""The CPU loop order of reductions: the first step of the CPU schedule.

Lowering (:mod:`tecomp.passes.lower`) emits every stage in its declaration order: a stage
``C[i, j] = sum(A[i, k] * B[k, j], k)`` becomes the plain nest ::

    parallel for (i, ..) {
      for (j, ..) {
        allocate C_sum: float32[] (local) {
          C_sum = 0.0
          for (k, ..) { C_sum += A[i, k] * B[k, j] }
          C[i, j] = C_sum
        }
      }
    }

which a GPU maps as it is (neighbouring threads take neighbouring ``j``).  A CPU wants the
innermost loop to walk memory with unit stride, which LLVM's O3 does not arrange (it does
not interchange loops).  :func:`order_sums` finds every such plain nest of a stage whose
whole body is one reduction (the data loops a perfect nest around the accumulator, the
reduction loops a perfect nest around one accumulating store, no other reduction inside),
reads it back as the tensor expression it was lowered from (each buffer read as a read of a
tensor standing for the buffer) and applies, in order:

1. :func:`.loop_order.contiguous_reduction_last`: the reduction axis that most reads walk
   with unit stride becomes the innermost;
2. :func:`.residue_split.split_window_sum`: a sum whose window slides with the last data
   axis is split by residues (the polyphase form of a strided convolution's gradient);
3. :func:`.loop_order.reorder_sum`: otherwise the "i, k, j" order, where that pays — first
   on the sum with its windows that slide ``s >= 2`` per output rewritten relative to it
   (:func:`tecomp.passes.window_shift.shift_strided_windows`), then on the sum as it is.

When only step 1 changed the sum, the stage is lowered again in the plain order with the
reordered axes (:func:`tecomp.passes.lower_stage.lower_stage`); when nothing applies, the nest
is kept.  The data loops outside ``j`` keep their kinds (the parallel outermost loop of a
stage, the parallel row loop of a wide scan step); ``j`` itself runs serially inside the
reduction loops.

A stage with ``j`` its only data axis (a column sum ``b[j] = sum_t H[t, j]``: the gradient of
a bias, of a layer norm's scale and shift) has no parallel loop left.  Its columns cut into
one block a core ran no faster on two cores (each core read half of every row: 8192x768
float32, 16 GB/s against 21 for one core reading whole rows; the cores' prefetchers running
ahead into each other's halves would explain it, not verified).  So on a host of ``T >= 2``
cores the outermost reduction loop is cut into ``T`` contiguous ranges instead, each range's
sum into a row of a ``T x n`` temporary, the ranges a parallel loop, and the rows then
combined in order (the OpenMP ``reduction`` clause's partial sums; :func:`_row_chunks`)::

    allocate b_part: float32[T, n] {
      parallel for (c, 0, T) {
        for (j, 0, n) { b_part[c, j] = 0.0 }
        for (t, c * R // T, (c + 1) * R // T) { for (j, 0, n) { b_part[c, j] += H[t, j] } }
      }
      for (j, 0, n) { b[j] = b_part[0, j] }
      for (c, 1, T) { for (j, 0, n) { b[j] += b_part[c, j] } }
    }

Each column's terms are then summed in ``T`` runs, combined in order: float sums are no
longer bit-identical to the plain order's, but they do not depend on how many threads a
call uses (``T`` is the host's core count, fixed when the kernel is compiled).  Measured
(``python -m benchmarks.ab_cpu_steps --only row_chunks --threads 2``, an Intel Xeon with
AVX-512, 2 cores; time with / without): a column sum of 8192x768 float32 0.52 / 0.95 ms,
a layer norm's gradient at 2048x768 0.84 / 1.11 ms; one thread unchanged.

Legality.  Reading the nest back is exact: the loop bounds are the axes' ranges, the
accumulating store's value and condition the reduction's body and ``where``, the buffers
those of the tensors the lowering read; converting back gives the loads the nest had.  Each
of the three steps keeps the program's meaning (their module docstrings), so the result
computes what the plain nest computed (float sums bit-identical: each element receives its
terms in the same order; the partial sums of one-axis stages apart, above).
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.host import Host
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LoweredFunc,
    Seq,
    Stmt,
    Store,
)
from tecomp.stmt_functor import (
    StmtMutator,
    bound_names,
    expr_children,
    rebuild_expr,
    replace_expr,
    walk_expr,
    walk_stmt,
)
from tecomp.tensor import PlaceholderOp, Tensor

from ...lower_stage import Context, expression_lowerer, identity, lower_stage, upper
from ...window_shift import shift_strided_windows
from .loop_order import contiguous_reduction_last, reorder_sum
from .residue_split import split_window_sum

#: a one-axis stage's sum over rows runs as one partial sum a core over contiguous rows, the
#: chunks a parallel loop (module docstring; False: one serial nest, an A/B switch)
COLUMN_CHUNKS = True
#: the fewest iterations of the outer reduction loop a chunk: the partial sums write and read
#: the ``T x n`` temporary once, at most a quarter of what the chunks read
ROWS_A_CHUNK = 8


def order_sums(func: LoweredFunc, host: Host | None = None) -> LoweredFunc:
    """``func`` with the CPU loop order of its reduction stages (module docstring); ``host``
    (its cores and vector width) cuts one-axis column sums into chunks, one a core."""
    names = bound_names(func.body) | {p.name for p in func.params}
    names |= {b.name for b in func.inputs + func.outputs}
    names |= {s.buffer.name for s in walk_stmt(func.body) if isinstance(s, Allocate)}
    ctx = Context({}, {p.name for p in func.params}, names)
    body = _Order(ctx, host).visit(func.body)
    return func if body is func.body else replace(func, body=body)


class _Order(StmtMutator):
    def __init__(self, ctx: Context, host: Host | None = None) -> None:
        self.ctx = ctx
        self.host = host
        self.tensors: dict[Buffer, Tensor] = {}

    def visit_For(self, s: For) -> Stmt:
        out = self.stage(s)
        return super().visit_For(s) if out is None else out

    def visit_Store(self, s: Store) -> Stmt:
        return s

    def stage(self, s: For) -> Stmt | None:
        """The CPU order of the stage whose outermost data loop is ``s``, or None (also
        when a rewrite does not have the stage's loops outermost, which none should)."""
        nest = _plain_sum(s)
        if nest is None:
            return None
        loops, acc, red, buf, post = nest
        axes = tuple(E.IterVar(x.var, x.lo, _extent(x), "data") for x in loops)
        raxes = tuple(E.IterVar(x.var, x.lo, _extent(x), "reduce") for x in red.loops)
        where = None if red.cond is None else self.raise_expr(red.cond)
        plain = E.Reduce(red.combiner, self.raise_expr(red.value), raxes, where, acc.dtype)
        body = contiguous_reduction_last(plain)
        ctx = self.ctx
        conv = expression_lowerer(ctx, buf.name)
        stmt = split_window_sum(axes, body, buf, conv, ctx.params, fresh=ctx.fresh,
                                parallel=False)
        if stmt is None:
            shifted = shift_strided_windows(axes, plain, set(ctx.params) | ctx.taken)
            if shifted is not plain:
                stmt = reorder_sum(axes, contiguous_reduction_last(shifted), buf, conv,
                                   ctx.params, parallel=False)
        if stmt is None:
            stmt = reorder_sum(axes, body, buf, conv, ctx.params, parallel=False)
        if stmt is not None:
            stmt = _with_kinds(stmt, [x.kind for x in loops[:-1]])
            if len(loops) == 1 and loops[0].kind == "parallel":
                stmt = self.chunks(stmt, loops[0], buf)
            return stmt if post is None or stmt is None else Seq((stmt, _epilogue(loops, acc,
                                                                                   buf, post)))
        if body is plain or post is not None:
            return None
        ctx.taken.discard(acc.name)  # the accumulator of the plain nest is lowered again
        stmt = lower_stage(ctx, buf.name, axes, body, buf, parallel=False)
        return _with_kinds(stmt, [x.kind for x in loops])

    def chunks(self, stmt: Stmt, j: For, buf: Buffer) -> Stmt:
        """``stmt``, the reordered nest of a stage whose only data loop was ``j``, as one
        partial reduction a core (:func:`_row_chunks`) where the host has several."""
        host = self.host
        if host is None or not COLUMN_CHUNKS or host.cores < 2:
            return stmt
        out = _row_chunks(stmt, j, buf, host.cores, self.ctx)
        return stmt if out is None else out

    def raise_expr(self, e: E.Expr) -> E.Expr:
        """``e`` with every load a read of the tensor that stands for its buffer."""
        if isinstance(e, BufferLoad):
            t = self.tensors.get(e.buffer)
            if t is None:
                b = e.buffer
                t = Tensor(b.name, b.shape, b.dtype, PlaceholderOp())
                self.tensors[b] = t
                self.ctx.buffers[id(t)] = b
            return E.TensorRead(t, tuple(self.raise_expr(i) for i in e.indices), e.dtype)
        kids = expr_children(e)
        if not kids:
            return e
        new = tuple(self.raise_expr(x) for x in kids)
        return e if all(a is b for a, b in zip(new, kids)) else rebuild_expr(e, new)


class _Reduction:
    """The reduction nest of a plain stage: its loops and its accumulating store."""

    def __init__(self, loops: list[For], combiner: str, value: E.Expr,
                 cond: E.Expr | None) -> None:
        self.loops, self.combiner, self.value, self.cond = loops, combiner, value, cond


def _plain_sum(s: For) -> tuple[list[For], Buffer, _Reduction, Buffer, E.Expr | None] | None:
    """``(data loops, accumulator, reduction, stage buffer, epilogue)`` when ``s`` is the
    plain nest of a stage whose body is one reduction, possibly inside an element-wise
    epilogue (module docstring), else None.  The epilogue is the stored value when it is not
    the bare accumulator (None then): an expression of the accumulator that reads no other
    local and not the stage's own buffer."""
    loops: list[For] = []
    x: Stmt = s
    while isinstance(x, For):
        loops.append(x)
        x = x.body
    if not isinstance(x, Allocate) or any(lp.step != 1 for lp in loops):
        return None
    acc = x.buffer
    if acc.scope != "local" or acc.shape != () or not isinstance(x.body, Seq):
        return None
    if len(x.body.stmts) != 3:
        return None
    init, nest, out = x.body.stmts
    red = _reduction(nest, acc)
    if red is None or not isinstance(init, Store) or not isinstance(out, Store):
        return None
    if (init.buffer != acc or init.reduce is not None or init.indices != ()
            or init.value != identity(red.combiner, acc.dtype)):
        return None
    buf = out.buffer
    total = BufferLoad(acc, (), acc.dtype)
    if (out.reduce is not None or buf.dtype != acc.dtype or buf.scope == "local"
            or out.indices != tuple(lp.var for lp in loops)):
        return None
    post = None if out.value == total else out.value
    if post is not None:
        loads = [n for n in walk_expr(post) if isinstance(n, BufferLoad)]
        if (total not in loads
                or any(n.buffer == buf or n.buffer.scope == "local" and n != total
                       for n in loads)):
            return None
    exprs = [red.value] + ([] if red.cond is None else [red.cond])
    exprs += [e for lp in red.loops for e in (lp.lo, lp.hi)]
    for e in exprs:  # a nested reduction (a local) or the stage's own buffer: not a plain sum
        if any(isinstance(n, BufferLoad) and (n.buffer.scope == "local" or n.buffer == buf)
               for n in walk_expr(e)):
            return None
    return loops, acc, red, buf, post


def _row_chunks(stmt: Stmt, j: For, buf: Buffer, chunks: int, ctx: Context) -> Stmt | None:
    """``stmt`` (``init; for (k, lo, hi) {..{ for j: buf[j] op= v }}}``) as ``chunks`` partial
    reductions over contiguous ranges of ``k``, a parallel loop, then their combination
    (module docstring); None unless ``stmt`` has that form, ``j``'s and ``k``'s bounds
    constant and at least :data:`ROWS_A_CHUNK` iterations a chunk."""
    if not (isinstance(stmt, Seq) and len(stmt.stmts) == 2 and isinstance(j.lo, E.Const)
            and isinstance(j.hi, E.Const)):
        return None
    init, nest = stmt.stmts
    if not (isinstance(init, For) and init.var == j.var and isinstance(nest, For)
            and isinstance(nest.lo, E.Const) and isinstance(nest.hi, E.Const)):
        return None
    klo, khi = int(nest.lo.value), int(nest.hi.value)
    if khi - klo < ROWS_A_CHUNK * chunks:
        return None
    acc = next((x for x in walk_stmt(nest) if isinstance(x, Store)), None)
    if acc is None or acc.buffer != buf or acc.reduce is None:
        return None
    i64 = lambda v: E.Const(v, "int64")  # noqa: E731
    n = int(j.hi.value) - int(j.lo.value)
    part = Buffer(ctx.fresh(f"{buf.name}_part"), (i64(chunks), i64(n)), buf.dtype, "temp")
    c = E.Var(ctx.fresh("c"), "int64")
    start = E.add(i64(klo), E.floordiv(E.mul(c, i64(khi - klo)), i64(chunks)))
    stop = E.add(i64(klo), E.floordiv(E.mul(E.add(c, i64(1)), i64(khi - klo)), i64(chunks)))
    into = _Into(buf, part, c, j)
    work = For(c, i64(0), i64(chunks), Seq((into.visit(init),
                                              replace(into.visit(nest), lo=start, hi=stop))),
               kind="parallel")
    at = lambda row: BufferLoad(part, (row, into.column), buf.dtype)  # noqa: E731
    first = For(j.var, j.lo, j.hi, Store(buf, (j.var,), at(i64(0))))
    rest = For(c, i64(1), i64(chunks),
               For(j.var, j.lo, j.hi, Store(buf, (j.var,), at(c), acc.reduce)))
    return Allocate(part, Seq((work, first, rest)))


class _Into(StmtMutator):
    """Stores into ``buf[j]`` redirected to ``part[c, j - lo]``."""

    def __init__(self, buf: Buffer, part: Buffer, c: E.Var, j: For) -> None:
        self.buf, self.part, self.c = buf, part, c
        self.column = j.var if j.lo == E.Const(0, "int64") else E.sub(j.var, j.lo)

    def visit_Store(self, s: Store) -> Stmt:
        if s.buffer != self.buf:
            return s
        return replace(s, buffer=self.part, indices=(self.c, self.column))


def _epilogue(loops: list[For], acc: Buffer, buf: Buffer, post: E.Expr) -> Stmt:
    """The stage's epilogue as a nest of its own, run after the reordered sum has left the
    bare totals in ``buf``: ``buf[i..] = post`` with the accumulator read from ``buf``."""
    idx = tuple(lp.var for lp in loops)
    here = BufferLoad(buf, idx, buf.dtype)
    stmt: Stmt = Store(buf, idx, replace_expr(post, BufferLoad(acc, (), acc.dtype), here))
    for lp in reversed(loops):
        stmt = replace(lp, body=stmt)
    return stmt


def _reduction(s: Stmt, acc: Buffer) -> _Reduction | None:
    loops: list[For] = []
    while isinstance(s, For) and s.step == 1 and s.kind == "serial":
        loops.append(s)
        s = s.body
    cond = None
    if isinstance(s, IfThenElse) and s.else_ is None:
        cond, s = s.cond, s.then
    if not loops or not isinstance(s, Store) or s.buffer != acc or s.indices != ():
        return None
    if s.reduce is None:
        return None
    return _Reduction(loops, s.reduce, s.value, cond)


def _extent(lp: For) -> E.Expr:
    """The extent of ``lp``'s range such that ``upper(lo, extent)`` is its upper bound (a
    constant where the range has a constant length)."""
    cands = [E.sub(lp.hi, lp.lo)]
    if isinstance(lp.hi, E.Add) and lp.hi.a == lp.lo and isinstance(lp.hi.b, E.Const):
        cands.insert(0, lp.hi.b)
    for ext in cands:
        if upper(lp.lo, ext) == lp.hi:
            return ext
    return E.Sub(lp.hi, lp.lo, lp.hi.dtype)


def _with_kinds(s: Stmt, kinds: list[str]) -> Stmt | None:
    """``s`` with its outermost chain of loops (through allocations) given ``kinds``; None
    when ``s`` has fewer such loops."""
    if not kinds:
        return s
    if isinstance(s, Allocate):
        body = _with_kinds(s.body, kinds)
        return None if body is None else replace(s, body=body)
    if not isinstance(s, For):
        return None
    body = _with_kinds(s.body, kinds[1:])
    return None if body is None else replace(s, kind=kinds[0], body=body)
