"""The CUDA backend on a real GPU (skipped without one): every program of the CPU-emulation
tests against the same references, and device arrays of PyTorch / CuPy used in place."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tecomp.codegen.cuda.runtime import DeviceArray, cuda_device, device_status
from tecomp.errors import ArgumentError

pytestmark = pytest.mark.skipif(not device_status().startswith("ok"),
                                reason="no CUDA device")

# The device contracts ``x * y + 1`` to one fused multiply-add (one rounding where NumPy's
# float32 reference has two), so results near zero differ by up to an ulp of 1.
ATOL = 2.5e-7


def test_expressions_on_gpu():
    import test_cuda_exprs as t

    got = t.KERNEL(*[t.DATA[k] for k in t.PH])
    want = t.tc.evaluate(t.OUTS, {t.PH[k]: t.DATA[k] for k in t.PH})
    results = dict(zip(t.CASES, zip(got, want)))
    for name in t.CASES:
        t.test_expression(results, name)


def test_schedule_programs_on_gpu():
    import test_cuda_schedule as t

    for name, (_, make, ref) in t.PROGRAMS.items():
        args = make(np.random.default_rng(t.SEED))
        got = t.KERNELS[name](*args)
        got = got if isinstance(got, tuple) else (got,)
        want = ref(*args)
        want = want if isinstance(want, tuple) else (want,)
        for g, w, tol in zip(got, want, t.TOL.get(name, [1e-5] * len(want))):
            np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64),
                                       rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("rows", [0, 1, 1000, 70000])
def test_matmul_sizes_on_gpu(rows):
    import test_cuda_schedule as t

    r = np.random.default_rng(rows)
    a, b = r.standard_normal((rows, 16), np.float32), r.standard_normal((16, 8), np.float32)
    np.testing.assert_allclose(t.KERNELS["matmul"](a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_suite_on_gpu():
    import test_cuda_programs as t

    for name, case in t.CASES.items():
        args = case.args(np.random.default_rng(7))
        got = t.KERNELS[name](*args)
        assert t.BENCH.check(case, t.KERNELS[name], args, got) <= 1.0, name


@pytest.mark.parametrize("module", ["test_cuda_block_reduce", "test_cuda_tiling"])
def test_block_schedules_on_gpu(module):
    """Block reductions and tiled contractions (256-thread blocks, real shuffles and
    barriers) against the evaluator."""
    t = importlib.import_module(module)
    for name, p in t.PROGS.items():
        args = p.args(np.random.default_rng(3))
        t.assert_matches(p, args, t.KERNELS[name](*args))


@pytest.mark.parametrize("rows", [1, 1000, 70001])
def test_tiled_and_block_reduced_sizes_on_gpu(rows):
    import test_cuda_block_reduce as b
    import test_cuda_tiling as t

    r = np.random.default_rng(rows)
    a, w = r.standard_normal((rows, 40), np.float32), r.standard_normal((40, 37), np.float32)
    np.testing.assert_allclose(t.KERNELS["matmul_ragged"](a, w), a @ w, rtol=1e-4, atol=1e-4)
    x = r.standard_normal((4, rows * 3), np.float32)
    np.testing.assert_array_equal(b.KERNELS["symbolic_length"](x), x.min(axis=1))



@pytest.mark.parametrize("batch", [None, 4096])
def test_float16_dct_on_gpu(batch):
    """The float16 butterfly DCT (n = 256 and 1024, float16 storage, float accumulation)
    against the float16-storage model and SciPy's float64 DCT; ``batch=4096`` rebuilds the
    chain for a batch large enough to fill the device."""
    import test_cuda_butterfly_f16 as t

    for n, kernel in t.KERNELS.items():
        if batch is not None:
            kernel = t._kernel(n, batch)[0]
        rows = batch or t.SIZES[n]
        x = np.random.default_rng(n).standard_normal((n, rows))
        y = kernel(x.astype(np.float16))
        t.check_dct(x, y)

def test_device_array_round_trip():
    import test_cuda_runtime as t

    dev = cuda_device()
    x, y = t._args(rows=5000)
    dx, dy = DeviceArray(dev, x.shape, x.dtype), DeviceArray(dev, y.shape, y.dtype)
    dev.copy_in(dx.ptr, x)
    dev.copy_in(dy.ptr, y)
    z, q = t.KERNEL(dx, dy)
    assert isinstance(z, DeviceArray)
    wz, wq = t._want(x, y)
    np.testing.assert_allclose(z.get(), wz, rtol=1e-6, atol=ATOL)
    np.testing.assert_array_equal(q.get(), wq)


def test_torch_tensors_zero_copy():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    import test_cuda_runtime as t

    x, y = t._args(rows=777)
    tx, ty = torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda")
    z, q = t.KERNEL(tx, ty)
    assert isinstance(z, torch.Tensor) and z.device == tx.device and q.dtype == torch.int32
    wz, wq = t._want(x, y)
    np.testing.assert_allclose(z.cpu().numpy(), wz, rtol=1e-6, atol=ATOL)
    np.testing.assert_array_equal(q.cpu().numpy(), wq)
    oz, oq = torch.empty_like(z), torch.empty_like(q)
    res = t.KERNEL(tx, ty, out=(oz, oq))
    assert res[0] is oz
    np.testing.assert_allclose(oz.cpu().numpy(), wz, rtol=1e-6, atol=ATOL)
    with pytest.raises(ArgumentError, match="C-contiguous"):
        t.KERNEL(tx.t().contiguous().t(), ty)
    with pytest.raises(ArgumentError, match="dtype float32, got float64"):
        t.KERNEL(tx.double(), ty)


def test_cupy_arrays_zero_copy():
    cupy = pytest.importorskip("cupy")
    import test_cuda_runtime as t

    x, y = t._args(rows=333)
    cx, cy = cupy.asarray(x), cupy.asarray(y)
    z, q = t.KERNEL(cx, cy)
    assert isinstance(z, cupy.ndarray)
    wz, wq = t._want(x, y)
    np.testing.assert_allclose(cupy.asnumpy(z), wz, rtol=1e-6, atol=ATOL)
    np.testing.assert_array_equal(cupy.asnumpy(q), wq)


def test_every_suite_program_on_gpu():
    """The 228 programs of ``test_cuda_suite_programs`` (reverse- and forward-mode tables, nn
    ops, DOF operators, butterfly chains and DCTs, forward and gradient) on the device, against
    ``tc.evaluate``; NVRTC compiles them in parallel first (it releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    import test_cuda_suite_programs as s

    from tecomp.codegen.cuda.compile import compile_cuda

    arch = cuda_device().arch
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: compile_cuda(k.source, arch), s.KERNELS.values()))
    failed = []
    for name, p in s.PROGRAMS.items():
        try:
            s._compare(p, s.KERNELS[name](*p.arrays.values()))
        except AssertionError as err:
            failed.append(f"{name}: {str(err).strip().splitlines()[0:6]}")
    assert not failed, f"{len(failed)} of {len(s.PROGRAMS)} failed:\n" + "\n".join(failed)
