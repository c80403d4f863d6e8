"""Mixed-radix digits: inverting index maps built from ``//`` and ``%`` exactly.

A bit reversal, a digit reversal or a stride permutation reads ``X[perm(i)]`` with
``perm(i) = Σ_b ((i // 2^b) % 2) · 2^(L-1-b)``.  Its gradient holds the delta
``δ(j, perm(i))``, and the plain div/mod elimination (one quotient and one remainder per
``//``/``%``, then Smith normal form and Fourier–Motzkin) leaves ``L - 1`` free parameters
whose projection grows with the number of bits: the stage stays dense, ``n²`` work.  Two
exact rules make such maps bijections the solver can invert:

1. **Digit split** (:func:`split_digits`).  A summation variable ``0 <= v < n`` that appears
   only through *windows* ``(v // a) % (b / a)`` whose cut points ``a, b`` form a chain of
   divisors ``1 = c_0 | c_1 | ... | c_K`` is replaced by its digits:
   ``v = Σ_l c_l·d_l`` with ``0 <= d_l < c_(l+1) / c_l`` (the top digit up to
   ``ceil(n / c_K)``, with ``v < n`` kept as a condition when ``c_K`` does not divide
   ``n``).  Every window is then a sum of digits: ``x // c`` and ``x % c`` of an affine
   ``x = c·H + L`` whose part ``L`` lies in ``[0, c)`` for every digit value are ``H`` and
   ``L`` exactly (:func:`fold_digits`).  ``perm(i)`` becomes ``Σ_b 2^(L-1-b)·d_b``: affine.
2. **Mixed-radix inversion** (:func:`pin_digits`).  An equation ``Σ_u a_u·u = r`` over
   unknowns with box bounds, shifted to ``Σ_l c_l·w_l = r'`` with ``0 <= w_l <= R_l`` and
   ``c_1 < c_2 < ...``, has at most one solution when the coefficients form a divisor
   chain (``c_l | c_(l+1)``) and grow faster than the digits below them can add up
   (``c_(l+1) > Σ_(m<=l) c_m·R_m``): then ``w_l = (r' % c_(l+1)) // c_l`` below the top and
   ``w_K = r' // c_K``, under the condition ``r' % c_1 == 0``.  (Telescoping,
   ``Σ_l c_l·w_l = r' - r' % c_1``; uniqueness is the usual mixed-radix argument: reduce
   modulo ``c_(l+1)`` and every higher term vanishes.)  The unknowns are pinned — no
   loop, no projection — and their box bounds become conditions on the output variables;
   those below the top hold for every value of ``r'`` and are handed on as known facts.

Together they turn the bit-reversal gradient into the gather ``g[perm^-1(j)]`` at the
forward's cost, at every size.  Zero elimination uses them when they leave fewer summation
loops than the plain elimination (:func:`tecomp.passes.zero_elimination.eliminate.solve_domain`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tecomp import expr as E
from tecomp.functor import ExprMutator, fresh_name, substitute, walk
from tecomp.solvers.affine import Affine

from .bridge import AffineBridge
from .terms import Term

__all__ = ["DigitSplit", "Pinned", "fold_digits", "pin_digits", "split_digits"]


@dataclass
class DigitSplit:
    """A term rewritten over digits, and each replaced variable's value in its digits."""

    term: Term
    values: dict[E.Var, E.Expr]


@dataclass
class Pinned:
    """What :func:`pin_digits` solved: values of unknowns (affine in atoms and parameters),
    conditions on the parameters, and facts (``>= 0``) that hold for every parameter value."""

    values: dict[str, Affine]
    conditions: list[E.Expr]
    facts: list[Affine]


def _const(e: E.Expr) -> int | None:
    return int(e.value) if isinstance(e, E.Const) and isinstance(e.value, int) else None


def _window(e: E.Expr, v: E.Var) -> tuple[int, int | None] | None:
    """``(a, b)`` when ``e`` is ``(v // a) % (b / a)`` (``b`` None: no modulo), else None."""
    if e == v:
        return 1, None
    if not isinstance(e, (E.FloorDiv, E.Mod)):
        return None
    c = _const(e.b)
    inner = _window(e.a, v)
    if c is None or c <= 0 or inner is None:
        return None
    a, b = inner
    if isinstance(e, E.FloorDiv):
        if b is not None and b % (a * c):
            return None
        return a * c, b
    if b is not None and b % (a * c):
        return None
    return a, a * c


def _cuts(exprs: list[E.Expr], v: E.Var) -> set[int] | None:
    """The cut points of ``v``'s windows in ``exprs``; None when ``v`` is also used under a
    ``//`` or ``%`` that is not a window of ``v`` alone."""
    cuts: set[int] = set()
    for root in exprs:
        for x in walk(root):
            if not isinstance(x, (E.FloorDiv, E.Mod)) or v not in _free(x):
                continue
            w = _window(x, v)
            if w is None:
                return None
            cuts.add(w[0])
            if w[1] is not None:
                cuts.add(w[1])
    return cuts


def _free(e: E.Expr) -> set[E.Var]:
    return {x for x in walk(e) if isinstance(x, E.Var)}


def split_digits(term: Term, taken: set[str]) -> DigitSplit | None:
    """``term`` with its windowed summation variables replaced by digits (rule 1), or None
    when no variable qualifies."""
    exprs = [x for d in term.deltas for x in d] + list(term.conds)
    axes: list[E.IterVar] = []
    values: dict[E.Var, E.Expr] = {}
    ranges: dict[str, int] = {}
    conds: list[E.Expr] = []
    for ax in term.axes:
        lo, n = _const(ax.lo), _const(ax.extent)
        cuts = _cuts(exprs, ax.var) if lo == 0 and n is not None and n >= 2 else None
        chain = sorted(c for c in cuts or () if 1 < c < (n or 0))
        if not chain or any(b % a for a, b in zip(chain, chain[1:])):
            axes.append(ax)
            continue
        bases = [1] + chain
        extents = [b // a for a, b in zip(bases, chain)] + [-(-n // chain[-1])]
        value: E.Expr | None = None
        for base, ext in zip(bases, extents):
            d = E.Var(fresh_name("d", taken), ax.var.dtype)
            taken.add(d.name)
            axes.append(E.IterVar(d, E.Const(0, "int64"), E.Const(ext, "int64"), ax.kind))
            ranges[d.name] = ext - 1
            term_d = d if base == 1 else E.mul(base, d)
            value = term_d if value is None else E.add(value, term_d)
        assert value is not None
        if chain[-1] * extents[-1] != n:
            conds.append(E.compare(E.LT, value, n))
        values[ax.var] = value
    if not values:
        return None

    def rewrite(e: E.Expr) -> E.Expr:
        return fold_digits(substitute(e, values), ranges)

    new = Term(axes, [rewrite(c) for c in term.conds] + conds,
               [(rewrite(a), rewrite(b)) for a, b in term.deltas], term.factor, term.sign)
    return DigitSplit(new, values)


class _FoldDigits(ExprMutator):
    def __init__(self, ranges: dict[str, int]) -> None:
        super().__init__()
        self.ranges = ranges

    def _divmod(self, e: E.Expr) -> E.Expr:
        out = self._binary(e)
        if not isinstance(out, (E.FloorDiv, E.Mod)):
            return out
        c = _const(out.b)
        bridge = AffineBridge(set())
        x = bridge.to_affine(out.a)
        if c is None or c <= 0 or x is None or bridge.atom_exprs:
            return out
        if any(v not in self.ranges for v in x.variables):
            return out
        high = Affine({v: k // c for v, k in x.items() if k % c == 0}, x.const // c)
        low = Affine({v: k for v, k in x.items() if k % c}, x.const % c)
        lo = low.const + sum(min(0, k * self.ranges[v]) for v, k in low.items())
        hi = low.const + sum(max(0, k * self.ranges[v]) for v, k in low.items())
        if lo < 0 or hi >= c:
            return out
        names = {v: E.Var(v, "int64") for v in x.variables}
        return bridge.to_expr(high if isinstance(out, E.FloorDiv) else low, names)

    visit_FloorDiv = visit_Mod = _divmod


def fold_digits(e: E.Expr, ranges: dict[str, int]) -> E.Expr:
    """``e`` with every ``x // c`` and ``x % c`` of an affine ``x`` in digits (``0 <= d <=
    ranges[d]``) split exactly into its high and low parts where the low part stays in
    ``[0, c)``."""
    return _FoldDigits(ranges).visit(e)


def _boxes(ineqs: list[Affine], unknowns: list[str]) -> dict[str, tuple[int | None, int | None]]:
    """Constant bounds of each unknown read off its one-variable inequalities."""
    box: dict[str, tuple[int | None, int | None]] = {u: (None, None) for u in unknowns}
    for g in ineqs:
        names = list(g.variables)
        if len(names) != 1 or names[0] not in box:
            continue
        u = names[0]
        a, k = g.coeff(u), g.const
        lo, hi = box[u]
        if a > 0:  # a·u + k >= 0: u >= ceil(-k / a)
            b = -(k // a)
            lo = b if lo is None else max(lo, b)
        else:  # u <= floor(k / -a)
            b = k // -a
            hi = b if hi is None else min(hi, b)
        box[u] = (lo, hi)
    return box


def _pin_one(e: Affine, unknowns: list[str], box, bridge: AffineBridge):
    """The values of ``e``'s unknowns when ``e == 0`` pins them all (rule 2), else None."""
    us = sorted((u for u in unknowns if e.coeff(u)), key=lambda u: abs(e.coeff(u)))
    if len(us) < 2:
        return None
    if sum(e.coeff(u) < 0 for u in us) * 2 > len(us):
        e = -e  # mostly negative (``δ(j, perm(i))``): shift from the lower bounds instead
    coeffs = [abs(e.coeff(u)) for u in us]
    below = 0
    for k, (u, c) in enumerate(zip(us, coeffs)):
        lo, hi = box[u]
        top = k == len(us) - 1
        if (lo if e.coeff(u) > 0 else hi) is None or (not top and (lo is None or hi is None)):
            return None
        if k and (c <= below or c % coeffs[k - 1]):
            return None
        if not top:
            below += c * (hi - lo)
    # Σ a_u·u = -rest; shift every unknown to a digit w_u >= 0 with coefficient |a_u|
    rest = e - sum((Affine.var(u) * e.coeff(u) for u in us), Affine())
    shifted = -rest
    for u in us:
        a, (lo, hi) = e.coeff(u), box[u]
        shifted = shifted - (a * lo if a > 0 else a * hi)
    r = bridge.to_expr(shifted)
    values: dict[str, Affine] = {}
    facts: list[Affine] = []
    for k, u in enumerate(us):
        c = coeffs[k]
        if k == len(us) - 1:
            w = E.floordiv(r, c)
        else:
            m = E.mod(r, coeffs[k + 1])
            w = m if c == 1 else E.floordiv(m, c)
        aff = bridge.atom(w)
        if k < len(us) - 1:
            facts += [aff, Affine.constant(coeffs[k + 1] // c - 1) - aff]
        a, (lo, hi) = e.coeff(u), box[u]
        values[u] = aff + lo if a > 0 else Affine.constant(hi) - aff
    conds = [] if coeffs[0] == 1 else [E.compare(E.EQ, E.mod(r, coeffs[0]), 0)]
    return values, conds, facts


def pin_digits(eqs: list[Affine], ineqs: list[Affine], unknowns: list[str],
               bridge: AffineBridge) -> tuple[list[Affine], list[Affine], list[str], Pinned]:
    """Apply rule 2 to every equation it fits, substituting as it goes: the remaining
    equations, inequalities and unknowns, and what was pinned."""
    pinned = Pinned({}, [], [])
    eqs, ineqs, unknowns = list(eqs), list(ineqs), list(unknowns)
    progress = True
    while progress:
        progress = False
        box = _boxes(ineqs, unknowns)
        for e in eqs:
            got = _pin_one(e, unknowns, box, bridge)
            if got is None:
                continue
            values, conds, facts = got
            pinned.values.update(values)
            pinned.conditions += conds
            pinned.facts += facts
            eqs = [x.substitute(values) for x in eqs if x is not e]
            ineqs = [x.substitute(values) for x in ineqs]
            unknowns = [u for u in unknowns if u not in values]
            progress = True
            break
    return eqs, ineqs, unknowns, pinned
