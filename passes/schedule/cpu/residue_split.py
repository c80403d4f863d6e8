"""Residue splitting of a sliding sum window: the polyphase form of a transposed convolution.

The input gradient of a stride-``s`` convolution is, after zero elimination, a gather whose
reduction window moves by one step every ``s`` outputs (``s = 2``, a 3-wide kernel, 16
positions of the head ``H``)::

    G[j] = sum(H[k] * W[j - 2*k], k in [max(0, (j - 1) // 2), min(15, j // 2) + 1))

The loop-order pass (:mod:`.loop_order`) moves ``j`` inside ``k``, where it runs over
``[2*k, 2*k + 3)``: an innermost loop of 3 iterations with moving bounds, which no vectoriser
can use.  Splitting ``j`` by its residue modulo ``s`` (``j = s*q + r``, ``0 <= r < s``) turns
every window term ``(j + c) // s + d`` into ``q + (r + c) // s + d``: for a fixed ``r`` the
window of ``k`` is ``[q + A(r), q + B(r))``, of constant width and sliding by one per ``q``.
Substituting ``k = q + u`` gives ``u`` the short range ``[A(r), B(r))``, free of ``q``, and
moves the fixed bounds of ``k`` (``0 <= k < 16``) onto ``q``.  Each residue ``r`` is emitted
as its own nest, so its window ``[A(r), B(r))`` is a constant range; the phases accumulate
with unit stride into a phase-major temporary ``P[r, q]`` (``G[2*q + r]`` would be a stride-2
read-modify-write, which the vectoriser turns into scatters), and the window is folded into
one update per ``q`` where all its steps are valid (index-set splitting, :func:`_folded`).
The example (33 outputs) becomes (``r = 0``: ``u in {-1, 0}``; ``r = 1``: ``u = 0``)::

    for (q, 0, 17) { P[0, q] = 0 };  for (q, 0, 17) { P[1, q] = 0 }
    for (u, -1, 1) { for (q, max(0, -u), min(17, 16 - u, 1)) { P[0, q] += H[q + u] * W[-2*u] } }
    for (q, 1, 16) { P[0, q] = P[0, q] + H[q - 1] * W[2] + H[q] * W[0] }
    for (u, -1, 1) { for (q, max(0, -u, 16), min(17, 16 - u)) { P[0, q] += H[q + u] * W[-2*u] } }
    for (q, 0, 16) { P[1, q] += H[q] * W[1] }
    for (j, 0, 33) { G[j] = P[j % 2, j // 2] }

that is, ``s`` stride-1 correlations of ``H`` with the ``s`` phases of ``W`` (the polyphase
decomposition of an interpolating filter, Bellanger, Bonnerot & Coudreuse, "Digital filtering
by polyphase network", IEEE Trans. ASSP 1976; the "sub-pixel convolution" view of a transposed
convolution, Shi et al., CVPR 2016).  Each innermost loop now walks a whole row of ``H``
with unit stride and loop-invariant weights.  Residue classes are separate nests; no test
runs inside the innermost loop.  With ``s = 1`` there is no split (no temporary either) and
the substitution alone turns a narrow window over a row into a loop over the row.  Outer
reduction axes (the channels of a convolution) stay outside the residue nests; data axes
other than ``j`` are the stage's outer loops, the first one parallel (each iteration owns its
rows of ``P``).

When it applies (:func:`find_window`): the stage is ``buf[axes] = sum(body, raxes, where)``;
exactly one reduction axis ``k`` has bounds that use the last data axis ``j``; those bounds
are maxima (lower) and minima (exclusive upper) of terms that are free of ``j`` or of the form
``(j + c) // s + d`` (``j + c`` when ``s = 1``) with one ``s`` for all terms, at least one such
term on each side; no later reduction axis uses ``k`` or ``j``; and it pays: the window width
``B(r) - A(r)`` folds to a constant ``w`` and the fixed range of ``k`` is longer than the
``s*w`` iterations the loop-order pass would leave innermost (or is symbolic while ``w <=
16``).  Anything else keeps the loop-order pass's form.

Legality.  ``(r, q)`` ranges over every ``j`` of ``[jlo, jhi)`` exactly once (``q`` from
``ceil((jlo - r) / s)`` to ``ceil((jhi - r) / s)``), and for each ``j`` the pairs ``(u, q)``
with ``k = q + u`` inside both the window and the fixed bounds are exactly the original ``k``
range.  One element ``buf[.., j]`` (``P[r, q]``) receives its terms in increasing ``(k1, ..,
k, ..)`` order (``u`` increases with ``k``, and in the folded form each ``q`` gets all its
``u`` in one of three disjoint parts; the axes before ``k`` stay outside, those after it
keep their place around the ``q`` loop), as one chain of additions from 0: integer sums are
exact and float sums bit-identical to the plain order.  Distinct ``(r, q)`` are distinct
elements, and the copy back reads each element of ``P`` once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tecomp import expr as E
from tecomp.functor import ExprMutator, children, free_vars, fresh_name, substitute, walk
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, IfThenElse, Seq, Stmt, Store

from ...affine_forms import coefficient, floor_form, lower_terms, upper_terms
from ...lower_stage import identity, rename_axes, upper
from ...zero_elimination.bridge import AffineBridge
from .loop_order import outer_loops


@dataclass(frozen=True)
class Window:
    """A reduction axis whose bounds slide with ``j = stride*q + r`` (module docstring).

    ``lo``/``hi`` are the window terms ``(c, d)`` of ``(j + c) // stride + d`` (lower and
    exclusive upper bounds of ``k``); ``fixed_lo``/``fixed_hi`` the terms free of ``j``.
    """

    index: int
    stride: int
    lo: tuple[tuple[E.Expr, E.Expr], ...]
    hi: tuple[tuple[E.Expr, E.Expr], ...]
    fixed_lo: tuple[E.Expr, ...]
    fixed_hi: tuple[E.Expr, ...]

    def offset(self, term: tuple[E.Expr, E.Expr], r: E.Expr) -> E.Expr:
        """``(r + c) // stride + d``: the bound of ``u = k - q`` that a window term gives."""
        c, d = term
        if self.stride == 1:
            return E.add(c, d)
        return E.add(E.floordiv(_plus(r, c), self.stride), d)

    def u_bounds(self, r: E.Expr) -> tuple[E.Expr, E.Expr]:
        """``u``'s range ``[A(r), B(r))`` for the residue ``r``."""
        lo, hi = (self.offset(t, r) for t in (self.lo[0], self.hi[0]))
        for t in self.lo[1:]:
            lo = E.maximum(lo, self.offset(t, r))
        for t in self.hi[1:]:
            hi = E.minimum(hi, self.offset(t, r))
        return lo, hi


def window_overlap(los: list[E.Expr], his: list[E.Expr]) -> tuple[E.Expr, E.Expr]:
    """``(P, M)`` for ranges ``[los[n], his[n])``: ``P = max(los)``, ``M = max(P, min(his))``,
    so ``[P, M)`` is where every range holds (empty when they do not overlap)."""
    p, h = los[0], his[0]
    for x in los[1:]:
        p = E.maximum(p, x)
    for x in his[1:]:
        h = E.minimum(h, x)
    return p, E.maximum(p, h)


def _term(t: E.Expr, j: E.Var) -> tuple[E.Expr, int, E.Expr] | None:
    """``(c, s, d)`` with ``t == (j + c) // s + d`` (``s = 1``: ``j + c``), else None."""
    if coefficient(t, j) == 1:
        return substitute(t, {j: E.Const(0, j.dtype)}), 1, E.Const(0, j.dtype)
    form = floor_form(t, j)
    if form is None or form[0] != 1:
        return None
    _, c, s, d = form
    return c, s, d


def _split_terms(terms: list[E.Expr], j: E.Var, fixed: list, window: list,
                 strides: set[int]) -> bool:
    for t in terms:
        if j not in free_vars(t):
            fixed.append(t)
            continue
        form = _term(t, j)
        if form is None:
            return False
        window.append((form[0], form[2]))
        strides.add(form[1])
    return True


def find_window(raxes: tuple[E.IterVar, ...], j: E.Var, *,
                max_width: int = 16) -> Window | None:
    """The reduction axis to split by residues of ``j`` and skew, or None (module docstring:
    when it applies and pays)."""
    uses = [n for n, ax in enumerate(raxes) if j in free_vars(ax.lo) | free_vars(ax.extent)]
    if len(uses) != 1:
        return None
    n = uses[0]
    k = raxes[n].var
    for ax in raxes[n + 1:]:
        if {j, k} & (free_vars(ax.lo) | free_vars(ax.extent)):
            return None
    lo, hi = raxes[n].lo, upper(raxes[n].lo, raxes[n].extent)
    flo: list[E.Expr] = []
    fhi: list[E.Expr] = []
    wlo: list = []
    whi: list = []
    strides: set[int] = set()
    if not (_split_terms(lower_terms(lo), j, flo, wlo, strides)
            and _split_terms(upper_terms(hi), j, fhi, whi, strides)):
        return None
    if len(strides) != 1 or not wlo or not whi:
        return None
    win = Window(n, strides.pop(), tuple(wlo), tuple(whi), tuple(flo), tuple(fhi))
    width = _width(win)
    if width is None or width < 1:
        return None
    fixed = _fixed_extent(win)
    if fixed is None:
        return win if width <= max_width else None
    return win if win.stride * width < fixed else None


def _width(win: Window) -> int | None:
    """The widest window ``B(r) - A(r)`` over the residues, when it is a constant."""
    out = None
    for r in range(win.stride):
        lo, hi = win.u_bounds(E.Const(r, "int64"))
        w = E.sub(hi, lo)
        if not isinstance(w, E.Const):
            return None
        out = int(w.value) if out is None else max(out, int(w.value))
    return out


def _fixed_extent(win: Window) -> int | None:
    """The length of ``k``'s fixed range when both sides are constants, else None."""
    if not win.fixed_lo or not win.fixed_hi:
        return None
    if not all(isinstance(t, E.Const) for t in win.fixed_lo + win.fixed_hi):
        return None
    return min(int(t.value) for t in win.fixed_hi) - max(int(t.value) for t in win.fixed_lo)


class _Affine(ExprMutator):
    """Write every index of a tensor read as a sum of terms (``2*q + r - 2*(q + u)`` ->
    ``r - 2*u``), so that indices free of the innermost variable read as such."""

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        idx = tuple(_normal(self.visit(i)) for i in e.indices)
        if all(x is y for x, y in zip(idx, e.indices)):
            return e
        return E.TensorRead(e.tensor, idx, e.dtype)


def _normal(e: E.Expr) -> E.Expr:
    if e.dtype != "int64" or any(v.dtype != "int64" for v in free_vars(e)):
        return e
    if not isinstance(e, (E.Add, E.Sub, E.Mul, E.Neg)):
        return e
    bridge = AffineBridge(set())
    a = bridge.to_affine(e)
    if a is None:
        return e
    out = bridge.to_expr(a, {v.name: v for v in free_vars(e)})
    return e if out.dtype != e.dtype else out


def split_window_sum(axes: tuple[E.IterVar, ...], body: E.Expr, buf: Buffer,
                     conv: Callable[[E.Expr], E.Expr], taken: set[str], *,
                     fresh: Callable[[str], str] | None = None,
                     parallel: bool = True) -> Stmt | None:
    """The residue-split nest for ``buf[axes] = body`` (module docstring), or None when it
    does not apply or does not pay.

    ``conv`` converts reduction-free tensor-IR expressions to loop IR; ``taken`` holds the
    names new loop variables must not take (the size parameters); ``fresh`` gives unused
    buffer names for the phase-major temporary (without it, strides above 1 are left to the
    loop-order pass).  A window with a ``where``, reduction axes after ``k`` or a window
    width that is not a constant per residue keeps a loop over ``u`` instead of the fold.
    """
    if not axes or not isinstance(body, E.Reduce) or body.combiner != "sum":
        return None
    if body.dtype != buf.dtype or any(
            isinstance(x, E.Reduce) for c in children(body) for x in walk(c)):
        return None
    names = set(taken) | {ax.var.name for ax in axes}
    raxes, (rbody, where) = rename_axes(body.axes, (body.body, body.where), names)
    j_ax = axes[-1]
    j = j_ax.var
    win = find_window(raxes, j)
    if win is None or any(ax.lo != E.Const(0, ax.lo.dtype) for ax in axes):
        return None
    names |= {ax.var.name for ax in raxes} | {v.name for v in free_vars(body)}
    q, u = (_fresh(f"{j.name}_{x}", names, j.dtype) for x in ("q", "u"))
    s = win.stride
    k = raxes[win.index].var
    jlo, jhi = j_ax.lo, upper(j_ax.lo, j_ax.extent)
    outer = tuple(ax.var for ax in axes[:-1])
    base = E.floordiv(jlo, s)
    if s > 1:
        if fresh is None:
            return None
        shape = tuple(conv(ax.extent) for ax in axes[:-1]) + (
            E.Const(s, j.dtype), conv(E.sub(_q_bound(jhi, E.Const(0, j.dtype), s), base)))
        dst = Buffer(fresh(f"{buf.name}_phases"), shape, buf.dtype, "temp")
        lead = outer
        zero: list[Stmt] = [For(q, E.Const(0, j.dtype), shape[-1],
                                Store(dst, lead + (E.Const(rv, j.dtype), q), _zero(buf)))
                            for rv in range(s)]
    else:
        dst, lead = buf, outer
        zero = [For(q, conv(jlo), conv(jhi), Store(buf, outer + (q,), _zero(buf)))]

    def phase(rv: int) -> Stmt | None:
        res = E.Const(rv, j.dtype)
        jq = E.add(E.mul(s, q), res) if s > 1 else q
        at = lead + ((E.Const(rv, j.dtype), conv(E.sub(q, base))) if s > 1 else (q,))

        def term(uv: E.Expr) -> E.Expr:
            return conv(_Affine().visit(substitute(rbody, {j: jq, k: E.add(q, uv)})))

        def guard(uv: E.Expr, st: Stmt) -> Stmt:
            if where is None:
                return st
            w = _Affine().visit(substitute(where, {j: jq, k: E.add(q, uv)}))
            return IfThenElse(conv(w), st)

        def q_range(uv: E.Expr) -> tuple[E.Expr, E.Expr]:
            lo, hi = _q_bound(jlo, res, s), _q_bound(jhi, res, s)
            for t in win.fixed_lo:
                lo = E.maximum(lo, _minus(t, uv))
            for t in win.fixed_hi:
                hi = E.minimum(hi, _minus(t, uv))
            return conv(lo), conv(hi)

        ulo, uhi = win.u_bounds(res)
        inner = raxes[win.index + 1:]
        if inner or where is not None or not (isinstance(ulo, E.Const)
                                              and isinstance(uhi, E.Const)):
            st: Stmt = For(q, *q_range(u), guard(u, Store(dst, at, term(u), "sum")))
            for ax in reversed(inner):
                st = For(ax.var, conv(ax.lo), conv(upper(ax.lo, ax.extent)), st)
            return For(u, conv(ulo), conv(uhi), st)
        if uhi.value <= ulo.value:
            return None  # no term reaches this residue: its phase stays zero
        return _folded(q, u, int(ulo.value), int(uhi.value), q_range,
                       lambda uv: Store(dst, at, term(uv), "sum"), dst, at, term)

    parts = [x for x in (phase(rv) for rv in range(s)) if x is not None]
    stmt: Stmt = _seq(parts)
    for ax in reversed(raxes[:win.index]):
        stmt = For(ax.var, conv(ax.lo), conv(upper(ax.lo, ax.extent)), stmt)
    if s == 1:
        return outer_loops(axes[:-1], Seq((*zero, stmt)), conv, parallel=parallel)
    back = BufferLoad(dst, lead + (conv(E.mod(j, s)), conv(E.sub(E.floordiv(j, s), base))),
                      buf.dtype)
    copy = For(j, conv(jlo), conv(jhi), Store(buf, outer + (j,), back))
    return Allocate(dst, outer_loops(axes[:-1], Seq((*zero, stmt, copy)), conv,
                                     parallel=parallel))


def _folded(q: E.Var, u: E.Var, a: int, b: int, q_range, update, dst: Buffer,
            at: tuple[E.Expr, ...], term) -> Stmt:
    """The window ``u in [a, b)`` folded into one update per ``q`` where every ``u`` is valid
    (index-set splitting, as :func:`.schedule.cpu.tile.split_fold`)::

        for (u, a, b) { for (q, lo(u), min(hi(u), P)) { D[q] += v(u, q) } }    # q < P
        for (q, P, M) { D[q] = ((D[q] + v(a, q)) + v(a + 1, q)) + .. }           # all u valid
        for (u, a, b) { for (q, max(lo(u), M), hi(u)) { D[q] += v(u, q) } }    # q >= M

    with ``P = max_u lo(u)`` and ``M = max(P, min_u hi(u))``: each ``q`` gets its terms in
    increasing ``u`` in exactly one of the three parts."""
    los, his = zip(*(q_range(E.Const(uv, u.dtype)) for uv in range(a, b)))
    p, m = window_overlap(los, his)
    lo_u, hi_u = q_range(u)
    acc: E.Expr = BufferLoad(dst, at, dst.dtype)
    for uv in range(a, b):
        acc = E.add(acc, term(E.Const(uv, u.dtype)))
    span = (E.Const(a, u.dtype), E.Const(b, u.dtype))
    if b - a == 1:
        return For(q, los[0], his[0], update(E.Const(a, u.dtype)))
    return _seq([For(u, *span, For(q, lo_u, E.minimum(hi_u, p), update(u))),
                 For(q, p, m, Store(dst, at, acc)),
                 For(u, *span, For(q, E.maximum(lo_u, m), hi_u, update(u)))])


def _seq(items: list[Stmt]) -> Stmt:
    return items[0] if len(items) == 1 else Seq(tuple(items))


def _zero(buf: Buffer) -> E.Const:
    return identity("sum", buf.dtype)


def _plus(a: E.Expr, b: E.Expr) -> E.Expr:
    """``a + b``, written ``a - c`` for a negative constant ``b = -c``."""
    if isinstance(b, E.Const) and b.value < 0:
        return E.sub(a, E.Const(-b.value, b.dtype))
    return E.add(a, b)


def _minus(a: E.Expr, b: E.Expr) -> E.Expr:
    """``a - b``, written ``-b`` when ``a`` is 0 and ``a + c`` when ``b = -c``."""
    if isinstance(b, E.Const) and b.value < 0:
        return E.add(a, E.Const(-b.value, b.dtype))
    return E.neg(b) if isinstance(a, E.Const) and a.value == 0 else E.sub(a, b)


def _fresh(base: str, names: set[str], dtype: str) -> E.Var:
    name = fresh_name(base, names)
    names.add(name)
    return E.Var(name, dtype)


def _q_bound(j: E.Expr, r: E.Expr, s: int) -> E.Expr:
    """The first ``q`` with ``s*q + r >= j``: ``ceil((j - r) / s)``, which is ``j // s`` for
    every residue ``0 <= r < s`` when ``j`` is a constant multiple of ``s``."""
    if s == 1:
        return E.sub(j, r)
    if isinstance(j, E.Const) and int(j.value) % s == 0:
        return E.Const(int(j.value) // s, j.dtype)
    return E.floordiv(E.add(E.sub(j, r), s - 1), s)
