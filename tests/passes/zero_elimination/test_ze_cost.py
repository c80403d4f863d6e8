"""Static-cost regression: optimised gradients within 1.5x of hand-counted references."""

import pytest

import tecomp as tc

F = "float64"


def _grad_cost(out, inputs, sizes=None, extra=()):
    return tc.cost(tc.gradient(out, inputs), list(inputs) + list(extra), sizes=sizes)


def test_matmul_gradient_cost():
    n = tc.var("n")
    A, B = tc.placeholder((n, 64), name="A"), tc.placeholder((64, 32), name="B")
    k = tc.reduce_axis(64, name="k")
    C = tc.compute((n, 32), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    c = _grad_cost(C, [A, B], {n: 128})
    hand = 2 * (2 * 128 * 64 * 32)  # dA and dB: one multiply-add per (i, k, j) each
    assert c.flops <= 1.5 * hand, c


def test_shifted_read_about_thirty_accumulations():
    A = tc.placeholder((12,), name="A", dtype=F)
    B = tc.compute((10, 3), lambda i, j: A[i + j], name="B")
    c = _grad_cost(B, [A])
    assert c.iterations <= 1.5 * 30 + 12, c  # 30 contributions (+ the 12 outputs)
    naive = tc.cost(tc.gradient(B, [A], optimize=False), [A], optimize=False)
    assert naive.iterations >= 10 * 30


@pytest.mark.parametrize("pad", [0, 1])
@pytest.mark.parametrize("dil", [1, 2, 3])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_conv2d_gradient_cost(stride, dil, pad):
    X = tc.placeholder((1, 4, 16, 16), name="X", dtype=F)
    W = tc.placeholder((8, 4, 3, 3), name="W", dtype=F)
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dil)
    oh = int(Y.shape[2].value)
    macs = 8 * 4 * 9 * oh * oh  # the forward's multiply-adds
    c = _grad_cost(Y, [X, W])
    # dX and dW each cost about one forward (2 flops a MAC); padding adds copies only
    assert c.flops <= 1.5 * (2 * 2 * macs) + 4 * 18 * 18, (stride, dil, c)


def test_take_gradient_is_linear_in_the_indices():
    E_ = tc.placeholder((1000, 64), name="E", dtype=F)
    idx = tc.placeholder((4096,), name="idx", dtype="int64")
    T = tc.ops.take(E_, idx)
    c = _grad_cost(T, [E_], extra=[idx])
    assert c.iterations <= 1.5 * (4096 * 64 + 1000 * 64), c


def test_masked_kronecker_sparse_matvec_is_compact():
    X = tc.placeholder((128, 4), name="X", dtype=F)
    K = tc.placeholder((128, 128), name="K", dtype=F)

    def body(i, b):
        j = tc.reduce_axis(128, name="j")
        return tc.sum(K[i, j] * X[j, b], axis=j,
                      where=tc.all(tc.eq(i // 32, j // 32), tc.eq(i % 4, j % 4)))

    Y = tc.compute((128, 4), body, name="Y")
    c = tc.cost([Y], [X, K])
    assert c.iterations <= 1.5 * 128 * 8 * 4, c  # n·c per column, not n²
    assert tc.cost([Y], [X, K], optimize=False).iterations == 128 * 128 * 4


@pytest.mark.parametrize("m", [64, 256])
def test_softmax_and_max_gradients_are_linear(m):
    X = tc.placeholder((32, m), name="X", dtype=F)
    S = tc.ops.softmax(X)
    k = tc.reduce_axis(m, name="k")
    M = tc.compute((32,), lambda i: tc.max(X[i, k], axis=k), name="M")
    for out in (S, M):
        c = _grad_cost(out, [X])
        assert c.iterations <= 20 * 32 * m, (out.name, c)  # O(n·m), not O(n·m²)


def test_symbolic_size_gradient_cost():
    n = tc.var("n")
    A = tc.placeholder((n + 2,), name="A", dtype=F)
    B = tc.compute((n, 3), lambda i, j: A[i + j], name="B")
    for size in (8, 64):
        c = _grad_cost(B, [A], {n: size}, extra=[n])
        assert c.iterations <= 1.5 * 3 * size + size + 2, c


def _ratio_to_hand(out, inputs, hand_backward, extra=()):
    """Optimised gradient flops over a hand count (plus the forward, when the gradient
    reads forward values as a hand-written one would)."""
    from tecomp.functor import topo_order

    head = tc.placeholder(out.shape, name="head", dtype=out.dtype)
    grads = tc.gradient(out, list(inputs), head)
    ins = list(inputs) + list(extra) + [head]
    fwd_ids = {id(t) for t in topo_order([out]) if not t.is_placeholder}
    fwd = 0
    if any(id(t) in fwd_ids for t in topo_order(grads)):
        fwd = tc.cost([out], list(inputs) + list(extra)).flops
    return tc.cost(grads, ins).flops / (hand_backward + fwd)


def test_depthwise_pooling_layer_norm_softmax_within_1_5x_of_hand_counts():
    X = tc.placeholder((1, 8, 16, 16), name="X", dtype=F)
    Wd = tc.placeholder((8, 1, 3, 3), name="Wd", dtype=F)
    assert _ratio_to_hand(tc.ops.conv2d(X, Wd, padding=1, groups=8), [X, Wd],
                          4 * 8 * 9 * 256) <= 1.5
    assert _ratio_to_hand(tc.ops.avg_pool2d(X, 2), [X], 8 * 256) <= 1.5
    assert _ratio_to_hand(tc.ops.max_pool2d(X, 2), [X], 8 * 256) <= 1.5  # argmax search
    S = tc.placeholder((32, 128), name="S", dtype=F)
    assert _ratio_to_hand(tc.ops.softmax(S), [S], 5 * 32 * 128) <= 1.5
    assert _ratio_to_hand(tc.ops.layer_norm(S), [S], 10 * 32 * 128) <= 1.5


def test_kron_sparse_gradients_cost_abcd_batch_each():
    pat = (4, 2, 2, 8)
    T = tc.placeholder(pat, name="T", dtype=F)
    Xk = tc.placeholder((4 * 2 * 8, 16), name="Xk", dtype=F)
    Y = tc.ops.kron_sparse_matmul(T, Xk, pat)
    assert _ratio_to_hand(Y, [T, Xk], 2 * 2 * 4 * 2 * 2 * 8 * 16) <= 1.0 + 1e-9
    del Y.attrs["vjp"]  # zero elimination on the body, not the op's declared adjoint
    assert _ratio_to_hand(Y, [T, Xk], 2 * 2 * 4 * 2 * 2 * 8 * 16) <= 1.0 + 1e-9
