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
reduction loops, as it did in the plain nest's reduction.

Legality.  Reading the nest back is exact: the loop bounds are the axes' ranges, the
accumulating store's value and condition the reduction's body and ``where``, the buffers
those of the tensors the lowering read; converting back gives the loads the nest had.  Each
of the three steps keeps the program's meaning (their module docstrings), so the result
computes what the plain nest computed (float sums bit-identical: each element receives its
terms in the same order).
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
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


def order_sums(func: LoweredFunc) -> LoweredFunc:
    """``func`` with the CPU loop order of its reduction stages (module docstring)."""
    names = bound_names(func.body) | {p.name for p in func.params}
    names |= {b.name for b in func.inputs + func.outputs}
    names |= {s.buffer.name for s in walk_stmt(func.body) if isinstance(s, Allocate)}
    ctx = Context({}, {p.name for p in func.params}, names)
    body = _Order(ctx).visit(func.body)
    return func if body is func.body else replace(func, body=body)


class _Order(StmtMutator):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
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
            return stmt if post is None or stmt is None else Seq((stmt, _epilogue(loops, acc,
                                                                                   buf, post)))
        if body is plain or post is not None:
            return None
        ctx.taken.discard(acc.name)  # the accumulator of the plain nest is lowered again
        stmt = lower_stage(ctx, buf.name, axes, body, buf, parallel=False)
        return _with_kinds(stmt, [x.kind for x in loops])

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
