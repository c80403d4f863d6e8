"""The LLVM emitter on every expression node and dtype, against the reference evaluator.

Programs are element-wise tensors declared in the DSL; a tiny hand-written lowering (a loop
nest storing the body with tensor reads turned into buffer loads) gives the loop IR, so these
tests pin the backend independently of ``passes/lower.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.llvm import build_kernel
from tecomp.errors import CompileError
from tecomp.functor import ExprMutator, free_vars
from tecomp.loopir import Buffer, BufferLoad, For, LoweredFunc, Store


class _ToLoads(ExprMutator):
    def __init__(self, bufs: dict[int, Buffer]) -> None:
        super().__init__()
        self.bufs = bufs

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        return BufferLoad(self.bufs[id(e.tensor)], tuple(self.visit(i) for i in e.indices),
                          e.dtype)


def lower_elementwise(out: tc.Tensor, inputs: list[tc.Tensor]) -> LoweredFunc:
    """Loop IR for a reduction-free compute tensor: one loop per axis, one store."""
    bufs = {id(p): Buffer(p.name, p.shape, p.dtype, "input") for p in inputs}
    y = Buffer(out.name, out.shape, out.dtype, "output")
    axes = out.op.axes
    stmt = Store(y, tuple(a.var for a in axes), _ToLoads(bufs).visit(out.op.body))
    for a in reversed(axes):
        stmt = For(a.var, a.lo, a.extent, stmt)
    params = sorted({v for t in [out, *inputs] for s in t.shape for v in free_vars(s)},
                    key=lambda v: v.name)
    return LoweredFunc(out.name, tuple(bufs.values()), (y,), tuple(params), stmt)


# float32/64 tolerances allow for fused multiply-adds (fast-math ``contract``)
TOL = {"float16": 2e-3, "bfloat16": 1e-5, "float32": 1e-5, "float64": 1e-12}


def check(fn, arrays: list[np.ndarray], rtol: float | None = None, atol: float = 0.0):
    """Compile ``y[i] = fn(x0[i], x1[i], ...)`` and compare with ``tc.evaluate``."""
    n = tc.var("n")
    xs = [tc.placeholder((n,), name=f"x{k}", dtype=a.dtype.name) for k, a in enumerate(arrays)]
    y = tc.compute((n,), lambda i: fn(i, *[x[i] for x in xs]), name="y")
    kernel = build_kernel(lower_elementwise(y, xs))
    got = kernel(*arrays)
    (want,) = tc.evaluate([y], {n: len(arrays[0]), **dict(zip(xs, arrays))})
    assert got.dtype == want.dtype and got.shape == want.shape
    if rtol is None and want.dtype.kind == "f":
        rtol = TOL[want.dtype.name]
        finite = np.isfinite(want)
        scale = float(np.abs(want[finite]).max()) if finite.any() else 0.0
        atol = max(atol, rtol * scale)
    if rtol is None:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=atol)
    return got


FLOATS = ["float16", "float32", "float64"]
INTS = ["int32", "int64"]


def data(rng, dtype: str, n: int = 37, lo: float = -5, hi: float = 5) -> np.ndarray:
    if dtype == "bool":
        return rng.random(n) < 0.5
    if dtype in INTS:
        return rng.integers(int(lo), int(hi) + 1, n).astype(dtype)
    return rng.uniform(lo, hi, n).astype(dtype)


# ------------------------------------------------------------------------------ arithmetic
ARITH = {
    "add": lambda i, a, b: a + b,
    "sub": lambda i, a, b: a - b,
    "mul": lambda i, a, b: a * b,
    "min": lambda i, a, b: tc.minimum(a, b),
    "max": lambda i, a, b: tc.maximum(a, b),
    "neg": lambda i, a, b: -a + b * 0,
    "const": lambda i, a, b: a * 3 - 7,
}


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("op", sorted(ARITH))
def test_arithmetic(rng, dtype, op):
    check(ARITH[op], [data(rng, dtype), data(rng, dtype)])


@pytest.mark.parametrize("dtype", FLOATS)
def test_true_division(rng, dtype):
    b = data(rng, dtype)
    b[:3] = 0  # inf and nan as in NumPy
    check(lambda i, a, b: a / b, [data(rng, dtype), b])


def test_mixed_integer_widths(rng):
    # an int64 node with an int32 operand: the operand is sign-extended first
    a = data(rng, "int32", lo=-(2**31), hi=2**31 - 1)
    b = data(rng, "int64", lo=-(2**40), hi=2**40)
    check(lambda i, a, b: a * 3 + b, [a, b])


def test_int32_wraps_like_numpy(rng):
    a = np.array([2**31 - 1, -(2**31), 123456789, -987654321], dtype=np.int32)
    got = check(lambda i, a: a * a + a, [a])
    np.testing.assert_array_equal(got, a * a + a)


# ------------------------------------------------------------------------------ // and %
def _py_floor(a: int, b: int) -> tuple[int, int]:
    b = b or 1
    return a // b, a % b


@pytest.mark.parametrize("dtype", INTS)
def test_floordiv_mod_negative_operands(dtype):
    vals = [-9, -7, -4, -1, 0, 1, 3, 4, 7, 9]
    pairs = [(a, b) for a in vals for b in vals]
    a = np.array([p[0] for p in pairs], dtype=dtype)
    b = np.array([p[1] for p in pairs], dtype=dtype)
    q = check(lambda i, a, b: a // b, [a, b])
    r = check(lambda i, a, b: a % b, [a, b])
    want = [_py_floor(x, y) for x, y in pairs]
    assert q.tolist() == [w[0] for w in want]
    assert r.tolist() == [w[1] for w in want]


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("divisor", [-7, -2, -1, 1, 2, 3, 8, 32, 1 << 20, 1000003])
def test_floordiv_mod_constant_divisor(divisor, dtype):
    info = np.iinfo(dtype)
    extremes = [info.min + 1, info.max, info.max - 1, -(1 << 20) - 1, (1 << 20) + 1]
    if divisor != -1:  # INT_MIN // -1 wraps (test_int_min_divided_by_minus_one_does_not_trap)
        extremes.append(info.min)
    a = np.concatenate([np.arange(-70, 71), extremes]).astype(dtype)
    q = check(lambda i, a: a // divisor, [a])
    r = check(lambda i, a: a % divisor, [a])
    assert q.tolist() == [x // divisor for x in a.tolist()]
    assert r.tolist() == [x % divisor for x in a.tolist()]


def test_constant_integer_arithmetic_is_folded_when_emitted():
    """``x + 0``, ``x * 1`` and constant-by-constant terms leave no instruction of their own,
    and ``//``/``%`` by a positive constant no guard for a zero or -1 divisor."""
    from tecomp.codegen.llvm.emit import emit_module

    n = tc.var("n")
    x = tc.placeholder((n,), name="x", dtype="int64")
    y = tc.compute((n,), lambda i: (x[i] * 1 + 0) // 8 + x[i] % 16 + (i * 1 + 0) * (3 * 4),
                   name="y")
    text = str(emit_module(lower_elementwise(y, [x])))
    assert text.count("sdiv i64") == 2 and text.count("srem i64") == 2
    assert "icmp eq i64 8, 0" not in text and "i64 1, i64 8" not in text
    lines = [line.strip() for line in text.splitlines()]
    assert not [x for x in lines if x.startswith("%") and (
        "= mul" in x and x.endswith(", 1") or "= add" in x and x.endswith(", 0")
        or "i64 3, i64 4" in x or " 3, 4" in x)]
    a = np.arange(-40, 41, dtype=np.int64)
    got = build_kernel(lower_elementwise(y, [x]))(a)
    assert got.tolist() == [v // 8 + v % 16 + i * 12 for i, v in enumerate(a.tolist())]


def test_floordiv_of_index_flattening():
    # i // 4 and i % 4 on the loop index itself (reshape/flatten indexing)
    a = np.zeros(23, dtype=np.int64)
    got = check(lambda i, a: (i // 4) * 10 + i % 4 + a, [a])
    assert got.tolist() == [(i // 4) * 10 + i % 4 for i in range(23)]


@pytest.mark.parametrize("dtype", INTS)
def test_int_min_divided_by_minus_one_does_not_trap(dtype):
    lo = np.iinfo(dtype).min
    a = np.array([lo, lo, 5, -5], dtype=dtype)
    b = np.array([-1, 0, -1, 0], dtype=dtype)
    q = check(lambda i, a, b: a // b, [a, b])
    r = check(lambda i, a, b: a % b, [a, b])
    assert q.tolist() == [lo, lo, -5, -5] and r.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floordiv_mod_match_numpy(rng, dtype):
    a = np.concatenate([data(rng, dtype, 40), np.array([1.0, -1.0, 0.0, 7.5], dtype)])
    b = np.concatenate([data(rng, dtype, 40), np.array([0.1, 0.0, 0.0, -2.5], dtype)])
    q = check(lambda i, a, b: a // b, [a, b], rtol=0)
    r = check(lambda i, a, b: a % b, [a, b], rtol=1e-6)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(q, np.floor_divide(a, b))
        np.testing.assert_allclose(r, np.mod(a, b), rtol=1e-6)


# ------------------------------------------------------------------------------ comparisons
CMPS = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": tc.eq, "ne": tc.ne}


@pytest.mark.parametrize("dtype", FLOATS + INTS + ["bool"])
@pytest.mark.parametrize("op", sorted(CMPS))
def test_comparisons(rng, dtype, op):
    a, b = data(rng, dtype, lo=-2, hi=2), data(rng, dtype, lo=-2, hi=2)
    got = check(lambda i, a, b: CMPS[op](a, b), [a, b])
    assert got.dtype == np.bool_


def test_nan_comparisons():
    a = np.array([np.nan, 1.0, np.nan], np.float32)
    b = np.array([1.0, np.nan, np.nan], np.float32)
    for op in CMPS.values():
        check(lambda i, a, b, op=op: op(a, b), [a, b])


def test_logic(rng):
    a, b, c = data(rng, "bool"), data(rng, "bool"), data(rng, "bool")
    check(lambda i, a, b, c: (a & ~b) | (c & b), [a, b, c])
    check(lambda i, a, b, c: tc.all(a, b, c), [a, b, c])
    check(lambda i, a, b, c: tc.any(a, b, c), [a, b, c])
    check(lambda i, a, b, c: tc.eq(a, b) | tc.ne(b, c), [a, b, c])


# ------------------------------------------------------------------------------ select
@pytest.mark.parametrize("dtype", FLOATS + INTS + ["bool"])
def test_select(rng, dtype):
    check(lambda i, c, a, b: tc.if_then_else(c, a, b),
          [data(rng, "bool"), data(rng, dtype), data(rng, dtype)])


def test_select_without_loads_uses_llvm_select(rng):
    a = data(rng, "float32")
    check(lambda i, a: a + tc.if_then_else(tc.eq(i % 3, 0), tc.cast(i, "float32"), 2.5), [a])


def _run_1d(fn, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Compile ``y[i] = fn(i, X)`` where ``fn`` gets the placeholder itself (to index it)."""
    n = tc.var("n")
    xp = tc.placeholder((n,), name="x", dtype=x.dtype.name)
    y = tc.compute((n,), lambda i: fn(i, xp), name="y")
    return build_kernel(lower_elementwise(y, [xp]))(x), tc.evaluate([y], {xp: x})[0]


def test_select_arm_that_would_fault_is_not_evaluated():
    # x[i * 2**40] is only read at i == 0; evaluating it anywhere else would crash
    big = 2**40
    x = np.arange(9, dtype=np.float64)
    got, want = _run_1d(lambda i, x: tc.if_then_else(tc.eq(i, 0), x[i * big] + 1.0, x[i]), x)
    np.testing.assert_array_equal(got, want)
    assert got[0] == 1.0 and got[5] == 5.0


def test_and_or_short_circuit_reads():
    big = 2**40
    x = np.arange(6, dtype=np.int64)
    for fn in (lambda i, x: tc.if_then_else(tc.eq(i, 0) & (x[i * big] > -1), 1, 2),
               lambda i, x: tc.if_then_else(tc.ne(i, 0) | (x[i * big] > -1), 1, 2)):
        got, want = _run_1d(fn, x)
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------ casts
ALL = FLOATS + INTS + ["bool"]


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_casts(rng, src, dst):
    a = data(rng, src, lo=-300, hi=300)
    if src in FLOATS:
        a[:4] = np.array([2.7, -2.7, 0.5, -0.0], dtype=src)
    check(lambda i, a: tc.cast(a, dst), [a])


def test_float_to_int_non_finite_and_truncation():
    a = np.array([np.nan, np.inf, -np.inf, 1.9, -1.9, 1e30, -1e30, 0.0], np.float32)
    got = check(lambda i, a: tc.cast(a, "int32"), [a])
    assert got.tolist() == [0, 0, 0, 1, -1, -(2**31), -(2**31), 0]


def test_cast_to_float16_rounds():
    a = np.array([0.1, 1 / 3, 65519.0, 1e-8], np.float64)
    got = check(lambda i, a: tc.cast(a, "float16"), [a], rtol=0)
    np.testing.assert_array_equal(got, a.astype(np.float16))


# ------------------------------------------------------------------------------ math
UNARY = ["exp", "log", "sqrt", "tanh", "sigmoid", "sin", "cos", "abs", "erf", "floor", "ceil"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", UNARY)
def test_math(rng, dtype, name):
    lo = 0.01 if name in ("log", "sqrt") else -3
    fn = getattr(tc, name)
    check(lambda i, a: fn(a), [data(rng, dtype, lo=lo, hi=3)], atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow(rng, dtype):
    check(lambda i, a, b: a ** b, [data(rng, dtype, lo=0.1, hi=3), data(rng, dtype, lo=-2, hi=2)])
    check(lambda i, a: tc.pow(a, 3.0) + a ** 0.5, [data(rng, dtype, lo=0.1, hi=3)])


@pytest.mark.parametrize("dtype", INTS)
def test_integer_abs(rng, dtype):
    a = data(rng, dtype, lo=-100, hi=100)
    got = check(lambda i, a: tc.abs(a), [a])
    np.testing.assert_array_equal(got, np.abs(a))


def test_math_special_values():
    a = np.array([np.inf, -np.inf, np.nan, 0.0, -1.0], np.float32)
    for fn in (tc.exp, tc.tanh, tc.sigmoid, tc.abs, tc.floor):
        check(lambda i, a, fn=fn: fn(a), [a])
    with np.errstate(invalid="ignore", divide="ignore"):
        check(lambda i, a: tc.log(a), [a])
        check(lambda i, a: tc.sqrt(a), [a])


# ------------------------------------------------------------------------------ delta, zero
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "float16"])
def test_delta_and_zero(rng, dtype):
    a = data(rng, "int64", lo=-3, hi=3)
    b = data(rng, "int64", lo=-3, hi=3)
    got = check(lambda i, a, b: E.Delta(a, b, dtype), [a, b])
    np.testing.assert_array_equal(got, (a == b).astype(dtype))
    check(lambda i, a: E.add(E.Delta(i % 3, a, dtype), E.Zero(dtype)), [a])
    got = check(lambda i, a: E.Zero(dtype), [a])
    assert not got.any()


def test_mixed_int_delta_operands():
    a = np.array([1, 2, 3], np.int32)
    b = np.array([1, 5, 3], np.int64)
    got = check(lambda i, a, b: E.Delta(a, b, "float32"), [a, b])
    assert got.tolist() == [1.0, 0.0, 1.0]


# ------------------------------------------------------------------------------ dtypes
@pytest.mark.parametrize("dtype", FLOATS + INTS + ["bool"])
def test_copy_each_dtype(rng, dtype):
    a = data(rng, dtype, lo=-1000, hi=1000)
    got = check(lambda i, a: a, [a], rtol=0)
    np.testing.assert_array_equal(got, a)


def test_bfloat16_is_stored_as_float32(rng):
    a = data(rng, "float32")
    n = tc.var("n")
    x = tc.placeholder((n,), name="x", dtype="float32")
    y = tc.compute((n,), lambda i: tc.cast(x[i], "bfloat16") * 2.0, name="y")
    got = build_kernel(lower_elementwise(y, [x]))(a)
    np.testing.assert_allclose(got, tc.evaluate([y], {x: a})[0], rtol=1e-6)


def test_unlowered_nodes_raise_compile_error():
    n = tc.var("n")
    x = tc.placeholder((n,), name="x")
    k = tc.reduce_axis(n, name="k")
    y = tc.compute((n,), lambda i: tc.sum(x[k], axis=k), name="y")
    with pytest.raises(CompileError, match=r"emit: .*Reduce.* must be lowered"):
        build_kernel(lower_elementwise(y, [x]))


# ------------------------------------------------------------------------------ random programs
def _random_programs():
    from hypothesis import strategies as st

    leaf = st.sampled_from(["a", "b", "c1", "c2", "i"])
    ops = ["+", "-", "*", "max", "min", "neg", "sel", "abs", "exp"]
    return st.recursive(leaf, lambda inner: st.tuples(st.sampled_from(ops), inner, inner),
                        max_leaves=8)


def _build(tree, i, a, b):
    if isinstance(tree, str):
        return {"a": a, "b": b, "c1": 0.5, "c2": -1.25, "i": tc.cast(i % 5, "float64")}[tree]
    op, x, y = tree
    x, y = _build(x, i, a, b), _build(y, i, a, b)
    x, y = E.as_expr(x, "float64"), E.as_expr(y, "float64")
    return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y,
            "max": lambda: tc.maximum(x, y), "min": lambda: tc.minimum(x, y),
            "neg": lambda: -x, "sel": lambda: tc.if_then_else(x < y, x, y * 0.5),
            "abs": lambda: tc.abs(x), "exp": lambda: tc.exp(tc.minimum(x, 3.0))}[op]()


def test_random_programs_match_evaluator():
    from hypothesis import given, settings

    a = np.linspace(-2, 2, 11)
    b = np.cos(np.arange(11.0))

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(_random_programs())
    def run(tree):
        check(lambda i, x, y: E.as_expr(_build(tree, i, x, y), "float64") + x * 0, [a, b],
              rtol=1e-12, atol=1e-12)

    run()


def test_shared_subexpressions_are_emitted_once():
    # a DAG of 40 levels, each using the previous node three times: ~3**40 nodes as a tree
    # (the reference evaluator walks trees, so NumPy is the reference here)
    a = np.linspace(-0.5, 0.5, 9)
    n = tc.var("n")
    xp = tc.placeholder((n,), name="x", dtype="float64")

    def deep(i):
        x = xp[i]
        for _ in range(40):
            x = tc.minimum(x * x, 0.25) + tc.maximum(x * x, -1.0) * 0.0 + x * 0.5
        return x

    y = tc.compute((n,), deep, name="y")
    got = build_kernel(lower_elementwise(y, [xp]))(a)
    want = a.copy()
    for _ in range(40):
        want = np.minimum(want * want, 0.25) + np.maximum(want * want, -1.0) * 0.0 + want * 0.5
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_index_arithmetic_is_emitted_once_per_block_while_its_variables_keep_their_values():
    """Statements of one loop body that index with the same ``i // 4`` and ``i % 4`` share
    one ``sdiv``/``srem`` pair for both (a register tile's statements all index so); a
    second loop over the same variable -- other blocks, another value of ``i`` -- computes
    its own."""
    from tecomp.codegen.llvm import emit_expr
    from tecomp.codegen.llvm.emit import emit_module
    from tecomp.loopir import Seq

    i = E.Var("i")
    x = Buffer("x", (E.Const(32, "int64"),), "float32", "input")
    outs = [Buffer(name, (E.Const(8, "int64"), E.Const(4, "int64")), "float32", "output")
            for name in ("y", "z", "w")]

    def at():  # new, equal nodes for every statement
        return (E.floordiv(i, E.Const(4, "int64")), E.mod(i, E.Const(4, "int64")))

    xi = BufferLoad(x, (i,), "float32")
    zero, n32 = E.Const(0, "int64"), E.Const(32, "int64")
    body = Seq((
        For(i, zero, n32, Seq((Store(outs[0], at(), xi),
                               Store(outs[1], at(), E.mul(xi, E.Const(2.0, "float32")))))),
        For(i, zero, n32, Store(outs[2], at(), E.add(xi, E.Const(1.0, "float32"))))))
    func = LoweredFunc("f", (x,), tuple(outs), (), body)
    text = str(emit_module(func))
    assert text.count("sdiv i64") == 2 and text.count("srem i64") == 2, text
    a = np.arange(32, dtype=np.float32)
    y, z, w = build_kernel(func)(a)
    np.testing.assert_array_equal(y, a.reshape(8, 4))
    np.testing.assert_array_equal(z, 2 * a.reshape(8, 4))
    np.testing.assert_array_equal(w, a.reshape(8, 4) + 1)
    old = emit_expr.SHARE_INDICES
    emit_expr.SHARE_INDICES = False
    try:  # the A/B switch: a pair for each operation of each statement
        assert str(emit_module(func)).count("sdiv i64") == 6
    finally:
        emit_expr.SHARE_INDICES = old


@pytest.mark.parametrize("width", [10, 64])
def test_short_rows_inside_a_loop_are_vectorised_along_the_row(rng, width):
    """A row loop of a few constant trips inside a loop over rows (a layer norm's mean over
    rows of 64; a bias gradient over 10 classes) stays a loop for LLVM's vectoriser, which
    otherwise unrolled it whole and vectorised the rows' loop through gathers
    (``emit.KEEP_INNER_ROWS``)."""
    n = tc.var("n")
    X = tc.placeholder((n, width), name="X")
    k = tc.reduce_axis(width, name="k")
    mean = tc.compute((n,), lambda i: tc.sum(X[i, k], axis=k) * (1.0 / width), name="mean")
    kernel = tc.build(mean, [X])
    x = rng.standard_normal((37, width)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), x.mean(axis=1), rtol=1e-5, atol=1e-6)
    assert "masked.gather" not in kernel.source


def test_product_with_one_plus_is_one_multiply_add(rng):
    """``a * (1 + y)`` is emitted as ``a + a * y``, which LLVM contracts to ``fma(a, y, a)``
    on an FMA host: the exact ``a (1 + y)`` rounded once (within half an ulp), where
    rounding ``1 + y`` first, then the product, is off by up to about one ulp."""
    from tecomp.host import describe

    if not describe().fma:
        pytest.skip("no FMA on this host: the multiply and the add round apart")
    n = 1 << 16
    A, Y = tc.placeholder((n,), name="A"), tc.placeholder((n,), name="Y")
    out = tc.compute((n,), lambda i: A[i] * (1.0 + Y[i]), name="out")
    a = rng.standard_normal(n).astype(np.float32)
    y = rng.uniform(-0.9, 0.9, n).astype(np.float32)
    got = tc.build(out, [A, Y])(a, y).astype(np.float64)
    exact = a.astype(np.float64) * (1.0 + y.astype(np.float64))
    ulp = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
    assert (np.abs(got - exact) / ulp).max() <= 0.5 + 1e-9
