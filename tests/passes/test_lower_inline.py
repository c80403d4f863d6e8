"""Inlining decisions, and the i-k-j loop order of sum reductions (the CPU schedule's first
step, passes/schedule/cpu/sum_order.py, on lowered programs)."""

from __future__ import annotations

import numpy as np
from loop_interp import run
from test_lower import allocs, check, stmts

import tecomp as tc
from tecomp.loopir import For, IfThenElse, Seq, Store
from tecomp.passes.affine_forms import coefficient
from tecomp.passes.inline import INLINE_BUDGET, inline_stages
from tecomp.passes.lower import lower, lower_program
from tecomp.passes.schedule.cpu.sum_order import order_sums


def temps(outs, ins):
    return allocs(lower(outs, ins), "temp")


def check_cpu(outs, ins, arrays):
    """The lowered program in the CPU loop order, checked against the evaluator."""
    func, constants = lower_program(outs, ins)
    return check(outs, ins, arrays, func=order_sums(func), constants=constants)


# ------------------------------------------------------------------------------ inlining
def test_elementwise_chain_with_one_covering_reader_is_inlined(rng):
    X = tc.placeholder((3, 4), name="X")
    A = tc.compute((3, 4), lambda i, j: tc.exp(X[i, j]), name="A")
    B = tc.compute((3, 4), lambda i, j: tc.tanh(A[i, j]) * 2.0, name="B")
    C = tc.compute((4, 3), lambda i, j: B[j, i] + 1.0, name="C")
    func = check([C], [X], [rng.standard_normal((3, 4))])
    assert allocs(func, "temp") == []
    assert str(func.body).count("exp(") == 1


def test_a_stage_marked_keep_buffer_is_not_inlined(rng):
    X = tc.placeholder((3, 4), name="X")
    A = tc.compute((3, 4), lambda i, j: tc.exp(X[i, j]), name="A")
    A.attrs["keep_buffer"] = True
    B = tc.compute((4, 3), lambda i, j: A[j, i] * 2.0, name="B")
    func = check([B], [X], [rng.standard_normal((3, 4))])
    assert allocs(func, "temp") == ["A"]


def test_a_one_hot_inlined_into_sums_becomes_one_term_of_each(rng):
    """``P[i, t] = select(t == y[i], c, 0)`` read by a sum over ``t`` and by an element-wise
    stage: its invariant factor ``-h / 4`` is no work per element, so it is inlined into
    both, and each sum over ``t`` of the delta becomes its one term, guarded by the label's
    range (labels outside it, and a second sum axis, kept exact)."""
    y = tc.placeholder((4,), name="y", dtype="int64")
    h = tc.placeholder((), name="h")
    X = tc.placeholder((4, 6), name="X")
    P = tc.compute((4, 6), lambda i, t: tc.if_then_else(tc.eq(t, y[i]), -h[()] * 0.25, 0.0),
                   name="P")
    t = tc.reduce_axis(6, name="t")
    S = tc.compute((4,), lambda i: tc.sum(P[i, t] * X[i, t], axis=t), name="S")
    t2, u = tc.reduce_axis(6, name="t2"), tc.reduce_axis(3, name="u")
    S2 = tc.compute((4,), lambda i: tc.sum(P[i, t2] * X[i, 2 * u], axis=[t2, u]), name="S2")
    Z = tc.compute((4, 6), lambda i, j: P[i, j] * S[i] + S2[i], name="Z")
    labels = np.array([5, 0, 7, -1])                  # two labels outside [0, 6)
    func = check([Z], [y, h, X], [labels, np.float32(3.0), rng.standard_normal((4, 6))
                                  .astype(np.float32)])
    assert "P" not in temps([Z], [y, h, X])
    text = str(func.body)
    assert "t ==" not in text and "== t" not in text   # no loop over t picks one term


def test_relu_read_inside_matmul_stays_a_buffer():
    X = tc.placeholder((3, 4), name="X")
    W = tc.placeholder((4, 5), name="W")
    R = tc.compute((3, 4), lambda i, k: tc.maximum(X[i, k], 0.0), name="R")
    k = tc.reduce_axis(4, name="k")
    Y = tc.compute((3, 5), lambda i, j: tc.sum(R[i, k] * W[k, j], axis=k), name="Y")
    assert temps([Y], [X, W]) == ["R"]  # the read does not use j: recomputed 5x if inlined


def test_flop_free_transpose_into_matmul_is_inlined(rng):
    X = tc.placeholder((4, 3), name="X")
    W = tc.placeholder((4, 5), name="W")
    T = tc.compute((3, 4), lambda i, k: X[k, i], name="T")
    k = tc.reduce_axis(4, name="k")
    Y = tc.compute((3, 5), lambda i, j: tc.sum(T[i, k] * W[k, j], axis=k), name="Y")
    func = check([Y], [X, W], [rng.standard_normal((4, 3)), rng.standard_normal((4, 5))])
    assert allocs(func, "temp") == []


def test_stage_with_flops_read_twice_stays_a_buffer():
    X = tc.placeholder((4,), name="X")
    A = tc.compute((4,), lambda i: tc.exp(X[i]), name="A")
    B = tc.compute((4,), lambda i: A[i] * A[3 - i], name="B")
    assert temps([B], [X]) == ["A"]
    F1 = tc.compute((4,), lambda i: A[i] + 1.0, name="F1")  # two outputs read it
    F2 = tc.compute((4,), lambda i: A[i] * 2.0, name="F2")
    assert temps([F1, F2], [X]) == ["A"]
    C = tc.compute((4,), lambda i: tc.cast(X[i], "float64"), name="C")  # no flops
    D = tc.compute((4,), lambda i: C[i] * C[i] + C[3 - i], name="D")
    assert temps([D], [X]) == []


def test_stage_read_twice_through_the_same_indices_is_inlined(rng):
    """``s * (1 - s)`` of a sigmoid's gradient: one consumer reads ``s`` twice at the same
    element, so inlining computes it once per element (the code generator shares the
    repeated subexpression), with no buffer."""
    X = tc.placeholder((3, 4), name="X", dtype="float64")
    H = tc.placeholder((3, 4), name="H", dtype="float64")
    S = tc.compute((3, 4), lambda i, j: tc.sigmoid(X[i, j]), name="S")
    G = tc.compute((3, 4), lambda i, j: H[i, j] * (S[i, j] * (1.0 - S[i, j])), name="G")
    func = check([G], [X, H], [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))])
    assert allocs(func, "temp") == []
    kernel = tc.build(G, [X, H])
    x, h = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(kernel(x, h), h * s * (1 - s), rtol=1e-14)


def test_reduction_stage_never_inlined():
    X = tc.placeholder((4, 4), name="X")
    k = tc.reduce_axis(4, name="k")
    S = tc.compute((4,), lambda i: tc.sum(X[i, k], axis=k), name="S")
    Y = tc.compute((4,), lambda i: S[i] + 1.0, name="Y")
    assert temps([Y], [X]) == ["S"]


def test_size_budget_keeps_a_large_stage_read_many_times(rng):
    X = tc.placeholder((12,), name="X")

    def big(i):
        e = X[i]
        for c in range(12):  # a long flop-free chain of selects
            e = tc.if_then_else(X[i] > float(c) / 4.0, e, X[(i + c) % 12])
        return e

    P = tc.compute((12,), big, name="P")
    Y = tc.compute((12,), lambda i: P[i] + P[(i + 1) % 12] + P[(i + 2) % 12] + P[(i + 3) % 12]
                   + P[(i + 5) % 12] + P[(i + 7) % 12], name="Y")
    func = check([Y], [X], [rng.standard_normal(12) * 3])
    assert allocs(func, "temp") == ["P"]
    Z = tc.compute((12,), lambda i: P[i] * 2.0, name="Z")
    assert temps([Z], [X]) == []


def test_inline_stages_reports_bodies_and_inlined_ids():
    X = tc.placeholder((4,), name="X")
    A = tc.compute((4,), lambda i: X[i] + 1.0, name="A")
    B = tc.compute((4,), lambda i: A[i] * 3.0, name="B")
    bodies, inlined = inline_stages([A, B], keep={id(B)})
    assert inlined == {id(A)} and set(bodies) == {id(B)}
    (body,) = bodies[id(B)]
    assert body == (X[B.op.axes[0].var] + 1.0) * 3.0
    assert inline_stages([A, B], keep={id(B)}, budget=1)[1] == set()
    assert INLINE_BUDGET >= 64


# ------------------------------------------------------------------------------ loop order
def _matmul(a_t=False, b_t=False, n=3, kk=4, m=5):
    A = tc.placeholder((kk, n) if a_t else (n, kk), name="A")
    B = tc.placeholder((m, kk) if b_t else (kk, m), name="B")
    k = tc.reduce_axis(kk, name="k")

    def body(i, j):
        a = A[k, i] if a_t else A[i, k]
        b = B[j, k] if b_t else B[k, j]
        return tc.sum(a * b, axis=k)

    C = tc.compute((n, m), body, name="C")
    return C, A, B


def _is_ikj(func) -> bool:
    body = func.body
    if not (isinstance(body, For) and body.kind == "parallel" and isinstance(body.body, Seq)):
        return False
    init, acc = body.body.stmts
    if not (isinstance(init, For) and isinstance(init.body, Store) and init.body.reduce is None
            and isinstance(acc, For) and acc.var.name == "k" and isinstance(acc.body, For)
            and acc.body.var.name == "j"):
        return False
    inner = acc.body.body
    if isinstance(inner, IfThenElse):
        inner = inner.then
    return isinstance(inner, Store) and inner.reduce == "sum"


def test_matmul_in_ikj_order(rng):
    for a_t in (False, True):
        C, A, B = _matmul(a_t=a_t)
        arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)) for t in (A, B)]
        func = check_cpu([C], [A, B], arrays)
        assert _is_ikj(func), a_t


def test_dot_product_inner_keeps_plain_order(rng):
    C, A, B = _matmul(b_t=True)  # A @ B.T: k is unit stride in both reads
    func = check_cpu([C], [A, B], [rng.standard_normal((3, 4)), rng.standard_normal((5, 4))])
    assert not _is_ikj(func)
    assert allocs(func, "local") == ["C_sum"]


def test_vector_matrix_product_reordered_without_parallel(rng):
    A = tc.placeholder((4, 5), name="A")
    x = tc.placeholder((4,), name="x")
    k = tc.reduce_axis(4, name="k")
    y = tc.compute((5,), lambda j: tc.sum(A[k, j] * x[k], axis=k), name="y")
    func = check_cpu([y], [A, x], [rng.standard_normal((4, 5)), rng.standard_normal(4)])
    init, acc = func.body.stmts
    assert acc.var.name == "k" and acc.body.var.name == "j"
    assert all(s.kind == "serial" for s in stmts(func.body) if isinstance(s, For))


def test_reorder_with_where_and_bounds_on_outer_axis(rng):
    A = tc.placeholder((4, 4), name="A")
    B = tc.placeholder((4, 4), name="B")

    def lower_tri(i, j):  # bounds use i (outer): still i-k-j; where keeps a guard
        k = tc.reduce_axis((0, i + 1), name="k")
        return tc.sum(A[i, k] * B[k, j], axis=k, where=tc.ne(k, 2))

    C = tc.compute((4, 4), lower_tri, name="C")
    arrays = [rng.standard_normal((4, 4)), rng.standard_normal((4, 4))]
    func = check_cpu([C], [A, B], arrays)
    assert _is_ikj(func)
    assert any(isinstance(s, IfThenElse) for s in stmts(func.body))
    assert [s.var.name for s in stmts(func.body) if isinstance(s, For)] == ["i", "j", "k", "j"]

    def upper_tri(i, j):  # bounds use j (the inner axis): inverted, k in [0, 4), j in [k, 4)
        k = tc.reduce_axis((0, j + 1), name="k")
        return tc.sum(A[i, k] * B[k, j], axis=k)

    D = tc.compute((4, 4), upper_tri, name="D")
    func = check_cpu([D], [A, B], arrays)
    assert [s.var.name for s in stmts(func.body) if isinstance(s, For)] == ["i", "j", "k", "j"]


def test_reordered_sum_renames_clashing_axis(rng):
    A = tc.placeholder((3, 4), name="A")
    B = tc.placeholder((4, 5), name="B")
    j2 = tc.reduce_axis(4, name="j")  # the reduce axis has the name of the data axis
    C = tc.compute((3, 5), lambda i, jj: tc.sum(A[i, j2] * B[j2, jj], axis=j2), name="C")
    got = run(order_sums(lower([C], [A, B])), [np.ones((3, 4)), np.ones((4, 5))])
    np.testing.assert_array_equal(got[0], np.full((3, 5), 4.0, dtype=np.float32))


def test_coefficient():
    i, j = tc.var("i"), tc.var("j")
    assert coefficient(i * 2 + j - 3, j) == 1
    assert coefficient(i * 2 + j - 3, i) == 2
    assert coefficient(2 * (i - j), j) == -2
    assert coefficient(i * j, j) is None
    assert coefficient(i // 2, i) is None
    assert coefficient(i // 2, j) == 0
