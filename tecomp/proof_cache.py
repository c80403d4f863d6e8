"""Remembered bounds proofs: programs the bounds pass proved in bounds are not proved again.

``tc.build`` runs :func:`tecomp.passes.bounds_check.add_bounds_checks` on every lowered
program: isl proves each affine access in bounds (:mod:`tecomp.passes.bounds_affine`), which
costs milliseconds, and importing islpy costs tens of them, even when the kernel itself then
comes from a cache.  Most programs come out of that pass unchanged (every access proven, no
check added, no size condition): that verdict is a fact about the lowered program alone, so
it is remembered under a digest of the program (:func:`~tecomp.codegen.cache.program_key`)
and of the passes' source (:func:`proof_key`), in memory and in the persistent
cache (:mod:`tecomp.codegen.disk_cache`, an entry ``{"bounds": "proven"}``).

Only the verdict "unchanged" is remembered.  A program that needs runtime checks or size
conditions, or that is out of bounds wherever it runs (a build error), runs the pass every
time, so the checked program, its :class:`~tecomp.passes.bounds_check.BoundsInfo` and the
error are always those of the pass itself.  The key leaves out the islpy version on purpose:
a proof is exact (isl decides integer sets), so it holds whichever version found it, while
our own pass code decides what is proved and is part of the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .codegen.cache import CompileCache, program_key
from .codegen.disk_cache import default_cache
from .codegen.target import source_digest
from .loopir import LoweredFunc

#: digests of the programs proven in bounds in this process (a verdict, never code)
PROVEN: CompileCache[bool] = CompileCache(4096)
_VERDICT = "proven"


def passes_version() -> str:
    """A digest of the passes' and solvers' source: a changed pass never trusts an old
    verdict (importing them is not needed, so islpy stays unloaded on a remembered proof)."""
    from . import passes, solvers

    return source_digest(str(Path(passes.__file__).parent), str(Path(solvers.__file__).parent))


def proof_key(func: LoweredFunc) -> str:
    """The key of ``func``'s bounds verdict (program structure and pass version)."""
    return program_key(func, "bounds-proof", passes_version())


def bounds_checked(func: LoweredFunc, *, check_bounds: bool = True) -> tuple[LoweredFunc, Any]:
    """:func:`~tecomp.passes.bounds_check.add_bounds_checks` of ``func``, skipped when ``func``
    was proven before: ``(func, None)`` then, as the pass returns for it.

    With ``check_bounds=False`` the result is ``(func, None)`` in every case, after the
    static half of the pass (an access out of range wherever it runs raises
    :class:`~tecomp.errors.LoweringError`), as
    :func:`~tecomp.passes.bounds_affine.check_static_bounds` does.
    """
    key = proof_key(func)
    if key in PROVEN:
        return func, None
    store = default_cache()
    if store is not None:
        entry = store.get(key)
        if entry is not None and entry.get("bounds") == _VERDICT:
            PROVEN.get_or_compile(key, lambda: True)
            return func, None
    from .passes.bounds_check import add_bounds_checks

    checked, bounds = add_bounds_checks(func)
    if bounds is None:
        PROVEN.get_or_compile(key, lambda: True)
        if store is not None:
            store.put(key, {"bounds": _VERDICT})
        return func, None
    return (checked, bounds) if check_bounds else (func, None)
