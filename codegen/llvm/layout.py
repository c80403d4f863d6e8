"""What the caller of a kernel function needs to know without emitting it: its symbol
name and the temporaries it passes in (:func:`pooled_buffers`).  Loading a kernel from the
persistent cache uses these and nothing of the emitter (:mod:`.emit`), so that path does not
import llvmlite's IR builder or the emitter's modules."""

from __future__ import annotations

import platform
import re

from ... import expr as E
from ...functor import free_vars
from ...loopir import Allocate, Buffer, LoweredFunc, Seq, Stmt

#: bytes per buffer element (NumPy's itemsize for the storage dtype; bfloat16 is stored as
#: float32)
ELEM_SIZE = {"float16": 2, "bfloat16": 4, "float32": 4, "float64": 8, "int32": 4,
             "int64": 8, "bool": 1}

#: the parallel-loop runtime's entry point (:mod:`.runtime`), which kernels with threaded loops
#: call
RUNTIME_SYMBOL = "tecomp_parallel_for"

#: the runtime's workers bound to a home CPU (:class:`.runtime._Placement`; Linux only);
#: False: they run where the OS wakes them (an A/B switch: set before a process's first
#: parallel call)
BIND_WORKERS = True


def binds_workers() -> bool:
    """Whether the runtime binds its workers to home CPUs (:class:`.runtime._Placement`)."""
    return BIND_WORKERS and platform.system() == "Linux"


def runtime_variant() -> str:
    """What the runtime's module (:func:`.runtime.build_module`) depends on besides its
    source (part of its persistent-cache key)."""
    return "bound" if binds_workers() else "free"


STACK_LIMIT = 16384  # bytes; larger temporaries go to the heap


def symbol_name(name: str) -> str:
    """A valid, readable LLVM symbol for a kernel name."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name or "kernel")
    return s if s and not s[0].isdigit() else "k_" + s


def constant_bytes(buf: Buffer) -> int | None:
    """The bytes of ``buf`` when its shape is constant (negative extents count as 0), else
    None."""
    count = ELEM_SIZE[buf.dtype]
    for d in buf.shape:
        if not isinstance(d, E.Const):
            return None
        count *= max(int(d.value), 0)
    return count


def heap_allocated(buf: Buffer) -> bool:
    """Whether a temporary goes to the heap (symbolic, or over :data:`STACK_LIMIT` bytes)."""
    size = constant_bytes(buf)
    return size is None or size > STACK_LIMIT


def pooled_buffers(func: LoweredFunc) -> tuple[Buffer, ...]:
    """The heap temporaries the caller provides (in this order, after the output pointers):
    those allocated outside every loop, branch and binding, with extents in the function's
    parameters only — so the caller can size them from the arguments and reuse the memory
    across calls (:class:`~tecomp.codegen.kernel.Kernel` keeps one set per thread)."""
    params = set(func.params)
    out: list[Buffer] = []

    def walk(st: Stmt) -> None:
        if isinstance(st, Seq):
            for x in st.stmts:
                walk(x)
        elif isinstance(st, Allocate):
            b = st.buffer
            if heap_allocated(b) and b not in out and \
                    all(free_vars(d) <= params for d in b.shape):
                out.append(b)
            walk(st.body)

    walk(func.body)
    return tuple(out)
