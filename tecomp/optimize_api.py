"""``tc.optimize``: zero elimination and simplification on any tensors."""

from __future__ import annotations

from typing import Sequence

from .tensor import Tensor


def optimize(outputs: Tensor | Sequence[Tensor]) -> Tensor | list[Tensor]:
    """``outputs`` rewritten by zero elimination: same values, loops over non-zeros only.

    Works on gradients (Kronecker deltas are solved away) and on a user's own tensors, e.g. a
    dense product masked by a Kronecker-sparse support through ``where=`` conditions with
    ``//`` and ``%``, which becomes the compact sparse loop.
    """
    from .pipeline import optimize_tensors

    if isinstance(outputs, Tensor):
        return optimize_tensors([outputs])[0]
    return optimize_tensors(list(outputs))
