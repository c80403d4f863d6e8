"""Systems of affine constraints over named integer variables.

A :class:`System` describes the integer points ``{ x : constraints }`` of its
``variables``, for each value of its ``params`` (symbolic sizes such as ``n``).  It holds

* equalities ``e == 0``, inequalities ``e >= 0`` (both :class:`Affine`) and
* congruences ``e = 0 (mod m)`` (:class:`Congruence`), the form strides and ``%`` take.

Every name in a constraint must be declared as a variable or a parameter.  Systems are
immutable; operations return new systems.  Build one from objects (what an IR bridge does)
or from text (handy in tests)::

    j, oy, ry, H, OH = (Affine.var(v) for v in ("j", "oy", "ry", "H", "OH"))
    S = System(("j", "oy", "ry"), ("H", "OH"),
               equalities=(j - 2*oy - ry,),
               inequalities=(ry, 2 - ry, oy, OH - 1 - oy, j, H - 1 - j))
    S == System.parse(["j", "oy", "ry"], ["H", "OH"],
                      ["j == 2*oy + ry", "0 <= ry < 3", "0 <= oy < OH", "0 <= j < H"])

Congruences are ``Congruence.make(expr, m)`` objects or ``(expr, m)`` pairs.

Operations (the algorithms are cited where they live):

* :meth:`System.eliminate_equalities` solves the equalities over the integers
  (:func:`~tecomp.solvers.integer_system.solve_parametric`, Smith form) and substitutes
  the solution, introducing the kernel's free variables and the divisibility conditions it
  implies (Urban & van der Smagt 2017, sec. 4.1).  On the example, keeping ``j``, it gives
  ``ry = j - 2*oy`` and the system ``0 <= j - 2*oy < 3, 0 <= oy < OH, 0 <= j < H``.
* :meth:`System.eliminate` is Fourier–Motzkin with integer tightening
  (:mod:`tecomp.solvers.inequalities`, and Urban & van der Smagt sec. 4.2).  It is exact
  when the variable occurs in an equality (substitution) or only in congruences (lattice
  projection); otherwise it is exact on the rationals but the integer projection may be
  an over-approximation (the "dark shadow" issue), for which isl is the exact engine
  (:mod:`tecomp.solvers.isl_bridge`).  TVM's ``SolveLinearInequalities``
  (``src/arith/solve_linear_inequality.cc``) does the same FM on its IR, without
  tightening by the gcd and without congruences: it keeps the variable's bounds as
  ``a*x >= e`` and leaves rounding to its loop generator.
* :meth:`System.introduce_division` replaces ``x // c`` and ``x % c`` by new variables.
* :meth:`System.loop_bounds` generates exact strided loop bounds
  (:mod:`tecomp.solvers.loops`); :meth:`System.count` and :meth:`System.enumerate` go
  through isl.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .affine import Affine, AffineLike, Congruence, as_affine
from .inequalities import eliminate_inequalities, normalize_inequalities
from .integer_system import solve_parametric

if TYPE_CHECKING:
    from .loops import LoopNest

__all__ = ["System", "EqualityElimination", "fresh_name"]


def fresh_name(base: str, taken: Iterable[str]) -> str:
    """``base`` or ``base1``, ``base2``, ... whichever is not in ``taken``."""
    used = set(taken)
    if base not in used:
        return base
    k = 1
    while f"{base}{k}" in used:
        k += 1
    return f"{base}{k}"


@dataclass(frozen=True, slots=True)
class System:
    """Affine equalities, inequalities and congruences over named integer variables.

    ``variables`` are the set's dimensions (in order), ``params`` the symbolic constants.
    ``equalities`` are ``e == 0``, ``inequalities`` ``e >= 0``; congruences are
    :class:`Congruence` (``e = 0 mod m``).  Constructor arguments may be :class:`Affine`,
    ints or affine text; congruences may be given as ``(expr, modulus)`` pairs.
    """

    variables: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    equalities: tuple[Affine, ...] = ()
    inequalities: tuple[Affine, ...] = ()
    congruences: tuple[Congruence, ...] = field(default=())

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "variables", tuple(self.variables))
        set_(self, "params", tuple(self.params))
        names = self.variables + self.params
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate names among {names}")
        set_(self, "equalities", tuple(as_affine(e) for e in self.equalities))
        ineqs = [as_affine(e) for e in self.inequalities]
        congs: list[Congruence] = []
        for c in self.congruences:
            cc = c if isinstance(c, Congruence) else Congruence.make(as_affine(c[0]), c[1])
            if cc is False:
                ineqs.append(Affine.constant(-1))
            elif cc is not True:
                congs.append(cc)
        set_(self, "inequalities", tuple(ineqs))
        set_(self, "congruences", tuple(congs))
        declared = set(names)
        for e in self.equalities + self.inequalities + tuple(c.expr for c in congs):
            extra = e.variables - declared
            if extra:
                raise ValueError(f"undeclared names {sorted(extra)} in constraint on {e}")

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def parse(
        cls, variables: Sequence[str], params: Sequence[str], constraints: Iterable[str]
    ) -> System:
        """Build from text: ``"0 <= i < n"``, ``"j == 2*q + r"``, ``"i - j == 0 mod 4"``.

        Comparison chains are split into pairs; ``==``/``=`` with a trailing ``mod m`` (or
        ``(mod m)``) is a congruence.
        """
        eqs: list[Affine] = []
        ineqs: list[Affine] = []
        congs: list[tuple[Affine, int]] = []
        for text in constraints:
            _parse_constraint(text, eqs, ineqs, congs)
        return cls(tuple(variables), tuple(params), tuple(eqs), tuple(ineqs), tuple(congs))

    def with_constraints(
        self,
        equalities: Iterable[AffineLike | str] = (),
        inequalities: Iterable[AffineLike | str] = (),
        congruences: Iterable[Congruence | tuple[AffineLike | str, int]] = (),
        variables: Iterable[str] = (),
    ) -> System:
        """A copy with more constraints (and more variables, declared first)."""
        return System(
            self.variables + tuple(variables),
            self.params,
            self.equalities + tuple(as_affine(e) for e in equalities),
            self.inequalities + tuple(as_affine(e) for e in inequalities),
            self.congruences + tuple(congruences),  # type: ignore[arg-type]
        )

    def introduce_division(
        self,
        numerator: AffineLike | str,
        divisor: int,
        quotient: str | None = None,
        remainder: str | None = None,
    ) -> tuple[System, str, str]:
        """Add variables ``q, r`` with ``numerator == divisor*q + r`` and ``0 <= r < divisor``.

        Returns ``(system, q, r)``; callers replace ``numerator // divisor`` by ``q`` and
        ``numerator % divisor`` by ``r`` (floor semantics, ``divisor > 0``).
        """
        if divisor <= 0:
            raise ValueError("divisor must be positive")
        num = as_affine(numerator)
        names = self.variables + self.params
        q = quotient or fresh_name("q", names)
        r = remainder or fresh_name("r", names + (q,))
        qa, ra = Affine.var(q), Affine.var(r)
        s = self.with_constraints(
            equalities=[num - qa * divisor - ra],
            inequalities=[ra, divisor - 1 - ra],
            variables=(q, r),
        )
        return s, q, r

    # -- queries -----------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """Variables then parameters."""
        return self.variables + self.params

    def contains(self, point: Mapping[str, int]) -> bool:
        """True when the values (of all variables and parameters) satisfy every constraint."""
        return (
            all(e.evaluate(point) == 0 for e in self.equalities)
            and all(e.evaluate(point) >= 0 for e in self.inequalities)
            and all(c.holds(point) for c in self.congruences)
        )

    def is_trivially_empty(self) -> bool:
        """True when :meth:`simplify` finds a contradiction (syntactic; see :meth:`is_empty`)."""
        s = self.simplify()
        return any(e.is_constant() and e.const < 0 for e in s.inequalities)

    # -- rewriting ---------------------------------------------------------------------------
    def substitute(self, mapping: Mapping[str, AffineLike | str]) -> System:
        """Replace variables by affine expressions; new names in them become variables."""
        sub = {k: as_affine(v) for k, v in mapping.items()}
        if set(sub) & set(self.params):
            raise ValueError("parameters cannot be substituted; fix them with equalities")
        kept = [v for v in self.variables if v not in sub]
        declared = set(kept) | set(self.params)
        for e in sub.values():
            for n in sorted(e.variables - declared):
                kept.append(n)
                declared.add(n)
        return System(
            tuple(kept),
            self.params,
            tuple(e.substitute(sub) for e in self.equalities),
            tuple(e.substitute(sub) for e in self.inequalities),
            tuple(c.substitute(sub) for c in self.congruences),  # type: ignore[misc]
        )

    def simplify(self) -> System:
        """Normalise: gcd-tighten, drop trivial/duplicate/dominated constraints.

        A contradiction yields a system whose only constraint is ``-1 >= 0``.
        """
        empty = System(self.variables, self.params, (), (Affine.constant(-1),))
        eqs: dict[Affine, None] = {}
        for e in self.equalities:
            g = e.gcd()
            if g == 0:
                if e.const:
                    return empty
                continue
            if e.const % g:
                return empty
            e = e.exact_div(g)
            first = min(e.coeffs)
            eqs[-e if e.coeff(first) < 0 else e] = None
        ineqs = normalize_inequalities(self.inequalities)
        if ineqs is None:
            return empty
        congs = {c: None for c in self.congruences}
        return System(self.variables, self.params, tuple(eqs), tuple(ineqs), tuple(congs))

    def eliminate_equalities(self, keep: Iterable[str] = ()) -> tuple[System, EqualityElimination]:
        """Solve all equalities over the integers and substitute the solution.

        Variables not in ``keep`` that occur in an equality are solved for, in terms of the
        parameters, ``keep`` and new free variables (a basis of the integer kernel; a free
        variable that equals a solved variable keeps its name).  The result has no equality
        mentioning a solved variable; the divisibility conditions of the solution are added
        as congruences on ``keep`` and the parameters.  Returns the new system and the
        transform (maps both ways).
        """
        fixed = set(keep) | set(self.params)
        solve = [v for v in self.variables
                 if v not in fixed and any(e.coeff(v) for e in self.equalities)]
        if not solve:
            return self, EqualityElimination((), (), (), ())
        A = [[e.coeff(v) for v in solve] for e in self.equalities]
        b = [-(e.substitute({v: 0 for v in solve})) for e in self.equalities]
        sol = solve_parametric(A, b)
        if sol is None:
            empty = System(tuple(v for v in self.variables if v not in solve), self.params,
                           (), (Affine.constant(-1),))
            return empty, EqualityElimination(tuple(solve), (), (), ())
        taken = set(self.names)
        free: list[str] = []
        for j in range(sol.num_free):
            name = None
            for i, v in enumerate(solve):
                row = sol.kernel[i]
                if (row[j] == 1 and sum(map(abs, row)) == 1 and not sol.particular[i]
                        and v not in free):
                    name = v
                    break
            free.append(name or fresh_name("t", taken | set(free)))
        exprs = dict(zip(solve, sol.expressions(free)))
        new_vars: list[str] = []
        for v in self.variables:  # a reused name keeps its place; fresh ones go first
            if v == solve[0]:
                new_vars.extend(f for f in free if f not in exprs)
            if v not in exprs or v in free:
                new_vars.append(v)
        ineqs = [_subst_rational(e, exprs)[0] for e in self.inequalities]
        congs: list[Congruence | tuple[Affine, int]] = list(sol.conditions)
        for c in self.congruences:
            e, d = _subst_rational(c.expr, exprs)
            congs.append((e, c.modulus * d))
        result = System(tuple(new_vars), self.params, sol.equalities, tuple(ineqs), tuple(congs))
        inverse = tuple(
            (f, sum((Affine.var(v) * k for v, k in zip(solve, row) if k), Affine.constant(0)))
            for f, row in zip(free, sol.inverse)
        )
        return result, EqualityElimination(
            tuple(solve), tuple(free), tuple((v, *exprs[v]) for v in solve), inverse
        )

    def eliminate(self, name: str) -> System:
        """Project out ``name`` (Fourier–Motzkin with integer tightening).

        Exact when ``name`` occurs in an equality or only in equalities and congruences;
        otherwise the rational projection, tightened, which may over-approximate the
        integer projection (see the module docstring).
        """
        if name not in self.variables:
            raise ValueError(f"{name!r} is not a variable of the system")
        rest = tuple(v for v in self.variables if v != name)
        pivot = min((e for e in self.equalities if e.coeff(name)),
                    key=lambda e: abs(e.coeff(name)), default=None)
        if pivot is not None:
            a = pivot.coeff(name)
            sol = {name: (-pivot.drop(name), a) if a > 0 else (pivot.drop(name), -a)}
            eqs = [_subst_rational(e, sol)[0] for e in self.equalities if e is not pivot]
            ineqs = [_subst_rational(e, sol)[0] for e in self.inequalities]
            congs: list[Congruence | tuple[Affine, int]] = [(pivot.drop(name), abs(a))]
            for c in self.congruences:
                e, d = _subst_rational(c.expr, sol)
                congs.append((e, c.modulus * d))
            return System(rest, self.params, tuple(eqs), tuple(ineqs), tuple(congs)).simplify()
        with_name = [c for c in self.congruences if c.expr.coeff(name)]
        congs = [c for c in self.congruences if not c.expr.coeff(name)]
        ineqs_out, _ = eliminate_inequalities(self.inequalities, name)
        projected = _project_congruences(with_name, name) if with_name else []
        if ineqs_out is None or projected is None:
            ineqs_out = [Affine.constant(-1)]
        congs.extend(projected or ())
        return System(rest, self.params, self.equalities, tuple(ineqs_out), tuple(congs))

    def project_out(self, names: Iterable[str]) -> System:
        """:meth:`eliminate` each name in turn (equalities first, then FM)."""
        s = self
        for n in names:
            s = s.eliminate(n)
        return s.simplify()

    # -- loops, counting, isl ----------------------------------------------------------------
    def loop_bounds(self, order: Sequence[str]) -> LoopNest:
        """Exact loop bounds for ``order`` (outermost first); other variables are projected
        out.  See :func:`tecomp.solvers.loops.loop_bounds`."""
        from .loops import loop_bounds

        return loop_bounds(self, order)

    def to_isl(self, over: Sequence[str] | None = None) -> Any:
        """The ``isl.Set`` of the points of ``over`` (default: all variables)."""
        from .isl_bridge import to_isl_set

        return to_isl_set(self, over)

    def count(self, params: Mapping[str, int] | None = None,
              over: Sequence[str] | None = None) -> int | None:
        """Number of integer points (projected on ``over``); ``None`` when unbounded or
        when parameters are left symbolic.  Exact (isl ``count_val``)."""
        from .isl_bridge import count_points

        return count_points(self, params, over)

    def enumerate(self, params: Mapping[str, int] | None = None,
                  over: Sequence[str] | None = None) -> list[tuple[int, ...]]:
        """All integer points of ``over`` (default: all variables), lexicographically
        sorted, for the given parameter values (through isl; for tests)."""
        from .isl_bridge import enumerate_points

        return enumerate_points(self, params, over)

    def is_empty(self) -> bool:
        """Exact emptiness for all parameter values together (through isl)."""
        return bool(self.to_isl().is_empty())

    def __str__(self) -> str:
        parts = [f"{e} = 0" for e in self.equalities]
        parts += [f"{e} >= 0" for e in self.inequalities]
        parts += [str(c) for c in self.congruences]
        head = f"[{', '.join(self.params)}] -> " if self.params else ""
        body = " and ".join(parts)
        return f"{head}{{ [{', '.join(self.variables)}]{' : ' + body if body else ''} }}"


@dataclass(frozen=True, slots=True)
class EqualityElimination:
    """What :meth:`System.eliminate_equalities` substituted, with maps both ways.

    ``solutions`` holds ``(var, numerator, denominator)``: ``var = numerator / denominator``
    (exact division) in terms of ``free``, the kept variables and the parameters.
    ``inverse`` holds ``(free_var, expr)``: each free variable as an integer affine
    expression of the solved variables.
    """

    solved: tuple[str, ...]
    free: tuple[str, ...]
    solutions: tuple[tuple[str, Affine, int], ...]
    inverse: tuple[tuple[str, Affine], ...]

    def forward(self, point: Mapping[str, int]) -> dict[str, int]:
        """Values of the solved variables from a point of the new system."""
        out = {}
        for v, num, den in self.solutions:
            q, r = divmod(num.evaluate(point), den)
            if r:
                raise ValueError(f"{v} = ({num})/{den} is not an integer at {dict(point)}")
            out[v] = q
        return out

    def backward(self, point: Mapping[str, int]) -> dict[str, int]:
        """Values of the free variables from a point of the original system."""
        return {f: e.evaluate(point) for f, e in self.inverse}


def _subst_rational(e: Affine, sol: Mapping[str, tuple[Affine, int]]) -> tuple[Affine, int]:
    """``d * e`` with ``v := num/den`` substituted, ``d`` the lcm of the denominators used."""
    dens = [sol[v][1] for v in e.coeffs if v in sol]
    if not dens:
        return e, 1
    d = math.lcm(*dens)
    out = Affine({v: c for v, c in e.coeffs.items() if v not in sol}, e.const) * d
    for v, c in e.coeffs.items():  # simultaneous: a solution may mention solved names
        if v in sol:
            num, den = sol[v]
            out = out.axpy(c * (d // den), num)
    return out, d


def _project_congruences(congs: Sequence[Congruence], name: str) -> list[Congruence] | None:
    """Exact projection of ``name`` out of congruences that mention it; ``None``: empty."""
    k = len(congs)
    A = [[c.expr.coeff(name)] + [-c.modulus if j == i else 0 for j in range(k)]
         for i, c in enumerate(congs)]
    sol = solve_parametric(A, [-c.expr.drop(name) for c in congs])
    return None if sol is None else list(sol.conditions)


_CMP = re.compile(r"(<=|>=|==|≡|<|>|=)")
_MOD = re.compile(r"\(?\s*mod\s+(\d+)\s*\)?\s*$")


def _parse_constraint(text: str, eqs: list[Affine], ineqs: list[Affine],
                      congs: list[tuple[Affine, int]]) -> None:
    mod = _MOD.search(text)
    body = text[: mod.start()] if mod else text
    parts = _CMP.split(body)
    if len(parts) < 3:
        raise ValueError(f"no comparison in constraint {text!r}")
    exprs = [Affine.parse(p) for p in parts[0::2]]
    ops = parts[1::2]
    if mod:
        if len(ops) != 1 or ops[0] not in ("==", "=", "≡"):
            raise ValueError(f"'mod' needs a single equality: {text!r}")
        congs.append((exprs[0] - exprs[1], int(mod.group(1))))
        return
    for lhs, op, rhs in zip(exprs, ops, exprs[1:]):
        if op in ("==", "=", "≡"):
            eqs.append(lhs - rhs)
        elif op == "<=":
            ineqs.append(rhs - lhs)
        elif op == "<":
            ineqs.append(rhs - lhs - 1)
        elif op == ">=":
            ineqs.append(lhs - rhs)
        else:
            ineqs.append(lhs - rhs - 1)
