"""Remembered lowered programs: a warm ``tc.build`` skips zero elimination, lowering and bounds.

``tc.build`` turns the user's tensor program into a bounds-checked loop program (zero
elimination, simplification, lowering, the bounds pass: :func:`tecomp.pipeline.build`) before
the target compiles it.  Those passes are pure functions of the tensor program and of the
build's options, so their result is stored in the persistent cache
(:mod:`tecomp.codegen.disk_cache`) under a key computed from the tensor program *before* any
pass runs (:func:`program_key`); a later process that builds the same program loads the
loop program from there and hands it to the target, whose own caches then give the kernel.

The key covers everything the passes read: every node of the output tensors' DAG with all
its fields (names, shapes, dtypes, expression bodies, attributes such as ``optimize=False``'s
mark), the data of constant tensors (a sha256 of their bytes), which objects are shared, the
inputs in order, the kernel's name, ``check_bounds``, the target's name, and a digest of the
source of ``tecomp/``, ``passes/`` and ``solvers/``.  A node of a kind the key does not know
(anything but frozen dataclasses, tuples, dicts of str, NumPy arrays and plain scalars) makes
the program unkeyable: it is then built without this cache.  One exception: a function in a
tensor's attributes (an op's own reverse-mode rule, ``attrs["vjp"]``) is written as
``<function>``, because only differentiation calls it and no pass of a build does (the
gradient cache, :mod:`tecomp.gradient_cache`, which does differentiate, refuses it).

Entries are data, never code: the loop program is written as a JSON list of nodes, each a
class name, resolved only among the dataclasses of :mod:`tecomp.expr`, :mod:`tecomp.loopir`
and :mod:`tecomp.passes.bounds_check`, and its fields; constants as raw bytes with dtype and
shape.  The same codec (:func:`encode`, :func:`decode`) writes tensor programs for
:mod:`tecomp.gradient_cache`: there a node may also be a reference to an object of the
program the key was computed from (``{"x": number}``, its number in :func:`dag_lines`), a
dict of str (``{"d": ...}``) or an array (``{"a": number}``, its bytes stored beside).
A program is stored only when decoding what was written gives back the same structure
(:func:`~tecomp.codegen.cache.structural_lines`), and an entry that does not decode is a miss.
The entry also records the structural digest of the loop program, which the target's key of
it needs (:func:`~tecomp.codegen.cache.remember_digest`).

``tc.pass_log()`` records the passes that run, so inside it this cache is not consulted.
The persistent cache's off switch turns this cache off too.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .codegen.cache import remember_digest, structural_digest, structural_lines
from .codegen.disk_cache import DiskCache, default_cache
from .codegen.target import source_digest
from .expr import field_names, field_prefixes
from .loopir import Buffer, LoweredFunc
from .tensor import Shape, Tensor

#: the modules whose dataclasses an entry may name
MODULES = ("tecomp.expr", "tecomp.loopir", "tecomp.passes.bounds_check")
_SCALARS = (int, float, str, bool, type(None))
_TUPLES = (tuple, Shape)
_FUNCTIONS = (type(len), type(lambda: 0))
_FORMAT = "tecomp-program-1"


class Unkeyable(Exception):
    """A node the key or the entry format does not cover."""


def passes_version() -> str:
    """A digest of the source of every pass that runs before the target."""
    from . import passes, solvers

    return source_digest(str(Path(__file__).parent), str(Path(passes.__file__).parent),
                         str(Path(solvers.__file__).parent))


# ------------------------------------------------------------------ the key
def program_key(outputs: Sequence[Tensor], inputs: Sequence[Any], *, name: str | None,
                check_bounds: bool, target_name: str) -> str | None:
    """The key of the loop program :func:`tecomp.pipeline.build` makes of ``outputs``, or None
    when the program holds a node the key does not cover."""
    h = hashlib.sha256()
    for part in (_FORMAT, passes_version(), target_name, repr(name), repr(bool(check_bounds))):
        h.update(part.encode() + b"\0")
    try:
        lines, _ = dag_lines((tuple(outputs), tuple(inputs)), functions=True)
    except (Unkeyable, RecursionError):
        return None
    for line in lines:
        h.update(line.encode() + b"\n")
    return h.hexdigest()


#: how :func:`dag_lines` writes a dataclass node of each type met: its qualified name and
#: "(", and ``(field, "field=")`` for each field
_PLANS: dict[type, tuple[str, tuple[tuple[str, str], ...]]] = {}


def dag_lines(root: Any, *, functions: bool = False) -> tuple[list[str], list[Any]]:
    """Every distinct node of ``root`` once, children by number (as
    :func:`~tecomp.codegen.cache.structural_lines`, also through tensors, dicts and arrays),
    and the nodes in the order of their numbers.  ``functions``: a function is written as
    ``<function>`` (else it makes ``root`` unkeyable)."""
    lines: list[str] = []
    number: dict[int, int] = {}
    keep: list[Any] = []

    def ref(x: Any) -> str:
        t = type(x)
        plan = _PLANS.get(t)
        if plan is not None:  # a dataclass seen before (the common case)
            k = number.get(id(x))
            if k is not None:
                return f"#{k}"
            text = plan[0] + ", ".join([p + ref(getattr(x, f)) for f, p in plan[1]]) + ")"
            number[id(x)] = len(lines)
            keep.append(x)
            lines.append(text)
            return f"#{number[id(x)]}"
        if t in _SCALARS:
            return repr(x)
        if isinstance(x, tuple):  # values, written in place (as structural_lines does)
            return f"{t.__name__}(" + ", ".join([ref(y) for y in x]) + ")"
        if type(x) is dict:
            if not all(type(k) is str for k in x):
                raise Unkeyable("a dict with keys other than str")
            return "dict(" + ", ".join(f"{k!r}: {ref(x[k])}" for k in sorted(x)) + ")"
        if type(x) is np.ndarray:
            if x.dtype.hasobject:
                raise Unkeyable("an array of objects")
            data = np.ascontiguousarray(x)
            return (f"ndarray({data.dtype.str}, {data.shape}, "
                    f"{hashlib.sha256(data.tobytes()).hexdigest()})")
        if functions and type(x) in _FUNCTIONS:
            return "<function>"
        if not (is_dataclass(x) and not isinstance(x, type)):
            raise Unkeyable(f"a {t.__name__}")
        _PLANS[t] = (f"{t.__module__}.{t.__qualname__}(", field_prefixes(t))
        return ref(x)

    lines.append(ref(root))  # the root itself (a tuple is written in place, not numbered)
    return lines, keep


# ------------------------------------------------------------------ the entry
def encode(root: Any, *, modules: Sequence[str] = MODULES,
           externals: dict[int, int] | None = None,
           arrays: list[np.ndarray] | None = None) -> list[list[Any]]:
    """``root`` (dataclasses of ``modules``, tuples, scalars) as a JSON-able node list;
    the last node is the root, a child is ``{"r": number}``, a tuple a list.

    ``externals`` maps ``id()`` of objects to write as references (``{"x": number}``) instead
    of nodes; with ``arrays`` (a list it appends to), arrays are written as ``{"a": number}``
    and dicts of str as ``{"d": [[key, value], ...]}``."""
    nodes: list[list[Any]] = []
    number: dict[int, int] = {}
    keep: list[Any] = []

    def value(x: Any) -> Any:
        if type(x) in _SCALARS:
            return x
        if type(x) in _TUPLES:
            return [value(y) for y in x]
        if externals is not None and id(x) in externals:
            return {"x": externals[id(x)]}
        if arrays is not None and type(x) is dict and all(type(k) is str for k in x):
            return {"d": [[k, value(x[k])] for k in sorted(x)]}
        if arrays is not None and type(x) is np.ndarray and not x.dtype.hasobject:
            arrays.append(x)
            return {"a": len(arrays) - 1}
        if not (is_dataclass(x) and type(x).__module__ in modules
                and all(f.init for f in fields(x))):
            raise Unkeyable(f"a {type(x).__name__}")
        k = number.get(id(x))
        if k is None:
            args = [value(getattr(x, f)) for f in field_names(type(x))]
            k = number[id(x)] = len(nodes)
            keep.append(x)
            nodes.append([f"{type(x).__module__}:{type(x).__qualname__}", args])
        return {"r": k}

    nodes.append(["", [value(root)]])
    return nodes


def decode(nodes: Any, *, modules: Sequence[str] = MODULES, externals: Sequence[Any] = (),
           arrays: Sequence[np.ndarray] = ()) -> Any:
    """The object :func:`encode` wrote (raises :class:`Unkeyable` on anything else);
    ``externals`` and ``arrays`` are what its references number."""
    made: list[Any] = []
    classes: dict[str, type] = {}

    def index(x: Any, within: Sequence[Any]) -> Any:
        if type(x) is not int or not 0 <= x < len(within):
            raise Unkeyable("not a node")
        return within[x]

    def value(x: Any) -> Any:
        if type(x) in _SCALARS:
            return x
        if type(x) is list:
            return tuple(value(y) for y in x)
        if type(x) is not dict or len(x) != 1:
            raise Unkeyable("not a node")
        (kind, v), = x.items()
        if kind == "r":
            return index(v, made)
        if kind == "x":
            return index(v, externals)
        if kind == "a":
            return index(v, arrays)
        if kind == "d" and type(v) is list and all(
                type(p) is list and len(p) == 2 and type(p[0]) is str for p in v):
            return {p[0]: value(p[1]) for p in v}
        raise Unkeyable("not a node")

    if type(nodes) is not list or not nodes:
        raise Unkeyable("not a node list")
    for node in nodes[:-1]:
        if type(node) is not list or len(node) != 2 or type(node[0]) is not str \
                or type(node[1]) is not list:
            raise Unkeyable("not a node")
        cls = classes.get(node[0])
        if cls is None:
            cls = classes[node[0]] = _class(node[0], modules)
        made.append(cls(*[value(a) for a in node[1]]))
    last = nodes[-1]
    if type(last) is not list or len(last) != 2 or type(last[1]) is not list or len(last[1]) != 1:
        raise Unkeyable("not a node list")
    return value(last[1][0])


def _class(name: str, modules: Sequence[str]) -> type:
    module, _, qualname = name.partition(":")
    if module not in modules:
        raise Unkeyable(f"class {name!r}")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not (isinstance(cls, type) and is_dataclass(cls) and cls.__module__ == module):
        raise Unkeyable(f"class {name!r}")
    return cls


def same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` have the same structure, node by node."""
    if type(a) is tuple:
        return type(b) is tuple and len(a) == len(b) and all(map(same, a, b))
    if type(a) in _SCALARS:
        return type(a) is type(b) and a == b
    return type(a) is type(b) and structural_lines(a) == structural_lines(b)


def store(key: str, func: LoweredFunc, constants: dict[Buffer, np.ndarray], bounds: Any,
          cache: DiskCache | None = None) -> bool:
    """Write the pipeline's result under ``key``; False when it cannot be written faithfully."""
    cache = cache or default_cache()
    if cache is None:
        return False
    bufs = tuple(constants)
    arrays = [np.ascontiguousarray(constants[b]) for b in bufs]
    root = (func, bufs, bounds)
    try:
        text = json.dumps(encode(root))
        if not same(decode(json.loads(text)), root):
            return False
    except (Unkeyable, RecursionError, TypeError, ValueError):
        return False
    entry: dict[str, bytes | str] = {"program": text, "constants": json.dumps(
        [[a.dtype.str, list(a.shape)] for a in arrays]), "digest": structural_digest(func)}
    for n, a in enumerate(arrays):
        if a.dtype.hasobject:
            return False
        entry[f"constant{n}"] = a.tobytes()
    return cache.put(key, entry)


def load(key: str, cache: DiskCache | None = None
         ) -> tuple[LoweredFunc, dict[Buffer, np.ndarray], Any] | None:
    """``(func, constants, bounds)`` stored under ``key``, or None (missing or not decodable)."""
    cache = cache or default_cache()
    entry = cache.get(key) if cache is not None else None
    if entry is None or not isinstance(entry.get("program"), str) \
            or not isinstance(entry.get("constants"), str):
        return None
    try:
        func, bufs, bounds = decode(json.loads(entry["program"]))
        specs = json.loads(entry["constants"])
        if not isinstance(func, LoweredFunc) or len(specs) != len(bufs):
            return None
        constants = {}
        for n, (b, (dtype, shape)) in enumerate(zip(bufs, specs)):
            raw = entry.get(f"constant{n}")
            if not isinstance(raw, bytes) or not isinstance(b, Buffer):
                return None
            dt = np.dtype(dtype)
            if dt.hasobject:
                return None
            arr = np.frombuffer(raw, dtype=dt).reshape(shape)
            arr.flags.writeable = False
            constants[b] = arr
    except (Unkeyable, RecursionError, TypeError, ValueError, KeyError):
        return None
    digest = entry.get("digest")
    if isinstance(digest, str):  # the target's key of func needs no second walk
        remember_digest(func, digest)
    return func, constants, bounds
