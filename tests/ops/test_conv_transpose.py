"""``tc.ops.conv_transpose2d``: values against a NumPy scatter reference (the definition),
the adjoint identity with ``conv2d``, gradients against finite differences, exact cost, and
its declaration errors."""

import numpy as np
import pytest

import tecomp as tc
from tests.gradcheck import check_gradient


def reference(x, w, stride, padding, output_padding, dilation):
    """The scatter definition: every input pixel adds its weighted kernel to the output."""
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    n, c, h, wd = x.shape
    _, k, r, s = w.shape
    oh = (h - 1) * sh - 2 * ph + dh * (r - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (s - 1) + opw + 1
    y = np.zeros((n, k, oh, ow))
    for iy in range(h):
        for ix in range(wd):
            for ry in range(r):
                for rx in range(s):
                    oy, ox = iy * sh - ph + ry * dh, ix * sw - pw + rx * dw
                    if 0 <= oy < oh and 0 <= ox < ow:
                        y[:, :, oy, ox] += np.einsum("nc,ck->nk", x[:, :, iy, ix], w[:, :, ry, rx])
    return y


CASES = [  # stride, padding, output_padding, dilation, kernel
    ((1, 1), (0, 0), (0, 0), (1, 1), (3, 3)),
    ((2, 2), (1, 1), (1, 1), (1, 1), (3, 3)),
    ((2, 3), (0, 1), (1, 0), (1, 1), (2, 3)),
    ((2, 2), (1, 0), (0, 1), (2, 2), (3, 2)),
    ((3, 1), (2, 0), (2, 0), (1, 2), (4, 3)),
]


@pytest.mark.parametrize("stride,padding,output_padding,dilation,kernel", CASES)
def test_values_match_the_scatter_definition(stride, padding, output_padding, dilation, kernel):
    rng = np.random.default_rng(0)
    X = tc.placeholder((2, 3, 5, 4), name="X", dtype="float64")
    W = tc.placeholder((3, 2, *kernel), name="W", dtype="float64")
    Y = tc.ops.conv_transpose2d(X, W, stride, padding, output_padding, dilation)
    x, w = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((3, 2, *kernel))
    want = reference(x, w, stride, padding, output_padding, dilation)
    assert tuple(int(d.value) for d in Y.shape) == want.shape
    (got,) = tc.evaluate([Y], {X: x, W: w})
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tc.build(Y, [X, W])(x, w), want, rtol=1e-12, atol=1e-12)


def test_symbolic_sizes():
    n, h = tc.var("n"), tc.var("h")
    X = tc.placeholder((n, 2, h, 3), name="X", dtype="float64")
    W = tc.placeholder((2, 3, 3, 3), name="W", dtype="float64")
    kernel = tc.build(tc.ops.conv_transpose2d(X, W, stride=2, padding=1, output_padding=1),
                      [X, W])
    rng = np.random.default_rng(1)
    for shape in ((1, 2, 4, 3), (3, 2, 7, 3)):
        x, w = rng.standard_normal(shape), rng.standard_normal((2, 3, 3, 3))
        want = reference(x, w, (2, 2), (1, 1), (1, 1), (1, 1))
        np.testing.assert_allclose(kernel(x, w), want, rtol=1e-12, atol=1e-12)


def test_adjoint_of_conv2d():
    """<conv2d(u, W), v> == <u, conv_transpose2d(v, W)> for the same stride/padding/dilation."""
    rng = np.random.default_rng(2)
    U = tc.placeholder((2, 3, 9, 8), name="U", dtype="float64")
    V = tc.placeholder((2, 4, 4, 4), name="V", dtype="float64")
    W = tc.placeholder((4, 3, 3, 3), name="W", dtype="float64")
    fwd = tc.ops.conv2d(U, W, stride=2, padding=1)
    assert tuple(int(d.value) for d in fwd.shape) == (2, 4, 5, 4)
    V = tc.placeholder((2, 4, 5, 4), name="V", dtype="float64")
    adj = tc.ops.conv_transpose2d(V, W, stride=2, padding=1, output_padding=(0, 1))
    assert tuple(int(d.value) for d in adj.shape) == (2, 3, 9, 8)
    u, v, w = (rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((2, 4, 5, 4)),
               rng.standard_normal((4, 3, 3, 3)))
    a, b = tc.evaluate([fwd, adj], {U: u, V: v, W: w})
    assert np.isclose(np.sum(a * v), np.sum(u * b), rtol=1e-12)


@pytest.mark.parametrize("stride,padding,output_padding,dilation,kernel", CASES[1:4])
def test_gradients_match_finite_differences(stride, padding, output_padding, dilation, kernel):
    rng = np.random.default_rng(3)
    X = tc.placeholder((1, 2, 4, 3), name="X", dtype="float64")
    W = tc.placeholder((2, 2, *kernel), name="W", dtype="float64")
    Y = tc.ops.conv_transpose2d(X, W, stride, padding, output_padding, dilation)
    arrays = {X: rng.standard_normal((1, 2, 4, 3)), W: rng.standard_normal((2, 2, *kernel))}
    head = rng.standard_normal(tuple(int(d.value) for d in Y.shape))
    check_gradient(Y, [X, W], arrays, head=head, optimize=True)


def test_cost_is_the_forward_convolutions():
    """Zero elimination leaves exactly one multiply-add per (input pixel, tap, channel pair)."""
    X = tc.placeholder((2, 4, 8, 8), name="X")
    W = tc.placeholder((4, 6, 3, 3), name="W")
    Y = tc.ops.conv_transpose2d(X, W, stride=2, padding=1, output_padding=1)
    taps = 0  # taps that land inside the output, counted by brute force
    for iy in range(8):
        for ry in range(3):
            if 0 <= iy * 2 - 1 + ry < 16:
                taps += 1
    pairs = taps * taps  # the same count along x
    assert tc.cost([Y]).flops <= 2 * 2 * 4 * 6 * pairs * 1.01 + 2 * 6 * 16 * 16


@pytest.mark.parametrize("kwargs,message", [
    (dict(stride=0), "stride must be >= 1"),
    (dict(stride=2, output_padding=2), "output_padding"),
    (dict(padding=-1), "padding"),
    (dict(stride=(1, 2, 3)), "stride must be an int or a pair"),
])
def test_declaration_errors(kwargs, message):
    X = tc.placeholder((1, 2, 4, 4), name="X")
    W = tc.placeholder((2, 3, 3, 3), name="W")
    with pytest.raises(tc.DeclarationError, match=message):
        tc.ops.conv_transpose2d(X, W, **kwargs)


def test_channel_mismatch_names_both_tensors():
    X = tc.placeholder((1, 2, 4, 4), name="X")
    W = tc.placeholder((3, 3, 3, 3), name="W")
    with pytest.raises(tc.DeclarationError, match=r"X has 2 channels.*W expects 3"):
        tc.ops.conv_transpose2d(X, W)
