"""DLPack exchange between tecomp's CPU kernels and other array libraries.

A CPU kernel takes and returns NumPy arrays.  NumPy (>= 1.22) imports any host-memory DLPack
producer with ``np.from_dlpack`` -- a view, no copy -- and its arrays are DLPack producers
themselves, so ``torch.from_dlpack(kernel(...))`` is also a view.  :func:`as_numpy` does the
import with clear errors for what cannot be shared (device memory, unsupported dtypes), and
:func:`call_dlpack` runs a kernel on such arrays.  The kernel copies an input only when it is
not C-contiguous (the memory layout the generated loops assume).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError


def as_numpy(x: Any, *, name: str = "array") -> np.ndarray:
    """``x`` as a NumPy array, sharing memory when ``x`` is a host DLPack producer.

    NumPy arrays pass through; objects with ``__dlpack__`` are imported with
    ``np.from_dlpack`` (no copy); anything else goes through ``np.asarray``.  Raises
    :class:`~tecomp.errors.ArgumentError` naming ``name`` when the memory is on a device
    (use ``target="cuda"`` kernels, which accept ``__cuda_array_interface__``), or when the
    producer cannot export it (e.g. a PyTorch tensor that requires grad: detach it first).
    """
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        dev = getattr(x, "__dlpack_device__", None)
        if dev is not None:
            kind = int(dev()[0])
            if kind not in (1, 3):  # kDLCPU, kDLCUDAHost
                raise ArgumentError(
                    f"{name}: its memory is on a device (DLPack device type {kind}); CPU "
                    "kernels need host memory: copy it to the host or build with "
                    "target='cuda'")
        try:
            return np.from_dlpack(x)
        except (RuntimeError, TypeError, BufferError) as err:
            raise ArgumentError(f"{name}: cannot be shared through DLPack ({err})") from None
    return np.asarray(x)


def call_dlpack(kernel: Any, *arrays: Any) -> Any:
    """``kernel(*arrays)`` with each argument imported by :func:`as_numpy` (no copies).

    Integer scalars (values of ``tc.var`` inputs) pass through unchanged.  Returns what the
    kernel returns: NumPy arrays, which any DLPack consumer imports without a copy.
    """
    args = [a if isinstance(a, (int, np.integer)) else as_numpy(a, name=f"argument {n}")
            for n, a in enumerate(arrays)]
    return kernel(*args)
