"""Simplification after zero elimination: hoisted sum factors and stashed invariants."""

import numpy as np

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import topo_order, walk
from tecomp.passes.simplify import hoist_sum_factors, simplify, stash_invariants


def test_hoist_sum_factors_moves_invariants_out(rng):
    A = tc.placeholder((4, 6), name="A", dtype="float64")
    B = tc.placeholder((4,), name="B", dtype="float64")
    k = tc.reduce_axis(6, name="k")
    T = tc.compute((4,), lambda i: tc.sum(-(tc.exp(B[i]) * A[i, k]) / tc.sqrt(B[i]), axis=k),
                   name="T")
    body = hoist_sum_factors(T.op.body)
    red = [x for x in walk(body) if isinstance(x, E.Reduce)][0]
    assert not any(isinstance(x, E.Call) for x in walk(red.body))  # exp, sqrt moved out
    T2 = type(T)("T2", T.shape, T.dtype, type(T.op)(T.op.axes, body, None))
    a, b = rng.standard_normal((4, 6)), rng.uniform(0.5, 2, 4)
    np.testing.assert_allclose(tc.evaluate(T2, {A: a, B: b})[0],
                               tc.evaluate(T, {A: a, B: b})[0], rtol=1e-12)


def test_stash_invariants_computes_row_work_once(rng):
    X = tc.placeholder((8, 16), name="X", dtype="float64")
    V = tc.placeholder((8,), name="V", dtype="float64")
    Y = tc.compute((8, 16), lambda i, j: X[i, j] / tc.sqrt(V[i] + 1e-5), name="Y")
    stages = stash_invariants(Y)
    assert len(stages) == 2 and stages[0].ndim == 1
    x, v = rng.standard_normal((8, 16)), rng.uniform(0.5, 2, 8)
    np.testing.assert_allclose(tc.evaluate(stages[-1], {X: x, V: v})[0],
                               tc.evaluate(Y, {X: x, V: v})[0], rtol=1e-12)
    before = tc.cost([Y], [X, V], optimize=False).flops
    after = tc.cost([Y], [X, V]).flops
    assert after < before


def test_nothing_leaves_a_guarded_arm():
    X = tc.placeholder((8, 16), name="X", dtype="float64")
    V = tc.placeholder((8,), name="V", dtype="float64")
    Y = tc.compute((8, 16), lambda i, j: tc.if_then_else(V[i] > 0, X[i, j] / tc.log(V[i]), 0.0),
                   name="Y")
    assert stash_invariants(Y) == [Y]


def test_layer_norm_gradient_is_cheaper_after_simplify():
    L = tc.placeholder((16, 32), name="L", dtype="float64")
    out = tc.ops.layer_norm(L)
    grads = tc.gradient(out, [L])
    stages = topo_order(grads)
    assert any(t.name.endswith("_inv0") for t in stages)
    naive = tc.cost(simplify(grads), [L])
    assert naive.flops <= tc.cost(grads, [L], optimize=False).flops
