"""Exact loop bounds, with strides, for the integer points of a :class:`System`.

:func:`loop_bounds` turns a system and a variable order (outermost first) into one loop
per variable; iterating the nest visits exactly the integer points of the system
(projected on the order), in lexicographic order, with no guard in any loop body.  Only
conditions on the parameters alone remain (:attr:`LoopNest.context`), checked once
before the nest.

The loop structure (plain data, for a code generator)::

    for each loop L (outermost first):
        for each let in L.lets:  let.name = floor(let.expr / let.divisor)
        lo = max(ceil(b.expr / b.divisor) for b in L.lower)
        hi = min(floor(b.expr / b.divisor) for b in L.upper)
        if L.step == 1: start = lo
        else:           r = L.residue.expr / L.residue.divisor     (exact division)
                        start = lo + ((r - lo) mod L.step)          (mod: non-negative)
        for L.var = start, start + L.step, ... while L.var <= hi: <inner loops>

Algorithm (design in the project's zero-elimination notes; the theory is Urban & van der
Smagt 2017, secs. 4.1–4.2, plus Pugh's Omega test for the integer steps):

1. Existential variables (those not in the order) are removed from the equalities
   (Omega-test style: substitute through a unit coefficient, or through the smallest one,
   keeping the congruence it implies — the "mod-hat" step, with symmetric residues so
   that coefficients shrink).
2. Remaining existentials occur only in inequalities.  One that is unbounded on a side is
   dropped; one whose lower/upper pairs are all exact (:func:`pair_is_exact`) is
   eliminated by FM; one pinned to a single value by a window ``c*e <= u <= c*e + c-1``
   becomes a *let* ``e = floor(u/c)``; one with a single lower (upper) bound becomes the
   let of its least (greatest) witness.  Otherwise the exact projection comes from isl
   (divisions made explicit) and the procedure runs once more.
3. The congruences and equalities on parameters and loop variables define an affine
   lattice; its lower-triangular Hermite basis, in loop order, gives each variable a step
   and a residue class depending on the outer variables (``j = i (mod 4)``);
   see :mod:`tecomp.solvers.lattice`.
4. Fourier–Motzkin with integer tightening, innermost column first: the constraints in
   which a loop variable is innermost are its bounds, exact for given outer values; outer
   bounds are rational shadows, so an outer value without inner points just gives an
   empty inner range.  Lets are eliminated like variables; original constraints in which
   a let is innermost must be eliminated exactly (else the set is not a single strided
   nest, e.g. ``{i : i mod 4 <= 1}``, and :class:`NotImplementedError` is raised).

Worked example, the stride-2 convolution input gradient (1-D, kernel 3, see also
:mod:`tecomp.solvers.integer_system`): ``{[j, ry] : exists oy: j = 2*oy + ry, 0 <= ry < 3,
0 <= oy < OH, 0 <= j < H}`` in the order ``(j, ry)``.  Step 1 solves the equality for the
existential ``oy`` (coefficient 2, loop variables stay): ``oy = (j - ry)/2`` with the
congruence ``j - ry = 0 (mod 2)``, and substitutes it into ``0 <= oy < OH``.  Step 3 gives
``ry`` the step 2 and the residue ``ry = j (mod 2)``.  Step 4 gives
``0 <= j <= min(H - 1, 2*OH)`` and ``max(0, j - 2*OH + 2) <= ry <= min(2, j)``: the loops
isl generates, without a guard.  With dilation 2 (``j = 2*oy + 2*ry``) the congruence is
``j = 0 (mod 2)`` and the outer loop itself steps by 2.

TVM (``src/te/autodiff/ad_simplify.cc``, ``SolveLinearInequalities``) keeps the
divisibility conditions as ``if`` guards in the loop body; here they become steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from .affine import Affine, Congruence
from .inequalities import combine_pair, pair_is_exact, tighten
from .lattice import residue_lattice
from .system import System, _subst_rational, fresh_name

__all__ = ["Bound", "Let", "Loop", "LoopNest", "loop_bounds"]

_ZERO = Affine.constant(0)


@dataclass(frozen=True, slots=True)
class Bound:
    """``expr / divisor`` (``divisor > 0``), rounded up in a lower bound, down in an upper."""

    expr: Affine
    divisor: int = 1

    def ceil(self, env: Mapping[str, int]) -> int:
        return -(-self.expr.evaluate(env) // self.divisor)

    def floor(self, env: Mapping[str, int]) -> int:
        return self.expr.evaluate(env) // self.divisor

    def render(self, rounding: str) -> str:
        return str(self.expr) if self.divisor == 1 else f"{rounding}(({self.expr})/{self.divisor})"


@dataclass(frozen=True, slots=True)
class Let:
    """A local integer ``name = floor(expr / divisor)`` of outer variables and parameters."""

    name: str
    expr: Affine
    divisor: int


@dataclass(frozen=True, slots=True)
class Loop:
    """One loop of a :class:`LoopNest` (see the module docstring for the semantics).

    ``var >= max(ceil(b.expr/b.divisor) for b in lower)``,
    ``var <= min(floor(b.expr/b.divisor) for b in upper)``,
    ``var = residue.expr/residue.divisor (mod step)`` (exact division; ignore if step 1).
    ``lets`` are evaluated in order before the bounds.
    """

    var: str
    lower: tuple[Bound, ...]
    upper: tuple[Bound, ...]
    step: int = 1
    residue: Bound = Bound(_ZERO, 1)
    lets: tuple[Let, ...] = ()

    def range(self, env: dict[str, int]) -> range:
        """The values of ``var`` for the outer values in ``env`` (lets are added to it)."""
        for let in self.lets:
            env[let.name] = let.expr.evaluate(env) // let.divisor
        lo = max(b.ceil(env) for b in self.lower)
        hi = min(b.floor(env) for b in self.upper)
        if self.step != 1:
            r, rem = divmod(self.residue.expr.evaluate(env), self.residue.divisor)
            assert rem == 0, "residue division must be exact on the lattice"
            lo += (r - lo) % self.step
        return range(lo, hi + 1, self.step)

    def __str__(self) -> str:
        lo = _minmax("max", [b.render("ceil") for b in self.lower])
        hi = _minmax("min", [b.render("floor") for b in self.upper])
        lets = "".join(f"{x.name} = floor(({x.expr})/{x.divisor}); " for x in self.lets)
        if self.step == 1:
            return f"{lets}for {self.var} in [{lo}, {hi}]"
        r = self.residue.render("exact")
        stride = f"step {self.step}, {self.var} = {r} mod {self.step}"
        return f"{lets}for {self.var} in [{lo}, {hi}] {stride}"


def _minmax(fn: str, items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{fn}({', '.join(items)})"


@dataclass(frozen=True, slots=True)
class LoopNest:
    """Loops, outermost first, and the ``context``: a :class:`System` on the parameters
    alone that must hold for the nest to have points (checked once, outside the nest)."""

    loops: tuple[Loop, ...]
    context: System

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(lp.var for lp in self.loops)

    def enumerate(self, params: Mapping[str, int] | None = None) -> Iterator[tuple[int, ...]]:
        """Iterate the nest: the points in lexicographic order of :attr:`order`."""
        env = dict(params or {})
        if not self.context.contains(env):
            return
        yield from self._walk(0, env)

    def _walk(self, k: int, env: dict[str, int]) -> Iterator[tuple[int, ...]]:
        loop = self.loops[k]
        last = k == len(self.loops) - 1
        for v in loop.range(env):
            env[loop.var] = v
            if last:
                yield tuple(env[lp.var] for lp in self.loops)
            else:
                yield from self._walk(k + 1, env)

    def __str__(self) -> str:
        lines = [f"if {self.context}:"] if self.context.inequalities or \
            self.context.equalities or self.context.congruences else []
        indent = len(lines)
        for depth, loop in enumerate(self.loops):
            lines.append("  " * (depth + indent) + str(loop))
        return "\n".join(lines)


class _NeedsIsl(Exception):
    """Hand elimination of an existential would be inexact."""


def loop_bounds(system: System, order: Sequence[str]) -> LoopNest:
    """Exact loop bounds for the variables ``order`` (outermost first) of ``system``.

    Variables of the system not in ``order`` are existential (projected out exactly).
    Raises ``ValueError`` for an unbounded variable, ``NotImplementedError`` when the
    projected set is not one strided loop nest (a union of such nests, e.g. i mod 4 <= 1).
    """
    order = tuple(order)
    if not order or len(set(order)) != len(order) or set(order) - set(system.variables):
        raise ValueError(f"order {order} must list distinct variables of the system (>= 1)")
    try:
        return _generate(system, order)
    except _NeedsIsl:
        pass
    from .isl_bridge import exact_projection

    pieces = exact_projection(system, order)
    if len(pieces) != 1:
        raise NotImplementedError(
            f"the set is a union of {len(pieces)} pieces; no single loop nest without "
            "guards enumerates it")
    try:
        return _generate(pieces[0], order)
    except _NeedsIsl:
        raise NotImplementedError(
            "the projected set is not a strided loop nest (a residue range such as "
            "i mod 4 <= 1 needs a union of nests)") from None


# --------------------------------------------------------------------------------------------
# The generator.  Constraints in the FM phase carry a tag: "E" original (must be enforced
# exactly), "D" definition of a let, "R" derived (implied; only tightens outer loops).

_Tagged = tuple[Affine, str]


def _generate(system: System, order: tuple[str, ...]) -> LoopNest:
    s = system.simplify()
    params = s.params
    taken = set(s.names)
    exist = [v for v in s.variables if v not in order]
    eqs = list(s.equalities)
    ineqs = list(s.inequalities)
    congs: list[tuple[Affine, int]] = []
    ex_set = set(exist)
    for c in s.congruences:
        if c.expr.variables & ex_set:
            f = fresh_name("_f", taken)
            taken.add(f)
            exist.append(f)
            eqs.append(c.expr - Affine.var(f, c.modulus))
        else:
            congs.append((c.expr, c.modulus))
    if not _eliminate_existential_equalities(eqs, ineqs, congs, exist, taken):
        return _empty(order, params)
    lets: list[Let] = []
    tagged = _resolve_existentials(ineqs, exist, lets, order, params)
    lattice = residue_lattice(params, order, eqs, congs)
    if lattice is None:
        return _empty(order, params)
    for e in eqs + list(lattice.pinned):
        tagged += [(e, "E"), (-e, "E")]
    residues = {v: Bound(*r) for v, r in lattice.residues.items()}
    return _fourier_motzkin(params, order, tagged, lets, lattice.steps, residues,
                            lattice.param_congruences)


def _empty(order: tuple[str, ...], params: tuple[str, ...]) -> LoopNest:
    loops = tuple(Loop(v, (Bound(_ZERO),), (Bound(Affine.constant(-1)),)) for v in order)
    return LoopNest(loops, System((), params, (), (Affine.constant(-1),)))


def _sym_mod(c: int, m: int) -> int:
    r = c % m
    return r - m if 2 * r > m else r


def _eliminate_existential_equalities(eqs: list[Affine], ineqs: list[Affine],
                                      congs: list[tuple[Affine, int]], exist: list[str],
                                      taken: set[str]) -> bool:
    """Step 1, in place.  Returns False when the system is found empty."""
    while True:
        best: tuple[int, str, int] | None = None
        for idx, e in enumerate(eqs):
            for v in exist:
                c = e.coeff(v)
                if c and (best is None or abs(c) < abs(best[2])):
                    best = (idx, v, c)
        if best is None:
            return True
        idx, v, a = best
        rest = eqs.pop(idx).drop(v)
        sol = {v: (-rest, a) if a > 0 else (rest, -a)}
        eqs[:] = [_subst_rational(e, sol)[0] for e in eqs]
        ineqs[:] = [t for e in ineqs if (t := tighten(_subst_rational(e, sol)[0])) is not True]
        if any(t is False for t in ineqs):
            return False
        exist.remove(v)
        m = abs(a)
        if m == 1:
            continue
        red = Affine({k: _sym_mod(c, m) for k, c in rest.coeffs.items()}, rest.const % m)
        if red.variables & set(exist):
            f = fresh_name("_f", taken)
            taken.add(f)
            exist.append(f)
            eqs.append(red - Affine.var(f, m))
        else:
            c = Congruence.make(red, m)
            if c is False:
                return False
            if c is not True:
                congs.append((c.expr, c.modulus))


def _resolve_existentials(ineqs: list[Affine], exist: list[str], lets: list[Let],
                          order: tuple[str, ...], params: tuple[str, ...]) -> list[_Tagged]:
    """Step 2: returns the tagged constraints; appends the lets it defines."""
    cons: list[_Tagged] = [(e, "E") for e in ineqs]
    depth = {v: k for k, v in enumerate(order)}
    while exist:
        progress = False
        for v in list(exist):
            mine = [c for c in cons if c[0].coeff(v)]
            lows = [c for c in mine if c[0].coeff(v) > 0]
            ups = [c for c in mine if c[0].coeff(v) < 0]
            if lows and ups and not all(pair_is_exact(lo[0], up[0], v)
                                        for lo in lows for up in ups):
                continue
            cons = [c for c in cons if not c[0].coeff(v)]
            cons += [(combine_pair(lo[0], up[0], v), "E") for lo in lows for up in ups]
            exist.remove(v)
            progress = True
        if progress or not exist:
            continue
        best = None
        known = set(depth) | set(params) | {x.name for x in lets}
        for v in exist:
            for expr, div, defs in _witnesses(cons, v):
                if expr.variables <= known:
                    d = max((depth.get(n, -1) for n in expr.variables), default=-1)
                    if best is None or d < best[0]:
                        best = (d, v, expr, div, defs)
        if best is None:
            raise _NeedsIsl
        _, v, expr, div, defs = best
        lets.append(Let(v, expr, div))
        exist.remove(v)
        cons = [c for c in cons if not any(c[0] == d for d in defs)]
        cons += [(d, "D") for d in defs]
    return cons


def _witnesses(cons: list[_Tagged], v: str) -> Iterator[tuple[Affine, int, list[Affine]]]:
    """Candidate definitions ``v = floor(expr/div)`` with their two defining constraints."""
    lows = [c[0] for c in cons if c[0].coeff(v) > 0]
    ups = [c[0] for c in cons if c[0].coeff(v) < 0]
    for up in ups:
        b = -up.coeff(v)
        u = up.drop(v)
        for lo in lows:
            s = lo + up
            if lo.coeff(v) == b and s.is_constant() and 0 <= s.const < b:  # unique value
                yield u, b, [up, Affine.var(v, b) - u + (b - 1)]
    if len(lows) == 1:
        a = lows[0].coeff(v)
        neg = -lows[0].drop(v)
        yield neg + (a - 1), a, [lows[0], neg + (a - 1) - Affine.var(v, a)]
    if len(ups) == 1:
        b = -ups[0].coeff(v)
        u = ups[0].drop(v)
        yield u, b, [ups[0], Affine.var(v, b) - u + (b - 1)]


def _merge(old: _Tagged, new: _Tagged) -> _Tagged:
    """Keep the stronger of two parallel constraints, with the tag that keeps the checks."""
    (strong, ts), (weak, tw) = (old, new) if (old[0].const, _RANK[old[1]]) <= (
        new[0].const, _RANK[new[1]]) else (new, old)
    if ts == "R" and tw == "D":
        return strong, "D"
    return strong, ts


_RANK = {"D": 0, "E": 1, "R": 2}


def _add(pool: dict[frozenset, _Tagged], e: Affine, tag: str) -> bool:
    t = tighten(e)
    if t is True:
        return True
    if t is False:
        return False
    key = frozenset(t.coeffs.items())
    old = pool.get(key)
    pool[key] = (t, tag) if old is None else _merge(old, (t, tag))
    return True


def _fourier_motzkin(params, order, tagged, lets, steps, residues, param_congs) -> LoopNest:
    """Step 4: bounds innermost first; lets are eliminated as columns."""
    key: dict[str, tuple[int, int]] = {p: (0, 0) for p in params}
    for k, v in enumerate(order):
        key[v] = (2 * k + 1, 0)
    for idx, let in enumerate(lets):
        slot = max((key[n][0] + (key[n][0] & 1) for n in let.expr.variables), default=0)
        key[let.name] = (slot, idx + 1)
    let_by_name = {x.name: x for x in lets}
    pool: dict[frozenset, _Tagged] = {}
    for e, tag in tagged:
        if not _add(pool, e, tag):
            return _empty(order, params)
    bounds: dict[str, tuple[tuple[Bound, ...], tuple[Bound, ...]]] = {}
    for col in sorted((c for c in key if key[c] != (0, 0)), key=key.__getitem__, reverse=True):
        lows, ups = [], []
        for k2, (e, tag) in list(pool.items()):
            c = e.coeff(col)
            if c:
                (lows if c > 0 else ups).append((e, tag))
                del pool[k2]
        if col in let_by_name:
            for lo, tl in lows:
                for up, tu in ups:
                    if tl == "D" and tu == "D":
                        continue
                    tag = "R" if "R" in (tl, tu) else "E"
                    if tag == "E" and not pair_is_exact(lo, up, col):
                        raise _NeedsIsl
                    if not _add(pool, combine_pair(lo, up, col), tag):
                        return _empty(order, params)
            continue
        if not lows or not ups:
            raise ValueError(f"variable {col!r} has no {'lower' if not lows else 'upper'} bound")
        bounds[col] = (
            tuple(dict.fromkeys(Bound(-e.drop(col), e.coeff(col)) for e, _ in lows)),
            tuple(dict.fromkeys(Bound(e.drop(col), -e.coeff(col)) for e, _ in ups)),
        )
        for lo, _ in lows:
            for up, _ in ups:
                if not _add(pool, combine_pair(lo, up, col), "R"):
                    return _empty(order, params)
    context = System((), params, (), tuple(e for e, tag in pool.values() if tag == "E"),
                     tuple(param_congs))
    used: set[str] = set()
    for lo, up in bounds.values():
        for b in lo + up:
            used |= b.expr.variables
    loops = []
    for k, v in reversed(list(enumerate(order))):
        mine = [x for x in lets if key[x.name][0] == 2 * k]
        keep = []
        for x in reversed(mine):
            if x.name in used:
                keep.append(x)
                used |= x.expr.variables
        lo, up = bounds[v]
        loops.append(Loop(v, lo, up, steps[v], residues[v], tuple(reversed(keep))))
    return LoopNest(tuple(reversed(loops)), context)
