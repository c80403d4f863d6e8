"""The scan node of the tensor IR (declared by :func:`tecomp.scan.scan`; see that module)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import expr as E
from .tensor import Tensor


@dataclass(frozen=True, eq=False)
class Scan:
    """One recurrence: its states, how they start and step, and its body in step order."""

    name: str
    init: tuple[Tensor, ...]
    update: tuple[Tensor, ...]
    state: tuple[Tensor, ...]
    body: tuple[Tensor, ...]  # one step's stages in execution order (updates included)
    outer: tuple[Tensor, ...]  # what the scan reads from outside: inits first
    steps: int  # L, the number of given (init) steps
    reverse: bool = False
    outputs: list[Tensor] = field(default_factory=list, compare=False, repr=False)

    @property
    def extent(self) -> E.Expr:
        """T, the time extent."""
        return self.state[0].shape[0]


@dataclass(frozen=True, eq=False)
class ScanOp:
    """The operation of state ``index`` of ``scan`` (all states of a scan share it)."""

    scan: Scan
    index: int
