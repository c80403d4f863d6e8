"""Device memory, module loading and kernel launches through the CUDA driver API
(``cuda.bindings.driver`` of cuda-python).

:class:`Device` is the interface the kernel object runs on: allocate, copy, load a module,
launch.  :class:`CudaDevice` implements it with the driver API on the *primary context* of a
GPU (the context PyTorch, CuPy and Numba use, so their pointers are valid in our kernels).
Without cuda-python, without a driver or without a GPU, :func:`cuda_device` raises
``TecompError("no CUDA device: ...")``: ``cuInit`` raises a ``RuntimeError`` when the driver
library cannot be loaded, which is caught and reported the same way.

All work goes to the legacy default stream (stream 0), which orders it after work other
libraries queued on their default streams.  Device memory is allocated stream-ordered
(``cuMemAllocAsync``/``cuMemFreeAsync``, falling back to ``cuMemAlloc`` and a synchronised
``cuMemFree`` on drivers without memory pools) so freeing it does not wait for the kernels; a
GPU :attr:`~Device.keeps_buffers`: kernels keep their temporaries between calls
(:mod:`.launch_plan`).  A kernel call is one :meth:`~Device.session`: the context is made
current once at its start (other libraries may change the current context between calls, not
during one), not before every driver call.

Arrays: anything exposing ``__cuda_array_interface__`` (CuPy, PyTorch, Numba, and
:class:`DeviceArray`) is used in place (no copy); its data must be C-contiguous.
:class:`DeviceArray` is the small device array tecomp returns when it cannot allocate through
the caller's own library: it exposes ``__cuda_array_interface__`` (version 3), ``shape``,
``dtype`` and ``get()`` (a copy to a NumPy array).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from tecomp.errors import ArgumentError, TecompError

from .render import BLOCK


class Device:
    """What a CUDA kernel needs from a device (the driver, or an emulation in tests)."""

    name = "device"
    arch = "sm_90"

    def alloc(self, nbytes: int) -> int:
        raise NotImplementedError

    def free(self, ptr: int) -> None:
        raise NotImplementedError

    def copy_in(self, ptr: int, host: np.ndarray) -> None:
        raise NotImplementedError

    def copy_out(self, host: np.ndarray, ptr: int) -> None:
        raise NotImplementedError

    def load(self, source: str, names: tuple[str, ...]) -> dict[str, Any]:
        """Compile (cached) and load ``source``; return its kernels by name."""
        raise NotImplementedError

    def launch(self, fn: Any, grid: int, block: int, argv: np.ndarray) -> None:
        """Launch ``fn`` on ``grid`` blocks of ``block`` threads; ``argv`` is a uint64 array of
        pointers to the argument values (``cuLaunchKernel``'s ``kernelParams``)."""
        raise NotImplementedError

    def synchronize(self) -> None:
        pass

    def zero(self, ptr: int, nbytes: int) -> None:
        """Set ``nbytes`` bytes at ``ptr`` to zero, in order with the launches."""
        self.copy_in(ptr, np.zeros(nbytes, dtype=np.uint8))

    def session(self) -> Any:
        """A context manager around one kernel call (a GPU makes its context current once)."""
        return _NO_SESSION

    #: whether kernels keep their temporaries and error records on this device between calls
    keeps_buffers = False

    @property
    def multiprocessors(self) -> int:
        return 132

    def config(self, total: int | None, private: bool) -> tuple[int, int]:
        """(blocks, threads per block) for a grid-stride loop of ``total`` iterations (None:
        unknown).  Enough blocks for a few waves; fewer for kernels ending in one atomic per
        thread, so that the atomics stay few."""
        cap = (4 if private else 32) * max(self.multiprocessors, 1)
        if total is None:
            return cap, BLOCK
        return min(cap, -(-total // BLOCK)), BLOCK


class _NoSession:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SESSION = _NoSession()


# ------------------------------------------------------------------------------ the driver
# Per thread: how many kernel calls are under way (sessions) and the context the last of our
# ``cuCtxSetCurrent`` made current.  Inside a session only tecomp runs on the thread, so that
# context is still current and need not be set again; outside, another library may have
# changed it, so every driver call sets it.
_TLS = threading.local()


class _Session:
    __slots__ = ("dev",)

    def __init__(self, dev: "CudaDevice") -> None:
        self.dev = dev

    def __enter__(self) -> None:
        depth = getattr(_TLS, "depth", 0)
        if not depth:  # what was current before the call is not known
            _TLS.ctx = None
        _TLS.depth = depth + 1
        self.dev.activate()

    def __exit__(self, *exc: Any) -> None:
        _TLS.depth -= 1
        if not _TLS.depth:
            _TLS.ctx = None


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python before 12.6
        except ImportError:
            raise TecompError(
                "no CUDA device: cuda-python is not installed (pip install 'tecomp[cuda]')"
            ) from None
    return driver


def _err_name(cu: Any, err: Any) -> str:
    try:
        res = cu.cuGetErrorName(err)
        name = res[1]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return str(err)


def _check(cu: Any, result: Any, what: str) -> Any:
    """Unpack a cuda-python result tuple ``(err, *values)``; raise on an error."""
    if not isinstance(result, tuple):
        result = (result,)
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise TecompError(f"CUDA error in {what}: {_err_name(cu, err)}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


class CudaDevice(Device):
    """One GPU through the driver API (its primary context)."""

    def __init__(self, ordinal: int = 0) -> None:
        cu = _driver()
        self.cu = cu
        try:
            res = cu.cuInit(0)
        except RuntimeError as err:  # libcuda.so could not be loaded
            raise TecompError(f"no CUDA device: the CUDA driver is not available ({err})") \
                from None
        if res[0] != cu.CUresult.CUDA_SUCCESS:
            raise TecompError(f"no CUDA device: cuInit failed ({_err_name(cu, res[0])})")
        count = _check(cu, cu.cuDeviceGetCount(), "cuDeviceGetCount")
        if not count:
            raise TecompError("no CUDA device: the driver reports no GPU")
        if not 0 <= ordinal < count:
            raise TecompError(f"no CUDA device: ordinal {ordinal} of {count} GPU(s)")
        self.ordinal = ordinal
        self.dev = _check(cu, cu.cuDeviceGet(ordinal), "cuDeviceGet")
        attr = cu.CUdevice_attribute
        major = _check(cu, cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev), "cuDeviceGetAttribute")
        minor = _check(cu, cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev), "cuDeviceGetAttribute")
        self._sms = _check(cu, cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.dev), "cuDeviceGetAttribute")
        self.arch = f"sm_{major}{minor}"
        name = _check(cu, cu.cuDeviceGetName(256, self.dev), "cuDeviceGetName")
        self.name = name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name)
        self.ctx = _check(cu, cu.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        self.device_count = int(count)
        self._modules: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._async_alloc = True
        self._memset_async = getattr(cu, "cuMemsetD32Async", None) is not None
        self._session = _Session(self)
        self._ok = cu.CUresult.CUDA_SUCCESS

    keeps_buffers = True  # stream-ordered reuse: see :mod:`.launch_plan`

    @property
    def multiprocessors(self) -> int:
        return int(self._sms)

    def activate(self) -> None:
        """Make this GPU's context current, unless a session has already done so."""
        if getattr(_TLS, "depth", 0) and getattr(_TLS, "ctx", None) is self.ctx:
            return
        _check(self.cu, self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        _TLS.ctx = self.ctx

    def session(self) -> Any:
        return self._session

    def alloc(self, nbytes: int) -> int:
        self.activate()
        n = max(int(nbytes), 1)
        if self._async_alloc:
            res = self.cu.cuMemAllocAsync(n, 0)
            if res[0] == self.cu.CUresult.CUDA_SUCCESS:
                return int(res[1])
            self._async_alloc = False  # no memory pools on this device/driver
        return int(_check(self.cu, self.cu.cuMemAlloc(n), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        self.activate()
        if self._async_alloc:
            _check(self.cu, self.cu.cuMemFreeAsync(ptr, 0), "cuMemFreeAsync")
        else:
            self.synchronize()
            _check(self.cu, self.cu.cuMemFree(ptr), "cuMemFree")

    def copy_in(self, ptr: int, host: np.ndarray) -> None:
        if host.nbytes:
            self.activate()
            _check(self.cu, self.cu.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes),
                   "cuMemcpyHtoD")

    def copy_out(self, host: np.ndarray, ptr: int) -> None:
        if host.nbytes:
            self.activate()
            _check(self.cu, self.cu.cuMemcpyDtoH(host.ctypes.data, ptr, host.nbytes),
                   "cuMemcpyDtoH")

    def load(self, source: str, names: tuple[str, ...]) -> dict[str, Any]:
        from .compile import compile_cuda

        with self._lock:
            hit = self._modules.get(source)
            if hit is not None:
                return hit[1]
            binary = compile_cuda(source, self.arch)
            self.activate()
            image = np.frombuffer(binary.image, dtype=np.uint8).copy()
            module = _check(self.cu, self.cu.cuModuleLoadData(image.ctypes.data),
                            "cuModuleLoadData")
            fns = {n: _check(self.cu, self.cu.cuModuleGetFunction(module, n.encode()),
                             f"cuModuleGetFunction({n})") for n in names}
            self._modules[source] = (module, fns)
            return fns

    def zero(self, ptr: int, nbytes: int) -> None:
        if self._memset_async and nbytes % 4 == 0:
            self.activate()
            _check(self.cu, self.cu.cuMemsetD32Async(ptr, 0, nbytes // 4, 0),
                   "cuMemsetD32Async")
        else:
            super().zero(ptr, nbytes)

    def launch(self, fn: Any, grid: int, block: int, argv: np.ndarray) -> None:
        self.activate()
        res = self.cu.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, 0,
                                     argv.__array_interface__["data"][0], 0)
        if res[0] != self._ok:
            _check(self.cu, res, "cuLaunchKernel")

    def synchronize(self) -> None:
        self.activate()
        _check(self.cu, self.cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def pointer_ordinal(self, ptr: int) -> int | None:
        """The device ordinal owning ``ptr``, when the driver knows it."""
        cu = self.cu
        try:
            res = cu.cuPointerGetAttribute(
                cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        except Exception:
            return None
        if res[0] != cu.CUresult.CUDA_SUCCESS:
            return None
        return int(res[1])


_DEVICES: dict[int, CudaDevice] = {}
_DEVICES_LOCK = threading.Lock()


def cuda_device(ordinal: int = 0) -> CudaDevice:
    """The :class:`CudaDevice` for GPU ``ordinal`` (made once per process), or
    ``TecompError("no CUDA device: ...")``."""
    with _DEVICES_LOCK:
        dev = _DEVICES.get(ordinal)
        if dev is None:
            dev = _DEVICES[ordinal] = CudaDevice(ordinal)
        return dev


def device_status() -> str:
    """``"ok: <name> (<arch>)"`` or the reason no CUDA device can be used."""
    try:
        dev = cuda_device()
    except TecompError as err:
        return str(err)
    return f"ok: {dev.name} ({dev.arch})"


# ------------------------------------------------------------------------------ arrays
class DeviceArray:
    """A C-contiguous array in device memory, freed when garbage-collected."""

    def __init__(self, device: Device, shape: tuple[int, ...], dtype: Any) -> None:
        self.device = device
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = device.alloc(self.nbytes)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3, "stream": None}

    def get(self) -> np.ndarray:
        """A NumPy copy of the data (waits for the kernels that write it)."""
        out = np.empty(self.shape, dtype=self.dtype)
        self.device.synchronize()
        self.device.copy_out(out, self.ptr)
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.get()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device.name})"

    def __del__(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                self.device.free(ptr)
            except Exception:  # interpreter shutdown or a lost context: nothing to do
                pass


def interface(x: Any) -> dict[str, Any] | None:
    """The ``__cuda_array_interface__`` of ``x``, or None for host objects."""
    if isinstance(x, np.ndarray):
        return None
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception as err:  # e.g. a torch tensor on the CPU raises here
        raise ArgumentError(f"cannot read __cuda_array_interface__ of {type(x).__name__}: "
                            f"{err}") from None
    return cai if isinstance(cai, dict) else None


def device_view(x: Any, label: str, cai: dict[str, Any] | None = None
                ) -> tuple[int, tuple[int, ...], np.dtype]:
    """(pointer, shape, dtype) of a device array; it must be C-contiguous and unmasked.
    ``cai``: its ``__cuda_array_interface__`` when the caller has read it already (reading
    it can cost microseconds, e.g. for PyTorch tensors)."""
    if cai is None:
        cai = interface(x)
    if cai is None:
        raise ArgumentError(f"{label}: not a device array")
    shape = tuple(int(s) for s in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    if cai.get("mask") is not None:
        raise ArgumentError(f"{label}: masked device arrays are not supported")
    strides = cai.get("strides")
    if strides is not None:
        want = []
        acc = dtype.itemsize
        for s in reversed(shape):
            want.append(acc)
            acc *= s
        want.reverse()
        if any(a != b for a, b, n in zip(strides, want, shape) if n > 1):
            raise ArgumentError(f"{label}: the device array must be C-contiguous "
                                f"(strides {tuple(strides)})")
    ptr = int(cai["data"][0] or 0)
    return ptr, shape, dtype


def empty_like_library(proto: Any, shape: tuple[int, ...], dtype: np.dtype,
                       device: Device) -> Any:
    """An uninitialised device array of ``shape``/``dtype`` of the same kind as ``proto``:
    ``torch.empty`` on its device for a PyTorch tensor, ``cupy.empty`` for a CuPy array, a
    :class:`DeviceArray` otherwise."""
    mod = type(proto).__module__.split(".")[0]
    if mod == "torch":
        import torch

        tdt = getattr(torch, np.dtype(dtype).name, None)
        if tdt is not None:
            return torch.empty(shape, dtype=tdt, device=proto.device)
    if mod == "cupy":
        import cupy

        with cupy.cuda.Device(proto.device.id):
            return cupy.empty(shape, dtype=dtype)
    return DeviceArray(device, shape, dtype)
