"""The CUDA :class:`~tecomp.codegen.target.Target`: the GPU schedule (supplied by the
pipeline) cuts the program into kernels, :class:`~.kernel.CudaKernel` renders and compiles
them.  Scheduled programs are remembered under :meth:`~tecomp.codegen.target.Target.key` (the
same key as the LLVM target's: the program, options, description and version), so building a
program again skips the schedule; compiled binaries are remembered by their source
(:mod:`.compile`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tecomp.gpuir import GpuProgram
from tecomp.loopir import LoweredFunc

from ..cache import CompileCache
from ..target import Schedule, Target, package_folder, source_digest
from .compile import DEFAULT_ARCH
from .kernel import CudaKernel

#: scheduled programs by key (small: a program is a few loop nests)
PROGRAMS: CompileCache[GpuProgram] = CompileCache(256)


class CudaTarget(Target):
    """CUDA C for NVIDIA GPUs; ``check`` compiles the source at build time."""

    name = "cuda"

    def __init__(self, schedule: Schedule | None = None, *, check: bool = True) -> None:
        super().__init__(schedule)
        self.check = check

    def description(self) -> str:
        return f"cuda-{DEFAULT_ARCH}"

    def codegen_version(self) -> str:
        return source_digest(package_folder(__file__))

    def build(self, func: LoweredFunc, *, inputs: Sequence[Any] | None = None,
              outputs: Sequence[Any] | None = None,
              hidden: Mapping[Any, np.ndarray] | None = None, single: bool | None = None,
              bounds: Any = None) -> CudaKernel:
        records = frozenset() if bounds is None else frozenset((bounds.error,))
        key = self.key(func, *sorted(b.name for b in records))
        program = PROGRAMS.get_or_compile(
            key, lambda: self.schedule.run(func, records=records))
        return CudaKernel(program, inputs=inputs, outputs=outputs, hidden=hidden,
                          single=single, check=self.check, bounds=bounds, ir=func)
