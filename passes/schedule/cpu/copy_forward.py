"""Copy forwarding: a stage stored in its own order and then copied into the output in another
stores into the output directly (for :mod:`.column_blocks`).

The butterfly chain computes its last factor as a stage ``S[i, l, j]`` (its loops then keep
the factor's input rows in cache, :func:`tecomp.ops.butterfly_chain`) and copies it into the
result in row order, ``Y[r] = S[r // (b·d), r % d, r // d % b]``.  Within a block of columns
that copy reads and writes a block's part of the whole result once more.  When the copy's
read is a bijection onto ``S``'s elements whose inverse is affine -- here ``r = i·b·d + j·d +
l`` -- the stage that writes ``S`` stores each value at its place in ``Y`` instead (store
forwarding through an index map, as a compiler forwards a store to the load that reads it),
and both the copy and ``S`` go::

    S[t, i, l, j, n] = f(i, l, j, n)              Y[i·b·d + j·d + l, nb·B + n] = f(i, l, j, n)
    Y[r, nb·B + n] = S[t, r // (b·d), r % d, r // d % b, n]

Legality.  The copy is a perfect nest of constant bounds whose one store writes a buffer
that is not an intermediate of the block with the value of one load of intermediate ``S``
at ``[t, e_1, ..., e_k, n]`` (the block's chunk, rows, the column lane); ``S`` is stored by
exactly one other nest, with bare loop variables (or constants) for its rows, and read by
the copy alone.  Evaluated over the copy's whole iteration space, ``(e_1, ..., e_k)`` takes
every element of ``S`` exactly once, and every index of the copy's store is one affine form
of ``(e_1, ..., e_k)`` at every point.  The copy is the last of the block's nests to touch
its output and ``S``.  Then the producer writes each value where the copy would have put
it, and nothing reads ``S`` in between.
"""

from __future__ import annotations

import numpy as np

from tecomp import expr as E
from tecomp.loopir import Buffer, BufferLoad, For, Stmt, Store
from tecomp.stmt_functor import StmtMutator, subst_expr, walk_stmt

from .row_groups import _buffers, _chain, _evaluate, _grid, _loads

#: forward stage-then-copy pairs (False: keep the copy; an A/B switch)
COPY_FORWARD = True


def forward_copies(nests: list[Stmt], temps: set[Buffer]) -> tuple[list[Stmt], set[Buffer]]:
    """``nests`` with each qualifying copy folded into the store of the stage it copies (see
    the module doc), and the intermediates no longer needed."""
    if not COPY_FORWARD:
        return nests, set()
    out = list(nests)
    dropped: set[Buffer] = set()
    for pos in range(len(out) - 1, -1, -1):
        found = _forward(out, pos, temps)
        if found is not None:
            producer, new = found
            dropped.add(_copied(out[pos]))
            out[producer] = new
            del out[pos]
    return out, dropped


def _copied(s: Stmt) -> Buffer:
    _, store = _chain(s)
    assert store is not None and isinstance(store.value, BufferLoad)
    return store.value.buffer


def _forward(nests: list[Stmt], pos: int, temps: set[Buffer]) -> tuple[int, Stmt] | None:
    """``(index of the producer, its rewritten nest)`` when ``nests[pos]`` is a copy that can
    be forwarded, else None."""
    loops, store = _chain(nests[pos])
    if store is None or store.reduce is not None or store.buffer in temps \
            or not isinstance(store.value, BufferLoad) or store.value.buffer not in temps:
        return None
    S, load = store.value.buffer, store.value
    lane = loops[-1] if loops and isinstance(loops[-1], For) else None
    if lane is None or load.indices[-1] != lane.var or len(load.indices) < 3:
        return None
    others = [k for k, s in enumerate(nests) if k != pos and S in _buffers(s)]
    if len(others) != 1 or any(store.buffer in _buffers(s) for s in nests[pos + 1:]):
        return None
    producer = others[0]
    if producer > pos:
        return None
    writes = [x for x in walk_stmt(nests[producer]) if isinstance(x, Store) and x.buffer == S]
    if len(writes) != 1 or writes[0].reduce is not None \
            or any(ld.buffer == S for ld in _loads(writes[0].value)):
        return None
    target = writes[0]
    rows = load.indices[1:-1]
    grid = _grid(loops)
    if grid is None:
        return None
    element = [_evaluate(e, grid) for e in rows]
    places = [_evaluate(e, grid) for e in store.indices[:-1]]
    if any(x is None for x in element + places):
        return None
    shape = np.broadcast_shapes(*[x.shape for x in element + places])
    element = [np.broadcast_to(x, shape).ravel() for x in element]
    places = [np.broadcast_to(x, shape).ravel() for x in places]
    extents = [int(d.value) if isinstance(d, E.Const) else None for d in S.shape[1:-1]]
    if None in extents or any((x < 0).any() or (x >= n).any() for x, n in zip(element, extents)):
        return None
    flat = np.ravel_multi_index(element, extents)
    if flat.size != int(np.prod(extents)) or not (np.bincount(flat, minlength=flat.size)
                                                   == 1).all():
        return None  # not every element of S exactly once
    forms = [_affine(p, element) for p in places]
    if any(f is None for f in forms):
        return None
    if not all(isinstance(x, E.Const) or _loop_var(x, nests[producer])
               for x in target.indices[1:-1]):
        return None
    column = subst_expr(store.indices[-1], {lane.var: target.indices[-1]})
    where = tuple(_build(f, target.indices[1:-1]) for f in forms) + (column,)
    new = _Retarget(target, Store(store.buffer, where, target.value)).visit(nests[producer])
    return producer, new


def _loop_var(x: E.Expr, nest: Stmt) -> bool:
    return isinstance(x, E.Var) and any(isinstance(s, For) and s.var == x
                                        for s in walk_stmt(nest))


def _affine(values: np.ndarray, element: list[np.ndarray]) -> tuple[int, list[int]] | None:
    """``(c, [a_1, ...])`` with ``values == c + sum a_k element_k`` at every point, or None."""
    zero = np.flatnonzero(np.all([e == 0 for e in element], axis=0))
    if zero.size == 0:
        return None
    c = int(values[zero[0]])
    coefs = []
    for k in range(len(element)):
        unit = np.all([e == (1 if m == k else 0) for m, e in enumerate(element)], axis=0)
        at = np.flatnonzero(unit)
        coefs.append(int(values[at[0]]) - c if at.size else 0)
    fitted = c + sum(a * e for a, e in zip(coefs, element))
    return (c, coefs) if np.array_equal(fitted, values) else None


def _build(form: tuple[int, list[int]], indices: tuple[E.Expr, ...]) -> E.Expr:
    c, coefs = form
    out: E.Expr = E.Const(c, "int64")
    for a, x in zip(coefs, indices):
        if a == 0 or (isinstance(x, E.Const) and x.value == 0):
            continue
        term = x if a == 1 else E.Mul(x, E.Const(a, "int64"), "int64")
        out = term if isinstance(out, E.Const) and out.value == 0 else E.Add(out, term, "int64")
    return out


class _Retarget(StmtMutator):
    def __init__(self, old: Store, new: Store) -> None:
        self.old, self.new = old, new

    def visit_Store(self, s: Store) -> Stmt:
        return self.new if s is self.old else s


__all__ = ["COPY_FORWARD", "forward_copies"]
