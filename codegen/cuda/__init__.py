"""The CUDA backend: CUDA C from the loop IR, compiled with NVRTC or nvcc, launched through the
CUDA driver API.

* :mod:`.schedule` — stages to kernels, loops to the grid, atomics (:mod:`.reorder` first
  undoes the CPU's loop order of sums); :mod:`.blocks` — block reductions (warp shuffles,
  shared memory) and shared-memory tiling of contractions, where a static rule says they pay;
* :mod:`.render` — the CUDA subclass of the C-style renderer (:mod:`tecomp.codegen.cstyle`),
  with :mod:`.render_blocks` for the block-level schedules;
* :mod:`.compile` — NVRTC / nvcc to a cubin, cached;
* :mod:`.runtime` — device memory, modules and launches through ``cuda.bindings.driver``;
* :mod:`.kernel` — :class:`CudaKernel`, what ``tc.build(..., target="cuda")`` returns.

Nothing here imports cuda-python until a kernel runs, so building works without it.
"""

from .compile import available_compilers, compile_cuda
from .kernel import CudaKernel, build_cuda
from .runtime import DeviceArray, cuda_device, device_status

__all__ = ["CudaKernel", "DeviceArray", "available_compilers", "build_cuda", "compile_cuda",
           "cuda_device", "device_status"]
