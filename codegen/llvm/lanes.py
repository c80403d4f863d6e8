"""Emitting lane loops (:mod:`tecomp.lanes`) as LLVM vector operations.

A lane loop's tile of accumulators, held in a small local buffer, is loaded, updated and
stored as whole vectors at constant offsets; LLVM's scalar replacement (SROA) keeps those in
vector registers across the reduction loop around them.  LLVM's loop vectoriser cannot
produce that from scalar code: it would have to vectorise the inner loop and then promote the
accumulators' loads and stores out of the outer loop, and it does neither in that order.
Reads that move with the lane are one vector load from the lane-0 address; expressions that
do not are computed once and broadcast.
"""

from __future__ import annotations

from typing import Any, Callable

from llvmlite import ir

from ... import expr as E
from ...lanes import OPS, Uses, lane_index, vector_form
from ...loopir import BufferLoad, For
from ...stmt_functor import expr_children
from . import types as T


def emit_lanes(em: Any, s: For) -> bool:
    """Emit the lane loop ``s`` with ``em`` (a :class:`.emit.StmtEmitter`) as vector
    operations; False (nothing emitted) when :func:`vector_form` does not apply."""
    form = vector_form(s)
    if form is None:
        return False
    n, stores = form
    lo = em.index(s.lo)
    uses = Uses(s.var)
    saved = em.env.get(s.var)
    em.env[s.var] = lo
    shared = _Shared({st.buffer for st in stores}) if SHARE_READS else None
    try:
        for st in stores:
            em.forget()
            dt = st.buffer.dtype
            vt = ir.VectorType(T.reg_type(dt), n)
            value = _vector(em, st.value, uses, dt, vt, shared)
            ptr = em.address(st.buffer, st.indices)
            if st.reduce == "sum":
                old = em.b.load(ptr, typ=vt, align=T.elem_size(dt))
                value = em.b.fadd(old, value, flags=T.FAST)
            em.b.store(value, ptr, align=T.elem_size(dt))
    finally:
        if saved is None:
            del em.env[s.var]
        else:
            em.env[s.var] = saved
    return True


#: a read of a buffer no statement of the lane loop writes is loaded (and broadcast) once
#: for all the loop's statements (:class:`_Shared`; an A/B switch)
SHARE_READS = True


class _Shared:
    """The vectors of a lane loop's reads of buffers it does not write, by expression and
    basic block: a register tile's step reads each row operand once for the tile's two
    vectors of columns and each column vector once for its eight rows, and emitting each
    read per statement gave LLVM four times the loads to merge again."""

    __slots__ = ("written", "values", "clean")

    def __init__(self, written: set[Any]) -> None:
        self.written = written
        self.values: dict[tuple[E.Expr, int, Any], tuple[ir.Block, ir.Value]] = {}
        self.clean: dict[int, tuple[E.Expr, bool]] = {}

    def reads_unwritten(self, e: E.Expr) -> bool:
        """Whether ``e`` reads no buffer the lane loop writes (each node looked at once)."""
        hit = self.clean.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if isinstance(e, BufferLoad):
            ok = e.buffer not in self.written and all(self.reads_unwritten(i) for i in e.indices)
        else:
            ok = all(self.reads_unwritten(c) for c in expr_children(e))
        self.clean[id(e)] = (e, ok)
        return ok

    def get(self, em: Any, e: E.Expr, vt: ir.VectorType,
            make: Callable[[], ir.Value]) -> ir.Value:
        """The vector ``make()`` emits for ``e``, emitted once per basic block when ``e``
        reads no buffer the loop writes."""
        if not self.reads_unwritten(e):
            return make()
        key = (e, vt.count, str(vt.element))
        hit = self.values.get(key)
        if hit is not None and hit[0] is em.b.block:
            return hit[1]
        v = make()
        self.values[key] = (em.b.block, v)
        return v


def _vector(em: Any, e: E.Expr, uses: Uses, dtype: str, vt: ir.VectorType,
            shared: _Shared | None = None, memo: dict | None = None) -> ir.Value:
    """``e`` at every lane of ``uses.v``, as a vector of type ``vt``; reads of unwritten
    buffers through ``shared`` when given; with ``memo`` (a dict, by node), each shared node
    of ``e`` emitted once (a value that is a DAG far larger as a tree)."""
    if memo is None:
        return _vector_of(em, e, uses, dtype, vt, shared, None)
    found = memo.get((id(e), dtype))
    if found is None:
        found = memo[(id(e), dtype)] = (_vector_of(em, e, uses, dtype, vt, shared, memo), e)
    return found[0]


def _vector_of(em: Any, e: E.Expr, uses: Uses, dtype: str, vt: ir.VectorType,
               shared: _Shared | None, memo: dict | None) -> ir.Value:
    b = em.b
    if not uses(e):
        def splat() -> ir.Value:
            return _splat(em, em.emit(e, dtype), vt.count)
        return splat() if shared is None else shared.get(em, e, vt, splat)
    if isinstance(e, BufferLoad):
        def load() -> ir.Value:
            return b.load(em.address(e.buffer, e.indices), typ=vt, align=T.elem_size(dtype))
        return load() if shared is None else shared.get(em, e, vt, load)

    def sub(x: E.Expr) -> ir.Value:
        return _vector(em, x, uses, dtype, vt, shared, memo)

    if isinstance(e, E.Neg):
        return b.fneg(sub(e.a), flags=T.FAST)
    if isinstance(e, E.Select):
        return b.select(_mask(em, e.cond, uses, vt.count, memo), sub(e.t), sub(e.f))
    if isinstance(e, (E.Max, E.Min)):  # NaN-propagating, as the scalar rule
        return T.intrinsic(b, "maximum" if isinstance(e, E.Max) else "minimum",
                           [sub(e.a), sub(e.b)])
    op = OPS[type(e)]
    x, y = sub(e.a), sub(e.b)
    return getattr(b, op)(x, y, flags=T.FAST)


def _splat(em: Any, scalar: ir.Value, n: int) -> ir.Value:
    """``scalar`` in all ``n`` lanes (an insert and a shuffle; their constant operands made
    once per element type and width: a register tile broadcasts a row value every step)."""
    key = (scalar.type, n)
    parts = _SPLAT_PARTS.get(key)
    if parts is None:
        vt = ir.VectorType(scalar.type, n)
        parts = _SPLAT_PARTS[key] = (ir.Constant(vt, ir.Undefined), ir.Constant(T.I32, 0),
                                     ir.Constant(ir.VectorType(T.I32, n), [0] * n))
    undef, zero, mask = parts
    return em.b.shuffle_vector(em.b.insert_element(undef, scalar, zero), undef, mask)


#: the constant operands of :func:`_splat` by element type and width
_SPLAT_PARTS: dict[tuple[ir.Type, int], tuple[ir.Constant, ir.Constant, ir.Constant]] = {}


def _lane_ints(em: Any, e: E.Expr, uses: Uses, n: int) -> ir.Value:
    """The integer index ``e`` at every lane: its lane-0 value, plus the lane number when
    ``e`` moves with the lane (``uses.v`` is bound to the first lane)."""
    base = _splat(em, em.index(e), n)
    if lane_index(e, uses.v, uses) == 0:
        return base
    step = ir.Constant(ir.VectorType(T.I64, n), list(range(n)))
    return em.b.add(base, step)


_SIGNED = {E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">=", E.EQ: "==", E.NE: "!="}


def _mask(em: Any, c: E.Expr, uses: Uses, n: int, memo: dict | None = None) -> ir.Value:
    """A per-lane condition as a vector of ``i1``."""
    b = em.b
    if not uses(c):
        return _splat(em, em.emit(c, "bool"), n)
    if isinstance(c, (E.And, E.Or)):
        x, y = _mask(em, c.a, uses, n, memo), _mask(em, c.b, uses, n, memo)
        return b.and_(x, y) if isinstance(c, E.And) else b.or_(x, y)
    op = _SIGNED[type(c)]
    if c.a.dtype == "int64":
        return b.icmp_signed(op, _lane_ints(em, c.a, uses, n), _lane_ints(em, c.b, uses, n))
    vt = ir.VectorType(T.reg_type(c.a.dtype), n)
    x = _vector(em, c.a, uses, c.a.dtype, vt, memo=memo)
    y = _vector(em, c.b, uses, c.b.dtype, vt, memo=memo)
    return b.fcmp_unordered(op, x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
