"""Undo the CPU's "i, k, j" order of sum reductions for the GPU.

Lowering puts the unit-stride data axis ``j`` of a sum innermost (``tecomp.passes.loop_order``)
because that is what a CPU vectoriser needs::

    for (j, lo, hi) { C[i, j] = 0 }
    for (k, 0, K) { for (j, lo, hi) { C[i, j] += A[i, k] * B[k, j] } }

On a GPU the same unit stride comes from neighbouring *threads* taking neighbouring ``j``; what
matters is that ``j`` is a loop of its own that the scheduler can map onto the grid, and that
each thread accumulates in a register rather than in global memory.  This pass rewrites the
pattern back to the plain order with a local accumulator::

    for (j, lo, hi) {
      allocate C_acc: float32[] (local) {
        C_acc = 0
        for (k, 0, K) { C_acc += A[i, k] * B[k, j] }
        C[i, j] = C_acc
      }
    }

Legality (the inverse of loop_order's argument): every element ``C[i, j]`` receives the terms
of its own sum in the same increasing ``k`` order, so results are bit-identical; the reduction
bounds do not use ``j``; the accumulated value does not read ``C``; init and update store to
the same indices.  Anything else is left as it is.

The update's ``j`` loop may also be a clamp of the init's range by the ``k`` variables, as
zero elimination leaves it in the conv2d input gradient (padding 1, 3x3 filter)::

    for (j3, 0, 32) { Xg[.., j3] = 0 }
    for (t, ..) { for (t_2, 0, 3) {
      for (j3, max(0, t_2 - 1), min(32, t_2 + 31)) { Xg[.., j3] += .. } } }

Then the clamp becomes a condition on the accumulation (``if (j3 >= max(0, t_2 - 1) &&
j3 < min(32, t_2 + 31)) Xg_acc += ..``): the lower bound is ``max(init.lo, ..)`` and the upper
``min(init.hi, ..)`` (unit steps), so the clamped range lies inside the init's and every element
still receives exactly its terms, in the same order.  Without this, the ``j`` loop stays inside
the ``k`` loops and only the outer loops map onto the grid: a few thousand threads, each
running the whole ``k`` x ``j`` nest with read-modify-writes to global memory.
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.functor import fresh_name
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
from tecomp.stmt_functor import walk_expr, walk_stmt


def restore_sum_order(func: LoweredFunc) -> LoweredFunc:
    """``func`` with every "init loop; k loops around a j loop" sum put back in "j outside,
    k inside, register accumulator" order (see the module doc)."""
    taken = {b.name for b in func.inputs + func.outputs} | {p.name for p in func.params}
    for s in walk_stmt(func.body):
        if isinstance(s, Allocate):
            taken.add(s.buffer.name)
    body = _Rewriter(taken).stmt(func.body)
    if body is func.body:
        return func
    return LoweredFunc(func.name, func.inputs, func.outputs, func.params, body)


class _Rewriter:
    def __init__(self, taken: set[str]) -> None:
        self.taken = taken

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Seq):
            items = [self.stmt(x) for x in s.stmts]
            out: list[Stmt] = []
            n = 0
            while n < len(items):
                if n + 1 < len(items):
                    fused = self.fuse(items[n], items[n + 1])
                    if fused is not None:
                        out.append(fused)
                        n += 2
                        continue
                out.append(items[n])
                n += 1
            if len(out) == 1:
                return out[0]
            if all(a is b for a, b in zip(out, s.stmts)) and len(out) == len(s.stmts):
                return s
            return Seq(tuple(out))
        if isinstance(s, For):
            body = self.stmt(s.body)
            return s if body is s.body else For(s.var, s.lo, s.hi, body, s.step, s.kind)
        if isinstance(s, Allocate):
            body = self.stmt(s.body)
            return s if body is s.body else Allocate(s.buffer, body)
        if isinstance(s, LetStmt):
            body = self.stmt(s.body)
            return s if body is s.body else LetStmt(s.var, s.value, body)
        if isinstance(s, IfThenElse):
            t = self.stmt(s.then)
            f = None if s.else_ is None else self.stmt(s.else_)
            if t is s.then and f is s.else_:
                return s
            return IfThenElse(s.cond, t, f)
        return s

    def fuse(self, init: Stmt, red: Stmt) -> Stmt | None:
        """The fused loop for ``init`` (``for j: C[idx] = v0``) followed by ``red`` (``for k..:
        for j: [if c:] C[idx] += v``), or None when they do not match."""
        if not (isinstance(init, For) and isinstance(init.body, Store)):
            return None
        st0 = init.body
        if st0.reduce is not None or not isinstance(red, For):
            return None
        j = init.var
        kloops: list[For] = []
        s: Stmt = red
        while isinstance(s, For) and s.var != j:
            kloops.append(s)
            s = s.body
        if not kloops or not isinstance(s, For):
            return None
        jloop = s
        guard = _range_guard(init, jloop)
        if guard is False:
            return None
        upd = jloop.body
        cond = None
        if isinstance(upd, IfThenElse) and upd.else_ is None:
            cond, upd = upd.cond, upd.then
        if not (isinstance(upd, Store) and upd.reduce == "sum"):
            return None
        buf = st0.buffer
        if upd.buffer != buf or upd.indices != st0.indices or buf.ndim == 0:
            return None
        if any(j in _vars(x) for k in kloops for x in (k.lo, k.hi)):
            return None
        if guard is not True:  # the j range clamped by the k loops becomes a condition
            cond = guard if cond is None else E.And(guard, cond)
        if any(k.var in _vars(x) for k in kloops for x in (st0.value,) + st0.indices):
            return None
        if any(_reads(x, buf) for x in (upd.value, cond) if x is not None):
            return None
        name = fresh_name(f"{buf.name}_acc", self.taken)
        self.taken.add(name)
        acc = Buffer(name, (), buf.dtype, "local")
        inner: Stmt = Store(acc, (), upd.value, "sum")
        if cond is not None:
            inner = IfThenElse(cond, inner)
        for k in reversed(kloops):
            inner = For(k.var, k.lo, k.hi, inner, k.step, "serial")
        body = Seq((Store(acc, (), st0.value), inner,
                    Store(buf, st0.indices, BufferLoad(acc, (), buf.dtype))))
        return For(j, init.lo, init.hi, Allocate(acc, body), init.step, init.kind)


def _range_guard(init: For, jloop: For) -> E.Expr | bool:
    """How the update's ``j`` range relates to the init's: True when they are the same, a
    condition on ``j`` when the update's bounds clamp the init's (``lo = max(init.lo, ..)``,
    ``hi = min(init.hi, ..)``, unit steps; the zero-eliminated conv2d gradient's
    ``for (j3, max(0, t_2 - 1), min(32, t_2 + 31))``), False otherwise."""
    if (jloop.lo, jloop.hi, jloop.step) == (init.lo, init.hi, init.step):
        return True
    if init.step != 1 or jloop.step != 1:
        return False
    if not (_clamps(jloop.lo, init.lo, E.Max) and _clamps(jloop.hi, init.hi, E.Min)):
        return False
    j = init.var
    terms = []
    if jloop.lo != init.lo:
        terms.append(E.GE(j, jloop.lo))
    if jloop.hi != init.hi:
        terms.append(E.LT(j, jloop.hi))
    return terms[0] if len(terms) == 1 else E.And(terms[0], terms[1])


def _clamps(e: E.Expr, bound: E.Expr, op: type) -> bool:
    """Whether ``e`` is ``bound`` or an ``op`` (Max for lower, Min for upper bounds) with
    ``bound`` among its operands, so that ``e`` never leaves ``bound``'s side."""
    if e == bound:
        return True
    return isinstance(e, op) and (_clamps(e.a, bound, op) or _clamps(e.b, bound, op))


def _vars(e: E.Expr) -> set[E.Var]:
    return {x for x in walk_expr(e) if isinstance(x, E.Var)}


def _reads(e: E.Expr, buf: Buffer) -> bool:
    return any(isinstance(x, BufferLoad) and x.buffer == buf for x in walk_expr(e))

