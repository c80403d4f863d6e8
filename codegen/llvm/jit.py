"""Compile LLVM IR for the host CPU and load it into the process (llvmlite; :mod:`.elf`).

Stages, each reported by name in a :class:`~tecomp.errors.CompileError` when it fails:

* ``verify`` — parse the IR text llvmlite.ir produced and run LLVM's verifier;
* ``optimise`` — the new pass manager at speed level 3 with loop vectorisation, SLP
  vectorisation, unrolling (:data:`UNROLL`) and interleaving, on a target machine that
  carries the host CPU name and features (without them LLVM only uses SSE) and the vector width of
  :func:`tecomp.host.describe` (on AVX-512 hosts LLVM's tuning would otherwise keep to 256-bit
  vectors: the feature string switches ``prefer-256-bit`` off);
* ``jit`` — the target machine emits an object file, which is linked against the running
  process (``malloc``/``free``/``pthread_create`` from libc, ``erf``... from libm, which
  Python has loaded) and the parallel-loop runtime (:mod:`.runtime`, linked once per
  process by :mod:`.runtime_code`): on x86-64 Linux by the backend's own loader
  (:mod:`.elf`), elsewhere, or for an object that loader does not take, by an ORC LLJIT of
  its own.  An unresolved symbol is an error here, never a crash.

Object code from the persistent cache only needs the last stage (:func:`load_object`), and
that needs no target machine and, through :mod:`.elf`, not even LLVM: llvmlite's binding is
imported on first use (:func:`binding`), the host's CPU name and features come from the
record :mod:`.identity` keeps in the cache, and the runtime's own object code is cached on
disk like a kernel's, so a process whose kernels all come from the cache never loads LLVM's
library (20-30 ms), let alone its optimiser or code generator.

Memory: each module is parsed into a fresh LLVM context (the global one keeps every type and
constant for ever), the pass manager llvmlite leaves undisposed is disposed of, a pass
builder serves 32 compiles (llvmlite leaks part of each), and a kernel's
mapping (or JIT) is dropped with its :class:`JitFunction` (an evicted cache entry), so
compiling many distinct kernels does not grow the process beyond what the caches hold.

Threads: a module is parsed into a context of its own and optimised and compiled with the
calling thread's own target machine and pass builder (:func:`compile_object`), so threads
compile side by side -- the threads of :func:`compile_pool` compile the parts of one kernel
(:mod:`tecomp.codegen.llvm`) at once.  LLVM's one-time set-up, the host description and the
JIT's linking run under one process-wide lock (:data:`LOCK`); calling compiled code needs no
lock.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ... import host as host_module
from ...errors import CompileError
from ...host import Host, describe, llvm_features
from ...logs import timed

if TYPE_CHECKING:
    from llvmlite import ir

LOCK = threading.RLock()
_state: dict[str, Any] = {}
_library_ids = itertools.count()


def binding() -> Any:
    """llvmlite's binding with LLVM's native target initialised (loaded on first use: a
    process that only loads cached kernels through :mod:`.elf` never needs it)."""
    llvm = _state.get("binding")
    if llvm is not None:
        return llvm
    with LOCK:
        if "binding" not in _state:
            import llvmlite.binding as llvm

            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _load_gcc_runtime(llvm)
            _state["binding"] = llvm
    return _state["binding"]


def set_option(flag: str, on: bool) -> None:
    """Set LLVM's boolean command-line option ``flag`` (such as ``-disable-lsr``) for the
    whole process: read by the passes of every compile that starts afterwards."""
    binding().set_option("tecomp", f"{flag}={'true' if on else 'false'}")


def _init() -> dict[str, Any]:
    """Describe the host once (triple, CPU, features, LLVM version): LLVM's answer, which
    :mod:`.identity` remembers in the persistent cache, so that loading cached code needs
    neither LLVM nor a target machine.  :func:`tecomp.host.describe` reads the same
    features.  The target machine that compiles is made on first use (:func:`_machine`)."""
    if "key" in _state:
        return _state
    with LOCK:
        if "key" in _state:
            return _state
        from .identity import identity

        found = identity()
        host_module.set_feature_source(lambda: found["features"])
        features = llvm_features(describe())  # with the host's vector-width preference
        cpu, triple = found["cpu"], found["triple"]
        _state.update(cpu=cpu, features=features, triple=triple, llvm=found["llvm"],
                      key=f"{triple}|{cpu}|{features}")
    return _state


def _load_gcc_runtime(llvm: Any) -> None:
    """Make the compiler-runtime helpers LLVM may call (half conversions without F16C,
    ``powi``) resolvable: the loader finds ``libgcc_s`` by its soname; ``find_library`` (which
    runs ``ldconfig``, milliseconds) only when that fails."""
    try:
        llvm.load_library_permanently("libgcc_s.so.1")
        return
    except RuntimeError:
        pass
    import ctypes.util

    lib = ctypes.util.find_library("gcc_s")
    if lib:
        try:
            llvm.load_library_permanently(lib)
        except RuntimeError:  # pragma: no cover - optional
            pass


def _machine(host: Host | None = None, opt: int = 3) -> Any:
    """This thread's target machine for the host CPU (name and features: without them LLVM
    only uses SSE), made on first use; for ``host`` (another vector width or feature set of
    this CPU), one per distinct feature string.  A target machine is not shared between
    threads (LLVM's code generator keeps state in it), so the threads of
    :func:`compile_pool` each have their own.  ``opt`` is the code generator's level (0: fast
    instruction selection and register allocation, for code that runs once a call)."""
    st = _init()
    features = st["features"] if host is None else llvm_features(host)
    machines = _thread_state("tms")
    tm = machines.get((features, opt))
    if tm is None:
        target = binding().Target.from_triple(st["triple"])
        tm = machines[(features, opt)] = target.create_target_machine(
            cpu=st["cpu"], features=features, opt=opt, codemodel="jitdefault")
        st["tms"] = st.get("tms", 0) + 1  # how many were made (tests ask: any?)
    return tm


_local = threading.local()


def _thread_state(name: str) -> dict:
    """A dict of this thread's LLVM objects (target machines, pass builders)."""
    found = getattr(_local, name, None)
    if found is None:
        found = {}
        setattr(_local, name, found)
    return found


def _process_jit() -> Any:
    """The process-wide JIT that holds the parallel-loop runtime (made once)."""
    st = _init()
    if "jit" not in st:
        st["jit"] = binding().create_lljit_compiler()
    return st["jit"]


def target_key(host: Host | None = None) -> str:
    """Identifies the code this process generates (triple, CPU, features; for ``host``: its
    features), with the cores and cache sizes the schedule reads (a kernel built by a process
    pinned to one CPU has no threaded loops; cache blocking follows the cache sizes): part of
    cache keys."""
    st = _init()
    h = describe() if host is None else host
    code = st["key"] if host is None else f"{st['triple']}|{st['cpu']}|{llvm_features(host)}"
    return f"{code}|cores={h.cores}|caches={h.l1d},{h.l2},{h.l3}"


def disk_key(memory_key: str) -> str:
    """The persistent-cache key for code whose in-memory key (for kernels: the program, the
    options and :func:`target_key`) is ``memory_key``: that key with the llvmlite and LLVM
    versions and :func:`code_version`."""
    import hashlib

    import llvmlite

    versions = f"llvmlite-{llvmlite.__version__}|llvm-{_init()['llvm']}"
    return hashlib.sha256(f"{memory_key}|{versions}|{code_version()}".encode()).hexdigest()


def source_key(key: str) -> str:
    """The disk key of the optimised IR of the code stored under ``key``: an entry of its
    own, so that loading the machine code does not decompress megabytes of text."""
    import hashlib

    return hashlib.sha256(f"{key}|source".encode()).hexdigest()


def store_code(store: Any, key: str, obj: bytes, source: str, **extra: str) -> None:
    """Put object code under ``key`` (with the ``extra`` records) and its IR beside it."""
    store.put(key, {"object": obj, **extra})
    store.put(source_key(key), {"source": source})


def stored_source(store: Any, key: str) -> Callable[[], str]:
    """A function that reads the IR of the code stored under ``key`` (a missing entry reads
    as a note)."""
    def read() -> str:
        found = store.get(source_key(key))
        text = found.get("source") if found is not None else None
        return text if isinstance(text, str) else "; the optimised IR is not in the cache\n"
    return read


def code_version() -> str:
    """A digest of this backend's own source (:func:`~tecomp.codegen.target.source_digest`),
    so that a changed code generator never reuses machine code an older one stored on disk.
    The schedule's source is part of every kernel key (:meth:`~tecomp.codegen.target.Target.key`).
    """
    from ..target import file_digest, package_folder, source_digest

    return source_digest(package_folder(__file__)) + "-" + file_digest(host_module.__file__)


@dataclass
class JitFunction:
    """A compiled function: its address, the optimised IR and what keeps the code alive.

    ``source`` may be given as a function that returns the IR text: code loaded from the
    persistent cache reads its IR (megabytes for a large gradient, a separate entry) only
    when someone asks for it (:attr:`source`), not on the load path."""

    name: str
    address: int
    _source: str | Callable[[], str] = field(repr=False)
    _tracker: Any = field(repr=False, default=None)
    threads: bool = False  # whether the function takes a thread count as its last argument
    object_code: bytes = field(repr=False, default=b"")  # what was linked (for the disk cache)
    #: temporaries the caller passes after the outputs (``emit.pooled_buffers``)
    pooled: tuple = ()
    #: the separately compiled functions this one calls (kept alive with it: :mod:`.parts`)
    parts: tuple = ()
    #: the optimised IR of this function's own module, without its parts' (what is stored)
    main_source: str = field(repr=False, default="")

    @property
    def source(self) -> str:
        """The optimised LLVM IR the code came from (read on first use when lazy)."""
        if callable(self._source):
            self._source = self._source()
        return self._source


class _Library:
    """Linked code and the JIT holding it, released in that order when dropped."""

    def __init__(self, tracker: Any, jit: Any) -> None:
        self.tracker, self.jit = tracker, jit

    def __del__(self) -> None:
        lock = LOCK
        if lock is None:  # interpreter shutdown: the process is going away anyway
            return
        with lock:
            try:
                self.tracker.close()
                if self.jit is not _state.get("jit"):
                    self.jit.close()
            except Exception:  # noqa: BLE001 - never raise from a finaliser
                pass


#: compiles served by one pass builder before it is replaced (see :func:`_pass_builder`)
PASS_BUILDER_RUNS = 32
#: whether LLVM's loop unroller runs (see :func:`_pass_builder`; the A/B of
#: ``benchmarks/ab_llvm_pipeline.py`` switches it)
UNROLL = True


def _pass_builder(speed_level: int, host: Host | None) -> Any:
    """A pass builder of the O``speed_level`` pipeline for ``host``'s target machine, shared
    by up to :data:`PASS_BUILDER_RUNS` compiles.  llvmlite leaves part of a builder undisposed
    (about 1.4 KiB, measured with llvmlite 0.50), so one per compile grew the process with
    every kernel; but each run appends to the builder's instrumentation, so a builder that
    served too many runs makes every further run slower (15 ms -> 130 ms per run of the O3
    pipeline on a trivial module over 1,800 runs).  At most one builder per speed level,
    :data:`UNROLL` setting and target machine is alive in a thread (a bounded cache; a
    builder is never shared between threads, like the target machine it is made for).

    LLVM's loop unroller stays on (:data:`UNROLL`), although the schedule unrolls the
    register tiles itself: without it the symbolic transformer block's forward and gradient
    built in 1.89 s instead of 2.45 s (CPU time 2.68 s instead of 3.78 s; the copies it
    makes of the tiles' tail loops are a quarter of what LLVM compiles), but some
    convolutions ran slower (``benchmarks/ab_llvm_pipeline.py``, one AVX-512 core: 1x1
    8x256x16x16 -> 64 forward 1.14x, 4x4/2 transposed 1.17x, 3x3/2 1.12x; compile time 0.78x
    and kernel time 1.02x / 1.01x in geometric mean over the default suite).  The register
    tiles' own loops are marked to be left rolled instead (``emit._tile_steps``)."""
    tm = _machine(host)
    builders = _thread_state("pass_builders")
    key = (id(tm), speed_level, UNROLL)
    found = builders.get(key)
    if found is not None and found[2] >= PASS_BUILDER_RUNS:
        found[1].close()
        found[0].close()
        found = None
    if found is None:
        llvm = binding()
        pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
        pto.loop_vectorization = speed_level >= 2
        pto.slp_vectorization = speed_level >= 2
        pto.loop_unrolling = speed_level >= 2 and UNROLL
        pto.loop_interleaving = speed_level >= 2
        found = [pto, llvm.create_pass_builder(tm, pto), 0]
        builders[key] = found
    found[2] += 1
    return found[1]


def optimise(module: Any, speed_level: int = 3, host: Host | None = None) -> None:
    """Run the O``speed_level`` pipeline with vectorisation on ``module`` in place (with this
    thread's pass builder: ``module`` must live in a context no other thread uses)."""
    pb = _pass_builder(speed_level, host)
    mpm = pb.getModulePassManager()
    try:
        _unlocked("LLVMPY_RunNewModulePassManager")(mpm, module, pb)
    finally:
        # llvmlite never frees a module pass manager (the whole O3 pipeline, ~0.1 MiB a
        # compile): dispose of it here
        dispose = getattr(binding().ffi.lib, "LLVMPY_DisposeNewModulePassManger", None)
        if dispose is not None:
            dispose(mpm)
            mpm.detach()


def compile_ir(module: ir.Module | str, name: str, *, speed_level: int = 3,
               link_runtime: bool = True, host: Host | None = None,
               symbols: dict[str, int] | None = None) -> JitFunction:
    """Verify, optimise and JIT-compile ``module``; return the function called ``name``.
    ``host`` (default :func:`tecomp.host.describe`) gives the features and vector width;
    ``symbols`` gives the addresses of functions ``module`` declares and others define
    (:func:`load_object`).

    The optimised module is compiled to an object file (``JitFunction.object_code``) which is
    what the JIT links, so the same bytes can be stored and linked again by
    :func:`load_object` in another process.
    """
    obj, source = compile_object(str(module), name, speed_level=speed_level, host=host)
    return load_object(obj, name, source, link_runtime=link_runtime, symbols=symbols)


def compile_object(text: str, name: str, *, speed_level: int = 3,
                   host: Host | None = None) -> tuple[bytes, str]:
    """Verify, optimise and compile the LLVM IR ``text`` to an object file: its bytes and
    the optimised IR (``speed_level`` 0: no optimisation, and the code generator's fast
    instruction selection and register allocation).  Thread-safe: the module gets an LLVM
    context of its own and the thread's own target machine and pass builder, and nothing
    here holds :data:`LOCK` (the threads of :func:`compile_pool` run it while the caller
    emits and compiles more)."""
    llvm = binding()
    tm = _machine(host, 0 if speed_level == 0 else 3)
    try:
        # a context per module: the global one keeps every type and constant forever
        mod = _parse(llvm, text)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as err:
        raise CompileError(f"verify: LLVM rejected the IR of {name!r}: {err}") from None
    try:
        with timed("llvm.optimise"):
            optimise(mod, speed_level, host)
        mod.verify()
    except RuntimeError as err:
        raise CompileError(f"optimise: {name!r}: {err}") from None
    source = str(mod)
    try:
        with timed("llvm.emit_object"):
            obj = _emit_object(llvm, tm, mod)
    except RuntimeError as err:
        raise CompileError(f"jit: could not generate code for {name!r}: {err}") from None
    mod.close()  # the module first, then (unreferenced) its context
    return obj, source


def _unlocked(name: str) -> Callable:
    """llvmlite's C function ``name`` without llvmlite's process-wide lock.

    llvmlite serialises every call into LLVM (one lock for all threads), which would keep
    the threads of :func:`compile_pool` waiting on each other for the whole of LLVM's work.
    The calls made through this -- parsing into a new context, running a pass pipeline on a
    module of that context, generating its code with this thread's target machine -- touch
    nothing another thread touches (LLVM's own rule: contexts, and what lives in them, are
    not shared; target machines and pass builders are this thread's), and ctypes releases
    the interpreter around them.  When llvmlite's wrapper is not the one this was written
    against, the locked function is used."""
    fn = getattr(binding().ffi.lib, name)
    return getattr(fn, "_cfn", fn)


def _parse(llvm: Any, text: str) -> Any:
    """``llvm.parse_assembly(text)`` into a new context, without llvmlite's lock."""
    from ctypes import c_char_p

    from llvmlite.binding.module import ModuleRef

    context = llvm.create_context()
    with llvm.ffi.OutputString() as errmsg:
        mod = ModuleRef(_unlocked("LLVMPY_ParseAssembly")(context, c_char_p(text.encode()),
                                                          errmsg), context)
        if errmsg:
            mod.close()
            raise RuntimeError(f"LLVM IR parsing error\n{errmsg}")
    return mod


def _emit_object(llvm: Any, tm: Any, mod: Any) -> bytes:
    """``tm.emit_object(mod)`` without llvmlite's lock around the code generator."""
    ffi = llvm.ffi
    with ffi.OutputString() as outerr:
        buf = _unlocked("LLVMPY_TargetMachineEmitToMemory")(tm, mod, 1, outerr)
        if not buf:
            raise RuntimeError(str(outerr))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buf),
                                ffi.lib.LLVMPY_GetBufferSize(buf))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buf)


_pool: list = []


def compile_pool() -> Any:
    """A pool of threads that run :func:`compile_object` (one per core the process may use,
    made on first use; None on one core).  LLVM releases the interpreter while it optimises
    and generates code, so the parts of a kernel compile side by side."""
    if not _pool:
        with LOCK:
            if not _pool:
                cores = describe().cores
                if cores <= 1:
                    _pool.append(None)
                else:
                    from concurrent.futures import ThreadPoolExecutor

                    _pool.append(ThreadPoolExecutor(max_workers=cores,
                                                    thread_name_prefix="tecomp-llvm"))
    return _pool[0]


def _forget_pool() -> None:
    """A forked child has none of its parent's threads: it makes a pool of its own."""
    _pool.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def load_object(obj: bytes, name: str, source: str | Callable[[], str], *,
                link_runtime: bool = True, symbols: dict[str, int] | None = None) -> JitFunction:
    """Link the object code ``obj`` (made by :func:`compile_ir` on this machine) into the
    process and return its function ``name``; ``source`` is the optimised IR it came from
    (or a function that reads it, :class:`JitFunction`).
    The runtime's symbol (:func:`.runtime_code.runtime_address`) is resolved for it when
    ``obj`` refers to it (the name is in its symbol table; a kernel without parallel loops
    does not), and so are ``symbols`` (name: address; the outlined bodies a kernel calls,
    loaded before it).

    On x86-64 Linux the object is mapped by :mod:`.elf` (no LLVM needed); an object that
    loader does not take, or another platform, goes through an ORC LLJIT."""
    from . import elf
    from .layout import RUNTIME_SYMBOL
    from .runtime_code import runtime_address

    wants_runtime = link_runtime and RUNTIME_SYMBOL.encode() in obj
    if LOAD_WITH_ELF and elf.available():
        resolve = {RUNTIME_SYMBOL: runtime_address()} if wants_runtime else {}
        resolve.update(symbols or {})
        try:
            image = elf.load(obj, resolve)
        except elf.UnsupportedObject:
            image = None
        if image is not None and image.address(name):
            out = JitFunction(name, image.address(name), source, image)
            out.object_code = obj
            return out
    return _load_with_lljit(obj, name, source, wants_runtime, link_runtime, symbols or {})


#: whether :func:`load_object` tries :mod:`.elf` first (tests switch it off to check the
#: LLJIT path)
LOAD_WITH_ELF = True


def _load_with_lljit(obj: bytes, name: str, source: str | Callable[[], str],
                     wants_runtime: bool, link_runtime: bool,
                     symbols: dict[str, int]) -> JitFunction:
    with LOCK:
        llvm = binding()
        _init()
        lib = f"{name}.{next(_library_ids)}"
        try:
            builder = llvm.JITLibraryBuilder().add_object_img(obj).add_current_process()
            if wants_runtime:
                from .layout import RUNTIME_SYMBOL
                from .runtime_code import runtime_address

                builder = builder.import_symbol(RUNTIME_SYMBOL, runtime_address())
            for symbol, address in symbols.items():
                builder = builder.import_symbol(symbol, address)
            # kernels get a JIT each (dropped with the kernel: its dylib and symbol tables go
            # too); the runtime stays in the process-wide one
            jit = llvm.create_lljit_compiler() if link_runtime else _process_jit()
            library = _Library(builder.export_symbol(name).link(jit, lib), jit)
            address = library.tracker[name]
        except RuntimeError as err:
            raise CompileError(f"jit: could not load {name!r}: {err}") from None
        if not address:
            raise CompileError(f"jit: the function {name!r} has no address")
        out = JitFunction(name, address, source, library)
        out.object_code = obj
        return out
