"""Target schedules: the only place where loop order, tiling, micro-kernels, vector width,
threading and GPU binding are chosen for a target.

* :mod:`.cpu` — the CPU schedule (:func:`~.cpu.schedule_cpu`), applied before LLVM;
* :mod:`.gpu` — the GPU schedule (:func:`~.gpu.schedule_gpu`): kernels, grid mapping,
  atomics and block-level patterns, applied before CUDA C is rendered.
"""
