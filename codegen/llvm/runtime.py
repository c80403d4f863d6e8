"""The fork-join runtime of parallel loops: LLVM IR compiled once per process, never freed.

``i32 tecomp_parallel_for(ptr chunk, ptr ctx, i64 trips, i64 nthreads)`` runs
``chunk(ctx, start, stop)`` over ``0 <= start < stop <= trips`` on up to ``nthreads`` threads
and returns the or of the chunks' statuses (0: success); a null ``chunk`` resets the thread
pool (after ``fork``).  Kernels declare it and the JIT resolves it at link time
(:func:`.runtime_code.runtime_address`), so their object code holds no address and stays
valid for the persistent cache.

How it works: ``min(4 * nthreads, trips)`` contiguous chunks are claimed from an atomic counter
in a shared record ``{next, done, status, refs, ctx, trips, chunks, fn, slots}`` (OpenMP's
``schedule(dynamic)``).  The caller publishes the record to a pool of persistent worker
threads (:func:`build_module` says how), claims chunks too, then waits (``sched_yield``) until
``done`` counts every chunk.  It never waits for a particular thread, so a worker the OS has
not scheduled yet costs nothing: on a loaded machine the caller takes the chunks itself
instead of waiting a scheduler time slice for each helper (a softmax with four parallel loops
took 12 ms with static chunks and ``pthread_join`` there, 0.09 ms with dynamic chunks and a
thread started per loop, 0.06 ms with the pool).  The record is on the heap with a reference
count, since a late worker may touch it after the call returned: it finds no chunk and, if
last, frees it.

Why a separate, permanent module: a late worker runs only this code, never the kernel's — the
kernel's ``chunk`` is called only for a claimed chunk, while its caller still waits — so a
kernel's machine code may be freed (an evicted kernel) as soon as no call of it is running.
"""

from __future__ import annotations

import platform
from typing import Callable

from llvmlite import ir

from . import types as T
from .layout import RUNTIME_SYMBOL as SYMBOL
from .layout import binds_workers

CHUNKS_PER_THREAD = 4

_NEXT, _DONE, _STATUS, _REFS, _CTX, _TRIPS, _CHUNKS, _FN, _SLOTS = range(9)
RECORD = ir.LiteralStructType([T.I64, T.I64, T.I32, T.I32, T.PTR, T.I64, T.I64, T.PTR, T.I64])
RECORD_BYTES = 64
MAX_WORKERS = 63
_SYNC = ir.ArrayType(T.I8, 64)  # room for glibc's pthread_mutex_t (40 bytes) / cond_t (48)
CHUNK_TYPE = ir.FunctionType(T.I32, [T.PTR, T.I64, T.I64])
# how long a pool thread spins on the generation for the next job before it sleeps: on x86-64
# in time-stamp counter ticks (the TSC runs at the nominal frequency, 2-4 GHz: 0.25-0.5 ms),
# elsewhere in rounds of an atomic load (and no pause).  Kernels called with some Python
# between them then find the workers awake: a 2-thread 512x512 softmax called with 60-200 us
# of Python between calls took 133-140 us a call with the earlier spin of 4000 pause rounds
# (41 us on an Intel Xeon whose pause takes 10 ns, several times that where it takes 140
# cycles) and 78-79 us with a spin of about 0.3 ms, as back to back.  OpenMP runtimes spin far
# longer (KMP_BLOCKTIME 200 ms); these threads share the machine with Python's.
SPIN_TICKS = 1_000_000
SPIN_ROUNDS = 100_000


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def _pause(b: ir.IRBuilder) -> None:
    """A spin-wait hint (x86's ``pause``; nothing elsewhere)."""
    if _x86():
        fn = b.module.globals.get("llvm.x86.sse2.pause")
        if fn is None:
            fn = ir.Function(b.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        b.call(fn, [])


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


#: words of a ``cpu_set_t`` (glibc: 1024 CPUs)
_MASK_WORDS = 16
_MASK = ir.ArrayType(T.I64, _MASK_WORDS)




class _CpuLoop:
    """``with _CpuLoop(b, fn, mask, name) as (at, on, stop):`` a loop over the CPU numbers of a
    ``cpu_set_t`` at ``mask``: ``at`` the number, ``on`` 1 if it is in the set else 0 (both
    ``i64``), ``stop()`` leaves the loop (a branch: the block it ends takes no more code).
    A rolled loop (not unrolled, not vectorised by LLVM): it runs once per worker start, and
    written out for the 16 words of a mask it was half of the runtime's code."""

    def __init__(self, b: ir.IRBuilder, fn: ir.Function, mask: ir.Value, name: str) -> None:
        self.b, self.mask = b, mask
        self.head, self.body, self.done = (fn.append_basic_block(f"{name}.{x}")
                                           for x in ("head", "body", "done"))

    def __enter__(self) -> tuple[ir.Value, ir.Value, Callable[[], None]]:
        b = self.b
        entry = b.block
        b.branch(self.head)
        b.position_at_end(self.head)
        self.at = b.phi(T.I64)
        self.at.add_incoming(_i64(0), entry)
        b.cbranch(b.icmp_signed("<", self.at, _i64(64 * _MASK_WORDS)), self.body, self.done)
        b.position_at_end(self.body)
        word = b.load(b.gep(self.mask, [_i32(0), b.lshr(self.at, _i64(6))], inbounds=True),
                      typ=T.I64)
        on = b.and_(b.lshr(word, b.and_(self.at, _i64(63))), _i64(1))
        return self.at, on, lambda: b.branch(self.done)

    def __exit__(self, *exc: object) -> None:
        b = self.b
        if exc[0] is not None:
            return
        nxt = b.add(self.at, _i64(1))
        self.at.add_incoming(nxt, b.block)
        latch = b.branch(self.head)
        latch.set_metadata("llvm.loop", T.loop_id(b.module, "llvm.loop.unroll.disable",
                                                  ("llvm.loop.vectorize.enable", 0)))
        b.position_at_end(self.done)


class _Placement:
    """A home CPU for each worker.

    A worker asleep on the condition variable is woken by the caller, and Linux may place it
    on the caller's own CPU; the two then share one core until the load balancer moves one of
    them, tens of milliseconds later, while the other core idles.  Measured on two cores
    (``benchmarks/bench_cpu.py`` timing tecomp right after JAX and PyTorch, after a pause
    of 0.25 s): a 3x3/2 convolution ran at its one-thread time (1.8-1.9 ms instead of 1.0)
    in about half of the next 25 calls, mean 1.42-1.51 ms; with each worker bound to a CPU,
    1% of them, mean 0.96-0.98 ms.  A woken thread is placed on a CPU it may use, and the
    balancer may move the caller, which is never bound, away from it.  So worker ``n`` is
    bound for its life to the ``n``-th CPU (round robin) of the set it started with, counted
    from the one after the CPU its creator (the calling thread) ran on, as OpenMP's
    ``OMP_PROC_BIND=close`` binds its threads next to the master's; a set of one CPU binds
    nothing.  Counting from the set's first CPU instead bound the first worker to the
    caller's own CPU in about half of all processes on two cores: the caller then stayed
    there a good part of the time (53 of 200 calls), sharing the core with the spinning
    worker (a 256x256 softmax: 33-82 us a threaded call against 27 serial and 21 with the
    two on different CPUs).  The price: a worker whose CPU another program keeps busy cannot
    leave it, and the caller then takes more of the chunks (they are claimed dynamically)."""

    def __init__(self, module: ir.Module) -> None:
        self.get = T.declare(module, "sched_getaffinity", T.I32, [T.I32, T.I64, T.PTR])
        self.set = T.declare(module, "sched_setaffinity", T.I32, [T.I32, T.I64, T.PTR])

    def bind(self, b: ir.IRBuilder, fn: ir.Function, arg: ir.Value) -> None:
        """At a worker's start: bind it to the ``(r + 1 + index) % count``-th CPU of its set,
        ``r`` the rank in the set of the CPU its creator ran on (``arg``: :meth:`argument`;
        the set's last CPU when that one is unknown or not in the set)."""
        index = b.and_(arg, _i64(0xFFFFFFFF))
        creator = b.sub(b.lshr(arg, _i64(32)), _i64(1))  # -1: unknown
        saved, home = b.alloca(_MASK), b.alloca(_MASK)
        b.store(ir.Constant(_MASK, None), saved)
        b.store(ir.Constant(_MASK, None), home)
        rc = b.call(self.get, [_i32(0), _i64(8 * _MASK_WORDS), saved])
        with b.if_then(b.icmp_signed("!=", rc, _i32(0))):
            b.store(ir.Constant(_MASK, None), saved)
        # the set's size, the creator's rank in it, and whether it is in it (slots on the
        # stack: this code runs once per worker, not worth keeping in registers)
        count, below, inside = (b.alloca(T.I64) for _ in range(3))
        for v in (count, below, inside):
            b.store(_i64(0), v)
        with _CpuLoop(b, fn, saved, "scan") as (at, on, _):
            b.store(b.add(b.load(count, typ=T.I64), on), count)
            before = b.zext(b.icmp_signed("<", at, creator), T.I64)
            b.store(b.add(b.load(below, typ=T.I64), b.and_(on, before)), below)
            here = b.zext(b.icmp_signed("==", at, creator), T.I64)
            b.store(b.or_(b.load(inside, typ=T.I64), b.and_(on, here)), inside)
        size = b.load(count, typ=T.I64)
        with b.if_then(b.icmp_signed(">", size, _i64(1))):
            rank = b.select(b.icmp_signed("!=", b.load(inside, typ=T.I64), _i64(0)),
                            b.load(below, typ=T.I64), b.sub(size, _i64(1)))
            nth = b.alloca(T.I64)
            b.store(b.urem(b.add(b.add(rank, _i64(1)), index), size), nth)
            with _CpuLoop(b, fn, saved, "find") as (at, on, stop):
                left = b.load(nth, typ=T.I64)
                found = b.and_(b.icmp_signed("!=", on, _i64(0)),
                               b.icmp_signed("==", left, _i64(0)))
                with b.if_then(found):
                    word = b.gep(home, [_i32(0), b.lshr(at, _i64(6))], inbounds=True)
                    b.store(b.shl(_i64(1), b.and_(at, _i64(63))), word)
                    b.call(self.set, [_i32(0), _i64(8 * _MASK_WORDS), home])
                    stop()
                b.store(b.sub(left, on), nth)

    @staticmethod
    def argument(b: ir.IRBuilder, index: ir.Value) -> ir.Value:
        """A new worker's argument: its number, and above it the CPU its creator runs on
        plus one (0: unknown)."""
        getcpu = T.declare(b.module, "sched_getcpu", T.I32, [])
        cpu = b.sext(b.call(getcpu, []), T.I64)
        known = b.select(b.icmp_signed(">=", cpu, _i64(0)), b.add(cpu, _i64(1)), _i64(0))
        return b.or_(index, b.shl(known, _i64(32)))


def _global(module: ir.Module, name: str, t: ir.Type, align: int) -> ir.GlobalVariable:
    g = ir.GlobalVariable(module, t, name)
    g.linkage = "internal"
    g.initializer = ir.Constant(t, None)  # zeros: also PTHREAD_{MUTEX,COND}_INITIALIZER
    g.align = align
    return g


def build_module() -> ir.Module:
    """The runtime module: ``tecomp_parallel_for`` and its pool of worker threads.

    The pool: ``workers`` detached threads (started on demand, at most :data:`MAX_WORKERS`) spin
    on the generation for :data:`SPIN_TICKS` (x86) or :data:`SPIN_ROUNDS`, then sleep on a
    condition variable. A call publishes its record as ``job`` with a new generation and wakes
    them (a spinning worker sees the generation change without being woken); a worker that sees
    a new generation takes a reference to the job, if it still has a free slot (``nthreads - 1``
    of them), and works on it. The caller clears ``job`` under the lock before dropping its own
    reference, so a worker never touches a freed record. Concurrent callers may replace each
    other's job before a worker sees it: the caller then does its own chunks (correct, only less
    parallel).
    """
    module = ir.Module(name="tecomp_runtime")
    work = _worker(module)
    mutex = _global(module, "tecomp.rt.mutex", _SYNC, 16)
    cond = _global(module, "tecomp.rt.cond", _SYNC, 16)
    job = _global(module, "tecomp.rt.job", T.PTR, 8)
    gen = _global(module, "tecomp.rt.generation", T.I64, 8)
    workers = _global(module, "tecomp.rt.workers", T.I64, 8)
    lock = T.declare(module, "pthread_mutex_lock", T.I32, [T.PTR])
    unlock = T.declare(module, "pthread_mutex_unlock", T.I32, [T.PTR])
    wait_cv = T.declare(module, "pthread_cond_wait", T.I32, [T.PTR, T.PTR])
    broadcast = T.declare(module, "pthread_cond_broadcast", T.I32, [T.PTR])

    # ---- a pool thread: wait for a new generation, join its job, repeat
    pool = _internal(module, "tecomp.rt.pool", ir.FunctionType(T.PTR, [T.PTR]))
    entry, loop, sleep, take, join, run = (pool.append_basic_block(x) for x in (
        "entry", "loop", "sleep", "take", "join", "run"))
    b = ir.IRBuilder(entry)
    if binds_workers():
        _Placement(module).bind(b, pool, b.ptrtoint(pool.args[0], T.I64))
    seen = b.alloca(T.I64)
    b.store(b.load(gen, typ=T.I64), seen)  # jobs published before this thread are not its own
    spins = b.alloca(T.I64)
    b.branch(loop)
    b.position_at_end(loop)
    # spin a while on the generation before sleeping: calls that follow each other closely
    # (the parallel loops of one kernel, kernels called in a row) then find the worker awake
    # instead of paying a futex wake-up each (tens of microseconds on a virtual machine)
    spin_head, spin_step, locked = (pool.append_basic_block(x) for x in (
        "spin", "spin.step", "locked"))
    ticks = _x86()
    clock = T.declare(module, "llvm.readcyclecounter", T.I64, []) if ticks else None
    b.store(b.call(clock, []) if ticks else _i64(0), spins)  # the start, or a round count
    b.branch(spin_head)
    b.position_at_end(spin_head)
    current = b.load_atomic(gen, "monotonic", 8, typ=T.I64)
    count = b.load(spins, typ=T.I64)
    spent = b.icmp_signed("<", b.sub(b.call(clock, []), count), _i64(SPIN_TICKS)) if ticks \
        else b.icmp_signed("<", count, _i64(SPIN_ROUNDS))
    keep = b.and_(b.icmp_signed("==", current, b.load(seen, typ=T.I64)), spent)
    b.cbranch(keep, spin_step, locked)
    b.position_at_end(spin_step)
    _pause(b)
    if not ticks:
        b.store(b.add(count, _i64(1)), spins)
    b.branch(spin_head)
    b.position_at_end(locked)
    b.call(lock, [mutex])
    b.branch(sleep)
    b.position_at_end(sleep)
    fresh = b.icmp_signed("!=", b.load(gen, typ=T.I64), b.load(seen, typ=T.I64))
    wait_blk = pool.append_basic_block("wait")
    b.cbranch(fresh, take, wait_blk)
    b.position_at_end(wait_blk)
    b.call(wait_cv, [cond, mutex])
    b.branch(sleep)
    b.position_at_end(take)
    b.store(b.load(gen, typ=T.I64), seen)
    rec = b.load(job, typ=T.PTR)
    skip = pool.append_basic_block("skip")
    has = b.icmp_unsigned("!=", rec, ir.Constant(T.PTR, None))
    b.cbranch(has, join, skip)
    b.position_at_end(join)
    slots = b.load(_field(b, rec, _SLOTS), typ=T.I64)
    joinable = b.icmp_signed(">", slots, _i64(0))
    claim = pool.append_basic_block("claim")
    b.cbranch(joinable, claim, skip)
    b.position_at_end(claim)
    b.store(b.sub(slots, _i64(1)), _field(b, rec, _SLOTS))
    b.atomic_rmw("add", _field(b, rec, _REFS), _i32(1), "seq_cst")
    b.call(unlock, [mutex])
    b.branch(run)
    b.position_at_end(run)
    b.call(work, [rec])
    _release(b, rec)
    b.branch(loop)
    b.position_at_end(skip)
    b.call(unlock, [mutex])
    b.branch(loop)

    # ---- the entry point
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

    # a null chunk resets the pool: called in a child process after fork, where no worker
    # thread exists and the lock may have been held by a thread of the parent
    reset, start = fn.append_basic_block("reset"), fn.append_basic_block("start")
    b.cbranch(b.icmp_unsigned("==", chunk, ir.Constant(T.PTR, None)), reset, start)
    b.position_at_end(reset)
    for g in (mutex, cond):
        b.store(ir.Constant(_SYNC, None), g)
    b.store(ir.Constant(T.PTR, None), job)
    b.store(_i64(0), workers)
    b.ret(_i32(0))
    b.position_at_end(start)
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
    helpers = b.sub(nthr, _i64(1))
    for n, v in ((_NEXT, _i64(0)), (_DONE, _i64(0)), (_STATUS, _i32(0)), (_REFS, _i32(1)),
                 (_CTX, ctx), (_TRIPS, trips), (_CHUNKS, chunks), (_FN, chunk),
                 (_SLOTS, helpers)):
        b.store(v, _field(b, rec, n))
    b.call(lock, [mutex])
    # grow the pool to the helpers this call may use
    want = b.select(b.icmp_signed("<", helpers, _i64(MAX_WORKERS)), helpers, _i64(MAX_WORKERS))
    head, body, grown = (fn.append_basic_block(x) for x in ("grow", "grow.body", "grown"))
    b.branch(head)
    b.position_at_end(head)
    b.cbranch(b.icmp_signed("<", b.load(workers, typ=T.I64), want), body, grown)
    b.position_at_end(body)
    index = b.load(workers, typ=T.I64)  # the worker's number (and where the caller runs)
    if binds_workers():
        index = _Placement.argument(b, index)
    rc = b.call(create, [tid, ir.Constant(T.PTR, None), pool, b.inttoptr(index, T.PTR)])
    made = fn.append_basic_block("made")
    b.cbranch(b.icmp_signed("==", rc, _i32(0)), made, grown)  # no thread: use what there is
    b.position_at_end(made)
    b.call(detach, [b.load(tid, typ=T.I64)])
    b.store(b.add(b.load(workers, typ=T.I64), _i64(1)), workers)
    b.branch(head)
    b.position_at_end(grown)
    b.store(rec, job)
    b.store_atomic(b.add(b.load(gen, typ=T.I64), _i64(1)), gen, "monotonic", 8)
    b.call(broadcast, [cond])
    b.call(unlock, [mutex])
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
    b.call(lock, [mutex])  # withdraw the job before dropping the caller's reference
    with b.if_then(b.icmp_unsigned("==", b.load(job, typ=T.PTR), rec)):
        b.store(ir.Constant(T.PTR, None), job)
    b.call(unlock, [mutex])
    _release(b, rec)
    b.ret(status)
    return module
