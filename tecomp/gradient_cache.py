"""Remembered gradients: a warm ``tc.gradient`` runs neither reverse mode nor zero elimination.

``tc.gradient(output, inputs, head)`` builds the adjoints with reverse mode and optimises
them (zero elimination, simplification: :func:`tecomp.pipeline.differentiate`).  Both are
pure functions of the tensor program, so their result -- the optimised gradient tensors --
is stored in the persistent cache (:mod:`tecomp.codegen.disk_cache`) under a key computed
from the program *before* any pass runs (:func:`gradient_key`); a later process that asks
for the same gradient decodes the tensors from there.

The key covers what the passes read: every node of the DAG of ``output``, the ``inputs`` in
order and the ``head`` (the default head of ones included) with all their fields, the data of
constant tensors, ``optimize``, and a digest of the source of ``tecomp/``, ``passes/`` and
``solvers/`` (:func:`tecomp.program_cache.passes_version`).  Custom derivatives are code the
key cannot cover: a call with ``overrides``, or a program with a tensor that carries its own
rule (``attrs["vjp"]``) or any other object the key does not know, is differentiated without
this cache.

What is stored are the gradient tensors with every object of the keyed program they share
(the placeholders, the forward stages, the head, the size variables) written as a reference
to that object's number in the key's walk (:func:`tecomp.program_cache.dag_lines`), so the
tensors decoded in a later process read that process's own placeholders and forward stages:
the same graph ``tc.gradient`` would have returned, with the same names, shapes and dtypes,
and the same ``tc.show``, ``tc.lower`` and kernels.  Entries are data, never code (a JSON node
list resolved only among the dataclasses of :mod:`tecomp.expr` and :mod:`tecomp.tensor`,
array bytes beside it), in the same checksummed, owner-checked, atomically written cache
files as compiled kernels; an entry is stored only when decoding what was written gives back
the same structure, and one that does not decode is a miss (the gradient is computed again
and rewritten).

``tc.pass_log()`` records the passes that run, so inside it this cache is not consulted; the
persistent cache's off switch (``TECOMP_CACHE=0``) turns it off too.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

import numpy as np

from .codegen.disk_cache import DiskCache, default_cache
from .program_cache import Unkeyable, dag_lines, decode, encode, passes_version, same
from .tensor import Tensor

#: the modules whose dataclasses a gradient entry may name
MODULES = ("tecomp.expr", "tecomp.tensor")
_FORMAT = "tecomp-gradient-1"


def gradient_key(output: Tensor, inputs: Sequence[Tensor], head: Tensor, *,
                 optimize: bool) -> tuple[str, list[Any]] | None:
    """The key of the gradient of ``output`` w.r.t. ``inputs`` with ``head``, and the keyed
    program's objects in the order the entry numbers them; None when the program holds
    something the key does not cover."""
    h = hashlib.sha256()
    for part in (_FORMAT, passes_version(), repr(bool(optimize))):
        h.update(part.encode() + b"\0")
    try:
        lines, nodes = dag_lines((output, tuple(inputs), head))
    except (Unkeyable, RecursionError):
        return None
    for line in lines:
        h.update(line.encode() + b"\n")
    return h.hexdigest(), nodes


def store(key: str, nodes: Sequence[Any], grads: Sequence[Tensor],
          cache: DiskCache | None = None) -> bool:
    """Write ``grads`` under ``key`` (``nodes``: the keyed program's objects, as
    :func:`gradient_key` returned them); False when they cannot be written faithfully."""
    cache = cache or default_cache()
    if cache is None:
        return False
    externals = {id(x): n for n, x in enumerate(nodes)}
    arrays: list[np.ndarray] = []
    root = tuple(grads)
    try:
        text = json.dumps(encode(root, modules=MODULES, externals=externals, arrays=arrays))
        data = [np.ascontiguousarray(a) for a in arrays]
        if not same(decode(json.loads(text), modules=MODULES, externals=nodes,
                           arrays=data), root):
            return False
    except (Unkeyable, RecursionError, TypeError, ValueError):
        return False
    entry: dict[str, bytes | str] = {"gradient": text, "arrays": json.dumps(
        [[a.dtype.str, list(a.shape)] for a in data])}
    for n, a in enumerate(data):
        entry[f"array{n}"] = a.tobytes()
    return cache.put(key, entry)


def load(key: str, nodes: Sequence[Any], cache: DiskCache | None = None
         ) -> list[Tensor] | None:
    """The gradient tensors stored under ``key``, reading ``nodes`` (the objects of this
    process's keyed program), or None (missing or not decodable)."""
    cache = cache or default_cache()
    entry = cache.get(key) if cache is not None else None
    if entry is None or not isinstance(entry.get("gradient"), str) \
            or not isinstance(entry.get("arrays"), str):
        return None
    try:
        specs = json.loads(entry["arrays"])
        arrays = []
        for n, (dtype, shape) in enumerate(specs):
            raw, dt = entry.get(f"array{n}"), np.dtype(dtype)
            if not isinstance(raw, bytes) or dt.hasobject:
                return None
            arr = np.frombuffer(raw, dtype=dt).reshape(shape)  # read-only, as constants are
            arrays.append(arr)
        grads = decode(json.loads(entry["gradient"]), modules=MODULES, externals=nodes,
                       arrays=arrays)
    except (Unkeyable, RecursionError, TypeError, ValueError, KeyError):
        return None
    if type(grads) is not tuple or not all(isinstance(g, Tensor) for g in grads):
        return None
    return list(grads)
