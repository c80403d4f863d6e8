"""Output phases of a strided window split into stages of their own (before lowering).

A transposed convolution of stride 2, and the input gradient of a strided convolution, sum
over a window whose bounds are floor divisions of the output position::

    Y[b, f, y, x] = sum(X[b, c, t2, t1] * W[c, f, y - 2*t2 + 1, x - 2*t1 + 1],
                        (c, t1 in [max(0, (x - 1) // 2), min(15, (x + 1) // 2) + 1), t2 ..))

Even and odd ``x`` have different windows, so no box and no shift makes the window constant
and the sum stays a scalar nest with one or two steps per axis.  Written per output phase
``x = 2*xq + rx`` (the polyphase form of a transposed convolution: each phase is a stride-1
convolution with a sub-kernel), the bounds become ``xq + (rx - 1) // 2`` and ``xq + (rx + 1)
// 2``: a window of constant width sliding with ``xq``, which :mod:`.pad_windows` moves to
start at 0 and :mod:`.flatten_rows` turns into an implicit GEMM.  :func:`split_phases`
rewrites such a stage ``Y`` into ::

    Y_phases[ry, rx, b, f, yq, xq] = sum(..)[y := 2*yq + ry, x := 2*xq + rx]
    Y[b, f, y, x] = Y_phases[y % 2, x % 2, b, f, y // 2, x // 2]

with every floor division and modulo by the stride in the body normalised (``(2*xq + e) //
2 = xq + e // 2``, ``(2*xq + e) % 2 = e % 2``, exact for integers).

When it applies: the stage is a ``sum`` without ``where`` whose data axes have constant
extents; the bounds of some reduction axis hold floor divisions by a constant ``s >= 2`` of
expressions in trailing data axes, and in every phase each such window has a constant
width.  When ``s`` divides every split extent and that width is the same in every phase,
at most half as wide as its constant bounds (a 4-wide kernel at stride 2: two rows in each
phase), one stage holds all phases, the phase axes outermost (the output channel stays
next to the spatial axes, as the row of the register tiles).  Otherwise (a 3-wide kernel
at stride 2: phases of two rows and of one; or an odd image, whose phases hold
``ceil((D - r) / s)`` positions) each phase is a stage of its own, ``Y_p01[b, f, yq, xq]``
for ``ry = 0, rx = 1``, and ``Y`` reads the one of its phase.  A phase's window may then be
wider than half its constant bounds: a phase of the input gradient of a stride-2,
dilation-2 convolution is a dense stride-1 convolution whose kernel the image edges clip,
and it counts the terms of those bounds.  A phase with no term (the odd phases of a 1x1
kernel at stride 2) or no position reads 0 and has no stage::

    Y[b, f, y, x] = select(y % 2 == 0, select(x % 2 == 0, Y_p00[..], Y_p01[..]), ..)

at most ``max_phases`` of them, and only when each phase sums at least ``min_terms`` terms
(with fewer channels the residue split's loops along the image rows are the longer ones).

Legality: ``(ry, yq) -> s*yq + ry`` is a bijection onto the axis' range, so the phase
stages hold exactly ``Y``'s values, permuted (a phase stage with the phase fixed holds the
values of that residue class, which the select reads for exactly that class); the
normalisation rules are identities on integers.
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.functor import ExprMutator, free_vars, fresh_name, make_reduce, substitute, walk
from tecomp.tensor import ComputeOp, Tensor

from .affine_forms import coefficient, lower_terms, upper_terms
from .exact_div import fold_index
from .flatten_sum import const_int, insert_stages
from .lower_stage import upper
from .pad_windows import constant_width


def split_phases(stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                 inlined: set[int], *, max_inner: int = 64,
                 max_phases: int = 9, min_terms: int = 16) -> list[Tensor]:
    """Split the stages that qualify (module docstring); returns the stage list with each
    phase stage inserted before the stage, which becomes its permuted copy."""
    return insert_stages(stages, exprs, inlined, lambda t, body: _plan(
        t, body, max_inner, max_phases, min_terms))


def _divisors(e: E.Expr, data: set[E.Var]) -> dict[E.Var, int]:
    """``{x: s}`` for the floor divisions ``(.. x ..) // s`` in ``e`` over data axes ``x``."""
    out: dict[E.Var, int] = {}
    for n in walk(e):
        if isinstance(n, E.FloorDiv) and isinstance(n.b, E.Const) and int(n.b.value) >= 2:
            for v in free_vars(n.a) & data:
                if coefficient(n.a, v) in (1, -1):
                    out.setdefault(v, int(n.b.value))
    return out


def _plan(t: Tensor, body: E.Expr, max_inner: int, max_phases: int, min_terms: int):
    if not (isinstance(body, E.Reduce) and body.combiner == "sum" and body.where is None):
        return None
    if any(isinstance(x, E.Reduce) for x in walk(body.body)) or len(t.op.axes) < 2:
        return None
    dext = [const_int(ax.extent) for ax in t.op.axes]
    if None in dext or any(const_int(ax.lo) != 0 for ax in t.op.axes):
        return None
    data = {ax.var for ax in t.op.axes}
    found: dict[E.Var, int] = {}
    for ax in body.axes:
        for b in lower_terms(ax.lo) + upper_terms(upper(ax.lo, ax.extent)):
            for v, s in _divisors(b, data).items():
                found.setdefault(v, s)
    if not found:
        return None
    pos = {ax.var: n for n, ax in enumerate(t.op.axes)}
    split = sorted(found, key=lambda v: pos[v])
    first = pos[split[0]]
    if [pos[v] for v in split] != list(range(first, len(t.op.axes))):
        return None  # only trailing spatial axes
    if any(-(-dext[pos[v]] // found[v]) >= max_inner for v in split):
        return None
    even = all(dext[pos[v]] % found[v] == 0 for v in split)
    names = {v.name for v in free_vars(body)} | {ax.var.name for ax in t.op.axes + body.axes}
    phases, quots, at = [], [], {}
    for v in split:
        s = found[v]
        r = E.Var(fresh_name(f"{v.name}r", names), v.dtype)
        names.add(r.name)
        q = E.Var(fresh_name(f"{v.name}q", names), v.dtype)
        names.add(q.name)
        phases.append(E.IterVar(r, E.Const(0, v.dtype), E.Const(s, v.dtype), "data"))
        quots.append(E.IterVar(q, E.Const(0, v.dtype), E.Const(dext[pos[v]] // s, v.dtype),
                               "data"))
        at[v] = E.add(E.mul(E.Const(s, v.dtype), q), r)
    lead = t.op.axes[:first]
    norm = _Normalise({q.var: found[v] for q, v in zip(quots, split)})
    raxes = tuple(E.IterVar(ax.var, norm.visit(substitute(ax.lo, at)),
                            norm.visit(substitute(ax.extent, at)), ax.kind) for ax in body.axes)
    summand = norm.visit(substitute(body.body, at))
    # the phases outermost: the row the register tiles run over (an output channel) stays
    # next to the flattened spatial axes
    axes = tuple(phases) + tuple(lead) + tuple(quots)
    verdict = _windows(raxes, {ax.var: (0, const_int(ax.extent)) for ax in axes}) \
        if even else None
    if verdict is not None and verdict[0] and not verdict[2]:
        # one width in every phase: one stage over the phase axes
        total = make_reduce("sum", summand, raxes, None, body.dtype)
        stage = Tensor(f"{t.name}_phases", tuple(ax.extent for ax in axes), t.dtype,
                       ComputeOp(axes, total))
        index = tuple(E.mod(v, E.Const(found[v], v.dtype)) for v in split)
        index += tuple(ax.var for ax in lead)
        index += tuple(E.floordiv(v, E.Const(found[v], v.dtype)) for v in split)
        return [stage], E.TensorRead(stage, index, t.dtype)
    return _stage_per_phase(t, split, found, phases, lead, quots, raxes, summand, norm,
                            max_phases, min_terms, [dext[pos[v]] for v in split])


def _span(ax: E.IterVar) -> int | None:
    """The length of a moving window's constant bounds (``max(0, ..) .. min(2, ..)``: 3)."""
    los, his = lower_terms(ax.lo), upper_terms(upper(ax.lo, ax.extent))
    lo = [const_int(x) for x in los if not free_vars(x)]
    hi = [const_int(x) for x in his if not free_vars(x)]
    if len(lo) != 1 or len(hi) != 1 or None in lo + hi:
        return None
    return hi[0] - lo[0]


def _windows(raxes: tuple[E.IterVar, ...], ranges: dict[E.Var, tuple[int, int]],
             clipped: bool = False) -> tuple[bool, int, bool] | None:
    """``(same, terms, empty)``: ``same`` when every window the split moves has one constant
    width over ``ranges`` (False when some width differs between phases: a 3-wide kernel at
    stride 2 has phases of 2 and 1 rows), ``terms`` the number of terms of the sum then (0
    when unknown), ``empty`` when some window has width 0 (the odd phases of a 1x1 kernel at
    stride 2, which no term reaches); None when some window has another form, or is not
    narrow against its constant bounds (a dilated kernel's, which the bounds clip) unless
    ``clipped``: then such a window counts its constant bounds' terms (a phase of a stride-2
    dilation-2 input gradient is a stride-1 convolution whose kernel the image edges clip).
    An axis of constant extent 0 (a guard the phase decided: no term reaches it) is empty."""
    same, terms, empty = True, 1, False
    for ax in raxes:
        if not free_vars(ax.lo) | free_vars(ax.extent):
            n = const_int(ax.extent)
            if n is not None and n <= 0:
                empty = True
            terms *= n or 0
            continue
        los, his = lower_terms(ax.lo), upper_terms(upper(ax.lo, ax.extent))
        moving = ([x for x in los if free_vars(x)], [x for x in his if free_vars(x)])
        fixed = ([const_int(x) for x in los if not free_vars(x)],
                 [const_int(x) for x in his if not free_vars(x)])
        if len(moving[0]) != 1 or len(moving[1]) != 1 or len(fixed[0]) != 1 or len(
                fixed[1]) != 1 or None in fixed[0] + fixed[1]:
            return None
        width = constant_width(moving[0][0], moving[1][0], set(ranges), ranges)
        if width is None:
            same, terms = False, 0
        elif width == 0:
            empty, terms = True, 0
        elif width < 0:
            return None
        elif 2 * width > fixed[1][0] - fixed[0][0]:
            if not clipped:
                return None
            terms *= max(0, fixed[1][0] - fixed[0][0])
        else:
            terms *= width
    return same, terms, empty


def _stage_per_phase(t: Tensor, split: list[E.Var], found: dict[E.Var, int],
                     phases: list[E.IterVar], lead: tuple[E.IterVar, ...],
                     quots: list[E.IterVar], raxes: tuple[E.IterVar, ...], summand: E.Expr,
                     norm: _Normalise, max_phases: int, min_terms: int,
                     extents: list[int]):
    """Windows whose widths differ between phases, or an image the stride does not divide:
    a stage of its own for each phase (``Y_p01[b, f, yq, xq]`` for ``y = 2*yq, x = 2*xq +
    1``), each window then of one width,
    and ``Y`` selects among them by ``y % 2, x % 2``; a phase whose window is empty (no term
    reaches it: the odd positions of a 1x1 stride-2 convolution's input gradient) is 0,
    with no stage.  None unless each other phase's sum has at least ``min_terms`` terms
    (fewer channels than that: the residue split's loops over the image rows are the
    longer), when every phase is empty, or when no phase is and each one's windows are the
    kernel's whole constant bounds clipped by the image (a stride-1 dilated kernel)."""
    combos: list[tuple[int, ...]] = [()]
    for v in split:
        combos = [c + (r,) for c in combos for r in range(found[v])]
    if len(combos) > max_phases:
        return None
    stages: dict[tuple[int, ...], Tensor | None] = {}
    wide = 0  # phases whose windows are only the clipped constant bounds (a dilated kernel's)
    for combo in combos:
        # phase r of an axis of extent D holds ceil((D - r) / s) positions
        qaxes = tuple(E.IterVar(q.var, q.lo, E.Const(-(-(n - r) // found[v]), q.var.dtype),
                                q.kind)
                      for q, v, n, r in zip(quots, split, extents, combo))
        axes = tuple(lead) + qaxes
        ranges = {ax.var: (0, const_int(ax.extent)) for ax in axes}
        if any(const_int(q.extent) <= 0 for q in qaxes):  # a phase no position falls in
            stages[combo] = None
            continue
        fix = {ph.var: E.Const(r, ph.var.dtype) for ph, r in zip(phases, combo)}
        rax = tuple(E.IterVar(ax.var, norm.visit(substitute(ax.lo, fix)),
                              norm.visit(substitute(ax.extent, fix)), ax.kind) for ax in raxes)
        verdict = _windows(rax, ranges, clipped=True)
        if verdict is None or not verdict[0]:
            return None
        if verdict[2]:  # no term in this phase: it reads 0
            stages[combo] = None
            continue
        if verdict[1] < min_terms:
            return None
        spans = [_span(ax) for ax in rax if free_vars(ax.lo) | free_vars(ax.extent)]
        wide += _windows(rax, ranges) is None and None not in spans and all(
            -(-n // found[v]) > max(spans, default=0) for v, n in zip(split, extents))
        total = make_reduce("sum", norm.visit(substitute(summand, fix)), rax, None, t.dtype)
        tag = "".join(map(str, combo))
        stages[combo] = Tensor(f"{t.name}_p{tag}", tuple(ax.extent for ax in axes), t.dtype,
                               ComputeOp(axes, total))
    tail = tuple(ax.var for ax in lead)
    tail += tuple(E.floordiv(v, E.Const(found[v], v.dtype)) for v in split)

    if all(st is None for st in stages.values()):
        return None
    if wide == len(combos):
        # every phase holds terms, each window the kernel's whole bounds where the image
        # does not clip it, and the phases are longer than the kernel: a stride-1 dilated
        # convolution's input gradient, one dense dilated convolution -- split, it was four
        # of stride-2 gathers (8x64x32x32, 3x3 d2: 10.9 ms against 10.3 unsplit, one
        # AVX-512 core).  (A transposed convolution's weight gradient splits its kernel
        # taps, shorter than its windows over the image, and keeps its phases.)
        return None

    def choose(depth: int, prefix: tuple[int, ...]) -> E.Expr:
        if depth == len(split):
            stage = stages[prefix]
            if stage is None:
                return E.Const(0, t.dtype) if t.dtype.startswith(("int", "uint")) \
                    else E.Const(0.0, t.dtype)
            return E.TensorRead(stage, tail, t.dtype)
        v, s = split[depth], found[split[depth]]
        out = choose(depth + 1, prefix + (s - 1,))
        for r in range(s - 2, -1, -1):
            cond = E.compare(E.EQ, E.mod(v, E.Const(s, v.dtype)), E.Const(r, v.dtype))
            out = E.select(cond, choose(depth + 1, prefix + (r,)), out)
        return out

    return [st for st in stages.values() if st is not None], choose(0, ())


class _Normalise(ExprMutator):
    """``(s*q + e) // s -> q + e // s`` and ``(s*q + e) % s -> e % s`` for the quotient
    variables ``q`` of stride ``s`` (exact on integers); then each read's indices in affine
    normal form where that removes a division (``(2*q + 2*t - 2*q) // 2 -> t``: a weight
    gradient's phase reads its input without the kernel axes, which :mod:`.flatten_rows`
    needs to take them as the columns of one row)."""

    def __init__(self, strides: dict[E.Var, int]) -> None:
        super().__init__()
        self.strides = strides

    def visit_FloorDiv(self, e: E.FloorDiv) -> E.Expr:
        return self._div(e, super().visit_FloorDiv(e), True)

    def visit_Mod(self, e: E.Mod) -> E.Expr:
        return self._div(e, super().visit_Mod(e), False)

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        out = super().visit_TensorRead(e)
        idx = tuple(fold_index(i) for i in out.indices)
        if all(a is b for a, b in zip(idx, out.indices)):
            return out
        return E.TensorRead(out.tensor, idx, out.dtype)

    def _div(self, old: E.Expr, e: E.Expr, quotient: bool) -> E.Expr:
        if not isinstance(e, (E.FloorDiv, E.Mod)) or not isinstance(e.b, E.Const):
            return e
        s = int(e.b.value)
        moved: E.Expr | None = None
        rest = e.a
        for q, stride in self.strides.items():
            c = coefficient(e.a, q)
            if c is None or c == 0 or c % s or stride != s:
                continue
            rest = substitute(rest, {q: E.Const(0, q.dtype)})
            term = E.mul(E.Const(c // s, q.dtype), q) if c // s != 1 else q
            moved = term if moved is None else E.add(moved, term)
        if moved is None:
            return e
        if not quotient:
            return E.mod(rest, e.b)
        return E.add(moved, E.floordiv(rest, e.b))
