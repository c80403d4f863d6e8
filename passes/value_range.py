"""Sound intervals of integer index expressions (interval arithmetic).

:func:`value_range` gives ``[lo, hi]`` (both included) holding every value of an integer
expression when its variables range over given intervals: ``+ - *``, ``//`` and ``%`` by
positive constants (floor semantics, as every backend computes them), ``min``, ``max``,
negation, ``select`` (the hull of both arms) and integer casts.  Anything else -- a variable
without an interval, a read, a division by a non-constant -- gives None.  Over variables that
each occur once it is exact; otherwise it over-approximates, which is what both of its users
need: inlining keeps a read whose interval may leave its tensor (:mod:`.inline_bounds`), and
the bounds pass proves in range, without isl, an access whose interval lies inside a constant
extent (:mod:`.bounds_affine`).
"""

from __future__ import annotations

from tecomp import expr as E

__all__ = ["Range", "const_int", "value_range"]

Range = tuple[int, int] | None  # [lo, hi], both included; None: unknown

#: integer types whose arithmetic does not wrap below zero
_SIGNED = ("int64", "int32", "int16", "int8")


def const_int(e: object) -> int | None:
    """The value of an integer constant (an ``E.Const`` or a Python int, not a bool)."""
    if isinstance(e, E.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, int) and not isinstance(e, bool):
        return e
    return None


def value_range(e: E.Expr, env: dict[E.Var, tuple[int, int]], *, signed: bool = False,
                memo: dict[int, tuple[E.Expr, Range]] | None = None) -> Range:
    """A sound interval of the integer expression ``e`` over ``env``, or None.  ``signed``:
    None for any operation of an unsigned type (its arithmetic wraps, so the interval of the
    mathematical value would not hold the machine's).  Each shared node is looked at once."""
    memo = {} if memo is None else memo
    hit = memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    out = _range(e, env, signed, memo)
    memo[id(e)] = (e, out)
    return out


def _range(e: E.Expr, env: dict[E.Var, tuple[int, int]], signed: bool,
           memo: dict[int, tuple[E.Expr, Range]]) -> Range:
    c = const_int(e)
    if c is not None:
        return (c, c)
    if isinstance(e, E.IterVar):
        e = e.var
    if isinstance(e, E.Var):
        return env.get(e)
    if signed and getattr(e, "dtype", None) not in _SIGNED:
        return None

    def sub(x: E.Expr) -> Range:
        return value_range(x, env, signed=signed, memo=memo)

    if isinstance(e, E.Cast):
        return sub(e.value) if e.dtype.startswith(("int", "uint")) else None
    if isinstance(e, E.Neg):
        a = sub(e.a)
        return None if a is None else (-a[1], -a[0])
    if isinstance(e, E.Select):
        t, f = sub(e.t), sub(e.f)
        return None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
    if not isinstance(e, E.BinaryOp):
        return None
    a, b = sub(e.a), sub(e.b)
    if a is None or b is None:
        return None
    if isinstance(e, E.Add):
        return (a[0] + b[0], a[1] + b[1])
    if isinstance(e, E.Sub):
        return (a[0] - b[1], a[1] - b[0])
    if isinstance(e, E.Mul):
        ps = [x * y for x in a for y in b]
        return (min(ps), max(ps))
    if isinstance(e, E.Min):
        return (min(a[0], b[0]), min(a[1], b[1]))
    if isinstance(e, E.Max):
        return (max(a[0], b[0]), max(a[1], b[1]))
    if b[0] != b[1] or b[0] <= 0:
        return None
    q = b[0]
    if isinstance(e, E.FloorDiv):
        return (a[0] // q, a[1] // q)
    if isinstance(e, E.Mod):  # exact within one period, else every remainder
        return (a[0] % q, a[1] % q) if a[0] // q == a[1] // q else (0, q - 1)
    return None
