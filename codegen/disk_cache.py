"""A persistent, process-safe cache of compiled kernels on disk.

A second process that builds a program compiled before loads its machine code from here and
skips LLVM entirely (emit is cheap; optimisation and code generation are not).  Entries are
keyed by a hex digest the caller computes; for the LLVM backend it covers the structural hash
of the lowered program, the compile options, the llvmlite and LLVM versions and the host CPU
name and features (:func:`tecomp.codegen.llvm.compile_function`), so a cache shared by
machines or library versions never hands out code built for another.  The same directory holds
the parallel-loop runtime's object code (:func:`tecomp.codegen.llvm.jit.runtime_address`) and
the verdicts of the bounds pass (:mod:`tecomp.proof_cache`), so that a fresh process
that finds its kernel here runs neither LLVM nor isl.

Layout: one file per key, ``<dir>/<key[:2]>/<key>.bin``, holding::

    MAGIC (8 bytes) | sha256 of the body (32 bytes) | body = zlib(records)

where each record is a name and a ``bytes`` or ``str`` value, length-prefixed (no pickle: a
file is data, never code to run at load time).  Safety:

* Concurrent writers: each writer writes a private temporary file in the same directory and
  renames it over the destination (``os.replace`` is atomic on POSIX), so a reader sees either
  no file or a whole one, never a partial write; two writers of one key write the same
  content, and the last rename wins.
* Corrupt or truncated files (a crash, a full disk, a foreign file): the magic and the digest
  are checked before decoding, and a file that fails either check (or does not decode) is
  treated as a miss and removed.
* Write failures (read-only directory, full disk) are ignored: the cache is an optimisation.

The default directory is ``$XDG_CACHE_HOME/tecomp`` (``~/.cache/tecomp`` when unset), read
when the cache is first used; :func:`set_default_cache` changes it or (``None``) turns the
persistent cache off.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Mapping

MAGIC = b"TECOMPK1"
_DIGEST = 32


class DiskCache:
    """Byte blobs by key in ``directory`` (created on first write)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        if not key or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"disk cache keys are lowercase hex digests, got {key!r}")
        return self.directory / key[:2] / f"{key}.bin"

    def get(self, key: str) -> dict[str, bytes | str] | None:
        """The entry stored under ``key``, or None (missing, unreadable or corrupt)."""
        p = self.path(key)
        try:
            raw = p.read_bytes()
        except OSError:
            self._count(hit=False)
            return None
        entry = _decode(raw)
        if entry is None:  # corrupt: drop it so that the next build rewrites it
            try:
                p.unlink()
            except OSError:
                pass
        self._count(hit=entry is not None)
        return entry

    def put(self, key: str, entry: Mapping[str, bytes | str]) -> bool:
        """Store ``entry`` under ``key`` atomically; False when it could not be written."""
        p = self.path(key)
        data = _encode(entry)
        tmp = None
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=p.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
            return True
        except OSError:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            return False

    def clear(self) -> None:
        """Remove every entry (files this cache wrote; other files are left alone)."""
        if not self.directory.is_dir():
            return
        for p in self.directory.glob("??/*.bin"):
            try:
                p.unlink()
            except OSError:
                pass

    def _count(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1


def _encode(entry: Mapping[str, bytes | str]) -> bytes:
    parts = []
    for k, v in entry.items():
        if not isinstance(k, str) or not isinstance(v, (bytes, str)):
            raise TypeError("disk cache entries map str to bytes or str")
        name = k.encode()
        kind, data = (b"s", v.encode()) if isinstance(v, str) else (b"b", v)
        parts.append(struct.pack("<I", len(name)) + name + kind + struct.pack("<Q", len(data)))
        parts.append(data)
    body = zlib.compress(b"".join(parts), 1)
    return MAGIC + hashlib.sha256(body).digest() + body


def _decode(raw: bytes) -> dict[str, bytes | str] | None:
    head = len(MAGIC) + _DIGEST
    if len(raw) < head or raw[:len(MAGIC)] != MAGIC:
        return None
    body = raw[head:]
    if hashlib.sha256(body).digest() != raw[len(MAGIC):head]:
        return None
    try:
        data = zlib.decompress(body)
        entry: dict[str, bytes | str] = {}
        pos = 0
        while pos < len(data):
            (n,) = struct.unpack_from("<I", data, pos)
            name = data[pos + 4:pos + 4 + n].decode()
            kind = data[pos + 4 + n:pos + 5 + n]
            (m,) = struct.unpack_from("<Q", data, pos + 5 + n)
            start = pos + 13 + n
            value = data[start:start + m]
            if kind not in (b"s", b"b") or len(value) != m:
                return None
            entry[name] = value.decode() if kind == b"s" else value
            pos = start + m
    except (zlib.error, struct.error, UnicodeDecodeError):
        return None
    return entry


def _default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tecomp"


_default: list[DiskCache | None] = [None]
_default_set = [False]


def default_cache() -> DiskCache | None:
    """The persistent cache ``tc.build`` uses (None when turned off)."""
    if not _default_set[0]:
        _default[0] = DiskCache(_default_dir())
        _default_set[0] = True
    return _default[0]


def set_default_cache(directory: str | os.PathLike | DiskCache | None) -> DiskCache | None:
    """Use ``directory`` (or a :class:`DiskCache`) for kernels from now on; None turns the
    persistent cache off.  Returns the previous cache."""
    old = default_cache()
    if directory is None or isinstance(directory, DiskCache):
        _default[0] = directory
    else:
        _default[0] = DiskCache(directory)
    _default_set[0] = True
    return old
