"""Zero elimination on hand-written delta forms: same values, no delta left, tight domains."""

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import walk
from tecomp.passes.zero_elimination import eliminate_zeros
from tecomp.tensor import ComputeOp, ScatterOp


def _deltas(t):
    from tecomp.functor import op_exprs, topo_order

    return [x for s in topo_order([t]) for e in op_exprs(s) for x in walk(e)
            if isinstance(x, E.Delta)]


def _reduce_axes(t):
    return [a for x in walk(t.op.body) if isinstance(x, E.Reduce) for a in x.axes]


def _check(naive, bindings):
    (opt,) = eliminate_zeros([naive])
    assert not _deltas(opt), tc.show(opt)
    ref = tc.evaluate(naive, bindings)[0]
    np.testing.assert_allclose(tc.evaluate(opt, bindings)[0], ref, rtol=1e-12, atol=1e-12)
    return opt


def test_shifted_read(rng):
    H = tc.placeholder((10, 3), name="H", dtype="float64")

    def body(j):
        i, k = tc.reduce_axis(10, name="i"), tc.reduce_axis(3, name="k")
        return tc.sum(H[i, k] * E.delta(j, i + k, "float64"), axis=[i, k])

    opt = _check(tc.compute((12,), body, name="dA"), {H: rng.standard_normal((10, 3))})
    (t,) = _reduce_axes(opt)
    assert "min(j, 2)" in tc.show(opt)  # at most 3 taps per element, not 30
    assert t.var.name == "t"


@pytest.mark.parametrize("stride,dil", [(1, 1), (2, 1), (2, 2), (3, 2), (1, 3)])
def test_strided_dilated_conv_input_gradient_1d(rng, stride, dil):
    OH = tc.var("OH")
    dY = tc.placeholder((OH,), name="dY", dtype="float64")
    W = tc.placeholder((3,), name="W", dtype="float64")

    def body(y):
        oy, ry = tc.reduce_axis(OH, name="oy"), tc.reduce_axis(3, name="ry")
        return tc.sum(dY[oy] * W[ry] * E.delta(y, stride * oy + dil * ry, "float64"),
                      axis=[oy, ry])

    naive = tc.compute((stride * (OH - 1) + dil * 2 + 1,), body, name="dX")
    for oh in (1, 4, 7):
        _check(naive, {dY: rng.standard_normal(oh), W: rng.standard_normal(3), OH: oh})


def test_div_mod_reshape_gradient(rng):
    H = tc.placeholder((20,), name="H", dtype="float64")

    def body(j0, j1):
        i = tc.reduce_axis(20, name="i")
        return tc.sum(H[i] * E.delta(j0, i // 5, "float64") * E.delta(j1, i % 5, "float64"),
                      axis=i)

    opt = _check(tc.compute((4, 5), body, name="dx"), {H: rng.standard_normal(20)})
    assert not _reduce_axes(opt)  # one term per element: no loop left


def test_gather_gradient_becomes_scatter(rng):
    idx = tc.placeholder((100,), name="idx", dtype="int64")
    Hd = tc.placeholder((100, 3), name="Hd", dtype="float64")

    def body(j0, j1):
        i, c = tc.reduce_axis(100, name="i"), tc.reduce_axis(3, name="c")
        return tc.sum(Hd[i, c] * E.delta(j0, idx[i], "float64") * E.delta(j1, c, "float64"),
                      axis=[i, c])

    naive = tc.compute((7, 3), body, name="dE")
    opt = _check(naive, {Hd: rng.standard_normal((100, 3)),
                         idx: rng.integers(0, 7, 100)})  # many duplicates: summed
    assert isinstance(opt.op, ScatterOp)


def test_masked_kronecker_sparse_product_becomes_compact(rng):
    X = tc.placeholder((128,), name="X", dtype="float64")
    K = tc.placeholder((128, 128), name="K", dtype="float64")

    def body(i):
        j = tc.reduce_axis(128, name="j")
        return tc.sum(K[i, j] * X[j], axis=j,
                      where=tc.all(tc.eq(i // 32, j // 32), tc.eq(i % 4, j % 4)))

    opt = _check(tc.compute((128,), body, name="Y"),
                 {X: rng.standard_normal(128), K: rng.standard_normal((128, 128))})
    assert isinstance(opt.op, ComputeOp)


def test_where_condition_tightens_bounds(rng):
    A = tc.placeholder((9,), name="A", dtype="float64")
    k = tc.reduce_axis(9, name="k")
    S = tc.compute((9,), lambda i: tc.sum(A[k], axis=k, where=k <= i), name="S")
    opt = _check(S, {A: rng.standard_normal(9)})
    red = [x for x in walk(opt.op.body) if isinstance(x, E.Reduce)]
    assert red and red[0].where is None


def test_unsatisfiable_delta_gives_zero():
    H = tc.placeholder((4,), name="H", dtype="float64")

    def body(j):
        i = tc.reduce_axis(4, name="i")
        return tc.sum(H[i] * E.delta(2 * j, 2 * i + 1, "float64"), axis=i)

    (opt,) = eliminate_zeros([tc.compute((4,), body, name="dZ")])
    out = tc.evaluate(opt, {H: np.ones(4)})[0]
    assert not out.any()


def test_data_dependent_delta_on_summation_variable_is_a_gather(rng):
    # the max-gradient shape: dX[j0, j1] = sum_{i,k} dY[i] delta(k, F[i]) delta(j0,i) delta(j1,k)
    dY = tc.placeholder((5,), name="dY", dtype="float64")
    F = tc.placeholder((5,), name="F", dtype="int64")

    def body(j0, j1):
        i, k = tc.reduce_axis(5, name="i"), tc.reduce_axis(6, name="k")
        return tc.sum(dY[i] * E.delta(k, F[i], "float64") * E.delta(j0, i, "float64")
                      * E.delta(j1, k, "float64"), axis=[i, k])

    opt = _check(tc.compute((5, 6), body, name="dX"),
                 {dY: rng.standard_normal(5), F: rng.integers(0, 6, 5)})
    assert not _reduce_axes(opt)
