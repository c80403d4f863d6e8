"""Reduction loops written in the digits of the box they flatten (CPU scheduling).

A convolution's implicit GEMM sums over one flattened axis ``k`` for a whole window or box
(:func:`.flat_loops.linear_nest`): a 3x3 window over ``c`` channels reads ``X[.., k // 9, y +
k // 3 % 3, x + k % 3]``, a weight gradient over ``(n, y, x)`` reads ``H[k // 64, f, k // 8 %
8, k % 8]``.  Every step of such a register-tile loop then computes two or three divisions
for its addresses, beside 16 multiply-adds.  :func:`by_period` writes the loop in the
digits of the box, ``k = P q + u a + t``, and :func:`fold_digits` folds every division and
remainder of the digits exactly, by the ranges of the inner digits (``(9 q + 3 a + t) // 3 %
3 = a`` for ``0 <= a, t < 3``); :func:`window_period` picks the period ``P`` (the box, or
its inner axes when the box is longer than a slice of the loop).  Legality: the
substitution is a bijection onto the same steps in the same order, and each fold is an
integer identity under the ranges the loops give their digits.
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.functor import fresh_name
from tecomp.loopir import BufferLoad, For, Seq, Stmt, Store
from tecomp.stmt_functor import (
    expr_children,
    expr_vars,
    rebuild_expr,
    subst,
    subst_expr,
    walk_expr,
)

from ...exact_div import affine, build
from .tile import plus


def index_const(n: int) -> E.Const:
    """The int64 constant ``n``."""
    return E.Const(n, "int64")


def fresh_var(base: str, names: set[str], dtype: str = "int64") -> E.Var:
    """A new variable named after ``base``, its name added to ``names``."""
    name = fresh_name(base, names)
    names.add(name)
    return E.Var(name, dtype)


#: the longest period a tile's reduction loop is written in digits of (:func:`by_period`)
MAX_PERIOD = 4096

#: an integer affine form over atoms (``{atom: coefficient}``, constant), as
#: :func:`tecomp.passes.exact_div.affine` reads it
Form = tuple[dict, int]


def _divide(form: Form, d: int, ranges: dict) -> tuple[dict, int, Form] | None:
    """For ``d > 0``: ``(quotient coefficients, m, remainder form)`` with ``form = d *
    (quotient + m) + remainder`` and ``0 <= remainder < d`` for every value of the
    variables in ``ranges`` (inclusive bounds), the others any integers; None when the part
    of ``form`` whose coefficients ``d`` does not divide can cross a multiple of ``d``."""
    coef, c = form
    whole = {v: x // d for v, x in coef.items() if x % d == 0}
    rest = {v: x for v, x in coef.items() if x % d}
    if any(v not in ranges for v in rest):
        return None
    lo = c + sum(x * ranges[v][0 if x > 0 else 1] for v, x in rest.items())
    hi = c + sum(x * ranges[v][1 if x > 0 else 0] for v, x in rest.items())
    if lo // d != hi // d:
        return None
    m = lo // d
    return whole, m, (rest, c - m * d)


def fold_digits(e: E.Expr, ranges: dict, memo: dict | None = None) -> E.Expr:
    """``e`` with its divisions and remainders by positive constants of affine forms folded,
    bottom-up, where :func:`_divide` decides them: ``(9 q + 3 a + t) // 9 -> q`` and ``(9 q
    + 3 a + t) // 3 % 3 -> a`` for ``0 <= a < 3`` and a constant ``0 <= t < 3`` (exact for
    every integer ``q``; floored, as the IR's division is).  ``ranges``: inclusive bounds of
    the variables that have them; ``memo``: shared by the calls on one statement (the
    nodes it holds kept alive by the statement)."""
    memo = {} if memo is None else memo

    def go(x: E.Expr) -> E.Expr:
        got = memo.get(id(x))
        if got is not None:
            return got
        kids = expr_children(x)
        out = x
        if kids:
            new = tuple(go(c) for c in kids)
            if any(a is not b for a, b in zip(new, kids)):
                out = (replace(x, indices=new) if isinstance(x, BufferLoad)
                       else rebuild_expr(x, new))
            if isinstance(out, (E.FloorDiv, E.Mod)) and isinstance(out.b, E.Const) \
                    and not isinstance(out.b.value, bool) and int(out.b.value) > 0:
                d, form = int(out.b.value), affine(out.a)
                split = _divide(form, d, ranges)
                if split is not None:
                    whole, m, rest = split
                    out = (build((whole, m), out.dtype) if isinstance(out, E.FloorDiv)
                           else build(rest, out.dtype))
                else:
                    coarse = _coarse(out, form, d, ranges)
                    out = out if coarse is None else coarse
        memo[id(x)] = out
        return out

    return go(e)


def _coarse(x: E.Expr, form: Form, d: int, ranges: dict) -> E.Expr | None:
    """``(a q + r) // d -> q // (d / a)`` and ``(a q + r) % d -> a (q % (d / a)) + r`` for
    the one variable ``q`` without a range, when ``a`` divides ``d`` and ``0 <= r < a`` over
    the ranges (exact: ``a q + r`` lies in ``[a q, a q + a)``, inside one multiple of ``d``
    for each ``q // (d / a)``), else None.  A box longer than a slice (a 32x32 image's
    ``k // 1024``) then divides only the outer digit, once a trip."""
    coef, c = form
    free = [v for v in coef if v not in ranges]
    if len(free) != 1 or coef[free[0]] <= 0 or d % coef[free[0]]:
        return None
    (q,) = free
    a = coef[q]
    rest = ({v: n for v, n in coef.items() if v is not q}, c)
    split = _divide(rest, a, ranges)
    if split is None or split[0] or split[1] != 0:  # not 0 <= r < a
        return None
    n = index_const(d // a)
    if isinstance(x, E.FloorDiv):
        return q if d == a else E.FloorDiv(q, n, x.dtype)
    low = E.mul(index_const(a), E.Mod(q, n, x.dtype)) if d != a else index_const(0)
    return E.add(low, build(rest, x.dtype)) if rest[0] or rest[1] else low


def _digits(period: int, inner: int, q: E.Var, a: E.Var | None, t: E.Expr) -> E.Expr:
    """``period * q + inner * a + t`` (``a`` absent: one digit below ``q``)."""
    out = E.mul(index_const(period), q)
    if a is not None:
        out = E.add(out, E.mul(index_const(inner), a))
    return out if t == index_const(0) else E.add(out, t)


def _radix(divisors: set[int], period: int) -> int:
    """The innermost digit of a period: its least divisor above 1 among ``divisors`` (a 3x3
    window's 3), or the period."""
    return min((d for d in divisors if 1 < d and period % d == 0), default=period)


def _divisors(value: E.Expr, k: E.Var) -> set[int]:
    return {int(x.b.value) for x in walk_expr(value)
            if isinstance(x, (E.FloorDiv, E.Mod)) and isinstance(x.b, E.Const)
            and not isinstance(x.b.value, bool) and int(x.b.value) > 0
            and k in expr_vars(x.a)}


def _divides_loop_vars(e: E.Expr, loop_vars: set) -> bool:
    return any(isinstance(x, (E.FloorDiv, E.Mod)) and expr_vars(x) & loop_vars
               for x in walk_expr(e))


def window_period(value: E.Expr, k: E.Var, limit: int = MAX_PERIOD) -> int:
    """The period ``P <= limit`` to write ``k`` in the digits of (:func:`by_period`): the
    least one that leaves no division or remainder of a loop variable in ``value`` (a
    flattened 3x3 window's ``k // 9, k // 3 % 3, k % 3``: 9), else the largest that leaves
    them of the outer digit only (an 8 x 32 x 32 box in slices of 384, ``k // 1024, k // 32
    % 32, k % 32``: 32, with ``q // 32`` and ``q % 32`` once a trip), else 1."""
    divisors = _divisors(value, k)
    if not divisors:
        return 1
    period = 1
    for d in divisors:
        period = period * d // _gcd(period, d)
    q, a = E.Var(f"{k.name}_q", k.dtype), E.Var(f"{k.name}_a", k.dtype)
    found = sorted(p for p in {period, *divisors, *(d * e for d in divisors for e in divisors)}
                   if 1 < p <= min(limit, MAX_PERIOD))

    def left(p: int) -> set:
        u = _radix(divisors, p)
        digit = a if p > u else None
        ranges = {a: (0, p // u - 1)}
        out: set = set()
        for t in range(u):
            e = fold_digits(subst_expr(value, {k: _digits(p, u, q, digit, index_const(t))}),
                            ranges)
            out |= {v for x in walk_expr(e) if isinstance(x, (E.FloorDiv, E.Mod))
                    for v in expr_vars(x) & {q, a}}
        return out

    seen = {p: left(p) for p in found}
    strict = [p for p in found if not seen[p]]
    if strict:
        return strict[0]
    outer = [p for p in found if seen[p] == {q}]
    return outer[-1] if outer else 1


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


#: the steps a trip of :func:`by_period` written once, in a loop whose ``unroll`` hint asks the
#: code generator for the copies (a window's three digit steps: one loop of three trips that
#: LLVM unrolls whole); False: written out here (an A/B switch of
#: ``benchmarks/ab_cpu_steps.py``, step ``backend_digits``)
UNROLL_IN_BACKEND = True


def by_period(k: E.Var, lo: E.Expr, hi: E.Expr, body: Stmt, period: int,
              names: set[str], unroll: int = 4) -> Stmt | None:
    """``for (k, lo, hi) body`` written in the digits of its window or box (un-flattening
    what :func:`.flat_loops.linear_nest` flattened): ``k = period * q + u * a + t`` with
    ``u`` the innermost digit (:func:`_radix`), ``q`` over the periods, ``a`` over ``period
    / u``, and ``t`` the innermost digit's steps -- unrolled when there are at most
    ``unroll`` of them, else a loop ``t = unroll * c + s`` over trips of ``unroll``
    unrolled steps (with :data:`UNROLL_IN_BACKEND`, one step in a loop over ``t`` whose
    ``unroll`` hint asks the code generator for those copies) -- every division and
    remainder of the digits folded (:func:`fold_digits`).  A flattened 3x3 window's
    ``X[.., k // 9, y + k // 3 % 3, x + k % 3]`` becomes ``X[.., q, y + a, x + t]``, a weight
    gradient's head ``H[k // 64, f, k // 8 % 8, k % 8]`` over an 8x8 image becomes ``H[q, f,
    a, 4 c + s]``: affine in the loops,
    so a step's address costs an add instead of divisions (nine unrolled steps, tried
    first, took the 3x3 convolution's gradient build from 0.34 to 0.62 s for a 2% faster
    forward).  The steps run in the same order.  ``lo`` and ``hi`` must be multiples of
    ``period`` (the caller's slices are); None when the body divides nothing by the
    period's digits."""
    divisors = _divisors_of_stmt(body, k)
    if period <= 1 or not divisors or any(period % d and d % period for d in divisors):
        return None
    u = _radix(divisors, period)
    q = fresh_var(f"{k.name}_q", names)
    a = fresh_var(f"{k.name}_a", names) if period > u else None
    ranges = {} if a is None else {a: (0, period // u - 1)}
    s = u if u <= max(unroll, 1) else unroll if u % unroll == 0 else 1
    hint = 1
    if UNROLL_IN_BACKEND and s > 1:  # one step written, the loop's hint asks for the copies
        hint, s = s, 1
    c = fresh_var(f"{k.name}_t", names) if s < u else None
    if c is not None:
        ranges[c] = (0, u // s - 1)
    steps = []
    for t in range(s):
        low = index_const(t) if c is None else plus(c, t) if s == 1 else \
            E.add(E.mul(index_const(s), c), index_const(t)) if t else \
            E.mul(index_const(s), c)
        steps.append(_fold_stmt(subst(body, {k: _digits(period, u, q, a, low)}), ranges))
    inner: Stmt = Seq(tuple(steps)) if len(steps) > 1 else steps[0]
    if c is not None:
        inner = For(c, index_const(0), index_const(u // s), inner, unroll=hint)
    if a is not None:
        inner = For(a, index_const(0), index_const(period // u), inner)
    P = index_const(period)
    return For(q, E.floordiv(lo, P), E.floordiv(hi, P), inner)


def _divisors_of_stmt(s: Stmt, k: E.Var) -> set[int]:
    from tecomp.stmt_functor import stmt_exprs, walk_stmt

    out: set[int] = set()
    for x in walk_stmt(s):
        for e in stmt_exprs(x):
            out |= _divisors(e, k)
    return out


def _fold_stmt(s: Stmt, ranges: dict, memo: dict | None = None) -> Stmt:
    memo = {} if memo is None else memo
    if isinstance(s, Seq):
        return Seq(tuple(_fold_stmt(x, ranges, memo) for x in s.stmts))
    if isinstance(s, For):
        return replace(s, body=_fold_stmt(s.body, ranges, memo))
    if isinstance(s, Store):
        return replace(s, indices=tuple(fold_digits(e, ranges, memo) for e in s.indices),
                       value=fold_digits(s.value, ranges, memo))
    return s
