"""Per-op gradient table: every case checked in float64 against central finite differences.

Each case builds a small program and binds its inputs; ``check_gradient`` compares the naive
gradient (``optimize=False``, Delta nodes and all) with finite differences in one random
direction, and for smooth cases that the Taylor remainder shrinks at second order.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc

F = "float64"


def ph(shape, name, dtype=F):
    return tc.placeholder(shape, name=name, dtype=dtype)


def pos(rng, shape):
    return rng.uniform(0.5, 2.0, size=shape)


# ----------------------------------------------------------------------- element-wise
def _unary(fn, positive=False, smooth=True):
    def case(rng):
        A = ph((4, 5), "A")
        Y = tc.compute((4, 5), lambda i, j: fn(A[i, j]), name="Y")
        a = pos(rng, (4, 5)) if positive else rng.standard_normal((4, 5))
        return dict(out=Y, inputs=[A], arrays={A: a}, convergence=smooth, head=True)
    return case


def case_transpose_mix(rng):
    A = ph((6, 6), "A")
    Y = tc.compute((6, 6), lambda i, j: A[i, j] + A[j, i] * A[i, j] - A[j, i], name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((6, 6))}, head=True)


def case_binary_mix(rng):
    A, B = ph((3, 4), "A"), ph((3, 4), "B")
    Y = tc.compute((3, 4), lambda i, j: (A[i, j] - B[i, j]) / (B[i, j] * B[i, j] + 1.0)
                   + -A[i, j] * tc.exp(B[i, j]), name="Y")
    return dict(out=Y, inputs=[A, B], arrays={A: rng.standard_normal((3, 4)),
                                              B: rng.standard_normal((3, 4))}, head=True)


def case_pow_both(rng):
    A, B = ph((3, 4), "A"), ph((3, 4), "B")
    Y = tc.compute((3, 4), lambda i, j: tc.pow(A[i, j], B[i, j]) + A[i, j] ** 3.0, name="Y")
    return dict(out=Y, inputs=[A, B], arrays={A: pos(rng, (3, 4)),
                                              B: rng.standard_normal((3, 4))}, head=True)


def case_mod_float(rng):
    A, B = ph((8,), "A"), ph((8,), "B")
    Y = tc.compute((8,), lambda i: A[i] % B[i] + A[i] // B[i], name="Y")
    return dict(out=Y, inputs=[A, B], arrays={A: rng.uniform(1.1, 5.0, 8),
                                              B: rng.uniform(0.6, 1.0, 8)}, convergence=False)


def case_min_max_elem(rng):
    A, B = ph((10,), "A"), ph((10,), "B")
    Y = tc.compute((10,), lambda i: tc.maximum(A[i], B[i]) * tc.minimum(A[i], tc.sin(B[i])),
                   name="Y")
    return dict(out=Y, inputs=[A, B], arrays={A: rng.standard_normal(10),
                                              B: rng.standard_normal(10)}, convergence=False)


def case_relu(rng):
    A = ph((12,), "A")
    Y = tc.compute((12,), lambda i: tc.maximum(A[i], 0.0) * A[i], name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal(12)}, convergence=False)


def case_floor_ceil(rng):
    A = ph((10,), "A")
    Y = tc.compute((10,), lambda i: tc.floor(A[i]) * A[i] + tc.ceil(A[i] * 2.0), name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.uniform(-3, 3, 10)}, convergence=False)


def case_casts(rng):
    A = ph((10,), "A")
    Y = tc.compute((10,), lambda i: tc.cast(tc.cast(A[i], "float32") * 2.0, F)
                   + tc.cast(tc.cast(A[i] * 3.0, "int64"), F) * A[i], name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.uniform(-3, 3, 10)}, convergence=False,
                step=1e-3, rtol=1e-4)


def case_select(rng):
    A = ph((10,), "A")
    Y = tc.compute((10,), lambda i: tc.if_then_else(A[i] > 0.0, tc.log(A[i] + 1.0) * A[i],
                                                    A[i] * A[i] * A[i]), name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal(10)}, convergence=False)


# ----------------------------------------------------------------------- reductions
def case_sum_products(rng):
    A = ph((10, 10), "A")
    k = tc.reduce_axis(10, "k")
    Y = tc.compute((10,), lambda i: tc.sum(A[i, k] * A[k, i], axis=k), name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((10, 10))}, head=True)


def case_sum_min_index(rng):
    A = ph((10, 10), "A")
    k = tc.reduce_axis(10, "k")
    Y = tc.compute((10, 10), lambda i, j: tc.sum(
        A[k, k] - A[tc.minimum(j + k, 9), j] * A[i, k], axis=k), name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((10, 10))}, head=True)


def case_sum_where(rng):
    A = ph((8, 8), "A")
    k = tc.reduce_axis(8, "k")
    Y = tc.compute((8,), lambda i: tc.sum(A[i, k] * tc.exp(A[k, i]), axis=k, where=k <= i),
                   name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((8, 8))}, head=True)


def case_max_products(rng):
    A = ph((10, 10), "A")
    k = tc.reduce_axis(10, "k")
    Y = tc.compute((10,), lambda i: tc.max(A[i, k] * A[k, i], axis=k), name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((10, 10))},
                convergence=False, head=True)


def case_min_2axes_where(rng):
    A = ph((4, 5, 6), "A")
    k, q = tc.reduce_axis(5, "k"), tc.reduce_axis((1, 6), "q")
    Y = tc.compute((4,), lambda i: tc.min(A[i, k, q] * A[i, k, q - 1], axis=[k, q],
                                          where=k + q > 2), name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((4, 5, 6))},
                convergence=False, head=True)


def case_nested_max(rng):
    A = ph((4, 5), "A")
    k, q = tc.reduce_axis(5, "k"), tc.reduce_axis(5, "q")
    Y = tc.compute((4,), lambda i: tc.sum(A[i, k] * tc.max(A[i, q] * A[i, k], axis=q), axis=k)
                   + tc.exp(tc.max(A[i, q], axis=q)), name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((4, 5))},
                convergence=False, head=True)


def case_nested_max_offset_guard(rng):
    A = ph((3, 4, 4), "A")
    k, q = tc.reduce_axis(4, "k"), tc.reduce_axis((1, 5), "q")
    Y = tc.compute((3,), lambda i: tc.sum(tc.if_then_else(
        q < 4, tc.max(A[i, k, q - 1] * A[i, k, q], axis=k), tc.exp(A[i, 0, q - 1])), axis=q),
        name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((3, 4, 4))},
                convergence=False, head=True)


def case_nested_max_triangular(rng):
    A = ph((4, 5), "A")
    k = tc.reduce_axis(5, "k")

    def body(i):
        q = tc.reduce_axis((0, i + 1), "q")
        return tc.sum(tc.max(A[q, k] * A[i, k], axis=k), axis=q)

    Y = tc.compute((4,), body, name="Y")
    return dict(out=Y, inputs=[A], arrays={A: rng.standard_normal((4, 5))},
                convergence=False, head=True)


def _prod_case(zeros_per_row):
    def case(rng):
        A = ph((3, 5), "A")
        k = tc.reduce_axis(5, "k")
        Y = tc.compute((3,), lambda i: tc.prod(A[i, k] * 2.0 + A[i, 0] * 0.0, axis=k), name="Y")
        a = rng.uniform(0.5, 1.5, (3, 5)) * rng.choice([-1, 1], (3, 5))
        for r in range(3):
            a[r, rng.choice(5, size=zeros_per_row, replace=False)] = 0.0
        # exactly zero gradients with two zeros: the O(h^2) truncation error sets the scale
        return dict(out=Y, inputs=[A], arrays={A: a}, head=True, convergence=False, atol=1e-7)
    return case


def case_nested_prod(rng):
    A = ph((3, 4), "A")
    k, q = tc.reduce_axis(3, "k"), tc.reduce_axis(4, "q")
    Y = tc.compute((3,), lambda i: tc.sum(tc.prod(A[i, q] + A[k, 0], axis=q), axis=[k]),
                   name="Y")
    a = rng.standard_normal((3, 4))
    a[:, 2] = -a[0, 0]  # a zero factor where k = 0 (then q = 2 is zero)
    return dict(out=Y, inputs=[A], arrays={A: a}, head=True, convergence=False)


# ----------------------------------------------------------------------- index patterns
def case_reversal(rng):
    X = ph((10,), "X")
    Y = tc.compute((10,), lambda i: X[i] * X[9 - i], name="Y")
    return dict(out=Y, inputs=[X], arrays={X: rng.standard_normal(10)}, head=True)


def case_diag(rng):
    X = ph((6, 6), "X")
    Y = tc.compute((6,), lambda i: X[i, i], name="Y")  # einsum ii->i
    return dict(out=Y, inputs=[X], arrays={X: rng.standard_normal((6, 6))}, head=True)


def case_shift(rng):
    A = ph((12,), "A")
    B = tc.compute((10, 3), lambda i, j: A[i + j], name="B")
    return dict(out=B, inputs=[A], arrays={A: rng.standard_normal(12)}, head=True)


def case_stride2(rng):
    X = ph((11,), "X")
    Y = tc.compute((6,), lambda i: X[2 * i] * X[2 * i], name="Y")
    return dict(out=Y, inputs=[X], arrays={X: rng.standard_normal(11)}, head=True)


def case_div_mod_index(rng):
    X = ph((4, 5), "X")
    Y = tc.compute((20,), lambda i: X[i // 5, i % 5] * tc.cast(i, F), name="Y")
    return dict(out=Y, inputs=[X], arrays={X: rng.standard_normal((4, 5))}, head=True)


def case_reshape(rng):
    X = ph((3, 4), "X")
    Y = tc.compute((2, 6), lambda i, j: tc.tanh(X[(i * 6 + j) // 4, (i * 6 + j) % 4]),
                   name="Y")
    return dict(out=Y, inputs=[X], arrays={X: rng.standard_normal((3, 4))}, head=True)


def case_concat(rng):
    A, B = ph((4,), "A"), ph((3,), "B")
    Y = tc.compute((7,), lambda i: tc.if_then_else(i < 4, A[i] * A[i], tc.exp(B[i - 4])),
                   name="Y")
    return dict(out=Y, inputs=[A, B], arrays={A: rng.standard_normal(4),
                                              B: rng.standard_normal(3)}, head=True)


def case_split(rng):
    X = ph((7,), "X")
    Y1 = tc.compute((4,), lambda i: X[i], name="Y1")
    Y2 = tc.compute((3,), lambda i: X[i + 4], name="Y2")
    r1, r2 = tc.reduce_axis(4, "r1"), tc.reduce_axis(3, "r2")
    L = tc.compute((), lambda: tc.sum(Y1[r1] * Y1[r1], axis=r1) + tc.sum(tc.sin(Y2[r2]), axis=r2),
                   name="L")
    return dict(out=L, inputs=[X], arrays={X: rng.standard_normal(7)})


def case_take_duplicates(rng):
    E = ph((10, 4), "E")
    idx = ph((100,), "idx", "int64")
    Y = tc.compute((100, 4), lambda i, j: E[idx[i], j], name="Y")
    return dict(out=Y, inputs=[E], arrays={E: rng.standard_normal((10, 4)),
                                           idx: rng.integers(0, 10, 100)}, head=True)


def case_take_flat_seed(rng):
    m, n = 40, 50
    data = ph((m, n), "data")
    indices = ph((1,), "indices", "int32")
    Y = tc.compute((1,), lambda i: data[indices[i] // n, indices[i] % n], name="take")
    return dict(out=Y, inputs=[data], arrays={data: rng.standard_normal((m, n)),
                                              indices: np.array([1234], dtype=np.int32)},
                head_value=2.0)


def case_broadcast_symbolic(rng):
    m, n = tc.var("m"), tc.var("n")
    d1, d2 = ph((m, n), "data1"), ph((n,), "data2")
    Y = tc.compute((m, n), lambda i, j: d1[i, j] + d2[j], name="out")
    return dict(out=Y, inputs=[d1, d2], arrays={d1: rng.standard_normal((3, 4)),
                                                d2: rng.standard_normal(4)}, head_value=2.0)


def case_dense(rng):
    X, W, b = ph((3, 5), "X"), ph((4, 5), "W"), ph((4,), "b")
    k = tc.reduce_axis(5, "k")
    Y = tc.compute((3, 4), lambda i, o: tc.sum(X[i, k] * W[o, k], axis=k) + b[o], name="dense")
    return dict(out=Y, inputs=[X, W, b], head=True,
                arrays={X: rng.standard_normal((3, 5)), W: rng.standard_normal((4, 5)),
                        b: rng.standard_normal(4)})


# ----------------------------------------------------------------------- networks
def _conv_case(stride, dilation, kernel, padding=0):
    def case(rng):
        from ad_nets import conv2d

        X, W = ph((1, 2, 7, 7), "X"), ph((2, 2, kernel, kernel), "W")
        Y = conv2d(X, W, stride, dilation, padding)
        return dict(out=Y, inputs=[X, W], head=True,
                    arrays={X: rng.standard_normal((1, 2, 7, 7)),
                            W: rng.standard_normal((2, 2, kernel, kernel))})
    return case


def case_depthwise(rng):
    from ad_nets import depthwise

    X, W = ph((1, 3, 6, 6), "X"), ph((3, 2, 2), "W")
    Y = depthwise(X, W, stride=2, dilation=2)
    return dict(out=Y, inputs=[X, W], head=True, arrays={
        X: rng.standard_normal((1, 3, 6, 6)), W: rng.standard_normal((3, 2, 2))})


def _pool_case(kind):
    def case(rng):
        from ad_nets import pool

        X = ph((1, 2, 7, 7), "X")
        Y = pool(X, 2, 2, 2, kind)
        return dict(out=Y, inputs=[X], head=True, convergence=kind != "max",
                    arrays={X: rng.standard_normal((1, 2, 7, 7))})
    return case


def _softmax_case(log):
    def case(rng):
        from ad_nets import softmax_stages

        X = ph((3, 5), "X")
        return dict(out=softmax_stages(X, log), inputs=[X], head=True,
                    arrays={X: rng.standard_normal((3, 5))})
    return case


CASES = {
    "exp": _unary(tc.exp), "log": _unary(tc.log, positive=True),
    "sigmoid": _unary(tc.sigmoid), "tanh": _unary(tc.tanh),
    "sqrt": _unary(tc.sqrt, positive=True), "sin": _unary(tc.sin), "cos": _unary(tc.cos),
    "abs": _unary(tc.abs, smooth=False), "erf": _unary(tc.erf),
    "neg_square": _unary(lambda x: -(x * x)),
    "transpose_mix": case_transpose_mix, "binary_mix": case_binary_mix,
    "pow_both": case_pow_both, "mod_float": case_mod_float, "min_max": case_min_max_elem,
    "relu": case_relu, "floor_ceil": case_floor_ceil, "casts": case_casts,
    "select": case_select,
    "sum_products": case_sum_products, "sum_min_index": case_sum_min_index,
    "sum_where": case_sum_where, "max_products": case_max_products,
    "min_2axes_where": case_min_2axes_where, "nested_max": case_nested_max,
    "nested_max_offset_guard": case_nested_max_offset_guard,
    "nested_max_triangular": case_nested_max_triangular,
    "prod_0_zeros": _prod_case(0), "prod_1_zero": _prod_case(1),
    "prod_2_zeros": _prod_case(2), "nested_prod": case_nested_prod,
    "reversal": case_reversal, "diag_ii_i": case_diag, "shift_i_plus_j": case_shift,
    "stride_2i": case_stride2, "div_mod_index": case_div_mod_index, "reshape": case_reshape,
    "concat": case_concat, "split": case_split, "take_duplicates": case_take_duplicates,
    "take_seed": case_take_flat_seed, "broadcast_symbolic": case_broadcast_symbolic,
    "dense": case_dense, "depthwise": case_depthwise,
    "maxpool_dilated": _pool_case("max"), "avgpool_dilated": _pool_case("avg"),
    "softmax": _softmax_case(False), "log_softmax": _softmax_case(True),
    "conv_padded": _conv_case(1, 1, 3, padding=1),
}
for _s in (1, 2, 3):
    for _d in (1, 2, 3):
        for _k in (1, 2, 3):
            CASES[f"conv2d_s{_s}_d{_d}_k{_k}"] = _conv_case(_s, _d, _k)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, rng):
    c = CASES[name](rng)
    out = c["out"]
    head = None
    if c.get("head"):
        (y,) = tc.evaluate(out, c["arrays"])
        head = rng.standard_normal(np.shape(y))
    elif "head_value" in c:
        (y,) = tc.evaluate(out, c["arrays"])
        head = np.full(np.shape(y), c["head_value"])
    check_gradient(out, c["inputs"], c["arrays"], head=head, seed=int(rng.integers(1 << 30)),
                   convergence=c.get("convergence", True), rtol=c.get("rtol", 1e-6),
                   step=c.get("step", 1e-5), atol=c.get("atol", 1e-9))
