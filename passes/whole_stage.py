"""Whether a stage must be computed over its whole domain for its bounds errors to show.

The reference evaluator (:func:`tecomp.evaluate`) computes every stage at every point of its
domain, so an index that leaves its tensor anywhere in a stage raises, whether or not the
outputs use that element.  That is the semantics the kernels follow (docs/robustness.md).
Inlining a stage into its readers (:mod:`.inline`) or into the crop that reads it
(:mod:`.absorb_crop`) computes it only where it is read: ``S4[i] = f(X2[idx5[i]])`` over
``n`` elements, read only as ``S4[(i + 1) % n]`` by a 2-element ``S6``, evaluates ``idx5`` at
two positions, and a bad index elsewhere went unreported.  Both passes therefore keep such a
stage a buffer unless a reader reads every element
(:func:`~.inline_bounds.reads_every_element`) or :func:`needs_whole_domain` is False.

:func:`needs_whole_domain` decides, for the stage ``P[axes] = body``:

1. a syntactic test (:func:`~.inline_bounds.body_in_range`): every index of ``body`` is an
   axis over the tensor's own extent or lies in a constant range -- no;
2. else exactly, by the bounds pass itself (:func:`~.bounds_check.add_bounds_checks`) on a
   one-stage function that computes ``P`` from buffers for every tensor its body reads: a
   build error (an affine access out of range), a size check or a run-time check (a gather,
   an undecidable index) -- yes; every access proven in bounds -- no.

The proof runs only for a stage that the cheap tests leave open (zero-eliminated gradient
stages with symbolic sizes, read through a crop, are the common case).
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.errors import TecompError
from tecomp.functor import free_vars, fresh_name, walk
from tecomp.loopir import Buffer, LoweredFunc
from tecomp.tensor import ComputeOp, Tensor

from .bounds_check import add_bounds_checks
from .inline_bounds import body_in_range
from .lower_stage import Context, lower_stage


def needs_whole_domain(p: Tensor, body: E.Expr) -> bool:
    """Whether computing ``p`` (defined by ``body``) only at some of its points could skip an
    access that is out of range at another point (see the module docstring)."""
    if not isinstance(p.op, ComputeOp):
        return True
    if body_in_range(p, body):
        return False
    try:
        _, record = add_bounds_checks(_alone(p, body))
    except TecompError:
        return True  # out of range wherever it runs: the whole program's build reports it
    return record is not None


def _alone(p: Tensor, body: E.Expr) -> LoweredFunc:
    """A function whose only stage computes ``p`` from input buffers of what ``body`` reads."""
    assert isinstance(p.op, ComputeOp)
    read: list[Tensor] = []
    names: set[str] = set()
    for x in walk(body):
        if isinstance(x, E.TensorRead) and all(x.tensor is not t for t in read):
            read.append(x.tensor)
        elif isinstance(x, E.Var):
            names.add(x.name)
        elif isinstance(x, E.Reduce):
            names |= {ax.var.name for ax in x.axes}
    axes = {ax.var for ax in p.op.axes}
    params: set[E.Var] = set(free_vars(body)) - axes
    for t in (p, *read):
        for s in t.shape:
            params |= free_vars(s)
    names |= {ax.var.name for ax in p.op.axes} | {v.name for v in params}
    ctx = Context({}, {v.name for v in params})
    ctx.taken |= names
    inputs = []
    for t in read:
        b = Buffer(fresh_name("in", ctx.taken), t.shape, t.dtype, "input")
        ctx.taken.add(b.name)
        ctx.buffers[id(t)] = b
        inputs.append(b)
    out = Buffer(fresh_name("out", ctx.taken), p.shape, p.dtype, "output")
    ctx.taken.add(out.name)
    stmt = lower_stage(ctx, out.name, p.op.axes, body, out)
    ordered = tuple(sorted(params, key=lambda v: v.name))
    return LoweredFunc("stage", tuple(inputs), (out,), ordered, stmt)
