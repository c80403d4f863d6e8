"""The tensor-IR pipeline that runs before lowering.

Optimisation passes that run before lowering (zero elimination, simplification) are added
here: ``tc.lower`` and ``tc.cost`` call :func:`prepare` on the outputs and lower what it
returns, so every pass added here is seen by both.
"""

from __future__ import annotations

from typing import Sequence

from tecomp.tensor import Tensor


def optimize(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Zero elimination, then simplification (:mod:`tecomp.passes.simplify`), on every stage."""
    from tecomp.diagnostics import run_pass
    from tecomp.passes.simplify import simplify
    from tecomp.passes.zero_elimination import eliminate_zeros

    outs = run_pass("zero_elimination", eliminate_zeros, list(outputs), log_tensors=True)
    return run_pass("simplify", simplify, outs, log_tensors=True)


def optimize_gradient(outputs: Sequence[Tensor]) -> list[Tensor]:
    """What ``tc.gradient`` applies to its results by default."""
    return optimize(outputs)


def prepare(outputs: Sequence[Tensor]) -> list[Tensor]:
    """The outputs after the pre-lowering passes (zero elimination)."""
    return optimize(outputs)
