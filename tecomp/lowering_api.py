"""Public entry points ``tc.lower`` and ``tc.cost``.

Both run the pipeline (:func:`tecomp.pipeline.lower`: zero elimination and simplification,
then lowering to loop IR) on the outputs.  ``tc.cost`` counts on that lowered program (rules
in :mod:`tecomp.cost`); ``tc.lower(..., target=...)`` goes on to the target's bounds checks
and schedule (:func:`tecomp.pipeline.scheduled`).
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


def lower(outputs: Tensor | Sequence[Tensor], inputs: Iterable[Any],
          name: str | None = None, *, optimize: bool | None = None,
          target: str | None = None) -> Lowered:
    """The loop IR of ``outputs`` computed from ``inputs``: what the backends compile.

    ``inputs`` lists the placeholders (and scalar ``tc.var`` s no shape determines) in
    argument order.  The outputs go through the same preparation as ``tc.build`` (zero
    elimination where needed, inlining); ``str()`` of the result is the readable loop IR,
    ``.cost(sizes)`` its static cost.

    ``target=None`` gives the target-independent loop IR; ``target="llvm"`` or ``"cuda"``
    the loop IR that target compiles (bounds checks added, then its schedule).
    ``optimize=False`` lowers the outputs as written (no zero elimination), ``True``
    optimises every output; the default optimises all but the outputs of
    ``tc.gradient(..., optimize=False)``, which stay as written (as ``tc.build`` compiles them).

    Example::

        >>> n = tc.var("n")
        >>> A = tc.placeholder((n, 8), name="A")
        >>> S = tc.compute((n,), lambda i: A[i, 0] * 2.0 + A[i, 7], name="S")
        >>> print(tc.lower(S, [A]))
        func S(A: float32[n, 8]) -> (S: float32[n]) params(n) {
          parallel for (i, 0, n) {
            S[i] = A[i, 0] * 2.0 + A[i, 7]
          }
        }
    """
    from . import pipeline

    if target is not None:
        pipeline.check_target(target)
        pipeline.check_checkpoint_target(_outputs(outputs), target)
    func, constants = pipeline.lower(_outputs(outputs), inputs, name=name, optimize=optimize,
                                     target_name=target)
    if target is not None:
        func = pipeline.scheduled(func, target)
    return Lowered(func, constants)


def default_inputs(outs: list[Tensor]) -> list[Any]:
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
         sizes: Mapping[Any, int] | None = None, *,
         optimize: bool | None = None) -> Cost:
    """Static cost (flops, iterations, bytes) of the lowered program for ``outputs``.

    ``inputs=None`` takes every placeholder the outputs depend on (topological order) and
    every size variable no input shape determines.  Without ``sizes`` the counts are SymPy
    expressions in the size variables (see :mod:`tecomp.cost` for when that is possible).
    ``optimize=False`` counts the program as written, without zero elimination;
    ``optimize=True`` counts every output optimised, also those of
    ``tc.gradient(..., optimize=False)`` (for comparing a naive gradient with its optimised
    form); the default optimises all but those.

    Example::

        >>> n = tc.var("n")
        >>> A = tc.placeholder((n, 8), name="A")
        >>> k = tc.reduce_axis(8, name="k")
        >>> T = tc.compute((n,), lambda i: tc.sum(A[i, k] * A[i, k], axis=k), name="T")
        >>> c = tc.cost([T], sizes={n: 100})       # one multiply-add per (i, k)
        >>> c.flops, c.iterations, c.bytes
        (1600, 800, 0)
        >>> tc.cost([T]).flops                      # symbolic without sizes
        16*n
    """
    from . import pipeline

    outs = pipeline.prepare(_outputs(outputs), optimize=optimize)
    ins = default_inputs(outs) if inputs is None else inputs
    return count_cost(pipeline.lower(outs, ins, optimize=False)[0], sizes)
