"""Integer solvers: Smith/Hermite normal forms, integer linear systems, affine constraint
systems over named variables, Fourier–Motzkin elimination and exact loop bounds.

Everything here works on plain integer matrices (lists of lists of Python ints) and on
:class:`Affine` expressions over named variables; nothing depends on the tecomp IR.

* :func:`smith_normal_form`, :func:`hermite_normal_form` — :mod:`.smith`
* :func:`solve_integer_system` (numeric ``A x = b``), :func:`solve_parametric` (``b`` affine
  in parameters, with divisibility conditions) — :mod:`.integer_system`
* :class:`Affine`, :class:`Congruence` — :mod:`.affine`
* :class:`System` (equalities, inequalities, congruences; equality elimination,
  Fourier–Motzkin, ``//``/``%`` elimination, counting) — :mod:`.system`
* :func:`loop_bounds` and its :class:`LoopNest` / :class:`Loop` / :class:`Bound` /
  :class:`Let` — :mod:`.loops`
* isl conversion — :mod:`.isl_bridge` (imported on demand)
"""

from .affine import Affine, Congruence
from .integer_system import ParametricSolution, solve_integer_system, solve_parametric
from .loops import Bound, Let, Loop, LoopNest, loop_bounds
from .smith import hermite_normal_form, smith_normal_form
from .system import EqualityElimination, System

__all__ = [
    "Affine",
    "Bound",
    "Congruence",
    "EqualityElimination",
    "Let",
    "Loop",
    "LoopNest",
    "ParametricSolution",
    "System",
    "hermite_normal_form",
    "loop_bounds",
    "smith_normal_form",
    "solve_integer_system",
    "solve_parametric",
]
