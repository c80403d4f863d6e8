"""Multi-threaded ``"parallel"`` loops: outlining and a fork-join over POSIX threads.

Lowering marks the outermost data loop of a stage ``kind="parallel"`` when its iterations
write disjoint elements (:mod:`tecomp.passes.lower`).  Such a loop at the top level of the
function (not inside another loop) is emitted as

* a *body* function ``i32 @f.parK(ptr noalias buf..., values..., i64 lo, i64 hi, i64 start,
  i64 stop)`` that runs iterations ``start <= t < stop`` of the loop (``v = lo + t * step``,
  ``v < hi``).  Every buffer and variable in scope at the loop is passed as an argument (the
  buffers as ``noalias`` pointers: distinct buffers never overlap), so the body is optimised
  like the rest of the function;
* a *chunk* function ``i32 @f.parK.chunk(ptr ctx, i64 start, i64 stop)`` that unpacks the
  captured values from a context record on the caller's stack and calls the body;
* at the loop's place, with ``nthr = min(nthreads, trips, 64)``: a direct call of the body when
  ``nthr <= 1``, else ``tecomp_parallel_for(chunk, ctx, trips, nthr)``, the fork-join of
  :mod:`.runtime` (dynamically claimed chunks on a pool of POSIX threads; the caller never
  waits for a thread the OS has not scheduled).  A non-zero status (a temporary that could not
  be allocated) makes the function return it.

``nthreads`` is the function's last argument, chosen per call by
:class:`~tecomp.codegen.kernel.Kernel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ...loopir import For
from . import runtime
from . import types as T

if TYPE_CHECKING:
    from .emit import StmtEmitter

MAX_THREADS = 64


def emit_parallel_for(em: StmtEmitter, s: For) -> None:
    """Emit the parallel loop ``s`` at ``em``'s position as an outlined fork-join."""
    from .emit import StmtEmitter, symbol_name

    b = em.b
    module = b.module
    k = em.outlined
    em.outlined += 1
    base = f"{em.fn.name}.par{k}"
    lo = em.emit(s.lo, "int64")
    hi = em.emit(s.hi, "int64")
    step = ir.Constant(T.I64, s.step)
    span = b.sub(hi, lo)
    trips = b.sdiv(b.add(span, ir.Constant(T.I64, s.step - 1)), step)
    trips = T.intrinsic(b, "smax", [trips, ir.Constant(T.I64, 0)])

    bufs = list(em.buffers.items())
    vals = [(v, x) for v, x in em.env.items() if v != s.var]
    # ---- body function
    arg_types = [T.PTR] * len(bufs) + [x.type for _, x in vals] + [T.I64] * 4
    body_fn = ir.Function(module, ir.FunctionType(T.I32, arg_types), base)
    body_fn.linkage = "internal"
    sub = StmtEmitter(body_fn)
    for (buf, _), arg in zip(bufs, body_fn.args):
        arg.name = symbol_name(buf.name)
        arg.add_attribute("noalias")
        sub.buffers[buf] = arg
    for (var, _), arg in zip(vals, body_fn.args[len(bufs):]):
        arg.name = symbol_name(var.name)
        sub.env[var] = arg
    a_lo, a_hi, a_start, a_stop = body_fn.args[-4:]
    sb = sub.b
    v_lo = sb.add(a_lo, sb.mul(a_start, step))
    v_hi = T.intrinsic(sb, "smin", [sb.add(a_lo, sb.mul(a_stop, step)), a_hi])
    sub.loop(s, v_lo, v_hi)
    sub.finish()

    # ---- context record: captured values, then lo and hi
    captured = [x for _, x in bufs] + [x for _, x in vals] + [lo, hi]
    ctx_type = ir.LiteralStructType([c.type if not isinstance(c.type, ir.PointerType)
                                     else T.PTR for c in captured])
    chunk = _chunk(module, base, body_fn, ctx_type, len(captured))
    ctx = em._entry_alloca(ctx_type, 1, f"{base}.ctx")
    for n, c in enumerate(captured):
        b.store(c, b.gep(ctx, [_i32(0), _i32(n)], inbounds=True, source_etype=ctx_type))

    nthr = T.intrinsic(b, "smin", [T.intrinsic(b, "smin", [em.threads, trips]),
                                   ir.Constant(T.I64, MAX_THREADS)])
    serial = b.icmp_signed("<=", nthr, ir.Constant(T.I64, 1))
    status_slot = em._entry_alloca(T.I32, 1, f"{base}.status")
    with b.if_else(serial) as (then, other):
        with then:
            rc = b.call(body_fn, captured + [ir.Constant(T.I64, 0), trips])
            b.store(rc, status_slot)
        with other:
            run = T.declare(module, runtime.SYMBOL, T.I32, [T.PTR, T.PTR, T.I64, T.I64])
            b.store(b.call(run, [chunk, ctx, trips, nthr]), status_slot)
    ok = b.icmp_signed("==", b.load(status_slot, typ=T.I32), ir.Constant(T.I32, 0))
    cont = em.fn.append_basic_block(f"{base}.done")
    b.cbranch(ok, cont, em._oom_block())
    b.position_at_end(cont)


def _i32(v: int) -> ir.Constant:
    return ir.Constant(T.I32, v)


def _chunk(module: ir.Module, base: str, body_fn: ir.Function, ctx_type: ir.Type,
           ncaptured: int) -> ir.Function:
    """``i32 chunk(ptr ctx, i64 start, i64 stop)``: unpack the context, call the body."""
    fn = ir.Function(module, runtime.CHUNK_TYPE, f"{base}.chunk")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx, start, stop = fn.args
    args = [b.load(b.gep(ctx, [_i32(0), _i32(n)], inbounds=True, source_etype=ctx_type),
                   typ=ctx_type.elements[n]) for n in range(ncaptured)]
    b.ret(b.call(body_fn, args + [start, stop]))
    return fn


