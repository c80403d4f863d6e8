"""Flattening the output grid of a strided sum into one long row over staged columns.

A stride-2 convolution reads its input with stride 2 along the output row::

    Y[b, f, y, x] = sum(X_pad[b, c, 2*y + ry, 2*x + rx] * W[f, c, ry, rx], (c, ry, rx))

The "i, k, j" order of the CPU schedule (:mod:`.schedule.cpu.loop_order`) puts ``x``
innermost: 16 steps of strided loads (a de-interleaving shuffle per vector) per reduction
step.  :func:`flatten_rows` stages the
strided read as columns over the whole output grid (im2col, Chellapilla, Puri & Simard 2006)
and computes the sum as a product with one long unit-stride row ``p = y * 16 + x``::

    G[b, c, ry, rx, p] = X_pad[b, c, 2*(p // 16) + ry, 2*(p % 16) + rx]
    T[b, f, p] = sum(W[f, c, ry, rx] * G[b, c, ry, rx, p], (c, ry, rx))
    Y[b, f, y, x] = T[b, f, y * 16 + x]

``T`` is then an "i, k, j" sum over rows of 256 (register-blocked by the CPU schedule), and
``Y`` a copy (one core: 0.12 -> 0.04 ms for a 1x16x32x32 input and 32 3x3 filters).

In place (implicit GEMM).  A stride-1 sum over rows shorter than ``max_in_place`` (a
convolution on an 8 x 8 or 32 x 32 image, or an input gradient whose clipped windows
:mod:`.pad_windows` widened), and a strided one whose columns would exceed ``max_gather``,
are flattened the same way but without ``G``: ``T[b, f, p] = sum(W[f, c, ry, rx] * X_pad[b, c,
p // 16 + ry, p % 16 + rx], ..)`` reads the input in place.  On the CPU the register tiles of
the schedule copy each ``kc x nc`` block of that read into a packed panel, which is the
im2col of one cache block (Chellapilla et al.'s columns, never larger than the block); the
rows of ``W`` are the tiles' other operand.  Only float stages with at least two reads take
this form.  Rows shorter than ``min_inner`` (a weight gradient, ``W_grad[o, c, ky, kx] =
sum(H[n, o, y, x] * X_pad[n, c, 2*y + ky, 2*x + kx], (n, y, x))``) are flattened in place only,
when the flat row has at least ``min_row`` elements and a read strides along a reduction axis
(stride 2 here; at stride 1 the gather of the panels costs more than the strided reads it
removes): ``(c, ky, kx)`` becomes one row of 576 columns, gathered from ``X_pad`` by the
panels.  When that row has at most twice as many columns as the one channel axis before it
(a phase of a stride-2 transposed convolution's weight gradient: ``(o, ky, kx)`` = 32 x 2 x 2
columns against 64 input channels), the two trade places, ``T[p, c]``: the gathered columns
are the rows the register tiles broadcast in place, and the channels, read with unit stride
along the sum, are the packed panel (then ``W_grad`` reads ``T`` transposed).  Measured on
one AVX-512 core: the 4x4 stride-2 transposed convolution's weight gradient, 8x64x16x16 ->
32, 2.45 -> 1.7 ms, and 8x128x16x16 -> 64, 7.0 -> 4.9 ms; the 3x3 and 4x4 stride-2
convolutions' (576 and 1024 columns against 128 channels) were 1.9x and 1.35x slower so.

When it applies: the stage's body is a ``sum`` without ``where`` or nested reductions over
reduction axes with constant bounds (``lo = 0``); all data axes have constant extents and the
last one, ``x``, is shorter than ``max_inner`` (``max_in_place`` in place) but at least
``min_inner``; some read steps an index by more than one element per ``x`` (the staged reads;
in place: the reads that use ``x``); the flattened axes are the
longest trailing run of data axes that every staged read uses and no other read does; each
staged read is reused ``min_reuse`` times or more (the data axes it does not use) and has at
most ``max_gather`` elements.  Sums whose last data axis is shorter than ``min_inner`` are
left to :mod:`.flatten_sum`.

Legality.  ``p -> (p // 16, p % 16)`` is a bijection onto the flattened axes' box, so ``T``
holds, at ``p``, exactly the sum the stage defined at ``(y, x)`` (same terms, same order);
``G`` holds the values the staged read loads.
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.functor import free_vars, fresh_name, make_reduce, substitute, walk
from tecomp.tensor import ComputeOp, Tensor

from .affine_forms import coefficient
from .flatten_sum import Reads, const_int, decompose_index, insert_stages


def flatten_rows(stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                 inlined: set[int], *, min_inner: int = 8, max_inner: int = 32,
                 max_in_place: int = 64, min_row: int = 64, min_reuse: int = 4,
                 max_gather: int = 1 << 18) -> list[Tensor]:
    """Flatten the stages that qualify (module docstring); returns the stage list with the
    column and row stages inserted before each rewritten stage (``exprs`` updated)."""
    return insert_stages(stages, exprs, inlined, lambda t, body: _plan(
        t, body, min_inner, max_inner, max_in_place, min_row, min_reuse, max_gather))


def _reads(e: E.Expr) -> list[E.TensorRead]:
    out: list[E.TensorRead] = []
    for x in walk(e):
        if isinstance(x, E.TensorRead) and x not in out:
            out.append(x)
    return out


def _uses(r: E.TensorRead) -> set[E.Var]:
    return set().union(*(free_vars(i) for i in r.indices)) if r.indices else set()


def _plan(t: Tensor, body: E.Expr, min_inner: int, max_inner: int, max_in_place: int,
          min_row: int, min_reuse: int, max_gather: int):
    if not (isinstance(body, E.Reduce) and body.combiner == "sum" and body.where is None):
        return None
    if any(isinstance(x, E.Reduce) for x in walk(body.body)) or not t.op.axes:
        return None
    rext = [const_int(ax.extent) for ax in body.axes]
    dext = [const_int(ax.extent) for ax in t.op.axes]
    if None in rext or None in dext or any(const_int(ax.lo) != 0 for ax in body.axes + t.op.axes):
        return None
    if not 2 <= dext[-1] < max(max_inner, max_in_place):
        return None
    short = dext[-1] < min_inner  # a kernel row (a weight gradient's kx): in place only
    x = t.op.axes[-1].var
    reads = _reads(body.body)
    staged = [r for r in reads if any((coefficient(i, x) or 0) > 1 for i in r.indices)]
    if short and not any((coefficient(i, ax.var) or 0) > 1 for r in reads
                         for i in r.indices for ax in body.axes):
        return None  # a stride-1 weight gradient: its columns' gather costs more than it saves
    if dext[-1] >= max_inner or short:
        staged = []
    inline = not staged  # a stride-1 sum over short rows: the columns are read in place
    if inline:
        if dext[-1] >= max_in_place:
            return None
        staged = [r for r in reads if x in _uses(r)]
        if not staged or t.dtype not in ("float32", "float64") or len(reads) < 2:
            return None
    others = set().union(*(_uses(r) for r in reads if r not in staged))
    n = len(t.op.axes)
    while n > 0 and all(t.op.axes[n - 1].var in _uses(r) for r in staged) and \
            t.op.axes[n - 1].var not in others:
        n -= 1
    flat_axes, lead = t.op.axes[n:], t.op.axes[:n]
    if not flat_axes or (inline and len(flat_axes) < 2):
        return None  # in place, one axis would be the same row behind a copy
    if any(free_vars(ax.lo) | free_vars(ax.extent) for ax in body.axes):
        return None
    terms = 1
    for e in rext:
        terms *= e
    rows = 1
    for e in dext[n:]:
        rows *= e
    if short and rows < min_row:
        return None
    names = {v.name for v in free_vars(body)} | {ax.var.name for ax in t.op.axes + body.axes}
    p = E.Var(fresh_name("p", names), "int64")
    names.add(p.name)
    at = dict(zip([ax.var for ax in flat_axes], decompose_index(p, dext[n:])))
    mapping: dict[E.TensorRead, E.Expr] = {}
    new: list[Tensor] = []
    for r in staged:
        used = [ax for ax in lead if ax.var in _uses(r)]
        size, reuse = terms * rows, 1
        for ax in lead:
            if ax in used:
                size *= const_int(ax.extent)
            else:
                reuse *= const_int(ax.extent)
        if reuse < min_reuse:
            return None
        if inline or size > max_gather:  # read in place (the CPU's panels gather it)
            inline = True
            continue
        g = _columns(t, r, used, body.axes, at, p, rows, names, len(new))
        new.append(g)
        mapping[r] = E.TensorRead(g, tuple(ax.var for ax in used) +
                                  tuple(ax.var for ax in body.axes) + (p,), r.dtype)
    flat_body = substitute(Reads(mapping).visit(body.body), at)
    p_axis = E.IterVar(p, E.Const(0, "int64"), E.Const(rows, "int64"), "data")
    # a weight gradient whose columns are no more than twice its one channel axis: the
    # columns become the rows of the register tiles, the channels the row (module docstring)
    across = (short and inline and len(lead) == 1 and
              min_inner <= const_int(lead[0].extent) and rows <= 2 * const_int(lead[0].extent))
    row_axes = (p_axis,) + tuple(lead) if across else tuple(lead) + (p_axis,)
    total = make_reduce("sum", flat_body, body.axes, None, body.dtype)
    flat = Tensor(f"{t.name}_rows", tuple(ax.extent for ax in row_axes), t.dtype,
                  ComputeOp(row_axes, total))
    new.append(flat)
    index: E.Expr = E.Const(0, "int64")
    for ax, e in zip(flat_axes, dext[n:]):
        index = E.add(E.mul(index, e), ax.var)
    rest = tuple(ax.var for ax in lead)
    return new, E.TensorRead(flat, (index,) + rest if across else rest + (index,), t.dtype)


def _columns(t: Tensor, r: E.TensorRead, used: list[E.IterVar], raxes: tuple[E.IterVar, ...],
             at: dict, p: E.Var, rows: int, names: set[str], n: int) -> Tensor:
    """``G[used..., raxes..., p] = r`` with the flattened axes taken from ``p``."""
    own: list[E.IterVar] = []
    mapping: dict[E.Var, E.Expr] = {}
    for ax in list(used) + list(raxes):
        v = E.Var(fresh_name(f"{ax.var.name}_c", names), ax.var.dtype)
        names.add(v.name)
        own.append(E.IterVar(v, E.Const(0, v.dtype), ax.extent, "data"))
        mapping[ax.var] = v
    pv = E.Var(fresh_name(f"{p.name}_c", names), p.dtype)
    names.add(pv.name)
    own.append(E.IterVar(pv, E.Const(0, p.dtype), E.Const(rows, p.dtype), "data"))
    flat = E.TensorRead(r.tensor, tuple(substitute(i, at) for i in r.indices), r.dtype)
    value = substitute(flat, {**mapping, p: pv})
    name = f"{t.name}_cols" if n == 0 else f"{t.name}_cols{n}"
    return Tensor(name, tuple(ax.extent for ax in own), r.dtype, ComputeOp(tuple(own), value))
