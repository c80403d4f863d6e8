"""Strip-mining of innermost loops by the divisor of their ``//``/``%`` indices
(passes/schedule/cpu/mod.py): applied where one constant divides every such index and the trip
count, results equal to the evaluator's."""

from __future__ import annotations

import numpy as np
from cpu_order import lower

import tecomp as tc
from tecomp.loopir import For, LetStmt, Seq
from tecomp.passes.schedule.cpu.mod import split_mod_loops


def _loops(s):
    stack, out = [s], []
    while stack:
        x = stack.pop()
        if isinstance(x, For):
            out.append(x)
        if isinstance(x, Seq):
            stack.extend(x.stmts)
        for name in ("body", "then", "else_"):
            v = getattr(x, name, None)
            if hasattr(v, "__dataclass_fields__"):
                stack.append(v)
    return out


def _strip_mined(func):
    return [x for x in _loops(func.body) if isinstance(x.body, Seq)
            and all(isinstance(c, LetStmt) for c in x.body.stmts)]


def _check(outs, ins, arrays):
    got = tc.build(outs, ins)(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, tc.evaluate(outs, dict(zip(ins, arrays)))):
        np.testing.assert_array_equal(g, w)


def test_max_pool_gradient_rows_are_strip_mined():
    X = tc.placeholder((1, 3, 16, 16), name="X")
    Y = tc.ops.max_pool2d(X, 2, 2)
    H = tc.placeholder(Y.shape, name="H")
    (g,) = tc.gradient(Y, [X], head=H)
    func = lower([g], [X, H])
    (loop,) = _strip_mined(split_mod_loops(func))
    assert len(loop.body.stmts) == 2 and int(loop.hi.value) == 8
    rng = np.random.default_rng(0)
    _check([g], [X, H], [rng.standard_normal((1, 3, 16, 16)).astype(np.float32),
                         rng.standard_normal((1, 3, 8, 8)).astype(np.float32)])


def test_divisor_three_and_the_cases_left_alone():
    A = tc.placeholder((8, 48), name="A")
    B = tc.compute((8, 48), lambda i, j: A[i, j // 3] * tc.cast(j % 3, "float32") + A[i, j],
                   name="B")
    assert len(_strip_mined(split_mod_loops(lower([B], [A])))) == 1
    a = np.random.default_rng(1).standard_normal((8, 48)).astype(np.float32)
    _check([B], [A], [a])
    mixed = tc.compute((8, 48), lambda i, j: A[i, j // 2] + A[i, j // 4], name="M")
    odd = tc.compute((8, 46), lambda i, j: A[i, j // 3], name="O")  # 46 % 3 != 0
    for t in (mixed, odd):
        func = lower([t], [A])
        assert split_mod_loops(func) is func
        _check([t], [A], [a])
