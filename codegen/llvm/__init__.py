"""The LLVM CPU backend: loop IR → LLVM IR (llvmlite.ir) → optimised machine code (ORC JIT).

* :mod:`.types` — dtype ↔ LLVM type mapping and conversions;
* :mod:`.emit_expr` / :mod:`.emit` — expressions and statements to LLVM IR;
* :mod:`.parallel` — ``"parallel"`` loops outlined and run on POSIX threads;
* :mod:`.jit` — target machine, O3 pipeline with vectorisation, JIT.

:func:`compile_function` is the entry point: it returns the compiled function of a
:class:`~tecomp.loopir.LoweredFunc`, from the in-memory cache when the same program was
compiled before.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ...errors import CompileError, TecompError
from ...loopir import LoweredFunc
from ..cache import KERNELS, CompileCache, program_key
from ..kernel import Kernel
from .emit import emit_module, symbol_name
from .jit import LOCK, JitFunction, compile_ir, target_key

__all__ = ["build_kernel", "compile_function", "emit_module", "compile_ir", "JitFunction",
           "target_key", "symbol_name"]


def compile_function(func: LoweredFunc, *, cache: CompileCache | None = KERNELS,
                     speed_level: int = 3, threads: bool = True) -> JitFunction:
    """Compile ``func`` for the host CPU (stages: emit, verify, optimise, jit).

    With ``threads``, top-level ``"parallel"`` loops run on several threads and the function
    takes the thread count as its last argument (``JitFunction.threads``).  Failures raise
    :class:`~tecomp.errors.CompileError` naming the stage.
    """
    def build() -> JitFunction:
        with LOCK:
            try:
                module = emit_module(func, threads=threads)
            except TecompError:
                raise
            except Exception as err:  # llvmlite type errors are bugs of the emitter or the IR
                raise CompileError(
                    f"emit: could not emit LLVM IR for {func.name!r}: "
                    f"{type(err).__name__}: {err}") from err
            out = compile_ir(module, symbol_name(func.name), speed_level=speed_level)
            out.threads = threads
            return out

    if cache is None:
        return build()
    key = program_key(func, f"llvm-O{speed_level}-threads{int(threads)}", target_key())
    return cache.get_or_compile(key, build)


def build_kernel(func: LoweredFunc, *, inputs: Sequence[Any] | None = None,
                 outputs: Sequence[Any] | None = None,
                 hidden: Mapping[Any, np.ndarray] | None = None, single: bool | None = None,
                 cache: CompileCache | None = KERNELS, threads: bool = True) -> Kernel:
    """Compile ``func`` and wrap it in a :class:`~tecomp.codegen.kernel.Kernel`.

    ``inputs``/``outputs`` name what the arguments and results stand for (tensors and
    ``tc.var`` scalars); without them the kernel takes the input buffers, then the parameters
    no buffer shape mentions.  ``hidden`` gives the data of input buffers past those of
    ``inputs`` (constant tensors).
    """
    entry = compile_function(func, cache=cache, threads=threads)
    return Kernel(func, entry, inputs=inputs, outputs=outputs, hidden=hidden, single=single,
                  target="llvm")
