"""All integer solutions of ``A x = b``, with a numeric or a symbolic right-hand side.

Numeric: :func:`solve_integer_system` (column Hermite form, ``A V = H``):
    ``x = V y`` turns ``A x = b`` into the echelon system ``H y = b``; forward substitution
    fixes ``y_0..y_{r-1}`` (each must come out integral, and rows without a pivot must be
    satisfied), ``y_r..y_{n-1}`` stay free.  So ``x = x0 + N t`` with ``x0 = V[:, :r] y``
    and ``N = V[:, r:]``, a lattice basis of the integer kernel (V is unimodular).

Symbolic: :func:`solve_parametric` (Smith form, ``U A V = S``):
    with ``b`` affine in parameters, ``S y = U b``; for ``i < r`` the condition
    ``(U b)_i = 0 (mod s_i)`` must hold and ``y_i = (U b)_i / s_i``; for ``i >= r`` the
    rows ``(U b)_i = 0`` are equalities between parameters; ``y_r..`` are free.  The SNF
    makes every condition independent and read off one row of ``U``.

Worked example (the stride-2 convolution gradient, Urban & van der Smagt 2017, sec. 4.1):
    solve ``2*oy + ry = j`` for ``(oy, ry)`` with ``j`` a parameter.  ``A = [[2, 1]]``;
    the SNF is ``U = [[1]]``, ``S = [[1, 0]]``, ``V = [[0, 1], [1, -2]]``; so
    ``y_0 = j`` (no condition: ``s_0 = 1``), ``y_1 = t`` free, and
    ``(oy, ry) = V (j, t) = (t, j - 2*t)``.  The divisibility condition of the stride
    appears once ``ry`` is bounded: ``0 <= j - 2*t < 2`` admits one ``t`` for every ``j``,
    while with dilation 2 (``2*oy + 2*ry = j``) the SNF gives ``S = [[2, 0]]`` and the
    condition ``j = 0 (mod 2)``: odd ``j`` receive no contribution at all.

Comparison with TVM's ``SolveLinearEquations`` (``src/arith/solve_linear_equation.cc``):
    TVM also uses the SNF, but on int64 and tied to its IR; it returns one particular
    solution with the kernel directions as *new IR variables* and the conditions mixed into
    a ranges map.  Here the solver works on plain integer matrices and
    :class:`~tecomp.solvers.affine.Affine` right-hand sides, returns the conditions
    separately as congruences, and provides the inverse map ``x -> t`` so that tests can
    check that solutions map back and forth.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .affine import Affine, AffineLike, Congruence, as_affine, combine
from .smith import IntMatrix, as_int_matrix, echelon_columns, snf_core

__all__ = ["ParametricSolution", "solve_integer_system", "solve_parametric"]


def solve_integer_system(A: Any, b: Sequence[int]) -> tuple[list[int], IntMatrix] | None:
    """All integer solutions of ``A x = b``, or ``None`` when there is none.

    Returns ``(x0, N)``: ``x0`` a list of ``n`` ints and ``N`` an ``n x k`` list of lists
    whose columns are a basis of the integer kernel of ``A`` (``k = n - rank``; each row is
    the empty list when the solution is unique).  Every integer solution is ``x0 + N @ t``
    for exactly one integer vector ``t``.  ``A`` may be rank deficient and non-square; give
    an ``m x n`` list of lists or numpy array (for ``m == 0`` use a numpy array of shape
    ``(0, n)``).
    """
    n = A.shape[1] if hasattr(A, "shape") else (len(A[0]) if len(A) else 0)
    rows = as_int_matrix(A, n)
    m = len(rows)
    rhs = [int(v) for v in b]
    if len(rhs) != m:
        raise ValueError(f"right-hand side has {len(rhs)} entries, expected {m}")
    cols = [[rows[i][j] for i in range(m)] + [int(i == j) for i in range(n)] for j in range(n)]
    pivots = echelon_columns(cols, m, reduce=False)
    r = len(pivots)
    y: list[int] = []
    k = 0
    for i in range(m):
        acc = rhs[i] - sum(cols[c][i] * y[c] for c in range(k))
        if k < r and pivots[k] == i:
            q, rem = divmod(acc, cols[k][i])
            if rem:
                return None
            y.append(q)
            k += 1
        elif acc:
            return None
    x0 = [sum(cols[c][m + i] * y[c] for c in range(r)) for i in range(n)]
    N = [[cols[c][m + i] for c in range(r, n)] for i in range(n)]
    return x0, N


@dataclass(frozen=True, slots=True)
class ParametricSolution:
    """Integer solutions of ``A x = b(p)`` for parameters ``p``, as a two-way transform.

    For parameter values satisfying :attr:`conditions` and :attr:`equalities`,
    the solutions are exactly ``x_i = particular[i] / denominators[i] + sum_j kernel[i][j]*t_j``
    for integer ``t`` (the division is exact then).  For other values there is none.

    * ``particular``: affine numerators in the parameters; ``denominators``: positive ints.
    * ``kernel``: ``n x k`` integer matrix, columns a basis of the integer kernel of ``A``.
    * ``inverse``: ``k x n`` integer matrix with ``t = inverse @ x`` for every solution.
    * ``conditions``: congruences on the parameters (the divisibility conditions).
    * ``equalities``: affine expressions of the parameters that must be zero (rows of a
      rank-deficient ``A``).
    """

    particular: tuple[Affine, ...]
    denominators: tuple[int, ...]
    kernel: tuple[tuple[int, ...], ...]
    inverse: tuple[tuple[int, ...], ...]
    conditions: tuple[Congruence, ...]
    equalities: tuple[Affine, ...]

    @property
    def num_free(self) -> int:
        """Number of free integer variables ``t``."""
        return len(self.inverse)

    def admits(self, params: Mapping[str, int]) -> bool:
        """True when integer solutions exist for these parameter values."""
        return all(c.holds(params) for c in self.conditions) and all(
            e.evaluate(params) == 0 for e in self.equalities
        )

    def expressions(self, free: Sequence[str]) -> list[tuple[Affine, int]]:
        """``x_i`` as ``(numerator, denominator)`` affine in the parameters and ``free``."""
        if len(free) != self.num_free:
            raise ValueError(f"need {self.num_free} names for the free variables")
        out = []
        for num, den, row in zip(self.particular, self.denominators, self.kernel):
            ker = combine((c * den, Affine.var(f)) for c, f in zip(row, free))
            out.append((num + ker, den))
        return out

    def evaluate(self, params: Mapping[str, int], t: Sequence[int]) -> list[int]:
        """The solution ``x`` for parameter values ``params`` and free values ``t``."""
        if not self.admits(params):
            raise ValueError("the parameters violate the solvability conditions")
        out = []
        for num, den, row in zip(self.particular, self.denominators, self.kernel):
            v = num.evaluate(params)
            assert v % den == 0
            out.append(v // den + sum(c * tj for c, tj in zip(row, t)))
        return out

    def free_values(self, x: Sequence[int]) -> list[int]:
        """The ``t`` of a solution ``x`` (inverse of :meth:`evaluate` at fixed parameters)."""
        return [sum(a * xi for a, xi in zip(row, x)) for row in self.inverse]


def solve_parametric(A: Any, b: Sequence[AffineLike | str]) -> ParametricSolution | None:
    """Solve ``A x = b`` over the integers with ``b`` affine in named parameters.

    ``b`` entries are :class:`Affine` (or ints, or names).  Returns ``None`` when no
    parameter values admit a solution (a condition is constantly false), else a
    :class:`ParametricSolution`.  See the module docstring for a worked example.
    """
    n = A.shape[1] if hasattr(A, "shape") else (len(A[0]) if len(A) else 0)
    rows = as_int_matrix(A, n)
    rhs = [as_affine(v) for v in b]
    if len(rhs) != len(rows):
        raise ValueError(f"right-hand side has {len(rhs)} entries, expected {len(rows)}")
    U, S, V, W = snf_core(rows, n, want_inverse=True)
    assert W is not None
    r = sum(1 for i in range(min(len(S), n)) if S[i][i])
    ub = [combine(zip(row, rhs)) for row in U]
    conditions: list[Congruence] = []
    equalities: list[Affine] = []
    for i, e in enumerate(ub):
        if i < r:
            c = Congruence.make(e, S[i][i])
            if c is False:
                return None
            if c is not True:
                conditions.append(c)
        elif not e.is_constant():
            equalities.append(e)
        elif e.const:
            return None
    den = math.lcm(*(S[i][i] for i in range(r))) if r else 1
    particular: list[Affine] = []
    denominators: list[int] = []
    for i in range(n):
        num = combine((V[i][k] * (den // S[k][k]), ub[k]) for k in range(r))
        g = math.gcd(num.content(), den)
        particular.append(num.exact_div(g) if g > 1 else num)
        denominators.append(den // g)
    kernel = tuple(tuple(V[i][r:]) for i in range(n))
    inverse = tuple(tuple(row) for row in W[r:])
    return ParametricSolution(tuple(particular), tuple(denominators), kernel, inverse,
                              tuple(conditions), tuple(equalities))
