"""GPU scheduling of a lowered program: which statements become kernels, which loops map onto
the grid, and which stores must be atomic.

The program body is cut into *stages* at its top level (through ``Seq``, ``LetStmt`` and
``Allocate``): each stage becomes one kernel, and kernels run in program order on one stream.
Buffers allocated at the top level become device temporaries (allocated by the host).

Inside a stage, the loop nest reached through ``LetStmt`` and else-less ``IfThenElse`` wrappers
is mapped onto CUDA threads (blocks x threads, a grid-stride loop over the flattened iteration
space) when that is safe:

* a loop lowering marked ``kind="parallel"`` is trusted: its iterations write disjoint
  elements (the loop-IR contract);
* any other outermost loop is mapped when every store in it is *owned* by the loop variable
  (an index dimension is ``a*v + c`` with ``a != 0`` and ``c`` free of variables bound inside
  the loop, so distinct iterations write distinct elements, and every access to a buffer the
  stage writes uses the same owning expression), or when the stores it does not own are
  reductions into buffers the stage never reads (made atomic);
* perfectly nested inner loops whose bounds do not depend on the outer ones are collapsed into
  the same grid while every store stays owned (``C[i, j]`` gives one thread per element).

A ``Store(reduce=...)`` whose destination is not owned by the mapped variables (scatter-add
from gathered gradients, a sum into a scalar) is made atomic.  When all stores into such a
buffer have thread-invariant destinations, each thread accumulates into a register first and
combines it once at its end (one atomic per thread, not per iteration).  Float atomics make
sums order-nondeterministic: results may differ in the last bits from run to run.

Stages that cannot be mapped run on a single thread (correct, but slow for big loops).

Two patterns of mapped stages get block-level schedules (:mod:`.blocks`): short row
reductions get a block per output (warp shuffles and shared memory), contractions
``C[i, j] = sum_k A[i, k] * B[k, j]`` get shared-memory tiles; the private accumulators of a
stage are combined across each block before one atomic per block.

A *record* buffer (the error record of :mod:`tecomp.passes.bounds_check`) is left out of this
analysis: threads may race on it by design (only on which failure gets recorded).

Example: ``for r in [0, n): for s in [0, 32): loss[] += C[r, s] * C[r, s]`` (not marked
parallel) maps ``r`` onto the grid; the store into ``loss`` is not owned by ``r`` and its index
is invariant, so each thread keeps ``tc_acc0 += ...``; the block sums its threads' values and
thread 0 ends with one ``atomicAdd(&loss[0], total)``.
"""

from __future__ import annotations

import re
from typing import Any

from tecomp import expr as E
from tecomp.errors import CompileError
from tecomp.gpuir import GpuProgram, Private, Stage
from tecomp.loopir import (
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
from tecomp.stmt_functor import expr_vars, stmt_exprs, walk_expr, walk_stmt

from .blocks import choose, match_block_reduce, match_tiling

ATOMIC_DTYPES = {"sum": ("float16", "bfloat16", "float32", "float64", "int32", "int64"),
                 "prod": ("float32", "float64", "int32", "int64"),
                 "max": ("float32", "float64", "int32", "int64"),
                 "min": ("float32", "float64", "int32", "int64")}


def schedule(func: LoweredFunc, *, records: frozenset[Buffer] = frozenset()) -> GpuProgram:
    """Cut ``func`` into kernels and map their loops onto the grid (see the module doc).

    ``func`` is the target-independent loop IR (each reduction in its plain order, with a
    local accumulator).  ``records`` are buffers whose racy stores are allowed (error
    records) and ignored when deciding the mapping."""
    temps: list[Buffer] = []
    raw: list[tuple[Stmt, tuple[tuple[E.Var, E.Expr], ...]]] = []

    def top(s: Stmt, lets: tuple[tuple[E.Var, E.Expr], ...]) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                top(x, lets)
        elif isinstance(s, LetStmt):
            top(s.body, lets + ((s.var, s.value),))
        elif isinstance(s, Allocate):
            if s.buffer not in temps:
                temps.append(s.buffer)
            top(s.body, lets)
        else:
            raw.append((s, lets))

    top(func.body, ())
    global_bufs = list(func.inputs) + list(func.outputs) + temps
    base = re.sub(r"\W", "_", func.name) or "kernel"
    stages = []
    for n, (s, lets) in enumerate(raw):
        stages.append(_make_stage(f"{base}_k{n}", s, lets, global_bufs, records))
    _check_lets(stages)
    return GpuProgram(func, tuple(stages), tuple(temps))


# ------------------------------------------------------------------------------ one stage
def _make_stage(name: str, s: Stmt, lets: tuple[tuple[E.Var, E.Expr], ...],
                global_bufs: list[Buffer], records: frozenset[Buffer]) -> Stage:
    used: set[Buffer] = set()
    written: set[Buffer] = set()
    for x in walk_stmt(s):
        if isinstance(x, Store):
            used.add(x.buffer)
            written.add(x.buffer)
        for e in stmt_exprs(x):
            for n in walk_expr(e):
                if isinstance(n, BufferLoad):
                    used.add(n.buffer)
    local = _local_buffers(s)
    ignored = local | records  # left out of the ownership analysis
    buffers = tuple(b for b in global_bufs if b in used)
    for b in used:
        if b not in buffers and b not in local:
            raise CompileError(f"schedule: buffer {b.name!r} is used in stage {name} but "
                               "never allocated or passed in")
    gwritten = frozenset(b for b in written if b not in local)

    loop, wrapper_vars = _outer_loop(s)
    mapped: list[For] = []
    atomic: frozenset[Store] = frozenset()
    private: tuple[Private, ...] = ()
    if loop is not None:
        plan = _map_loops(loop, ignored, wrapper_vars)
        if plan is not None:
            mapped, non_owned = plan
            atomic, private = _atomics(loop, mapped, non_owned, ignored)
    tiling = block = None
    if mapped:
        tiling, block = choose(match_tiling(mapped, bool(atomic or private), gwritten),
                               match_block_reduce(mapped, bool(atomic or private)))
    return Stage(name, s, lets, tuple(mapped), atomic, private, buffers, gwritten, block,
                 tiling)


def _local_buffers(s: Stmt) -> set[Buffer]:
    return {x.buffer for x in walk_stmt(s) if isinstance(x, Allocate)}


def _outer_loop(s: Stmt) -> tuple[For | None, set[E.Var]]:
    """The loop reached through LetStmt / else-less IfThenElse wrappers, and the let-bound
    variables of those wrappers."""
    bound: set[E.Var] = set()
    while True:
        if isinstance(s, For):
            return s, bound
        if isinstance(s, LetStmt):
            bound.add(s.var)
            s = s.body
        elif isinstance(s, IfThenElse) and s.else_ is None:
            s = s.then
        else:
            return None, bound


def _bound_inside(s: Stmt) -> set[E.Var]:
    """Variables bound by loops and lets anywhere in ``s``."""
    return {x.var for x in walk_stmt(s) if isinstance(x, (For, LetStmt))}


def _linear_in(e: E.Expr, v: E.Var, bad: set[E.Var]) -> bool:
    """Whether ``e`` is ``a*v + c`` with a constant ``a != 0`` and ``c`` free of ``bad``."""
    coef = _coef(e, v, bad)
    return coef is not None and coef != 0


def _coef(e: E.Expr, v: E.Var, bad: set[E.Var]) -> int | None:
    """The constant coefficient of ``v`` in ``e`` if ``e`` is affine in ``v`` with the rest free
    of ``bad`` (and of ``v``), else None."""
    if e == v:
        return 1
    if isinstance(e, E.Cast) and e.value.dtype in ("int32", "int64"):
        return _coef(e.value, v, bad)
    if isinstance(e, (E.Add, E.Sub)):
        ca, cb = _coef(e.a, v, bad), _coef(e.b, v, bad)
        if ca is None or cb is None:
            return None
        return ca + cb if isinstance(e, E.Add) else ca - cb
    if isinstance(e, E.Neg):
        c = _coef(e.a, v, bad)
        return None if c is None else -c
    if isinstance(e, E.Mul):
        for k, x in ((e.a, e.b), (e.b, e.a)):
            if isinstance(k, E.Const):
                c = _coef(x, v, bad)
                return None if c is None else int(k.value) * c
    fv = expr_vars(e)
    if v in fv or fv & bad:
        return None
    return 0


def _owners(indices: tuple[E.Expr, ...], pvars: list[E.Var], bad: set[E.Var]) -> tuple | None:
    """For each mapped variable the (dimension, expression) owning it, or None."""
    out = []
    taken: set[int] = set()
    for p in pvars:
        others = bad | (set(pvars) - {p})
        hit = None
        for d, ix in enumerate(indices):
            if d not in taken and _linear_in(ix, p, others):
                hit = d
                break
        if hit is None:
            return None
        taken.add(hit)
        out.append((hit, indices[hit]))
    return tuple(out)


def _accesses(s: Stmt) -> list[tuple[Buffer, tuple[E.Expr, ...], Any]]:
    """Every buffer access of ``s``: (buffer, indices, the Store or None for a load)."""
    out: list[tuple[Buffer, tuple[E.Expr, ...], Any]] = []
    for x in walk_stmt(s):
        if isinstance(x, Store):
            out.append((x.buffer, x.indices, x))
        for e in stmt_exprs(x):
            for n in walk_expr(e):
                if isinstance(n, BufferLoad):
                    out.append((n.buffer, n.indices, None))
    return out


def _analyse(nest: For, pvars: list[E.Var], local: set[Buffer]
             ) -> tuple[bool, list[Store], bool]:
    """(all accesses to written buffers are consistently owned, the stores not owned,
    whether every store not owned is a reduction into a buffer the nest never reads)."""
    bad = _bound_inside(nest) - set(pvars)
    acc = [a for a in _accesses(nest) if a[0] not in local]
    written = {b for b, _, st in acc if st is not None}
    owners: dict[Buffer, set] = {}
    consistent = True
    non_owned: list[Store] = []
    for b, idx, st in acc:
        if b not in written:
            continue
        own = _owners(idx, pvars, bad)
        if own is None:
            consistent = False
            if st is not None:
                non_owned.append(st)
        owners.setdefault(b, set()).add(own)
    for b, owns in owners.items():
        if len(owns) > 1:
            consistent = False
            non_owned += [st for bb, _, st in acc if bb == b and st is not None
                          and st not in non_owned]
    loaded = {b for b, _, st in acc if st is None}
    atomic_ok = all(st.reduce is not None and st.buffer not in loaded
                    and st.buffer.dtype in ATOMIC_DTYPES.get(st.reduce, ())
                    for st in non_owned)
    return consistent, non_owned, atomic_ok


def _map_loops(loop: For, local: set[Buffer], outside: set[E.Var]
               ) -> tuple[list[For], list[Store]] | None:
    """The loops mapped onto the grid (outermost first) and the stores they do not own."""
    consistent, non_owned, atomic_ok = _analyse(loop, [loop.var], local)
    trusted = False
    if loop.kind == "parallel":
        # lowering guarantees disjoint writes; accumulations it does not own syntactically
        # are made atomic, plain stores are trusted
        trusted = any(st.reduce is None for st in non_owned)
        non_owned = [st for st in non_owned if st.reduce is not None]
        for st in non_owned:
            if st.buffer.dtype not in ATOMIC_DTYPES.get(st.reduce, ()):
                raise CompileError(
                    f"schedule: the parallel loop {loop.var.name} accumulates into "
                    f"{st.buffer.name!r} ({st.buffer.dtype}, {st.reduce}) at an index it does "
                    "not own, and CUDA has no atomic for that")
    elif consistent:
        non_owned = []
    elif not atomic_ok:
        return None
    mapped = [loop]
    inner = loop.body
    while isinstance(inner, For) and not trusted:
        bad = {m.var for m in mapped} | _bound_inside(inner) - {inner.var}
        if (expr_vars(inner.lo) | expr_vars(inner.hi)) & bad:
            break
        pv = [m.var for m in mapped] + [inner.var]
        ok, rest, ok_atomic = _analyse(loop, pv, local)
        if ok:
            rest = []
        # collapsing must not turn a store into an atomic that was not one already
        if not (ok or ok_atomic) or not set(rest) <= set(non_owned):
            break
        mapped.append(inner)
        non_owned = rest
        inner = inner.body
    return mapped, non_owned


def _atomics(loop: For, mapped: list[For], non_owned: list[Store], local: set[Buffer]
             ) -> tuple[frozenset[Store], tuple[Private, ...]]:
    """Which stores become atomic and which are privatised (see the module doc)."""
    if not non_owned:
        return frozenset(), ()
    inner_bound = _bound_inside(loop)
    by_buf: dict[Buffer, list[Store]] = {}
    for x in walk_stmt(loop):
        if isinstance(x, Store) and x.buffer not in local:
            by_buf.setdefault(x.buffer, []).append(x)
    atomic: set[Store] = set()
    private: list[Private] = []
    seen: dict[tuple, Private] = {}
    hot = {st.buffer for st in non_owned}
    loaded = {x.buffer for x in _walk_loads(loop)}
    for b in hot:
        stores = by_buf[b]
        # every store into a buffer with an atomic update must itself be atomic
        combiners = {st.reduce for st in stores}
        invariant = all(not (_free_all(st.indices) & inner_bound) for st in stores)
        if invariant and len(combiners) == 1 and None not in combiners and b not in loaded:
            for st in stores:
                key = (st.buffer, st.indices)
                if key not in seen:
                    seen[key] = Private(st.buffer, st.indices, st.reduce, f"tc_acc{len(seen)}")
                    private.append(seen[key])
        else:
            for st in stores:
                if st.reduce is None:
                    raise CompileError(
                        f"schedule: buffer {b.name!r} is both assigned and accumulated at "
                        f"indices loop {loop.var.name} does not own")
                if b.dtype not in ATOMIC_DTYPES.get(st.reduce, ()):
                    raise CompileError(
                        f"schedule: no CUDA atomic for {st.reduce} into {b.name!r} ({b.dtype})")
                atomic.add(st)
    return frozenset(atomic), tuple(private)


def _walk_loads(s: Stmt) -> list[BufferLoad]:
    return [n for x in walk_stmt(s) for e in stmt_exprs(x) for n in walk_expr(e)
            if isinstance(n, BufferLoad)]


def _free_all(exprs: tuple[E.Expr, ...]) -> set[E.Var]:
    out: set[E.Var] = set()
    for e in exprs:
        out |= expr_vars(e)
    return out


def _check_lets(stages: list[Stage]) -> None:
    """A top-level let is recomputed in every kernel of its scope: its value must not read a
    buffer that a kernel of that scope writes."""
    for n, st in enumerate(stages):
        for v, value in st.lets:
            reads = {x.buffer for x in walk_expr(value) if isinstance(x, BufferLoad)}
            for later in stages[:n]:
                if (v, value) in later.lets and reads & later.written:
                    b = sorted(x.name for x in reads & later.written)[0]
                    raise CompileError(
                        f"schedule: the value of {v.name} reads buffer {b!r}, which kernel "
                        f"{later.name} of its scope writes; the CUDA backend cannot split it")
