"""``tc.config``: the caches from Python.

    tc.config.cache_dir = "/scratch/tecomp"   # the persistent cache's directory
    tc.config.cache_dir                        # -> Path, or None when it is off
    tc.config.cache = False                    # no persistent cache (TECOMP_CACHE=0)
    tc.config.cache = True                     # back to TECOMP_CACHE_DIR / ~/.cache/tecomp
    tc.config.kernel_cache_size = 64           # compiled kernels kept in memory (LRU)
    tc.config.cache_info()                     # directory, status, entries, bytes
    tc.config.clear_cache()                    # remove the persistent cache's entries

The environment gives the defaults (``TECOMP_CACHE_DIR``, ``TECOMP_CACHE=0``), read when the
cache is first used; an assignment here wins over them for the rest of the process.  The
object holds no state of its own: each attribute reads and sets the caches themselves
(:mod:`tecomp.codegen.disk_cache`, :data:`tecomp.codegen.cache.KERNELS`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import TecompError


class Config:
    """The process's cache settings (one instance: ``tc.config``)."""

    __slots__ = ()

    @property
    def cache_dir(self) -> Path | None:
        """The persistent cache's directory (None: the persistent cache is off)."""
        from .codegen.disk_cache import default_cache

        store = default_cache()
        return None if store is None else store.directory

    @cache_dir.setter
    def cache_dir(self, directory: str | os.PathLike | None) -> None:
        from .codegen.disk_cache import set_default_cache

        if directory is not None and not isinstance(directory, (str, os.PathLike)):
            raise TecompError(f"tc.config.cache_dir: expected a path or None, got {directory!r}")
        set_default_cache(None if directory is None else Path(directory).expanduser())

    @property
    def cache(self) -> bool:
        """Whether kernels are stored in and loaded from the persistent cache."""
        return self.cache_dir is not None

    @cache.setter
    def cache(self, on: bool) -> None:
        from .codegen.disk_cache import configured_dir, set_default_cache

        if not isinstance(on, bool):
            raise TecompError(f"tc.config.cache: expected True or False, got {on!r}")
        if not on:
            set_default_cache(None)
        elif not self.cache:
            set_default_cache(configured_dir(respect_off=False))

    @property
    def kernel_cache_size(self) -> int:
        """How many compiled kernels the process keeps in memory (least recently used go)."""
        from .codegen.cache import KERNELS

        return KERNELS.maxsize

    @kernel_cache_size.setter
    def kernel_cache_size(self, n: int) -> None:
        from .codegen.cache import KERNELS

        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TecompError(f"tc.config.kernel_cache_size: expected an integer >= 1, got {n!r}")
        KERNELS.resize(n)

    def cache_info(self) -> dict[str, Any]:
        """The persistent cache's directory, status, entry count and size in bytes."""
        from .codegen.disk_cache import default_cache

        store = default_cache()
        if store is None:
            return {"directory": None, "entries": 0, "bytes": 0, "status": "off"}
        return store.info()

    def clear_cache(self) -> int:
        """Remove the persistent cache's entries (and the in-memory kernels); returns how many
        files were removed."""
        from .codegen.cache import KERNELS
        from .codegen.disk_cache import default_cache

        KERNELS.clear()
        store = default_cache()
        return 0 if store is None else store.clear()

    def __repr__(self) -> str:
        return (f"tc.config(cache_dir={self.cache_dir!r}, "
                f"kernel_cache_size={self.kernel_cache_size})")


config = Config()
