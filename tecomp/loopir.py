"""The loop IR: what lowering produces and every code generator consumes.

Statements are frozen dataclasses like the expression nodes; loop bodies use the scalar
expression IR of :mod:`tecomp.expr` extended with :class:`BufferLoad`.  A lowered program is a
:class:`LoweredFunc`: buffers for inputs and outputs, the symbolic sizes it takes as scalar
parameters, and one statement.

Conventions every pass and backend relies on:

* ``For(var, lo, hi, step, body)`` runs ``var = lo, lo + step, ...`` while ``var < hi``
  (``step >= 1``; an empty range runs nothing).  ``kind`` is a scheduling hint: ``"serial"``,
  ``"parallel"`` (iterations independent, may run on several threads/blocks), ``"vectorized"``
  or ``"unrolled"``.  ``unroll`` (default 1), another hint, asks the code generator for
  ``unroll`` iterations of the body in each trip of the loop it emits, the remaining
  iterations apart (the CPU schedule sets it on a register tile's reduction loop and on a
  window's innermost digit steps; the LLVM backend hands it to LLVM's unroller, which makes
  the copies).  Neither hint changes what the loop computes or the order of its iterations.
  ``slot`` (default None), on a ``"parallel"`` loop, is a variable the body may read that
  holds the loop variable's value at the first iteration of the part of the loop one thread
  runs (``lo`` when one thread runs it all): parts that run at the same time have different
  slots, so a buffer indexed by the slot gives each running part its own memory, and one
  thread reuses one slot's memory for every iteration (the CPU schedule's per-thread
  intermediates of column blocks).
* Buffers are dense and row-major; ``BufferLoad``/``Store`` index them with one expression per
  dimension.  ``Store(..., reduce="sum")`` means ``buf[idx] = buf[idx] + value`` (other
  combiners: ``"prod"``, ``"max"``, ``"min"``); parallel backends must make it atomic or prove
  the destinations distinct.
* ``Allocate`` introduces a ``"temp"`` (intermediate tensor) or ``"local"`` (scalar
  accumulator, shape ``()``) buffer for the extent of its body.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import Expr, Var, node


class _Hashed:
    __slots__ = ("_h",)


@node
class Buffer(_Hashed):
    """A named dense array: ``scope`` is "input", "output", "temp" or "local"."""

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    scope: str = "temp"

    def __post_init__(self) -> None:
        if type(self.shape) is not tuple:  # a tensor's Shape: stored (and printed) plainly
            object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)


@node
class BufferLoad(Expr):
    buffer: Buffer
    indices: tuple[Expr, ...]
    dtype: str


class Stmt:
    """Base class of loop-IR statements."""

    __slots__ = ("_h",)

    def __str__(self) -> str:
        from .loop_printer import format_stmt

        return format_stmt(self)


@node
class For(Stmt):
    var: Var
    lo: Expr
    hi: Expr
    body: Stmt
    step: int = 1
    kind: str = "serial"
    unroll: int = 1
    slot: Var | None = None


@node
class Store(Stmt):
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    reduce: str | None = None


@node
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@node
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    else_: Stmt | None = None


@node
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@node
class LetStmt(Stmt):
    """Bind the scalar ``var`` to ``value`` within ``body``."""

    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True)
class LoweredFunc:
    """A whole lowered program, ready for a code generator."""

    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    params: tuple[Var, ...]
    body: Stmt
