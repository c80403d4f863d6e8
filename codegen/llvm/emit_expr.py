"""Scalar expressions of the loop IR to LLVM IR (llvmlite.ir).

:class:`ExprEmitter` has one ``visit_<Node>`` rule per node of :mod:`tecomp.expr` plus
:class:`~tecomp.loopir.BufferLoad`.  A rule returns a value of the node's register type (see
:mod:`.types`); operands of another dtype are converted first (an int64 ``Add`` may have an
int32 operand).

Semantics, following the reference evaluator (:mod:`tecomp.evaluate`):

* ``//`` and ``%`` on integers use floor semantics (Python's).  LLVM's ``sdiv``/``srem``
  truncate toward zero, so the quotient is decremented (and the divisor added to the
  remainder) when the remainder is non-zero and its sign differs from the divisor's.  Worked
  example: ``-7 // 2``: ``sdiv`` gives -3, ``srem`` gives -1; the signs of -1 and 2 differ, so
  the result is -4 and ``-7 % 2`` is ``-1 + 2 = 1``.  A zero divisor behaves as 1 (NumPy's and
  the evaluator's convention, never a trap) and a divisor of -1 is handled apart so that
  ``INT_MIN // -1`` wraps instead of trapping.  A positive constant divisor takes the short
  form: an ``sdiv``/``srem`` pair with the one fix-up a positive divisor needs (no guard for
  0 and -1).
* Integer ``+ - *`` with constant operands are folded here (two constants: their value,
  wrapped as the machine would; ``x + 0``, ``x - 0``, ``x * 1``: ``x``; ``x * 0``: 0), as are
  ``min``/``max`` of two constants: register tiles and row copies index with many such terms
  (a transformer block's gradient: about one instruction in six of the emitted IR), which
  LLVM would fold too, after Python had built, printed and LLVM had parsed them.
* Integer arithmetic of variables and constants (no loads) is emitted once per basic block
  while the variables keep their values, and ``a // c`` and ``a % c`` share one pair: a
  register tile's sixty-four statements index with the same ``j0 // 32`` and
  ``(p0 + 16) % 32``, which were a quarter of the instructions LLVM parsed, and had to
  remove again, for a transformer block's gradient.
* ``//`` and ``%`` on floats follow NumPy's ``divmod`` (``fmod`` then a sign fix).
* ``if_then_else`` must not fault where a read in the arm not taken is out of bounds (e.g.
  padding).  When every buffer such an arm reads has constant, non-zero extents, both arms are
  computed with each load's indices clamped into the buffer (the same element where the read
  is in bounds, a harmless one elsewhere) and an LLVM ``select`` picks one: branch-free code
  that loops can vectorise.  Otherwise only the chosen arm runs (branches and a ``phi``).
  Arms without loads cannot fault, so both are computed and ``select`` picks one.
  ``&`` and ``|`` short-circuit the same way when their right operand reads memory.
* Math calls are lowered as their op-table entry says (``Intrinsic.llvm``,
  :mod:`tecomp.intrinsics`): ``exp``, ``log``, ``tanh``, ``sigmoid`` (``1 / (1 + exp(-x))``),
  ``softplus`` and ``erf`` are inline, vectorisable implementations (:mod:`.vmath`); ``sqrt``,
  ``floor``, ``ceil`` are LLVM intrinsics, ``sin``, ``cos``, ``pow`` intrinsics that become C
  library calls.
* float16 values are computed in single precision and every float16 operation rounds its
  result to half precision, so ``+ - * /`` give NumPy's float16 results bit for bit.
* ``Delta(a, b)`` is 1 where ``a == b``, else 0; ``Zero`` is 0.

Reductions and tensor reads must have been lowered away; meeting one raises
:class:`~tecomp.errors.CompileError` naming the node.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

from llvmlite import ir

from ... import expr as E
from ...errors import CompileError
from ...functor import children
from ...intrinsics import lookup
from ...loopir import Buffer, BufferLoad
from . import types as T
from . import vmath


def _arith_rule(fop: str, iop: str) -> Callable[[ExprEmitter, E.BinaryOp], ir.Value]:
    def rule(self: ExprEmitter, e: E.BinaryOp) -> ir.Value:
        a, b = self._operands(e)
        if T.is_float(e.dtype):
            return getattr(self.b, fop)(a, b, flags=T.FAST)
        if e.dtype == "bool":
            raise CompileError(f"emit: arithmetic on booleans in {e}")
        return int_op(self.b, iop, a, b)

    return rule


#: emit a float ``a * (1 + y)`` as ``a + a * y`` (:meth:`ExprEmitter.visit_Mul`; an A/B
#: switch of ``benchmarks/ab_cpu_steps.py``, step ``one_plus``)
FMA_ONE_PLUS = True


def _one_plus(e: E.Expr) -> E.Expr | None:
    """``y`` when ``e`` is ``1 + y`` or ``y + 1`` (a float constant 1), else None."""
    if isinstance(e, E.Add):
        for one, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(one, E.Const) and T.is_float(one.dtype) and one.value == 1 \
                    and y.dtype == e.dtype:
                return y
    return None


def int_constant(v: ir.Value) -> int | None:
    """The value of an integer constant of two or more bits, else None."""
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and v.type.width > 1:
        c = v.constant
        if isinstance(c, int) and not isinstance(c, bool):
            return c
    return None


def _wrapped(x: int, bits: int) -> int:
    """``x`` as a ``bits``-bit two's-complement integer (what the machine's add would give)."""
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


_FOLD = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


def int_op(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, flags: tuple = ()) -> ir.Value:
    """``x op y`` (``add``, ``sub``, ``mul``) on integers of one type, folded when the operands
    allow (see the module docstring)."""
    cx, cy = int_constant(x), int_constant(y)
    if cx is not None and cy is not None:
        return ir.Constant(x.type, _wrapped(_FOLD[op](cx, cy), x.type.width))
    if op == "add" and cx == 0 or op == "mul" and cx == 1:
        return y
    if op in ("add", "sub") and cy == 0 or op == "mul" and cy == 1:
        return x
    if op == "mul" and (cx == 0 or cy == 0):
        return ir.Constant(x.type, 0)
    return getattr(b, op)(x, y, flags=flags)


def _compare_rule(op: str) -> Callable[[ExprEmitter, E.CmpOp], ir.Value]:
    def rule(self: ExprEmitter, e: E.CmpOp) -> ir.Value:
        dt = _common(e.a.dtype, e.b.dtype)
        a, b = self.emit(e.a, dt), self.emit(e.b, dt)
        if T.is_float(dt):
            if op == "!=":
                return self.b.fcmp_unordered(op, a, b)
            return self.b.fcmp_ordered(op, a, b)
        if dt == "bool":
            return self.b.icmp_unsigned(op, a, b)
        return self.b.icmp_signed(op, a, b)

    return rule


class ExprEmitter:
    """Emit scalar expressions at the builder's position.  Subclasses bind buffers/variables."""

    def __init__(self, builder: ir.IRBuilder) -> None:
        self.b = builder
        self.buffers: dict[Buffer, ir.Value] = {}
        self._loads: dict[int, bool] = {}
        self._safe: dict[int, bool] = {}
        self._speculating = 0  # > 0: loads clamp their indices into the buffer (see Select)
        self._memo: dict[tuple[int, int], tuple[Any, ir.Value]] = {}
        self._indices: dict[tuple[E.Expr, ir.Block], ir.Value] = {}  # pure integer arithmetic
        self._pure: dict[int, tuple[Any, bool]] = {}
        self._divmods: dict[tuple[ir.Value, int, ir.Block], tuple[ir.Value, ir.Value]] = {}
        self.env: dict[E.Var, ir.Value] = _Env(self._indices)

    # ----------------------------------------------------------------------- entry points
    def visit(self, e: Any) -> ir.Value:
        if SHARE_INDICES and type(e) in _INDEX_OPS and self._index_arithmetic(e):
            # equal integer arithmetic of unchanged variables: one value per basic block
            key = (e, self.b.block)
            found = self._indices.get(key)
            if found is None:
                found = self._indices[key] = getattr(self, "visit_" + type(e).__name__)(e)
            return found
        memo = isinstance(e, E.Expr) and not isinstance(e, (E.Const, E.Var, E.Zero))
        if memo:  # a subexpression shared within one statement is computed once per block
            key = (id(e), id(self.b.block))
            hit = self._memo.get(key)
            if hit is not None and hit[0] is e:
                return hit[1]
        method = getattr(self, "visit_" + type(e).__name__, None)
        if method is None:
            raise CompileError(f"emit: the LLVM backend has no rule for {type(e).__name__}: {e}")
        v = method(e)
        if isinstance(e, (E.BinaryOp, E.Call)) and e.dtype == "float16":
            v = T.round_half(self.b, v)  # every float16 operation rounds, as in NumPy
        if memo:
            self._memo[(id(e), id(self.b.block))] = (e, v)
        return v

    def forget(self) -> None:
        """Drop remembered values: called between statements (stores change memory, and
        bindings change what variables mean)."""
        self._memo.clear()

    def emit(self, e: E.Expr, dtype: str) -> ir.Value:
        """``e`` converted to ``dtype``."""
        return T.convert(self.b, self.visit(e), e.dtype, dtype)

    def index(self, e: E.Expr) -> ir.Value:
        """An integer expression as an i64 (indices, bounds, sizes)."""
        if not (T.is_int(e.dtype) or e.dtype == "bool"):
            raise CompileError(f"emit: index expression {e} has dtype {e.dtype}")
        return self.emit(e, "int64")

    def address(self, buf: Buffer, indices: tuple[E.Expr, ...]) -> ir.Value:
        """Pointer to ``buf[indices]`` (row-major: offset = (i0 * s1 + i1) * s2 + i2 ...)."""
        if len(indices) != buf.ndim:
            raise CompileError(
                f"emit: buffer {buf.name!r} has {buf.ndim} dimension(s), indexed with "
                f"{len(indices)}")
        try:
            base = self.buffers[buf]
        except KeyError:
            raise CompileError(f"emit: buffer {buf.name!r} is not allocated here") from None
        if SHARE_INDICES and all(type(ix) in (E.Var, E.Const) or (
                type(ix) in _INDEX_OPS and self._index_arithmetic(ix)) for ix in indices):
            # the address of integer arithmetic of unchanged variables: once per block (a
            # register tile's statements address each accumulator row and panel row again)
            key = (_ADDRESS, buf, indices, self.b.block)
            found = self._indices.get(key)
            if found is None or found[0] is not base:
                found = self._indices[key] = (base, self._offset_address(base, buf, indices))
            return found[1]
        return self._offset_address(base, buf, indices)

    def _offset_address(self, base: ir.Value, buf: Buffer,
                        indices: tuple[E.Expr, ...]) -> ir.Value:
        off: ir.Value = ir.Constant(T.I64, 0)
        for d, ix in enumerate(indices):
            i = self.index(ix)
            if d == 0:
                off = i
            else:
                off = int_op(self.b, "add", int_op(self.b, "mul", off, self.index(buf.shape[d]),
                                                   flags=("nsw",)), i, flags=("nsw",))
        return self.b.gep(base, [off], inbounds=True, source_etype=T.mem_type(buf.dtype))

    # ----------------------------------------------------------------------- leaves
    def visit_Const(self, e: E.Const) -> ir.Value:
        return T.constant(e.value, e.dtype)

    def visit_Zero(self, e: E.Zero) -> ir.Value:
        return T.constant(0, e.dtype)

    def visit_Var(self, e: E.Var) -> ir.Value:
        try:
            return self.env[e]
        except KeyError:
            raise CompileError(f"emit: variable {e.name!r} is not bound here") from None

    def visit_BufferLoad(self, e: BufferLoad) -> ir.Value:
        if self._speculating:
            ptr = self._clamped_address(e.buffer, e.indices)
        else:
            ptr = self.address(e.buffer, e.indices)
        v = T.load_value(self.b, ptr, e.buffer.dtype)
        return T.convert(self.b, v, e.buffer.dtype, e.dtype)

    # ----------------------------------------------------------------------- arithmetic
    def _operands(self, e: E.BinaryOp) -> tuple[ir.Value, ir.Value]:
        return self.emit(e.a, e.dtype), self.emit(e.b, e.dtype)

    visit_Add = _arith_rule("fadd", "add")
    visit_Sub = _arith_rule("fsub", "sub")
    _mul = _arith_rule("fmul", "mul")

    def visit_Mul(self, e: E.Mul) -> ir.Value:
        """``a * (1 + y)`` in a float type as ``a + a * y``, which LLVM contracts to one
        multiply-add where the host has one: ``fma(a, y, a)`` is the exact ``a (1 + y)``
        rounded once, where the product rounds ``1 + y`` first, and one operation fewer
        (GELU's ``0.5 x (1 + erf(x / sqrt(2)))``: 2048x2048 float32, one Intel Xeon core,
        1.79 against 1.83 ms, two cores 1.08 against 1.14, round-robin in one process;
        ``python -m benchmarks.ab_cpu_steps --only one_plus``).
        The distribution is one the float flags' ``reassoc`` already allows LLVM; its one
        difference beyond rounding: ``a = +-inf`` with ``y = 0`` gives NaN, not ``+-inf``.
        Anything else: the product."""
        if FMA_ONE_PLUS and T.is_float(e.dtype):
            for a, other in ((e.a, e.b), (e.b, e.a)):
                y = _one_plus(other)
                if y is not None:
                    av, yv = self.emit(a, e.dtype), self.emit(y, e.dtype)
                    return self.b.fadd(self.b.fmul(av, yv, flags=T.FAST), av, flags=T.FAST)
        return self._mul(e)

    def visit_Div(self, e: E.Div) -> ir.Value:
        a, b = self._operands(e)
        if not T.is_float(e.dtype):
            raise CompileError(f"emit: true division of integers in {e}")
        return self.b.fdiv(a, b, flags=T.FAST)

    def visit_FloorDiv(self, e: E.FloorDiv) -> ir.Value:
        a, b = self._operands(e)
        return self._float_divmod(a, b)[0] if T.is_float(e.dtype) else self._int_divmod(a, b)[0]

    def visit_Mod(self, e: E.Mod) -> ir.Value:
        a, b = self._operands(e)
        return self._float_divmod(a, b)[1] if T.is_float(e.dtype) else self._int_divmod(a, b)[1]

    def _int_divmod(self, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        c = int_constant(b)
        if c is not None and c > 0:
            return self._divmod_by(a, c)
        bd = self.b
        t = a.type
        zero, one, minus1 = ir.Constant(t, 0), ir.Constant(t, 1), ir.Constant(t, -1)
        is_m1 = bd.icmp_signed("==", b, minus1)
        safe = bd.select(bd.or_(bd.icmp_signed("==", b, zero), is_m1), one, b)
        q = bd.sdiv(a, safe)
        r = bd.srem(a, safe)
        # floor fix-up: a non-zero remainder whose sign differs from the divisor's
        fix = bd.and_(bd.icmp_signed("!=", r, zero),
                      bd.icmp_signed("<", bd.xor(r, safe), zero))
        q = bd.sub(q, bd.zext(fix, t))
        r = bd.add(r, bd.select(fix, safe, zero))
        q = bd.select(is_m1, bd.sub(zero, a), q)
        return q, r

    def _divmod_by(self, a: ir.Value, c: int) -> tuple[ir.Value, ir.Value]:
        """Floor quotient and remainder of ``a`` by the positive constant ``c``."""
        bd = self.b
        t = a.type
        ca = int_constant(a)
        if ca is not None:
            return ir.Constant(t, ca // c), ir.Constant(t, ca % c)
        if c == 1:
            return a, ir.Constant(t, 0)
        # a power of two stays an sdiv/srem pair too: as an arithmetic shift and a mask, the
        # 4x4/2 transposed convolution's forward ran 4% slower (LLVM simplifies its own
        # lowering of the pair further; benchmarks/ab_llvm_pipeline.py --variant fold)
        key = (a, c, bd.block)  # ``a // c`` and ``a % c`` in one block: one pair for both
        found = self._divmods.get(key) if SHARE_INDICES else None
        if found is not None:
            return found
        divisor = ir.Constant(t, c)
        q, r = bd.sdiv(a, divisor), bd.srem(a, divisor)
        negative = bd.icmp_signed("<", r, ir.Constant(t, 0))  # the sign differs from c's
        found = self._divmods[key] = (bd.sub(q, bd.zext(negative, t)),
                                      bd.add(r, bd.select(negative, divisor,
                                                          ir.Constant(t, 0))))
        return found

    def _float_divmod(self, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        # NumPy's npy_divmod: mod = fmod(a, b); div = (a - mod) / b; fix signs; floor.
        bd = self.b
        t = a.type
        zero, one = ir.Constant(t, 0.0), ir.Constant(t, 1.0)
        mod = bd.frem(a, b)
        div = bd.fdiv(bd.fsub(a, mod), b)
        fix = bd.and_(bd.fcmp_unordered("!=", mod, zero),
                      bd.icmp_unsigned("!=", bd.fcmp_ordered("<", b, zero),
                                       bd.fcmp_ordered("<", mod, zero)))
        mod = bd.select(fix, bd.fadd(mod, b), mod)
        div = bd.select(fix, bd.fsub(div, one), div)
        fl = T.intrinsic(bd, "floor", [div])
        fl = bd.select(bd.fcmp_ordered(">", bd.fsub(div, fl), ir.Constant(t, 0.5)),
                       bd.fadd(fl, one), fl)
        signed_zero = T.intrinsic(bd, "copysign", [zero, bd.fdiv(a, b)])
        quotient = bd.select(bd.fcmp_unordered("!=", div, zero), fl, signed_zero)
        # a zero divisor: a / b (inf or nan) and fmod's nan, as NumPy
        quotient = bd.select(bd.fcmp_ordered("==", b, zero), bd.fdiv(a, b), quotient)
        return quotient, mod

    def visit_Min(self, e: E.Min) -> ir.Value:
        a, b = self._operands(e)
        return self._minmax("min", e.dtype, a, b)

    def visit_Max(self, e: E.Max) -> ir.Value:
        a, b = self._operands(e)
        return self._minmax("max", e.dtype, a, b)

    def _minmax(self, which: str, dtype: str, a: ir.Value, b: ir.Value) -> ir.Value:
        if T.is_float(dtype):  # NaN-propagating, as NumPy's minimum/maximum
            return T.intrinsic(self.b, "minimum" if which == "min" else "maximum", [a, b])
        if dtype == "bool":
            return self.b.and_(a, b) if which == "min" else self.b.or_(a, b)
        ca, cb = int_constant(a), int_constant(b)
        if ca is not None and cb is not None:
            return ir.Constant(a.type, min(ca, cb) if which == "min" else max(ca, cb))
        return T.intrinsic(self.b, "smin" if which == "min" else "smax", [a, b])

    def visit_Neg(self, e: E.Neg) -> ir.Value:
        a = self.emit(e.a, e.dtype)
        if T.is_float(e.dtype):
            return self.b.fneg(a, flags=T.FAST)
        return self.b.sub(ir.Constant(a.type, 0), a)

    # ----------------------------------------------------------------------- comparisons
    visit_LT = _compare_rule("<")
    visit_LE = _compare_rule("<=")
    visit_GT = _compare_rule(">")
    visit_GE = _compare_rule(">=")
    visit_EQ = _compare_rule("==")
    visit_NE = _compare_rule("!=")

    def visit_And(self, e: E.And) -> ir.Value:
        a = self.emit(e.a, "bool")
        if self.reads_memory(e.b):  # only evaluate b where a holds
            return self._branch(a, lambda: self.emit(e.b, "bool"), lambda: ir.Constant(T.I1, 0))
        return self.b.and_(a, self.emit(e.b, "bool"))

    def visit_Or(self, e: E.Or) -> ir.Value:
        a = self.emit(e.a, "bool")
        if self.reads_memory(e.b):
            return self._branch(a, lambda: ir.Constant(T.I1, 1), lambda: self.emit(e.b, "bool"))
        return self.b.or_(a, self.emit(e.b, "bool"))

    def visit_Not(self, e: E.Not) -> ir.Value:
        return self.b.xor(self.emit(e.a, "bool"), ir.Constant(T.I1, 1))

    # ----------------------------------------------------------------------- others
    def visit_Select(self, e: E.Select) -> ir.Value:
        c = self.emit(e.cond, "bool")
        if self.reads_memory(e.t) or self.reads_memory(e.f):
            if not (self.speculatable(e.t) and self.speculatable(e.f)):
                return self._branch(c, lambda: self.emit(e.t, e.dtype),
                                    lambda: self.emit(e.f, e.dtype))
            self._speculating += 1  # both arms, with every load clamped into its buffer
            try:
                t, f = self.emit(e.t, e.dtype), self.emit(e.f, e.dtype)
            finally:
                self._speculating -= 1
            return self.b.select(c, t, f)
        return self.b.select(c, self.emit(e.t, e.dtype), self.emit(e.f, e.dtype))

    def _clamped_address(self, buf: Buffer, indices: tuple[E.Expr, ...]) -> ir.Value:
        """Like :meth:`address`, each index clamped into ``[0, extent - 1]``: in bounds, the
        same element; out of bounds, some element of the buffer (never a fault)."""
        zero = ir.Constant(T.I64, 0)
        clamped = []
        for d, ix in enumerate(indices):
            top = ir.Constant(T.I64, int(buf.shape[d].value) - 1)
            i = T.intrinsic(self.b, "smax", [self.index(ix), zero])
            clamped.append(T.intrinsic(self.b, "smin", [i, top]))
        base = self.buffers.get(buf)
        if base is None or len(indices) != buf.ndim:
            return self.address(buf, indices)  # raises the usual error
        off: ir.Value = zero
        for d, i in enumerate(clamped):
            off = i if d == 0 else self.b.add(
                self.b.mul(off, ir.Constant(T.I64, int(buf.shape[d].value)), flags=("nsw",)), i,
                flags=("nsw",))
        return self.b.gep(base, [off], inbounds=True, source_etype=T.mem_type(buf.dtype))

    def _branch(self, cond: ir.Value, then: Callable[[], ir.Value],
                other: Callable[[], ir.Value]) -> ir.Value:
        """``cond ? then() : other()`` with real control flow (only one arm runs)."""
        fn = self.b.function
        bt, bf, join = fn.append_basic_block("sel.t"), fn.append_basic_block("sel.f"), \
            fn.append_basic_block("sel.end")
        self.b.cbranch(cond, bt, bf)
        self.b.position_at_end(bt)
        vt = then()
        end_t = self.b.block
        self.b.branch(join)
        self.b.position_at_end(bf)
        vf = other()
        end_f = self.b.block
        self.b.branch(join)
        self.b.position_at_end(join)
        phi = self.b.phi(vt.type)
        phi.add_incoming(vt, end_t)
        phi.add_incoming(vf, end_f)
        return phi

    def visit_Cast(self, e: E.Cast) -> ir.Value:
        return T.convert(self.b, self.visit(e.value), e.value.dtype, e.dtype)

    def visit_Delta(self, e: E.Delta) -> ir.Value:
        dt = _common(e.a.dtype, e.b.dtype)
        eq = self.b.icmp_signed("==", self.emit(e.a, dt), self.emit(e.b, dt))
        return T.convert(self.b, eq, "bool", e.dtype)

    def visit_Call(self, e: E.Call) -> ir.Value:
        op = lookup(e.name)
        if op is None:
            raise CompileError(f"emit: unknown math function {e.name!r} in {e}")
        if not (T.is_float(e.dtype) or op.integer_ok):
            raise CompileError(f"emit: tc.{e.name} of the integer expression {e}")
        kind, _, fn = op.llvm.partition(".")
        lower = _LOWERINGS.get(kind)
        if lower is None:
            raise CompileError(f"emit: tc.{e.name} has the unknown LLVM lowering {op.llvm!r}")
        return lower(self.b, fn, [self.emit(a, e.dtype) for a in e.args])

    def _unlowered(self, e: Any) -> ir.Value:
        raise CompileError(
            f"emit: {type(e).__name__} must be lowered before code generation: {e}")

    visit_Reduce = visit_TensorRead = visit_IterVar = _unlowered

    # ----------------------------------------------------------------------- analysis
    def speculatable(self, e: E.Expr) -> bool:
        """Whether ``e`` may be evaluated where its guard is false once its loads are clamped:
        every load is from a buffer of constant, non-zero extents (so a clamped index always
        names an element) and nothing else in it can fault."""
        key = id(e)
        hit = self._safe.get(key)
        if hit is None:
            if isinstance(e, BufferLoad):
                hit = all(isinstance(d, E.Const) and int(d.value) > 0 for d in e.buffer.shape)
                hit = hit and all(self.speculatable(i) for i in e.indices)
            else:
                hit = all(self.speculatable(c) for c in children(e))
            self._safe[key] = hit
        return hit

    def _index_arithmetic(self, e: E.Expr) -> bool:
        """Whether ``e`` is integer ``+ - * // % min max`` of variables and constants."""
        hit = self._pure.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        ok = T.is_int(e.dtype) and all(
            type(c) in (E.Var, E.Const) and T.is_int(c.dtype)
            or type(c) in _INDEX_OPS and self._index_arithmetic(c) for c in (e.a, e.b))
        self._pure[id(e)] = (e, ok)  # the node is kept alive: its id is not reused
        return ok

    def reads_memory(self, e: E.Expr) -> bool:
        """Whether evaluating ``e`` loads from a buffer (so it must not be speculated)."""
        key = id(e)
        hit = self._loads.get(key)
        if hit is None:
            kids = e.indices if isinstance(e, BufferLoad) else children(e)
            hit = isinstance(e, BufferLoad) or any(self.reads_memory(c) for c in kids)
            self._loads[key] = hit
        return hit


#: integer arithmetic of variables emitted once per block (the module doc; an A/B switch)
SHARE_INDICES = True
#: the first item of the keys of addresses shared per block (:meth:`ExprEmitter.address`)
_ADDRESS = "address"
#: the integer operations :meth:`ExprEmitter.visit` emits once per block
_INDEX_OPS = frozenset({E.Add, E.Sub, E.Mul, E.FloorDiv, E.Mod, E.Min, E.Max})


class _Env(dict):
    """Variables' values: rebinding one forgets the integer arithmetic emitted from them."""

    def __init__(self, derived: dict) -> None:
        super().__init__()
        self.derived = derived

    def __setitem__(self, key: Any, value: Any) -> None:
        self.derived.clear()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.derived.clear()
        super().__delitem__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.derived.clear()
        return super().pop(key, *default)


def _common(a: str, b: str) -> str:
    """The dtype two comparison operands are compared in (the smart constructors only let
    floats meet floats, integers meet integers and booleans meet booleans)."""
    if a == b:
        return a
    if T.is_float(a) and T.is_float(b):
        return "float64" if "float64" in (a, b) else "float32"
    if T.is_int(a) and T.is_int(b):
        return "int64"
    raise CompileError(f"emit: cannot compare {a} with {b}")


def _abs(b: ir.IRBuilder, fn: str, args: list[ir.Value]) -> ir.Value:
    if args[0].type in (T.F32, T.F64):
        return T.intrinsic(b, "fabs", args)
    return T.intrinsic(b, "abs", [args[0], ir.Constant(T.I1, 0)])  # abs(INT_MIN) wraps


#: the lowering keys of the op table (``Intrinsic.llvm``): ``kind.function``
_LOWERINGS: dict[str, Callable[[ir.IRBuilder, str, list[ir.Value]], ir.Value]] = {
    "vmath": lambda b, fn, args: vmath.call(b, fn, *args),          # inline vector routine
    "llvm": lambda b, fn, args: T.intrinsic(b, fn, args, T.FAST),   # llvm.<fn> intrinsic
    "libm": lambda b, fn, args: T.libm(b, fn, *args),               # the C library's <fn>
    "abs": _abs,                                                    # fabs, or integer abs
}
