"""Loop IR to LLVM IR: one function per :class:`~tecomp.loopir.LoweredFunc`.

The generated function is ::

    i32 @name(ptr noalias %in0, ..., ptr noalias %out0, ..., ptr noalias %tmp0, ...,
              i64 %param0, ...)

one pointer per input and output buffer (dense, row-major), one per *pooled* temporary
(:func:`pooled_buffers`: memory the caller provides and reuses across calls), then one i64 per
scalar parameter (symbolic sizes and scalar ``tc.var`` inputs), in the order of
``LoweredFunc.inputs``, ``.outputs`` and ``.params``; when threading is on, a last i64 gives
the number of threads ``"parallel"`` loops may use.  It returns 0, or 1 when a temporary buffer
could not be allocated.

Statements (the conventions of :mod:`tecomp.loopir`):

* ``For(v, lo, hi, body, step)`` becomes a loop ``v = lo; while v < hi: body; v += step`` with
  ``lo`` and ``hi`` evaluated once before it.  A ``"parallel"`` loop is outlined and run on
  several threads when threading is on (:mod:`.parallel`), once per iteration of the serial
  loops around it (a scan's step); loops inside it, and every other loop whatever its
  ``kind``, run serially.  With a sink for the outlined bodies, a loop at the top level that
  is not parallel and holds no parallel loop is outlined as well, into a body called once
  (:data:`OUTLINE_SERIAL`); in a kernel with fewer parallel loops than compiling threads,
  large serial loops side by side in a parallel loop's body are bodies of their own, called
  where they stood (:data:`.split.SPLIT_BODIES`).
* ``Store(reduce=c)`` loads the element, combines (``+``, ``*``, max, min) and stores.  A
  loop that only folds a float ``max``/``min`` into a local accumulator combines with
  ``maxnum``/``minnum`` (plain vector instructions) and keeps NaN propagation with a flag
  fixed up after the loop (:meth:`StmtEmitter._minmax_loop`).
* ``Allocate``: a temporary of constant size up to :data:`STACK_LIMIT` bytes is an ``alloca``
  in the entry block (mem2reg promotes scalars to registers); a larger or symbolic one is a
  pooled argument when :func:`pooled_buffers` lists it (outside every loop), else it is
  allocated before the body (``aligned_alloc``, on a 64-byte boundary: :data:`ALIGNED_HEAP`)
  and ``free``-d after it.
* ``For(kind="lanes")`` (iterations independent, a constant count) runs each statement for
  all iterations at once as vector operations where :mod:`.lanes` can, else serially.
* ``IfThenElse`` branches, ``Seq`` runs in order, ``LetStmt`` binds an SSA value.

Expressions are emitted by :class:`.emit_expr.ExprEmitter`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from ... import expr as E
from ...errors import CompileError
from ...functor import free_vars
from ...lanes import Uses, contiguous, reads_buffer
from ...loopir import (
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
from ...stmt_functor import walk_expr, walk_stmt
from . import types as T
from .emit_expr import ExprEmitter
from .layout import STACK_LIMIT, heap_allocated, pooled_buffers, symbol_name  # noqa: F401
from .split import split_loops

if TYPE_CHECKING:
    from .stream import Streaming


def emit_module(func: LoweredFunc, *, threads: bool = False, sink: Any = None,
                stream: Streaming | None = None, stats: dict | None = None,
                split: bool = False) -> ir.Module:
    """An LLVM module with one function implementing ``func`` (see the module docstring).

    With ``threads``, outermost ``"parallel"`` loops are outlined and run on several threads
    (:mod:`.parallel`); the function then takes the thread count as a last i64 argument.
    The temporaries :func:`pooled_buffers` names are arguments (the caller's memory).
    With a ``sink``, the outlined bodies go to modules of their own: ``sink.body(key,
    emit)`` returns the symbol of the body whose :func:`.parallel.body_key` is ``key``,
    calling ``emit(module, symbol)`` to define it in a new module when it has not got it,
    and this module declares it; the loops at the top level that are not parallel are
    outlined too (:data:`OUTLINE_SERIAL`).  With ``stream`` (:func:`.stream.streaming` of the
    host), stores into outputs larger than the last-level cache are non-temporal
    (:mod:`.stream`).  ``stats``, when given, receives ``"loops"``: how many loops the
    function itself holds (0: only calls and straight-line code).  With ``split`` (and a
    sink), the large loops of a parallel loop's body go to bodies of their own
    (:data:`.split.SPLIT_BODIES`).
    """
    module = ir.Module(name=symbol_name(func.name))
    em = FunctionEmitter(module, func, symbol_name(func.name), threads=threads, sink=sink,
                         stream=stream)
    em.split = split
    em.run()
    if stats is not None:
        stats["loops"] = em.inline_loops
    return module


def signature(func: LoweredFunc, threads: bool = False) -> ir.FunctionType:
    nbuf = len(func.inputs) + len(func.outputs) + len(pooled_buffers(func))
    extra = 1 if threads else 0
    return ir.FunctionType(T.I32, [T.PTR] * nbuf + [T.I64] * (len(func.params) + extra))


class StmtEmitter(ExprEmitter):
    """Emit statements into the function ``fn`` (which returns an i32 status).

    The entry block holds only stack allocations and a branch to the code, so that allocas
    stay outside every loop.  Subclasses bind the function's arguments to variables/buffers.
    """

    def __init__(self, fn: ir.Function) -> None:
        self.fn = fn
        self.fn.attributes.add("nounwind")
        self.entry = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        ir.IRBuilder(self.entry).branch(start)
        super().__init__(ir.IRBuilder(start))
        self._oom: ir.Block | None = None
        self.loop_depth = 0
        self.threads: ir.Value | None = None  # set where parallel loops may be outlined
        self.outlined = 0
        # (body, chunk) by parallel.body_key; a serial body (emit_outlined_loop) has no chunk
        self.bodies: dict[str, tuple[ir.Function, ir.Function | None]] = {}
        self.sink: Any = None  # where outlined bodies go (emit_module)
        self.split_sink: Any = None  # where a body's large loops go (:data:`.split.SPLIT_BODIES`)
        self.split = False  # whether the parallel bodies emitted here get a split sink
        self._minmax_stores: dict[int, tuple[str, E.Expr, ir.Value]] = {}  # by id(Store)
        self.pool: dict[Buffer, ir.Value] = {}  # temporaries passed in by the caller
        self.stream: Streaming | None = None  # which output stores are non-temporal
        self.streamed = False  # whether a non-temporal store was emitted (finish fences)
        self.inline_loops = 0  # loops emitted into this function (not outlined)

    def visit(self, e: Any) -> Any:
        if isinstance(e, Stmt):
            self.forget()
        return super().visit(e)

    def finish(self) -> ir.Function:
        if self.streamed:
            from .stream import fence

            fence(self.b)
        self.b.ret(ir.Constant(T.I32, 0))
        return self.fn

    # ------------------------------------------------------------------------- statements
    def visit_Seq(self, s: Seq) -> None:
        split = set() if self.split_sink is None else \
            {id(x) for x in split_loops(s, self.buffers)}
        for x in s.stmts:
            if id(x) in split:
                from .parallel import emit_outlined_loop

                emit_outlined_loop(self, x, self.split_sink)
            else:
                self.visit(x)

    def visit_LetStmt(self, s: LetStmt) -> None:
        v = self.emit(s.value, s.var.dtype)
        with _Bound(self.env, s.var, v):
            self.visit(s.body)

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        c = self.emit(s.cond, "bool")
        if s.else_ is None:
            with self.b.if_then(c):
                self.visit(s.then)
        else:
            with self.b.if_else(c) as (then, other):
                with then:
                    self.visit(s.then)
                with other:
                    self.visit(s.else_)

    def visit_For(self, s: For) -> None:
        if s.kind == "parallel" and self.threads is not None:
            from .parallel import emit_parallel_for

            emit_parallel_for(self, s)
            return
        if OUTLINE_SERIAL and self.sink is not None and self.loop_depth == 0 and \
                not any(isinstance(x, For) and x.kind == "parallel" for x in walk_stmt(s)):
            from .parallel import emit_outlined_loop

            emit_outlined_loop(self, s)
            return
        self.inline_loops += 1
        if s.kind == "lanes":
            from .lanes import emit_lanes

            if emit_lanes(self, s):
                return
        red = minmax_reduction(s)
        if red is not None:
            self._minmax_loop(s, red)
            return
        self.loop(s, s.lo, s.hi)

    def _minmax_loop(self, s: For, red: tuple[str, E.Expr]) -> None:
        """A float max/min reduction loop that LLVM vectorises with NaN propagation kept: the
        loop combines with ``maxnum``/``minnum`` (flags ``nnan nsz``: plain vector max/min
        instructions) and or-s ``x is NaN`` into a flag; after the loop a set flag (or a NaN
        accumulator before it) stores NaN, as NumPy's ``maximum`` gives."""
        store = s.body
        assert isinstance(store, Store)
        ptr = self.address(store.buffer, store.indices)
        old = T.load_value(self.b, ptr, store.buffer.dtype)
        flag = self._entry_alloca(T.I1, 1, f"{store.buffer.name}.nan")
        self.b.store(self.b.fcmp_unordered("uno", old, old), flag)
        self._minmax_stores[id(store)] = (red[0], red[1], flag)
        try:
            self.loop(s, s.lo, s.hi)
        finally:
            del self._minmax_stores[id(store)]
        with self.b.if_then(self.b.load(flag, typ=T.I1)):
            T.store_value(self.b, ir.Constant(T.reg_type(store.buffer.dtype), float("nan")), ptr,
                          store.buffer.dtype)

    def loop(self, s: For, lo_e: Any, hi_e: Any, stream: bool = True) -> None:
        """Emit ``for v in range(lo, hi, step): body`` (``lo``/``hi``: Exprs or i64 values);
        with its stores non-temporal where :attr:`stream` takes them (unless not ``stream``)."""
        if not isinstance(s.step, int) or s.step < 1:
            raise CompileError(f"emit: loop over {s.var.name!r} has step {s.step!r}; need >= 1")
        if not T.is_int(s.var.dtype):
            raise CompileError(f"emit: loop variable {s.var.name!r} has dtype {s.var.dtype}")
        vt = T.reg_type(s.var.dtype)
        lo = self._bound(lo_e, s.var.dtype)
        hi = self._bound(hi_e, s.var.dtype)
        if s.slot is not None:  # this run of the loop starts at ``lo`` (loopir: ``slot``)
            with _Bound(self.env, s.slot, T.convert(self.b, lo, s.var.dtype, s.slot.dtype)):
                self._loop(s, lo, hi, stream, vt)
            return
        self._loop(s, lo, hi, stream, vt)

    def _loop(self, s: For, lo: ir.Value, hi: ir.Value, stream: bool, vt: ir.Type) -> None:
        if stream and self.stream is not None and s.var.dtype == "int64":
            from .stream import emit_streamed, streams

            st = streams(self.stream, s)
            if st is not None:
                emit_streamed(self, s, st, lo, hi)
                return
        pre = self.b.block
        head = self.fn.append_basic_block(f"{s.var.name}.head")
        body = self.fn.append_basic_block(f"{s.var.name}.body")
        done = self.fn.append_basic_block(f"{s.var.name}.end")
        self.b.branch(head)
        self.b.position_at_end(head)
        iv = self.b.phi(vt, name=symbol_name(s.var.name))
        iv.add_incoming(lo, pre)
        self.b.cbranch(self.b.icmp_signed("<", iv, hi), body, done)
        self.b.position_at_end(body)
        self.loop_depth += 1
        with _Bound(self.env, s.var, iv):
            self.visit(s.body)
        self.loop_depth -= 1
        nxt = self.b.add(iv, ir.Constant(vt, s.step), flags=("nsw",))
        iv.add_incoming(nxt, self.b.block)
        latch = self.b.branch(head)
        if s.unroll > 1:  # the schedule's steps a trip (its ``unroll`` hint): LLVM's copies,
            # as many as the schedule would have written (a constant loop of that many trips
            # unrolled whole; left to LLVM's own choice, a window's three digit steps measured
            # a stride-2 3x3 convolution's gradient 6% slower)
            latch.set_metadata("llvm.loop", T.loop_id(self.b.module,
                                                      ("llvm.loop.unroll.count", s.unroll)))
        elif (KEEP_TILE_LOOPS and _tile_steps(s)) or (KEEP_OUTER_LOOPS and _outer_of_long(s)) \
                or (KEEP_INNER_ROWS and self.loop_depth > 0 and _inner_row(s)):
            latch.set_metadata("llvm.loop", T.loop_id(self.b.module, "llvm.loop.unroll.disable"))
        self.b.position_at_end(done)

    def _bound(self, e: Any, dtype: str) -> ir.Value:
        if isinstance(e, ir.Value):
            return T.convert(self.b, e, "int64", dtype)
        return self.emit(e, dtype)

    def visit_Store(self, s: Store) -> None:
        buf = s.buffer
        if buf.scope == "input":
            raise CompileError(f"emit: store into the input buffer {buf.name!r}")
        ptr = self.address(buf, s.indices)
        fast = self._minmax_stores.get(id(s))
        if fast is not None:  # inside _minmax_loop
            which, x, flag = fast
            v = self.emit(x, buf.dtype)
            old = T.load_value(self.b, ptr, buf.dtype)
            new = T.intrinsic(self.b, "minnum" if which == "min" else "maxnum", [old, v],
                              ("nnan", "nsz"))
            T.store_value(self.b, new, ptr, buf.dtype)
            nan = self.b.fcmp_unordered("uno", v, v)
            self.b.store(self.b.or_(self.b.load(flag, typ=T.I1), nan), flag)
            return
        v = self.emit(s.value, buf.dtype)
        if s.reduce is not None:
            old = T.load_value(self.b, ptr, buf.dtype)
            v = self.combine(s.reduce, buf.dtype, old, v)
        T.store_value(self.b, v, ptr, buf.dtype)

    def combine(self, combiner: str, dtype: str, old: ir.Value, v: ir.Value) -> ir.Value:
        """``old (combiner) v`` in registers of ``dtype``."""
        fl = T.is_float(dtype)
        if combiner == "sum":
            if dtype == "bool":
                return self.b.or_(old, v)
            return self.b.fadd(old, v, flags=T.FAST) if fl else self.b.add(old, v)
        if combiner == "prod":
            if dtype == "bool":
                return self.b.and_(old, v)
            return self.b.fmul(old, v, flags=T.FAST) if fl else self.b.mul(old, v)
        if combiner in ("max", "min"):
            return self._minmax(combiner, dtype, old, v)
        raise CompileError(f"emit: unknown reduction combiner {combiner!r}")

    def visit_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        mt = T.mem_type(buf.dtype)
        heap = heap_allocated(buf)
        pooled = self.pool.get(buf) if self.loop_depth == 0 else None
        if pooled is not None:  # the caller's memory (see pooled_buffers)
            ptr = pooled
            heap = False
        elif not heap:
            count = 1
            for d in buf.shape:
                count *= max(int(d.value), 0)
            ptr = self._entry_alloca(mt, max(count, 1), buf.name)
        else:
            ptr = self._malloc(buf)
        with _Bound(self.buffers, buf, ptr):
            self.visit(s.body)
        if heap:
            free = T.declare(self.b.module, "free", ir.VoidType(), [T.PTR])
            self.b.call(free, [ptr])

    def _entry_alloca(self, t: ir.Type, count: int, name: str) -> ir.Value:
        """``count`` elements of ``t`` on the stack, allocated once in the entry block."""
        eb = ir.IRBuilder(self.entry)
        eb.position_before(self.entry.terminator)
        p = eb.alloca(t, size=ir.Constant(T.I64, count), name=symbol_name(name))
        p.align = 64 if count > 1 else None
        p.type = T.PTR  # use it as an untyped pointer, like the arguments
        return p

    def _malloc(self, buf: Buffer) -> ir.Value:
        b = self.b
        smax = T.declare(b.module, "llvm.smax.i64", T.I64, [T.I64, T.I64])
        zero = ir.Constant(T.I64, 0)
        n: ir.Value = ir.Constant(T.I64, T.elem_size(buf.dtype))
        overflow: ir.Value = ir.Constant(T.I1, 0)
        for d in buf.shape:  # bytes = elem_size * prod(max(extent, 0)), overflow-checked
            prod = b.smul_with_overflow(n, b.call(smax, [self.index(d), zero]))
            n = b.extract_value(prod, 0)
            overflow = b.or_(overflow, b.extract_value(prod, 1))
        n = b.call(smax, [n, ir.Constant(T.I64, 1)])
        if ALIGNED_HEAP:  # a whole number of 64-byte blocks, as aligned_alloc wants
            padded = b.sadd_with_overflow(n, ir.Constant(T.I64, HEAP_ALIGN - 1))
            overflow = b.or_(overflow, b.extract_value(padded, 1))
            n = b.and_(b.extract_value(padded, 0), ir.Constant(T.I64, -HEAP_ALIGN))
        ok_size = self.fn.append_basic_block(f"{symbol_name(buf.name)}.size")
        b.cbranch(overflow, self._oom_block(), ok_size)
        b.position_at_end(ok_size)
        if ALIGNED_HEAP:
            alloc = T.declare(b.module, "aligned_alloc", T.PTR, [T.I64, T.I64])
            p = b.call(alloc, [ir.Constant(T.I64, HEAP_ALIGN), n], name=symbol_name(buf.name))
        else:
            malloc = T.declare(b.module, "malloc", T.PTR, [T.I64])
            p = b.call(malloc, [n], name=symbol_name(buf.name))
        ok = self.fn.append_basic_block(f"{symbol_name(buf.name)}.ok")
        b.cbranch(b.icmp_unsigned("==", p, ir.Constant(T.PTR, None)), self._oom_block(), ok)
        b.position_at_end(ok)
        return p

    def _oom_block(self) -> ir.Block:
        if self._oom is None:
            self._oom = self.fn.append_basic_block("out_of_memory")
            ir.IRBuilder(self._oom).ret(ir.Constant(T.I32, 1))
        return self._oom


def minmax_reduction(s: For) -> tuple[str, E.Expr] | None:
    """``("max" | "min", x)`` when ``s`` is ``for v: acc = max(acc, x)`` (or ``min``, or the
    ``Store(reduce=...)`` form) into a float32/float64 ``"local"`` accumulator whose indices do
    not involve ``v``, with ``x`` not reading the accumulator; else None."""
    st = s.body
    if not isinstance(st, Store) or st.buffer.scope != "local" or \
            st.buffer.dtype not in ("float32", "float64"):
        return None
    if any(s.var in free_vars(i) for i in st.indices):
        return None
    acc = BufferLoad(st.buffer, st.indices, st.buffer.dtype)
    if st.reduce in ("max", "min"):
        which, x = st.reduce, st.value
    elif st.reduce is None and isinstance(st.value, (E.Max, E.Min)):
        which = "max" if isinstance(st.value, E.Max) else "min"
        if st.value.a == acc:
            x = st.value.b
        elif st.value.b == acc:
            x = st.value.a
        else:
            return None
    else:
        return None
    if x.dtype != st.buffer.dtype or reads_buffer(x, st.buffer):
        return None
    return which, x


class FunctionEmitter(StmtEmitter):
    """Emit one lowered function into ``module`` under the symbol ``name``."""

    def __init__(self, module: ir.Module, func: LoweredFunc, name: str, *,
                 threads: bool = False, sink: Any = None,
                 stream: Streaming | None = None) -> None:
        self.func = func
        super().__init__(ir.Function(module, signature(func, threads), name))
        self.sink = sink
        self.stream = stream
        self._bind_arguments()
        if threads:
            self.threads = self.fn.args[-1]
            self.threads.name = "nthreads"

    def _bind_arguments(self) -> None:
        func = self.func
        bufs = list(func.inputs) + list(func.outputs)
        for buf, arg in zip(bufs, self.fn.args):
            arg.name = symbol_name(buf.name)
            arg.add_attribute("noalias")
            if buf in self.buffers:
                raise CompileError(f"emit: buffer {buf.name!r} appears twice in the signature")
            self.buffers[buf] = arg
        pooled = pooled_buffers(func)
        for buf, arg in zip(pooled, self.fn.args[len(bufs):]):
            arg.name = symbol_name(buf.name)
            arg.add_attribute("noalias")
            self.pool[buf] = arg
        for p, arg in zip(func.params, self.fn.args[len(bufs) + len(pooled):]):
            arg.name = symbol_name(p.name)
            if not T.is_int(p.dtype):
                raise CompileError(
                    f"emit: parameter {p.name!r} has dtype {p.dtype}; parameters are integers")
            self.env[p] = T.convert(self.b, arg, "int64", p.dtype)

    def run(self) -> ir.Function:
        self.visit(self.func.body)
        return self.finish()


#: temporaries on the heap start at a multiple of :data:`HEAP_ALIGN` bytes (``aligned_alloc``):
#: ``malloc`` gives 16-byte alignment (a large block: a page start plus 16), so three in four
#: 64-byte vector loads of a packed panel spanned two cache lines: ``python -m
#: benchmarks.ab_cpu_steps --only aligned_heap`` (one Intel Xeon core, Ice Lake; time with
#: malloc / aligned): matmul 1024^3 and 2048^3 1.18-1.31x, dense 512x768<->3072 1.14-1.26x,
#: the MLP's forward 1.10x, convolutions up to 1.19x (an A/B switch)
ALIGNED_HEAP = True
HEAP_ALIGN = 64

#: with a sink for outlined bodies, a loop at the top level that is not parallel (and holds no
#: parallel loop) is outlined as well, into a body called once (:func:`.parallel.
#: emit_outlined_loop`), so that the kernel's own module is left with calls and straight-line
#: code, which compiles without optimisation (``compile_function``; an A/B switch)
OUTLINE_SERIAL = True

#: a register tile's reduction loop is left rolled by LLVM (:func:`_tile_steps`; an A/B switch)
KEEP_TILE_LOOPS = True


def _tile_steps(s: For) -> bool:
    """Whether ``s`` steps a register tile: its body is lane loops only, each a statement
    per vector register of the tile; the schedule chose the steps a trip
    (``microkernel.unrolled_steps``: the loop's ``unroll`` hint, which :meth:`StmtEmitter.loop`
    hands to LLVM as an unroll count, or the copies written out).  LLVM's unroller copied
    such bodies again, the tail steps' too: without those copies the symbolic transformer
    block of ``benchmarks/compile_time.py`` compiles in 2.53 s instead of 2.74 s (CPU time 3.75 s
    instead of 4.26 s, one AMD EPYC), kernels as fast (``benchmarks/ab_llvm_pipeline.py
    --variant rolled``).  A loop of at most :data:`FULL_UNROLL_TRIPS` constant trips is
    left to LLVM, which unrolls it whole (a window's digit loop of three: a 3x3 gradient 5%
    slower kept rolled)."""
    parts = s.body.stmts if isinstance(s.body, Seq) else (s.body,)
    if isinstance(s.lo, E.Const) and isinstance(s.hi, E.Const) and (
            int(s.hi.value) - int(s.lo.value)) // s.step <= FULL_UNROLL_TRIPS:
        return False  # unrolled whole, the loop goes away
    return s.kind == "serial" and all(isinstance(x, For) and x.kind == "lanes" for x in parts)


#: trips up to which a tile's loop of constant bounds is left to LLVM's unroller
FULL_UNROLL_TRIPS = 16


def _long(s: For) -> bool:
    """Whether ``s`` is a serial loop LLVM would not unroll whole: bounds not constant, or
    more than :data:`FULL_UNROLL_TRIPS` trips."""
    if s.kind != "serial":
        return False
    if isinstance(s.lo, E.Const) and isinstance(s.hi, E.Const):
        return (int(s.hi.value) - int(s.lo.value)) // s.step > FULL_UNROLL_TRIPS
    return True


def _outer_of_long(s: For) -> bool:
    """Whether ``s`` has constant bounds and holds a :func:`_long` loop: LLVM's full unroll
    of ``s`` would copy that loop once per trip (a panel's eight strips, each a copy loop
    over the slice's rows) for no gain in the loop that runs.  Left rolled, cold builds in
    pairs of fresh processes (``python benchmarks/compile_time.py --ab
    tecomp.codegen.llvm.emit.KEEP_OUTER_LOOPS=False --pairs 5``, one AMD EPYC, medians):
    attention 1.02 -> 0.93 s, MLP 0.86 -> 0.81 s, DOF Laplacian 0.74 -> 0.67 s, the others
    within their noise; kernels as fast (``python -m benchmarks.ab_llvm_pipeline --variant
    outer``: forward 0.998x, gradient 1.016x in geometric mean, the loops unrolled over
    rolled)."""
    if not (isinstance(s.lo, E.Const) and isinstance(s.hi, E.Const)):
        return False
    return any(isinstance(x, For) and _long(x) for x in walk_stmt(s.body))


#: a constant-bound loop around a long loop is left rolled by LLVM (:func:`_outer_of_long`;
#: an A/B switch)
KEEP_OUTER_LOOPS = True


def _inner_row(s: For) -> bool:
    """Whether ``s`` is an innermost serial loop of :data:`INNER_ROW_TRIPS` constant trips
    that reads a buffer at consecutive elements of consecutive trips (a row): the loop LLVM's
    vectoriser should take.  Inside another loop, LLVM's full unroll would copy such a loop
    away first (a row of 64 is small enough), and the vectoriser then took the loop around
    it, through gathers of one element a row: the symbolic transformer block's layer norm
    mean (``sum(x[i, k], k)`` over rows of 64) became 386 gather instructions and 43 KB of
    optimised IR, 41 ms of LLVM, where the row's own vector loop and one horizontal sum are
    6 KB and 12 ms.  Kept rolled, the loop is vectorised along its row.  Longer rows are
    left alone: LLVM does not unroll them whole, and a loop marked so is not interleaved
    either (one vector of partial sums: the 768-wide layer norm's gradient 12% slower)."""
    if s.kind != "serial" or s.step != 1 or not (
            isinstance(s.lo, E.Const) and isinstance(s.hi, E.Const)):
        return False
    if not INNER_ROW_TRIPS[0] <= int(s.hi.value) - int(s.lo.value) <= INNER_ROW_TRIPS[1]:
        return False
    if any(isinstance(x, For) for x in walk_stmt(s.body)):
        return False
    uses = Uses(s.var)
    return any(isinstance(e, BufferLoad) and contiguous(e.buffer, e.indices, s.var, uses)
               for st in walk_stmt(s.body) if isinstance(st, Store)
               for e in walk_expr(st.value))


#: the trips of an innermost row loop inside another loop left rolled for LLVM's vectoriser
#: (:func:`_inner_row`): from a vector of float32 at 256 bits to about the most that LLVM's
#: O3 full unroll (300 instructions unrolled) takes of a row's load and add
INNER_ROW_TRIPS = (8, 64)

#: keep such row loops rolled (:func:`_inner_row`; an A/B switch)
KEEP_INNER_ROWS = True


class _Bound:
    """Bind ``key`` to ``value`` in ``table`` for the extent of a ``with`` block."""

    _MISSING = object()

    def __init__(self, table: dict, key: Any, value: Any) -> None:
        self.table, self.key, self.value = table, key, value

    def __enter__(self) -> None:
        self.old = self.table.get(self.key, self._MISSING)
        self.table[self.key] = self.value

    def __exit__(self, *exc: Any) -> None:
        if self.old is self._MISSING:
            self.table.pop(self.key, None)
        else:
            self.table[self.key] = self.old
