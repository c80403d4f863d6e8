"""Streaming (non-temporal) stores for outputs larger than the last-level cache.

A plain store to a line that is not in the cache first reads the line (read for ownership),
so a kernel that writes an output of many megabytes moves each byte twice, and evicts what
the caches held.  An output larger than the whole last-level cache cannot stay in it for the
caller anyway: such outputs are written with non-temporal stores, which go to memory through
write-combining buffers without reading the line (the rule C libraries use for large
``memset``/``memcpy``: a threshold derived from the shared cache's size).  Measured with a
64 MiB broadcast (the gradient of a 4096x4096 float32 row sum), one Intel Xeon (Ice Lake)
core: 6.9 ms with plain vector stores, 2.8 ms streaming; a read of the same 64 MiB took
5.2-5.7 ms.

What is streamed (:func:`~tecomp.lanes.stream_form`): a loop of step 1 whose body is one
plain store (not a reduction) of float32/float64 into an output buffer of constant shape
larger than :attr:`Streaming.min_bytes`, at consecutive elements of consecutive iterations,
of a value the lane rules of :mod:`tecomp.lanes` vectorise.  The loop is emitted in three
parts: scalar iterations up to the first element aligned to the vector size (x86's
non-temporal vector stores need aligned addresses; a buffer not aligned to its element
size runs all scalar), whole aligned vectors stored with ``!nontemporal``, the remaining
iterations scalar.  Non-temporal stores are weakly ordered: a function that streamed ends
with ``sfence`` before it returns (:meth:`.emit.StmtEmitter.finish`), and before it starts
the threads of a parallel loop after streaming (:func:`.parallel.emit_parallel_for`), so
the stores are visible to whoever learns that the function (or a thread's part of a
parallel loop) is done, and to the threads that run the next stage.  x86-64 only; other
targets keep plain stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from ...host import Host
from ...lanes import Uses, stream_form
from ...loopir import For, Store
from . import types as T
from .emit import _Bound
from .lanes import _vector
from .layout import constant_bytes

if TYPE_CHECKING:
    from .emit import StmtEmitter

#: an A/B switch: False keeps plain stores everywhere
STREAM = True


@dataclass(frozen=True)
class Streaming:
    """Outputs of more than ``min_bytes`` are streamed in vectors of ``vector_bytes``."""

    min_bytes: int
    vector_bytes: int


def streaming(host: Host) -> Streaming | None:
    """The streaming rule for ``host``: outputs larger than its last-level cache (the L3 it
    counts on, :func:`tecomp.host.l3_share`, else the L2), in its widest vectors; None off x86
    or when the caches are unknown."""
    llc = host.l3 or host.l2
    if not STREAM or "+sse2" not in host.features.split(",") or llc <= 0:
        return None
    return Streaming(llc, max(16, host.vector_bits // 8))


def streams(rule: Streaming | None, s: For) -> Store | None:
    """The store of the loop ``s`` when ``rule`` streams it, else None."""
    if rule is None:
        return None
    st = stream_form(s)
    if st is None or st.buffer.scope != "output":
        return None
    size = constant_bytes(st.buffer)
    return st if size is not None and size > rule.min_bytes else None


def emit_streamed(em: StmtEmitter, s: For, st: Store, lo: ir.Value, hi: ir.Value) -> None:
    """Emit ``s``, whose store :func:`streams` gave as ``st``, over ``[lo, hi)`` at ``em``'s
    position: a scalar head up to the first aligned element, aligned non-temporal vector
    stores, a scalar tail."""
    rule = em.stream
    assert rule is not None
    b = em.b
    size = T.elem_size(st.buffer.dtype)
    lanes = rule.vector_bytes // size
    i64 = lambda v: ir.Constant(T.I64, v)  # noqa: E731
    # where the first iteration stores, and how many elements until a vector boundary
    with _Bound(em.env, s.var, lo):
        em.forget()
        start = b.ptrtoint(em.address(st.buffer, st.indices), T.I64)
    off = b.and_(start, i64(rule.vector_bytes - 1))
    gap = b.and_(b.sub(i64(rule.vector_bytes), off), i64(rule.vector_bytes - 1))
    aligned = b.icmp_unsigned("==", b.urem(off, i64(size)), i64(0))
    span = T.intrinsic(b, "smax", [b.sub(hi, lo), i64(0)])
    head = b.select(aligned, T.intrinsic(b, "smin", [b.udiv(gap, i64(size)), span]), span)
    mid = b.add(lo, head)
    end = b.add(mid, b.mul(b.sdiv(b.sub(hi, mid), i64(lanes)), i64(lanes)))
    em.loop(s, lo, mid, stream=False)
    _vector_loop(em, s, st, mid, end, lanes)
    em.loop(s, end, hi, stream=False)
    em.streamed = True


def _vector_loop(em: StmtEmitter, s: For, st: Store, lo: ir.Value, hi: ir.Value,
                 lanes: int) -> None:
    b = em.b
    dt = st.buffer.dtype
    vt = ir.VectorType(T.reg_type(dt), lanes)
    pre = b.block
    head = em.fn.append_basic_block(f"{s.var.name}.stream.head")
    body = em.fn.append_basic_block(f"{s.var.name}.stream.body")
    done = em.fn.append_basic_block(f"{s.var.name}.stream.end")
    b.branch(head)
    b.position_at_end(head)
    iv = b.phi(T.I64, name=f"{s.var.name}.v")
    iv.add_incoming(lo, pre)
    b.cbranch(b.icmp_signed("<", iv, hi), body, done)
    b.position_at_end(body)
    with _Bound(em.env, s.var, iv):
        em.forget()
        value = _vector(em, st.value, Uses(s.var), dt, vt, memo={})
        store = b.store(value, em.address(st.buffer, st.indices), align=lanes * T.elem_size(dt))
    store.set_metadata("nontemporal", b.module.add_metadata([ir.Constant(T.I32, 1)]))
    iv.add_incoming(b.add(iv, ir.Constant(T.I64, lanes), flags=("nsw",)), b.block)
    b.branch(head)
    b.position_at_end(done)
    em.forget()


def fence(b: ir.IRBuilder) -> None:
    """``sfence``: the non-temporal stores before it are visible before any later store."""
    b.call(T.declare(b.module, "llvm.x86.sse.sfence", ir.VoidType(), []), [])
