"""The CUDA backend: CUDA C from the loop IR, compiled with NVRTC or nvcc, launched through the
CUDA driver API.

* the GPU schedule (:mod:`tecomp.passes.schedule.gpu`, run by the pipeline) cuts the loop
  IR, in the plain order lowering emits, into kernels: loops to the grid, atomics, block
  reductions (warp shuffles, shared memory) and shared-memory tiling of contractions;
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
