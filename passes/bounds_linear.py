"""Bounds proofs by substituting loop bounds into linear forms, before isl is asked.

:mod:`.bounds_affine` proves an access ``0 <= e < x`` over the iteration domain with isl.
Most accesses the interval test there leaves are linear in the loop variables, with loop
bounds that are themselves linear in outer variables, possibly as a ``max`` (lower) or a
``min`` (upper) of such terms, or guarded by linear conditions:

* a symbolic transformer block's causal sum reads ``k[t, c]`` for ``t`` in ``[0, j0 + 1)``
  inside ``j0`` in ``[0, n)``: ``n - 1 - t >= n - 1 - j0 >= 0``;
* a padded convolution reads ``X[b, c, y - 1, x - 1]`` where ``y >= 1 && y < 33``;
* its input gradient reads ``in[.., j2 - t_1, ..]`` for ``t_1`` in ``[max(j2 - 31, 0),
  min(j2, 2) + 1)``: ``j2 - t_1 >= j2 - j2`` and ``31 - j2 + t_1 >= 31 - j2 + j2 - 31``.

:func:`provably_nonnegative` shows ``f >= 0`` for a linear form ``f`` by Fourier–Motzkin
style elimination without the combination step: the innermost variable of ``f`` with a
known bound is replaced by one of its lower bounds (positive coefficient) or upper bounds
(negative), each term of a ``max``/``min`` bound tried in turn, until only constants and
free sizes remain; the form must then be a non-negative constant (the sizes' coefficients
zero).  Every bound is valid wherever the access runs (loop bounds inside the loop, guards on
the path, a ``let``'s value), so each step gives a lower bound of ``f``: a success is a proof.
A failure proves nothing, and isl decides as before.  The proofs of the symbolic transformer
block and the padded conv2d of ``benchmarks/compile_time.py`` all succeed here, so neither
imports islpy (25 ms of a cold build, 14 of them its ``importlib.metadata`` version lookup).
"""

from __future__ import annotations

from typing import Any, Iterable

from tecomp import expr as E
from tecomp.scan import linear_form as linear

from .affine_forms import lower_terms, upper_terms

#: a linear form (:func:`tecomp.scan.linear_form`): variable -> coefficient, ``1`` -> the
#: constant
Form = dict
ONE = 1

#: substitutions one proof may try (the search branches on the terms of max/min bounds)
MAX_STEPS = 256


def plus(a: Form, b: Form, c: int = 1) -> Form:
    """``a + c * b``, zero coefficients dropped."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + c * v
    return {k: v for k, v in out.items() if v or isinstance(k, int)}


def scale(a: Form, c: int) -> Form:
    return {k: c * v for k, v in a.items() if c * v or isinstance(k, int)}


class Bounds:
    """The linear bounds of the variables in scope: ``lows[v]`` and ``highs[v]`` (inclusive)
    are lists of forms over variables bound outside ``v`` (and free sizes); ``depth[v]``
    is how deep ``v`` is bound (inner variables are replaced first)."""

    def __init__(self) -> None:
        self.lows: dict[E.Var, list[Form]] = {}
        self.highs: dict[E.Var, list[Form]] = {}
        self.depth: dict[E.Var, int] = {}

    def bind(self, v: E.Var, lows: Iterable[E.Expr], highs: Iterable[E.Expr],
             high_offset: int = 0) -> None:
        """``v`` bound here (an inner binding of the same variable replaces an outer one)
        with the given bounds; ``high_offset`` is added to the upper ones (-1: exclusive)."""
        self.depth[v] = len(self.depth) + 1
        self.lows[v] = self._outer(v, (linear(t) for t in lows))
        self.highs[v] = self._outer(v, (None if f is None else plus(f, {ONE: high_offset})
                                        for f in (linear(t) for t in highs)))

    def loop(self, v: E.Var, lo: E.Expr, hi: E.Expr) -> None:
        self.bind(v, lower_terms(lo), upper_terms(hi), -1)

    def let(self, v: E.Var, value: E.Expr) -> None:
        self.bind(v, [value], [value])

    def guard(self, cond: E.Expr) -> None:
        """A condition that holds where the access runs: each side of a linear comparison
        bounds the variables it holds with coefficient 1 or -1."""
        op = type(cond)
        if op not in (E.LT, E.LE, E.GT, E.GE, E.EQ):
            return
        a, b = linear(cond.a), linear(cond.b)
        if a is None or b is None:
            return
        # g >= 0 for each of the (one or two) forms the comparison says
        gs = {E.LT: [plus(plus(b, a, -1), {ONE: -1})], E.LE: [plus(b, a, -1)],
              E.GT: [plus(plus(a, b, -1), {ONE: -1})], E.GE: [plus(a, b, -1)],
              E.EQ: [plus(a, b, -1), plus(b, a, -1)]}[op]
        for g in gs:
            for v, c in g.items():
                if isinstance(v, int) or c not in (1, -1) or v not in self.depth:
                    continue
                rest = plus(g, {v: c}, -1)  # g = c*v + rest >= 0
                bound = scale(rest, -c)  # c = 1: v >= -rest; c = -1: v <= rest
                if all(isinstance(k, int) or self.depth.get(k, 0) < self.depth[v] for k in bound):
                    (self.lows if c == 1 else self.highs)[v].append(bound)

    def _outer(self, v: E.Var, forms: Iterable[Form | None]) -> list[Form]:
        """The forms over variables bound outside ``v`` (or free)."""
        d = self.depth[v]
        return [f for f in forms if f is not None and all(
            isinstance(k, int) or self.depth.get(k, 0) < d for k in f)]


def provably_nonnegative(f: Form, bounds: Bounds) -> bool:
    """Whether ``f >= 0`` wherever the bounds hold (module doc; False: not shown)."""
    steps = [0]

    def go(f: Form) -> bool:
        steps[0] += 1
        if steps[0] > MAX_STEPS:
            return False
        bound = [k for k in f if not isinstance(k, int) and k in bounds.depth]
        if not bound:
            return all(isinstance(k, int) for k in f) and f.get(ONE, 0) >= 0
        v = max(bound, key=bounds.depth.__getitem__)  # the innermost
        c = f[v]
        rest = plus(f, {v: c}, -1)
        for t in (bounds.lows if c > 0 else bounds.highs)[v]:
            if go(plus(rest, t, c)):
                return True
        return False

    return go(f)


def in_bounds(index: E.Expr, extent: E.Expr, bindings: Iterable[tuple[str, Any]],
              guards: Iterable[E.Expr]) -> bool:
    """Whether ``0 <= index < extent`` is shown from ``bindings`` (outermost first: ``("loop",
    For)`` or ``("let", LetStmt)``) and the ``guards`` that hold where the access runs."""
    f, x = linear(index), linear(extent)
    if f is None or x is None:
        return False
    bounds = Bounds()
    for kind, st in bindings:
        if kind == "loop":
            bounds.loop(st.var, st.lo, st.hi)
        else:
            bounds.let(st.var, st.value)
    for g in guards:
        bounds.guard(g)
    return (provably_nonnegative(f, bounds)
            and provably_nonnegative(plus(plus(x, f, -1), {ONE: -1}), bounds))
