"""The parallel-loop runtime's object code (:mod:`.runtime` builds its IR), once per process.

* :func:`runtime_address` links it into the process-wide JIT on first use (the kernels that
  have parallel loops are linked against that address): from the persistent cache, where it
  is keyed like a kernel (host, versions, :func:`.jit.code_version`, which covers
  :mod:`.runtime`), or compiled and stored; an unusable entry is compiled afresh and
  overwritten.
* :func:`runtime_ahead`, a context around a build, makes the code ready before the first
  kernel needs it: read from the cache, or compiled on :func:`.jit.compile_pool` while the
  calling thread lowers and emits its program -- instead of on the calling thread when the
  first kernel is linked, after all that.  The compile (about 25 ms of LLVM; 55 ms before
  its module was halved) then leaves the critical path of a cold build: in fresh processes
  the DCT 1.05x, the DOF Laplacian 1.04x faster (1.25x and 1.14x with the larger module;
  ``benchmarks/results/compile_time.md``), for 5-10% more CPU time.  Leaving the context waits for
  a compile still running, so that no LLVM work outlives the build: a process that forks
  afterwards must not fork in the middle of it (a first version that did not wait hung a
  child forked while the pool compiled).
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from typing import Any, Iterator

from ...errors import CompileError
from .jit import (
    LOCK,
    JitFunction,
    binding,
    compile_object,
    compile_pool,
    disk_key,
    load_object,
    target_key,
)

#: whether :func:`runtime_ahead` reads or compiles ahead (an A/B switch of
#: ``benchmarks/compile_time.py --ab``)
PREFETCH = True

#: ``"runtime"``: the linked runtime and its fork reset; ``"code"``: its object code and
#: optimised IR made ready ahead, with whether they came from the cache (a tuple), or the
#: compile pool's future of them
_state: dict[str, Any] = {}


def runtime_address() -> int:
    """The address of the runtime, linked on first use and kept for the life of the process."""
    with LOCK:
        if "runtime" not in _state:
            rt = _load()
            reset = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int64, ctypes.c_int64)(rt.address)
            # a forked child has none of the pool's threads (and maybe a held lock): reset it
            os.register_at_fork(after_in_child=lambda: reset(None, None, 0, 0))
            _state["runtime"], _state["reset"] = rt, reset
        return _state["runtime"].address


@contextmanager
def runtime_ahead() -> Iterator[None]:
    """Around a build: :func:`prefetch_runtime` on entry; on leaving, wait for a compile of
    the runtime still running (a failed one is dropped: :func:`runtime_address` compiles
    again and reports the error)."""
    prefetch_runtime()
    try:
        yield
    finally:
        with LOCK:
            job = _state.get("code")
            if job is not None and not isinstance(job, tuple):
                try:
                    _state["code"] = job.result()
                except Exception:  # noqa: BLE001 - raised again where the runtime is needed
                    del _state["code"]


def prefetch_runtime() -> None:
    """Read the runtime's code from the persistent cache, or, when it is not there, start
    compiling it on the compile pool.  Does nothing once the runtime is linked or its code is
    on the way, without a pool (one core), or with :data:`PREFETCH` off."""
    if not PREFETCH or "runtime" in _state or "code" in _state:
        return
    with LOCK:
        if "runtime" in _state or "code" in _state:
            return
        found = _stored()
        if found is not None:
            _state["code"] = found
            return
        pool = compile_pool()
        if pool is not None:
            # LLVM and the host description set up here: the compiling thread never waits
            # for LOCK, which its waiters hold
            binding()
            target_key()
            _state["code"] = pool.submit(_compile)


def _key() -> str:
    from .layout import RUNTIME_SYMBOL, runtime_variant

    return disk_key(f"runtime|{RUNTIME_SYMBOL}|{target_key()}|{runtime_variant()}")


def _stored() -> tuple[bytes, str, bool] | None:
    """The runtime's object code and IR from the default persistent cache, or None."""
    from ..disk_cache import default_cache

    store = default_cache()
    entry = store.get(_key()) if store is not None else None
    if entry is None or not isinstance(entry.get("object"), bytes):
        return None
    return entry["object"], str(entry.get("source", "")), True


def _compile() -> tuple[bytes, str, bool]:
    """The runtime's module, compiled: object code, optimised IR, and False (not stored)."""
    from .layout import RUNTIME_SYMBOL
    from .runtime import build_module  # llvmlite's IR builder: only when compiling

    obj, source = compile_object(str(build_module()), RUNTIME_SYMBOL)
    return obj, source, False


def _load() -> JitFunction:
    """The runtime linked: from the code made ready ahead, else from the cache, else
    compiled here (and then stored)."""
    from ..disk_cache import default_cache
    from .layout import RUNTIME_SYMBOL

    code = _state.pop("code", None)
    if code is not None and not isinstance(code, tuple):  # the compile pool's future
        code = code.result()
    if code is None:
        code = _stored()
    if code is not None and code[2]:
        try:
            return load_object(code[0], RUNTIME_SYMBOL, code[1], link_runtime=False)
        except CompileError:
            code = None
    if code is None:
        code = _compile()
    rt = load_object(code[0], RUNTIME_SYMBOL, code[1], link_runtime=False)
    store = default_cache()
    if store is not None:
        store.put(_key(), {"object": code[0], "source": code[1]})
    return rt


def _forget_compile() -> None:
    """A forked child has none of its parent's threads: a compile the parent's pool was
    running never finishes there, so the child compiles the runtime itself."""
    if not isinstance(_state.get("code", ()), tuple):
        del _state["code"]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_compile)
