"""The float16 butterfly DCT (``tc.ops.dct`` of a float16 batch) on the CUDA backend.

Every stage of the chain stores float16 (``__half``) and computes its ``c`` products and their
sum in float: loads go through ``__half2float``, the one store of a stage through
``__float2half`` (round to nearest even), and nothing is rounded to half in between.  The
generated sources compile with nvcc (one call) and run on the CPU emulation (one g++ call),
where they are checked three ways:

1. against a NumPy model of exactly that arithmetic (float16 input and factors, each stage's
   sum exact and then rounded to float16): almost every element bit-identical (a float32 sum
   may round a near tie the other way; a float16 accumulation would differ almost everywhere);
2. against SciPy's float64 DCT: the relative error ``||y - y_ref||_F / ||y_ref||_F`` is at
   most ``(2 L + 1) u`` with ``u = 2^-11`` (float16 unit roundoff) and ``L = log2 n``: one
   rounding of the input, at most ``L`` stored stages (fusing only removes stores) and at most
   ``L`` factors rounded entry-wise, each a relative perturbation of size ``u`` of a partial
   product that is a scaled orthogonal map, so it reaches the output with the same relative
   size (first order);
3. against the CPU float16 path (LLVM backend, every float16 operation rounded as NumPy does):
   accumulating in float is not less accurate (measured at n = 1024, batch 64: 5.4e-4 against
   1.1e-3 in that norm; as max error / max |y|: 6.4e-4 against 1.5e-3).

``KERNELS`` and :func:`check_dct` are reused by the GPU tests (``test_cuda_gpu.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.fft as sfft
from cuda_emulator import EmulatedDevice, emulated_fixture

import tecomp as tc
from tecomp.codegen.cuda.compile import compile_many_nvcc, nvcc_path
from tecomp.codegen.cuda.kernel import CudaKernel
from tecomp.ops.butterfly_factors import apply_kron_sparse, real_butterfly
from tecomp.ops.butterfly_fuse import auto_grouping, fuse_chain
from tecomp.passes.schedule.gpu import schedule_gpu

U16 = 2.0 ** -11  # float16 unit roundoff
SIZES = {256: 16, 1024: 64}  # n -> batch


def _kernel(n: int, batch: int) -> tuple[CudaKernel, tc.Tensor, tc.Tensor, int]:
    X = tc.placeholder((n, batch), name="X", dtype="float16")
    Y = tc.ops.dct(X, "dct2", name=f"dct{n}_f16")
    low = tc.lower([Y], [X], name=f"dct{n}_f16")
    kernel = CudaKernel(schedule_gpu(low.func), inputs=[X], outputs=[Y], hidden=low.constants,
                        check=False)
    return kernel, X, Y, len(low.constants)


BUILT = {n: _kernel(n, b) for n, b in SIZES.items()}
KERNELS = {n: k for n, (k, *_) in BUILT.items()}


def model(x16: np.ndarray) -> np.ndarray:
    """The DCT-II as the CUDA kernels compute it: the chain of ``tc.ops.dct`` (same factors,
    same fusion) on float16 values, each stage summed exactly and rounded to float16."""
    n = x16.shape[0]
    perm, patterns, factors, _ = real_butterfly(n, "dct2")
    _, factors = fuse_chain(patterns, factors, auto_grouping(patterns, fewer_passes=n >= 1024))
    y = x16[perm]
    for T in reversed(factors):
        T16 = np.asarray(T, np.float64).astype(np.float16).astype(np.float64)
        y = apply_kron_sparse(T16, y.astype(np.float64)).astype(np.float16)
    return y


def rel_error(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref))


def check_dct(x: np.ndarray, y: np.ndarray) -> float:
    """Assert checks 1 and 2 of the module docstring for input ``x`` (float64) and the kernel's
    result ``y``; returns the relative error against SciPy."""
    n = x.shape[0]
    x16 = x.astype(np.float16)
    assert y.dtype == np.float16 and y.shape == x.shape
    want = model(x16)
    diff = np.abs(y.astype(np.float64) - want.astype(np.float64))
    scale = float(np.max(np.abs(want.astype(np.float64))))
    assert np.mean(diff == 0) >= 0.99, np.mean(diff == 0)
    assert diff.max() <= 4 * U16 * scale, diff.max() / scale
    ref = sfft.dct(x, 2, norm="ortho", axis=0)
    err = rel_error(y, ref)
    assert err <= (2 * math.log2(n) + 1) * U16, err
    return err


emulated = emulated_fixture(KERNELS)


@pytest.mark.parametrize("n", list(SIZES))
def test_half_storage_float_accumulation(n):
    """Buffers are ``__half``; every stage loads through ``__half2float``, sums in float and
    rounds once, at its store: no half arithmetic, no rounding inside a sum."""
    src = KERNELS[n].source
    assert "#include <cuda_fp16.h>" in src
    for name in ("__hadd", "__hmul", "__hfma", "__hsub", "half2 "):
        assert name not in src
    assert "__half2float(__float2half(" not in src  # no intermediate rounding to half
    kernels = src.split('extern "C" __global__')[1:]
    assert len(kernels) == len(KERNELS[n].program.stages) >= 2
    for body in kernels:
        params = body[:body.index("{")]
        assert "float*" not in params and "double" not in params  # all buffers __half
        assert body.count("__float2half(") == 1  # one store per stage
        if body.count("__half2float(") == 1:  # the staged last factor copied into row order
            assert "_staged" in params and "_T" not in params
        else:
            assert body.count("__half2float(") >= 2  # factor and input loads, converted
        assert "__half " not in body[body.index("{"):]  # no half-typed locals


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_compiles_with_nvcc():
    bins = compile_many_nvcc([k.source for k in KERNELS.values()], "sm_90")
    assert all(b.image[:4] == b"\x7fELF" for b in bins)


@pytest.mark.parametrize("n", list(SIZES))
def test_emulated_dct_float16(emulated, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, SIZES[n]))
    dev = EmulatedDevice()
    y = KERNELS[n].launch([x.astype(np.float16)], device=dev)
    err = check_dct(x, y)
    _, X, Y, n_constants = BUILT[n]
    assert len(dev.mem) == n_constants  # the factors stay on the device, nothing else
    cpu16 = tc.build(Y, [X])(x.astype(np.float16))  # float16 arithmetic, rounded per operation
    assert err <= rel_error(cpu16, sfft.dct(x, 2, norm="ortho", axis=0))
