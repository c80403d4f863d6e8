"""Conversion between :class:`~tecomp.solvers.system.System` and islpy sets.

isl (Verdoolaege, "isl: An Integer Set Library for the Polyhedral Model", ICMS 2010) is
exact over the integers: projections keep existentially quantified divisions, and
``count_val`` counts points.  Here it serves as the oracle in the tests, for counting and
enumerating points, and as the engine of :func:`exact_projection`, which loop generation
falls back on when hand elimination of an existential variable would be inexact.

* :func:`to_isl_set` — parameters become isl parameters, the variables in ``over`` the set
  dimensions, the other variables existentials, each congruence ``e = 0 mod m`` an
  existential ``f`` with ``e = m*f``.
* :func:`from_isl` — each basic set back to a :class:`System`; isl's divisions
  ``floor(f/d)`` become variables ``e`` (not in the set dimensions) with their defining
  window ``0 <= f - d*e <= d - 1`` made explicit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import islpy as isl

from .affine import Affine
from .system import System, fresh_name

__all__ = [
    "to_isl_set",
    "to_isl_basic_set",
    "from_isl",
    "exact_projection",
    "count_points",
    "enumerate_points",
    "ast_code",
]


def to_isl_text(system: System, over: Sequence[str] | None = None,
                params: Mapping[str, int] | None = None) -> str:
    """isl syntax for ``system`` projected on ``over``, with ``params`` fixed if given."""
    over = tuple(system.variables if over is None else over)
    missing = set(over) - set(system.variables)
    if missing:
        raise ValueError(f"{sorted(missing)} are not variables of the system")
    fix = dict(params or {})
    exists = [v for v in system.variables if v not in over]
    taken = set(system.names)
    parts = [f"{e.partial(fix)} = 0" for e in system.equalities]
    parts += [f"{e.partial(fix)} >= 0" for e in system.inequalities]
    for c in system.congruences:
        f = fresh_name("_m", taken)
        taken.add(f)
        exists.append(f)
        parts.append(f"{c.expr.partial(fix)} = {c.modulus}*{f}")
    body = " and ".join(parts) if parts else "0 = 0"
    if exists:
        body = f"exists ({', '.join(exists)} : {body})"
    free_params = [p for p in system.params if p not in fix]
    head = f"[{', '.join(free_params)}] -> " if free_params else ""
    return f"{head}{{ [{', '.join(over)}] : {body} }}"


def to_isl_set(system: System, over: Sequence[str] | None = None,
               params: Mapping[str, int] | None = None) -> isl.Set:
    """``system`` as an ``isl.Set`` over the variables ``over`` (default: all)."""
    return isl.Set(to_isl_text(system, over, params))


def to_isl_basic_set(system: System, over: Sequence[str] | None = None,
                     params: Mapping[str, int] | None = None) -> isl.BasicSet:
    """``system`` as an ``isl.BasicSet`` (a system is convex up to its existentials)."""
    return isl.BasicSet(to_isl_text(system, over, params))


def _val(v: Any) -> int:
    x = v.to_python()
    if not isinstance(x, int):
        raise ValueError(f"non-integer isl value {v}")
    return x


def from_isl(obj: isl.Set | isl.BasicSet, names: Sequence[str] | None = None) -> list[System]:
    """One :class:`System` per basic set of ``obj`` (after ``compute_divs``).

    ``names`` name the set dimensions (default: isl's names).  Divisions become extra
    variables (listed after the set dimensions) with their defining constraints.
    """
    if isinstance(obj, isl.BasicSet):
        obj = isl.Set.from_basic_set(obj)
    obj = obj.compute_divs()
    return [_from_basic_set(b, names) for b in obj.get_basic_sets()]


def _from_basic_set(b: isl.BasicSet, names: Sequence[str] | None) -> System:
    dt = isl.dim_type
    nset, npar, ndiv = b.dim(dt.set), b.dim(dt.param), b.dim(dt.div)
    set_names = list(names) if names is not None else [
        b.get_dim_name(dt.set, i) or f"x{i}" for i in range(nset)]
    if len(set_names) != nset:
        raise ValueError(f"need {nset} names, got {len(set_names)}")
    par_names = [b.get_dim_name(dt.param, i) for i in range(npar)]
    taken = set(set_names) | set(par_names)
    div_names = []
    for _ in range(ndiv):
        div_names.append(fresh_name("e", taken))
        taken.add(div_names[-1])
    groups = [(dt.set, set_names), (dt.param, par_names), (dt.div, div_names)]

    def affine(obj: Any, scale: int = 1, group_types: Any = None) -> Affine:
        coeffs: dict[str, int] = {}
        for t, nm in groups if group_types is None else group_types:
            for i, n in enumerate(nm):
                v = obj.get_coefficient_val(t, i) * scale
                if not v.is_zero():
                    coeffs[n] = _val(v)
        return Affine(coeffs, _val(obj.get_constant_val() * scale))

    eqs: list[Affine] = []
    ineqs: list[Affine] = []
    for c in b.get_constraints():
        (eqs if c.is_equality() else ineqs).append(affine(c))
    for i, d in enumerate(div_names):
        aff = b.get_div(i)
        den = _val(aff.get_denominator_val())
        num = affine(aff, den, [(dt.in_, set_names), (dt.param, par_names),
                                (dt.div, div_names)])
        e = Affine.var(d, den)
        ineqs += [num - e, e - num + (den - 1)]
    return System(tuple(set_names) + tuple(div_names), tuple(par_names), tuple(eqs),
                  tuple(ineqs))


def exact_projection(system: System, keep: Sequence[str]) -> list[System]:
    """Exact integer projection of ``system`` on ``keep`` (and the parameters), through isl.

    Returns one system per convex piece; each has the kept variables first, then isl's
    division variables (existential, defined by their window constraints).
    """
    s = to_isl_set(system, keep).coalesce()
    return from_isl(s, keep)


def count_points(system: System, params: Mapping[str, int] | None = None,
                 over: Sequence[str] | None = None) -> int | None:
    """Exact number of points of ``system`` on ``over``; ``None`` if unbounded or if some
    parameter has no value."""
    if set(system.params) - set(params or {}):
        return None
    s = to_isl_set(system, over, params)
    if not s.is_bounded():
        return None
    return _val(s.count_val())


def enumerate_points(system: System, params: Mapping[str, int] | None = None,
                     over: Sequence[str] | None = None) -> list[tuple[int, ...]]:
    """Sorted list of the points of ``system`` on ``over`` for the given parameter values."""
    missing = set(system.params) - set(params or {})
    if missing:
        raise ValueError(f"no values for parameters {sorted(missing)}")
    s = to_isl_set(system, over, params)
    if not s.is_bounded():
        raise ValueError("the set is unbounded")
    n = s.dim(isl.dim_type.set)
    pts: list[tuple[int, ...]] = []
    s.foreach_point(lambda p: pts.append(
        tuple(_val(p.get_coordinate_val(isl.dim_type.set, i)) for i in range(n))))
    return sorted(pts)


def ast_code(system: System, order: Sequence[str]) -> str:
    """isl's generated C loop nest for ``system`` in ``order`` (for comparison and debugging)."""
    s = to_isl_set(system, order)
    dom = s.set_tuple_name("S")
    schedule = isl.Map.identity(dom.get_space().map_from_set()).intersect_domain(dom)
    build = isl.AstBuild.from_context(isl.Set.universe(dom.get_space().params()))
    node = build.node_from_schedule_map(isl.UnionMap.from_map(schedule))
    return node.to_C_str()
