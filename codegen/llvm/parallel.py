"""Multi-threaded ``"parallel"`` loops: outlining and a fork-join over POSIX threads.

Lowering marks the outermost data loop of a stage ``kind="parallel"`` when its iterations
write disjoint elements (:mod:`tecomp.passes.lower`).  Such a loop at the top level of the
function (not inside another loop) is emitted as

* a *body* function ``i32 @f.parK(ptr noalias buf..., values..., i64 lo, i64 hi, i64 start,
  i64 stop)`` that runs iterations ``start <= t < stop`` of the loop (``v = lo + t * step``,
  ``v < hi``).  Every buffer and variable in scope at the loop is passed as an argument (the
  buffers as ``noalias`` pointers: distinct buffers never overlap), so the body is optimised
  like the rest of the function;
* a *worker* ``void @f.parK.work(ptr record)`` that claims chunks of the iterations from an
  atomic counter in a shared record ``{next, done, status, refs, ctx, trips, chunks}`` (``ctx``
  holds the captured values) and runs them until none is left, counting finished chunks in
  ``done``; a *trampoline* ``ptr @f.parK.thread(ptr record)`` (a helper thread) runs the worker
  and drops its reference to the record;
* at the loop's place, a fork-join: with ``nthr = min(nthreads, trips, 64)`` threads the
  ``trips`` iterations are cut into ``min(4 * nthr, trips)`` contiguous chunks; ``nthr - 1``
  detached helpers are started with ``pthread_create``, the calling thread runs the worker
  too, then waits (``sched_yield``) until ``done`` counts every chunk, and combines the
  statuses.  With ``nthr <= 1`` the body is called directly.

The chunks are claimed dynamically (OpenMP's ``schedule(dynamic)``, four chunks a thread) and the
caller never joins a thread, so a helper the OS has not started yet costs nothing: on a loaded
machine the caller takes the chunks itself instead of waiting a scheduler time slice for each
helper (measured: a softmax with four parallel loops took 12 ms with static chunks and
``pthread_join``, 0.09 ms so).  The record lives on the heap with a reference count, because a
late helper may touch it after the call returned (it finds no chunk and, if last, frees it);
it reads the captured values only for a chunk it claimed, while the caller still waits.
Nothing beyond libc is needed.  ``nthreads`` is the function's last argument, chosen per call
by :class:`~tecomp.codegen.kernel.Kernel`.
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
    worker = _worker(module, base, body_fn, ctx_type, len(captured))
    tramp = _trampoline(module, base, worker)

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
            _fork_join(em, tramp, worker, ctx, trips, nthr, status_slot,
                       lambda: b.call(body_fn, captured + [ir.Constant(T.I64, 0), trips]))
    ok = b.icmp_signed("==", b.load(status_slot, typ=T.I32), ir.Constant(T.I32, 0))
    cont = em.fn.append_basic_block(f"{base}.done")
    b.cbranch(ok, cont, em._oom_block())
    b.position_at_end(cont)


def _i32(v: int) -> ir.Constant:
    return ir.Constant(T.I32, v)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(T.I64, v)


# the shared record of one fork-join, on the heap: helpers may outlive the call that made it
_NEXT, _DONE, _STATUS, _REFS, _CTX, _TRIPS, _CHUNKS = range(7)
RECORD = ir.LiteralStructType([T.I64, T.I64, T.I32, T.I32, T.PTR, T.I64, T.I64])
RECORD_BYTES = 48
CHUNKS_PER_THREAD = 4


def _field(b: ir.IRBuilder, rec: ir.Value, n: int) -> ir.Value:
    return b.gep(rec, [_i32(0), _i32(n)], inbounds=True, source_etype=RECORD)


def _worker(module: ir.Module, base: str, body_fn: ir.Function, ctx_type: ir.Type,
            ncaptured: int) -> ir.Function:
    """``void work(ptr record)``: claim chunks (an atomic counter) and run them until none is
    left; each finished chunk is counted in ``done`` (its status or-ed into ``status``)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [T.PTR]), f"{base}.work")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    entry, loop, run, done = (fn.append_basic_block(x) for x in ("entry", "claim", "run", "end"))
    b = ir.IRBuilder(entry)
    rec = fn.args[0]
    trips = b.load(_field(b, rec, _TRIPS), typ=T.I64)
    chunks = b.load(_field(b, rec, _CHUNKS), typ=T.I64)
    b.branch(loop)
    b.position_at_end(loop)
    c = b.atomic_rmw("add", _field(b, rec, _NEXT), _i64(1), "seq_cst")
    b.cbranch(b.icmp_signed("<", c, chunks), run, done)
    b.position_at_end(run)
    # only a claimed chunk reads the context: the caller waits until every chunk is done
    ctx = b.load(_field(b, rec, _CTX), typ=T.PTR)
    args = [b.load(b.gep(ctx, [_i32(0), _i32(n)], inbounds=True, source_etype=ctx_type),
                   typ=ctx_type.elements[n]) for n in range(ncaptured)]
    start = b.sdiv(b.mul(c, trips), chunks)
    stop = b.sdiv(b.mul(b.add(c, _i64(1)), trips), chunks)
    rc = b.call(body_fn, args + [start, stop])
    with b.if_then(b.icmp_signed("!=", rc, _i32(0))):
        b.atomic_rmw("or", _field(b, rec, _STATUS), rc, "seq_cst")
    b.atomic_rmw("add", _field(b, rec, _DONE), _i64(1), "seq_cst")
    b.branch(loop)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _release(b: ir.IRBuilder, rec: ir.Value) -> None:
    """Drop one reference to ``rec``; the last one frees it."""
    free = T.declare(b.module, "free", ir.VoidType(), [T.PTR])
    old = b.atomic_rmw("sub", _field(b, rec, _REFS), _i32(1), "seq_cst")
    with b.if_then(b.icmp_signed("==", old, _i32(1))):
        b.call(free, [rec])


def _trampoline(module: ir.Module, base: str, worker: ir.Function) -> ir.Function:
    """``ptr tramp(ptr record)``, a helper thread: work, then drop its reference."""
    fn = ir.Function(module, ir.FunctionType(T.PTR, [T.PTR]), f"{base}.thread")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(worker, [fn.args[0]])
    _release(b, fn.args[0])
    b.ret(ir.Constant(T.PTR, None))
    return fn


def _fork_join(em: StmtEmitter, tramp: ir.Function, worker: ir.Function, ctx: ir.Value,
               trips: ir.Value, nthr: ir.Value, status_slot: ir.Value, serial) -> None:
    """Start ``nthr - 1`` detached helpers, work on the calling thread too, and wait only
    until every chunk is done: a helper the OS has not started yet (a loaded machine) costs
    nothing, since chunks are claimed dynamically and the caller takes what is left.  The
    record is reference-counted, so a late helper finds no chunk and frees it if last."""
    b = em.b
    module = b.module
    malloc = T.declare(module, "malloc", T.PTR, [T.I64])
    create = T.declare(module, "pthread_create", T.I32, [T.PTR, T.PTR, T.PTR, T.PTR])
    detach = T.declare(module, "pthread_detach", T.I32, [T.I64])
    yield_ = T.declare(module, "sched_yield", T.I32, [])
    rec = b.call(malloc, [_i64(RECORD_BYTES)])
    with b.if_else(b.icmp_unsigned("==", rec, ir.Constant(T.PTR, None))) as (no_mem, go):
        with no_mem:  # no record: run the loop here
            b.store(serial(), status_slot)
        with go:
            chunks = T.intrinsic(b, "smin", [b.mul(nthr, _i64(CHUNKS_PER_THREAD)), trips])
            for n, v in ((_NEXT, _i64(0)), (_DONE, _i64(0)), (_STATUS, _i32(0)),
                         (_REFS, b.trunc(nthr, T.I32)), (_CTX, ctx), (_TRIPS, trips),
                         (_CHUNKS, chunks)):
                b.store(v, _field(b, rec, n))
            tid = em._entry_alloca(T.I64, 1, "tid")
            with _count(em, "spawn", b.sub(nthr, _i64(1))):
                rc = b.call(create, [tid, ir.Constant(T.PTR, None), tramp, rec])
                with b.if_else(b.icmp_signed("==", rc, _i32(0))) as (ok, failed):
                    with ok:
                        b.call(detach, [b.load(tid, typ=T.I64)])
                    with failed:  # one helper fewer; the others and the caller do its share
                        b.atomic_rmw("sub", _field(b, rec, _REFS), _i32(1), "seq_cst")
            b.call(worker, [rec])
            wait, waited = em.fn.append_basic_block("wait"), em.fn.append_basic_block("waited")
            b.branch(wait)
            b.position_at_end(wait)
            done = b.load_atomic(_field(b, rec, _DONE), "acquire", 8, typ=T.I64)
            spin = em.fn.append_basic_block("spin")
            b.cbranch(b.icmp_signed("<", done, chunks), spin, waited)
            b.position_at_end(spin)
            b.call(yield_, [])
            b.branch(wait)
            b.position_at_end(waited)
            b.store(b.load_atomic(_field(b, rec, _STATUS), "acquire", 4, typ=T.I32),
                    status_slot)
            _release(b, rec)


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
