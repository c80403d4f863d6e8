"""``tc.optimize``: zero elimination and simplification on any tensors."""

from __future__ import annotations

from typing import Sequence

from .tensor import Tensor


def optimize(outputs: Tensor | Sequence[Tensor]) -> Tensor | list[Tensor]:
    """``outputs`` rewritten by zero elimination: same values, loops over non-zeros only.

    Works on gradients (Kronecker deltas are solved away) and on a user's own tensors, e.g. a
    dense product masked by a Kronecker-sparse support through ``where=`` conditions with
    ``//`` and ``%``, which becomes the compact sparse loop.

    Example::

        >>> X = tc.placeholder((64,), name="X")
        >>> k = tc.reduce_axis(64, name="k")
        >>> Y = tc.compute((64,), lambda i: tc.sum(X[k], axis=k, where=tc.eq(k, i)), name="Y")
        >>> tc.cost([Y], optimize=False).flops, tc.cost([tc.optimize(Y)], optimize=False).flops
        (4096, 0)
    """
    from .pipeline import optimize_tensors

    if isinstance(outputs, Tensor):
        return optimize_tensors([outputs])[0]
    return optimize_tensors(list(outputs))
