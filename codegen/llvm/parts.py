"""Kernels compiled in parts: each outlined parallel-loop body a module, an object file and a
cache entry of its own, compiled on several threads at once.

A kernel's ``"parallel"`` loops (and, with a sink, its other top-level loops:
:func:`.parallel.emit_outlined_loop`) are outlined into body functions (:mod:`.parallel`), and
those bodies -- the register-tiled contractions above all -- are most of its LLVM IR and of
the time LLVM takes (a transformer block's gradient: forty bodies, 50k lines).  Emitted with
a :class:`Parts` as the sink, a kernel's module only declares its bodies; each body is

* named by a digest of what its code depends on (:func:`body_symbol`): the loop's text with
  its variables and buffers numbered (:func:`.parallel.body_key`, which includes the shapes,
  dtypes and LLVM types of what it reads), the target (CPU, features, cores and caches:
  :func:`.jit.target_key`), the speed level, llvmlite's and LLVM's versions and the backend's
  source (:func:`.jit.disk_key`);
* found by that name in this process (:data:`BODIES`, an LRU of loaded bodies), else in the
  persistent cache, else emitted into a module of its own and handed to a thread of
  :func:`.jit.compile_pool` at once, so LLVM optimises and compiles one body while Python
  emits the next, and the bodies of a kernel spread over the cores;
* loaded (:func:`.jit.load_object`) before the kernel's own object, which is linked against
  the bodies' addresses; the kernel's :class:`~.jit.JitFunction` keeps them alive
  (``parts``).

A body may call bodies in turn: in a kernel with fewer parallel loops than compiling threads,
the large loops of a body are bodies of their own (:mod:`.split`), so that the threads
share its LLVM work.  :class:`Parts` records which bodies each body it emits calls
(:attr:`Parts.calls`), links it against their addresses, keeps them alive with it
(``parts``) and lists them in its cache entry, from which :func:`load` loads them first.

So a body compiles once per process and machine, however many kernels run it: a gradient
kernel recomputes its forward's stages, which the forward kernel compiled already, and the
same projection or contraction recurs across programs.  A body's code cannot depend on the
kernel around it: it reads only its arguments (nested parallel loops run serially inside
it), and LLVM sees it alone, as it would an internal function it did not inline.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from ...host import Host
from .jit import (
    JitFunction,
    compile_object,
    compile_pool,
    disk_key,
    load_object,
    store_code,
    stored_source,
    target_key,
)

if TYPE_CHECKING:  # the loading path imports neither llvmlite's IR builder nor futures
    from concurrent.futures import Future

    from llvmlite import ir

#: loaded bodies by symbol, the most recently used last
BODIES: OrderedDict[str, JitFunction] = OrderedDict()
#: bodies :data:`BODIES` keeps (kernels keep those they call alive themselves)
MAX_BODIES = 1024
_LOCK = threading.Lock()


def body_symbol(key: str, speed_level: int, host: Host | None) -> str:
    """The symbol (and, after its prefix, the persistent-cache key) of the body whose
    :func:`.parallel.body_key` is ``key``, compiled at ``speed_level`` for ``host``."""
    return "tecomp_body_" + disk_key(f"body|{key}|{target_key(host)}|O{speed_level}")


def _disk_key(symbol: str) -> str:
    return symbol.removeprefix("tecomp_body_")


def _remember(symbol: str, fn: JitFunction) -> None:
    with _LOCK:
        BODIES[symbol] = fn
        BODIES.move_to_end(symbol)
        while len(BODIES) > MAX_BODIES:
            BODIES.popitem(last=False)


def load(symbol: str, store: Any) -> JitFunction | None:
    """The body ``symbol`` from this process, else from the persistent cache ``store``
    (None: not there, or not loadable)."""
    with _LOCK:
        found = BODIES.get(symbol)
        if found is not None:
            BODIES.move_to_end(symbol)
            return found
    if store is None:
        return None
    entry = store.get(_disk_key(symbol))
    if entry is None or not isinstance(entry.get("object"), bytes):
        return None
    kids = listed(entry, store)
    if kids is None:
        return None
    from ...errors import CompileError

    try:
        fn = load_object(entry["object"], symbol, stored_source(store, _disk_key(symbol)),
                         symbols={k.name: k.address for k in kids})
    except CompileError:
        return None
    fn.parts = tuple(kids)
    _remember(symbol, fn)
    return fn


def listed(entry: Any, store: Any) -> list[JitFunction] | None:
    """The bodies a cache entry's code calls (its ``"parts"`` record, :func:`parts_record`),
    loaded with :func:`load`; None when the record is unreadable or a body is missing."""
    names = entry.get("parts", "")
    if not isinstance(names, str):
        return None
    found: list[JitFunction] = []
    for name in names.split():
        fn = load(name, store)
        if fn is None:
            return None
        found.append(fn)
    return found


def parts_record(fns: Any) -> dict[str, str]:
    """The cache record listing the bodies ``fns`` that some code calls (none: no record)."""
    return {"parts": " ".join(f.name for f in fns)} if fns else {}


class Parts:
    """The sink :func:`.emit.emit_module` hands a kernel's bodies to (see the module
    docstring); :meth:`finish` gives them loaded, once the kernel's own module is emitted
    (and, ideally, compiled meanwhile)."""

    def __init__(self, store: Any, speed_level: int, host: Host | None) -> None:
        self.store, self.speed_level, self.host = store, speed_level, host
        self.jobs: dict[str, JitFunction | Future | tuple[bytes, str]] = {}
        #: the bodies each body being emitted calls (a body split into bodies of its own:
        #: :mod:`.split`), by symbol; they come before it in :attr:`jobs`
        self.calls: dict[str, list[str]] = {}
        self._emitting: list[str] = []

    def body(self, key: str, emit: Callable[[ir.Module, str], Any]) -> str:
        symbol = body_symbol(key, self.speed_level, self.host)
        if self._emitting:  # called from the body being emitted
            callees = self.calls.setdefault(self._emitting[-1], [])
            if symbol not in callees:
                callees.append(symbol)
        if symbol in self.jobs:
            return symbol
        found = load(symbol, self.store)
        if found is not None:
            self.jobs[symbol] = found
            return symbol
        from llvmlite import ir

        module = ir.Module(name=symbol)
        self._emitting.append(symbol)
        try:
            emit(module, symbol)
        finally:
            self._emitting.pop()
        text = str(module)
        pool = compile_pool()
        if pool is None:
            self.jobs[symbol] = compile_object(text, symbol, speed_level=self.speed_level,
                                               host=self.host)
        else:
            self.jobs[symbol] = pool.submit(compile_object, text, symbol,
                                            speed_level=self.speed_level, host=self.host)
        return symbol

    def finish(self) -> dict[str, JitFunction]:
        """Every body, loaded (waiting for those still compiling); new ones are stored in
        the persistent cache."""
        out: dict[str, JitFunction] = {}
        for symbol, job in self.jobs.items():
            if isinstance(job, JitFunction):
                out[symbol] = job
                continue
            obj, source = job if isinstance(job, tuple) else job.result()
            kids = [out[name] for name in self.calls.get(symbol, ())]
            fn = load_object(obj, symbol, source, symbols={k.name: k.address for k in kids})
            fn.parts = tuple(kids)
            _remember(symbol, fn)
            if self.store is not None:
                store_code(self.store, _disk_key(symbol), obj, source, **parts_record(kids))
            out[symbol] = fn
        return out

    def cancel(self) -> None:
        """Wait for the bodies still compiling and drop them (the kernel failed)."""
        for job in self.jobs.values():
            if not isinstance(job, (JitFunction, tuple)):  # a Future
                try:
                    job.result()
                except Exception:  # noqa: BLE001 - the kernel's own error is the one raised
                    pass
