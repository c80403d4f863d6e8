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

from typing import Any

from llvmlite import ir

from ... import expr as E
from ...lanes import OPS, vector_form
from ...loopir import BufferLoad, For
from ...stmt_functor import expr_vars
from . import types as T


def emit_lanes(em: Any, s: For) -> bool:
    """Emit the lane loop ``s`` with ``em`` (a :class:`.emit.StmtEmitter`) as vector
    operations; False (nothing emitted) when :func:`vector_form` does not apply."""
    form = vector_form(s)
    if form is None:
        return False
    n, stores = form
    lo = em.index(s.lo)
    saved = em.env.get(s.var)
    em.env[s.var] = lo
    try:
        for st in stores:
            em.forget()
            dt = st.buffer.dtype
            vt = ir.VectorType(T.reg_type(dt), n)
            value = _vector(em, st.value, s.var, dt, vt)
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


def _vector(em: Any, e: E.Expr, v: E.Var, dtype: str, vt: ir.VectorType) -> ir.Value:
    b = em.b
    if v not in expr_vars(e):
        scalar = em.emit(e, dtype)
        one = b.insert_element(ir.Constant(vt, ir.Undefined), scalar, ir.Constant(T.I32, 0))
        mask = ir.Constant(ir.VectorType(T.I32, vt.count), [0] * vt.count)
        return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), mask)
    if isinstance(e, BufferLoad):
        return b.load(em.address(e.buffer, e.indices), typ=vt, align=T.elem_size(dtype))
    if isinstance(e, E.Neg):
        return b.fneg(_vector(em, e.a, v, dtype, vt), flags=T.FAST)
    op = OPS[type(e)]
    x, y = _vector(em, e.a, v, dtype, vt), _vector(em, e.b, v, dtype, vt)
    return getattr(b, op)(x, y, flags=T.FAST)
