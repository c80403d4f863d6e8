"""Flattening a short multi-axis sum into one long reduction, staging strided reads (im2col).

The weight gradient of a stride-2 convolution sums over a 16 x 16 grid of the head::

    W_grad[co, ci, ky, kx] = sum(H[0, co, y, x] * X_pad[0, ci, 2*y + ky, 2*x + kx], (y, x))

Whatever the loop order, its innermost loop is short: ``x`` (16 steps, strided reads of
``X_pad``, one horizontal vector reduction per ``y``) or ``kx`` (3 steps).  As in the im2col
lowering of convolutions (Chellapilla, Puri & Simard, "High performance convolutional neural
networks for document processing", 2006), :func:`flatten_sums` turns the reduction axes into
one axis ``f`` over ``y * 16 + x`` and gives every read a unit stride in ``f``:

* a read whose trailing indices are exactly the reduction axes, in order, over dimensions of
  exactly their extents (``H[0, co, y, x]``) is already contiguous in ``f``: it reads
  ``H[0, co, f // 16, f % 16]``;
* any other read that uses a reduction axis is staged (only reads that a reduction axis steps
  by more than one element qualify, the strided reads that make the inner loops short and
  slow; a stage with another non-contiguous read is left alone): a gather stage ``G[ci, ky, kx, f] =
  X_pad[0, ci, 2*(f // 16) + ky, 2*(f % 16) + kx]`` indexed by the data axes the read uses and
  ``f``, read as ``G[ci, ky, kx, f]``.

The stage becomes ``W_grad[co, ci, ky, kx] = sum(H[0, co, f // 16, f % 16] * G[ci, ky, kx,
f], f)``: dot products of 256 contiguous elements (one core: 0.15 -> 0.05 ms, gather
included).

When it applies: the stage's body is a ``sum`` without ``where`` and without nested
reductions, over at least two reduction axes with constant bounds (``lo = 0``), whose
innermost extent is below ``max_inner`` while the whole sum has at least ``min_terms``
terms; the stage's last data axis has a constant extent below ``max_last`` (so neither the
plain order nor the "i, k, j" order of :mod:`.schedule.cpu.loop_order` has a long
innermost loop); every staged read is reused ``min_reuse`` times or more (the data axes it
does not use span that many points) and has at most ``max_gather`` elements.

Legality.  ``f -> (f // s_0, (f // s_1) % e_1, .., f % e_last)`` (``s_i`` the product of the
later extents) is a bijection from ``[0, prod e)`` onto the box of the reduction axes, so the
flat sum has exactly the original terms (in the same order: ``f`` increases
lexicographically); a gather stage holds exactly the values the read would load, for every
point the read is evaluated at.
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.functor import ExprMutator, free_vars, fresh_name, make_reduce, substitute, walk
from tecomp.tensor import ComputeOp, Tensor

from .affine_forms import coefficient


def const_int(e: E.Expr) -> int | None:
    return int(e.value) if isinstance(e, E.Const) else None


def decompose_index(f: E.Var, extents: list[int]) -> list[E.Expr]:
    """The reduction-axis values at flat index ``f`` (row-major over ``extents``)."""
    out = []
    stride = 1
    for n in range(len(extents) - 1, -1, -1):
        v = f if stride == 1 else E.floordiv(f, stride)
        out.append(v if n == 0 else E.mod(v, extents[n]))
        stride *= extents[n]
    return out[::-1]


def _contiguous(r: E.TensorRead, rvars: list[E.Var], extents: list[int]) -> bool:
    m = len(rvars)
    if len(r.indices) < m or list(r.indices[-m:]) != rvars:
        return False
    if [const_int(s) for s in r.tensor.shape[-m:]] != extents:
        return False
    return not any(free_vars(i) & set(rvars) for i in r.indices[:-m])


def _strided(r: E.TensorRead, rvars: list[E.Var]) -> bool:
    """Whether a reduction axis steps an index of ``r`` by more than one element."""
    return any(c is not None and abs(c) > 1 for i in r.indices for v in rvars
               for c in [coefficient(i, v)])


class Reads(ExprMutator):
    def __init__(self, mapping: dict[E.TensorRead, E.Expr]) -> None:
        super().__init__()
        self.mapping = mapping

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        return self.mapping.get(e, e)


def flatten_sums(stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                 inlined: set[int], *, max_inner: int = 32, min_terms: int = 64,
                 max_last: int = 8, min_reuse: int = 4,
                 max_gather: int = 1 << 18) -> list[Tensor]:
    """Flatten the sums that qualify (module docstring); returns the stage list with the
    gather stages inserted before their readers (``exprs`` updated in place)."""
    return insert_stages(stages, exprs, inlined, lambda t, body: _plan(
        t, body, max_inner, min_terms, max_last, min_reuse, max_gather))


def insert_stages(stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                  inlined: set[int], plan) -> list[Tensor]:
    """The stage list with each planned stage's new stages inserted before it.

    ``plan(t, body)`` returns None (``t`` unchanged) or ``(new_stages, new_body)``; ``exprs``
    is updated in place (the new stages' bodies, ``t``'s new body).  Shared by
    :mod:`.flatten_rows`."""
    out: list[Tensor] = []
    for t in stages:
        if id(t) not in inlined and isinstance(t.op, ComputeOp):
            planned = plan(t, exprs[id(t)][0])
            if planned is not None:
                new, body = planned
                for g in new:
                    exprs[id(g)] = (g.op.body,)
                out.extend(new)
                exprs[id(t)] = (body,)
        out.append(t)
    return out


def _plan(t: Tensor, body: E.Expr, max_inner: int, min_terms: int, max_last: int,
          min_reuse: int, max_gather: int):
    if not (isinstance(body, E.Reduce) and body.combiner == "sum" and body.where is None):
        return None
    if any(isinstance(x, E.Reduce) for x in walk(body.body)) or len(body.axes) < 2:
        return None
    extents = [const_int(ax.extent) for ax in body.axes]
    if None in extents or any(const_int(ax.lo) != 0 for ax in body.axes):
        return None
    terms = 1
    for n in extents:
        terms *= n
    last = const_int(t.op.axes[-1].extent) if t.op.axes else None
    if extents[-1] >= max_inner or terms < min_terms or last is None or last >= max_last:
        return None
    data = {ax.var: ax for ax in t.op.axes}
    dext = {v: const_int(ax.extent) for v, ax in data.items()}
    rvars = [ax.var for ax in body.axes]
    names = {v.name for v in free_vars(body)} | {v.name for v in rvars} | \
        {v.name for v in data}
    f = E.Var(fresh_name("f", names), "int64")
    names.add(f.name)
    at = dict(zip(rvars, decompose_index(f, extents)))
    mapping: dict[E.TensorRead, E.Expr] = {}
    gathers: list[Tensor] = []
    for r in (x for x in walk(body.body) if isinstance(x, E.TensorRead)):
        if r in mapping or not set().union(*(free_vars(i) for i in r.indices)) & set(rvars):
            continue
        if _contiguous(r, rvars, extents):
            mapping[r] = E.TensorRead(r.tensor, tuple(substitute(i, at) for i in r.indices),
                                      r.dtype)
            continue
        if not _strided(r, rvars):
            return None
        used = set().union(*(free_vars(i) for i in r.indices))
        axes = [v for v in data if v in used]
        if any(dext[v] is None for v in data):
            return None
        size, reuse = terms, 1
        for v in data:
            if v in used:
                size *= dext[v]
            else:
                reuse *= dext[v]
        if reuse < min_reuse or size > max_gather:
            return None
        g = _gather(t, r, axes, data, at, f, terms, names)
        gathers.append(g)
        mapping[r] = E.TensorRead(g, tuple(axes) + (f,), r.dtype)
    if not gathers:
        return None
    flat = E.IterVar(f, E.Const(0, "int64"), E.Const(terms, "int64"), "reduce")
    # reduction axes used outside the rewritten reads (a select on ``y``) take their value
    # from ``f`` as well
    flat_body = substitute(Reads(mapping).visit(body.body), at)
    return gathers, make_reduce("sum", flat_body, (flat,), None, body.dtype)


def _gather(t: Tensor, r: E.TensorRead, axes: list[E.Var], data: dict, at: dict,
            f: E.Var, terms: int, names: set[str]) -> Tensor:
    """``G[axes..., f] = r`` with the reduction axes taken from ``f``."""
    own = []
    for v in axes:
        w = E.Var(fresh_name(f"{v.name}_g", names), v.dtype)
        names.add(w.name)
        own.append(E.IterVar(w, E.Const(0, v.dtype), data[v].extent, "data"))
    fv = E.Var(fresh_name(f"{f.name}_g", names), f.dtype)
    names.add(fv.name)
    own.append(E.IterVar(fv, E.Const(0, f.dtype), E.Const(terms, f.dtype), "data"))
    flat = E.TensorRead(r.tensor, tuple(substitute(i, at) for i in r.indices), r.dtype)
    value = substitute(flat, {**{v: ax.var for v, ax in zip(axes, own)}, f: fv})
    shape = tuple(ax.extent for ax in own)
    return Tensor(f"{t.name}_cols", shape, r.dtype, ComputeOp(tuple(own), value))
