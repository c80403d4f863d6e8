"""Absorbing a stage into the crop that is its only reader (before lowering).

The input gradient of a padded convolution is computed on the padded grid and then cropped::

    X_pad_grad[j0, j1, j2, j3] = sum(H[..] * W[..], ..)          # 34 x 34 per channel
    X_grad[j0, j1, j2, j3] = X_pad_grad[j0, j1, j2 + 1, j3 + 1]    # 32 x 32

Element-wise inlining (:mod:`.inline`) never inlines a reduction, so the padded stage gets a
buffer, a loop nest that computes the border too (12% of a 34 x 34 grid, 21% of a 36 x 36
one), and a copy pass.  When a consumer's whole body is one read of a compute stage ``P``
at its own axes shifted by constants (``C[i] = P[i + c]``, a crop or an identity copy) and
no other stage reads ``P``, :func:`absorb_crops` substitutes ``P``'s body into ``C``::

    X_grad[j0, j1, j2, j3] = sum(..)[j2 := j2 + 1, j3 := j3 + 1]

(Halide's "compute_inline" of a producer into a pure consumer, here for a producer with a
reduction, which is legal exactly when each element of ``P`` is read at most once).  The
consumer then computes only the elements that were read, in one nest.

Legality.  ``C[i] = P[i + c]`` and ``P[j] = body(j)``, so ``C[i] = body(i + c)`` for every
``i`` in ``C``'s domain (the reads were in ``P``'s domain); substitution renames the
reduction axes of ``body`` where they clash.  ``P`` has no other reader, so nothing else
needs its buffer, and every element of ``P`` that was read is computed once, as before.
The border is no longer computed, so a crop that is not an identity copy absorbs ``P`` only
when no access of ``P``'s body can leave its tensor there (:mod:`.whole_stage`): the
evaluator computes the whole of ``P`` and reports such an index.
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.functor import substitute, walk
from tecomp.tensor import ComputeOp, ScatterOp, Tensor

from .whole_stage import needs_whole_domain


def _shift(idx: E.Expr, var: E.Var) -> bool:
    """Whether ``idx`` is ``var`` or ``var + c`` / ``var - c`` for an integer constant ``c``."""
    if idx == var:
        return True
    return (isinstance(idx, (E.Add, E.Sub)) and idx.a == var and isinstance(idx.b, E.Const)
            and not isinstance(idx.b.value, (bool, float)))


def _whole(read: E.TensorRead, c: Tensor, p: Tensor) -> bool:
    """Whether the crop ``c`` reads all of ``p`` (an identity copy)."""
    return all(i == ax.var and ax.extent == s
               for i, ax, s in zip(read.indices, c.op.axes, p.shape))


def _reads(e: E.Expr, p: Tensor) -> int:
    return sum(1 for x in walk(e) if isinstance(x, E.TensorRead) and x.tensor is p)


def absorb_crops(stages: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                 inlined: set[int], keep: set[int]) -> None:
    """Substitute each stage whose only reader is a crop of it into that reader.

    ``exprs`` and ``inlined`` are :func:`.inline.inline_stages`'s results (updated in place:
    an absorbed stage is removed from ``exprs`` and added to ``inlined``); ``keep`` holds the
    ids of the tensors that must keep their buffer (outputs).
    """
    by_id = {id(t): t for t in stages}
    keep = set(keep) | {id(t.op.init) for t in stages
                        if isinstance(t.op, ScatterOp) and t.op.init is not None}
    for c in stages:
        if id(c) in inlined or not isinstance(c.op, ComputeOp):
            continue
        (body,) = exprs[id(c)]
        if not isinstance(body, E.TensorRead):
            continue
        p = by_id.get(id(body.tensor))
        if (p is None or id(p) in keep or id(p) in inlined or not isinstance(p.op, ComputeOp)
                or p.dtype != c.dtype or len(body.indices) != len(c.op.axes)
                or len(p.op.axes) != len(c.op.axes)):
            continue
        if not all(_shift(i, ax.var) for i, ax in zip(body.indices, c.op.axes)):
            continue
        if sum(_reads(e, p) for s in stages if id(s) in exprs for e in exprs[id(s)]) != 1:
            continue
        if not _whole(body, c, p) and needs_whole_domain(p, exprs[id(p)][0]):
            continue  # the crop would skip a bad index of the border
        mapping = {ax.var: i for ax, i in zip(p.op.axes, body.indices)}
        exprs[id(c)] = (substitute(exprs[id(p)][0], mapping),)
        del exprs[id(p)]
        inlined.add(id(p))
