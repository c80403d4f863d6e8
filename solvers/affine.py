"""Affine expressions over named integer variables.

An :class:`Affine` is ``sum(c_v * v) + c0`` with integer coefficients ``c_v`` and an integer
constant ``c0``.  Variables are plain strings; whether a name is a loop variable, a
parameter (a symbolic size such as ``n``) or an existential is decided by the container
(the caller, e.g. zero elimination), never by the expression.

Affine values are immutable, hashable and compared structurally::

    >>> e = Affine.parse("2*x + 4*y - 3")
    >>> e.gcd(), str(e.substitute({"y": Affine.var("x")}))
    (2, '6*x - 3')

Coefficients are exact Python ints (no overflow); numpy integers are accepted on input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["Affine", "AffineLike", "Congruence", "as_affine", "combine"]


class Affine:
    """An affine integer expression ``sum(coeffs[v] * v) + const``.

    Build one with ``Affine({"x": 2, "y": -1}, 3)``, :meth:`var`, :meth:`constant`,
    :meth:`parse`, or arithmetic on those (``+``, ``-``, multiplication by an int).
    Zero coefficients are never stored, so equality and hashing are structural.
    """

    __slots__ = ("_coeffs", "_const", "_hash")

    _coeffs: dict[str, int]
    _const: int
    _hash: int | None

    def __init__(self, coeffs: Mapping[str, int] | None = None, const: int = 0) -> None:
        self._coeffs = {str(k): int(v) for k, v in coeffs.items() if v} if coeffs else {}
        self._const = int(const)
        self._hash = None

    @classmethod
    def _make(cls, coeffs: dict[str, int], const: int) -> Affine:
        """Wrap ``coeffs`` (owned, zero-free) without copying: the internal fast path."""
        obj = object.__new__(cls)
        obj._coeffs = coeffs
        obj._const = const
        obj._hash = None
        return obj

    @classmethod
    def var(cls, name: str, coeff: int = 1) -> Affine:
        """The expression ``coeff * name``."""
        return cls._make({name: int(coeff)} if coeff else {}, 0)

    @classmethod
    def constant(cls, value: int) -> Affine:
        """The constant expression ``value``."""
        return cls._make({}, int(value))

    @classmethod
    def parse(cls, text: str) -> Affine:
        """Parse ``"2*x - (y - 3)"``: ints, names, ``+ - *`` (one side constant), parentheses."""
        return _Parser(text).parse()

    # -- accessors ---------------------------------------------------------------------------
    @property
    def coeffs(self) -> Mapping[str, int]:
        """Read-only view of the non-zero coefficients."""
        return MappingProxyType(self._coeffs)

    @property
    def const(self) -> int:
        """The constant term."""
        return self._const

    def coeff(self, name: str) -> int:
        """Coefficient of ``name`` (0 when absent)."""
        return self._coeffs.get(name, 0)

    @property
    def variables(self) -> frozenset[str]:
        """Names with a non-zero coefficient."""
        return frozenset(self._coeffs)

    def is_constant(self) -> bool:
        """True when no variable occurs."""
        return not self._coeffs

    def items(self) -> Iterator[tuple[str, int]]:
        """``(name, coefficient)`` pairs, sorted by name."""
        return iter(sorted(self._coeffs.items()))

    def gcd(self) -> int:
        """Non-negative gcd of the variable coefficients (0 for a constant)."""
        return math.gcd(*self._coeffs.values()) if self._coeffs else 0

    def content(self) -> int:
        """Non-negative gcd of all coefficients and the constant."""
        return math.gcd(self.gcd(), self._const)

    # -- arithmetic --------------------------------------------------------------------------
    def __add__(self, other: AffineLike) -> Affine:
        if isinstance(other, Affine):
            if not other._coeffs:
                return Affine._make(self._coeffs, self._const + other._const)
            out = dict(self._coeffs)
            for k, v in other._coeffs.items():
                s = out.get(k, 0) + v
                if s:
                    out[k] = s
                else:
                    del out[k]
            return Affine._make(out, self._const + other._const)
        return Affine._make(self._coeffs, self._const + _int(other))

    __radd__ = __add__

    def __neg__(self) -> Affine:
        return Affine._make({k: -v for k, v in self._coeffs.items()}, -self._const)

    def __sub__(self, other: AffineLike) -> Affine:
        return self + (-as_affine(other))

    def __rsub__(self, other: AffineLike) -> Affine:
        return as_affine(other) + (-self)

    def __mul__(self, k: int) -> Affine:
        k = _int(k)
        if k == 0:
            return _ZERO
        if k == 1:
            return self
        return Affine._make({n: v * k for n, v in self._coeffs.items()}, self._const * k)

    __rmul__ = __mul__

    def axpy(self, k: int, other: Affine) -> Affine:
        """``self + k * other`` without the intermediate product."""
        if not k:
            return self
        out = dict(self._coeffs)
        for n, v in other._coeffs.items():
            s = out.get(n, 0) + k * v
            if s:
                out[n] = s
            else:
                del out[n]
        return Affine._make(out, self._const + k * other._const)

    def exact_div(self, k: int) -> Affine:
        """Divide every coefficient and the constant by ``k``; raises if not exact."""
        if k == 0 or self.content() % k:
            raise ArithmeticError(f"{self} is not divisible by {k}")
        return Affine._make({n: v // k for n, v in self._coeffs.items()}, self._const // k)

    def drop(self, name: str) -> Affine:
        """The expression without the term in ``name``."""
        if name not in self._coeffs:
            return self
        out = dict(self._coeffs)
        del out[name]
        return Affine._make(out, self._const)

    def substitute(self, mapping: Mapping[str, AffineLike]) -> Affine:
        """Replace each variable in ``mapping`` by the given expression (simultaneously)."""
        out: Affine = Affine._make({}, self._const)
        rest: dict[str, int] = {}
        for n, v in self._coeffs.items():
            if n in mapping:
                out = out.axpy(v, as_affine(mapping[n]))
            else:
                rest[n] = v
        return out + Affine._make(rest, 0) if rest else out

    def rename(self, mapping: Mapping[str, str]) -> Affine:
        """Rename variables (names absent from ``mapping`` are kept)."""
        return self.substitute({k: Affine.var(v) for k, v in mapping.items()})

    def evaluate(self, env: Mapping[str, int]) -> int:
        """Value for integer values of all variables; raises ``KeyError`` naming a missing one."""
        total = self._const
        for n, v in self._coeffs.items():
            if n not in env:
                raise KeyError(f"no value for variable {n!r} in {self}")
            total += v * int(env[n])
        return total

    def partial(self, env: Mapping[str, int]) -> Affine:
        """Substitute the integer values given in ``env``; other variables stay symbolic."""
        const = self._const
        rest: dict[str, int] = {}
        for n, v in self._coeffs.items():
            if n in env:
                const += v * int(env[n])
            else:
                rest[n] = v
        return Affine._make(rest, const)

    # -- protocol ----------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Affine):
            return self._const == other._const and self._coeffs == other._coeffs
        if isinstance(other, int):
            return not self._coeffs and self._const == other
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:  # a constant hashes like the int it equals
            self._hash = hash((frozenset(self._coeffs.items()), self._const)) if self._coeffs \
                else hash(self._const)
        return self._hash

    def __bool__(self) -> bool:
        return bool(self._coeffs) or self._const != 0

    def __repr__(self) -> str:
        return f"Affine({str(self)!r})"

    def __str__(self) -> str:
        parts: list[str] = []
        for n, v in sorted(self._coeffs.items()):
            mag = abs(v)
            term = n if mag == 1 else f"{mag}*{n}"
            parts.append(("- " if v < 0 else "+ ") + term)
        if self._const or not parts:
            parts.append(("- " if self._const < 0 else "+ ") + str(abs(self._const)))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]


AffineLike = Affine | int
_ZERO = Affine._make({}, 0)


def _int(k: object) -> int:
    if isinstance(k, bool) or not hasattr(k, "__index__"):
        raise TypeError(f"expected an integer, got {k!r}")
    return int(k)  # type: ignore[call-overload]


def as_affine(value: AffineLike | str) -> Affine:
    """Coerce an int, a name (``str``) or an :class:`Affine` to an :class:`Affine`."""
    if isinstance(value, Affine):
        return value
    if isinstance(value, str):
        return Affine.var(value) if _NAME.fullmatch(value) else Affine.parse(value)
    return Affine._make({}, _int(value))


def combine(terms: Iterable[tuple[int, Affine]]) -> Affine:
    """``sum(k * e for k, e in terms)``."""
    out = _ZERO
    for k, e in terms:
        out = out.axpy(k, e)
    return out


@dataclass(frozen=True, slots=True)
class Congruence:
    """The condition ``expr = 0 (mod modulus)`` with ``modulus >= 1``.

    Build it with :meth:`make`, which normalises (coefficients reduced into
    ``[0, modulus)``, common factors with the modulus divided out) and returns ``True`` /
    ``False`` for conditions that hold always / never.
    """

    expr: Affine
    modulus: int

    @staticmethod
    def make(expr: Affine, modulus: int) -> Congruence | bool:
        m = abs(int(modulus))
        if m == 0:
            raise ValueError("modulus must be non-zero (use an equality)")
        coeffs = {k: v % m for k, v in expr.coeffs.items() if v % m}
        const = expr.const % m
        g = math.gcd(m, const, *coeffs.values())
        if g > 1:
            m //= g
            coeffs = {k: v // g for k, v in coeffs.items()}
            const //= g
        if m == 1:
            return True
        if not coeffs:
            return const == 0
        return Congruence(Affine._make(coeffs, const), m)

    def holds(self, env: Mapping[str, int]) -> bool:
        """True when the condition holds for these values."""
        return self.expr.evaluate(env) % self.modulus == 0

    def substitute(self, mapping: Mapping[str, AffineLike]) -> Congruence | bool:
        return Congruence.make(self.expr.substitute(mapping), self.modulus)

    def __str__(self) -> str:
        return f"{self.expr} = 0 mod {self.modulus}"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_']*")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_']*)|(.))")


class _Parser:
    """Recursive-descent parser for affine text (used by tests and the constraint parser)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        for m in _TOKEN.finditer(text):
            num, name, sym = m.groups()
            if num is not None:
                self.tokens.append(("int", num))
            elif name is not None:
                self.tokens.append(("name", name))
            elif sym is not None and not sym.isspace():
                self.tokens.append(("sym", sym))
        self.pos = 0

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _error(self, what: str) -> ValueError:
        return ValueError(f"cannot parse affine expression {self.text!r}: {what}")

    def parse(self) -> Affine:
        e = self._expr()
        if self._peek() is not None:
            raise self._error(f"unexpected {self._peek()[1]!r}")  # type: ignore[index]
        return e

    def _expr(self) -> Affine:
        e = self._term()
        while (tok := self._peek()) is not None and tok[1] in "+-":
            self.pos += 1
            rhs = self._term()
            e = e + rhs if tok[1] == "+" else e - rhs
        return e

    def _term(self) -> Affine:
        e = self._factor()
        while (tok := self._peek()) is not None and tok[1] == "*":
            self.pos += 1
            rhs = self._factor()
            if e.is_constant():
                e = rhs * e.const
            elif rhs.is_constant():
                e = e * rhs.const
            else:
                raise self._error("product of two non-constant terms")
        return e

    def _factor(self) -> Affine:
        tok = self._peek()
        if tok is None:
            raise self._error("unexpected end")
        self.pos += 1
        kind, text = tok
        if kind == "int":
            return Affine.constant(int(text))
        if kind == "name":
            return Affine.var(text)
        if text == "-":
            return -self._factor()
        if text == "+":
            return self._factor()
        if text == "(":
            e = self._expr()
            if self._peek() != ("sym", ")"):
                raise self._error("missing ')'")
            self.pos += 1
            return e
        raise self._error(f"unexpected {text!r}")
