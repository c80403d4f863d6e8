"""Fourier–Motzkin elimination with integer tightening, on ``aff >= 0`` constraints.

Fourier (1826) and Motzkin (1936): to eliminate ``x`` from a system of inequalities,
split the constraints into lower bounds ``a*x + L >= 0`` (``a > 0``) and upper bounds
``-b*x + U >= 0`` (``b > 0``) and replace them by every combination ``b*L + a*U >= 0``.
Over the rationals the result is exactly the projection.  Over the integers it is the
*real shadow*: it may contain points with no integer ``x`` above them (``1 <= 3*x <= 2``
has none, yet its shadow ``1 <= 2`` holds).  Pugh's Omega test (1991) calls the exact
integer projection the dark shadow; a pair is exact when ``a == 1`` or ``b == 1``
(then ``ceil(-L/a) <= floor(U/b)`` iff ``b*L + a*U >= 0``), and the whole elimination is
exact when every pair is.  :func:`pair_is_exact` checks this, and also accepts the
"window" pair ``c*x <= u <= c*x + k`` with ``k >= c - 1``, which always contains a
multiple of ``c``.  When an exact integer projection matters and these tests fail, the
callers keep the constraint as a guard instead.

Integer tightening: an integer point satisfies ``sum(a_i x_i) + k >= 0`` iff it satisfies
``sum(a_i/g x_i) + floor(k/g) >= 0`` with ``g = gcd(a_i)``; so ``2x + 4y - 3 >= 0``
becomes ``x + 2y - 2 >= 0``.  This is the cutting-plane step that makes elimination
chains of unit-coefficient bounds exact on the integers.

Redundancy: duplicates and parallel constraints (same coefficients, keep the smallest
constant) are removed; an opposite parallel pair ``a.x + k1 >= 0``, ``-a.x + k2 >= 0``
with ``k1 + k2 < 0`` proves the system empty, as does a constant ``k < 0``.

Chernikov's rule (Chernikov 1960; Kohler 1967): when every constraint carries the set of
original constraints it was combined from (its history), a constraint formed after ``s``
eliminations whose history holds more than ``s + 1`` originals is implied by the others and
can be dropped.  :class:`Projection` eliminates several variables in turn with this rule;
the integer points it keeps are unchanged (a dropped constraint is implied rationally by
kept ones, hence for every integer point that satisfies their tightened forms), while the
growth from one step to the next stays polynomial where plain pairing squares it.

Size: each elimination may square the number of constraints (doubly exponential over a
chain, e.g. the many ``//``/``%`` unknowns of a bit-reversal index).  ``limit`` bounds the
number of pairs one elimination may form; past it :class:`ProjectionTooLarge` is raised, so
that callers fall back to a form that needs no projection instead of exhausting memory.
"""

from __future__ import annotations

from collections.abc import Iterable

from .affine import Affine

__all__ = [
    "tighten",
    "normalize_inequalities",
    "combine_pair",
    "pair_is_exact",
    "eliminate_inequalities",
    "ProjectionTooLarge",
    "Projection",
]


class ProjectionTooLarge(ValueError):
    """A Fourier–Motzkin step would form more pairs than the caller's ``limit``."""


def tighten(e: Affine) -> Affine | bool:
    """Integer-tightened form of ``e >= 0``; ``True``/``False`` for constant constraints."""
    g = e.gcd()
    if g == 0:
        return e.const >= 0
    if g == 1:
        return e
    return Affine._make({k: v // g for k, v in e.coeffs.items()}, e.const // g)


def normalize_inequalities(cons: Iterable[Affine]) -> list[Affine] | None:
    """Tighten, drop trivial, duplicate and dominated parallel constraints.

    Returns ``None`` when a contradiction is found (a false constant or an opposite pair).
    Order of first appearance is kept.
    """
    rows = _normalize_rows((e, frozenset()) for e in cons)
    return None if rows is None else [e for e, _ in rows]


def combine_pair(lower: Affine, upper: Affine, name: str) -> Affine:
    """``b*lower + a*upper`` where ``lower = a*x + L`` (a > 0), ``upper = -b*x + U``."""
    a = lower.coeff(name)
    b = -upper.coeff(name)
    return (lower * b).axpy(a, upper)


def pair_is_exact(lower: Affine, upper: Affine, name: str) -> bool:
    """True when the integer and real shadows of this lower/upper pair coincide."""
    a = lower.coeff(name)
    b = -upper.coeff(name)
    if a == 1 or b == 1:
        return True
    if a == b:
        s = lower + upper
        return s.is_constant() and s.const >= a - 1
    return False


def eliminate_inequalities(
    cons: Iterable[Affine], name: str, limit: int | None = None
) -> tuple[list[Affine] | None, bool]:
    """Fourier–Motzkin elimination of ``name`` with tightening and redundancy removal.

    Returns ``(constraints, exact)``: ``constraints`` is ``None`` when the system is empty
    (rationally, or by tightening); ``exact`` tells whether every pair was exact, i.e. the
    result is the integer projection and not just the real shadow.  Raises
    :class:`ProjectionTooLarge` when the step would form more than ``limit`` pairs.
    """
    lows: list[Affine] = []
    ups: list[Affine] = []
    out: list[Affine] = []
    for e in cons:
        c = e.coeff(name)
        (lows if c > 0 else ups if c < 0 else out).append(e)
    if limit is not None and len(lows) * len(ups) > limit:
        raise ProjectionTooLarge(
            f"eliminating {name} pairs {len(lows)} lower with {len(ups)} upper bounds")
    exact = True
    for lo in lows:
        for up in ups:
            exact = exact and pair_is_exact(lo, up, name)
            out.append(combine_pair(lo, up, name))
    return normalize_inequalities(out), exact


Row = tuple[Affine, frozenset[int]]


def _normalize_rows(rows: Iterable[Row]) -> list[Row] | None:
    """:func:`normalize_inequalities` on constraints with histories (a tighter parallel
    constraint wins; among equal ones the shorter history)."""
    best: dict[frozenset[tuple[str, int]], Row] = {}
    for e, hist in rows:
        t = tighten(e)
        if t is True:
            continue
        if t is False:
            return None
        key = frozenset(t.coeffs.items())
        old = best.get(key)
        if old is None or (t.const, len(hist)) < (old[0].const, len(old[1])):
            best[key] = (t, hist)
    out = list(best.values())
    for e, _ in out:
        opp = best.get(frozenset((k, -v) for k, v in e.coeffs.items()))
        if opp is not None and e.const + opp[0].const < 0:
            return None
    return out


class Projection:
    """Fourier–Motzkin elimination of variables one after another, with tightening,
    redundancy removal and Chernikov's rule (module docstring).

    ``constraints`` is the current system; :meth:`eliminate` projects one variable out and
    returns False when the system turned out empty.
    """

    def __init__(self, cons: Iterable[Affine]) -> None:
        rows = _normalize_rows((e, frozenset([k])) for k, e in enumerate(cons))
        self.rows: list[Row] | None = rows
        self.steps = 0
        self.exact = True

    @property
    def constraints(self) -> list[Affine] | None:
        return None if self.rows is None else [e for e, _ in self.rows]

    def eliminate(self, name: str, limit: int | None = None) -> bool:
        """Project ``name`` out; raises :class:`ProjectionTooLarge` past ``limit`` pairs."""
        if self.rows is None:
            return False
        lows = [r for r in self.rows if r[0].coeff(name) > 0]
        ups = [r for r in self.rows if r[0].coeff(name) < 0]
        out = [r for r in self.rows if not r[0].coeff(name)]
        if limit is not None and len(lows) * len(ups) > limit:
            raise ProjectionTooLarge(
                f"eliminating {name} pairs {len(lows)} lower with {len(ups)} upper bounds")
        self.steps += 1
        for lo, hl in lows:
            for up, hu in ups:
                hist = hl | hu
                if len(hist) > self.steps + 1:
                    continue  # Chernikov: implied by the other constraints
                self.exact = self.exact and pair_is_exact(lo, up, name)
                out.append((combine_pair(lo, up, name), hist))
        self.rows = _normalize_rows(out)
        return self.rows is not None
