"""Write a Jacobian as a list of flat sums ``Σ_{axes | where} body`` (the terms of a contribution).

Zero elimination consumes one flat ``Reduce(sum)`` per term with products of deltas inside, so
the driver splits each Jacobian ``J`` into terms and flattens each:

* additive structure distributes: ``a + b``, ``a - b``, ``-a``, and ``select(c, t, f)`` with
  both arms non-zero (-> ``select(c, t, 0) + select(c, 0, f)``);
* a sum carrying a delta absorbs what multiplies it: ``(Σ_k g) · s -> Σ_k g · s``,
  ``(Σ_k g) / s -> Σ_k g / s``, float casts and ``select(c, Σ_k g, 0) -> Σ_k select(c, g, 0)``;
  nested sums merge, their ``where`` conditions conjoined;
* a factor WITHOUT a delta is a forward value and stays opaque: a forward sum is never pulled
  into the derivative's iteration domain (that would recompute it per Jacobian index).

Bound axes are renamed (capture-avoiding) whenever a merge would make two of them clash or
capture a free variable of a factor.
"""

from __future__ import annotations

from collections.abc import Callable, Set

from tecomp import dtypes
from tecomp import expr as E
from tecomp.functor import free_vars, fresh_name, substitute, walk

Form = tuple[E.Expr, tuple[E.IterVar, ...], "E.Expr | None"]


def flat_terms(e: E.Expr) -> list[Form]:
    """The terms of ``e`` as ``(body, axes, where)``: ``e == Σ_terms Σ_{axes | where} body``."""
    return _Flattener().forms(e)


def rename_axes(form: Form, avoid: set[str]) -> Form:
    """Rename the bound axes of ``form`` whose names are in ``avoid``."""
    body, axes, where = form
    if not any(a.var.name in avoid for a in axes):
        return form
    taken = set(avoid) | names(body) | {a.var.name for a in axes}
    if where is not None:
        taken |= names(where)
    mapping: dict[E.Var, E.Expr] = {}
    new_axes = []
    for a in axes:
        lo, ext = substitute(a.lo, mapping), substitute(a.extent, mapping)
        v = a.var
        if v.name in avoid:
            v = E.Var(fresh_name(v.name, taken), v.dtype)
            taken.add(v.name)
            mapping[a.var] = v
        new_axes.append(E.IterVar(v, lo, ext, "reduce"))
    body = substitute(body, mapping)
    where = None if where is None else substitute(where, mapping)
    return body, tuple(new_axes), where


def names(e: E.Expr) -> set[str]:
    """Every variable name in ``e``, bound or free."""
    out: set[str] = set()
    for x in walk(e):
        if isinstance(x, E.Var):
            out.add(x.name)
        elif isinstance(x, E.Reduce):
            out |= {a.var.name for a in x.axes}
    return out


def conj(a: E.Expr | None, b: E.Expr | None) -> E.Expr | None:
    if a is None:
        return b
    if b is None:
        return a
    return E.logical_and(a, b)


def _free_names(*es: E.Expr | None) -> set[str]:
    out: set[str] = set()
    for e in es:
        if e is not None:
            out |= {v.name for v in free_vars(e)}
    return out


def _axis_free_names(axes: tuple[E.IterVar, ...]) -> set[str]:
    return _free_names(*(x for a in axes for x in (a.lo, a.extent)))


class _Flattener:
    def __init__(self) -> None:
        self._delta: dict[E.Expr, bool] = {}

    def has_delta(self, e: E.Expr) -> bool:
        r = self._delta.get(e)
        if r is None:
            r = any(isinstance(x, E.Delta) for x in walk(e))
            self._delta[e] = r
        return r

    def forms(self, e: E.Expr) -> list[Form]:
        if isinstance(e, E.Zero):
            return []
        if isinstance(e, E.Add):
            return self.forms(e.a) + self.forms(e.b)
        if isinstance(e, E.Sub):
            return self.forms(e.a) + self._map(e.b, E.neg)
        if isinstance(e, E.Neg):
            return self._map(e.a, E.neg)
        if isinstance(e, E.Cast) and dtypes.is_float(e.value.dtype):
            return self._map(e.value, lambda b: E.cast(b, e.dtype))
        if isinstance(e, E.Reduce) and e.combiner == "sum":
            return self._sum(e)
        if isinstance(e, E.Select) and self.has_delta(e):
            return self._select(e)
        if isinstance(e, E.Div) and self.has_delta(e.a) and not self.has_delta(e.b):
            return self._map(e.a, lambda b: E.div(b, e.b), _free_names(e.b))
        if isinstance(e, E.Mul):
            return self._mul(e)
        return [(e, (), None)]

    def _map(self, e: E.Expr, fn: Callable[[E.Expr], E.Expr],
             avoid: Set[str] = frozenset()) -> list[Form]:
        out = []
        for form in self.forms(e):
            b, axes, w = rename_axes(form, avoid)
            out.append((fn(b), axes, w))
        return out

    def _sum(self, e: E.Reduce) -> list[Form]:
        own = {a.var.name for a in e.axes}
        avoid = own | _free_names(e.where)
        out = []
        for form in self.forms(e.body):
            b, axes, w = rename_axes(form, avoid)
            out.append((b, e.axes + axes, conj(e.where, w)))
        return out

    def _select(self, e: E.Select) -> list[Form]:
        c, dt = e.cond, e.dtype
        avoid = _free_names(c)
        t = self._map(e.t, lambda b: E.select(c, b, E.Zero(dt)), avoid)
        f = self._map(e.f, lambda b: E.select(c, E.Zero(dt), b), avoid)
        return t + f

    def _mul(self, e: E.Mul) -> list[Form]:
        da, db = self.has_delta(e.a), self.has_delta(e.b)
        if da and not db:
            return self._map(e.a, lambda b: E.mul(b, e.b), _free_names(e.b))
        if db and not da:
            return self._map(e.b, lambda b: E.mul(e.a, b), _free_names(e.a))
        if not (da and db):
            return [(e, (), None)]
        out = []
        for fa in self.forms(e.a):
            for fb in self.forms(e.b):
                fb = rename_axes(fb, {a.var.name for a in fa[1]} | _free_names(fa[0], fa[2])
                                 | _axis_free_names(fa[1]))
                fa2 = rename_axes(fa, _free_names(fb[0], fb[2]) | _axis_free_names(fb[1])
                                  | {a.var.name for a in fb[1]})
                out.append((E.mul(fa2[0], fb[0]), fa2[1] + fb[1], conj(fa2[2], fb[2])))
        return out
