"""Loop order for sum reductions: put the unit-stride data axis innermost.

LLVM's O3 does not interchange loops, so the lowering must choose an order in which the
innermost loop walks memory with unit stride.  For a stage whose whole body is a sum

    C[i, j] = sum(A[i, k] * B[k, j], axis=k)

the plain order ``for i: for j: acc = 0; for k: acc += ...; C[i, j] = acc`` walks ``B`` with
stride ``m`` in its innermost loop.  When the innermost data axis ``j`` is the unit-stride
axis (coefficient 1 in the last index) of the store and of more reads than the innermost
reduction axis ``k`` is (only reads that move with ``k`` count: ``m[i]`` in a log-softmax's
``sum_k exp(X[i, k] - m[i])`` is loaded once per element in the plain order, and letting it
vote walked ``X`` by columns, 3x slower than PyTorch on a 4096x1000 cross-entropy), the stage
becomes (the "i, k, j" order; 27 vs 0.8 GFLOP/s for a 512^3 float32 matmul on one core)::

    parallel for (i, 0, n) {
      for (j, 0, m) { C[i, j] = 0.0 }
      for (k, 0, K) { for (j, 0, m) { C[i, j] += A[i, k] * B[k, j] } }
    }

Legality: the sum is accumulated in a different order (``k`` outside ``j`` instead of inside,
which for one element ``C[i, j]`` is the same sequence of ``k``; only the interleaving with
other elements changes).  Each element still receives exactly the terms of its own sum, in
increasing ``k``, so integer sums are exact and float sums are bit-identical to the plain
order.  The transformation applies only when the body is a single ``sum`` with no nested
reduction (so nothing else depends on the partial sums), the reduction bounds do not use
``j`` (the ``k`` loops run outside it) and the stage has at least one data axis.  When the
scores tie (a convolution: ``X[c, y + ry, x + rx]`` is unit-stride in both ``x`` and ``rx``),
``j`` goes innermost only when a read slides along both (a window) and ``k``'s extent is a
constant shorter than ``j``'s: a loop of 3 iterations cannot be vectorised, a row of 32 can.
A strided window (``X[c, 2*y + ry, 2*x + rx]``, where ``k`` wins the score) also puts ``j``
innermost when ``k`` has at most 4 iterations and ``j`` at least 16: strided loads along a
row vectorise, a 3-iteration loop does not (stride-2 convolution, scheduled: 0.31 -> 0.11 ms);
the same for a dilated window (``X[c, 2*x + 2*rx]``: ``k``'s coefficient up to 4).
The store keeps unit stride in ``j`` in every case (it is the stage's own last axis).
Conversely ``k`` stays innermost although ``j`` wins the score when ``j`` has at most 4
iterations, ``k`` at least 16, and a read walks ``k`` with a constant stride 2-4 (the weight
gradient of a stride-2 convolution, ``sum H[.., y, x] * X[.., 2*y + ry, 2*x + rx]`` over
``x``, would otherwise run a 3-iteration loop over ``rx``): the CPU schedule's polyphase
copy (``passes/schedule/cpu/strided.py``) makes that read unit-stride.
A ``j`` of one iteration never goes inside: there is nothing to vectorise along it, and the
plain order's local accumulator is the form the contraction schedule's register tiles take
(the weight gradient of a 1x1 stride-2 convolution, ``W_grad[o, c, 0, 0]``, ran as a direct
accumulation into ``W_grad``: 4.6 -> 1.05 ms for 8x256x16x16 -> 128 on one core).

Max and min reductions (``max_pool2d``: ``max(X[c, 2*y + ry, 2*x + rx])``) take the "i, k, j"
order by the two window rules only, not by the score: a row maximum's argmax, ``min_k
select(A[i, k] == m[i], k, ..)``, scores ``i`` higher through the vector ``m[i]`` and would walk
``A`` by columns.  Each element receives the same terms in the same order, so the result
(NaN propagation included: the combine is the same) is identical to the plain order.
"""

from __future__ import annotations

from typing import Callable

from tecomp import expr as E
from tecomp.functor import children, substitute, tensor_reads
from tecomp.loopir import Buffer, For, IfThenElse, Seq, Stmt, Store

from ...affine_forms import (
    coefficient,
    expr_vars,
    floor_form,
    lower_terms,
    unit_stride,
    upper_terms,
)
from ...lower_stage import identity, rename_axes, upper


def _has_reduce(e: E.Expr) -> bool:
    return any(isinstance(x, E.Reduce) for x in _walk(e))


def _walk(e: E.Expr):
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(children(x))


def contiguous_reduction_last(body: E.Expr) -> E.Expr:
    """``body`` with the axes of a top-level reduction reordered so that the axis more reads
    walk with unit stride than any other is the innermost (last) one; otherwise ``body``.

    A gradient's reduction axes come in the order differentiation made them: the weight
    gradient of a depthwise convolution sums ``head[c, t2, t] * X[c, t2 + ry, t + rx]`` over
    ``(t, t2)``, columns outside rows, so its innermost loop strides by a row (and the "i, k,
    j" rule below then vectorises the 3-wide ``rx`` instead).  Reordering is legal when no
    axis's bounds use another reduction axis (a box, not a triangle); it changes only the
    order in which a sum's terms are added, as vectorising a reduction does."""
    if not isinstance(body, E.Reduce) or len(body.axes) < 2:
        return body
    axes = body.axes
    own = {ax.var for ax in axes}
    if any((expr_vars(ax.lo) | expr_vars(ax.extent)) & own for ax in axes):
        return body
    reads = tensor_reads(body.body) + ([] if body.where is None else tensor_reads(body.where))

    def score(ax: E.IterVar) -> int:
        return sum(unit_stride(r.indices, ax.var) for r in reads)

    best = max(range(len(axes)), key=lambda n: (score(axes[n]), n))
    if score(axes[best]) <= score(axes[-1]):
        return body
    order = axes[:best] + axes[best + 1:] + (axes[best],)
    return E.Reduce(body.combiner, body.body, order, body.where, body.dtype)


def reorder_sum(axes: tuple[E.IterVar, ...], body: E.Expr, buf: Buffer,
                conv: Callable[[E.Expr], E.Expr], taken: set[str], *,
                parallel: bool = True) -> Stmt | None:
    """The "i, k, j" loop nest for ``buf[axes] = body``, or None when not legal/profitable.

    ``conv`` converts reduction-free tensor-IR expressions to loop IR; ``taken`` holds the
    names reduction axes must not take (the size parameters).
    """
    if not axes or not isinstance(body, E.Reduce) or body.combiner not in ("sum", "max", "min"):
        return None
    if body.dtype != buf.dtype:
        return None
    if any(_has_reduce(x) for x in children(body)):
        return None
    if isinstance(axes[-1].extent, E.Const) and int(axes[-1].extent.value) == 1:
        return None  # a one-iteration ``j`` has nothing to vectorise (module docstring)
    j = axes[-1].var
    raxes, (rbody, where) = rename_axes(body.axes, (body.body, body.where),
                                        taken | {ax.var.name for ax in axes})
    jlo_t, jhi_t = axes[-1].lo, upper(axes[-1].lo, axes[-1].extent)
    bounds = invert_bounds(raxes, j, jlo_t, jhi_t)
    if bounds is None:
        return None
    kbounds, jlos, jhis = bounds
    k = raxes[-1].var
    reads = tensor_reads(rbody)
    store_idx = tuple(ax.var for ax in axes)
    # a read that does not move with the reduction (``m[i]`` in ``sum_k exp(X[i, k] - m[i])``)
    # is loaded once per element in the plain order: it does not vote for ``j`` innermost
    moving = [r for r in reads if any(k in expr_vars(x) for x in r.indices)]
    score_j = unit_stride(store_idx, j) + sum(unit_stride(r.indices, j) for r in moving)
    score_k = sum(unit_stride(r.indices, k) for r in reads)
    if not _j_inside(score_j, score_k, reads, axes, raxes, body.combiner == "sum"):
        return None
    jlo, jhi = conv(jlo_t), conv(jhi_t)
    init = For(j, jlo, jhi, Store(buf, store_idx, identity(body.combiner, buf.dtype)))
    acc: Stmt = Store(buf, store_idx, conv(rbody), body.combiner)
    if where is not None:
        acc = IfThenElse(conv(where), acc)
    ilo, ihi = jlo_t, jhi_t
    for t in jlos:
        ilo = E.maximum(ilo, t)
    for t in jhis:
        ihi = E.minimum(ihi, t)
    stmt: Stmt = For(j, conv(ilo), conv(ihi), acc)
    for ax, (lo, hi) in zip(reversed(raxes), reversed(kbounds)):
        stmt = For(ax.var, conv(lo), conv(hi), stmt)
    return outer_loops(axes[:-1], Seq((init, stmt)), conv, parallel=parallel)


def outer_loops(outer: tuple[E.IterVar, ...], stmt: Stmt, conv: Callable[[E.Expr], E.Expr],
                *, parallel: bool = True) -> Stmt:
    """Loops over the data axes ``outer`` around ``stmt``, the first ``"parallel"``."""
    for n in range(len(outer) - 1, -1, -1):
        ax = outer[n]
        kind = "parallel" if n == 0 and parallel else "serial"
        stmt = For(ax.var, conv(ax.lo), conv(upper(ax.lo, ax.extent)), stmt, kind=kind)
    return stmt


def _j_inside(score_j: int, score_k: int, reads: list, axes: tuple[E.IterVar, ...],
              raxes: tuple[E.IterVar, ...], by_score: bool = True) -> bool:
    """Whether the data axis ``j`` should run inside the reduction axis ``k`` (module doc);
    ``by_score=False`` (max and min) keeps only the two window rules."""
    j, k = axes[-1].var, raxes[-1].var
    if by_score and score_j > score_k and not _strided_long_k(reads, axes[-1], raxes[-1]):
        return True
    window = any(unit_stride(r.indices, j) and unit_stride(r.indices, k) for r in reads)
    if score_j == score_k and window and _short_inner(raxes[-1], axes[-1]):
        return True
    strided = any(r.indices and coefficient(r.indices[-1], j) not in (None, 0)
                  and coefficient(r.indices[-1], k) in (1, 2, 3, 4) for r in reads)
    return len(axes) >= 2 and strided and _short_inner(raxes[-1], axes[-1], most=4)


def _strided_long_k(reads: list, j: E.IterVar, k: E.IterVar) -> bool:
    """Whether ``k`` should stay innermost although ``j`` wins the score: ``j`` has at most 4
    iterations, ``k`` at least 16, and a read walks ``k`` with a constant stride ``2..4`` in
    its last index (the CPU schedule reads it from a polyphase copy with unit stride)."""
    strided = any(r.indices and coefficient(r.indices[-1], k.var) in (2, 3, 4) for r in reads)
    return strided and _short_inner(j, k, most=4)


def _extent(ax: E.IterVar) -> int | None:
    """The constant extent of ``ax``, or the width its constant bound terms allow (``u in
    [max(-2*j, -1), min(31 - 2*j, 2) + 1)``: at most 4), else None."""
    if isinstance(ax.extent, E.Const):
        return int(ax.extent.value)
    los = [int(t.value) for t in lower_terms(ax.lo) if isinstance(t, E.Const)]
    his = [int(t.value) for t in upper_terms(upper(ax.lo, ax.extent)) if isinstance(t, E.Const)]
    return max(0, min(his) - max(los)) if los and his else None


def _short_inner(k: E.IterVar, j: E.IterVar, most: int | None = None) -> bool:
    """Whether the innermost reduction axis ``k`` is the worse innermost loop: its extent is a
    constant shorter than ``j``'s (the 3-wide window of a convolution, which no vectoriser can
    use, against a whole output row); with ``most``, at most ``most`` against at least
    ``4 * most`` (or a symbolic extent)."""
    ek, ej = _extent(k), _extent(j)
    if most is not None and (ek is None or ek > most or (ej is not None and ej < 4 * most)):
        return False
    return ek is not None and (ej is None or ej > ek)


def _invert_floor(t: E.Expr, k: E.Var, j: E.Var, lower: bool):
    """For a bound term ``t = (a*j + r) // c + d`` of ``k`` (``k >= t`` when ``lower``, else
    ``k < t``): ``(side, bound of j, j at which t is extreme)`` or None.  ``k >= t`` means
    ``c*(k - d + 1) > a*j + r``; ``k < t`` means ``c*(k - d + 1) <= a*j + r``."""
    form = floor_form(t, j)
    if form is None:
        return None
    a, r, c, d = form
    one = E.Const(1, j.dtype)
    ck = E.mul(E.Const(c, j.dtype), E.add(k, E.sub(one, d)))  # c * (k - d + 1)
    if lower:
        if a == 1:   # j < c*(k - d + 1) - r; t grows with j: its least value is at jlo
            return "hi", E.add(ck, E.neg(r)), "lo"
        return "lo", E.add(r, E.sub(one, ck)), "last"   # j >= r - c*(k - d + 1) + 1
    if a == 1:       # j >= c*(k - d + 1) - r; t's greatest value is at the last j
        return "lo", E.add(ck, E.neg(r)), "last"
    return "hi", E.add(r, E.sub(one, ck)), "lo"        # j < r - c*(k - d + 1) + 1


def _invert_scaled(t: E.Expr, c: int, k: E.Var, j: E.Var, lower: bool):
    """For a bound term ``t = c*j + r`` (``|c| >= 2``) of ``k``: ``(side, bound of j, j at
    which t is extreme)`` as :func:`_invert_floor` gives.  With ``m = |c|``: ``k >= m*j + r``
    is ``j < (k - r) // m + 1``; ``k >= r - m*j`` is ``j >= (r - k + m - 1) // m``; ``k < m*j
    + r`` is ``j >= (k - r) // m + 1``; ``k < r - m*j`` is ``j < (r - k + m - 1) // m``."""
    from tecomp.functor import substitute

    r = substitute(t, {j: E.Const(0, j.dtype)})
    m = E.Const(abs(c), j.dtype)
    one = E.Const(1, j.dtype)
    up = E.add(E.floordiv(E.sub(k, r), m), one)                          # (k - r) // m + 1
    down = E.floordiv(E.add(E.sub(r, k), E.Const(abs(c) - 1, j.dtype)), m)  # ceil((r - k)/m)
    if lower:
        return ("hi", up, "lo") if c > 0 else ("lo", down, "last")
    return ("lo", up, "last") if c > 0 else ("hi", down, "lo")


def invert_bounds(raxes: tuple[E.IterVar, ...], j: E.Var, jlo: E.Expr, jhi: E.Expr):
    """Bounds of the reduction axes once the data axis ``j`` (range ``[jlo, jhi)``) moves
    inside them, and the extra bounds of ``j`` (Fourier–Motzkin on unit coefficients).

    A reduction bound that is a max (lower) or min (upper, exclusive) of terms each affine in
    ``j`` with coefficient 0, 1 or -1 is split: every term in ``j`` becomes a bound of ``j``
    (``k >= j + r`` gives ``j < k - r + 1``; ``k >= r - j`` gives ``j >= r - k``; ``k < j + r``
    gives ``j >= k - r + 1``; ``k < r - j`` gives ``j < r - k``) and is replaced, in ``k``'s
    bound, by its extreme over ``[jlo, jhi)`` (a superset of ``k``'s values for every ``j``;
    the new bounds of ``j`` keep exactly the original pairs).  Worked example, the input
    gradient of a 3-wide convolution over 32 outputs: ``for k in [max(j - 31, 0), min(j, 2)
    + 1)`` inside ``j in [0, 34)`` becomes ``for k in [0, 3)`` around ``j in [max(0, k),
    min(34, k + 32))``.  A term ``(a*j + r) // c + d`` with ``a = ±1`` and ``c >= 1`` (the
    windows of a dilated or strided convolution's gradient) inverts exactly too: ``k >= (j +
    r) // c + d`` is ``j < c*(k - d + 1) - r`` (see :func:`_invert_floor`); a dilation-2
    window ``for k in [max((j - 30) // 2, 0), min(j // 2, 2) + 1)`` becomes ``for k in [0,
    3)`` around ``j in [max(.., 2*k), min(.., 2*k + 32))``.  Returns ``(((lo, hi) per axis),
    j lower terms, j upper terms)``, or None when a bound is not of that form.
    """

    kb, jl, jh = [], [], []
    jlast = E.sub(jhi, 1)
    for ax in raxes:
        k = ax.var
        lo, hi = ax.lo, upper(ax.lo, ax.extent)
        if j not in expr_vars(lo) and j not in expr_vars(hi):
            kb.append((lo, hi))
            continue
        nlo = _invert_terms(lower_terms(lo), k, j, jlo, jlast, jl, jh, True)
        nhi = _invert_terms(upper_terms(hi), k, j, jlo, jlast, jl, jh, False)
        if nlo is None or nhi is None:
            return None
        kb.append((nlo, nhi))
    return kb, jl, jh


def _invert_terms(terms: list[E.Expr], k: E.Var, j: E.Var, jlo: E.Expr, jlast: E.Expr,
                  jl: list, jh: list, lower: bool) -> E.Expr | None:
    """One side of :func:`invert_bounds`: the terms of ``k``'s lower (``lower``) or upper
    bound, each in ``j`` turned into a bound of ``j`` (appended to ``jl``/``jh``) and
    replaced by its extreme over ``j``; their max (lower) or min (upper), or None."""
    same, other = (jh, jl) if lower else (jl, jh)  # where a term with coefficient +1 goes
    at_plus, at_minus = (jlo, jlast) if lower else (jlast, jlo)
    combine = E.maximum if lower else E.minimum
    out: E.Expr | None = None
    for t in terms:
        c = coefficient(t, j)
        if c is None:
            inv = _invert_floor(t, k, j, lower)
            if inv is None:
                return None
            (jl if inv[0] == "lo" else jh).append(inv[1])
            t = substitute(t, {j: jlo if inv[2] == "lo" else jlast})
        elif c not in (0, 1, -1):
            inv = _invert_scaled(t, c, k, j, lower)
            if inv is None:
                return None
            (jl if inv[0] == "lo" else jh).append(inv[1])
            t = substitute(t, {j: jlo if inv[2] == "lo" else jlast})
        else:
            r = substitute(t, {j: E.Const(0, j.dtype)})
            if c == 0:
                t = r  # ``2*j + u - 2*j``: no ``j`` may stay in a bound of a loop outside it
            elif c == 1:
                same.append(E.add(E.sub(k, r), 1))
                t = substitute(t, {j: at_plus})
            elif c == -1:
                other.append(E.sub(r, k))
                t = substitute(t, {j: at_minus})
        out = t if out is None else combine(out, t)
    return out
