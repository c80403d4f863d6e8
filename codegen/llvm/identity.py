"""LLVM's description of this host, remembered across processes.

Cache keys and the schedule need what LLVM reports for the CPU: its name, its feature
string, the process triple and LLVM's version (:func:`identity`).  Asking LLVM means loading
llvmlite's shared library, 20-30 ms of a process whose kernels otherwise all come from the
persistent cache.  So the answer is stored in that cache (:mod:`..disk_cache`, with its
ownership and integrity checks) under a *fingerprint* of the CPU read without LLVM: the
vendor, family, model, stepping, microcode and feature flags the kernel reports in
``/proc/cpuinfo`` (the CPUID data LLVM's detection reads), the machine and platform names and
llvmlite's version.  Another CPU, a changed microcode or flag set, or another llvmlite gives
another fingerprint, so a stale answer is never reused; without ``/proc/cpuinfo`` or without
the persistent cache, LLVM is asked every time.
"""

from __future__ import annotations

import hashlib
import platform
import sys
import threading
from typing import Any

#: the records of an identity
FIELDS = ("cpu", "features", "triple", "llvm")

#: the ``/proc/cpuinfo`` keys of the first processor that the fingerprint covers
CPUINFO_KEYS = ("vendor_id", "cpu family", "model", "model name", "stepping", "microcode",
                "flags", "cpu", "isa", "features", "cpu implementer", "cpu architecture",
                "cpu variant", "cpu part", "cpu revision")

_LOCK = threading.Lock()
_found: dict[str, str] = {}


def cpuinfo_text(path: str = "/proc/cpuinfo") -> str | None:
    """The kernel's CPU description, or None where there is none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def fingerprint(text: str | None = None) -> str | None:
    """A digest of what determines LLVM's answer (module doc), or None when the CPU
    description cannot be read."""
    text = cpuinfo_text() if text is None else text
    if not text:
        return None
    first = text.split("\n\n", 1)[0]
    kept = []
    for line in first.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in CPUINFO_KEYS:
            kept.append(f"{key.strip().lower()}={' '.join(value.split())}")
    if not kept:
        return None
    import llvmlite  # the package's version only: its binding is not loaded

    kept += [f"machine={platform.machine()}", f"platform={sys.platform}",
             f"llvmlite={llvmlite.__version__}"]
    return hashlib.sha256("\n".join(sorted(kept)).encode()).hexdigest()


def from_llvm() -> dict[str, str]:
    """Ask LLVM (loads its library)."""
    from .jit import binding

    llvm = binding()
    return {"cpu": llvm.get_host_cpu_name(),
            "features": llvm.get_host_cpu_features().flatten(),
            "triple": llvm.get_process_triple(),
            "llvm": ".".join(str(v) for v in llvm.llvm_version_info)}


def identity(store: Any = None) -> dict[str, str]:
    """LLVM's name, features, triple and version for this host: from the persistent cache
    (``store``, default :func:`..disk_cache.default_cache`) when an earlier process with the
    same fingerprint stored them, else from LLVM (and stored).  Once per process."""
    if _found:
        return _found
    with _LOCK:
        if _found:
            return _found
        if store is None:
            from ..disk_cache import default_cache

            store = default_cache()
        fp = fingerprint() if store is not None else None
        key = hashlib.sha256(f"host-identity|{fp}".encode()).hexdigest() if fp else None
        entry = store.get(key) if key is not None else None
        if entry is not None and all(isinstance(entry.get(f), str) and entry.get(f)
                                     for f in FIELDS):
            found = {f: str(entry[f]) for f in FIELDS}
        else:
            found = from_llvm()
            if key is not None:
                store.put(key, found)
        _found.update(found)
    return _found


def reset() -> None:
    """Forget this process's answer (tests)."""
    with _LOCK:
        _found.clear()
