"""Static cost of lowered programs, against hand counts and brute-force enumeration."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import sympy

import tecomp as tc
from tecomp import expr as E
from tecomp.cost import Cost, count_cost, expr_flops
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, IfThenElse, LoweredFunc, Seq, Store
from tecomp.passes.lower import lower

I64 = "int64"


def c(v: int) -> E.Const:
    return E.Const(v, I64)


def matmul(n, k, m):
    A = tc.placeholder((n, k), name="A")
    B = tc.placeholder((k, m), name="B")
    r = tc.reduce_axis(k, name="r")
    return tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C"), A, B


def test_matmul_hand_count():
    n = tc.var("n")
    C, A, B = matmul(n, 5, 7)
    cost = tc.cost(C, sizes={n: 6})
    assert (cost.flops, cost.iterations, cost.bytes) == (2 * 6 * 5 * 7, 6 * 5 * 7, 0)
    assert all(type(x) is int for x in (cost.flops, cost.iterations, cost.bytes))
    assert tc.cost(C, [A, B], sizes={"n": 6}) == cost
    assert tc.lower(C, [A, B]).cost({n: 6}) == cost
    assert str(cost) == "flops=420, iterations=210, bytes=0"


def test_matmul_symbolic():
    n, k, m = tc.var("n"), tc.var("k"), tc.var("m")
    C, A, B = matmul(n, k, m)
    sn, sk, sm = sympy.symbols("n k m")
    cost = tc.cost(C)
    assert sympy.simplify(cost.flops - 2 * sn * sk * sm) == 0
    assert sympy.simplify(cost.iterations - sn * sk * sm) == 0
    assert cost.bytes == 0
    partial = tc.cost(C, sizes={k: 3})
    assert sympy.simplify(partial.flops - 6 * sn * sm) == 0


def test_two_stages_with_a_temp():
    n = tc.var("n")
    X = tc.placeholder((n, 4), name="X")
    T = tc.compute((n, 4), lambda i, j: tc.exp(X[i, j]), name="T")  # read twice: a buffer
    Y = tc.compute((n, 4), lambda i, j: T[i, j] * T[n - 1 - i, j] + 1.0, name="Y")
    cost = tc.cost(Y, sizes={n: 10})
    assert cost == Cost(flops=40 + 2 * 40, iterations=80, bytes=40 * 4)
    assert sympy.simplify(tc.cost(Y).bytes - 16 * sympy.Symbol("n")) == 0
    T64 = tc.compute((n, 4), lambda i, j: tc.cast(tc.exp(X[i, j]), "float64"), name="T64")
    Z = tc.compute((n, 4), lambda i, j: T64[i, j] * T64[n - 1 - i, j], name="Z")
    assert tc.cost(Z, sizes={n: 10}).bytes == 40 * 8


def test_guards_do_not_lower_cost():
    # counted on the plain lowering: zero elimination (in tc.cost) may turn a guard into
    # tighter bounds, and only bounds lower the cost
    X = tc.placeholder((8,), name="X")
    k = tc.reduce_axis(8, name="k")
    S = tc.compute((8,), lambda i: tc.sum(X[k] * 2.0, axis=k, where=k <= i), name="S")
    func = lower([S], [X])
    assert any(isinstance(s, IfThenElse) for s in _walk(func.body))
    assert count_cost(func) == Cost(flops=2 * 64, iterations=64, bytes=0)
    # both arms of a select count
    Y = tc.compute((8,), lambda i: tc.if_then_else(i > 3, tc.exp(X[i]), X[i] * 2.0 + 1.0),
                   name="Y")
    assert count_cost(lower([Y], [X])) == Cost(flops=8 * 3, iterations=8, bytes=0)


def _walk(s):
    yield s
    for x in getattr(s, "stmts", ()):
        yield from _walk(x)
    for f in ("body", "then", "else_"):
        x = getattr(s, f, None)
        if x is not None:
            yield from _walk(x)


def test_triangular_loop_counts_exactly():
    n = tc.var("n")
    X = tc.placeholder((n,), name="X")

    def body(i):
        k = tc.reduce_axis((0, i + 1), name="k")
        return tc.sum(X[k] * X[i - k], axis=k)

    T = tc.compute((n,), body, name="T")
    for size in (0, 1, 7, 1000):
        cost = tc.cost(T, sizes={n: size})
        assert cost.iterations == size * (size + 1) // 2
        assert cost.flops == size * (size + 1)
    with pytest.raises(tc.TecompError, match="sizes="):
        tc.cost(T)


def test_scalar_program_without_loops_counts_one():
    X = tc.placeholder((), name="X")
    Y = tc.compute((), lambda: X[()] * 2.0 + tc.exp(X[()]), name="Y")
    assert tc.cost(Y) == Cost(flops=3, iterations=1, bytes=0)


def test_flop_rules():
    x, y = tc.placeholder((4,), name="x")[0], tc.placeholder((4,), name="y")[1]
    i = tc.var("i")
    assert expr_flops(x + y) == 1
    assert expr_flops(x * y - x / y) == 3
    assert expr_flops(tc.maximum(x, y), tc.minimum(x, y)) == 2
    assert expr_flops(tc.exp(x), tc.sqrt(y)) == 2
    assert expr_flops(-x) == 1
    assert expr_flops(i * 3 + i // 2 - i % 5) == 0  # integer index arithmetic
    assert expr_flops(tc.if_then_else(x > y, x, y)) == 0  # compare and select
    assert expr_flops(tc.cast(i, "float32")) == 0
    assert expr_flops(tc.exp(x) * tc.exp(x)) == 2  # a repeated subexpression counts once


# ------------------------------------------------------------------------------ hand-built IR
def _func(body, params=()):
    out = Buffer("out", (), "float32", "output")
    return LoweredFunc("f", (), (out,), tuple(params), body), out


def _nest_count(bounds, sizes):
    """Brute-force count of a nest given as [(var, lo_fn, hi_fn, step)]."""
    def rec(m, env):
        if m == len(bounds):
            return 1
        name, lo, hi, step = bounds[m]
        total = 0
        for v in range(lo(env, sizes), hi(env, sizes), step):
            env[name] = v
            total += rec(m + 1, env)
        return total
    return rec(0, {})


def _store(out):
    return Store(out, (), E.Const(1.0, "float32"), "sum")


def test_strided_loop_counts_exactly():
    n, i, k = E.Var("n"), E.Var("i"), E.Var("k")
    out = Buffer("out", (), "float32", "output")
    inner = For(k, i % 3, n, _store(out), step=2)
    func, _ = _func(For(i, c(0), n, inner), [n])
    for size in (0, 1, 5, 10):
        want = sum(len(range(a % 3, size, 2)) for a in range(size))
        cost = count_cost(func, {"n": size})
        assert cost.iterations == want and cost.flops == want
    sym = count_cost(_func(For(k, c(1), n, _store(out), step=2), [n])[0])
    assert sympy.simplify(sym.iterations - sympy.ceiling((sympy.Symbol("n") - 1) / 2)) == 0


def test_random_nests_match_brute_force():
    rng = np.random.default_rng(12345)
    n = E.Var("n")
    names = [E.Var(f"v{d}") for d in range(3)]
    for trial in range(25):
        bounds, py = [], []
        for d, v in enumerate(names):
            outer = names[:d]
            a = outer[rng.integers(len(outer))] if outer else c(0)
            lo_kind, hi_kind, step = rng.integers(3), rng.integers(3), int(rng.integers(1, 4))
            lo = [c(0), E.maximum(c(0), a - 2), a // 2][lo_kind]
            hi = [n, E.minimum(n, a + 3), a + 1][hi_kind]
            bounds.append((v, lo, hi, step))
            an = a.name if isinstance(a, E.Var) else None

            def lo_fn(env, s, kind=lo_kind, an=an):
                x = env[an] if an else 0
                return [0, max(0, x - 2), x // 2][kind]

            def hi_fn(env, s, kind=hi_kind, an=an):
                x = env[an] if an else 0
                return [s, min(s, x + 3), x + 1][kind]

            py.append((v.name, lo_fn, hi_fn, step))
        out = Buffer("out", (), "float32", "output")
        body = _store(out)
        for v, lo, hi, step in reversed(bounds):
            body = For(v, lo, hi, body, step=step)
        func = LoweredFunc("f", (), (out,), (n,), body)
        size = int(rng.integers(0, 9))
        assert count_cost(func, {n: size}).iterations == _nest_count(py, size), trial


def test_large_dependent_nest_is_fast():
    n, i, j, k = E.Var("n"), E.Var("i"), E.Var("j"), E.Var("k")
    out = Buffer("out", (), "float32", "output")
    body = For(i, c(0), n, For(j, c(0), i + 1, For(k, j, E.minimum(i + 1, j + 3), _store(out))))
    func, _ = _func(body, [n])
    t0 = time.perf_counter()
    got = count_cost(func, {n: 1000}).iterations
    assert time.perf_counter() - t0 < 1.0
    # closed form: for each i, sum_j min(3, i + 1 - j) over j <= i
    want = int(sum(np.minimum(3, a + 1 - np.arange(a + 1)).sum() for a in range(1000)))
    assert got == want
    square = For(i, c(0), c(1000), For(j, c(0), c(1000), _store(out)))
    t0 = time.perf_counter()
    assert count_cost(_func(square)[0]).iterations == 10**6
    assert time.perf_counter() - t0 < 1.0


def test_initialisation_loops_and_temps():
    n, i = E.Var("n"), E.Var("i")
    T = Buffer("T", (n, c(3)), "float64", "temp")
    out = Buffer("out", (), "float32", "output")
    zero = For(i, c(0), n, Store(T, (i, c(0)), E.Const(0.0, "float64")))
    work = For(i, c(0), n, Seq((Store(T, (i, c(0)), BufferLoad(T, (i, c(1)), "float64") * 2.0),
                                IfThenElse(i > 2, _store(out)))))
    cost = count_cost(LoweredFunc("f", (), (out,), (n,), Allocate(T, Seq((zero, work)))),
                      {n: 10})
    assert cost == Cost(flops=20, iterations=10, bytes=10 * 3 * 8)


def test_data_dependent_bound_is_an_error():
    i = E.Var("i")
    ptr = Buffer("ptr", (c(4),), I64, "input")
    out = Buffer("out", (), "float32", "output")
    func = LoweredFunc("f", (ptr,), (out,), (), For(i, c(0), BufferLoad(ptr, (c(0),), I64),
                                                    _store(out)))
    with pytest.raises(tc.TecompError, match="ptr"):
        count_cost(func)


def test_symbolic_floor_bounds():
    h = tc.var("h")
    X = tc.placeholder((h,), name="X")
    k = tc.reduce_axis(3, name="k")
    Y = tc.compute(((h - 3) // 2 + 1,), lambda i: tc.sum(X[2 * i + k], axis=k), name="Y")
    cost = tc.cost(Y)
    sh = sympy.Symbol("h")
    assert sympy.simplify(cost.iterations - 3 * (sympy.floor((sh - 3) / 2) + 1)) == 0
    assert cost.flops.subs(sh, 9) == 12  # 4 outputs x 3 adds
    assert tc.cost(Y, sizes={h: 9}).flops == 12


def test_brute_force_products():
    # all-constant nests multiply
    for dims in itertools.product((1, 2, 3), repeat=3):
        vs = [E.Var(f"i{d}") for d in range(3)]
        out = Buffer("out", (), "float32", "output")
        body = _store(out)
        for v, d in zip(reversed(vs), reversed(dims)):
            body = For(v, c(0), c(d), body)
        assert count_cost(_func(body)[0]).iterations == int(np.prod(dims))
