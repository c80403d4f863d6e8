"""The CUDA runtime without a GPU: the "no CUDA device" errors, device arrays used in place
(``__cuda_array_interface__``), ``out=``, argument errors, the driver code path against a
fake driver, and compilation with nvcc / NVRTC."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_emulator import EmulatedDevice, FakeDeviceArray, compile_emulated, gxx_available
from cuda_programs import lower_elementwise
from fake_driver import FakeDriver

import tecomp as tc
from tecomp.codegen.cuda import runtime
from tecomp.codegen.cuda.compile import (
    BINARIES,
    available_compilers,
    compile_cuda,
    nvcc_path,
    nvrtc_version,
)
from tecomp.codegen.cuda.kernel import CudaKernel
from tecomp.codegen.cuda.runtime import CudaDevice, DeviceArray
from tecomp.errors import ArgumentError, CompileError, TecompError
from tecomp.passes.schedule.gpu import schedule_gpu

n = tc.var("n")
X = tc.placeholder((n, 3), name="X")
Y = tc.placeholder((3,), name="Y")
Z = tc.compute((n, 3), lambda i, j: X[i, j] * Y[j] + 1, name="Z")
Q = tc.compute((n,), lambda i: tc.cast(X[i, 0] > 0, "int32"), name="Q")
KERNEL = CudaKernel(schedule_gpu(lower_elementwise("rt", [Z, Q], [X, Y])), check=False)


def _args(rows=11, seed=0):
    r = np.random.default_rng(seed)
    return [r.standard_normal((rows, 3)).astype(np.float32),
            r.standard_normal(3).astype(np.float32)]


def _want(x, y):
    return tc.evaluate([Z, Q], {X: x, Y: y})


@pytest.fixture(scope="module")
def emulated():
    if not gxx_available():
        pytest.skip("g++ is not available")
    compile_emulated([KERNEL.source])


def _has_gpu() -> bool:
    try:
        runtime.cuda_device()
    except TecompError:
        return False
    return True


# ------------------------------------------------------------------------ no device
@pytest.mark.skipif(_has_gpu(), reason="a GPU is present")
def test_calling_without_a_gpu_says_no_cuda_device():
    with pytest.raises(TecompError, match="^no CUDA device: "):
        KERNEL(*_args())
    assert runtime.device_status().startswith("no CUDA device: ")


def test_missing_driver_library_is_reported(monkeypatch):
    fake = FakeDriver(init_error=RuntimeError("Failed to dlopen libcuda.so.1"))
    monkeypatch.setattr(runtime, "_driver", lambda: fake)
    with pytest.raises(TecompError, match="no CUDA device: the CUDA driver is not available "
                                          r"\(Failed to dlopen libcuda.so.1\)"):
        CudaDevice()


def test_no_gpu_is_reported(monkeypatch):
    monkeypatch.setattr(runtime, "_driver", lambda: FakeDriver(gpus=0))
    with pytest.raises(TecompError, match="no CUDA device: cuInit failed "
                                          r"\(CUDA_ERROR_NO_DEVICE\)"):
        CudaDevice()


def test_missing_cuda_python_is_reported(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_cuda(name, *a, **k):
        if name.startswith("cuda"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_cuda)
    with pytest.raises(TecompError, match=r"no CUDA device: cuda-python is not installed"):
        runtime._driver()


# ------------------------------------------------------------------------ the driver path
@pytest.mark.skipif(not available_compilers(), reason="no CUDA compiler")
@pytest.mark.parametrize("async_alloc", [True, False])
def test_driver_path_with_a_fake_driver(emulated, monkeypatch, async_alloc):
    fake = FakeDriver(async_alloc=async_alloc)
    monkeypatch.setattr(runtime, "_driver", lambda: fake)
    monkeypatch.setattr(runtime, "_DEVICES", {})
    dev = runtime.cuda_device()
    assert (dev.arch, dev.name, dev.multiprocessors) == ("sm_90", "Fake GPU", 2)
    x, y = _args(rows=3000)
    z, q = KERNEL(x, y)  # NumPy in and out: copied both ways
    wz, wq = _want(x, y)
    np.testing.assert_allclose(z, wz, rtol=1e-6)
    np.testing.assert_array_equal(q, wq)
    assert fake.calls.count("cuLaunchKernel") == 2
    assert fake.calls.count("cuModuleLoadData") == 1
    assert fake.calls.count("cuMemcpyHtoD") == 2 and fake.calls.count("cuMemcpyDtoH") == 2
    assert not fake.emu.mem, "device memory leaked"
    KERNEL(x, y)
    assert fake.calls.count("cuModuleLoadData") == 1  # the module is loaded once
    # device arrays in: outputs are DeviceArrays on the same device, nothing copied
    dx = DeviceArray(dev, x.shape, x.dtype)
    dev.copy_in(dx.ptr, x)
    dy = DeviceArray(dev, y.shape, y.dtype)
    dev.copy_in(dy.ptr, y)
    before = fake.calls.count("cuMemcpyHtoD")
    z2, q2 = KERNEL(dx, dy)
    assert isinstance(z2, DeviceArray) and fake.calls.count("cuMemcpyHtoD") == before
    np.testing.assert_allclose(z2.get(), wz, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(q2), wq)
    del dx, dy, z2, q2
    assert not fake.emu.mem


# ------------------------------------------------------------------------ device arrays
def test_device_arrays_are_used_in_place(emulated):
    x, y = _args()
    dev = EmulatedDevice()
    fx, fy = FakeDeviceArray(x), FakeDeviceArray(y)
    z, q = KERNEL.launch([fx, fy], device=dev)
    assert isinstance(z, DeviceArray) and isinstance(q, DeviceArray)
    assert dev.allocated == 2  # the two outputs; inputs were not copied
    assert z.__cuda_array_interface__["shape"] == (11, 3)
    assert z.__cuda_array_interface__["typestr"] == "<f4"
    wz, wq = _want(x, y)
    np.testing.assert_allclose(z.get(), wz, rtol=1e-6)
    np.testing.assert_array_equal(q.get(), wq)
    # out= with device arrays writes in place
    oz, oq = FakeDeviceArray(np.zeros((11, 3), np.float32)), FakeDeviceArray(np.zeros(11, "i4"))
    res = KERNEL.launch([fx, fy], out=(oz, oq), device=dev)
    assert res[0] is oz and res[1] is oq
    np.testing.assert_allclose(oz.a, wz, rtol=1e-6)
    # mixed: a NumPy input is copied, the device one is not; outputs are device arrays
    z3, _ = KERNEL.launch([x, fy], device=dev)
    np.testing.assert_allclose(z3.get(), wz, rtol=1e-6)


def test_numpy_out_is_written(emulated):
    x, y = _args()
    dev = EmulatedDevice()
    oz, oq = np.zeros((11, 3), np.float32), np.zeros(11, np.int32)
    res = KERNEL.launch([x, y], out=[oz, oq], device=dev)
    assert res[0] is oz
    np.testing.assert_allclose(oz, _want(x, y)[0], rtol=1e-6)
    assert not dev.mem


def test_argument_errors(emulated):
    x, y = _args()
    dev = EmulatedDevice()
    with pytest.raises(ArgumentError, match="takes 2 argument"):
        KERNEL.launch([x], device=dev)
    with pytest.raises(ArgumentError, match="tensor 'X'.*dtype float32, got float64"):
        KERNEL.launch([FakeDeviceArray(x.astype(np.float64)), y], device=dev)
    with pytest.raises(ArgumentError, match="tensor 'X'.*2 dimension"):
        KERNEL.launch([FakeDeviceArray(x[:, 0].copy()), y], device=dev)
    with pytest.raises(ArgumentError, match=r"tensor 'Y', axis 0: expected extent 3, got 4"):
        KERNEL.launch([FakeDeviceArray(x), FakeDeviceArray(np.zeros(4, np.float32))],
                      device=dev)
    bad = FakeDeviceArray(x)
    cai = dict(bad.__cuda_array_interface__, strides=(4, 44))
    strided = type("Strided", (), {"__cuda_array_interface__": cai})()
    with pytest.raises(ArgumentError, match="C-contiguous"):
        KERNEL.launch([strided, y], device=dev)
    fx = FakeDeviceArray(x)
    with pytest.raises(ArgumentError, match="overlaps an input"):
        KERNEL.launch([fx, y], out=(fx, FakeDeviceArray(np.zeros(11, "i4"))), device=dev)
    with pytest.raises(ArgumentError, match="mixes NumPy and device"):
        KERNEL.launch([x, y], out=(np.zeros((11, 3), np.float32),
                                   FakeDeviceArray(np.zeros(11, "i4"))), device=dev)
    with pytest.raises(ArgumentError, match="out= for output 'Z': expected shape"):
        KERNEL.launch([x, y], out=(np.zeros((10, 3), np.float32), np.zeros(11, "i4")),
                      device=dev)
    with pytest.raises(ArgumentError, match="expected dtype int32"):
        KERNEL.launch([fx, y], out=(FakeDeviceArray(np.zeros((11, 3), np.float32)),
                                    FakeDeviceArray(np.zeros(11, "i8"))), device=dev)
    assert not dev.mem


# ------------------------------------------------------------------------ compiling
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_nvcc_compile_errors_and_cache():
    with pytest.raises(CompileError, match="nvcc failed for sm_90"):
        compile_cuda("this is not CUDA", "sm_90", compiler="nvcc", cache=None)
    with pytest.raises(CompileError, match="not of the form 'sm_90'"):
        compile_cuda(KERNEL.source, "compute_90", compiler="nvcc")
    hits = BINARIES.hits
    a = compile_cuda(KERNEL.source, "sm_80", compiler="nvcc")
    b = compile_cuda(KERNEL.source, "sm_80", compiler="nvcc")
    assert a is b and BINARIES.hits == hits + 1 and a.compiler == "nvcc"


@pytest.mark.skipif(nvrtc_version() is None, reason="NVRTC (cuda-python) is not available")
def test_nvrtc_compiles_to_a_cubin():
    b = compile_cuda(KERNEL.source, "sm_90", compiler="nvrtc", cache=None)
    assert b.image[:4] == b"\x7fELF" and b.compiler.startswith("nvrtc")
    with pytest.raises(CompileError, match="NVRTC failed"):
        compile_cuda("int x = ;", "sm_90", compiler="nvrtc", cache=None)


def test_build_records_the_compile_check():
    kern = CudaKernel(schedule_gpu(KERNEL.ir))
    if available_compilers():
        assert kern.compile_check.startswith("ok: ") and kern.binary.image[:4] == b"\x7fELF"
    else:
        assert kern.compile_check.startswith("skipped: no CUDA compiler")
    assert kern.target == "cuda" and "extern \"C\" __global__" in kern.source
