"""Scheduled GPU programs: what the GPU schedule produces and the CUDA code generator consumes.

A :class:`GpuProgram` is a lowered function cut into kernels (:class:`Stage`); a stage names
the loops mapped onto the grid, the stores made atomic, its thread-private accumulators
(:class:`Private`) and, for two patterns, a block-level schedule: one block per output of a
short row reduction (:class:`BlockReduce`) or shared-memory tiles of a contraction
(:class:`Tiling`, of ``TILE_M`` x ``TILE_N`` outputs, ``TILE_K`` reduction steps staged at a
time, ``TILE_THREADS`` threads).  How they are chosen: :mod:`tecomp.passes.schedule.gpu`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import expr as E
from .loopir import Buffer, For, LoweredFunc, Stmt, Store

TILE_M = 32  # output rows of a tile
TILE_N = 32  # output columns of a tile
TILE_K = 16  # reduction step staged in shared memory
TILE_THREADS = 256  # (TILE_M / 2) x (TILE_N / 2) threads, 2 x 2 outputs each


@dataclass(frozen=True)
class BlockReduce:
    """One block per output: ``outer`` loops over the outputs, ``inner`` (collapsed) reduction
    loops strided over the block's threads, the rest of the reduction nest in ``body``."""

    outer: tuple[For, ...]
    acc: Buffer
    init: Store
    inner: tuple[For, ...]
    body: Stmt
    reduce: str
    rest: tuple[Stmt, ...]


@dataclass(frozen=True)
class Tiling:
    """``acc = init; for k..: acc += a * b; rest`` per output; ``a`` uses the ``rows`` loops
    (not the ``cols``), ``b`` the ``cols`` loops (not the ``rows``), both may use ``batch``."""

    batch: tuple[For, ...]
    rows: tuple[For, ...]
    cols: tuple[For, ...]
    acc: Buffer
    init: Store
    kloops: tuple[For, ...]
    a: E.Expr
    b: E.Expr
    rest: tuple[Stmt, ...]


@dataclass(frozen=True)
class Private:
    """A thread-private accumulator standing for ``buffer[indices] <reduce>= ...``."""

    buffer: Buffer
    indices: tuple[E.Expr, ...]
    reduce: str
    name: str


@dataclass(frozen=True)
class Stage:
    """One kernel: ``stmt`` (with its wrappers), the loops mapped onto the grid, and how its
    stores are carried out."""

    name: str
    stmt: Stmt
    lets: tuple[tuple[E.Var, E.Expr], ...]
    mapped: tuple[For, ...]
    atomic: frozenset[Store]
    private: tuple[Private, ...]
    buffers: tuple[Buffer, ...]
    written: frozenset[Buffer]
    block_reduce: BlockReduce | None = None  # one block per output
    tiling: Tiling | None = None  # shared-memory tiles of a contraction

    @property
    def serial(self) -> bool:
        return not self.mapped


@dataclass(frozen=True)
class GpuProgram:
    """A lowered function cut into kernels."""

    func: LoweredFunc
    stages: tuple[Stage, ...]
    temps: tuple[Buffer, ...]
    notes: tuple[str, ...] = field(default=())
