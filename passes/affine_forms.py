"""Affine forms of index expressions: coefficients, floor-division terms, bound terms.

The passes that reason about how an index moves with a loop variable (the loop order and
residue splitting of the CPU schedule, the im2col rewrites :mod:`.flatten_sum` and
:mod:`.flatten_rows`) read expressions through these helpers:

* :func:`coefficient` — the coefficient of a variable in an expression affine in it
  (``2*x + rx`` has coefficient 2 in ``x``), None when the expression is not affine in it;
* :func:`floor_form` — ``t == (a*j + r) // c + d`` with ``a = ±1`` (the windows of a dilated
  or strided convolution's gradient);
* :func:`lower_terms` / :func:`upper_terms` — the terms of a lower bound that is a maximum and
  of an exclusive upper bound that is a minimum.

They work on tensor-IR and loop-IR expressions alike (no node of either is special here).
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.functor import children, substitute

from .exact_div import fold_index


def expr_vars(e: E.Expr) -> set[E.Var]:
    """Every variable in ``e`` (those a reduction inside binds included)."""
    out, stack = set(), [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.Var):
            out.add(x)
        stack.extend(children(x))
    return out


def coefficient(e: E.Expr, v: E.Var) -> int | None:
    """The coefficient of ``v`` in ``e`` when ``e`` is affine in ``v``, else None."""
    if isinstance(e, E.Var):
        return 1 if e == v else 0
    if isinstance(e, E.Const):
        return 0
    if isinstance(e, E.Add) or isinstance(e, E.Sub):
        a, b = coefficient(e.a, v), coefficient(e.b, v)
        if a is None or b is None:
            return None
        return a + b if isinstance(e, E.Add) else a - b
    if isinstance(e, E.Neg):
        a = coefficient(e.a, v)
        return None if a is None else -a
    if isinstance(e, E.Mul):
        a, b = coefficient(e.a, v), coefficient(e.b, v)
        if a is None or b is None:
            return None
        if a == 0 and isinstance(e.a, E.Const) and b:
            return int(e.a.value) * b
        if b == 0 and isinstance(e.b, E.Const) and a:
            return int(e.b.value) * a
        return 0 if a == 0 and b == 0 else None
    if isinstance(e, E.Cast) and e.dtype in ("int32", "int64"):
        return coefficient(e.value, v)
    if isinstance(e, (E.FloorDiv, E.Mod)) and v in expr_vars(e):
        folded = fold_index(e)  # an exact division: ``(j + 2*t - j) // 2`` is ``t``
        return None if folded is e else coefficient(folded, v)
    return None if v in expr_vars(e) else 0


def unit_stride(indices: tuple[E.Expr, ...], v: E.Var) -> bool:
    """Whether the last index of ``indices`` moves by one element per step of ``v``."""
    return bool(indices) and coefficient(indices[-1], v) == 1


def lower_terms(e: E.Expr) -> list[E.Expr]:
    """``max(a, max(b, c))`` -> ``[a, b, c]`` (the terms a lower bound is the maximum of)."""
    if isinstance(e, E.Max):
        return lower_terms(e.a) + lower_terms(e.b)
    return [e]


def upper_terms(e: E.Expr) -> list[E.Expr]:
    """``min(a, b) + c`` -> ``[a + c, b + c]`` (an exclusive upper bound as a minimum)."""
    if isinstance(e, E.Min):
        return upper_terms(e.a) + upper_terms(e.b)
    if isinstance(e, E.Add) and isinstance(e.b, E.Const) and isinstance(e.a, E.Min):
        return [E.add(t, e.b) for t in upper_terms(e.a)]
    return [e]


def floor_form(t: E.Expr, j: E.Var):
    """``(a, r, c, d)`` with ``t == (a*j + r) // c + d``, ``a`` in {1, -1}, ``c >= 1`` and
    ``r, d`` free of ``j``; None when ``t`` is not of that form."""
    if isinstance(t, (E.Add, E.Sub)) and j not in expr_vars(t.b):
        inner = floor_form(t.a, j)
        if inner is None:
            return None
        a, r, c, d = inner
        return a, r, c, (E.add(d, t.b) if isinstance(t, E.Add) else E.sub(d, t.b))
    if isinstance(t, E.Add) and j not in expr_vars(t.a):
        inner = floor_form(t.b, j)
        return None if inner is None else (*inner[:3], E.add(inner[3], t.a))
    if isinstance(t, E.FloorDiv) and isinstance(t.b, E.Const) and int(t.b.value) >= 1:
        a = coefficient(t.a, j)
        if a not in (1, -1):
            return None
        return a, substitute(t.a, {j: E.Const(0, j.dtype)}), int(t.b.value), E.Const(0, j.dtype)
    return None
