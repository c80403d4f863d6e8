"""Clipped sum windows widened to their constant box over a zero-padded copy (before lowering).

Zero elimination turns the padding of a convolution's input gradient into bounds: the
gradient of ``conv2d(X, W, padding=1)`` with respect to ``X`` is ::

    X_grad[n, c, y, x] = sum(H[n, o, y + 1 - ky, x + 1 - kx] * W[o, c, ky, kx],
                             (o, ky in [max(y - 6, 0), min(y + 1, 2) + 1), kx in [..]))

exact, but the window moves with ``y`` and ``x``: no constant reduction box, so neither the
im2col row flattening of :mod:`.flatten_rows` nor the register tiles of the CPU schedule take
it, and on an 8 x 8 image its innermost loops run 6 to 8 steps.  :func:`pad_windows` undoes
the clipping where it only keeps a read in bounds: each such axis runs over its constant box
(``ky in [0, 3)``) and the read comes from a copy of the tensor with a zero border wide enough
for every index the box reaches (the ``im2col`` of frameworks pads the same way)::

    H_pad[n, o, u, v] = select(u - 2 in [0, 8) && v - 2 in [0, 8), H[n, o, u - 2, v - 2], 0)
    X_grad[n, c, y, x] = sum(H_pad[n, o, y + 3 - ky, x + 3 - kx] * W[o, c, ky, kx], (o, ky, kx))

When it applies: the stage is a ``sum`` without ``where`` or nested reductions, its data axes
have constant extents and the last is shorter than ``max_inner`` (the short rows the flattening
and the tiles are for: on long rows the clipped windows cost little); each reduction axis with
moving bounds has bounds ``[max(lo, l(..)), min(hi, h(..)))`` with constants ``lo < hi``
and ``[l, h)`` exactly the range of ``v`` in the box that keeps one read's index ``s*v + r``
inside its dimension of extent ``n`` (checked by enumerating the values of the variables of
``l``, ``h`` and ``r``: at most 1,024 combinations), the box at most ``2 n / |s|`` wide (not a
strided input gradient's image, where the kernel allows 1 or 2 of its rows) and at most 12%
wider than the window's mean width over the output (a 3-wide kernel on rows of 8 or more,
a weight gradient's image of which only the border was clipped: the zeros added stay a few
per cent of the terms); that read is a factor of the summand.
A window of constant width ``w <= max_box`` that slides across a wide constant box (a
transposed convolution's input gradient, whose columns are clipped by the kernel's read
and the image's) is moved to start at 0 first, ``v = u + l``, and the image's read padded.

Legality.  On the widened box a term outside the old window has, on some widened axis, its
read's index outside the tensor, where the copy holds 0: the term is ``0 * (finite factors)``,
which adds nothing (with an infinite or NaN factor it is NaN, as in a zero-padded forward
convolution: documented in docs/robustness.md).  Inside the old window every read index is in
bounds, where the copy holds the tensor's value: the same terms as before.
"""

from __future__ import annotations

import itertools

from tecomp import expr as E
from tecomp.functor import ExprMutator, free_vars, fresh_name, make_reduce, substitute, walk
from tecomp.stmt_functor import eval_int
from tecomp.tensor import ComputeOp, Tensor

from .affine_forms import coefficient, lower_terms, upper_terms
from .flatten_sum import Reads, const_int, insert_stages
from .lower_stage import upper

_FLOATS = ("float32", "float64")
#: whether stages share the padded copies of a tensor (:func:`pad_windows`; the A/B of
#: ``benchmarks/ab_cpu_steps.py`` switches it off)
SHARE_COPIES = True


def pad_windows(stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                inlined: set[int], *, max_inner: int = 64, max_box: int = 8) -> list[Tensor]:
    """Widen the clipped windows that qualify (module docstring); returns the stage list with
    the padded copies inserted before their readers (``exprs`` updated in place).

    Stages that pad the same tensor along the same dimensions share one copy, bordered
    for all of them: a first walk over the stages collects the index span each needs, the
    second makes the copy (before the first stage that reads it) over the union of those
    spans, and every reader offsets its indices by the copy's border.  A transposed
    convolution's weight gradient is four phase stages that each pad ``H`` by one row or
    column on a different side: one 34 x 34 copy (and one polyphase copy of it, see
    :mod:`.schedule.cpu.strided`) instead of four of each."""
    copies = _Copies()
    for t in stages:  # the spans every qualifying stage needs
        if id(t) not in inlined and isinstance(t.op, ComputeOp):
            _plan(t, exprs[id(t)][0], max_inner, max_box, copies)
    copies.collecting = False
    return insert_stages(stages, exprs, inlined,
                         lambda t, body: _plan(t, body, max_inner, max_box, copies))


class _Copies:
    """The zero-bordered copies of one :func:`pad_windows` call, shared by the stages that
    pad one tensor along the same dimensions: while ``collecting``, the index spans each
    dimension needs (their union); then the copies made, by tensor and dimensions."""

    def __init__(self) -> None:
        self.collecting = True
        self.spans: dict[tuple[int, frozenset[int]], dict[int, tuple[int, int]]] = {}
        self.made: dict[tuple[int, frozenset[int]], tuple[Tensor, list[int]]] = {}

    def need(self, read: E.TensorRead, dims: set[int], ranges: dict) -> None:
        """Record the spans ``read`` needs in ``dims`` (nothing when one is not computable:
        that stage will not be padded)."""
        spans = {dim: _span(read.indices[dim], ranges) for dim in dims}
        if None in spans.values():
            return
        found = self.spans.setdefault((id(read.tensor), frozenset(dims)), {})
        for dim, (lo, hi) in spans.items():
            old = found.get(dim)
            found[dim] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))

    def union(self, read: E.TensorRead, dims: set[int]) -> dict[int, tuple[int, int]] | None:
        return self.spans.get((id(read.tensor), frozenset(dims)))


def _factors(e: E.Expr) -> list[E.Expr]:
    if isinstance(e, E.Mul):
        return _factors(e.a) + _factors(e.b)
    return [e]


def _affine(e: E.Expr, names: set[E.Var]) -> tuple[int, dict[E.Var, int]] | None:
    """``(constant, coefficients)`` of ``e`` affine in the variables ``names``, else None."""
    if not free_vars(e) <= names:
        return None
    coef = {}
    for v in free_vars(e):
        c = coefficient(e, v)
        if c is None:
            return None
        coef[v] = c
    try:
        const = eval_int(e, {v: 0 for v in names})
    except Exception:  # a form eval_int does not read: not affine
        return None
    return const, {v: c for v, c in coef.items() if c}


def _plan(t: Tensor, body: E.Expr, max_inner: int, max_box: int, copies: _Copies):
    if not (isinstance(body, E.Reduce) and body.combiner == "sum" and body.where is None):
        return None
    if t.dtype not in _FLOATS or any(isinstance(x, E.Reduce) for x in walk(body.body)):
        return None
    dext = [const_int(ax.extent) for ax in t.op.axes]
    if not dext or None in dext or any(const_int(ax.lo) is None for ax in t.op.axes):
        return None
    if dext[-1] >= max_inner:
        return None
    ranges = {ax.var: (const_int(ax.lo), const_int(ax.lo) + n) for ax, n in zip(t.op.axes, dext)}
    factors = [f for f in _factors(body.body) if isinstance(f, E.TensorRead)]
    data = {ax.var for ax in t.op.axes}
    axes, pads = [], {}  # pads: read -> the dimensions its copy pads
    shifts: dict[E.Var, E.Expr] = {}  # v -> v + l: windows that slide, moved to start at 0
    for ax in body.axes:
        lo, hi = const_int(ax.lo), const_int(upper(ax.lo, ax.extent))
        if lo is not None and hi is not None:
            axes.append(ax)
            ranges[ax.var] = (lo, hi)
            continue
        box = _box(ax, factors, data, max_box, ranges)
        if box is None:
            return None
        blo, bhi, read, dim, shift = box
        axes.append(E.IterVar(ax.var, E.Const(blo, ax.var.dtype),
                              E.Const(bhi - blo, ax.var.dtype), ax.kind))
        ranges[ax.var] = (blo, bhi)
        pads.setdefault(read, set()).add(dim)
        if shift is not None:
            shifts[ax.var] = E.add(ax.var, shift)
    if not pads:
        return None
    if copies.collecting:
        for read, dims in pads.items():
            copies.need(substitute(read, shifts), dims, ranges)
        return None
    names = {v.name for v in free_vars(body)} | {ax.var.name for ax in t.op.axes + body.axes}
    mapping, new, made = {}, [], {}
    for read, dims in pads.items():
        moved = substitute(read, shifts)
        key = (id(moved.tensor), frozenset(dims))
        found = (copies.made.get(key) or made.get(key)) if SHARE_COPIES else None
        if found is None:
            found = _padded(moved, dims, ranges, names,
                            copies.union(moved, dims) if SHARE_COPIES else None)
            if found[0] is None:
                return None
            made[key] = found
            new.append(found[0])
        copy, offsets = found
        mapping[moved] = E.TensorRead(copy, tuple(
            E.add(i, E.Const(off, "int64")) if off else i
            for i, off in zip(moved.indices, offsets)), moved.dtype)
    copies.made.update(made)  # only now: a stage that fails above adds no copy
    summand = Reads(mapping).visit(substitute(body.body, shifts))
    if shifts:  # t + (2*j - 1) - 2*j + 1 -> t: the shifted reads' indices collected again
        summand = _Collect(set(ranges)).visit(summand)
    return new, make_reduce("sum", summand, tuple(axes), None, body.dtype)


class _Collect(ExprMutator):
    """Affine read indices rebuilt with each variable once (``t + (2*j - 1) - 2*j + 1``
    becomes ``t``), so that later passes see which reads an axis really moves."""

    def __init__(self, names: set[E.Var]) -> None:
        super().__init__()
        self.names = names

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        return E.TensorRead(e.tensor, tuple(self.index(i) for i in e.indices), e.dtype)

    def index(self, e: E.Expr) -> E.Expr:
        if not free_vars(e) <= self.names:
            return e
        coef = {v: coefficient(e, v) for v in free_vars(e)}
        linear = {v: c for v, c in coef.items() if c is not None}
        if not linear:
            return e
        # the variables e is affine in, each once; the rest (``(rx - 1) // 2``) as it is
        rest = substitute(e, {v: E.Const(0, v.dtype) for v in linear})
        out: E.Expr | None = None
        for v in sorted(linear, key=lambda u: u.name):
            if linear[v]:
                term = v if linear[v] == 1 else E.mul(E.Const(linear[v], v.dtype), v)
                out = term if out is None else E.add(out, term)
        if isinstance(rest, E.Const) and rest.value == 0:
            return out if out is not None else rest
        return rest if out is None else E.add(out, rest)


def _box(ax: E.IterVar, factors: list[E.TensorRead], data: set[E.Var], max_box: int,
         ranges: dict[E.Var, tuple[int, int]], max_growth: float = 1.12):
    """``(lo, hi, read, dim, shift)``: the constant box of ``ax``'s clipped window, the factor
    whose ``dim``-th index the rest of the window keeps in bounds, and None; or, for a window
    of constant width ``w <= max_box`` that slides (``[max(0, 2j - 1), min(31, 2j + 2) + 1)``,
    the columns of a transposed convolution's input gradient), ``(0, w, read, dim, l)``: the
    variable becomes ``v = u + l`` over ``[0, w)`` and the constant clip is the read's bounds.
    None otherwise."""
    los, his = lower_terms(ax.lo), upper_terms(upper(ax.lo, ax.extent))
    clo = [const_int(x) for x in los if const_int(x) is not None]
    chi = [const_int(x) for x in his if const_int(x) is not None]
    mlo = [x for x in los if const_int(x) is None]
    mhi = [x for x in his if const_int(x) is None]
    if len(clo) != 1 or len(chi) != 1 or len(mlo) != 1 or len(mhi) != 1:
        return None
    blo, bhi = clo[0], chi[0]
    if bhi <= blo:
        return None
    v = ax.var
    for read, dim, n, step in _stepping_reads(factors, v):
        wide = 2 * -(-n // abs(step))  # at most twice the window the read allows
        if bhi - blo <= wide and _clips(mlo[0], mhi[0], blo, bhi, read.indices[dim], v, n,
                                        ranges):
            mean = _mean_width(mlo[0], mhi[0], blo, bhi, ranges)
            if mean is None or (bhi - blo) > max_growth * mean:
                return None  # the zeros would be more than a few % of the terms
            return blo, bhi, read, dim, None
    width = constant_width(mlo[0], mhi[0], data, ranges)
    if width is None or not 0 < width <= max_box:
        return None
    if any(coefficient(mlo[0], u) is None and ranges[u][1] - ranges[u][0] > max_box
           for u in free_vars(mlo[0])):
        # a window that starts at (y - 2) // 2: moved, it would read through a division by
        # the output position; only the phase axes of passes/phase_split.py may do that
        return None
    for read, dim, (const, rest, s, n) in _moving_reads(factors, v, data | {v}):
        if rest:
            continue  # the read moves with the output too: not the image's own bounds
        lo, hi = (-const, n - const) if s == 1 else (const - n + 1, const + 1)
        if (lo, hi) == (blo, bhi):  # the constant clip is this read's bounds
            return 0, width, read, dim, mlo[0]
    return None


def _assignments(names: set[E.Var], ranges: dict[E.Var, tuple[int, int]], most: int):
    """Every assignment of the variables ``names`` over their constant ``ranges``, as dicts;
    None when a variable has no range or there are more than ``most`` of them."""
    order = sorted(names, key=lambda u: u.name)
    if any(u not in ranges for u in order):
        return None
    count = 1
    for u in order:
        count *= ranges[u][1] - ranges[u][0]
    if count > most:
        return None
    return [dict(zip(order, vs)) for vs in itertools.product(*(range(*ranges[u]) for u in order))]


def _mean_width(lo: E.Expr, hi: E.Expr, blo: int, bhi: int,
                ranges: dict[E.Var, tuple[int, int]], most: int = 4096) -> float | None:
    """The mean over the data positions of the clipped window's width ``min(bhi, hi) -
    max(blo, lo)`` (None: not enumerable)."""
    envs = _assignments(free_vars(lo) | free_vars(hi), ranges, most)
    if not envs:
        return None
    try:
        total = sum(max(0, min(bhi, eval_int(hi, env)) - max(blo, eval_int(lo, env)))
                    for env in envs)
    except Exception:  # a form eval_int does not read
        return None
    return total / len(envs) if total else None


def constant_width(lo: E.Expr, hi: E.Expr, data: set[E.Var],
                   ranges: dict[E.Var, tuple[int, int]], most: int = 1024) -> int | None:
    """``hi - lo`` when it is one constant over the data axes (affine forms compared, else
    every combination of their values enumerated, at most ``most``), else None."""
    lo_form, hi_form = _affine(lo, data), _affine(hi, data)
    if lo_form is not None and hi_form is not None:
        return hi_form[0] - lo_form[0] if lo_form[1] == hi_form[1] else None
    names = free_vars(lo) | free_vars(hi)
    envs = _assignments(names, ranges, most) if names <= data else None
    if not envs:
        return None
    try:
        widths = {eval_int(hi, env) - eval_int(lo, env) for env in envs}
    except Exception:  # a form eval_int does not read
        return None
    return widths.pop() if len(widths) == 1 else None


def _stepping_reads(factors: list[E.TensorRead], v: E.Var):
    """``(read, dim, extent, step)`` for each index of a factor that moves by a constant
    ``step != 0`` per step of ``v``, over a constant extent."""
    for read in factors:
        for dim, idx in enumerate(read.indices):
            n, step = const_int(read.tensor.shape[dim]), coefficient(idx, v)
            if n is not None and step:
                yield read, dim, n, step


def _clips(lo: E.Expr, hi: E.Expr, blo: int, bhi: int, idx: E.Expr, v: E.Var, n: int,
           ranges: dict[E.Var, tuple[int, int]], most: int = 1024) -> bool:
    """Whether ``[max(blo, lo), min(bhi, hi))`` is exactly the set of ``v`` in ``[blo, bhi)``
    with ``0 <= idx < n``, for every value of the other variables (checked on all of them:
    at most ``most`` combinations over the constant ranges of ``ranges``)."""
    envs = _assignments((free_vars(lo) | free_vars(hi) | free_vars(idx)) - {v}, ranges, most)
    if envs is None:
        return False
    for env in envs:
        try:
            first, end = max(blo, eval_int(lo, env)), min(bhi, eval_int(hi, env))
            inside = [u for u in range(blo, bhi) if 0 <= eval_int(idx, {**env, v: u}) < n]
        except Exception:  # an index eval_int does not read: no claim
            return False
        if inside != list(range(first, end)):
            return False
    return True


def _moving_reads(factors: list[E.TensorRead], v: E.Var, names: set[E.Var]):
    """``(read, dim, (const, other coefficients, coefficient of v, extent))`` for each index
    of a factor that is ``±v`` plus an affine form in ``names``, over a constant extent."""
    for read in factors:
        for dim, idx in enumerate(read.indices):
            form = _affine(idx, names)
            n = const_int(read.tensor.shape[dim])
            if form is None or n is None or form[1].get(v) not in (1, -1):
                continue
            const, coef = form
            yield read, dim, (const, {u: c for u, c in coef.items() if u != v}, coef[v], n)


def _span(e: E.Expr, ranges: dict[E.Var, tuple[int, int]],
          most: int = 1 << 16) -> tuple[int, int] | None:
    """The least and greatest value of ``e`` over ``ranges``: from its affine form, else by
    enumerating the variables it uses (at most ``most`` combinations)."""
    form = _affine(e, set(ranges))
    if form is not None:
        const, coef = form
        lo = const + sum(min(c * ranges[u][0], c * (ranges[u][1] - 1)) for u, c in coef.items())
        hi = const + sum(max(c * ranges[u][0], c * (ranges[u][1] - 1)) for u, c in coef.items())
        return lo, hi
    envs = _assignments(free_vars(e), ranges, most)
    if not envs:
        return None
    try:
        values = [eval_int(e, env) for env in envs]
    except Exception:  # a form eval_int does not read
        return None
    return min(values), max(values)


def _padded(read: E.TensorRead, dims: set[int], ranges: dict, names: set[str],
            spans: dict[int, tuple[int, int]] | None = None):
    """The zero-bordered copy of ``read``'s tensor over the index ranges the widened box
    reaches in ``dims`` (or the wider ``spans`` of every stage that shares the copy), and
    the offsets to add to the indices of a read of it; ``(None, None)`` when a range is not
    computable."""
    src = read.tensor
    shape, offsets = [], []
    for dim, idx in enumerate(read.indices):
        n = const_int(src.shape[dim])
        if dim not in dims:
            shape.append(src.shape[dim])
            offsets.append(0)
            continue
        span = _span(idx, ranges)
        if span is not None and spans is not None and dim in spans:
            span = (min(span[0], spans[dim][0]), max(span[1], spans[dim][1]))
        if span is None or n is None:
            return None, None
        lo, hi = span
        before, after = max(0, -lo), max(0, hi - (n - 1))
        shape.append(E.Const(n + before + after, "int64"))
        offsets.append(before)
    own = []
    for dim, ext in enumerate(shape):
        var = E.Var(fresh_name(f"u{dim}", names), "int64")
        names.add(var.name)
        own.append(E.IterVar(var, E.Const(0, "int64"), ext, "data"))
    inside: E.Expr | None = None
    at = []
    for dim, (ax, off) in enumerate(zip(own, offsets)):
        at.append(E.sub(ax.var, E.Const(off, "int64")) if off else ax.var)
        if dim in dims:
            n = src.shape[dim]
            ok = E.logical_and(E.compare(E.GE, at[-1], E.Const(0, "int64")),
                               E.compare(E.LT, at[-1], n))
            inside = ok if inside is None else E.logical_and(inside, ok)
    value = E.TensorRead(src, tuple(at), src.dtype)
    if inside is not None:
        value = E.select(inside, value, E.Const(0.0, src.dtype))
    name = fresh_name(f"{src.name}_pad", names)
    names.add(name)
    copy = Tensor(name, tuple(ax.extent for ax in own), src.dtype, ComputeOp(tuple(own), value))
    return copy, offsets
