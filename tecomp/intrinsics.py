"""The op table: every math function of the IR (a :class:`~tecomp.expr.Call` name) declared
once, with everything about it in one entry.

One declaration per primitive, as JAX registers a primitive's implementation, JVP and
transpose beside each other (``exp_p`` and ``ad.defjvp2`` in ``jax/_src/lax/lax.py``) and
Halide defines each math intrinsic once (``src/IROperator.cpp``).  An :class:`Intrinsic` holds

* its parameters (the arity), the dtype rule (float arguments only, or any number for
  ``abs``), the real interval where it is defined, and the docstring of ``tc.<name>``;
* ``fold`` (constant folding on Python numbers) and ``numpy`` (the reference evaluator);
* its derivatives: ``d1`` (``f'``) or, for binary ops, ``partials``; ``d2`` / ``d2_over_d1``
  (the second-order data of DOF) or ``second_partials``;
* ``c``, its C/CUDA spelling (a template; ``c_helpers`` are C functions added to the prelude),
  and ``llvm``, the key of its LLVM lowering: ``vmath.<f>`` (the inline vector routine of
  ``codegen/llvm/vmath.py``), ``llvm.<f>`` (the intrinsic ``llvm.<f>``), ``libm.<f>`` (the C
  library's scalar function) or ``abs``.

Every consumer looks the op up and none re-lists names: ``construct.call`` (arity, dtype
rule, folding), ``tc.<name>`` (generated in :mod:`tecomp.dsl`), the evaluator, reverse mode,
forward mode, DOF, the C renderer and the LLVM emitter.  Adding an op means adding an entry
to :data:`INTRINSICS` (plus a vector routine in ``vmath.py`` where one is wanted).

Derivatives.  ``f'`` is written once, as ``d1(p)``, where ``p`` is a :class:`Point`:
``p.u`` is the argument, ``p.y`` the value ``f(u)`` and ``p.f1`` the result of ``d1`` itself;
each is built only when a rule uses it (a reverse-mode operand may cost an auxiliary stage).
Reverse mode builds ``dx * f'(x)``, forward mode ``f'(u) * du``, DOF ``f'(u) g`` and
``f'(u) s + f''(u) Q(g, g)``.  Where ``f' = 1 / q`` is cheaper as a division
(``log' = 1 / u``), the entry gives ``d1_divisor = q`` instead and reverse mode builds
``dx / q``.  ``d2_over_d1`` (``f''/f'``, for the ``f`` with ``f' = 0`` only where ``f'' = 0``)
enables DOF's scaled layers and gives ``f'' = (f''/f') f'`` when no ``d2`` is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

import numpy as np

from . import expr as E

#: 2 / sqrt(pi), the factor of erf' = 2/sqrt(pi) exp(-u^2)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

Lazy = Union[E.Expr, Callable[[], E.Expr]]


class Point:
    """Where a rule takes a derivative: the arguments, the value ``y`` of the call and, for a
    unary op, ``f1 = f'(u)``.  Arguments and value may be given as thunks; each is built on
    first use and then kept."""

    __slots__ = ("op", "_args", "_y", "_f1")

    def __init__(self, op: Intrinsic, args: Sequence[Lazy], y: Lazy) -> None:
        self.op = op
        self._args = list(args)
        self._y = y
        self._f1: E.Expr | None = None

    def arg(self, i: int) -> E.Expr:
        v = self._args[i]
        if not isinstance(v, E.Expr):
            v = self._args[i] = v()
        return v

    @property
    def u(self) -> E.Expr:
        """The (first) argument."""
        return self.arg(0)

    @property
    def y(self) -> E.Expr:
        """The value of the call."""
        if not isinstance(self._y, E.Expr):
            self._y = self._y()
        return self._y

    @property
    def f1(self) -> E.Expr:
        """``f'(u)`` from the entry's ``d1`` (or ``1 / d1_divisor``)."""
        if self._f1 is None:
            self._f1 = self.op.first_derivative(self)
        return self._f1


Rule = Callable[[Point], E.Expr]


@dataclass(frozen=True, slots=True)
class Intrinsic:
    """One math op; see the module docstring for the meaning of each field."""

    name: str
    doc: str
    fold: Callable[..., Any]
    numpy: Callable[..., Any]
    c: str                      # C template: {0}, {1} the arguments, {f} "f" below float64
    llvm: str                   # lowering key: vmath.<f> | llvm.<f> | libm.<f> | abs
    params: tuple[str, ...] = ("x",)
    integer_ok: bool = False    # dtype rule: any non-boolean argument, else floats only
    domain: tuple[float, float] = (-math.inf, math.inf)  # (open) interval of definition
    zero_derivative: bool = False  # piecewise constant: the derivative is 0
    d1: Rule | None = None
    d1_divisor: Rule | None = None
    d2: Rule | None = None
    d2_over_d1: Rule | None = None
    partials: Callable[[Point, Sequence[bool]], tuple[E.Expr | None, ...]] | None = None
    second_partials: Callable[[Point, Sequence[E.Expr | None]],
                              dict[tuple[int, int], E.Expr]] | None = None
    c_helpers: str = ""         # C functions (QUAL: the target's qualifiers) for the prelude
    exact: bool = False         # the result needs no rounding to the argument's precision

    @property
    def arity(self) -> int:
        return len(self.params)

    @property
    def differentiable(self) -> bool:
        """Whether the entry says how to differentiate the op (0, ``f'`` or the partials)."""
        return self.zero_derivative or any(
            rule is not None for rule in (self.d1, self.d1_divisor, self.partials))

    def first_derivative(self, p: Point) -> E.Expr:
        """``f'(p.u)`` of a unary op."""
        if self.d1 is not None:
            return self.d1(p)
        if self.d1_divisor is not None:
            return E.div(1.0, self.d1_divisor(p))
        raise ValueError(f"tc.{self.name} has no first derivative")

    def second_derivative(self, p: Point) -> E.Expr:
        """``f''(p.u)`` of a unary op (uses ``p.f1``)."""
        if self.d2 is not None:
            return self.d2(p)
        if self.d2_over_d1 is not None:
            return E.mul(self.d2_over_d1(p), p.f1)
        raise ValueError(f"tc.{self.name} has no second derivative")


def lookup(name: str) -> Intrinsic | None:
    """The entry of the op ``name``, or None."""
    return INTRINSICS.get(name)


def sign(u: E.Expr) -> E.Expr:
    """sign(u) as an expression (0 at 0): the derivative of ``abs``."""
    return E.select(E.compare(E.GT, u, 0.0), E.Const(1.0, u.dtype),
                    E.select(E.compare(E.LT, u, 0.0), E.Const(-1.0, u.dtype),
                             E.Const(0.0, u.dtype)))


def _sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-x))


def _erf(x: Any) -> Any:
    """SciPy's vectorised erf when installed (imported on first use: it is slow to import),
    else the math module's, element by element."""
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is a test dependency
        erf_u = np.frompyfunc(math.erf, 1, 1)
        return np.asarray(erf_u(x), dtype=np.float64).astype(np.asarray(x).dtype)
    return erf(x)


def _pow_partials(p: Point, need: Sequence[bool]) -> tuple[E.Expr | None, E.Expr | None]:
    """(d/da, d/db) of ``y = a ** b``, each only where needed, with PyTorch's conventions at
    the singular points: d/da is 0 where ``b == 0``, d/db is 0 where ``a == 0, b >= 0`` (so
    ``x ** 2`` at 0 and ``0 ** y`` have finite derivatives, not NaN)."""
    d_a = d_b = None
    dt = p.arg(0).dtype  # the arguments have the result's dtype
    if need[0]:
        a, b = p.arg(0), p.arg(1)
        d_a = E.select(E.compare(E.EQ, b, 0), E.Zero(dt), E.mul(b, E.power(a, E.sub(b, 1))))
    if need[1]:
        a, b = p.arg(0), p.arg(1)
        at0 = E.logical_and(E.compare(E.EQ, a, 0), E.compare(E.GE, b, 0))
        d_b = E.select(at0, E.Zero(dt), E.mul(p.y, E.call("log", a)))
    return d_a, d_b


def _pow_second(p: Point, first: Sequence[E.Expr | None]) -> dict[tuple[int, int], E.Expr]:
    """The second partials of ``a ** b`` that the needed first partials call for."""
    a, b = p.arg(0), p.arg(1)
    out = {}
    if first[0] is not None:                                    # b (b - 1) a^(b - 2)
        c2 = E.mul(b, E.sub(b, 1.0))
        out[0, 0] = (E.Zero(p.y.dtype) if isinstance(c2, E.Const) and c2.value == 0 else
                     E.mul(c2, E.power(a, E.sub(b, 2.0))))
    if first[1] is not None:                                    # y log(a)^2
        out[1, 1] = E.mul(first[1], E.call("log", a))
    if first[0] is not None and first[1] is not None:           # a^(b-1) (1 + b log a)
        out[0, 1] = E.mul(E.power(a, E.sub(b, 1.0)), E.add(1.0, E.mul(b, E.call("log", a))))
    return out


_SOFTPLUS_C = """QUAL float tc_softplus(float x) {
    return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x)));
}
QUAL double tc_softplus(double x) { return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x))); }
"""


def _example(call: str, values: str, result: str, dtype: str = "float64") -> str:
    return f"""

    Example::

        >>> import numpy as np, tecomp as tc
        >>> x = tc.placeholder((3,), name="x", dtype="{dtype}")
        >>> y = tc.compute((3,), lambda i: {call}, name="y")
        >>> tc.evaluate([y], {{x: np.array({values})}})[0].round(4).tolist()
        {result}
"""


INTRINSICS: dict[str, Intrinsic] = {op.name: op for op in [
    Intrinsic(
        "exp", "Element-wise ``e ** x`` of a float expression.\n\n"
        "    Derivative: ``exp(x)`` itself (rules reuse the forward value)."
        + _example("tc.exp(x[i])", "[0.0, 1.0, -1.0]", "[1.0, 2.7183, 0.3679]"),
        math.exp, np.exp, "exp{f}({0})", "vmath.exp",
        d1=lambda p: p.y,                                       # exp' = exp
        d2_over_d1=lambda p: E.Const(1.0, p.y.dtype)),          # exp'' / exp' = 1
    Intrinsic(
        "log", "Element-wise natural logarithm of a float expression (NaN below 0, -inf at 0)."
        "\n\n    Derivative: ``1 / x``."
        + _example("tc.log(x[i])", "[1.0, 2.0, 10.0]", "[0.0, 0.6931, 2.3026]"),
        math.log, np.log, "log{f}({0})", "vmath.log", domain=(0.0, math.inf),
        d1_divisor=lambda p: p.u,                               # log' = 1 / u
        d2=lambda p: E.neg(E.mul(p.f1, p.f1))),                 # log'' = -1/u^2
    Intrinsic(
        "sqrt", "Element-wise square root of a float expression (NaN below 0).\n\n"
        "    Derivative: ``1 / (2 sqrt(x))`` (rules reuse the forward value)."
        + _example("tc.sqrt(x[i])", "[0.0, 4.0, 2.0]", "[0.0, 2.0, 1.4142]"),
        math.sqrt, np.sqrt, "sqrt{f}({0})", "llvm.sqrt", domain=(0.0, math.inf),
        d1_divisor=lambda p: E.mul(2.0, p.y),                   # sqrt' = 1 / 2y
        d2=lambda p: E.div(-0.25, E.mul(p.u, p.y))),            # sqrt'' = -u^(-3/2) / 4
    Intrinsic(
        "tanh", "Element-wise hyperbolic tangent of a float expression.\n\n"
        "    Derivative: ``1 - tanh(x) ** 2`` (rules reuse the forward value)."
        + _example("tc.tanh(x[i])", "[0.0, 1.0, -2.0]", "[0.0, 0.7616, -0.964]"),
        math.tanh, np.tanh, "tanh{f}({0})", "vmath.tanh",
        d1=lambda p: E.sub(1.0, E.mul(p.y, p.y)),               # tanh' = 1 - y^2
        d2_over_d1=lambda p: E.mul(-2.0, p.y)),                 # tanh'' / tanh' = -2y
    Intrinsic(
        "sigmoid", "Element-wise logistic function ``1 / (1 + exp(-x))`` of a float "
        "expression.\n\n    Derivative: ``sigmoid(x) (1 - sigmoid(x))`` (reuses the forward "
        "value)." + _example("tc.sigmoid(x[i])", "[0.0, 2.0, -2.0]", "[0.5, 0.8808, 0.1192]"),
        lambda v: 1.0 / (1.0 + math.exp(-v)), _sigmoid, "(1.0{f} / (1.0{f} + exp{f}(-{0})))",
        "vmath.sigmoid",
        d1=lambda p: E.mul(p.y, E.sub(1.0, p.y)),               # s' = s (1 - s)
        d2_over_d1=lambda p: E.sub(1.0, E.mul(2.0, p.y))),      # s'' / s' = 1 - 2s
    Intrinsic(
        "sin", "Element-wise sine (radians) of a float expression.\n\n"
        "    Derivative: ``cos(x)``."
        + _example("tc.sin(x[i])", "[0.0, 1.0, 3.0]", "[0.0, 0.8415, 0.1411]"),
        math.sin, np.sin, "sin{f}({0})", "llvm.sin",
        d1=lambda p: E.call("cos", p.u),                        # sin' = cos
        d2=lambda p: E.neg(p.y)),                               # sin'' = -sin
    Intrinsic(
        "cos", "Element-wise cosine (radians) of a float expression.\n\n"
        "    Derivative: ``-sin(x)``."
        + _example("tc.cos(x[i])", "[0.0, 1.0, 3.0]", "[1.0, 0.5403, -0.99]"),
        math.cos, np.cos, "cos{f}({0})", "llvm.cos",
        d1=lambda p: E.neg(E.call("sin", p.u)),                 # cos' = -sin
        d2=lambda p: E.neg(p.y)),                               # cos'' = -cos
    Intrinsic(
        "abs", "Element-wise absolute value of a float or integer expression (integers wrap: "
        "``abs`` of the most negative value is itself).\n\n"
        "    Derivative: ``sign(x)``, taken as 0 at 0."
        + _example("tc.abs(x[i])", "[-1.5, 0.0, 2.0]", "[1.5, 0.0, 2.0]"),
        abs, np.abs, "tc_abs({0})", "abs", integer_ok=True, exact=True,
        d1=lambda p: sign(p.u),                                 # abs' = sign, 0 at 0
        d2=lambda p: E.Zero(p.u.dtype)),                        # abs'' = 0 a.e.
    Intrinsic(
        "erf", "Element-wise error function ``2/sqrt(pi) * integral_0^x exp(-t**2) dt`` of a "
        "float expression (GELU's building block).\n\n"
        "    Derivative: ``2/sqrt(pi) * exp(-x ** 2)``."
        + _example("tc.erf(x[i])", "[0.0, 0.5, -1.0]", "[0.0, 0.5205, -0.8427]"),
        math.erf, _erf, "erf{f}({0})", "vmath.erf",
        d1=lambda p: E.mul(TWO_OVER_SQRT_PI, E.call("exp", E.neg(E.mul(p.u, p.u)))),
        d2_over_d1=lambda p: E.mul(-2.0, p.u)),                 # erf'' / erf' = -2u
    Intrinsic(
        "floor", "Element-wise largest integer not above ``x``, as a float of ``x``'s dtype."
        "\n\n    Derivative: 0 (piecewise constant)."
        + _example("tc.floor(x[i])", "[1.5, -1.5, 2.0]", "[1.0, -2.0, 2.0]"),
        math.floor, np.floor, "floor{f}({0})", "llvm.floor", exact=True,
        zero_derivative=True),
    Intrinsic(
        "ceil", "Element-wise smallest integer not below ``x``, as a float of ``x``'s dtype."
        "\n\n    Derivative: 0 (piecewise constant)."
        + _example("tc.ceil(x[i])", "[1.5, -1.5, 2.0]", "[2.0, -1.0, 2.0]"),
        math.ceil, np.ceil, "ceil{f}({0})", "llvm.ceil", exact=True,
        zero_derivative=True),
    Intrinsic(
        "softplus", "Element-wise ``log(1 + exp(x))`` of a float expression, computed without "
        "overflow as ``max(x, 0) + log1p(exp(-|x|))``.\n\n"
        "    Derivative: ``sigmoid(x)``."
        + _example("tc.softplus(x[i])", "[0.0, 1.0, -30.0]", "[0.6931, 1.3133, 0.0]"),
        lambda v: max(v, 0.0) + math.log1p(math.exp(-abs(v))), lambda x: np.logaddexp(0, x),
        "tc_softplus({0})", "vmath.softplus", c_helpers=_SOFTPLUS_C,
        d1=lambda p: E.call("sigmoid", p.u),                    # softplus' = sigmoid
        d2_over_d1=lambda p: E.sub(1.0, p.f1)),                 # s'' / s' = 1 - sigmoid
    Intrinsic(
        "pow", "Element-wise ``x ** y`` of float expressions (also written ``x ** y``).\n\n"
        "    Derivatives: ``y x ** (y - 1)`` in ``x`` (0 where ``y == 0``) and ``x ** y log(x)``"
        " in ``y`` (0 where ``x == 0`` and ``y >= 0``)."
        + _example("tc.pow(x[i], 2.0)", "[3.0, 0.5, -2.0]", "[9.0, 0.25, 4.0]"),
        math.pow, np.power, "pow{f}({0}, {1})", "llvm.pow", params=("x", "y"),
        partials=_pow_partials, second_partials=_pow_second),
]}
