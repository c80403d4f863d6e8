"""Residue classes of loop variables from congruences and equalities (an affine lattice).

The congruences ``e_k = 0 (mod m_k)`` and equalities on parameters and loop variables
``w = (p..., x_1, ..., x_n)`` describe an affine lattice ``L``: with extra unknowns ``y``,
``e_k - m_k*y_k = 0``, and :func:`~tecomp.solvers.integer_system.solve_integer_system`
gives ``w = w0 + N t``.  The lower-triangular Hermite basis ``H`` of ``N`` (columns in the
order of ``w``, :func:`~tecomp.solvers.smith.hermite_normal_form`) reads, row by row,

* a *pivot* row ``i`` (new column ``k``): ``w_i = w0_i + sum_{j<k} H[i][j]*u_j + H[i][k]*u_k``,
  so once the outer coordinates (hence ``u_0..u_{k-1}``) are fixed, ``w_i`` runs through
  one residue class modulo ``H[i][k]`` — the loop's step;
* a row without a pivot: ``w_i`` is an affine function of the outer ones (an equality).

The residue ``w0_i + sum_j H[i][j]*u_j`` is affine in the outer coordinates with rational
coefficients (the ``u_j`` are).  We look for an integer representative ``c.w + c0`` equal
to it modulo the step on the whole lattice (a linear system of congruences in ``c``), and
keep the exact-division form ``num/den`` only when there is none.  Example: for
``i = 0 (mod 2)`` and ``j - i/2 = 0 (mod 2)`` the residue of ``j`` is ``i/2 (mod 2)`` and
has no integer form; for ``i + n = 0 (mod 3)`` and ``i - j = 0 (mod 2)`` it is ``i``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .affine import Affine, Congruence
from .integer_system import solve_integer_system
from .smith import hermite_normal_form

__all__ = ["Lattice", "residue_lattice"]


@dataclass(frozen=True, slots=True)
class Lattice:
    """``steps[x]`` and ``residues[x] = (num, den)``: ``x = num/den (mod steps[x])``;
    ``param_congruences``: conditions on parameters alone; ``pinned``: expressions ``== 0``
    fixing coordinates without a pivot."""

    steps: dict[str, int]
    residues: dict[str, tuple[Affine, int]]
    param_congruences: tuple[Congruence, ...]
    pinned: tuple[Affine, ...]


def residue_lattice(params: tuple[str, ...], order: tuple[str, ...], eqs: list[Affine],
                    congs: list[tuple[Affine, int]]) -> Lattice | None:
    """The lattice of ``eqs`` and ``congs`` over ``params + order``; ``None`` when empty."""
    steps = {v: 1 for v in order}
    residues = {v: (Affine.constant(0), 1) for v in order}
    # a coordinate in no constraint is a free factor of the lattice (step 1, and no other
    # residue depends on it): leave it out, which keeps the matrices small
    used = {n for e in eqs for n in e.coeffs} | {n for e, _ in congs for n in e.coeffs}
    dims = tuple(x for x in params + order if x in used)
    if not dims:
        return Lattice(steps, residues, (), ())
    d, k = len(dims), len(congs)
    A = [[e.coeff(x) for x in dims] + [0] * k for e in eqs]
    A += [[e.coeff(x) for x in dims] + [-m if j == i else 0 for j in range(k)]
          for i, (e, m) in enumerate(congs)]
    sol = solve_integer_system(A, [-e.const for e in eqs] + [-e.const for e, _ in congs])
    if sol is None:
        return None
    z0, N = sol
    H, _, pivots = hermite_normal_form(N[:d], ncols=len(N[0]))
    us: list[tuple[Affine, int]] = []  # u_k = num/den in terms of the dims
    param_congs: list[Congruence] = []
    pinned: list[Affine] = []
    for i, x in enumerate(dims):
        kk = len(us)
        num, den = Affine.constant(z0[i]), 1
        for j in range(kk):
            if H[i][j]:
                un, ud = us[j]
                lcm = math.lcm(den, ud)
                num = (num * (lcm // den)).axpy(H[i][j] * (lcm // ud), un)
                den = lcm
        xa = Affine.var(x)
        if kk < len(pivots) and pivots[kk] == i:
            step = H[i][kk]
            us.append(((xa * den) - num, den * step))
            if step == 1:
                continue
            if x in steps:
                steps[x] = step
                residues[x] = _integer_residue(dims, H, z0, i, kk, step) or _reduce(num, den, step)
            else:
                c = Congruence.make(xa * den - num, den * step)
                if c is False:
                    return None
                if c is not True:
                    param_congs.append(c)
        else:
            pinned.append(xa * den - num)
    return Lattice(steps, residues, tuple(param_congs), tuple(pinned))


def _reduce(num: Affine, den: int, step: int) -> tuple[Affine, int]:
    """``num/den (mod step)`` with coefficients reduced modulo ``den*step``."""
    m = den * step
    red = Affine({n: c % m for n, c in num.coeffs.items()}, num.const % m)
    g = math.gcd(red.content(), den)
    return (red.exact_div(g) if g > 1 else red), den // g


def _integer_residue(dims: tuple[str, ...], H: list[list[int]], z0: list[int], i: int,
                     kk: int, step: int) -> tuple[Affine, int] | None:
    """Integer ``c.w + c0`` equal to row ``i``'s residue modulo ``step`` on the lattice.

    On the lattice, ``w_r = z0_r + sum_j H[r][j] u_j`` for the outer rows ``r < i`` and the
    residue is ``z0_i + sum_{j<kk} H[i][j] u_j``; matching the coefficient of every ``u_j``
    modulo ``step`` is the system ``sum_r c_r H[r][j] - step*y_j = H[i][j]``.
    """
    if kk == 0:
        return Affine.constant(z0[i] % step), 1
    A = [[H[r][j] for r in range(i)] + [-step if jj == j else 0 for jj in range(kk)]
         for j in range(kk)]
    sol = solve_integer_system(A, [H[i][j] for j in range(kk)])
    if sol is None:
        return None
    c = [_small(v % step, step) for v in sol[0][:i]]
    c0 = (z0[i] - sum(cr * z0[r] for r, cr in enumerate(c))) % step
    return Affine({dims[r]: cr for r, cr in enumerate(c) if cr}, c0), 1


def _small(r: int, m: int) -> int:
    """The representative of ``r (mod m)`` of least absolute value (ties: positive)."""
    return r - m if 2 * r > m else r
