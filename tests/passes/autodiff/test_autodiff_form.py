"""The shape of naive gradients: the form zero elimination is designed against."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import topo_order, walk
from tecomp.passes.autodiff import differentiate
from tecomp.tensor import ComputeOp

F = "float64"


def grad(out, inputs, head=None):
    return tc.gradient(out, inputs, head, optimize=False)


def nodes(t: tc.Tensor):
    assert isinstance(t.op, ComputeOp)
    return list(walk(t.op.body))


def all_stage_nodes(tensors):
    for t in topo_order(tensors):
        if isinstance(t.op, ComputeOp):
            yield t, list(walk(t.op.body))


def test_shifted_read_is_one_flat_sum_with_a_delta():
    A = tc.placeholder((12,), name="A", dtype=F)
    B = tc.compute((10, 3), lambda i, j: A[i + j], name="B")
    (dA,) = grad(B, [A])
    (j0,) = (a.var for a in dA.op.axes)
    i, j = (a.var for a in B.op.axes)
    body = dA.op.body
    assert isinstance(body, E.Reduce) and body.combiner == "sum" and body.where is None
    assert [(a.var, a.extent) for a in body.axes] == [(i, E.Const(10, "int64")),
                                                      (j, E.Const(3, "int64"))]
    head_read, delta = body.body.a, body.body.b
    assert isinstance(head_read, E.TensorRead) and head_read.indices == (i, j)
    assert delta == E.Delta(j0, E.add(i, j), F)


def test_reads_give_delta_nodes_never_casts_of_booleans():
    A = tc.placeholder((5, 5), name="A", dtype=F)
    idx = tc.placeholder((4,), name="idx", dtype="int64")
    Y = tc.compute((4, 5), lambda i, j: A[idx[i], j] * A[j, i % 5] + A[i, i], name="Y")
    (dA,) = grad(Y, [A])
    deltas = [x for x in nodes(dA) if isinstance(x, E.Delta)]
    assert deltas and all(isinstance(d.a, E.Var) for d in deltas)
    assert E.Delta(dA.op.axes[0].var, idx[Y.op.axes[0].var], F) in deltas
    for _, ns in all_stage_nodes([dA]):
        assert not any(isinstance(x, E.Cast) and x.value.dtype == "bool" for x in ns)


def test_sum_with_where_flattens_into_one_reduction_keeping_where():
    A = tc.placeholder((6, 6), name="A", dtype=F)
    k = tc.reduce_axis(6, "k")
    Y = tc.compute((6,), lambda i: tc.sum(A[i, k] * A[k, i], axis=k, where=k <= i), name="Y")
    (dA,) = grad(Y, [A])
    terms = [dA.op.body.a, dA.op.body.b]  # one flat sum per read of A
    for t in terms:
        assert isinstance(t, E.Reduce) and t.combiner == "sum"
        assert [a.var.name for a in t.axes] == ["i", "k"]
        assert t.where == E.compare(E.LE, k.var, Y.op.axes[0].var)
        assert not any(isinstance(x, E.Reduce) for x in walk(t.body))


def test_scalar_factors_are_pulled_into_the_sum():
    A = tc.placeholder((3, 4), name="A", dtype=F)
    k = tc.reduce_axis(4, "k")
    Y = tc.compute((3,), lambda i: -tc.sum(A[i, k], axis=k) / 4.0, name="mean")
    (dA,) = grad(Y, [A])
    body = dA.op.body
    assert isinstance(body, E.Reduce) and len(body.axes) == 2
    assert not any(isinstance(x, E.Reduce) for x in walk(body.body))


def test_if_then_else_arms_stay_selects():
    A = tc.placeholder((6,), name="A", dtype=F)
    P = tc.compute((8,), lambda i: tc.if_then_else(tc.all(i >= 1, i < 7), A[i - 1], 0.0),
                   name="P")
    (dA,) = grad(P, [A])
    sel = [x for x in nodes(dA) if isinstance(x, E.Select)]
    assert len(sel) == 1 and isinstance(sel[0].f, E.Zero)
    assert any(isinstance(x, E.Delta) for x in walk(sel[0].t))


def test_max_gradient_reads_a_first_index_stage_computed_once():
    A = tc.placeholder((4, 5), name="A", dtype=F)
    k = tc.reduce_axis(5, "k")
    Y = tc.compute((4,), lambda i: tc.max(A[i, k] * 2.0, axis=k), name="Y")
    (dA,) = grad(Y, [A])
    assert not any(isinstance(x, E.Reduce) and x.combiner != "sum" for x in nodes(dA))
    firsts = [x.tensor for x in nodes(dA) if isinstance(x, E.TensorRead)
              and x.tensor.dtype == "int64"]
    assert len({id(t) for t in firsts}) == 1
    first = firsts[0]
    assert first.shape == Y.shape
    assert first.op.body.combiner == "min"
    assert any(isinstance(x, E.TensorRead) and x.tensor is Y for x in walk(first.op.body))
    d = [x for x in nodes(dA) if isinstance(x, E.Delta) and isinstance(x.b, E.TensorRead)]
    assert d and d[0].b.tensor is first


def test_nested_reductions_get_auxiliary_stages_not_recomputation():
    from ad_nets import softmax_single

    X = tc.placeholder((3, 4), name="X", dtype=F)
    S = softmax_single(X, tag=None)
    k = tc.reduce_axis(4, "kk")
    P = tc.compute((3,), lambda i: tc.prod(S[i, k], axis=k), name="P")
    (dX,) = grad(P, [X])
    for t, ns in all_stage_nodes([dX]):
        if t.name.endswith("_grad"):
            assert not any(isinstance(x, E.Reduce) and x.combiner != "sum" for x in ns), t.name
    aux = [t for t in topo_order([dX]) if t.name.startswith(("sm_", "P_"))
           and not t.name.endswith(("_grad", "_head"))]
    kinds = sorted(t.name for t in aux)
    assert kinds == ["P_nzprod", "P_zeros", "P_zsum", "sm_argmax", "sm_max", "sm_sum"]


def test_forward_values_are_reused():
    A = tc.placeholder((5,), name="A", dtype=F)
    T = tc.compute((5,), lambda i: tc.tanh(A[i]), name="T")
    S = tc.compute((5,), lambda i: tc.sigmoid(T[i]), name="S")
    Ex = tc.compute((5,), lambda i: tc.exp(S[i]), name="Ex")
    (dA,) = grad(Ex, [A])
    for t, ns in all_stage_nodes([dA]):
        if t.name.endswith("_grad"):
            assert not any(isinstance(x, E.Call) for x in ns), tc.show(t)
    reads = {x.tensor.name for t, ns in all_stage_nodes([dA]) if t.name.endswith("_grad")
             for x in ns if isinstance(x, E.TensorRead)}
    assert {"T", "S", "Ex"} <= reads


def test_each_adjoint_is_one_stage_shared_by_its_producers():
    X = tc.placeholder((4,), name="X", dtype=F)
    H = tc.compute((4,), lambda i: tc.exp(X[i]), name="H")
    Y = tc.compute((4,), lambda i: H[i] * H[3 - i] + tc.sin(H[i]), name="Y")
    Z = tc.compute((4,), lambda i: H[i] * X[i], name="Z")
    r = tc.reduce_axis(4, "r")
    L = tc.compute((), lambda: tc.sum(Y[r] + Z[r], axis=r), name="L")
    (dX,) = grad(L, [X])
    h_grads = [t for t in topo_order([dX]) if t.name == "H_grad"]
    assert len(h_grads) == 1
    x_reads = [x for x in nodes(dX) if isinstance(x, E.TensorRead) and x.tensor is h_grads[0]]
    assert x_reads
    x = np.array([0.1, -0.4, 0.7, 0.3])
    h = np.exp(x)
    want = (h[::-1] * h + np.cos(h) * h) + (h * h[::-1]) + (h * x + h)
    np.testing.assert_allclose(tc.evaluate(dX, {X: x})[0], want, rtol=1e-12)


def test_unrelated_input_gets_a_zero_tensor():
    A = tc.placeholder((3,), name="A", dtype=F)
    B = tc.placeholder((2, 2), name="B", dtype="float32")
    Y = tc.compute((3,), lambda i: A[i] * 2.0, name="Y")
    dA, dB = grad(Y, [A, B])
    assert dB.shape == B.shape and dB.dtype == "float32"
    assert dB.op.body == E.Const(0.0, "float32")
    np.testing.assert_array_equal(tc.evaluate(dB, {A: np.ones(3)})[0], np.zeros((2, 2)))


def test_integer_stages_carry_no_adjoint():
    A = tc.placeholder((6,), name="A", dtype=F)
    I = tc.compute((6,), lambda i: tc.cast(A[i] * 2.0, "int64"), name="I")
    Y = tc.compute((6,), lambda i: tc.cast(I[i], F) * A[i], name="Y")
    (dA,) = grad(Y, [A])
    assert not any(t.name == "I_grad" for t in topo_order([dA]))
    a = np.array([0.3, 1.7, -2.2, 0.9, 2.6, -0.1])
    np.testing.assert_allclose(tc.evaluate(dA, {A: a})[0], np.trunc(2 * a))


def test_prefix_heads_keep_prefix_axes_free():
    A = tc.placeholder((4,), name="A", dtype=F)
    Y = tc.compute((4,), lambda i: A[i] * A[i], name="Y")
    H = tc.placeholder((3, 4), name="H", dtype=F)
    (dA,) = differentiate(Y, [A], H)
    assert dA.shape == (E.Const(3, "int64"), E.Const(4, "int64"))
    a, h = np.arange(4.0), np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(tc.evaluate(dA, {A: a, H: h})[0], h * 2 * a)


def _table():
    import test_autodiff_rules as table

    return table.CASES


@pytest.mark.parametrize("name", sorted(_table()))
def test_table_gradients_keep_the_form_zero_elimination_consumes(name, rng):
    """Across the per-op table: deltas, never casts of booleans; in every adjoint stage only
    sum reductions, each carrying a delta (forward reductions are read from stages)."""
    c = _table()[name](rng)
    grads = grad(c["out"], c["inputs"])
    for t, ns in all_stage_nodes(grads):
        assert not any(isinstance(x, E.Cast) and x.value.dtype == "bool" for x in ns), t.name
        if not t.name.endswith("_grad") or name == "nested_max_triangular":
            continue  # the triangular case computes its max in place (documented fallback)
        for r in (x for x in ns if isinstance(x, E.Reduce)):
            assert r.combiner == "sum", (t.name, str(r))
            assert any(isinstance(x, E.Delta) for x in walk(r.body)), (t.name, str(r))
