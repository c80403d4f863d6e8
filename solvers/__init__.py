"""Integer solvers: Smith/Hermite normal forms, integer linear systems over named variables,
and Fourier–Motzkin elimination.

Everything here works on plain integer matrices (lists of lists of Python ints) and on
:class:`Affine` expressions over named variables; nothing depends on the tecomp IR.

* :func:`smith_normal_form`, :func:`hermite_normal_form` — :mod:`.smith`
* :func:`solve_integer_system` (numeric ``A x = b``), :func:`solve_parametric` (``b`` affine
  in parameters, with divisibility conditions) — :mod:`.integer_system`
* :class:`Affine`, :class:`Congruence` — :mod:`.affine`
* Fourier–Motzkin elimination with integer tightening on ``aff >= 0`` constraints —
  :mod:`.inequalities`
* isl sets over named dimensions, the one place that talks to islpy — :mod:`.isl_bridge`
  (imported on demand: the static bounds proofs use it)

Zero elimination uses the first four.
"""

from __future__ import annotations

import importlib
from typing import Any

# Names exported here, by module.  The modules are imported on first use of one of their names
# (PEP 562): zero elimination needs only the affine and integer-system modules, and importing
# the others (constraint systems, loop bounds) costs milliseconds in every fresh process.
_EXPORTS = {
    "Affine": "affine", "Congruence": "affine",
    "ParametricSolution": "integer_system", "solve_integer_system": "integer_system",
    "solve_parametric": "integer_system",
    "hermite_normal_form": "smith", "smith_normal_form": "smith",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "Affine",
    "Congruence",
    "ParametricSolution",
    "hermite_normal_form",
    "smith_normal_form",
    "solve_integer_system",
    "solve_parametric",
]
