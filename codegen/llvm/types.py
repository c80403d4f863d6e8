"""How tecomp dtypes map to LLVM types, and conversions between them.

Every dtype has a *register* type (what expressions compute in) and a *memory* type (what a
buffer element is):

=========  ============  ==========  ==========================================
dtype      register      memory      note
=========  ============  ==========  ==========================================
float16    ``float``     ``half``    single precision, rounded after each op
bfloat16   ``float``     ``float``   stored as float32, as NumPy holds it
float32    ``float``     ``float``
float64    ``double``    ``double``
int32      ``i32``       ``i32``
int64      ``i64``       ``i64``     also every index and size
bool       ``i1``        ``i8``      NumPy's one-byte bool
=========  ============  ==========  ==========================================

:func:`convert` implements ``tc.cast`` and the implicit promotions inside a node (an ``Add`` of
dtype int64 may have an int32 operand).  Its semantics follow the reference evaluator: floats
convert to integers by truncation toward zero, non-finite values give 0 and finite values out
of range give the minimum integer, as NumPy does on x86 (LLVM's ``fptosi`` would give
poison); anything converts to bool as ``!= 0``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...errors import CompileError
from .layout import ELEM_SIZE

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()

# Fast-math flags on float operations: everything LLVM's ``fast`` means except ``nnan`` and
# ``ninf``.  Programs rely on infinities (the identity of a max reduction is -inf, masks use
# them) and NaN must propagate as in NumPy; with ``nnan``/``ninf`` those values are poison.
# ``reassoc`` and ``contract`` are what vectorised reductions and FMA need.
FAST = ("reassoc", "contract", "nsz", "arcp", "afn")

_REG = {"float16": F32, "bfloat16": F32, "float32": F32, "float64": F64,
        "int32": I32, "int64": I64, "bool": I1}
_MEM = {"float16": F16, "bfloat16": F32, "float32": F32, "float64": F64,
        "int32": I32, "int64": I64, "bool": I8}


def reg_type(dtype: str) -> ir.Type:
    """The LLVM type values of ``dtype`` are computed in."""
    try:
        return _REG[dtype]
    except KeyError:
        raise CompileError(f"emit: the LLVM backend does not support dtype {dtype!r}") from None


def mem_type(dtype: str) -> ir.Type:
    """The LLVM type of one element of a buffer of ``dtype``."""
    try:
        return _MEM[dtype]
    except KeyError:
        raise CompileError(f"emit: the LLVM backend does not support dtype {dtype!r}") from None


def elem_size(dtype: str) -> int:
    """Bytes per buffer element (matches NumPy's itemsize for the storage dtype)."""
    return ELEM_SIZE[dtype]


def is_float(dtype: str) -> bool:
    return dtype in ("float16", "bfloat16", "float32", "float64")


def is_int(dtype: str) -> bool:
    return dtype in ("int32", "int64")


def constant(value: int | float | bool, dtype: str) -> ir.Constant:
    """``value`` as a register constant of ``dtype`` (float16 values rounded to half first)."""
    if dtype == "float16":
        return ir.Constant(F32, float(np.float16(value)))
    if is_float(dtype):
        return ir.Constant(reg_type(dtype), float(value))
    if dtype == "bool":
        return ir.Constant(I1, int(bool(value)))
    bits = 32 if dtype == "int32" else 64
    v = int(value) & ((1 << bits) - 1)  # two's complement wrap, as NumPy does
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return ir.Constant(reg_type(dtype), v)


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """The function ``name`` of ``module``, declared on first use."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def loop_id(module: ir.Module, *flags: str | tuple[str, int]) -> ir.MDValue:
    """A loop's ``!llvm.loop`` node: distinct by referring to itself, then ``flags`` (a
    name, or a name and an ``i32`` operand such as an unroll count)."""
    props = [module.add_metadata([ir.MetaDataString(module, f)]) if isinstance(f, str) else
             module.add_metadata([ir.MetaDataString(module, f[0]),
                                  ir.Constant(ir.IntType(32), f[1])]) for f in flags]
    node = ir.values.MDValue(module, props, name=str(len(module.metadata)))
    node.operands = (node, *props)  # a loop ID's first operand is the node itself
    return node


def intrinsic(b: ir.IRBuilder, name: str, args: list[ir.Value], flags: tuple = ()) -> ir.Value:
    """Call the overloaded intrinsic ``llvm.<name>`` on float/double/int arguments."""
    t = args[0].type
    names = {F32: "f32", F64: "f64", I32: "i32", I64: "i64"}
    if isinstance(t, ir.VectorType):  # a vector of those: "v16f32"
        suffix = f"v{t.count}{names[t.element]}"
    else:
        suffix = names[t]
    fn = declare(b.module, f"llvm.{name}.{suffix}", t, [a.type for a in args])
    return b.call(fn, args, fastmath=flags)


def libm(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """Call the C library's ``name`` (double) or ``name + 'f'`` (float) on ``x``."""
    fname = name + "f" if x.type == F32 else name
    fn = declare(b.module, fname, x.type, [x.type])
    return b.call(fn, [x])


def convert(b: ir.IRBuilder, v: ir.Value, src: str, dst: str) -> ir.Value:
    """Convert the register value ``v`` of dtype ``src`` to dtype ``dst`` (``tc.cast``)."""
    if src == dst:
        return v
    st, dt = reg_type(src), reg_type(dst)
    if dst == "bool":
        if is_float(src):
            return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
        return b.icmp_signed("!=", v, ir.Constant(st, 0))
    if src == "bool":
        return b.uitofp(v, dt) if is_float(dst) else b.zext(v, dt)
    if is_int(src) and is_int(dst):
        if st.width < dt.width:
            return b.sext(v, dt)
        return b.trunc(v, dt) if st.width > dt.width else v
    if is_int(src):  # int -> float
        out = b.sitofp(v, dt)
        return round_half(b, out) if dst == "float16" else out
    if is_float(dst):  # float -> float
        if st != dt:
            v = b.fpext(v, dt) if dt == F64 else b.fptrunc(v, dt)
        return round_half(b, v) if dst == "float16" else v
    return _float_to_int(b, v, dt)


def round_half(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Round a float register value to the nearest half-precision value."""
    return b.fpext(b.fptrunc(v, F16), F32)


def _float_to_int(b: ir.IRBuilder, v: ir.Value, dt: ir.IntType) -> ir.Value:
    # fptosi is poison outside the integer range: select around it.  Non-finite values give 0
    # (the evaluator's rule); finite values out of range give the minimum integer, which is
    # what x86's conversion (and so NumPy there) produces.
    bound = 2.0 ** (dt.width - 1)
    finite = b.fcmp_ordered("<", intrinsic(b, "fabs", [v]), ir.Constant(v.type, float("inf")))
    inside = b.and_(b.fcmp_ordered(">=", v, ir.Constant(v.type, -bound)),
                    b.fcmp_ordered("<", v, ir.Constant(v.type, bound)))
    edge = b.select(finite, ir.Constant(dt, -(1 << (dt.width - 1))), ir.Constant(dt, 0))
    return b.select(inside, b.fptosi(v, dt), edge)


def load_value(b: ir.IRBuilder, ptr: ir.Value, dtype: str) -> ir.Value:
    """Load one element of ``dtype`` from ``ptr`` into its register type."""
    mt = mem_type(dtype)
    v = b.load(ptr, typ=mt, align=elem_size(dtype))
    if dtype == "bool":
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
    if dtype == "float16":
        return b.fpext(v, F32)
    return v


def store_value(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, dtype: str) -> None:
    """Store the register value ``v`` of ``dtype`` as one buffer element at ``ptr``."""
    if dtype == "bool":
        v = b.zext(v, I8)
    elif dtype == "float16":
        v = b.fptrunc(v, F16)
    b.store(v, ptr, align=elem_size(dtype))
