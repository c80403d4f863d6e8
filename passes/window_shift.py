"""Windows that slide ``s`` steps per output rewritten relative to the output: ``k = s*j + u``.

The input gradient of a stride-``s`` transposed convolution (and of any strided convolution
whose zero elimination chose the absolute input column as its reduction variable) sums over a
window that moves by ``s`` per output column ``j``::

    G[.., j] = sum(H[.., k] * W[.., k - 2*j + 1], k in [max(0, 2*j - 1), min(31, 2*j + 2) + 1))

Lowered as written, the innermost loop is the 4-wide ``k`` (no vector unit can use it), and
the loop-order pass (:mod:`.loop_order`) cannot put ``j`` inside: ``j`` would range over
the one or two columns whose window holds ``k``.  :func:`shift_strided_windows` substitutes
``k = s*j + u`` (the window offset of a strided convolution)::

    G[.., j] = sum(H[.., 2*j + u] * W[.., u + 1], u in [max(-2*j, -1), min(31 - 2*j, 2) + 1))

``u`` now has a constant range except at the edges, ``H`` is read with stride ``s`` along
``j`` (the CPU schedule reads such rows from a polyphase copy, ``schedule/cpu/strided.py``),
and the loop-order pass takes the "i, k, j" order with the whole output row innermost.

When it applies: the stage's body is a reduction; a reduction axis ``k`` has bounds that are
maxima (lower) and minima (exclusive upper) of terms affine in the last data axis ``j`` with
coefficient 0 or one common ``s >= 2``, at least one term with ``s`` on each side, and the
terms with ``s`` differ from ``s*j`` by constants whose window ``max(hi) - min(lo)`` (the
widest ``u`` range) is at most :data:`MAX_WIDTH`.

Legality.  For a fixed ``j``, ``u = k - s*j`` is a bijection of the integers that keeps their
order; each bound term ``t`` of ``k`` becomes ``t - s*j`` for ``u``, so ``u`` runs exactly over
the images of ``k``'s values in the same increasing order, and the body (and the bounds of
later axes) read ``s*j + u`` where they read ``k``: the same terms are combined in the same
order, exact for integers and bit-identical for floats.
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.functor import ExprMutator, free_vars, fresh_name, substitute

from .affine_forms import lower_terms, upper_terms
from .exact_div import affine, build
from .lower_stage import upper

#: the widest window (in steps of ``u``) rewritten; wider ones are left as written
MAX_WIDTH = 8


def shift_strided_windows(axes: tuple[E.IterVar, ...], body: E.Expr,
                          taken: set[str]) -> E.Expr:
    """``body`` with each reduction axis that slides ``s >= 2`` per step of the last data
    axis rewritten relative to it (module docstring); ``body`` itself when none does.
    ``taken`` holds names the new axes must avoid."""
    if not axes or not isinstance(body, E.Reduce):
        return body
    j = axes[-1].var
    raxes = list(body.axes)
    inner, where = body.body, body.where
    avoid = set(taken) | {a.var.name for a in axes} | {a.var.name for a in raxes}
    avoid |= {v.name for v in free_vars(inner)}
    changed = False
    for n, ax in enumerate(raxes):
        lo_terms = lower_terms(ax.lo)
        hi_terms = upper_terms(upper(ax.lo, ax.extent))
        s = _slope(lo_terms, hi_terms, j)
        if s is None:
            continue
        u = E.Var(fresh_name(f"{ax.var.name}_u", avoid), ax.var.dtype)
        avoid.add(u.name)
        nlo = _combine([_minus(t, j, s) for t in lo_terms], E.maximum)
        nhi = _combine([_minus(t, j, s) for t in hi_terms], E.minimum)
        at = {ax.var: E.add(E.mul(E.Const(s, j.dtype), j), u)}
        raxes[n] = E.IterVar(u, nlo, E.sub(nhi, nlo), ax.kind)
        for m in range(n + 1, len(raxes)):
            later = raxes[m]
            lo = _normal_bound(substitute(later.lo, at))
            hi = _normal_bound(substitute(upper(later.lo, later.extent), at))
            raxes[m] = E.IterVar(later.var, lo, E.sub(hi, lo), later.kind)
        inner = _Normal(u).visit(substitute(inner, at))
        where = None if where is None else _Normal(u).visit(substitute(where, at))
        changed = True
    if not changed:
        return body
    return E.Reduce(body.combiner, inner, tuple(raxes), where, body.dtype)


def _slope(lo_terms: list[E.Expr], hi_terms: list[E.Expr], j: E.Var) -> int | None:
    """The common coefficient ``s >= 2`` of ``j`` in the bound terms, when the window they
    leave for ``u`` is at most :data:`MAX_WIDTH` wide; else None."""
    slopes, sides = set(), []
    for terms in (lo_terms, hi_terms):
        rests = []
        for t in terms:
            coeffs, c = affine(t)
            a = coeffs.get(j, 0)
            if any(j in free_vars(x) for x in coeffs if x != j):
                return None
            if a:
                slopes.add(a)
                if len(coeffs) == 1:
                    rests.append(c)
        sides.append(rests)
    if len(slopes) != 1 or not all(sides):
        return None
    (s,) = slopes
    if s < 2 or min(sides[1]) - max(sides[0]) > MAX_WIDTH:
        return None
    return s


def _minus(t: E.Expr, j: E.Var, s: int) -> E.Expr:
    """``t - s*j`` in affine normal form."""
    coeffs, c = affine(t)
    coeffs = dict(coeffs)
    coeffs[j] = coeffs.get(j, 0) - s
    return build(({k: v for k, v in coeffs.items() if v}, c), t.dtype)


def _combine(terms: list[E.Expr], op) -> E.Expr:
    out = terms[0]
    for t in terms[1:]:
        out = op(out, t)
    return out


def _normal_bound(e: E.Expr) -> E.Expr:
    """A bound (maxima and minima of affine terms) with each term in affine normal form:
    ``max(2*j + u - 2*j, 0)`` is ``max(u, 0)``, so no later pass sees ``j`` in it."""
    if isinstance(e, (E.Max, E.Min)):
        combine = E.maximum if isinstance(e, E.Max) else E.minimum
        return combine(_normal_bound(e.a), _normal_bound(e.b))
    return build(affine(e), e.dtype)


class _Normal(ExprMutator):
    """Indices that use ``u`` in affine normal form: ``W[2*j + u - 2*j + 1]`` reads
    ``W[u + 1]``."""

    def __init__(self, u: E.Var) -> None:
        super().__init__()
        self.u = u

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        idx = tuple(build(affine(x), x.dtype) if self.u in free_vars(x) else self.visit(x)
                    for x in e.indices)
        if all(a is b for a, b in zip(idx, e.indices)):
            return e
        return E.TensorRead(e.tensor, idx, e.dtype)
