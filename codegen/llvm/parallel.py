"""Multi-threaded ``"parallel"`` loops: outlining and a fork-join over POSIX threads.

Lowering marks the outermost data loop of a stage ``kind="parallel"`` when its iterations
write disjoint elements (:mod:`tecomp.passes.lower`).  Such a loop at the top level of the
function (not inside another loop) is emitted as

* a *body* function ``i32 @f.parK(ptr noalias buf..., values..., i64 lo, i64 hi, i64 start,
  i64 stop)`` that runs iterations ``start <= t < stop`` of the loop (``v = lo + t * step``,
  ``v < hi``).  The buffers and variables of the enclosing scope that the loop uses are its
  arguments, in the order the loop first uses them (the buffers as ``noalias`` pointers:
  distinct buffers never overlap), so the body is optimised like the rest of the function;
* a *chunk* function ``i32 @f.parK.chunk(ptr ctx, i64 start, i64 stop)`` that unpacks the
  captured values from a context record on the caller's stack and calls the body;
* at the loop's place, with ``nthr = min(nthreads, trips, 64)``: a direct call of the body when
  ``nthr <= 1``, else ``tecomp_parallel_for(chunk, ctx, trips, nthr)``, the fork-join of
  :mod:`.runtime` (dynamically claimed chunks on a pool of POSIX threads; the caller never
  waits for a thread the OS has not scheduled).  A non-zero status (a temporary that could not
  be allocated) makes the function return it.

``nthreads`` is the function's last argument, chosen per call by
:class:`~tecomp.codegen.kernel.Kernel`.

With a sink (:mod:`.parts`), a loop at the top level that is not parallel (a loss's sum, the
sum of a bias gradient's partial rows) becomes a body as well (:func:`emit_outlined_loop`):
``i32 @body(ptr noalias buf..., values...)`` runs the whole loop and the function calls it
once, so that the function itself is left with calls and straight-line code, which the
backend compiles without optimisation (``tecomp.codegen.llvm.GLUE_UNOPTIMISED``).  The same
call of a body of its own serves the large loops of a parallel loop's body in a kernel with
fewer parallel loops than compiling threads (:mod:`.split`), so that LLVM compiles
the pieces of a lone large body side by side.

Loops that are the same program up to the names of their variables and buffers share one
body and one chunk function (:func:`body_key`): a gradient repeats its contractions, such as
the weight gradients of a transformer's projections (seven identical register-tiled bodies
of 4,000 lines of IR each in one block's gradient), and LLVM's time grows with the IR it is
given.  A shared body is marked ``noinline`` so that its call sites do not copy it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from ...expr import Expr, Var
from ...loopir import Buffer, For
from ..cache import structural_lines
from . import runtime
from . import types as T

if TYPE_CHECKING:
    from .emit import StmtEmitter
    from .stream import Streaming

MAX_THREADS = 64


def emit_parallel_for(em: StmtEmitter, s: For) -> None:
    """Emit the parallel loop ``s`` at ``em``'s position as an outlined fork-join."""
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

    key, bufs, vals = _captures(em, s)
    # ---- context record: captured values, then lo and hi
    captured = [x for _, x in bufs] + [x for _, x in vals] + [lo, hi]
    ctx_type = ir.LiteralStructType([c.type if not isinstance(c.type, ir.PointerType)
                                     else T.PTR for c in captured])
    shared = em.bodies.get(key)
    if shared is None:
        body_type = ir.FunctionType(T.I32, _arg_types(bufs, vals) + [T.I64] * 4)
        if em.sink is not None:  # a module of its own, compiled apart (and cached) by the sink
            symbol = em.sink.body(
                key, lambda mod, name: _body(mod, name, body_type, s, bufs, vals, step,
                                             em.stream, em.sink if em.split else None))
            body_fn = ir.Function(module, body_type, symbol)
        else:
            body_fn = _body(module, base, body_type, s, bufs, vals, step, em.stream)
            body_fn.linkage = "internal"
        chunk = _chunk(module, base, body_fn, ctx_type, len(captured))
        em.bodies[key] = (body_fn, chunk)
    else:
        body_fn, chunk = shared
        if not body_fn.is_declaration and "noinline" not in body_fn.attributes:
            body_fn.attributes.add("noinline")
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
            if em.streamed:  # the other threads may read what this function streamed
                from .stream import fence

                fence(b)
            run = T.declare(module, runtime.SYMBOL, T.I32, [T.PTR, T.PTR, T.I64, T.I64])
            b.store(b.call(run, [chunk, ctx, trips, nthr]), status_slot)
    ok = b.icmp_signed("==", b.load(status_slot, typ=T.I32), ir.Constant(T.I32, 0))
    cont = em.fn.append_basic_block(f"{base}.done")
    b.cbranch(ok, cont, em._oom_block())
    b.position_at_end(cont)


def emit_outlined_loop(em: StmtEmitter, s: For, sink: Any = None) -> None:
    """Emit the serial loop ``s`` as a call of a body function of its own, ``i32 (ptr noalias
    buf..., values...)``, which runs the whole loop, compiled apart by ``sink`` (default
    ``em.sink``; at the kernel's speed level, cached and shared like the parallel bodies): a
    top-level loop, which leaves the kernel's own module without loops
    (``emit.OUTLINE_SERIAL``), or a large loop of a parallel loop's body (:mod:`.split`)."""
    from .emit import symbol_name

    b = em.b
    key, bufs, vals = _captures(em, s)
    key = "serial|" + key
    shared = em.bodies.get(key)
    if shared is None:
        body_type = ir.FunctionType(T.I32, _arg_types(bufs, vals))
        symbol = (sink if sink is not None else em.sink).body(
            key, lambda mod, name: _serial_body(mod, name, body_type, s, bufs, vals, em.stream))
        shared = em.bodies[key] = (ir.Function(b.module, body_type, symbol), None)
    rc = b.call(shared[0], [x for _, x in bufs] + [x for _, x in vals])
    cont = em.fn.append_basic_block(f"{symbol_name(s.var.name)}.done")
    b.cbranch(b.icmp_signed("==", rc, ir.Constant(T.I32, 0)), cont, em._oom_block())
    b.position_at_end(cont)


def _captures(em: StmtEmitter, s: For) -> tuple[str, list, list]:
    """The body key of the loop ``s`` (:func:`body_key`, with the LLVM types of the values it
    captures), and the buffers and values of ``em``'s scope it uses (pairs of the IR object
    and its LLVM value), in the order of the body's arguments."""
    key, used_bufs, used_vars = body_key(s, em.buffers, em.env)
    vals = [(v, em.env[v]) for v in used_vars]
    return (key + "|" + ",".join(str(x.type) for _, x in vals),
            [(buf, em.buffers[buf]) for buf in used_bufs], vals)


def _arg_types(bufs: list, vals: list) -> list[ir.Type]:
    """A body's first argument types: a pointer per buffer, then the values' types."""
    return [T.PTR] * len(bufs) + [x.type for _, x in vals]


def _serial_body(module: ir.Module, name: str, body_type: ir.FunctionType, s: For,
                 bufs: list, vals: list, stream: Streaming | None) -> ir.Function:
    """The body function of :func:`emit_outlined_loop`: the whole loop ``s``."""
    sub = _body_emitter(module, name, body_type, bufs, vals, stream)
    sub.visit(s)
    return sub.finish()


def _body_emitter(module: ir.Module, name: str, body_type: ir.FunctionType, bufs: list,
                  vals: list, stream: Streaming | None) -> StmtEmitter:
    """An emitter of the new function ``name`` (of type ``body_type``) in ``module`` whose
    first arguments are the buffers ``bufs`` (``noalias``), then the values ``vals`` of the
    enclosing scope (pairs of the IR object and its LLVM value), with the enclosing
    function's streaming rule."""
    from .emit import StmtEmitter, symbol_name

    body_fn = ir.Function(module, body_type, name)
    sub = StmtEmitter(body_fn)
    sub.stream = stream
    for (buf, _), arg in zip(bufs, body_fn.args):
        arg.name = symbol_name(buf.name)
        arg.add_attribute("noalias")
        sub.buffers[buf] = arg
    for (var, _), arg in zip(vals, body_fn.args[len(bufs):]):
        arg.name = symbol_name(var.name)
        sub.env[var] = arg
    return sub


def _body(module: ir.Module, name: str, body_type: ir.FunctionType, s: For, bufs: list,
          vals: list, step: ir.Constant, stream: Streaming | None = None,
          sink: Any = None) -> ir.Function:
    """The body function ``name`` (of type ``body_type``) in ``module`` of the parallel loop
    ``s`` over the buffers ``bufs`` and the values ``vals`` of the enclosing scope (pairs of
    the IR object and its LLVM value), with the enclosing function's streaming rule; with a
    ``sink``, its large loops may go to bodies of their own (:mod:`.split`)."""
    sub = _body_emitter(module, name, body_type, bufs, vals, stream)
    sub.split_sink = sink
    body_fn = sub.fn
    a_lo, a_hi, a_start, a_stop = body_fn.args[-4:]
    sb = sub.b
    v_lo = sb.add(a_lo, sb.mul(a_start, step))
    v_hi = T.intrinsic(sb, "smin", [sb.add(a_lo, sb.mul(a_stop, step)), a_hi])
    sub.loop(s, v_lo, v_hi)
    return sub.finish()


def body_key(s: For, buffers: dict, env: dict) -> tuple[str, list[Buffer], list[Var]]:
    """A text of the loop ``s`` with its variables and buffers named by the order of their
    first use, and the buffers of ``buffers`` and the variables of ``env`` (the enclosing
    scope; ``s.var`` excluded) that it uses, in that order.

    Two loops with the same text are the same program once the first one's variables and
    buffers are renamed to the second one's (a bijection: names are numbered as they are
    met, every other field is written as it is), so one body function serves both when it
    is called with the second loop's buffers and values in the listed order.  Which of the
    numbered names are arguments is part of the text.
    """
    names: dict[object, int] = {}
    used_bufs: list[Buffer] = []
    used_vars: list[Var] = []

    def name(x: object) -> int:
        k = names.get(x)
        if k is None:
            k = names[x] = len(names)
        return k

    def written(x: object, ref) -> str | None:
        if type(x) is Var:
            if x in env and x != s.var and x not in used_vars:
                used_vars.append(x)
            return f"Var({name(x)}, {x.dtype!r})"
        if type(x) is Buffer:
            if x in buffers and x not in used_bufs:
                used_bufs.append(x)
            return f"Buffer({name(x)}, {ref(x.shape)}, {x.dtype!r}, {x.scope!r})"
        return None

    lines = structural_lines(s, written, by_value=Expr)
    lines.append("bufs " + " ".join(str(names[b]) for b in used_bufs))
    lines.append("vars " + " ".join(str(names[v]) for v in used_vars))
    return "\n".join(lines), used_bufs, used_vars


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


