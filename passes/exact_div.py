"""Exact divisions in buffer indices folded away: ``(2*q + 2*u) // 2 -> q + u``.

Zero elimination writes the source pixel of a transposed convolution as the quotient of an
expression that its residue class makes divisible by the stride; after residue splitting
(:mod:`tecomp.passes.residue_split`) a phase of a stride-2 transposed convolution reads::

    X[b, t, (y + 1 - (y - 2*t2 + 1)) // 2, (2*xq + 1 - (2*xq - 2*(xq + xu) + 1)) // 2]

The quotients are ``t2`` and ``xq + xu``, but the code generator sees a floor division of a
sum: a few integer instructions per element, and an index the loop vectoriser cannot prove
to move by one per iteration of ``xq`` (the loop stays scalar).  :func:`fold_exact_divisions`
puts every integer index of a load or store through the affine normal form (Presburger
arithmetic's rule for ``floor``): with the divisor ``s > 0`` a constant and ``a`` a sum of
integer terms whose coefficients are all multiples of ``s`` plus a constant ``c``,

    (s*a' + c) // s  =  a' + c // s        (s*a' + c) % s  =  c % s

which holds for every integer ``a'`` (floor division and modulo with Python's semantics, as
the IR defines them).  Terms that are not affine (loads, minima, other divisions) are atoms.
An index is rewritten only when at least one division or modulo disappears; other indices are
left exactly as they are, so later passes that match ``v + c`` shapes see what they saw.

The rewrite changes no value (the identities above are exact for integers), so the program's
meaning is kept bit for bit.
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.dtypes import is_int
from tecomp.loopir import BufferLoad, LoweredFunc, Store
from tecomp.stmt_functor import StmtMutator, expr_children, rebuild_expr

#: an affine form: atom -> coefficient, and the constant term
Affine = tuple[dict[E.Expr, int], int]


def fold_exact_divisions(func: LoweredFunc) -> LoweredFunc:
    """``func`` with exact floor divisions and moduli by constants in buffer indices folded
    (module docstring)."""
    body = _Fold().visit(func.body)
    if body is func.body:
        return func
    return LoweredFunc(func.name, func.inputs, func.outputs, func.params, body)


class _Fold(StmtMutator):
    def __init__(self) -> None:
        self.memo: dict[int, tuple[E.Expr, E.Expr]] = {}

    def mutate_expr(self, e: E.Expr) -> E.Expr:
        return fold_loads(e, self.memo)

    def visit_Store(self, s: Store) -> Store:
        idx = tuple(fold_index(fold_loads(x, self.memo)) for x in s.indices)
        value = fold_loads(s.value, self.memo)
        if value is s.value and all(a is b for a, b in zip(idx, s.indices)):
            return s
        return Store(s.buffer, idx, value, s.reduce)


def fold_loads(e: E.Expr, memo: dict[int, tuple[E.Expr, E.Expr]]) -> E.Expr:
    """``e`` with the indices of every load in it folded by :func:`fold_index`."""
    hit = memo.get(id(e))
    if hit is not None:
        return hit[1]
    cs = expr_children(e)
    new = tuple(fold_loads(x, memo) for x in cs)
    if isinstance(e, BufferLoad):
        new = tuple(fold_index(x) for x in new)
        out = e if all(a is b for a, b in zip(new, cs)) else BufferLoad(e.buffer, new, e.dtype)
    else:
        out = e if all(a is b for a, b in zip(new, cs)) else rebuild_expr(e, new)
    memo[id(e)] = (e, out)
    return out


def fold_index(e: E.Expr) -> E.Expr:
    """The affine normal form of the integer index ``e`` when that removes a division or a
    modulo, else ``e`` itself."""
    if not is_int(e.dtype) or not _has_division(e):
        return e
    form = affine(e)
    out = build(form, e.dtype)
    return out if _divisions(out) < _divisions(e) else e


def affine(e: E.Expr) -> Affine:
    """The affine form of the integer expression ``e`` over its non-affine atoms."""
    if isinstance(e, E.Const) and not isinstance(e.value, (bool, float)):
        return {}, int(e.value)
    if isinstance(e, (E.Add, E.Sub)):
        (ta, ca), (tb, cb) = affine(e.a), affine(e.b)
        sign = 1 if isinstance(e, E.Add) else -1
        out = dict(ta)
        for k, v in tb.items():
            out[k] = out.get(k, 0) + sign * v
        return _clean(out), ca + sign * cb
    if isinstance(e, E.Neg):
        t, c = affine(e.a)
        return {k: -v for k, v in t.items()}, -c
    if isinstance(e, E.Mul):
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(x, E.Const) and not isinstance(x.value, (bool, float)):
                t, c = affine(y)
                m = int(x.value)
                return _clean({k: m * v for k, v in t.items()}), m * c
    if isinstance(e, (E.FloorDiv, E.Mod)) and _positive_const(e.b):
        s = int(e.b.value)
        t, c = affine(e.a)
        if all(v % s == 0 for v in t.values()):
            if isinstance(e, E.FloorDiv):
                return {k: v // s for k, v in t.items()}, c // s   # (s*a' + c) // s
            return {}, c % s                                      # (s*a' + c) % s
        inner = build((t, c), e.a.dtype)
        return {type(e)(inner, e.b, e.dtype): 1}, 0
    return {e: 1}, 0


def build(form: Affine, dtype: str) -> E.Expr:
    """The expression of an affine form: its terms in order, then the constant."""
    terms, c = form
    out: E.Expr | None = None
    for atom, k in terms.items():
        mag = atom if abs(k) == 1 else E.mul(E.Const(abs(k), dtype), atom)
        if out is None:
            out = mag if k > 0 else E.neg(mag)
        else:
            out = E.add(out, mag) if k > 0 else E.sub(out, mag)
    if out is None:
        return E.Const(c, dtype)
    if c:
        out = E.add(out, E.Const(c, dtype)) if c > 0 else E.sub(out, E.Const(-c, dtype))
    return out


def _clean(t: dict[E.Expr, int]) -> dict[E.Expr, int]:
    return {k: v for k, v in t.items() if v}


def _positive_const(e: E.Expr) -> bool:
    return (isinstance(e, E.Const) and not isinstance(e.value, (bool, float))
            and int(e.value) > 0)


def _has_division(e: E.Expr) -> bool:
    return _divisions(e) > 0


def _divisions(e: E.Expr) -> int:
    """How many floor divisions and moduli ``e`` holds outside loads."""
    if isinstance(e, BufferLoad):
        return 0
    own = 1 if isinstance(e, (E.FloorDiv, E.Mod)) else 0
    return own + sum(_divisions(x) for x in expr_children(e))
