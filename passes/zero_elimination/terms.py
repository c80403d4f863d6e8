"""Splitting an adjoint body into terms: ``Σ_{axes | conds} Π deltas · factor``.

Reverse mode produces bodies such as ``sum(dY[i] * select(c, delta(j, i + k) * W[k], 0),
axis=[i, k], where=w)``.  :func:`expand` rewrites such a body into a list of :class:`Term`:
a flat set of summation axes, a conjunction of conditions, the Kronecker deltas, and the
remaining factor — the form in which deltas can be solved away.  Sums distribute over
``+``/``-``, a ``select`` with deltas in its arms splits into one term per arm under its
condition, products of sums multiply out (within a size limit), and a ``sum`` inside a
product is flattened when the other factor does not depend on its axes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tecomp import expr as E
from tecomp.functor import free_vars, walk

MAX_TERMS = 32


@dataclass
class Term:
    axes: list[E.IterVar] = field(default_factory=list)
    conds: list[E.Expr] = field(default_factory=list)
    deltas: list[tuple[E.Expr, E.Expr]] = field(default_factory=list)
    factor: E.Expr | None = None  # None means 1
    sign: int = 1

    def times(self, x: E.Expr) -> Term:
        f = x if self.factor is None else E.mul(self.factor, x)
        return replace(self, factor=f)


def has_delta(e: E.Expr) -> bool:
    return any(isinstance(x, E.Delta) for x in walk(e))


def expand(e: E.Expr) -> list[Term] | None:
    """The terms of ``e``; None when ``e`` cannot be expanded within :data:`MAX_TERMS`."""
    out = _expand(e)
    if out is None or len(out) > MAX_TERMS:
        return None
    return out


def _merge(a: Term, b: Term) -> Term | None:
    names_a = {ax.var.name for ax in a.axes} | {v.name for v in term_vars(a)}
    names_b = {ax.var.name for ax in b.axes} | {v.name for v in term_vars(b)}
    if any(ax.var.name in names_b for ax in a.axes) or any(
            ax.var.name in names_a for ax in b.axes):
        return None  # would need renaming (or capture a variable); keep the product opaque
    fa, fb = a.factor, b.factor
    f = fb if fa is None else (fa if fb is None else E.mul(fa, fb))
    return Term(a.axes + b.axes, a.conds + b.conds, a.deltas + b.deltas, f, a.sign * b.sign)


def _expand(e: E.Expr) -> list[Term] | None:
    if _is_zero(e):
        return []
    if not has_delta(e) and not _has_guarded_sum(e) and not _has_mask(e):
        return [Term(factor=e)]
    if isinstance(e, E.Cast) and e.value.dtype == "bool":
        return [Term(conds=[e.value], factor=_one(e.dtype))]  # cast(mask) -> condition
    if isinstance(e, E.Add):
        a, b = _expand(e.a), _expand(e.b)
        return None if a is None or b is None else a + b
    if isinstance(e, E.Sub):
        a, b = _expand(e.a), _expand(e.b)
        if a is None or b is None:
            return None
        return a + [replace(t, sign=-t.sign) for t in b]
    if isinstance(e, E.Neg):
        a = _expand(e.a)
        return None if a is None else [replace(t, sign=-t.sign) for t in a]
    if isinstance(e, E.Delta):
        return [Term(deltas=[(e.a, e.b)], factor=_one(e.dtype))]
    if isinstance(e, E.Select):
        t, f = _expand(e.t), _expand(e.f)
        if t is None or f is None:
            return None
        return ([replace(x, conds=x.conds + [e.cond]) for x in t]
                + [replace(x, conds=x.conds + [E.logical_not(e.cond)]) for x in f])
    if isinstance(e, E.Mul):
        a, b = _expand(e.a), _expand(e.b)
        if a is None or b is None or len(a) * len(b) > MAX_TERMS:
            return None
        out = []
        for x in a:
            for y in b:
                m = _merge(x, y)
                if m is None:
                    return None
                out.append(m)
        return out
    if isinstance(e, E.Div):
        a = _expand(e.a)
        if a is None or has_delta(e.b):
            return None
        return [t.times(E.div(_one(e.dtype), e.b)) for t in a]
    if isinstance(e, E.Cast) and e.value.dtype in ("float16", "float32", "float64",
                                                   "bfloat16"):
        a = _expand(e.value)
        if a is None:
            return None
        return [replace(t, factor=E.cast(t.factor if t.factor is not None
                                          else _one(e.value.dtype), e.dtype)) for t in a]
    if isinstance(e, E.Reduce) and e.combiner == "sum":
        body = _expand(e.body)
        if body is None:
            return None
        bound = {ax.var for ax in e.axes}
        out = []
        for t in body:
            if any(ax.var in bound for ax in t.axes):
                return None
            conds = t.conds + ([e.where] if e.where is not None else [])
            out.append(Term(list(e.axes) + t.axes, conds, t.deltas, t.factor, t.sign))
        return out
    return [Term(factor=e)]


def _is_zero(e: E.Expr) -> bool:
    return isinstance(e, E.Zero) or (isinstance(e, E.Const) and e.value == 0)


def _is_mask(y: E.Expr) -> bool:
    """A zero-armed select or a boolean cast to a number: a condition in disguise."""
    if isinstance(y, E.Select):
        return _is_zero(y.t) or _is_zero(y.f)
    return isinstance(y, E.Cast) and y.value.dtype == "bool"


def _has_mask(e: E.Expr) -> bool:
    return any(_is_mask(y) for y in walk(e))


def _has_guarded_sum(e: E.Expr) -> bool:
    """A sum whose where-condition or masks (zero-armed selects, boolean casts) could
    become tighter bounds."""
    for x in walk(e):
        if isinstance(x, E.Reduce) and x.combiner == "sum":
            if x.where is not None or _has_mask(x.body):
                return True
    return False


has_guarded_sum = _has_guarded_sum


def _one(dtype: str) -> E.Expr:
    return E.Const(1.0 if dtype.startswith(("float", "bfloat")) else 1, dtype)


def term_vars(t: Term) -> set[E.Var]:
    out: set[E.Var] = set()
    for c in t.conds:
        out |= free_vars(c)
    for a, b in t.deltas:
        out |= free_vars(a) | free_vars(b)
    if t.factor is not None:
        out |= free_vars(t.factor)
    return out
