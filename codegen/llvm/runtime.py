"""The fork-join runtime of parallel loops: LLVM IR compiled once per process, never freed.

``i32 tecomp_parallel_for(ptr chunk, ptr ctx, i64 trips, i64 nthreads)`` runs
``chunk(ctx, start, stop)`` over ``0 <= start < stop <= trips`` on up to ``nthreads`` threads
and returns the or of the chunks' statuses (0: success).  Kernels declare it and the JIT
resolves it at link time (:func:`address`), so their object code holds no address and stays
valid for the persistent cache.

How it works: ``min(4 * nthreads, trips)`` contiguous chunks are claimed from an atomic counter
in a shared record ``{next, done, status, refs, ctx, trips, chunks, fn}`` (OpenMP's
``schedule(dynamic)``).  ``nthreads - 1`` detached helpers are started with
``pthread_create``; the caller claims chunks too, then waits (``sched_yield``) until ``done``
counts every chunk.  It never joins a thread, so a helper the OS has not started yet costs
nothing: on a loaded machine the caller takes the chunks itself instead of waiting a scheduler
time slice for each helper (a softmax with four parallel loops took 12 ms with static chunks
and ``pthread_join`` there, 0.09 ms so).  The record is on the heap with a reference count,
since a late helper may touch it after the call returned: it finds no chunk and, if last,
frees it.

Why a separate, permanent module: a late helper runs only this code, never the kernel's — the
kernel's ``chunk`` is called only for a claimed chunk, while its caller still waits — so a
kernel's machine code may be freed (an evicted kernel) as soon as no call of it is running.
"""

from __future__ import annotations

from llvmlite import ir

from . import types as T

SYMBOL = "tecomp_parallel_for"
CHUNKS_PER_THREAD = 4

_NEXT, _DONE, _STATUS, _REFS, _CTX, _TRIPS, _CHUNKS, _FN = range(8)
RECORD = ir.LiteralStructType([T.I64, T.I64, T.I32, T.I32, T.PTR, T.I64, T.I64, T.PTR])
RECORD_BYTES = 56
CHUNK_TYPE = ir.FunctionType(T.I32, [T.PTR, T.I64, T.I64])


def _i32(v: int) -> ir.Constant:
    return ir.Constant(T.I32, v)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(T.I64, v)


def _field(b: ir.IRBuilder, rec: ir.Value, n: int) -> ir.Value:
    return b.gep(rec, [_i32(0), _i32(n)], inbounds=True, source_etype=RECORD)


class _Callee:
    """A ``ptr`` value called as an ``i32 (ptr, i64, i64)`` function (llvmlite takes an
    indirect callee's type from a ``function_type`` attribute)."""

    function_type = CHUNK_TYPE

    def __init__(self, value: ir.Value) -> None:
        self.value = value

    def __getattr__(self, name: str):
        return getattr(self.value, name)


def _internal(module: ir.Module, name: str, ftype: ir.FunctionType) -> ir.Function:
    fn = ir.Function(module, ftype, name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    return fn


def _worker(module: ir.Module) -> ir.Function:
    """``void work(ptr record)``: claim chunks and run them until none is left."""
    fn = _internal(module, "tecomp.rt.work", ir.FunctionType(ir.VoidType(), [T.PTR]))
    entry, loop, run, done = (fn.append_basic_block(x) for x in ("entry", "claim", "run", "end"))
    b = ir.IRBuilder(entry)
    rec = fn.args[0]
    trips = b.load(_field(b, rec, _TRIPS), typ=T.I64)
    chunks = b.load(_field(b, rec, _CHUNKS), typ=T.I64)
    ctx = b.load(_field(b, rec, _CTX), typ=T.PTR)
    chunk = _Callee(b.load(_field(b, rec, _FN), typ=T.PTR))
    b.branch(loop)
    b.position_at_end(loop)
    c = b.atomic_rmw("add", _field(b, rec, _NEXT), _i64(1), "seq_cst")
    b.cbranch(b.icmp_signed("<", c, chunks), run, done)
    b.position_at_end(run)
    start = b.sdiv(b.mul(c, trips), chunks)
    stop = b.sdiv(b.mul(b.add(c, _i64(1)), trips), chunks)
    rc = b.call(chunk, [ctx, start, stop])
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


def build_module() -> ir.Module:
    """The runtime module: ``tecomp_parallel_for`` and its helpers."""
    module = ir.Module(name="tecomp_runtime")
    work = _worker(module)
    helper = _internal(module, "tecomp.rt.helper", ir.FunctionType(T.PTR, [T.PTR]))
    hb = ir.IRBuilder(helper.append_basic_block("entry"))
    hb.call(work, [helper.args[0]])
    _release(hb, helper.args[0])
    hb.ret(ir.Constant(T.PTR, None))

    fn = ir.Function(module, ir.FunctionType(T.I32, [T.PTR, T.PTR, T.I64, T.I64]), SYMBOL)
    fn.attributes.add("nounwind")
    chunk, ctx, trips, nthr = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    malloc = T.declare(module, "malloc", T.PTR, [T.I64])
    create = T.declare(module, "pthread_create", T.I32, [T.PTR, T.PTR, T.PTR, T.PTR])
    detach = T.declare(module, "pthread_detach", T.I32, [T.I64])
    yield_ = T.declare(module, "sched_yield", T.I32, [])
    tid = b.alloca(T.I64)

    callee = _Callee(chunk)

    def serial() -> None:
        b.ret(b.call(callee, [ctx, _i64(0), trips]))

    one, fork = fn.append_basic_block("one"), fn.append_basic_block("fork")
    b.cbranch(b.icmp_signed("<=", nthr, _i64(1)), one, fork)
    b.position_at_end(one)
    serial()
    b.position_at_end(fork)
    rec = b.call(malloc, [_i64(RECORD_BYTES)])
    no_mem, go = fn.append_basic_block("no_record"), fn.append_basic_block("go")
    b.cbranch(b.icmp_unsigned("==", rec, ir.Constant(T.PTR, None)), no_mem, go)
    b.position_at_end(no_mem)
    serial()
    b.position_at_end(go)
    chunks = b.mul(nthr, _i64(CHUNKS_PER_THREAD))
    chunks = b.select(b.icmp_signed("<", chunks, trips), chunks, trips)
    for n, v in ((_NEXT, _i64(0)), (_DONE, _i64(0)), (_STATUS, _i32(0)),
                 (_REFS, b.trunc(nthr, T.I32)), (_CTX, ctx), (_TRIPS, trips),
                 (_CHUNKS, chunks), (_FN, chunk)):
        b.store(v, _field(b, rec, n))
    # start helpers 1 .. nthr-1
    head, body, started = (fn.append_basic_block(x) for x in ("spawn", "spawn.body", "spawned"))
    pre = b.block
    b.branch(head)
    b.position_at_end(head)
    t = b.phi(T.I64)
    t.add_incoming(_i64(1), pre)
    b.cbranch(b.icmp_signed("<", t, nthr), body, started)
    b.position_at_end(body)
    rc = b.call(create, [tid, ir.Constant(T.PTR, None), helper, rec])
    with b.if_else(b.icmp_signed("==", rc, _i32(0))) as (ok, failed):
        with ok:
            b.call(detach, [b.load(tid, typ=T.I64)])
        with failed:  # one helper fewer; the others and the caller do its share
            b.atomic_rmw("sub", _field(b, rec, _REFS), _i32(1), "seq_cst")
    t.add_incoming(b.add(t, _i64(1)), b.block)
    b.branch(head)
    b.position_at_end(started)
    b.call(work, [rec])
    wait, spin, waited = (fn.append_basic_block(x) for x in ("wait", "spin", "waited"))
    b.branch(wait)
    b.position_at_end(wait)
    done = b.load_atomic(_field(b, rec, _DONE), "acquire", 8, typ=T.I64)
    b.cbranch(b.icmp_signed("<", done, chunks), spin, waited)
    b.position_at_end(spin)
    b.call(yield_, [])
    b.branch(wait)
    b.position_at_end(waited)
    status = b.load_atomic(_field(b, rec, _STATUS), "acquire", 4, typ=T.I32)
    _release(b, rec)
    b.ret(status)
    return module
