"""Public entry points ``tc.lower`` and ``tc.cost``.

Both run the pre-lowering pipeline (:func:`tecomp.passes.pipeline.prepare`: zero elimination
and simplification) on the outputs, then lower them with :func:`tecomp.passes.lower.lower`.
``tc.cost`` counts on that lowered program (rules in :mod:`tecomp.cost`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from . import expr as E
from .cost import Cost, count_cost
from .errors import TecompError
from .functor import free_vars, op_exprs, topo_order
from .loop_printer import format_func
from .loopir import Buffer, LoweredFunc
from .tensor import Tensor


class Lowered:
    """A lowered program: ``.func`` is the :class:`LoweredFunc`, ``str()`` its loop IR.

    ``.constants`` maps the input buffers that hold constant tensors (those after the buffers
    of ``inputs``) to their data.
    """

    def __init__(self, func: LoweredFunc,
                 constants: Mapping[Buffer, np.ndarray] | None = None) -> None:
        self.func = func
        self.constants = dict(constants or {})

    def __str__(self) -> str:
        return format_func(self.func)

    def __repr__(self) -> str:
        return f"<Lowered {self.func.name}>"

    def cost(self, sizes: Mapping[Any, int] | None = None) -> Cost:
        """The static cost of this program; ``sizes`` binds size variables (or their names)."""
        return count_cost(self.func, sizes)


def _outputs(outputs: Tensor | Sequence[Tensor]) -> list[Tensor]:
    if isinstance(outputs, Tensor):
        return [outputs]
    try:
        outs = list(outputs)
    except TypeError:
        raise TecompError(f"expected a tensor or a list of tensors, got {outputs!r}") from None
    for t in outs:
        if not isinstance(t, Tensor):
            raise TecompError(f"expected tensors as outputs, got {t!r}")
    return outs


def _prepare(outputs: Tensor | Sequence[Tensor]) -> list[Tensor]:
    from .passes.pipeline import prepare

    return prepare(_outputs(outputs))


def lower(outputs: Tensor | Sequence[Tensor], inputs: Iterable[Any],
          name: str | None = None) -> Lowered:
    """Lower ``outputs`` computed from ``inputs`` (placeholders and scalar ``tc.var`` s)."""
    from .diagnostics import run_pass
    from .passes.lower import lower_program

    prepared = _prepare(outputs)
    return Lowered(*run_pass("lower", lower_program, prepared, inputs, name=name))


def default_inputs(outs: list[Tensor]) -> list[Any]:
    """The inputs ``tc.cost`` assumes when none are given (see :func:`_default_inputs`)."""
    return _default_inputs(outs)


def _default_inputs(outs: list[Tensor]) -> list[Any]:
    """All placeholders the outputs depend on, then the sizes no input shape determines."""
    order = topo_order(outs)
    tensors = [t for t in order if t.is_placeholder]
    known = {s for t in tensors for s in t.shape if isinstance(s, E.Var)}
    extra: list[E.Var] = []

    def need(vs: set[E.Var]) -> None:
        for v in sorted(vs, key=lambda v: v.name):
            if v not in known and v not in extra:
                extra.append(v)

    for t in order:
        for s in t.shape:
            need(free_vars(s))
        axes = {ax.var for ax in getattr(t.op, "axes", ())}
        for e in op_exprs(t):
            need(free_vars(e) - axes)
    return [*tensors, *extra]


def cost(outputs: Tensor | Sequence[Tensor], inputs: Iterable[Any] | None = None,
         sizes: Mapping[Any, int] | None = None, *, optimize: bool = True) -> Cost:
    """Static cost (flops, iterations, bytes) of the lowered program for ``outputs``.

    ``inputs=None`` takes every placeholder the outputs depend on (topological order) and
    every size variable no input shape determines.  Without ``sizes`` the counts are SymPy
    expressions in the size variables (see :mod:`tecomp.cost` for when that is possible).
    ``optimize=False`` counts the program as written, without zero elimination (for
    comparing a naive gradient with its optimised form).
    """
    from .passes.lower import lower as lower_pass

    outs = _prepare(outputs) if optimize else _outputs(outputs)
    ins = _default_inputs(outs) if inputs is None else inputs
    return count_cost(lower_pass(outs, ins), sizes)
