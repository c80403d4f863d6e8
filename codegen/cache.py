"""An in-memory, thread-safe, bounded (LRU) cache of compiled kernels.

Keys are strings that identify a program completely: :func:`program_key` hashes a structural
text of the lowered program (every node with all its fields, each shared node once; see
:func:`structural_lines`) together with the target and the machine the code is generated
for.  Compiling is the expensive step (tens to hundreds of milliseconds), so a second
``tc.build`` of the same program reuses the compiled code.

When several threads ask for the same missing key at once, one compiles and the others wait
for its result instead of compiling it again.  A failed compile is not cached.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import is_dataclass
from typing import Any, Callable, Generic, TypeVar

from ..expr import field_prefixes
from ..loopir import LoweredFunc

V = TypeVar("V")


def program_key(func: LoweredFunc, target: str, machine: str = "") -> str:
    """A digest of ``func``'s structure, the target name and the machine description."""
    h = hashlib.sha256()
    for part in (target, machine, structural_digest(func)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# the last program digested and its digest: ``tc.build`` keys one program twice (its bounds
# verdict, then its kernel), and the structural walk is the costly part of a key
_last_digest: list[tuple[Any, str]] = [(None, "")]


def structural_digest(func: LoweredFunc) -> str:
    """The sha256 of :func:`structural_lines` of ``func`` (remembered for the last one)."""
    last, digest = _last_digest[0]
    if last is func:
        return digest
    h = hashlib.sha256()
    for line in structural_lines(func):
        h.update(line.encode())
        h.update(b"\n")
    digest = h.hexdigest()
    _last_digest[0] = (func, digest)
    return digest


def remember_digest(func: LoweredFunc, digest: str) -> None:
    """Take ``digest`` as :func:`structural_digest` of ``func`` (a program decoded from an
    entry that recorded the digest of the program it was written from, which decodes to the
    same structure): the next key of ``func`` skips the walk."""
    _last_digest[0] = (func, digest)


#: how :func:`structural_lines` writes a node of each type: a dataclass as ``(its name and
#: "(", ((field, "field="), ...))``, or one of the two markers below
_PLANS: dict[type, Any] = {}
_TUPLE, _OTHER = object(), object()


def _plan(t: type) -> Any:
    if is_dataclass(t) and not issubclass(t, type):
        plan: Any = (f"{t.__name__}(", field_prefixes(t))
    elif issubclass(t, tuple):
        plan = _TUPLE
    else:
        plan = _OTHER
    _PLANS[t] = plan
    return plan


def structural_lines(root: Any,
                     written: Callable[[Any, Callable[[Any], str]], str | None] | None = None,
                     by_value: type | tuple[type, ...] = ()) -> list[str]:
    """A text of ``root`` listing every distinct node once, children by number.

    Nodes are frozen dataclasses (expressions, statements, buffers); ``repr`` would print a
    shared subexpression once per use, which is exponential on deep DAGs such as gradients.
    Here each node object gets a number on first visit (``#k``) and later uses refer to it;
    numbering follows a deterministic depth-first order, so equal programs give equal texts.
    ``written(node, ref)``, when given, may write a node its own way (``ref`` writes a
    child): a text, or None for the default (the LLVM backend's loop bodies number their
    variables and buffers instead of naming them, :func:`.llvm.parallel.body_key`).
    Nodes of the types ``by_value`` (hashable, compared by value: expressions) are numbered
    by value instead, so that a tree whose equal subexpressions are one shared object and a
    tree where they are equal copies give one text.
    """
    lines: list[str] = []
    number: dict[Any, int] = {}
    keep: list[Any] = []  # keep visited objects alive so ids stay unique
    valued: dict[type, bool] = {}  # per node type: numbered by value

    def ref(x: Any) -> str:
        t = type(x)
        plan = _PLANS.get(t)
        if plan is None:
            plan = _plan(t)
        if plan is _TUPLE:
            return "(" + ", ".join([ref(y) for y in x]) + ")"
        if plan is _OTHER:
            return repr(x)  # str, int, float (repr keeps -0.0, nan, inf apart), bool, None
        by = valued.get(t)
        if by is None:
            by = valued[t] = bool(by_value) and issubclass(t, by_value)
        key = x if by else id(x)
        k = number.get(key)
        if k is None:
            text = written(x, ref) if written is not None else None
            if text is None:
                head, prefixes = plan
                text = head + ", ".join([p + ref(getattr(x, f)) for f, p in prefixes]) + ")"
            k = number[key] = len(lines)
            keep.append(x)
            lines.append(text)
        return f"#{k}"

    ref(root)
    return lines


class _Pending:
    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class CompileCache(Generic[V]):
    """Map keys to compiled objects; at most ``maxsize`` entries, least recently used evicted."""

    def __init__(self, maxsize: int = 256) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._data: OrderedDict[str, V] = OrderedDict()
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._data

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def resize(self, maxsize: int) -> None:
        """Keep at most ``maxsize`` entries from now on (the least recently used go now)."""
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        with self._lock:
            self.maxsize = maxsize
            while len(self._data) > maxsize:
                self._data.popitem(last=False)

    def get_or_compile(self, key: str, compile: Callable[[], V]) -> V:
        """The cached value of ``key``, or ``compile()``'s result (then cached)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            pending = self._pending.get(key)
            owner = pending is None
            if owner:
                pending = self._pending[key] = _Pending()
                self.misses += 1
            else:
                self.hits += 1
        assert pending is not None
        if not owner:
            pending.done.wait()
            if pending.error is not None:
                raise pending.error
            return pending.value
        try:
            value = compile()
        except BaseException as err:
            pending.error = err
            with self._lock:
                self._pending.pop(key, None)
            pending.done.set()
            raise
        pending.value = value
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
            self._pending.pop(key, None)
        pending.done.set()
        return value


# The process-wide cache tc.build uses: compiled code of the last DEFAULT_KERNELS programs
# built (least recently used evicted; ``tc.config.kernel_cache_size`` changes the bound, and
# evicted code is freed once no Kernel object refers to it).  ``clear()`` empties it.
DEFAULT_KERNELS = 256
KERNELS: CompileCache[Any] = CompileCache(DEFAULT_KERNELS)
