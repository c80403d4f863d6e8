"""The LLVM CPU backend: loop IR → LLVM IR (llvmlite.ir) → optimised machine code (ORC JIT).

* :mod:`.types` — dtype ↔ LLVM type mapping and conversions;
* :mod:`.emit_expr` / :mod:`.emit` — expressions and statements to LLVM IR;
* :mod:`.vmath` — inline, vectorisable exp/log/tanh/sigmoid/softplus/erf;
* :mod:`.parallel` / :mod:`.runtime` — ``"parallel"`` loops outlined and run on POSIX threads;
  :mod:`.runtime_code` — the runtime's object code, cached, compiled ahead, linked once;
* :mod:`.jit` — target machine, O3 pipeline with vectorisation, JIT.

:class:`LlvmTarget` is the :class:`~tecomp.codegen.target.Target` of this backend and
:func:`compile_function` its compiler: it returns the compiled function of a
:class:`~tecomp.loopir.LoweredFunc`, from the in-memory cache when the same program was
compiled before, else from the persistent cache on disk (:mod:`tecomp.codegen.disk_cache`);
only when neither has it does the program get scheduled (the CPU schedule the pipeline
supplies) and compiled.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Mapping, Sequence

import numpy as np

from ... import expr as E
from ...errors import CompileError, TecompError
from ...host import Host, describe
from ...logs import timed
from ...loopir import Buffer, LoweredFunc
from ..cache import KERNELS, CompileCache
from ..disk_cache import DiskCache, default_cache
from ..kernel import Kernel
from ..target import Schedule, Target
from .jit import (
    LOCK,
    JitFunction,
    binding,
    code_version,
    compile_ir,
    compile_object,
    disk_key,
    load_object,
    store_code,
    stored_source,
    target_key,
)
from .layout import pooled_buffers, symbol_name
from .runtime_code import runtime_ahead

_USE_DEFAULT: Any = object()

#: a kernel's own module compiles without optimisation when it holds no loops (every loop
#: outlined into a body: ``emit.OUTLINE_SERIAL``): LLVM's O3 pipeline and code generator took
#: 50-100 ms on the glue of the larger gradients (the transformer block's: 96 ms, 14 ms
#: unoptimised), on the building thread after the bodies were emitted (an A/B switch)
GLUE_UNOPTIMISED = True


def __getattr__(name: str) -> Any:
    if name == "emit_module":  # imported when first asked for (see compile_function)
        from .emit import emit_module

        return emit_module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["LlvmTarget", "build_kernel", "compile_function", "emit_module", "compile_ir",
           "JitFunction", "target_key", "symbol_name", "load_object", "disk_key", "code_version"]


class LlvmTarget(Target):
    """The host CPU through LLVM: ``schedule`` (from the pipeline: the CPU schedule) runs on
    a program not found in the caches, before LLVM IR is emitted."""

    name = "llvm"

    def __init__(self, schedule: Schedule | None = None, *, speed_level: int = 3,
                 threads: bool = True, host: Host | None = None) -> None:
        super().__init__(schedule)
        self.speed_level = speed_level
        self.threads = threads
        self.host = host  # None: this machine (tecomp.host.describe)

    def description(self) -> str:
        return target_key(self.host)

    def codegen_version(self) -> str:
        return code_version()

    def preparing(self) -> ContextManager[None]:
        # the parallel-loop runtime, read or compiled while the program is lowered
        return runtime_ahead() if self.threads else nullcontext()

    def options(self) -> str:
        return f"O{self.speed_level}-threads{int(self.threads)}"

    def build(self, func: LoweredFunc, *, inputs: Sequence[Any] | None = None,
              outputs: Sequence[Any] | None = None,
              hidden: Mapping[Any, np.ndarray] | None = None, single: bool | None = None,
              bounds: Any = None) -> Kernel:
        entry = compile_function(func, threads=self.threads, speed_level=self.speed_level,
                                 schedule=self.schedule, host=self.host)
        return Kernel(func, entry, inputs=inputs, outputs=outputs, hidden=hidden,
                      single=single, target="llvm", bounds=bounds)


def compile_function(func: LoweredFunc, *, cache: CompileCache | None = KERNELS,
                     speed_level: int = 3, threads: bool = True,
                     disk: DiskCache | None = _USE_DEFAULT,
                     schedule: Schedule | None = None,
                     host: Host | None = None) -> JitFunction:
    """Compile ``func`` for the host CPU (stages: emit, verify, optimise, jit).

    With ``threads``, top-level ``"parallel"`` loops run on several threads and the function
    takes the thread count as its last argument (``JitFunction.threads``).  The loop nest
    is first scheduled with ``schedule`` (the pipeline gives the CPU schedule,
    :func:`~tecomp.passes.schedule.cpu.schedule_cpu`: register blocking of contractions, then
    short parallel loops collapsed with their nested loops so that every core gets work;
    None compiles ``func`` as given).  Failures raise
    :class:`~tecomp.errors.CompileError` naming the stage.  Compiled code is looked up in the
    in-memory ``cache``, then in the persistent ``disk`` cache (default:
    :func:`tecomp.codegen.disk_cache.default_cache`; None skips it), before LLVM runs, under
    :meth:`LlvmTarget.key` of ``func``.
    ``host`` (default: this machine, :func:`tecomp.host.describe`) is the description the
    schedule and the code generator use (another vector width, say).
    """
    target = LlvmTarget(schedule, speed_level=speed_level, threads=threads, host=host)
    store = default_cache() if disk is _USE_DEFAULT else disk
    memory_key = target.key(func, target.options())

    def _schedule(func: LoweredFunc, threads: bool) -> LoweredFunc:
        with timed("schedule"):
            return target.schedule.run(func, threads=threads, host=host)

    def build() -> JitFunction:
        key = disk_key(memory_key) if store is not None else ""
        if store is not None:
            entry = store.get(key)
            if entry is not None and isinstance(entry.get("object"), bytes):
                found = _load_stored(entry, key)
                if found is not None:
                    return found
        emitted = _schedule(func, threads)
        out = compile_now(emitted)
        out.pooled = pooled_buffers(emitted)
        if store is not None:
            from .parts import parts_record

            record = _pooled_record(out.pooled)
            store_code(store, key, out.object_code, out.main_source, **parts_record(out.parts),
                       **({"pooled": record} if record is not None else {}))
        return out

    def _load_stored(entry: Mapping[str, Any], key: str) -> JitFunction | None:
        """The kernel of a disk entry with its parts, or None (a part missing, the object
        unusable: compile afresh and overwrite it)."""
        from . import parts

        bodies = parts.listed(entry, store)
        if bodies is None:
            return None
        pooled = _pooled_from_record(entry.get("pooled"))
        if pooled is None:  # extents not stored as constants: schedule to find them
            pooled = pooled_buffers(_schedule(func, threads))
        try:
            out = load_object(entry["object"], symbol_name(func.name),
                              _joined_source(stored_source(store, key), bodies),
                              symbols={b.name: b.address for b in bodies})
        except CompileError:
            return None
        out.threads = threads
        out.pooled = pooled
        out.parts = tuple(bodies)
        return out

    def compile_now(emitted: LoweredFunc) -> JitFunction:
        from . import split as splitting
        from . import vmath
        from .emit import emit_module  # not imported on the path that loads cached code
        from .parts import Parts
        from .stream import streaming

        binding()  # LLVM set up here: the compiling threads never wait for LOCK
        sink = Parts(store, speed_level, host) if threads else None
        stats: dict[str, int] = {}
        # fewer bodies than compiling threads: split large bodies so that none stays idle
        split = splitting.SPLIT_BODIES and sink is not None and \
            splitting.parallel_loops(emitted) < describe().cores
        target_host = host or describe()
        with LOCK, vmath.for_host(target_host.features):
            try:
                module = emit_module(emitted, threads=threads, sink=sink,
                                     stream=streaming(target_host), stats=stats, split=split)
            except TecompError:
                if sink is not None:
                    sink.cancel()
                raise
            except Exception as err:  # llvmlite type errors are bugs of the emitter or the IR
                if sink is not None:
                    sink.cancel()
                raise CompileError(
                    f"emit: could not emit LLVM IR for {func.name!r}: "
                    f"{type(err).__name__}: {err}") from err
        name = symbol_name(func.name)
        # a kernel whose loops are all outlined into bodies (compiled at ``speed_level`` by
        # the sink) is calls and straight-line code, run once a call: not worth optimising
        glue = GLUE_UNOPTIMISED and sink is not None and stats.get("loops") == 0
        with timed("llvm"):
            try:
                obj, source = compile_object(str(module), name,
                                             speed_level=0 if glue else speed_level, host=host)
                bodies = sink.finish() if sink is not None else {}
            except BaseException:
                if sink is not None:
                    sink.cancel()
                raise
            out = load_object(obj, name, _joined_source(source, list(bodies.values())),
                              symbols={b.name: b.address for b in bodies.values()})
        out.main_source = source
        out.parts = tuple(bodies.values())
        out.threads = threads
        return out

    if cache is None:
        return build()
    return cache.get_or_compile(memory_key, build)


def _joined_source(main: str | Callable[[], str],
                   bodies: Sequence[JitFunction]) -> str | Callable[[], str]:
    """The optimised IR of a kernel compiled in parts (:mod:`.parts`): its own module, then
    each body's (read when asked for)."""
    if not bodies:
        return main

    def read() -> str:
        text = main() if callable(main) else main
        return "\n".join([text] + [b.source for b in bodies])
    return read


#: the integer operations an extent of a pooled temporary may hold in a disk entry
_EXTENT_OPS = {op.__name__: op for op in (E.Add, E.Sub, E.Mul, E.FloorDiv, E.Mod, E.Min,
                                          E.Max)}


def _pooled_record(pooled: tuple[Buffer, ...]) -> str | None:
    """The pooled temporaries as a Python literal for the disk entry (so that a kernel loaded
    from disk is not scheduled again just to find them): name, dtype, scope and extents of
    each, an extent as a tree of integer constants (``("c", value, dtype)``), size variables
    (``("v", name, dtype)``) and ``+ - * // % min max`` (``(op, a, b, dtype)``); None when an
    extent holds anything else."""
    def extent(d: Any) -> tuple | None:
        if type(d) is E.Const and type(d.value) is int:
            return ("c", d.value, d.dtype)
        if type(d) is E.Var:
            return ("v", d.name, d.dtype)
        if _EXTENT_OPS.get(type(d).__name__) is type(d):
            a, b = extent(d.a), extent(d.b)
            return None if a is None or b is None else (type(d).__name__, a, b, d.dtype)
        return None

    rows = []
    for b in pooled:
        shape = tuple(extent(d) for d in b.shape)
        if any(d is None for d in shape):
            return None
        rows.append((b.name, b.dtype, b.scope, shape))
    return repr(tuple(rows))


def _pooled_from_record(record: Any) -> tuple[Buffer, ...] | None:
    """The buffers :func:`_pooled_record` wrote, or None (no record, or not one it wrote)."""
    if not isinstance(record, str):
        return None
    import ast

    def extent(t: Any) -> E.Expr:
        if t[0] == "c" and len(t) == 3 and type(t[1]) is int and type(t[2]) is str:
            return E.Const(t[1], t[2])
        if t[0] == "v" and len(t) == 3 and type(t[1]) is str and type(t[2]) is str:
            return E.Var(t[1], t[2])
        if t[0] in _EXTENT_OPS and len(t) == 4 and type(t[3]) is str:
            return _EXTENT_OPS[t[0]](extent(t[1]), extent(t[2]), t[3])
        raise ValueError("not an extent")

    try:
        rows = ast.literal_eval(record)
        return tuple(Buffer(name, tuple(extent(d) for d in shape), dtype, scope)
                     for name, dtype, scope, shape in rows)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, IndexError):
        return None


def build_kernel(func: LoweredFunc, *, inputs: Sequence[Any] | None = None,
                 outputs: Sequence[Any] | None = None,
                 hidden: Mapping[Any, np.ndarray] | None = None, single: bool | None = None,
                 cache: CompileCache | None = KERNELS, threads: bool = True,
                 bounds: Any = None, schedule: Schedule | None = None,
                 host: Host | None = None) -> Kernel:
    """Compile ``func`` and wrap it in a :class:`~tecomp.codegen.kernel.Kernel`.

    ``inputs``/``outputs`` name what the arguments and results stand for (tensors and
    ``tc.var`` scalars); without them the kernel takes the input buffers, then the parameters
    no buffer shape mentions.  ``hidden`` gives the data of input buffers past those of
    ``inputs`` (constant tensors).  ``bounds`` (a ``BoundsInfo`` of
    :mod:`tecomp.passes.bounds_check`) says that the last output buffer is its error record.
    ``schedule`` and ``host`` as for :func:`compile_function`.
    """
    entry = compile_function(func, cache=cache, threads=threads, schedule=schedule,
                             host=host)
    return Kernel(func, entry, inputs=inputs, outputs=outputs, hidden=hidden, single=single,
                  target="llvm", bounds=bounds)
