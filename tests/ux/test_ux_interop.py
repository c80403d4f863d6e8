"""DLPack exchange and the PyTorch wrapper's basic use (those tests skipped without PyTorch)."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp.interop import as_numpy, call_dlpack


def _dense_tanh(dtype="float64"):
    n = tc.var("n")
    X = tc.placeholder((n, 8), name="X", dtype=dtype)
    W = tc.placeholder((3, 8), name="W", dtype=dtype)
    Z = tc.compute((n, 3), lambda i, j: tc.tanh(tc.ops.dense(X, W)[i, j]), name="Z")
    return X, W, Z


def test_as_numpy_passes_numpy_through_and_shares_dlpack_memory(rng):
    a = rng.standard_normal((3, 4))
    assert as_numpy(a) is a

    class Producer:  # a minimal DLPack producer
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    b = as_numpy(Producer(a))
    assert np.shares_memory(a, b)
    assert as_numpy([[1.0, 2.0]]).shape == (1, 2)


def test_as_numpy_rejects_device_memory():
    class OnDevice:
        def __dlpack__(self, **kw):
            raise AssertionError("must not be exported")

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    with pytest.raises(tc.ArgumentError, match="weights.*device"):
        as_numpy(OnDevice(), name="weights")


def test_call_dlpack_runs_a_kernel(rng):
    X, W, Z = _dense_tanh()
    k = tc.build(Z, [X, W])
    x, w = rng.standard_normal((5, 8)), rng.standard_normal((3, 8))
    np.testing.assert_allclose(call_dlpack(k, x, w), np.tanh(x @ w.T), rtol=1e-12)


def test_torch_function_forward_backward_and_gradcheck():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch extra)")
    X, W, Z = _dense_tanh()
    f = tc.interop.torch_function(Z, [X, W])
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    z = f(x, w)
    assert isinstance(z, torch.Tensor) and z.shape == (5, 3)
    torch.testing.assert_close(z, torch.tanh(x @ w.T))
    assert torch.autograd.gradcheck(f, (x, w))
    assert f.gradient_kernel is not None


def test_torch_function_in_a_model_with_int_indices():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch extra)")
    E = tc.placeholder((10, 4), name="E")
    idx = tc.placeholder((6,), name="idx", dtype="int64")
    T = tc.ops.take(E, idx)
    f = tc.interop.torch_function(T, [E, idx])
    emb = torch.nn.Parameter(torch.randn(10, 4))
    ix = torch.tensor([1, 3, 3, 0, 9, 1])
    lin = torch.nn.Linear(4, 1)
    loss = lin(f(emb, ix)).pow(2).sum()
    loss.backward()
    ref_emb = emb.detach().clone().requires_grad_(True)
    lin(ref_emb[ix]).pow(2).sum().backward()
    torch.testing.assert_close(emb.grad, ref_emb.grad)


def test_torch_function_errors():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch extra)")
    X, W, Z = _dense_tanh()
    f = tc.interop.torch_function(Z, [X, W])
    with pytest.raises(tc.ArgumentError, match="takes 2 tensor"):
        f(torch.zeros(5, 8, dtype=torch.float64))
    with pytest.raises(tc.ArgumentError, match="'X'"):
        f(torch.zeros(5, 8, dtype=torch.float32), torch.zeros(3, 8, dtype=torch.float64))
    with pytest.raises(tc.TecompError, match="placeholders"):
        tc.interop.torch_function(Z, [Z])
