"""Recycled memory for large kernel results.

A result of many megabytes is, for glibc, a fresh ``mmap`` on every call (above its mmap
threshold, at most 32 MiB) and an ``munmap`` when NumPy frees it, so each call first takes a
page fault per page while the kernel zeroes it, then writes it again: the gradient of a
4096x4096 float32 row sum (``dX[i, j] = G[i]``, a 64 MiB broadcast) took 12.2 ms into a fresh
array and 7.1 ms into one reused (``out=``), one thread, the same loaded machine.

:class:`ResultPool` keeps the buffers of released results, up to a byte budget, and hands
one back when a result of the same size is wanted again.  A result is a view of a pooled
byte buffer through a ``ctypes`` array over its (64-byte aligned) data, the result's
``base``; every view NumPy makes of it keeps that object alive, and a ``weakref.finalize`` on
it returns the buffer to the pool once the last array using the memory is gone.  So a buffer
is reused only when nothing can read it any more; a result the caller keeps is never touched.
Raw addresses taken from an array (``ctypes.data``) and used after it was freed are as
invalid as without the pool.

Where a result starts.  x86 cores decide whether a load may pass an earlier store that is
still in flight from the low 12 address bits (a 4 KiB page offset) before the full address
is known; a load whose page offset matches a pending store's waits for it ("4K aliasing").
A streaming kernel ``out[i] = f(x[i])`` with ``out`` a little ahead of ``x`` modulo 4 KiB makes
every load of ``x`` match the store issued just before it, and NumPy's large arrays start 16
bytes past a page while a result aligned to 64 bytes starts 64 past one: GELU on 2048x2048
float32, one thread, took 2.9-3.0 ms with ``out - x`` = 48 or 64 bytes (mod 4 KiB) and
2.3-2.5 ms at 0 or 2048.  :func:`placement` puts a result half a page from the kernel's
largest input (64-byte aligned), which no store/load pair of such a loop can match.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import deque

import numpy as np

__all__ = ["PAGE_SLACK", "POOL_MIN_BYTES", "POOL_MAX_BYTES", "ResultPool", "RESULTS", "placement"]

POOL_MIN_BYTES = 4 << 20  # smaller results: glibc's heap reuses their memory by itself
POOL_MAX_BYTES = 256 << 20  # released buffers kept at most (oldest dropped first)
_PAGE = 4096  # the address bits (12) that a load's early store check compares
PAGE_SLACK = _PAGE + 64  # extra bytes of a result's buffer: room to choose where it starts


def placement(raw: int, near: int) -> int:
    """The offset into a buffer at address ``raw`` (with :data:`PAGE_SLACK` spare bytes) of a
    64-byte aligned start half a page (modulo 4 KiB) from the address ``near`` (a kernel's
    largest input; 0: none, then just the first 64-byte boundary)."""
    if not near:
        return -raw % 64
    off = (near + _PAGE // 2 - raw) % _PAGE
    return off + (-(raw + off) % 64)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class ResultPool:
    """Byte buffers of released results, reused by size (a bounded cache)."""

    def __init__(self, max_bytes: int = POOL_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._free: deque[np.ndarray] = deque()
        self._held = 0
        self._lock = threading.RLock()  # a finaliser may run inside take() (GC)

    @property
    def held_bytes(self) -> int:
        """Bytes of released buffers the pool keeps now."""
        return self._held

    def _take(self, size: int) -> np.ndarray | None:
        with self._lock:
            for pos in range(len(self._free) - 1, -1, -1):
                raw = self._free[pos]
                if raw.nbytes == size:
                    del self._free[pos]
                    self._held -= size
                    return raw
        return None

    def _give(self, raw: np.ndarray) -> None:
        with self._lock:
            self._free.append(raw)
            self._held += raw.nbytes
            while self._held > self.max_bytes and self._free:
                self._held -= self._free.popleft().nbytes

    def clear(self) -> None:
        """Drop every released buffer."""
        with self._lock:
            self._free.clear()
            self._held = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, nbytes: int,
              near: int = 0) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` (``nbytes`` bytes), 64-byte
        aligned and placed away from the address ``near`` (:func:`placement`), in a recycled
        buffer when one of the size is free."""
        size = nbytes + PAGE_SLACK
        raw = self._take(size)
        if raw is None:
            raw = np.empty(size, dtype=np.uint8)
        start = _address(raw)
        start += placement(start, near)
        owner = (ctypes.c_char * nbytes).from_address(start)
        weakref.finalize(owner, self._give, raw).atexit = False
        return np.ndarray(shape, dtype, owner)


RESULTS = ResultPool()  # the process's pool (bounded: POOL_MAX_BYTES)
