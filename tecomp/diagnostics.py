"""Diagnostics: an opt-in pass log and ``tc.explain`` (why a program is slower than it could be).

Pass log.  ``with tc.pass_log() as log:`` records every pass that runs inside the block, in
order: reverse-mode autodiff, zero elimination, lowering and code generation, with the wall
time of each and, for the passes that rewrite tensors, the static cost (``tc.cost``) of the
program before and after.  ``print(log)`` gives a table; ``log.records`` the raw entries.
Nothing is recorded (and nothing costs anything) outside such a block: the log is carried by a
context variable, so it is also per thread.  Counting costs lowers the program once more per
pass, so a logged run is slower than an unlogged one; ``pass_log(costs=False)`` records the
times only.  Symbolic sizes may be bound for the costs with ``pass_log(sizes={n: 128})``.

Explain.  ``tc.explain(tensors)`` walks the compute DAG (typically a gradient after zero
elimination) and reports what keeps it from costing what a hand-written program costs, the
"simple analyzer which issues a warning if the generated code looks bad" that the seed's
review thread asks for:

* a Kronecker ``Delta`` left in a stage, with the reason zero elimination could not solve it
  (an operand that reads data, a delta under a non-linear function, no unit coefficient);
* a condition tested inside a reduction over the reduction's own variables that could not
  become loop bounds (not affine in them), so every point of the box is visited;
* scatter stages are *notes*, not findings: a scatter costs O(domain), what the forward
  costs.  The note says why the destination could not be solved for: it is data (the
  gradient of a gather, e.g. an embedding: inherent), or it is not affine (a clamp
  ``min(j + k, 9)``); on the GPU several points may add to one element (atomics);
* optionally (``reference=``), an output that costs well above the reference program (e.g.
  the forward pass): the rule that each adjoint costs about what the forward costs.  The
  reference's work is its flops, or its innermost iterations for pure data movement (a
  gather has no flops, its gradient one add per element).

``explain`` returns an :class:`Explanation`; ``str()`` of it is a readable report, and
``warn=True`` also issues one :class:`PerformanceWarning` per finding.
"""

from __future__ import annotations

import contextvars
import logging
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from . import expr as E
from .functor import free_vars, topo_order, walk
from .logs import timed
from .printer import format_expr, unique_names
from .tensor import ComputeOp, ScatterOp, Tensor

__all__ = ["PassLog", "PassRecord", "pass_log", "run_pass", "explain", "Explanation",
           "Finding", "PerformanceWarning"]


# ------------------------------------------------------------------------------ pass log
@dataclass
class PassRecord:
    """One pass run: its name, wall time in seconds, and the static cost around it.

    ``cost_before`` / ``cost_after`` are :class:`tecomp.cost.Cost` objects, or None when the
    pass does not rewrite tensors or the cost could not be counted (``note`` says why).
    """

    name: str
    seconds: float
    cost_before: Any = None
    cost_after: Any = None
    note: str = ""


@dataclass
class PassLog:
    """The passes run inside a ``with tc.pass_log():`` block, in order."""

    costs: bool = True
    sizes: Mapping[Any, int] | None = None
    records: list[PassRecord] = field(default_factory=list)

    def names(self) -> list[str]:
        """The pass names in the order they ran."""
        return [r.name for r in self.records]

    def __str__(self) -> str:
        lines = [f"{'pass':<18} {'time':>10}  {'flops before':>14} {'flops after':>14}  note"]
        for r in self.records:
            before = "" if r.cost_before is None else str(r.cost_before.flops)
            after = "" if r.cost_after is None else str(r.cost_after.flops)
            lines.append(f"{r.name:<18} {r.seconds * 1e3:>8.2f}ms  {before:>14} {after:>14}  "
                         f"{r.note}")
        return "\n".join(lines)


_ACTIVE: contextvars.ContextVar[PassLog | None] = contextvars.ContextVar(
    "tecomp_pass_log", default=None)


@contextmanager
def pass_log(*, costs: bool = True, sizes: Mapping[Any, int] | None = None
             ) -> Iterator[PassLog]:
    """Record the passes run inside the ``with`` block, with times and static costs.

    See the module docstring; ``costs=False`` records the times only, ``sizes`` binds
    symbolic sizes for the costs.  (The same phases are timed on the ``"tecomp"`` logger.)

    Example::

        >>> A = tc.placeholder((16, 8), name="A")
        >>> k = tc.reduce_axis(8, name="k")
        >>> T = tc.compute((16,), lambda i: tc.sum(A[i, k] * A[i, k], axis=k), name="T")
        >>> with tc.pass_log(costs=False) as log:
        ...     grads = tc.gradient(T, [A])
        >>> log.names()
        ['autodiff', 'zero_elimination', 'simplify']
    """
    log = PassLog(costs=costs, sizes=sizes)
    token = _ACTIVE.set(log)
    try:
        yield log
    finally:
        _ACTIVE.reset(token)


def recording_passes() -> bool:
    """Whether a :func:`pass_log` is recording (``tc.build`` then runs every pass rather than
    taking its loop program from the persistent cache)."""
    return _ACTIVE.get() is not None


def _count(tensors: Sequence[Tensor], sizes: Mapping[Any, int] | None) -> tuple[Any, str]:
    from .lowering_api import cost

    try:
        return cost(list(tensors), sizes=sizes, optimize=False), ""
    except Exception as err:  # a cost that cannot be counted must not break the user's run
        return None, f"cost not counted: {type(err).__name__}: {err}"[:120]


def run_pass(pass_name: str, fn: Callable[..., Any], /, *args: Any,
             log_tensors: bool = False, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, recorded in the active pass log if there is one, and timed
    on the ``"tecomp.phases"`` logger at INFO (:mod:`tecomp.logs`).

    With ``log_tensors=True`` the first argument and the result are lists of tensors and their
    static costs are recorded too (when the log counts costs).  Without an active log this
    is a plain call.
    """
    log = _ACTIVE.get()
    if log is None:
        with timed(pass_name, logging.INFO):  # on the "tecomp.phases" logger, if enabled
            return fn(*args, **kwargs)
    token = _ACTIVE.set(None)  # counting costs runs passes too; keep them out of the log
    try:
        before, note = (_count(args[0], log.sizes) if log_tensors and log.costs else (None, ""))
    finally:
        _ACTIVE.reset(token)
    t0 = time.perf_counter()
    with timed(pass_name, logging.INFO):
        result = fn(*args, **kwargs)
    seconds = time.perf_counter() - t0
    after = None
    if log_tensors and log.costs:
        token = _ACTIVE.set(None)
        try:
            after, note2 = _count(result, log.sizes)
        finally:
            _ACTIVE.reset(token)
        note = note or note2
    log.records.append(PassRecord(pass_name, seconds, before, after, note))
    return result


# ------------------------------------------------------------------------------ explain
class PerformanceWarning(UserWarning):
    """Issued by ``tc.explain(..., warn=True)`` for each finding."""


@dataclass(frozen=True)
class Finding:
    """One reason a program is slower than it could be: ``kind``, the stage, the message."""

    kind: str  # "unoptimized", "delta", "guard", "cost"
    tensor: str
    message: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.tensor}: {self.message}"


@dataclass
class Explanation:
    """The findings of :func:`explain`; empty when nothing looks slow."""

    findings: list[Finding]
    stages: int
    notes: list[str] = field(default_factory=list)  # inherent costs, not findings

    def __bool__(self) -> bool:
        return bool(self.findings)

    def kinds(self) -> set[str]:
        return {f.kind for f in self.findings}

    def __str__(self) -> str:
        notes = [f"  note: {n}" for n in self.notes]
        if not self.findings:
            return "\n".join([
                f"{self.stages} stage(s) checked: no Kronecker delta left, no guard inside "
                "a loop, no avoidable scatter; nothing looks slower than hand-written code."]
                + notes)
        head = f"{self.stages} stage(s) checked, {len(self.findings)} finding(s):"
        return "\n".join([head] + [f"  {f}" for f in self.findings] + notes)


def _reads_data(e: E.Expr) -> bool:
    return any(isinstance(x, E.TensorRead) for x in walk(e))


def _delta_parents(body: E.Expr) -> dict[int, E.Expr]:
    """For each Delta node, a non-linear function (Call) or reduction enclosing it, if any."""
    out: dict[int, E.Expr] = {}

    def go(e: E.Expr, outer: E.Expr | None) -> None:
        if isinstance(e, E.Delta):
            out.setdefault(id(e), outer)
            return
        from .functor import children

        nxt = e if isinstance(e, (E.Call, E.Div, E.Max, E.Min)) else outer
        for c in children(e):
            go(c, nxt)

    go(body, None)
    return out


def _delta_reason(d: E.Delta, enclosing: E.Expr | None, names: dict[int, str]) -> str:
    a, b = format_expr(d.a, names), format_expr(d.b, names)
    if enclosing is not None:
        what = (enclosing.name if isinstance(enclosing, E.Call)
                else type(enclosing).__name__.lower())
        return (f"delta({a}, {b}) is inside a non-linear {what}(...): zero elimination only "
                "splits sums of products, so the delta is evaluated at every point. Write the "
                "function of the selected element as a separate stage, or give the tensor a "
                "custom gradient (overrides=).")
    if _reads_data(d.a) and _reads_data(d.b):
        return (f"delta({a}, {b}) compares two data-dependent values: no integer solution "
                "exists in closed form, so the sum visits every point and tests it.")
    return (f"delta({a}, {b}) was kept: no loop variable appears in it with coefficient ±1 "
            "(or only inside // or % of data), so it cannot be substituted away; the sum "
            "visits every point and tests the equality.")


def _loop_guards(body: E.Expr, names: dict[int, str]) -> list[str]:
    """Conditions tested inside a reduction that depend on its own axes."""
    found = []
    for x in walk(body):
        if not isinstance(x, E.Reduce):
            continue
        axes = {a.var for a in x.axes}
        conds = [] if x.where is None else [x.where]
        conds += [s.cond for s in walk(x.body) if isinstance(s, E.Select)]
        for c in conds:
            used = free_vars(c) & axes
            if used and not _reads_data(c):  # a data-dependent test is inherent
                vs = ", ".join(sorted(v.name for v in used))
                found.append(f"the condition {format_expr(c, names)} is tested inside the "
                             f"sum over {vs}: it is not affine in the loop variables, so "
                             "it could not become loop bounds; every point of the box is "
                             "visited")
    return found


def _stage_findings(t: Tensor, name: str, names: dict[int, str]) -> list[Finding]:
    assert isinstance(t.op, ComputeOp)
    body = t.op.body
    deltas = [x for x in walk(body) if isinstance(x, E.Delta)]
    guards = _loop_guards(body, names)
    if not deltas and not guards:
        return []
    from .passes.zero_elimination import eliminate_zeros

    opt = eliminate_zeros([t])[0]
    opt_body = opt.op.body if isinstance(opt.op, ComputeOp) else None
    left = (sum(isinstance(x, E.Delta) for x in walk(opt_body)) + len(_loop_guards(opt_body, {}))
            if opt_body is not None else 0)
    if left < len(deltas) + len(guards):
        return [Finding("unoptimized", name,
                        f"{len(deltas)} delta(s) and {len(guards)} guard(s) in loops that zero "
                        "elimination removes: this stage was not optimized (optimize=False?); "
                        "pass it through tc.optimize")]
    parents = _delta_parents(body)
    out = [Finding("delta", name, _delta_reason(d, parents.get(id(d)), names)) for d in deltas]
    return out + [Finding("guard", name, msg) for msg in guards]


def explain(tensors: Tensor | Sequence[Tensor], *, reference: Tensor | Sequence[Tensor]
            | None = None, sizes: Mapping[Any, int] | None = None, ratio: float = 1.5,
            warn: bool = False) -> Explanation:
    """Why ``tensors`` (e.g. a gradient after ``tc.gradient``) may be slower than necessary.

    Checks each stage for leftover Kronecker deltas (with the reason they could not be
    eliminated), conditions tested inside reductions, and scatters.  With ``reference``
    (e.g. the forward tensors) the static flops of both are compared (``sizes`` binds
    symbolic sizes) and a finding is added when ``tensors`` cost more than ``ratio`` times
    the reference.  ``warn=True`` issues a :class:`PerformanceWarning` per finding.

    Example::

        >>> A = tc.placeholder((16, 8), name="A")
        >>> k = tc.reduce_axis(8, name="k")
        >>> T = tc.compute((16,), lambda i: tc.sum(A[i, k] * A[i, k], axis=k), name="T")
        >>> (naive,) = tc.gradient(T, [A], optimize=False)
        >>> print(tc.explain(naive))                                   # doctest: +ELLIPSIS
        2 stage(s) checked, 1 finding(s):
          [unoptimized] A_grad: 2 delta(s) and 0 guard(s) in loops that zero elimination ...
        >>> bool(tc.explain(tc.gradient(T, [A]), reference=T))       # nothing found
        False
    """
    outs = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    order = topo_order(outs)
    names = unique_names(order)
    findings: list[Finding] = []
    notes: list[str] = []
    stages = 0
    for t in order:
        name = names[id(t)]
        if isinstance(t.op, ComputeOp):
            stages += 1
            findings += _stage_findings(t, name, names)
        elif isinstance(t.op, ScatterOp):
            stages += 1
            idx = ", ".join(format_expr(i, names) for i in t.op.indices)
            notes.append(_scatter_note(t, name, idx))
    if reference is not None:
        findings += _compare_cost(outs, reference, sizes, ratio, bool(findings))
    result = Explanation(findings, stages, notes)
    if warn:
        for f in findings:
            warnings.warn(str(f), PerformanceWarning, stacklevel=2)
    return result


def _scatter_note(t: Tensor, name: str, idx: str) -> str:
    assert isinstance(t.op, ScatterOp)
    parts = [x for i in t.op.indices for x in walk(i)]
    if any(isinstance(x, E.TensorRead) for x in parts):
        why = "the destination is data (the gradient of a gather): inherent"
    elif any(isinstance(x, (E.Min, E.Max)) for x in parts):
        why = "the destination has a min/max (a clamp), which is not affine"
    else:
        why = "the destination is not affine in the loop variables"
    return (f"{name}: scatter-add to [{idx}]: {why}; the stage adds point by point, "
            "O(domain) like the forward (atomics on the GPU)")


def _compare_cost(outs: list[Tensor], reference: Tensor | Sequence[Tensor],
                  sizes: Mapping[Any, int] | None, ratio: float,
                  other_findings: bool) -> list[Finding]:
    """One finding per output that costs more than ``ratio`` times the reference's work."""
    from .lowering_api import cost

    refs = [reference] if isinstance(reference, Tensor) else list(reference)
    ref = cost(refs, sizes=sizes, optimize=False)
    try:
        work = max(float(ref.flops), float(ref.iterations))
        mine = [(t, cost([t], sizes=sizes, optimize=False).flops) for t in outs]
        over = [(t, f) for t, f in mine if float(f) > ratio * work]
    except TypeError:  # symbolic counts: compare only when sizes are bound
        return []
    hint = ("look at the findings above, or at the loop IR" if other_findings else
            "no stage has a delta, guard or avoidable scatter left: compare its loop IR")
    what = "flops" if work == float(ref.flops) else "innermost iterations (no flops)"
    return [Finding("cost", t.name,
                    f"{f} flops, {float(f) / max(work, 1):.1f}x the reference's {int(work)} "
                    f"{what} (more than {ratio}x): {hint} (tc.lower) for a loop nest deeper "
                    "than the reference's") for t, f in over]
