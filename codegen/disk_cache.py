"""A persistent, process-safe cache of compiled kernels on disk.

A second process that builds a program compiled before loads its machine code from here and
skips LLVM entirely (emit is cheap; optimisation and code generation are not).  Entries are
keyed by a hex digest the caller computes; for the LLVM backend it covers the structural hash
of the lowered program, the compile options, the llvmlite and LLVM versions and the host CPU
name and features (:func:`tecomp.codegen.llvm.compile_function`), so a cache shared by
machines or library versions never hands out code built for another.  The same directory holds
the parallel-loop runtime's object code
(:func:`tecomp.codegen.llvm.runtime_code.runtime_address`) and the verdicts of the bounds
pass (:mod:`tecomp.proof_cache`), so that a fresh process that finds its kernel here runs
neither LLVM nor isl.

Layout: one file per key, ``<dir>/<key[:2]>/<key>.bin``, holding::

    MAGIC (8 bytes) | key length (2 bytes) | key | sha256(MAGIC | key | body) | body

with ``body = zlib(records)``, each record a name and a ``bytes`` or ``str`` value,
length-prefixed (no pickle: a file is data, never code to run at load time).

The cache holds machine code that is loaded and run, so it is trusted only as far as this
user alone can write it:

* Ownership: the directory is created with mode 0700 (its ``<key[:2]>`` folders too); the
  directory, the folder and the file of an entry must belong to the current user and must not
  be writable by the group or by others.  Otherwise the cache is bypassed (every lookup a miss,
  nothing written) and one :class:`~tecomp.errors.CacheWarning` says why.
* Integrity: an entry is used only if its magic, its key (the key it was stored under must
  be the key asked for) and the sha256 of key and body all check; a corrupt, truncated or
  misplaced entry is removed, one warning is given and the caller rebuilds (and rewrites) it.
* Concurrent writers (threads or processes): each writes a private temporary file (mode 0600)
  in the entry's folder and renames it over the destination (``os.replace`` is atomic on
  POSIX), so a reader sees no file or a whole one; writers of one key write the same content
  and the last rename wins.
* Write failures (a read-only directory, a full disk): one warning, then no further writes
  from this process; entries already there are still read.  The cache is an optimisation:
  a build never fails because of it.

The directory is ``$TECOMP_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/tecomp``
(``~/.cache/tecomp`` when unset); ``TECOMP_CACHE=0`` turns the persistent cache off.  Both are
read when the cache is first used; :func:`set_default_cache` (and ``tc.config``) change them
from Python.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import tempfile
import threading
import warnings
import zlib
from pathlib import Path
from typing import Any, Mapping

from ..errors import CacheWarning

MAGIC = b"TECOMPK2"
_DIGEST = 32
_OFF = ("0", "false", "off", "no")


class DiskCache:
    """Byte blobs by key in ``directory`` (created, mode 0700, on first write)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._checked = False  # the directory's ownership and mode were checked
        self._bypass: str | None = None  # why the cache is not used (untrusted directory)
        self._readonly: str | None = None  # why nothing is written any more
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ trust
    def _warn(self, kind: str, message: str) -> None:
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        warnings.warn(f"tecomp cache {self.directory}: {message}", CacheWarning, stacklevel=4)

    def status(self) -> str | None:
        """None when the cache may be used, else why it is bypassed."""
        if not self._checked:
            reason = None
            try:
                st = os.stat(self.directory)
            except FileNotFoundError:
                return None  # nothing to trust or distrust yet: checked once it exists
            except OSError as err:
                st, reason = None, f"cannot be used ({err.strerror or err})"
            if st is not None:
                if not stat.S_ISDIR(st.st_mode):
                    reason = "is not a directory"
                else:
                    reason = untrusted(st, "the directory")
            self._bypass = reason
            self._checked = True
            if reason is not None:
                self._warn("bypass", f"{reason}; the persistent cache is not used")
        return self._bypass

    def path(self, key: str) -> Path:
        if not key or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"disk cache keys are lowercase hex digests, got {key!r}")
        return self.directory / key[:2] / f"{key}.bin"

    # ------------------------------------------------------------------ lookup and store
    def get(self, key: str) -> dict[str, bytes | str] | None:
        """The entry stored under ``key``, or None (missing, untrusted, unreadable or corrupt)."""
        p = self.path(key)
        if self.status() is not None:
            self._count(hit=False)
            return None
        raw = self._read(p)
        if raw is None:
            self._count(hit=False)
            return None
        entry = decode(raw, key)
        if entry is None:  # corrupt: drop it so that the next build rewrites it
            try:
                p.unlink()
            except OSError:
                pass
        if entry is None and not stale(raw):
            self._warn("corrupt", f"the entry {p.name} was corrupt (checksum, key or format); "
                       "it was removed and is rebuilt")
        self._count(hit=entry is not None)
        return entry

    def _read(self, p: Path) -> bytes | None:
        """The file's bytes, when the folder and the file are this user's alone."""
        try:
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        try:
            reason = untrusted(os.fstat(fd), f"the entry {p.name}") or \
                untrusted(os.stat(p.parent), f"the folder {p.parent.name}")
            if reason is not None:
                self._warn("entry", f"{reason}; such entries are not used")
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
        except OSError:
            return None
        finally:
            os.close(fd)

    def put(self, key: str, entry: Mapping[str, bytes | str]) -> bool:
        """Store ``entry`` under ``key`` atomically; False when it was not written."""
        p = self.path(key)
        data = encode(entry, key)
        if self._readonly is not None:
            return False
        if self.status() is not None:
            return False
        tmp = None
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self.status() is not None:  # what exists now (perhaps made by another user)
                return False
            p.parent.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=p.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
            return True
        except OSError as err:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            self._readonly = err.strerror or str(err)
            self._warn("write", f"cannot write ({self._readonly}); nothing more is stored in "
                       "this process")
            return False

    # ------------------------------------------------------------------ maintenance
    def clear(self) -> int:
        """Remove every entry (and stale temporary files); returns how many files went.
        Other files in the directory are left alone."""
        removed = 0
        if not self.directory.is_dir():
            return 0
        for pattern in ("??/*.bin", "??/.*.tmp"):
            for p in self.directory.glob(pattern):
                try:
                    p.unlink()
                    removed += 1
                except OSError:
                    pass
        return removed

    def info(self) -> dict[str, Any]:
        """What ``tecomp cache info`` prints: directory, status, entry count and bytes."""
        entries = size = 0
        if self.directory.is_dir():
            for p in self.directory.glob("??/*.bin"):
                try:
                    size += p.stat().st_size
                    entries += 1
                except OSError:
                    pass
        status = self.status() or self._readonly
        return {"directory": str(self.directory), "entries": entries, "bytes": size,
                "status": "usable" if status is None else status}

    def _count(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1


def untrusted(st: os.stat_result, what: str) -> str | None:
    """Why a file or directory with status ``st`` may not hold code this process runs, or
    None: it must belong to the current user and not be writable by group or others."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is not None and st.st_uid != uid:
        return f"{what} belongs to uid {st.st_uid}, not to the current user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by its group or by others (mode {st.st_mode & 0o777:o})"
    return None


# ---------------------------------------------------------------------------- file format
def encode(entry: Mapping[str, bytes | str], key: str) -> bytes:
    """The file content of ``entry`` stored under ``key``."""
    parts = []
    for k, v in entry.items():
        if not isinstance(k, str) or not isinstance(v, (bytes, str)):
            raise TypeError("disk cache entries map str to bytes or str")
        name = k.encode()
        kind, data = (b"s", v.encode()) if isinstance(v, str) else (b"b", v)
        parts.append(struct.pack("<I", len(name)) + name + kind + struct.pack("<Q", len(data)))
        parts.append(data)
    body = zlib.compress(b"".join(parts), 1)
    k = key.encode()
    return MAGIC + struct.pack("<H", len(k)) + k + _digest(k, body) + body


def stale(raw: bytes) -> bool:
    """Whether ``raw`` is an entry of an earlier format (replaced without a warning)."""
    return raw[:len(MAGIC) - 1] == MAGIC[:-1] and raw[:len(MAGIC)] != MAGIC


def _digest(key: bytes, body: bytes) -> bytes:
    return hashlib.sha256(MAGIC + key + b"\0" + body).digest()


def decode(raw: bytes, key: str) -> dict[str, bytes | str] | None:
    """The entry in ``raw`` if it is whole and was stored under ``key``, else None."""
    m = len(MAGIC)
    if len(raw) < m + 2 or raw[:m] != MAGIC:
        return None
    (n,) = struct.unpack_from("<H", raw, m)
    k = key.encode()
    head = m + 2 + n + _DIGEST
    if len(raw) < head or raw[m + 2:m + 2 + n] != k:
        return None
    body = raw[head:]
    if _digest(k, body) != raw[m + 2 + n:head]:
        return None
    try:
        data = zlib.decompress(body)
        entry: dict[str, bytes | str] = {}
        pos = 0
        while pos < len(data):
            (n,) = struct.unpack_from("<I", data, pos)
            name = data[pos + 4:pos + 4 + n].decode()
            kind = data[pos + 4 + n:pos + 5 + n]
            (size,) = struct.unpack_from("<Q", data, pos + 5 + n)
            start = pos + 13 + n
            value = data[start:start + size]
            if kind not in (b"s", b"b") or len(value) != size:
                return None
            entry[name] = value.decode() if kind == b"s" else value
            pos = start + size
    except (zlib.error, struct.error, UnicodeDecodeError):
        return None
    return entry


# ---------------------------------------------------------------------------- the default
def configured_dir(*, respect_off: bool = True) -> Path | None:
    """The directory the environment asks for (None: ``TECOMP_CACHE=0``, unless not
    ``respect_off``)."""
    if respect_off and os.environ.get("TECOMP_CACHE", "1").strip().lower() in _OFF:
        return None
    chosen = os.environ.get("TECOMP_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tecomp"


_default: list[DiskCache | None] = [None]
_default_set = [False]


def default_cache() -> DiskCache | None:
    """The persistent cache ``tc.build`` uses (None when turned off)."""
    if not _default_set[0]:
        d = configured_dir()
        _default[0] = None if d is None else DiskCache(d)
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


def reset_default_cache() -> DiskCache | None:
    """Read ``TECOMP_CACHE_DIR`` / ``TECOMP_CACHE`` again (as on first use); returns the
    previous cache."""
    old = default_cache()
    _default_set[0] = False
    return old
