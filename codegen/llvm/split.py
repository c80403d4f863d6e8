"""Large bodies split so that LLVM compiles their pieces side by side.

The bodies of a kernel (:mod:`.parts`) compile on a pool of threads, one per core.  A kernel
with fewer parallel loops than that (:func:`parallel_loops`) -- a real DCT is one loop over
blocks of columns, its butterfly stages inside -- leaves threads idle while one body
compiles.  In such a kernel, the serial loops side by side in a parallel loop's body that
are large (:func:`loop_weight` of at least :data:`SPLIT_MIN_WEIGHT` expression nodes), two
or more of them, each become a body of their own, called where they stood
(:func:`.parallel.emit_outlined_loop`; :func:`split_loops` picks them, ``compile_function``
decides per kernel).  A loop that uses a ``"local"`` buffer allocated outside it (a register
tile's accumulators) stays where it is: a call would force those into memory.

Legality: the called body runs the whole loop with the buffers and values it uses as
arguments, as the loop would have run in place; only where LLVM sees the code changes.

Measured (Intel Xeon with AVX-512, two cores): the real DCT of
``benchmarks/compile_time.py`` (256 x 64) was one body of 91 ms of LLVM, five modules of at
most 27 ms so, and its cold build 1.16x faster (``python benchmarks/compile_time.py --ab
tecomp.codegen.llvm.split.SPLIT_BODIES=False --pairs 7``; the suite's other programs, whose
kernels have more bodies than threads, 0.98-1.01x); the kernels run as fast
(``python -m benchmarks.ab_cpu_steps --only split --threads 2``: 0.96-1.04x).
"""

from __future__ import annotations

from typing import Iterable

from ...loopir import Allocate, Buffer, BufferLoad, For, LoweredFunc, Seq, Stmt, Store
from ...stmt_functor import stmt_children, stmt_exprs, walk_expr, walk_stmt

#: split large bodies of kernels with fewer parallel loops than compiling threads (an A/B
#: switch)
SPLIT_BODIES = True
#: the expression nodes (:func:`loop_weight`) from which a loop counts as large
SPLIT_MIN_WEIGHT = 64


def parallel_loops(func: LoweredFunc) -> int:
    """How many parallel loops ``func`` holds outside every other loop (the bodies its
    kernel is compiled in, besides its other top-level loops)."""
    count, stack = 0, [func.body]
    while stack:
        x = stack.pop()
        if isinstance(x, For) and x.kind == "parallel":
            count += 1
            continue
        stack.extend(stmt_children(x))
    return count


def loop_weight(s: Stmt) -> int:
    """The expression nodes of ``s`` (each expression's shared nodes once): a measure of the
    IR it emits."""
    return sum(sum(1 for _ in walk_expr(e)) for x in walk_stmt(s) for e in stmt_exprs(x))


def split_loops(s: Seq, buffers: Iterable[Buffer]) -> list[For]:
    """The loops of ``s`` that go to bodies of their own: its serial loops of at least
    :data:`SPLIT_MIN_WEIGHT` nodes that use no ``"local"`` buffer of ``buffers`` (those
    allocated around ``s``), when there are two or more of them."""
    if not SPLIT_BODIES:
        return []
    local = {b for b in buffers if b.scope == "local"}
    big = [x for x in s.stmts if isinstance(x, For) and x.kind == "serial"
           and loop_weight(x) >= SPLIT_MIN_WEIGHT and not _uses(x, local)]
    return big if len(big) >= 2 else []


def _uses(s: Stmt, bufs: set[Buffer]) -> bool:
    """Whether ``s`` stores to, allocates or reads one of ``bufs``."""
    if not bufs:
        return False
    for x in walk_stmt(s):
        if isinstance(x, (Store, Allocate)) and x.buffer in bufs:
            return True
        for e in stmt_exprs(x):
            if any(isinstance(y, BufferLoad) and y.buffer in bufs for y in walk_expr(e)):
                return True
    return False
