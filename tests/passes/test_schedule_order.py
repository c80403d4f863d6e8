"""Loop order (passes/loop_order.py): floor-division window bounds inverted exactly (brute
force over a box), and strided/dilated convolution gradients against the evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import run

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import For
from tecomp.passes.loop_order import invert_bounds
from tecomp.passes.lower import lower_program

I64 = "int64"


def _c(v: int) -> E.Const:
    return E.Const(v, I64)


def _value(e: E.Expr, env: dict[str, int]) -> int:
    """Evaluate an integer index expression (Python floor semantics, as the IR defines)."""
    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        return env[e.name]
    ops = {E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
           E.FloorDiv: lambda a, b: a // b, E.Max: max, E.Min: min}
    if isinstance(e, E.Neg):
        return -_value(e.a, env)
    return ops[type(e)](_value(e.a, env), _value(e.b, env))


@pytest.mark.parametrize("seed", range(40))
def test_floor_division_bounds_invert_exactly(seed):
    rng = np.random.default_rng(seed)
    j, k = E.Var("j", I64), E.Var("k", I64)
    jlo, jhi = int(rng.integers(-3, 3)), int(rng.integers(4, 14))

    def term():
        a, c = int(rng.choice([1, -1])), int(rng.integers(1, 4))
        r, d = int(rng.integers(-6, 7)), int(rng.integers(-2, 3))
        t = E.floordiv(E.add(E.mul(_c(a), j) if a < 0 else j, _c(r)), _c(c))
        return E.add(t, _c(d)) if d else t

    lo = E.maximum(term(), _c(int(rng.integers(-3, 1))))
    hi = E.minimum(E.add(term(), _c(1)), _c(int(rng.integers(2, 6))))
    ax = E.IterVar(k, lo, E.sub(hi, lo), "reduce")
    (kb,), jl, jh = invert_bounds((ax,), j, _c(jlo), _c(jhi))
    want = {(jv, kv) for jv in range(jlo, jhi)
            for kv in range(_value(lo, {"j": jv}), _value(hi, {"j": jv}))}
    got = set()
    for kv in range(_value(kb[0], {}), _value(kb[1], {})):
        env = {"k": kv}
        a = max([jlo] + [_value(t, env) for t in jl])
        b = min([jhi] + [_value(t, env) for t in jh])
        got |= {(jv, kv) for jv in range(a, b)}
    assert got == want, f"seed {seed}: k in [{lo}, {hi}), j in [{jlo}, {jhi})"


def _loops(s):
    if isinstance(s, For):
        yield s
        yield from _loops(s.body)
    elif hasattr(s, "stmts"):
        for x in s.stmts:
            yield from _loops(x)
    elif hasattr(s, "body"):
        yield from _loops(s.body)


@pytest.mark.parametrize("stride,dilation,pad", [(1, 2, 2), (1, 3, 1), (2, 1, 1), (2, 2, 0)])
def test_strided_and_dilated_convolution_gradients(stride, dilation, pad):
    rng = np.random.default_rng(stride * 10 + dilation)
    X = tc.placeholder((1, 2, 9, 11), name="X")
    W = tc.placeholder((3, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dilation)
    H = tc.placeholder(Y.shape, name="H")
    grads = tc.gradient(Y, [X, W], head=H)
    func, consts = lower_program(grads, [X, W, H])
    arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
              for t in (X, W, H)]
    got = run(func, arrays, constants=consts)
    want = tc.evaluate(grads, dict(zip([X, W, H], arrays)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    if stride == 1:  # the input gradient's column loop runs innermost, under the window
        inner = [x for x in _loops(func.body) if x.var.name == "j3"]
        assert any(isinstance(x.body, tc.loopir.Store) and x.body.reduce == "sum"
                   for x in inner)



def test_strided_convolution_puts_the_output_column_innermost():
    rng = np.random.default_rng(5)
    X = tc.placeholder((1, 2, 40, 40), name="X")
    W = tc.placeholder((3, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    func, consts = lower_program([Y], [X, W])
    acc = [x for x in _loops(func.body) if isinstance(x.body, tc.loopir.Store)
           and x.body.reduce == "sum"]
    assert [x.var.name for x in acc] == ["x"]
    arrays = [rng.standard_normal((1, 2, 40, 40)).astype(np.float32),
              rng.standard_normal((3, 2, 3, 3)).astype(np.float32)]
    (got,) = run(func, arrays, constants=consts)
    (want,) = tc.evaluate([Y], dict(zip([X, W], arrays)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
