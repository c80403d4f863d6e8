"""Zero elimination: from delta-laden gradients to loops over exactly the non-zero terms.

:func:`eliminate_zeros` rewrites every compute stage whose body contains Kronecker deltas
(what reverse mode produces, see :mod:`tecomp.passes.autodiff`): the body is split into
terms (:mod:`.terms`), each term's deltas are solved over the integers and its domain is
bounded exactly (:mod:`.eliminate`), and the term becomes either a sum over the remaining
free variables with tight, symbolic bounds (gather form) or a scatter-add over its domain
when a delta pins the output index to data (``dE[idx[i], j] += ...``).  Stages without
deltas are left as they are.  The algorithm is ZERO_ELIMINATION.md's, after Urban & van der
Smagt (2017) sections 4–5, with the scatter/gather choice of Li et al. (2018, Halide).
"""

from __future__ import annotations

from typing import Sequence

from tecomp import expr as E
from tecomp.functor import free_vars, fresh_name, rewrite_stages, substitute, unconditional, walk
from tecomp.solvers.affine import Affine
from tecomp.tensor import ComputeOp, ScatterOp, Tensor

from ..inline_bounds import body_in_range
from .bridge import AffineBridge
from .eliminate import Domain, NeedsScatter, Unbounded, solve_domain
from .terms import Term, expand, has_delta, has_guarded_sum

__all__ = ["eliminate_zeros", "has_delta"]


def eliminate_zeros(outputs: Sequence[Tensor]) -> list[Tensor]:
    """``outputs`` with every delta-carrying stage rewritten; values are unchanged.

    Guarantees: each rewritten stage computes the same values as before (up to float
    reassociation); a Delta node remains only where no exact elimination exists (a delta
    on two data-dependent values, or one inside a non-linear function).
    """

    def rewrite(t: Tensor, body: E.Expr) -> Tensor | None:
        if has_delta(body) or has_guarded_sum(body):
            return _rewrite_stage(t, body)
        return None

    return rewrite_stages(outputs, rewrite)


def _rewrite_stage(t: Tensor, body: E.Expr) -> Tensor:
    assert isinstance(t.op, ComputeOp)
    terms = expand(body)
    try:
        out = _rewrite_terms(t, body, terms) if terms is not None else None
    except Unbounded:  # exact but not expressible here: leave the stage as it is
        out = None
    if out is None or _loses_checked_reads(t, body, out):
        return _same(t, body)
    return out


def _loses_checked_reads(t: Tensor, body: E.Expr, out: Tensor) -> bool:
    """Whether ``out`` no longer evaluates, at every point of the stage, a read that ``body``
    evaluates there and that may leave its tensor.

    Terms multiply a factor into the sums beside it: ``sum(a, where=i < r) / d`` becomes
    ``sum(a / d, r in [i + 1, 1))``, and where that domain is empty ``d`` is never read.  A
    gather ``X[idx[i], 0]`` in ``d`` with ``idx[i] = -1`` then went unreported, although the
    evaluator (and the semantics: every stage whole, docs/robustness.md) raise.  Such a stage
    is left as written; reads that the syntactic test proves in range (``H[i, j]`` over its
    own extents, a gradient's head) may move freely."""
    risky = [x for x in unconditional(body)
             if isinstance(x, E.TensorRead) and not body_in_range(t, x)]
    if not risky:
        return False
    # a scatter runs over its terms' domain only; its init (if any) is computed whole
    whole = out.op.init if isinstance(out.op, ScatterOp) else out
    kept: set[E.Expr] = set()
    if whole is not None and isinstance(whole.op, ComputeOp):
        kept = set(unconditional(whole.op.body))
    return any(x not in kept for x in risky)


def _same(t: Tensor, body: E.Expr) -> Tensor:
    assert isinstance(t.op, ComputeOp)
    return Tensor(t.name, t.shape, t.dtype, ComputeOp(t.op.axes, body, t.op.tag), dict(t.attrs))


def _rewrite_terms(t: Tensor, body: E.Expr, terms: list) -> Tensor:
    assert isinstance(t.op, ComputeOp)
    out_vars = [a.var for a in t.op.axes]
    taken = {v.name for v in free_vars(body)} | {v.name for v in out_vars}
    for x in walk(body):
        if isinstance(x, E.Reduce):
            taken |= {a.var.name for a in x.axes}
    context = _box(t)
    parts: dict[E.Expr, int] = {}
    scatters: list[tuple] = []
    for term in terms:
        # each term names its own summation variables from scratch ("t", "t_1", ...), so
        # that identical terms (d(x·x) = dx·x + x·dx) compare equal and are merged
        local = set(taken)
        try:
            part = _gather_term(term, {v.name for v in out_vars}, local, t.dtype, context)
        except NeedsScatter:
            part = None
            scatters.append(_scatter_term(term, t, set(taken)))
        if part is not None:
            parts[part] = parts.get(part, 0) + 1
    gathered: E.Expr = E.Zero(t.dtype)
    for part, count in parts.items():
        gathered = E.add(gathered, part if count == 1 else E.mul(float(count), part))
    if isinstance(gathered, E.Zero):
        gathered = E.Const(0.0 if t.dtype.startswith(("float", "bfloat")) else 0, t.dtype)
    stage = Tensor(t.name if not scatters else t.name + "_gather", t.shape, t.dtype,
                   ComputeOp(t.op.axes, gathered, t.op.tag), dict(t.attrs))
    for n, spec in enumerate(scatters):
        if spec is None:
            continue
        axes, indices, value, where = spec
        name = t.name if n == len(scatters) - 1 else f"{t.name}_scatter{n}"
        stage = Tensor(name, t.shape, t.dtype,
                       ScatterOp(tuple(axes), tuple(indices), value, where, stage),
                       dict(t.attrs))
    return stage


def _signed(term: Term, dtype: str) -> E.Expr:
    f = term.factor if term.factor is not None else E.Const(1.0, dtype)
    if f.dtype != dtype:
        f = E.cast(f, dtype)
    return f if term.sign > 0 else E.neg(f)


def _resolve_data_deltas(dom: Domain, factor: E.Expr, out_names: set[str]) -> E.Expr:
    """Substitute summation variables pinned by data-dependent deltas (gathers)."""
    pending = list(dom.remaining_deltas)
    dom.remaining_deltas = []
    while pending:
        a, b = pending.pop(0)
        names = {v.name for v in free_vars(a) | free_vars(b)}
        axis_names = {ax.var.name for ax in dom.axes}
        if not names & axis_names:
            dom.add_guard(E.compare(E.EQ, a, b))
            continue
        solved = _unit_solve(a, b, dom.axes)
        if solved is None:
            if names & out_names:
                raise NeedsScatter
            factor = E.mul(factor, E.delta(a, b, factor.dtype))
            dom.notes.append(f"delta({a}, {b}) kept: no variable with a unit coefficient")
            continue
        ax, value = solved
        m = {ax.var: value}
        rest = [x for x in dom.axes if x is not ax]
        dom.axes = [E.IterVar(x.var, substitute(x.lo, m), substitute(x.extent, m), x.kind)
                    for x in rest]
        inside = E.logical_and(value >= ax.lo, value < E.add(ax.lo, ax.extent))
        dom.where = inside if dom.where is None else E.logical_and(substitute(dom.where, m),
                                                                    inside)
        factor = substitute(factor, m)
        pending = [(substitute(x, m), substitute(y, m)) for x, y in pending]
        dom.mapping = {k: substitute(v, m) for k, v in dom.mapping.items()}
    return factor


def _unit_solve(a: E.Expr, b: E.Expr, axes: list[E.IterVar]):
    """An axis with coefficient ±1 in ``a - b`` (outside every atom), and its value."""
    bridge = AffineBridge({ax.var.name for ax in axes})
    d = bridge.to_affine(a) - bridge.to_affine(b)
    for ax in reversed(axes):
        c = d.coeff(ax.var.name)
        if c not in (1, -1):
            continue
        inside = any(ax.var in free_vars(bridge.atom_exprs[n]) for n in d.variables
                     if n in bridge.atom_exprs)
        if inside or bridge.new_unknowns:
            continue
        rest = d - Affine.var(ax.var.name) * c
        value = bridge.to_expr(-rest if c == 1 else rest)
        return ax, value
    return None


def _box(t: Tensor) -> list[Affine]:
    """``0 <= j < extent`` for each output axis whose extent is affine in the sizes, plus
    ``n >= 0`` for each size."""
    bridge = AffineBridge(set())
    out: list[Affine] = []
    sizes: set[str] = set()
    for ax, ext in zip(t.op.axes, t.shape):
        e = bridge.to_affine(ext)
        if e is None or bridge.atoms:
            continue
        v = Affine.var(ax.var.name)
        out += [v, e - v - 1]
        sizes |= set(e.variables)
    return out + [Affine.var(s) for s in sorted(sizes)]


def _gather_term(term: Term, out_names: set[str], taken: set[str], dtype: str,
                 context: list[Affine] | None = None) -> E.Expr | None:
    dom = solve_domain(term, out_names, taken, context)
    if dom is None:
        return None
    factor = substitute(_signed(term, dtype), dom.mapping)
    factor = _resolve_data_deltas(dom, factor, out_names)
    if dom.axes:
        from tecomp.functor import make_reduce

        guard = dom.guard
        if not (isinstance(guard, E.Const) and guard.value):
            # fold the guard into the outermost loop bound: where it fails the loop is
            # empty, so a residue condition (j % s == 0) costs nothing for the other j
            first = dom.axes[0]
            dom.axes[0] = E.IterVar(first.var, first.lo,
                                    E.select(guard, first.extent, E.Const(0, "int64")),
                                    first.kind)
            dom.guard = E.Const(True, "bool")
        value = make_reduce("sum", factor, tuple(dom.axes), dom.where, dtype)
    elif dom.where is not None:
        value = E.select(dom.where, factor, E.Zero(dtype))
    else:
        value = factor
    return E.select(dom.guard, value, E.Zero(dtype))


def _scatter_term(term: Term, t: Tensor, taken: set[str]):
    """A term whose output index is pinned by data: scatter-add over its domain."""
    out_vars = [a.var for a in t.op.axes]
    deltas = list(term.deltas)
    index: dict[E.Var, E.Expr] = {}
    axes = list(term.axes)
    for j in out_vars:
        for n, (a, b) in enumerate(deltas):
            names_a, names_b = free_vars(a), free_vars(b)
            if a == j and j not in names_b and not (names_b & set(out_vars)):
                index[j] = b
            elif b == j and j not in names_a and not (names_a & set(out_vars)):
                index[j] = a
            else:
                continue
            deltas.pop(n)
            break
    for d, j in enumerate(out_vars):
        if j not in index:
            name = fresh_name(j.name, taken)
            taken.add(name)
            v = E.Var(name, "int64")
            axes.append(E.IterVar(v, E.Const(0, "int64"), t.shape[d], "reduce"))
            index[j] = v
    sub = Term(axes, [substitute(c, index) for c in term.conds],
               [(substitute(a, index), substitute(b, index)) for a, b in deltas],
               None if term.factor is None else substitute(term.factor, index), term.sign)
    dom = solve_domain(sub, set(), taken)
    if dom is None:
        return None
    factor = substitute(_signed(sub, t.dtype), dom.mapping)
    factor = _resolve_data_deltas(dom, factor, set())
    where = dom.where
    if not (isinstance(dom.guard, E.Const) and dom.guard.value):
        where = dom.guard if where is None else E.logical_and(dom.guard, where)
    indices = [substitute(index[j], dom.mapping) for j in out_vars]
    return dom.axes, indices, factor, where
