"""tc.interop.torch_function as a torch.library custom operator: eager, torch.compile
(Inductor, fullgraph), integer inputs, double backward, errors."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch extra)")


def _swish_dense(dtype="float64"):
    n = tc.var("n")
    X = tc.placeholder((n, 8), name="X", dtype=dtype)
    W = tc.placeholder((3, 8), name="W", dtype=dtype)
    Z = tc.ops.dense(X, W)
    return X, W, tc.compute(Z.shape, lambda i, j: Z[i, j] * tc.sigmoid(Z[i, j]), name="swish")


def _reference(x, w):
    z = x @ w.T
    return z * torch.sigmoid(z)


def _loss(f):
    return lambda x, w: (f(x, w) * torch.cos(x[:, :3])).sum()


def _values_and_grads(fn, x, w):
    x = x.detach().clone().requires_grad_(True)
    w = w.detach().clone().requires_grad_(True)
    out = fn(x, w)
    gx, gw = torch.autograd.grad(out, [x, w])
    return out.detach(), gx, gw


def test_registered_as_a_custom_op_with_fake_and_autograd():
    X, W, Y = _swish_dense()
    f = tc.interop.torch_function(Y, [X, W])
    assert str(f.op._qualname).startswith("tecomp::swish_")
    op = getattr(torch.ops.tecomp, f.op._qualname.split("::")[1])
    x = torch.randn(5, 8, dtype=torch.float64)
    w = torch.randn(3, 8, dtype=torch.float64)
    torch.testing.assert_close(op(x, w), _reference(x, w), rtol=1e-12, atol=1e-12)
    # the fake implementation: shapes from the symbolic shapes, no kernel run
    with torch._subclasses.FakeTensorMode():
        fx, fw = torch.empty(11, 8, dtype=torch.float64), torch.empty(3, 8, dtype=torch.float64)
        assert tuple(f(fx, fw).shape) == (11, 3)
    torch.library.opcheck(f.op, (x, w))  # schema, fake, autograd registration consistent


def test_compile_fullgraph_inductor_equals_eager_and_pytorch():
    X, W, Y = _swish_dense()
    f = tc.interop.torch_function(Y, [X, W])
    compiled = torch.compile(_loss(f), fullgraph=True, backend="inductor", dynamic=True)
    for rows in (6, 9):  # dynamic: the fake implementation sees symbolic sizes
        x = torch.randn(rows, 8, dtype=torch.float64)
        w = torch.randn(3, 8, dtype=torch.float64)
        got = _values_and_grads(compiled, x, w)
        eager = _values_and_grads(_loss(f), x, w)
        ref = _values_and_grads(_loss(_reference), x, w)
        for a, b, c in zip(got, eager, ref):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-10)
    assert f.gradient_kernel is not None


def test_inputs_reach_the_kernel_without_copies(monkeypatch):
    X, W, Y = _swish_dense()
    f = tc.interop.torch_function(Y, [X, W])
    x = torch.randn(4, 8, dtype=torch.float64)
    w = torch.randn(3, 8, dtype=torch.float64)
    seen = []
    kernel = f.forward_kernel
    real = type(kernel).__call__

    def spy(self, *arrays, **kw):
        seen.extend(a.ctypes.data for a in arrays)
        out = real(self, *arrays, **kw)
        seen.append(out.ctypes.data)
        return out

    monkeypatch.setattr(type(kernel), "__call__", spy)
    y = f(x, w)
    assert seen == [x.data_ptr(), w.data_ptr(), y.data_ptr()]


def test_integer_inputs_get_no_gradient_under_compile():
    E = tc.placeholder((10, 4), name="E", dtype="float64")
    idx = tc.placeholder((6,), name="idx", dtype="int64")
    f = tc.interop.torch_function(tc.ops.take(E, idx), [E, idx])
    emb = torch.randn(10, 4, dtype=torch.float64, requires_grad=True)
    ix = torch.tensor([1, 3, 3, 0, 9, 1])
    compiled = torch.compile(lambda e, i: f(e, i).pow(2).sum(), fullgraph=True,
                             backend="aot_eager")
    (g,) = torch.autograd.grad(compiled(emb, ix), [emb])
    ref = emb.detach().clone().requires_grad_(True)
    (gr,) = torch.autograd.grad(ref[ix].pow(2).sum(), [ref])
    torch.testing.assert_close(g, gr, rtol=1e-12, atol=1e-12)
    assert ix.grad is None


def test_double_backward_equals_pytorch():
    X, W, Y = _swish_dense()
    f = tc.interop.torch_function(Y, [X, W])
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(f, (x, w))
    results = []
    for fn in (f, _reference):
        gx, = torch.autograd.grad(_loss(fn)(x, w), [x], create_graph=True)
        results.append(torch.autograd.grad((gx ** 2).sum(), [x, w]))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_cuda_build_exists_and_errors_are_clear():
    X, W, Y = _swish_dense()
    f = tc.interop.torch_function(Y, [X, W])
    cuda = f.program.kernel("cuda")  # building needs no GPU: CUDA C source
    assert "__global__" in cuda.source
    with pytest.raises(tc.ArgumentError, match="takes 2 tensor"):
        f(torch.zeros(5, 8, dtype=torch.float64))
    with pytest.raises(tc.ArgumentError, match="'X' must have dtype float64, got torch.float32"):
        f(torch.zeros(5, 8), torch.zeros(3, 8, dtype=torch.float64))
    with pytest.raises(tc.ArgumentError, match="'W', axis 0: expected extent 3"):
        f(torch.zeros(5, 8, dtype=torch.float64), torch.zeros(4, 8, dtype=torch.float64))
    I = tc.placeholder((3,), name="I", dtype="int64")
    g = tc.interop.torch_function(tc.compute((3,), lambda i: I[i] * 2, name="twice"), [I])
    torch.testing.assert_close(g(torch.arange(3)), torch.arange(3) * 2)


def test_two_layers_of_one_program_are_two_operators():
    X, W, Y = _swish_dense()
    a = tc.interop.torch_function(Y, [X, W])
    b = tc.interop.torch_function(Y, [X, W])
    assert a.op._qualname != b.op._qualname
    x, w = torch.randn(2, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64)
    torch.testing.assert_close(a(x, w), b(x, w))
    assert np.isfinite(a(x, w).numpy()).all()
