"""Compile LLVM IR for the host CPU and load it into the process (ORC LLJIT via llvmlite).

Stages, each reported by name in a :class:`~tecomp.errors.CompileError` when it fails:

* ``verify`` — parse the IR text llvmlite.ir produced and run LLVM's verifier;
* ``optimise`` — the new pass manager at speed level 3 with loop vectorisation, SLP
  vectorisation, unrolling and interleaving, on a target machine that carries the host CPU name
  and features (without them LLVM only uses SSE);
* ``jit`` — the target machine emits an object file and ORC's LLJIT links it against the
  running process (``malloc``/``free`` from libc, ``tanhf``/``erff``/``expf``... from libm,
  which Python has loaded) and returns the function's address.  An unresolved symbol is an
  error here, never a crash.

LLVM's global state in llvmlite is not thread-safe, so every stage runs under one process-wide
lock; calling compiled code needs no lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from ...errors import CompileError

LOCK = threading.RLock()
_state: dict[str, Any] = {}
_library_ids = itertools.count()


def _init() -> dict[str, Any]:
    """Initialise LLVM's native target once; build the target machine and the JIT."""
    if _state:
        return _state
    with LOCK:
        if _state:
            return _state
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        # compiler-runtime helpers LLVM may call (half conversions without F16C, powi)
        lib = ctypes.util.find_library("gcc_s")
        if lib:
            try:
                llvm.load_library_permanently(lib)
            except RuntimeError:  # pragma: no cover - optional
                pass
        cpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
        target = llvm.Target.from_triple(llvm.get_process_triple())
        tm = target.create_target_machine(cpu=cpu, features=features, opt=3,
                                          codemodel="jitdefault")
        _state.update(tm=tm, jit=llvm.create_lljit_compiler(tm),
                      key=f"{tm.triple}|{cpu}|{features}")
    return _state


def target_key() -> str:
    """Identifies the code this process generates (triple, CPU, features): part of cache keys."""
    return _init()["key"]


@dataclass
class JitFunction:
    """A compiled function: its address, the optimised IR and what keeps the code alive."""

    name: str
    address: int
    source: str
    _tracker: Any = field(repr=False, default=None)
    threads: bool = False  # whether the function takes a thread count as its last argument
    object_code: bytes = field(repr=False, default=b"")  # what was linked (for the disk cache)
    #: temporaries the caller passes after the outputs (``emit.pooled_buffers``)
    pooled: tuple = ()


def optimise(module: llvm.ModuleRef, speed_level: int = 3) -> None:
    """Run the O``speed_level`` pipeline with vectorisation on ``module`` in place."""
    st = _init()
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = speed_level >= 2
    pto.slp_vectorization = speed_level >= 2
    pto.loop_unrolling = speed_level >= 2
    pto.loop_interleaving = speed_level >= 2
    pb = llvm.create_pass_builder(st["tm"], pto)
    pb.getModulePassManager().run(module, pb)


def compile_ir(module: ir.Module | str, name: str, *, speed_level: int = 3) -> JitFunction:
    """Verify, optimise and JIT-compile ``module``; return the function called ``name``.

    The optimised module is compiled to an object file (``JitFunction.object_code``) which is
    what the JIT links, so the same bytes can be stored and linked again by
    :func:`load_object` in another process.
    """
    text = str(module)
    with LOCK:
        st = _init()
        try:
            mod = llvm.parse_assembly(text)
            mod.triple = st["tm"].triple
            mod.data_layout = str(st["tm"].target_data)
            mod.verify()
        except RuntimeError as err:
            raise CompileError(f"verify: LLVM rejected the IR of {name!r}: {err}") from None
        try:
            optimise(mod, speed_level)
            mod.verify()
        except RuntimeError as err:
            raise CompileError(f"optimise: {name!r}: {err}") from None
        source = str(mod)
        try:
            obj = st["tm"].emit_object(mod)
        except RuntimeError as err:
            raise CompileError(f"jit: could not generate code for {name!r}: {err}") from None
        out = load_object(obj, name, source)
        return out


def load_object(obj: bytes, name: str, source: str) -> JitFunction:
    """Link the object code ``obj`` (made by :func:`compile_ir` on this machine) into the
    process and return its function ``name``; ``source`` is the optimised IR it came from."""
    with LOCK:
        st = _init()
        lib = f"{name}.{next(_library_ids)}"
        try:
            tracker = (llvm.JITLibraryBuilder().add_object_img(obj).add_current_process()
                       .export_symbol(name).link(st["jit"], lib))
            address = tracker[name]
        except RuntimeError as err:
            raise CompileError(f"jit: could not load {name!r}: {err}") from None
        if not address:
            raise CompileError(f"jit: the function {name!r} has no address")
        out = JitFunction(name, address, source, tracker)
        out.object_code = obj
        return out
