"""The bridge between integer IR expressions and the solvers' :class:`Affine` form.

Zero elimination reasons about index expressions as affine forms over named variables.
:class:`AffineBridge` converts an integer IR expression to an ``Affine``:

* variables, integer constants, ``+``, ``-``, negation and multiplication by a constant map
  directly;
* ``e // c`` and ``e % c`` (``c`` a positive constant) of an expression ``e`` that involves
  an *unknown* (a variable being solved for) introduce two new unknowns ``q`` and ``r``
  with ``e = c·q + r`` and ``0 <= r < c`` (the div/mod elimination of ZERO_ELIMINATION.md);
* anything else (a read of an index tensor, a product of variables, a division of
  expressions free of unknowns) becomes an *atom*: a fresh name standing for the opaque
  sub-expression.  An atom free of unknowns behaves like a parameter (its value is known
  wherever the unknowns are solved); an atom that involves unknowns blocks affine solving.

:meth:`AffineBridge.to_expr` maps an ``Affine`` (with ``numerator // denominator`` when the
solver needs it) back to an IR expression, atoms replaced by what they stand for.
"""

from __future__ import annotations

from tecomp import dtypes
from tecomp import expr as E
from tecomp.functor import free_vars
from tecomp.solvers.affine import Affine


class AffineBridge:
    """Converts integer IR expressions to affine forms over variable and atom names."""

    def __init__(self, unknowns: set[str]) -> None:
        self.unknowns = set(unknowns)
        self.atoms: dict[E.Expr, str] = {}
        self.atom_exprs: dict[str, E.Expr] = {}
        self.impure: set[str] = set()  # atoms whose value depends on an unknown
        self.divmods: dict[tuple[Affine, int], tuple[str, str]] = {}
        self.equations: list[Affine] = []  # new equalities (== 0) from div/mod elimination
        self.inequalities: list[Affine] = []  # new inequalities (>= 0)
        self.new_unknowns: list[str] = []
        self._counter = 0

    def _fresh(self, base: str) -> str:
        self._counter += 1
        return f"_{base}{self._counter}"

    def atom(self, e: E.Expr) -> Affine:
        name = self.atoms.get(e)
        if name is None:
            name = self._fresh("a")
            self.atoms[e] = name
            self.atom_exprs[name] = e
            if {v.name for v in free_vars(e)} & self.unknowns:
                self.impure.add(name)
        return Affine.var(name)

    def depends_on_unknowns(self, a: Affine) -> bool:
        return any(v in self.unknowns or v in self.impure for v in a.variables)

    def to_affine(self, e: E.Expr) -> Affine | None:
        """The affine form of an integer expression, or None for a non-integer one."""
        if not dtypes.is_int(e.dtype):
            return None
        return self._go(e)

    def _go(self, e: E.Expr) -> Affine:
        if isinstance(e, E.Var):
            return Affine.var(e.name)
        if isinstance(e, E.Const):
            return Affine.constant(int(e.value))
        if isinstance(e, E.Zero):
            return Affine.constant(0)
        if isinstance(e, E.Add):
            return self._go(e.a) + self._go(e.b)
        if isinstance(e, E.Sub):
            return self._go(e.a) - self._go(e.b)
        if isinstance(e, E.Neg):
            return -self._go(e.a)
        if isinstance(e, E.Mul):
            if isinstance(e.a, E.Const):
                return self._go(e.b) * int(e.a.value)
            if isinstance(e.b, E.Const):
                return self._go(e.a) * int(e.b.value)
        if isinstance(e, E.Cast) and dtypes.is_int(e.value.dtype):
            return self._go(e.value)
        if isinstance(e, (E.FloorDiv, E.Mod)) and isinstance(e.b, E.Const) and e.b.value > 0:
            inner = self._go(e.a)
            c = int(e.b.value)
            pure = not any(v in self.impure for v in inner.variables)
            if pure and self.depends_on_unknowns(inner):
                q, r = self._divmod(inner, c)
                return Affine.var(q if isinstance(e, E.FloorDiv) else r)
        return self.atom(e)

    def _divmod(self, inner: Affine, c: int) -> tuple[str, str]:
        key = (inner, c)
        if key not in self.divmods:
            q, r = self._fresh("q"), self._fresh("r")
            self.divmods[key] = (q, r)
            self.unknowns |= {q, r}
            self.new_unknowns += [q, r]
            self.equations.append(inner - Affine.var(q) * c - Affine.var(r))
            self.inequalities.append(Affine.var(r))
            self.inequalities.append(Affine.constant(c - 1) - Affine.var(r))
        return self.divmods[key]

    def to_expr(self, a: Affine, names: dict[str, E.Expr] | None = None,
                denominator: int = 1) -> E.Expr:
        """``a // denominator`` as an IR expression (int64); names map to expressions."""
        names = names or {}
        out: E.Expr | None = None
        # positive terms first, so that the text reads "j - t" rather than "-t + j"
        for v, c in sorted(a.coeffs.items(), key=lambda vc: (vc[1] < 0, vc[0])):
            if v in names:
                x = names[v]
            elif v in self.atom_exprs:
                x = E.cast(self.atom_exprs[v], "int64")
            else:
                x = E.Var(v, "int64")
            mag = x if abs(c) == 1 else E.mul(abs(c), x)
            if out is None:
                out = mag if c > 0 else E.neg(mag)
            else:
                out = E.add(out, mag) if c > 0 else E.sub(out, mag)
        if out is None:
            out = E.Const(a.const, "int64")
        elif a.const > 0:
            out = E.add(out, a.const)
        elif a.const < 0:
            out = E.sub(out, -a.const)
        if denominator != 1:
            out = E.floordiv(out, denominator)
        return out


def linear_condition(e: E.Expr, bridge: AffineBridge) -> list[Affine] | None:
    """``e`` (a conjunction of integer comparisons) as inequalities ``aff >= 0``, or None.

    Equalities come back as two opposite inequalities; any non-affine or non-integer part
    makes the whole condition None (the caller keeps it as a guard).
    """
    if isinstance(e, E.And):
        a, b = linear_condition(e.a, bridge), linear_condition(e.b, bridge)
        return None if a is None or b is None else a + b
    if isinstance(e, E.Const) and dtypes.is_bool(e.dtype):
        return [] if e.value else [Affine.constant(-1)]
    if not isinstance(e, E.CmpOp) or isinstance(e, E.NE):
        return None
    x, y = bridge.to_affine(e.a), bridge.to_affine(e.b)
    if x is None or y is None:
        return None
    if isinstance(e, E.LT):
        return [y - x - 1]
    if isinstance(e, E.LE):
        return [y - x]
    if isinstance(e, E.GT):
        return [x - y - 1]
    if isinstance(e, E.GE):
        return [x - y]
    return [x - y, y - x]  # EQ
