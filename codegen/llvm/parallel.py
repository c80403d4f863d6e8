"""Multi-threaded ``"parallel"`` loops: outlining and a fork-join over POSIX threads.

Lowering marks the outermost data loop of a stage ``kind="parallel"`` when its iterations
write disjoint elements (:mod:`tecomp.passes.lower`).  Such a loop at the top level of the
function (not inside another loop) is emitted as

* a *body* function ``i32 @f.parK(ptr noalias buf..., values..., i64 lo, i64 hi, i64 start,
  i64 stop)`` that runs iterations ``start <= t < stop`` of the loop (``v = lo + t * step``,
  ``v < hi``).  Every buffer and variable in scope at the loop is passed as an argument (the
  buffers as ``noalias`` pointers: distinct buffers never overlap), so the body is optimised
  like the rest of the function;
* a *trampoline* ``ptr @f.parK.thread(ptr task)`` that unpacks a task record
  ``{ctx, start, stop, status}`` (``ctx`` holds the captured values) and calls the body;
* at the loop's place, a fork-join: the ``trips`` iterations are cut into ``nthr =
  min(nthreads, trips, 64)`` contiguous chunks; chunks 1.. run on threads made with
  ``pthread_create``, chunk 0 on the calling thread, then all are joined and their statuses
  combined.  With ``nthr <= 1`` the body is called directly; if a thread cannot be created its
  chunk runs on the calling thread.

This is the classic OpenMP-style static schedule (as in ``GOMP_parallel``), done with raw
pthreads so that nothing beyond libc is needed.  ``nthreads`` is the function's last argument,
chosen per call by :class:`~tecomp.codegen.kernel.Kernel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ...loopir import For
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
    task_type = ir.LiteralStructType([T.PTR, T.I64, T.I64, T.I32])
    tramp = _trampoline(module, base, body_fn, ctx_type, task_type, len(captured))

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
            _fork_join(em, base, tramp, ctx, task_type, trips, nthr, status_slot)
    ok = b.icmp_signed("==", b.load(status_slot, typ=T.I32), ir.Constant(T.I32, 0))
    cont = em.fn.append_basic_block(f"{base}.done")
    b.cbranch(ok, cont, em._oom_block())
    b.position_at_end(cont)


def _i32(v: int) -> ir.Constant:
    return ir.Constant(T.I32, v)


def _trampoline(module: ir.Module, base: str, body_fn: ir.Function, ctx_type: ir.Type,
                task_type: ir.Type, ncaptured: int) -> ir.Function:
    """``ptr tramp(ptr task)``: unpack the task and its context, call the body, store status."""
    fn = ir.Function(module, ir.FunctionType(T.PTR, [T.PTR]), f"{base}.thread")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    task = fn.args[0]
    fields = [b.load(b.gep(task, [_i32(0), _i32(n)], inbounds=True, source_etype=task_type),
                     typ=task_type.elements[n]) for n in range(3)]
    ctx, start, stop = fields
    args = [b.load(b.gep(ctx, [_i32(0), _i32(n)], inbounds=True, source_etype=ctx_type),
                   typ=ctx_type.elements[n]) for n in range(ncaptured)]
    rc = b.call(body_fn, args + [start, stop])
    b.store(rc, b.gep(task, [_i32(0), _i32(3)], inbounds=True, source_etype=task_type))
    b.ret(ir.Constant(T.PTR, None))
    return fn


def _fork_join(em: StmtEmitter, base: str, tramp: ir.Function, ctx: ir.Value,
               task_type: ir.Type, trips: ir.Value, nthr: ir.Value,
               status_slot: ir.Value) -> None:
    b = em.b
    module = b.module
    create = T.declare(module, "pthread_create", T.I32, [T.PTR, T.PTR, T.PTR, T.PTR])
    join = T.declare(module, "pthread_join", T.I32, [T.I64, T.PTR])
    tasks = em._entry_alloca(task_type, MAX_THREADS, f"{base}.tasks")
    tids = em._entry_alloca(T.I64, MAX_THREADS, f"{base}.tids")
    made = em._entry_alloca(T.I8, MAX_THREADS, f"{base}.made")

    def task_field(t: ir.Value, n: int) -> ir.Value:
        return b.gep(tasks, [t, _i32(n)], inbounds=True, source_etype=task_type)

    def chunk(t: ir.Value) -> ir.Value:  # t * trips / nthr
        return b.sdiv(b.mul(t, trips), nthr)

    # fill every task record; start threads 1..nthr-1
    with _count(em, f"{base}.spawn", nthr) as t:
        b.store(ctx, task_field(t, 0))
        b.store(chunk(t), task_field(t, 1))
        b.store(chunk(b.add(t, ir.Constant(T.I64, 1))), task_field(t, 2))
        b.store(ir.Constant(T.I32, 0), task_field(t, 3))
        b.store(ir.Constant(T.I8, 0), b.gep(made, [t], inbounds=True, source_etype=T.I8))
        with b.if_then(b.icmp_signed(">", t, ir.Constant(T.I64, 0))):
            rc = b.call(create, [b.gep(tids, [t], inbounds=True, source_etype=T.I64),
                                 ir.Constant(T.PTR, None), tramp, task_field(t, 0)])
            with b.if_else(b.icmp_signed("==", rc, ir.Constant(T.I32, 0))) as (ok, failed):
                with ok:
                    b.store(ir.Constant(T.I8, 1),
                            b.gep(made, [t], inbounds=True, source_etype=T.I8))
                with failed:  # run this chunk here instead
                    b.call(tramp, [task_field(t, 0)])
    b.call(tramp, [task_field(ir.Constant(T.I64, 0), 0)])
    b.store(ir.Constant(T.I32, 0), status_slot)
    with _count(em, f"{base}.join", nthr) as t:
        flag = b.load(b.gep(made, [t], inbounds=True, source_etype=T.I8), typ=T.I8)
        with b.if_then(b.icmp_unsigned("!=", flag, ir.Constant(T.I8, 0))):
            tid = b.load(b.gep(tids, [t], inbounds=True, source_etype=T.I64), typ=T.I64)
            b.call(join, [tid, ir.Constant(T.PTR, None)])
        st = b.load(task_field(t, 3), typ=T.I32)
        b.store(b.or_(b.load(status_slot, typ=T.I32), st), status_slot)


class _count:
    """``for t in range(n)`` as a context manager yielding ``t`` (an i64 phi)."""

    def __init__(self, em: StmtEmitter, name: str, n: ir.Value) -> None:
        self.em, self.name, self.n = em, name, n

    def __enter__(self) -> ir.Value:
        b, fn = self.em.b, self.em.fn
        self.pre = b.block
        self.head = fn.append_basic_block(f"{self.name}.head")
        self.body = fn.append_basic_block(f"{self.name}.body")
        self.done = fn.append_basic_block(f"{self.name}.end")
        b.branch(self.head)
        b.position_at_end(self.head)
        self.t = b.phi(T.I64)
        self.t.add_incoming(ir.Constant(T.I64, 0), self.pre)
        b.cbranch(b.icmp_signed("<", self.t, self.n), self.body, self.done)
        b.position_at_end(self.body)
        return self.t

    def __exit__(self, *exc: object) -> None:
        b = self.em.b
        nxt = b.add(self.t, ir.Constant(T.I64, 1))
        self.t.add_incoming(nxt, b.block)
        b.branch(self.head)
        b.position_at_end(self.done)
