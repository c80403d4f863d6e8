"""A stand-in for ``cuda.bindings.driver`` that follows cuda-python's conventions (every call
returns a tuple ``(CUresult, *values)``) and runs kernels on the CPU emulation.

It lets the driver code of :class:`tecomp.codegen.cuda.runtime.CudaDevice` (initialisation,
primary context, allocation, copies, module loading, argument packing, launches) run on a
machine without a GPU.  ``cuModuleLoadData`` cannot turn a cubin back into source, so the
emulated kernels are found by name among the sources compiled by ``compile_emulated``.
"""

from __future__ import annotations

import ctypes
import enum
from typing import Any

from cuda_emulator import EmulatedDevice


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NOT_SUPPORTED = 801
    CUDA_ERROR_NO_DEVICE = 100


class CUdevice_attribute(enum.IntEnum):  # noqa: N801 - the driver's name
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


class CUpointer_attribute(enum.IntEnum):  # noqa: N801
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


OK = CUresult.CUDA_SUCCESS


class FakeDriver:
    """The subset of the driver API the runtime uses; records every call."""

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUpointer_attribute = CUpointer_attribute

    def __init__(self, *, gpus: int = 1, init_error: BaseException | None = None,
                 async_alloc: bool = True, sms: int = 2) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.async_alloc = async_alloc
        self.sms = sms
        self.emu = EmulatedDevice(block=256, max_blocks=10**9)
        self.calls: list[str] = []
        self.current_ctx = None
        self.syncs = 0
        self.modules: dict[int, bytes] = {}

    def _log(self, name: str) -> None:
        self.calls.append(name)

    def cuGetErrorName(self, err):  # noqa: N802 - the driver's names
        return OK, CUresult(err).name.encode()

    def cuInit(self, flags):  # noqa: N802
        self._log("cuInit")
        if self.init_error is not None:
            raise self.init_error
        return (OK,) if self.gpus else (CUresult.CUDA_ERROR_NO_DEVICE,)

    def cuDeviceGetCount(self):  # noqa: N802
        return OK, self.gpus

    def cuDeviceGet(self, ordinal):  # noqa: N802
        return OK, ordinal

    def cuDeviceGetAttribute(self, attr, dev):  # noqa: N802
        a = CUdevice_attribute
        value = {a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                 a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
                 a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: self.sms}[attr]
        return OK, value

    def cuDeviceGetName(self, size, dev):  # noqa: N802
        return OK, b"Fake GPU" + b"\0" * (size - 8)

    def cuDevicePrimaryCtxRetain(self, dev):  # noqa: N802
        return OK, f"ctx{dev}"

    def cuCtxSetCurrent(self, ctx):  # noqa: N802
        self._log("cuCtxSetCurrent")
        self.current_ctx = ctx
        return (OK,)

    def _need_ctx(self) -> None:
        assert self.current_ctx is not None, "no current context"

    def cuMemAllocAsync(self, nbytes, stream):  # noqa: N802
        self._need_ctx()
        self._log("cuMemAllocAsync")
        if not self.async_alloc:
            return CUresult.CUDA_ERROR_NOT_SUPPORTED, 0
        return OK, self.emu.alloc(nbytes)

    def cuMemAlloc(self, nbytes):  # noqa: N802
        self._need_ctx()
        self._log("cuMemAlloc")
        return OK, self.emu.alloc(nbytes)

    def cuMemFreeAsync(self, ptr, stream):  # noqa: N802
        self._log("cuMemFreeAsync")
        self.emu.free(int(ptr))
        return (OK,)

    def cuMemFree(self, ptr):  # noqa: N802
        self._log("cuMemFree")
        self.emu.free(int(ptr))
        return (OK,)

    def cuMemsetD32Async(self, dst, value, count, stream):  # noqa: N802
        self._need_ctx()
        self._log("cuMemsetD32Async")
        assert stream == 0 and value == 0, "only zeroing on the default stream is emulated"
        ctypes.memset(int(dst), 0, 4 * int(count))
        return (OK,)

    def cuMemcpyHtoD(self, dst, src, nbytes):  # noqa: N802
        self._log("cuMemcpyHtoD")
        ctypes.memmove(int(dst), int(src), int(nbytes))
        return (OK,)

    def cuMemcpyDtoH(self, dst, src, nbytes):  # noqa: N802
        self._log("cuMemcpyDtoH")
        ctypes.memmove(int(dst), int(src), int(nbytes))
        return (OK,)

    def cuModuleLoadData(self, image):  # noqa: N802
        self._need_ctx()
        self._log("cuModuleLoadData")
        handle = len(self.modules) + 1
        self.modules[handle] = ctypes.string_at(int(image), 4)
        assert self.modules[handle] == b"\x7fELF", "not a cubin"
        return OK, handle

    def cuModuleGetFunction(self, module, name):  # noqa: N802
        assert module in self.modules and isinstance(name, bytes)
        return OK, name.decode()

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):  # noqa: N802
        self._need_ctx()
        self._log("cuLaunchKernel")
        assert (gy, gz, by, bz, shmem, stream, extra) == (1, 1, 1, 1, 0, 0, 0)
        assert 1 <= gx < 2**31 and 1 <= bx <= 1024
        self.lookup(fn)(gx, bx, int(params))
        return (OK,)

    def lookup(self, name: str) -> Any:
        from cuda_emulator import _LIBS

        for lib in _LIBS.values():
            f = getattr(lib, f"tc_emu_{name}", None)
            if f is not None:
                f.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
                f.restype = None
                return f
        raise AssertionError(f"kernel {name} was not compiled for the emulation")

    def cuCtxSynchronize(self):  # noqa: N802
        self._log("cuCtxSynchronize")
        self.syncs += 1
        return (OK,)

    def cuPointerGetAttribute(self, attr, ptr):  # noqa: N802
        return OK, 0
