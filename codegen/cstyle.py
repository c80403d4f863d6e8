"""A C-style renderer of the loop IR: scalar expressions and statements to C text.

The renderer follows tinygrad's ``renderer/cstyle.py`` design (a base class that maps IR nodes
to C templates; a target is a small subclass overriding a few hooks).  It sees only lowered loop
IR (:mod:`tecomp.loopir`); ``Reduce`` and ``TensorRead`` must have been lowered away.

Types.  Every dtype has a *register* type, the C type its values are computed in, and a
*memory* type, the C type of one buffer element (a target hook):

=========  ============  ======================================================
dtype      register      note
=========  ============  ======================================================
float16    ``float``     computed in single precision; rounded at casts, math
                         calls and stores (the LLVM backend rounds after every
                         operation, as NumPy does, so the two may differ in the
                         last float16 bit of a chained expression)
bfloat16   ``float``     likewise (a target chooses its memory type)
float32    ``float``
float64    ``double``
int32      ``int``
int64      ``long long`` also every index and size
bool       ``bool``      one byte in memory, as NumPy's bool
=========  ============  ======================================================

Semantics follow the reference evaluator (:mod:`tecomp.evaluate`):

* ``//`` and ``%`` use floor (Python) semantics through small helper functions of the prelude:
  C's ``/`` truncates toward zero, so ``-7 / 2`` is ``-3`` with remainder ``-1``; the remainder
  is non-zero and its sign differs from the divisor's, so the quotient becomes ``-4`` and the
  remainder ``-1 + 2 = 1``.  A zero divisor behaves as 1 (the evaluator's convention; never a
  trap) and ``x // -1`` is computed as ``-x`` so that ``INT_MIN // -1`` wraps.  On floats they
  follow NumPy's ``divmod`` (``fmod``, then a sign fix, then ``floor``).
* ``min``/``max`` propagate NaN as NumPy's ``minimum``/``maximum`` do.
* ``if_then_else`` renders as ``c ? t : f`` and ``&``/``|`` as ``&&``/``||``: C evaluates only
  the selected arm, so a guarded read (padding) never happens where its guard is false.
* Casts from float to int truncate toward zero, give 0 for non-finite values and saturate out
  of range; casts to bool compare with zero.
* Math calls are spelled as their op-table entry says (:mod:`tecomp.intrinsics`): the precise
  C library functions of the register type (``expf``/``exp``, ``logf``/``log``, ``tanhf``,
  ``erff``, ``powf``, ``sqrtf``, ``fabsf``, ``floorf``, ``ceilf``, ``sinf``, ``cosf``);
  ``sigmoid(x)`` is ``1 / (1 + exp(-x))``.  No fast-math intrinsics.

Names.  Variables and buffers are rendered under C identifiers derived from their names
(non-identifier characters replaced, C/C++ keywords and the reserved prefix ``tc_`` avoided,
clashes between distinct objects resolved with a numeric suffix).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import CompileError
from tecomp.functor import fresh_name
from tecomp.intrinsics import INTRINSICS, lookup
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LetStmt,
    LoweredFunc,
    Seq,
    Stmt,
    Store,
)
from tecomp.stmt_functor import stmt_exprs, walk_expr, walk_stmt

REG_TYPES = {"float16": "float", "bfloat16": "float", "float32": "float", "float64": "double",
             "int32": "int", "int64": "long long", "bool": "bool"}

_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t
class compl const constexpr const_cast continue decltype default delete do double dynamic_cast
else enum explicit export extern false float for friend goto if inline int long mutable namespace
new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast return short signed sizeof static static_assert static_cast struct switch
template this thread_local throw true try typedef typeid typename union unsigned using virtual
void volatile wchar_t while xor xor_eq restrict main threadIdx blockIdx blockDim gridDim warpSize
NAN INFINITY abs min max fmin fmax
""".split()) | frozenset(  # the C functions the op table's templates call, both precisions
    ident for op in INTRINSICS.values() for suffix in ("", "f")
    for ident in re.findall(r"(?<![\w.])[A-Za-z_]\w*", op.c.replace("{f}", suffix)))

_CMP = {E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">=", E.EQ: "==", E.NE: "!="}
_ARITH = {E.Add: "+", E.Sub: "-", E.Mul: "*"}


def float_literal(value: float, dtype: str) -> str:
    """A C literal of the register type of ``dtype`` that parses back to exactly ``value``."""
    v = float(value)
    if dtype == "float16":
        v = float(np.float16(v))
    elif dtype in ("float32", "bfloat16"):
        v = float(np.float32(v))
    single = dtype != "float64"
    if math.isnan(v):
        return "tc_nanf()" if single else "tc_nan()"
    if math.isinf(v):
        s = "tc_inff()" if single else "tc_inf()"
        return s if v > 0 else f"(-{s})"
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return text + ("f" if single else "")


def int_literal(value: int, dtype: str) -> str:
    """A C literal of an int32/int64 value, wrapped to the type's range as NumPy does."""
    bits = 32 if dtype == "int32" else 64
    v = int(value) & ((1 << bits) - 1)
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    suffix = "" if bits == 32 else "LL"
    if v == -(1 << (bits - 1)):
        return f"({v + 1}{suffix} - 1{suffix})"
    return f"{v}{suffix}" if v >= 0 else f"({v}{suffix})"


class CStyleRenderer:
    """Render loop IR as C.  Targets subclass it and override the hooks marked below.

    ``render_stmt(s)`` returns the lines of ``s``; ``expr(e)`` the text of an expression.
    Names are assigned by :meth:`bind_names` (call it once per function before rendering).
    """

    #: qualifiers of the prelude's helper functions (hook)
    helper_qualifier = "inline"
    indent_unit = "    "

    def __init__(self) -> None:
        self.names: dict[Any, str] = {}
        self._taken: set[str] = set()
        self.locals: set[Buffer] = set()

    # ------------------------------------------------------------------------------- hooks
    def reg_type(self, dtype: str) -> str:
        """The C type values of ``dtype`` are computed in."""
        try:
            return REG_TYPES[dtype]
        except KeyError:
            raise CompileError(f"render: unsupported dtype {dtype!r}") from None

    def mem_type(self, buf: Buffer) -> str:
        """The C type of one element of ``buf`` (hook)."""
        if buf.dtype == "float16":
            raise CompileError(f"render: buffer {buf.name!r}: float16 needs a target type")
        return self.reg_type(buf.dtype)

    def load_conv(self, buf: Buffer, text: str) -> str:
        """Convert an element of ``buf`` read as ``text`` to its register type (hook)."""
        return text

    def store_conv(self, buf: Buffer, text: str) -> str:
        """Convert a register value ``text`` to the memory type of ``buf`` (hook)."""
        return text

    def round_to(self, dtype: str, text: str) -> str:
        """Round a float register value to the precision of ``dtype`` (hook)."""
        return text

    def unroll_pragma(self) -> str | None:
        """The pragma put before a loop of kind "unrolled", if any (hook)."""
        return None

    # ------------------------------------------------------------------------------- names
    def cname(self, key: Any, base: str) -> str:
        """The C identifier of ``key`` (a Var or Buffer), assigned on first use."""
        hit = self.names.get(key)
        if hit is not None:
            return hit
        ident = re.sub(r"\W", "_", base) or "v"
        if ident[0].isdigit():
            ident = "v" + ident
        if ident in _KEYWORDS or ident.startswith("tc_") or ident.startswith("__"):
            ident = "u_" + ident.lstrip("_")
        ident = fresh_name(ident, self._taken)
        self._taken.add(ident)
        self.names[key] = ident
        return ident

    def var(self, v: E.Var) -> str:
        return self.cname(("var", v.name, v.dtype), v.name)

    def buffer(self, b: Buffer) -> str:
        return self.cname(("buf", b), b.name)

    def reserve(self, *idents: str) -> None:
        """Keep user names away from identifiers the target generates itself."""
        self._taken.update(idents)

    def bind_names(self, func: LoweredFunc) -> None:
        """Assign C names: parameters first, then buffers, then every other variable."""
        for p in func.params:
            self.var(p)
        for b in func.inputs + func.outputs:
            self.buffer(b)
        for s in walk_stmt(func.body):
            if isinstance(s, (For, LetStmt)):
                self.var(s.var)
            if isinstance(s, Allocate):
                self.buffer(s.buffer)
            for x in stmt_exprs(s):
                for n in walk_expr(x):
                    if isinstance(n, E.Var):
                        self.var(n)
            if isinstance(s, Store):
                self.buffer(s.buffer)

    # ------------------------------------------------------------------------------- exprs
    def expr(self, e: E.Expr) -> str:
        method = getattr(self, "visit_" + type(e).__name__, None)
        if method is None:
            raise CompileError(f"render: no C rule for {type(e).__name__}: {e}")
        return method(e)

    def conv(self, e: E.Expr, dtype: str) -> str:
        """``e`` rendered and converted to the register type of ``dtype``."""
        text = self.expr(e)
        return self.convert(text, e.dtype, dtype)

    def convert(self, text: str, src: str, dst: str, rounding: bool = True) -> str:
        """Convert register value ``text`` of dtype ``src`` to dtype ``dst`` (``tc.cast``).

        A conversion to float16/bfloat16 rounds to that precision unless ``rounding`` is off
        (a store rounds by itself)."""
        if src == dst:
            return text
        rt = self.reg_type(dst)
        if dst == "bool":
            return f"(({text}) != 0)"
        if dtypes.is_int(dst) and dtypes.is_float(src):
            return f"tc_f2i_{dst}({text})"
        if dtypes.is_float(dst):
            out = f"(({rt})({text}))" if self.reg_type(src) != rt else text
            if rounding and dst in ("float16", "bfloat16"):
                out = self.round_to(dst, out)
            return out
        return f"(({rt})({text}))"

    def visit_Const(self, e: E.Const) -> str:
        if dtypes.is_float(e.dtype):
            return float_literal(e.value, e.dtype)
        if e.dtype == "bool":
            return "true" if e.value else "false"
        return int_literal(e.value, e.dtype)

    def visit_Zero(self, e: E.Zero) -> str:
        return self.visit_Const(E.Const(0, e.dtype))

    def visit_Var(self, e: E.Var) -> str:
        return self.var(e)

    def visit_IterVar(self, e: E.IterVar) -> str:
        raise CompileError(f"render: the axis {e} must be lowered to a loop variable")

    def visit_BufferLoad(self, e: BufferLoad) -> str:
        buf = e.buffer
        if buf in self.locals and buf.ndim == 0:
            text = self.buffer(buf)
            return self.convert(text, buf.dtype, e.dtype)
        text = self.load_conv(buf, f"{self.buffer(buf)}[{self.flat_index(buf, e.indices)}]")
        return self.convert(text, buf.dtype, e.dtype)

    def flat_index(self, buf: Buffer, indices: tuple[E.Expr, ...]) -> str:
        """Row-major offset ``(i0 * s1 + i1) * s2 + i2 ...`` of ``buf[indices]``."""
        if len(indices) != buf.ndim:
            raise CompileError(f"render: buffer {buf.name!r} has {buf.ndim} dimension(s), "
                               f"indexed with {len(indices)}")
        if not indices:
            return "0"
        text = self.index(indices[0])
        for d in range(1, buf.ndim):
            text = f"({text} * {self.index(buf.shape[d])} + {self.index(indices[d])})"
        return text

    def index(self, e: E.Expr) -> str:
        if not (dtypes.is_int(e.dtype) or e.dtype == "bool"):
            raise CompileError(f"render: index expression {e} has dtype {e.dtype}")
        return self.conv(e, "int64")

    def _binary(self, e: E.BinaryOp) -> str:
        a, b = self.conv(e.a, e.dtype), self.conv(e.b, e.dtype)
        if e.dtype == "bool":
            raise CompileError(f"render: arithmetic on booleans in {e}")
        op = _ARITH[type(e)]
        return f"({a} {op} {b})"

    visit_Add = visit_Sub = visit_Mul = _binary

    def visit_Div(self, e: E.Div) -> str:
        if not dtypes.is_float(e.dtype):
            raise CompileError(f"render: true division of integers in {e}")
        return f"({self.conv(e.a, e.dtype)} / {self.conv(e.b, e.dtype)})"

    def visit_FloorDiv(self, e: E.FloorDiv) -> str:
        return f"tc_floordiv({self.conv(e.a, e.dtype)}, {self.conv(e.b, e.dtype)})"

    def visit_Mod(self, e: E.Mod) -> str:
        return f"tc_mod({self.conv(e.a, e.dtype)}, {self.conv(e.b, e.dtype)})"

    def visit_Min(self, e: E.Min) -> str:
        return f"tc_min({self.conv(e.a, e.dtype)}, {self.conv(e.b, e.dtype)})"

    def visit_Max(self, e: E.Max) -> str:
        return f"tc_max({self.conv(e.a, e.dtype)}, {self.conv(e.b, e.dtype)})"

    def visit_Neg(self, e: E.Neg) -> str:
        return f"(-{self.conv(e.a, e.dtype)})"

    def _compare(self, e: E.CmpOp) -> str:
        dt = _common(e.a.dtype, e.b.dtype)
        return f"({self.conv(e.a, dt)} {_CMP[type(e)]} {self.conv(e.b, dt)})"

    visit_LT = visit_LE = visit_GT = visit_GE = visit_EQ = visit_NE = _compare

    def visit_And(self, e: E.And) -> str:
        return f"({self.conv(e.a, 'bool')} && {self.conv(e.b, 'bool')})"

    def visit_Or(self, e: E.Or) -> str:
        return f"({self.conv(e.a, 'bool')} || {self.conv(e.b, 'bool')})"

    def visit_Not(self, e: E.Not) -> str:
        return f"(!{self.conv(e.a, 'bool')})"

    def visit_Select(self, e: E.Select) -> str:
        return (f"({self.conv(e.cond, 'bool')} ? {self.conv(e.t, e.dtype)} : "
                f"{self.conv(e.f, e.dtype)})")

    def visit_Cast(self, e: E.Cast) -> str:
        return self.conv(e.value, e.dtype)

    def visit_Delta(self, e: E.Delta) -> str:
        dt = _common(e.a.dtype, e.b.dtype)
        one = self.visit_Const(E.Const(1, e.dtype))
        zero = self.visit_Const(E.Const(0, e.dtype))
        return f"(({self.conv(e.a, dt)} == {self.conv(e.b, dt)}) ? {one} : {zero})"

    def visit_Call(self, e: E.Call) -> str:
        op = lookup(e.name)
        if op is None:
            raise CompileError(f"render: unknown math function {e.name!r} in {e}")
        if not (dtypes.is_float(e.dtype) or op.integer_ok):
            raise CompileError(f"render: tc.{e.name} of the integer expression {e}")
        args = [self.conv(a, e.dtype) for a in e.args]
        out = op.c.format(*args, f="" if e.dtype == "float64" else "f")
        return self.round_to(e.dtype, out) if e.dtype == "float16" and not op.exact else out

    def _unlowered(self, e: Any) -> str:
        raise CompileError(
            f"render: {type(e).__name__} must be lowered before code generation: {e}")

    visit_Reduce = visit_TensorRead = _unlowered

    # ------------------------------------------------------------------------------- stmts
    def render_stmt(self, s: Stmt, depth: int = 0) -> list[str]:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise CompileError(f"render: no C rule for the statement {type(s).__name__}")
        return method(s, depth)

    def pad(self, depth: int) -> str:
        return self.indent_unit * depth

    def stmt_Seq(self, s: Seq, depth: int) -> list[str]:
        out: list[str] = []
        for x in s.stmts:
            out += self.render_stmt(x, depth)
        return out

    def stmt_For(self, s: For, depth: int) -> list[str]:
        p = self.pad(depth)
        v = self.var(s.var)
        t = self.reg_type(s.var.dtype)
        lo, hi = self.conv(s.lo, s.var.dtype), self.conv(s.hi, s.var.dtype)
        if s.step < 1:
            raise CompileError(f"render: loop {s.var.name} has step {s.step} < 1")
        inc = f"++{v}" if s.step == 1 else f"{v} += {s.step}"
        out = []
        if s.slot is not None:  # rendered as one run of the whole loop: its slot is ``lo``
            out.append(f"{p}{{")
            out.append(f"{p}const {self.reg_type(s.slot.dtype)} {self.var(s.slot)} = {lo};")
        if s.kind == "unrolled" and self.unroll_pragma():
            out.append(p + self.unroll_pragma())
        out.append(f"{p}for ({t} {v} = {lo}; {v} < {hi}; {inc}) {{")
        out += self.render_stmt(s.body, depth + 1)
        out.append(p + "}")
        if s.slot is not None:
            out.append(p + "}")
        return out

    def stmt_Store(self, s: Store, depth: int) -> list[str]:
        buf = s.buffer
        value = self.convert(self.expr(s.value), s.value.dtype, buf.dtype, rounding=False)
        if buf in self.locals and buf.ndim == 0:
            target = self.buffer(buf)
            cur = target
        else:
            target = f"{self.buffer(buf)}[{self.flat_index(buf, s.indices)}]"
            cur = self.load_conv(buf, target)
        if s.reduce is not None:
            value = self.combine(s.reduce, buf.dtype, cur, value)
        if not (buf in self.locals and buf.ndim == 0):
            value = self.store_conv(buf, value)
        return [f"{self.pad(depth)}{target} = {value};"]

    def combine(self, reduce: str, dtype: str, cur: str, value: str) -> str:
        """The register value of ``cur <reduce> value``."""
        if reduce == "sum":
            out = f"({cur} + {value})"
        elif reduce == "prod":
            out = f"({cur} * {value})"
        elif reduce == "max":
            out = f"tc_max({cur}, {value})"
        elif reduce == "min":
            out = f"tc_min({cur}, {value})"
        else:
            raise CompileError(f"render: unknown combiner {reduce!r} in a store")
        return out

    def stmt_Allocate(self, s: Allocate, depth: int) -> list[str]:
        buf = s.buffer
        p = self.pad(depth)
        name = self.buffer(buf)
        if buf.ndim == 0:
            decl = f"{p}    {self.reg_type(buf.dtype)} {name};"
            self.locals.add(buf)
        else:
            size = 1
            for d, x in enumerate(buf.shape):
                if not isinstance(x, E.Const):
                    raise CompileError(
                        f"render: buffer {buf.name!r} allocated inside a kernel needs a constant "
                        f"shape; axis {d} has extent {x}")
                size *= int(x.value)
            decl = f"{p}    {self.mem_type(buf)} {name}[{max(size, 1)}];"
        return [p + "{", decl] + self.render_stmt(s.body, depth + 1) + [p + "}"]

    def stmt_IfThenElse(self, s: IfThenElse, depth: int) -> list[str]:
        p = self.pad(depth)
        out = [f"{p}if ({self.conv(s.cond, 'bool')}) {{"]
        out += self.render_stmt(s.then, depth + 1)
        if s.else_ is not None:
            out.append(p + "} else {")
            out += self.render_stmt(s.else_, depth + 1)
        out.append(p + "}")
        return out

    def stmt_LetStmt(self, s: LetStmt, depth: int) -> list[str]:
        p = self.pad(depth)
        t = self.reg_type(s.var.dtype)
        line = f"{p}    const {t} {self.var(s.var)} = {self.conv(s.value, s.var.dtype)};"
        return [p + "{", line] + self.render_stmt(s.body, depth + 1) + [p + "}"]

    # ------------------------------------------------------------------------------- prelude
    def prelude(self) -> str:
        """Helper functions every rendered program may call (floor division, NaN-propagating
        min/max, saturating float-to-int conversion, infinities)."""
        q = self.helper_qualifier
        helpers = "".join(op.c_helpers for op in INTRINSICS.values())
        return _PRELUDE.replace("#endif", helpers + "#endif").replace("QUAL", q)


def _common(a: str, b: str) -> str:
    """The dtype two comparison operands are compared in."""
    if a == b:
        return a
    if dtypes.is_float(a) and dtypes.is_float(b):
        return "float64" if "float64" in (a, b) else "float32"
    if dtypes.is_int(a) and dtypes.is_int(b):
        return "int64"
    raise CompileError(f"render: cannot compare {a} with {b}")


_PRELUDE = r"""
#ifndef TC_PRELUDE_DEFINED
#define TC_PRELUDE_DEFINED
QUAL float tc_inff() { return __int_as_float(0x7f800000); }
QUAL float tc_nanf() { return __int_as_float(0x7fc00000); }
QUAL double tc_inf() { return __longlong_as_double(0x7ff0000000000000LL); }
QUAL double tc_nan() { return __longlong_as_double(0x7ff8000000000000LL); }
template <typename T> QUAL T tc_floordiv(T a, T b) {
    if (b == 0) b = 1;
    if (b == -1) return (T)(0 - (unsigned long long)a);
    T q = a / b, r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> QUAL T tc_mod(T a, T b) {
    if (b == 0) b = 1;
    if (b == -1) return 0;
    T r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
QUAL float tc_floordiv(float a, float b) {
    float m = fmodf(a, b);
    float d = (a - m) / b;
    if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) d -= 1.0f;
    if (b == 0.0f) return a / b;
    if (d == 0.0f) return copysignf(0.0f, a / b);
    float f = floorf(d);
    return (d - f > 0.5f) ? f + 1.0f : f;
}
QUAL double tc_floordiv(double a, double b) {
    double m = fmod(a, b);
    double d = (a - m) / b;
    if (m != 0.0 && ((b < 0.0) != (m < 0.0))) d -= 1.0;
    if (b == 0.0) return a / b;
    if (d == 0.0) return copysign(0.0, a / b);
    double f = floor(d);
    return (d - f > 0.5) ? f + 1.0 : f;
}
QUAL float tc_mod(float a, float b) {
    float m = fmodf(a, b);
    return (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) ? m + b : m;
}
QUAL double tc_mod(double a, double b) {
    double m = fmod(a, b);
    return (m != 0.0 && ((b < 0.0) != (m < 0.0))) ? m + b : m;
}
template <typename T> QUAL T tc_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> QUAL T tc_min(T a, T b) { return (a != a || a < b) ? a : b; }
QUAL bool tc_max(bool a, bool b) { return a || b; }
QUAL bool tc_min(bool a, bool b) { return a && b; }
QUAL int tc_abs(int a) { return a < 0 ? (int)(0u - (unsigned)a) : a; }
QUAL long long tc_abs(long long a) {
    return a < 0 ? (long long)(0ull - (unsigned long long)a) : a;
}
QUAL float tc_abs(float a) { return fabsf(a); }
QUAL double tc_abs(double a) { return fabs(a); }
QUAL long long tc_f2i_int64(double x) {
    if (!(x == x) || x == tc_inf() || x == -tc_inf()) return 0;
    if (x >= 9223372036854775807.0) return 9223372036854775807LL;
    if (x <= -9223372036854775808.0) return -9223372036854775807LL - 1;
    return (long long)x;
}
QUAL int tc_f2i_int32(double x) {
    if (!(x == x) || x == tc_inf() || x == -tc_inf()) return 0;
    if (x >= 2147483647.0) return 2147483647;
    if (x <= -2147483648.0) return -2147483647 - 1;
    return (int)x;
}
#endif
"""
