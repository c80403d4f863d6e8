"""The target interface: what the pipeline asks of a code generator.

A :class:`Target` (after TVM's ``Target`` and tinygrad's ``Renderer`` subclasses) has a
``name``, a ``description`` of the machine its code is for (CPU triple and features, GPU
architecture), a ``version`` (a digest of the source of the code generator and of its
schedule), a ``key`` for a program and the options it is built with, and ``build``, which
turns a lowered program into a kernel.  The target does not choose its schedule: the pipeline
(:mod:`tecomp.pipeline`) supplies it as a :class:`Schedule`, a function of the loop IR with a
digest of its source, so that code generators import nothing from ``passes/``.

Keys.  Both targets key a program the same way (:meth:`Target.key`): a structural digest of
the lowered program as the pipeline hands it over (after bounds checks, before the schedule),
the target's name, its options, its description and its version.  The schedule is a pure
function of that program and the target's description, so the digest of its source in the
version stands for the scheduled program; keying before the schedule lets a warm build (a
program compiled before, in memory or on disk) skip scheduling altogether.

Versions are digests of the source files of the packages involved, computed once per process
(:func:`source_digest`): a changed code generator or schedule never reuses code an older one
compiled, and no list of files is kept by hand.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, Sequence

from ..loopir import LoweredFunc
from .cache import program_key


@lru_cache(maxsize=32)
def source_digest(*folders: str) -> str:
    """A digest of every ``.py`` file under ``folders`` (names relative to the folder, and
    contents), computed once per process for each set of folders.

    Reading and hashing every file costs a fresh process milliseconds, so the digest is also
    remembered in the persistent cache under the files' status (path, size, modification and
    change times in nanoseconds, inode: :func:`source_status`): any write to a file changes
    its change time, so a changed file is read again, and a file added or removed changes the
    list."""
    from .disk_cache import default_cache

    store = default_cache()
    status = source_status(folders) if store is not None else ""
    if store is not None:
        entry = store.get(status)
        digest = entry.get("digest") if entry is not None else None
        if isinstance(digest, str) and len(digest) == 16:
            return digest
    h = hashlib.sha256()
    for folder in folders:
        root = Path(folder)
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    digest = h.hexdigest()[:16]
    if store is not None:
        store.put(status, {"digest": digest})
    return digest


def source_status(folders: Sequence[str]) -> str:
    """A digest of the status of every ``.py`` file under ``folders`` (the key under which
    :func:`source_digest` remembers their contents' digest)."""
    rows: list[str] = []

    def walk(folder: str) -> None:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    walk(e.path)
                elif e.name.endswith(".py"):
                    st = e.stat()
                    rows.append(f"{e.path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
                                f"\0{st.st_ino}")

    for folder in folders:
        rows.append(f"folder\0{os.path.abspath(folder)}")
        walk(folder)
    return hashlib.sha256(("source-status-1\n" + "\n".join(sorted(rows))).encode()).hexdigest()


@lru_cache(maxsize=32)
def file_digest(path: str) -> str:
    """A digest of one source file (a module outside the folders :func:`source_digest` reads
    that a target's code still depends on, such as the host description)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def package_folder(module_file: str) -> str:
    """The folder of the package whose module is ``module_file`` (give it ``__file__``)."""
    return str(Path(module_file).resolve().parent)


@dataclass(frozen=True)
class Schedule:
    """A target's schedule as the pipeline supplies it: ``run(func, **options)`` returns the
    scheduled program; ``version`` is a digest of the schedule's source."""

    run: Callable[..., Any]
    version: str


#: the schedule of a target built without one: the program is compiled as given
AS_GIVEN = Schedule(lambda func, **options: func, "as-given")


class Target:
    """A code generator: subclasses set ``name`` and implement ``description``,
    ``codegen_version`` and ``build``."""

    name = ""

    def __init__(self, schedule: Schedule | None = None) -> None:
        self.schedule = schedule or AS_GIVEN

    def description(self) -> str:
        """The machine the code is for (part of every key)."""
        raise NotImplementedError

    def codegen_version(self) -> str:
        """A digest of the code generator's own source."""
        raise NotImplementedError

    def version(self) -> str:
        """A digest of the code generator's and the schedule's source."""
        return f"{self.codegen_version()}+{self.schedule.version}"

    def preparing(self) -> ContextManager[None]:
        """A context around a whole build (lowering included) in which the target may
        prepare, in the background, what its first kernel will need; the background work
        is over when the context is left.  The default prepares nothing."""
        return nullcontext()

    def key(self, func: LoweredFunc, *options: str) -> str:
        """The key of ``func`` built for this target with ``options``."""
        return program_key(func, "|".join((self.name, *options)),
                           f"{self.description()}|{self.version()}")

    def build(self, func: LoweredFunc, *, inputs: Sequence[Any] | None = None,
              outputs: Sequence[Any] | None = None,
              hidden: Mapping[Any, Any] | None = None, single: bool | None = None,
              bounds: Any = None) -> Any:
        """A kernel for ``func``: scheduled with ``schedule``, then compiled."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<Target {self.name} {self.description()}>"
