"""Declared reverse-mode rules of Kronecker-sparse stages: the transposed factor, gathered.

A stage of pattern ``(a, b, c, d)`` computes ``y[i, j, l] = sum_k T[i, j, k, l] x[i, k, l]``
(rows split as ``i·b·d + j·d + l`` on the output side and ``i·c·d + k·d + l`` on the input
side).  Its vector-Jacobian products are again Kronecker-sparse, with the same support::

    dx[i, k, l] = sum_j T[i, j, k, l] · dy[i, j, l]          (the transposed factor)
    dT[i, j, k, l] = sum_n dy[i, j, l, n] · x[i, k, l, n]     (one product per entry)

each ``a·b·c·d·batch`` multiply-adds, as many as the forward.  Zero elimination reaches the
same sums from the generic adjoint ``sum_(r, k) dy[r] · delta(m, row(r, k))`` only by inverting
the row map, whose ``//`` and ``%`` (one pair per bit of the input gather) make its
projections grow with ``n``; the stage knows the inverse and declares it instead.

The chain of adjoints is the chain of transposed factors in reverse order, with the forward's
fusion (the fused factors are the stages), and each ``dx`` is laid out as the forward's stages
are:

* input a previous stage ``S[i', l', j', n]`` of pattern ``(a', b', c', d')``: ``dx`` is
  computed as ``D[i, l, k, n]`` (loops ``i, l, k, n``: the ``b`` rows of ``dy`` that one
  ``(i, l)`` reads stay in cache for its ``c`` outputs, as the forward keeps its ``c`` input
  rows) and handed to reverse mode as the view ``dS[i', l', j', n] = D[i, l, k, n]`` with
  ``m = i'·b'·d' + j'·d' + l'`` and ``(i, k, l) = (m // (c·d), m // d % c, m % d)``, which
  inlining turns into index arithmetic in the next transposed stage (no copy);
* input ``X`` read through a constant permutation, ``x[m] = X[perm[m]]``: the adjoint is the
  gather ``dX[p] = dx[perm^-1(p)]`` (a scatter through a bijection is a gather through its
  inverse).  ``perm^-1`` is computed at declaration and checked to be a bijection; when it is
  bit-affine (:func:`~tecomp.ops.butterfly_gather.bit_affine_form`: the DCT/DST/DHT chains)
  ``i``, ``k`` and ``l`` are bit fields of ``perm^-1(p)`` written as index arithmetic, and
  ``dx`` is first computed as ``D[i, l, k, n]`` with a ``tc.sum`` (a reduction stays a
  buffer), so that only the gather's few fields reach the bounds prover: fused into every term
  of the transposed stage, the fields (a ``select`` on Makhoul's ``p % 2`` over a bit
  reversal) composed with the previous stage's row arithmetic cost the isl proofs about 70 ms
  an access, seconds per build at ``n >= 128``.  Otherwise ``perm^-1`` is a constant table read
  once per row.

A rule is stored in the stage tensor's ``attrs["vjp"]`` and is used by reverse mode (a user's
``overrides`` still come first).  It declines (returns ``None``, so the generic adjoint is
built) when the tensor no longer reads exactly the tensors it was declared with, e.g. after a
pass rebuilt its inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dsl as tc
from ..tensor import Tensor
from .butterfly_gather import bit_affine_form, inverse_permutation

__all__ = ["InputLayout", "declare_stage_rule", "permuted_input", "row_input", "stage_input"]

Index = Any  # a DSL integer expression or an int
Read = Callable[..., Any]  # read(i, k, l, n) -> the forward's input value


@dataclass(frozen=True)
class InputLayout:
    """Where a stage's input row ``(i, k, l)`` lives in the tensor it reads.

    ``shape`` is the adjoint's shape without the batch axis and ``split(*point)`` maps one of
    its points to ``(i, k, l)`` of the stage.
    """

    shape: tuple[int, ...]
    split: Callable[..., tuple[Index, Index, Index]]
    staged: bool = False  # dx computed as D[i, l, k, n], read back through split
    buffered: bool = False  # D as a tc.sum, so that inlining keeps it a buffer


#: the adjoint of a permuted input stage with its products written out, kept a buffer of its
#: own that the inverse permutation gathers from (False: a ``tc.sum`` stage; an A/B switch)
UNROLL_BUFFERED = True

#: every staged adjoint ``D[i, l, k, n]`` keeps a buffer of its own, computed in that order,
#: and its view in the previous stage's layout is always inlined into the next transposed
#: stage (index arithmetic, no copy); False: the inliner's size rule decides both (an A/B
#: switch).  Left to that rule, a stage of few terms was inlined into the view's copy,
#: computed in the copy's row order (each row of its input read again for each of its
#: outputs, far apart), and the view of a 16-term stage was copied (its reads times 16
#: terms outgrew the budget): with the DCT's groups of three at 4096 points the gradient's
#: first two transposed stages ran both ways.  One Intel Xeon core, batch 128, both builds
#: timed round-robin in one process: the DCT-II's gradient with its default grouping at
#: n >= 2048 (groups of three) float64 2.98 -> 1.54 ms at 2048 points and 6.86 -> 3.97 at
#: 4096, float32 1.01 -> 0.67 and 3.00 -> 1.73 ms; with pairs (n <= 1024) unchanged.
KEEP_ADJOINTS = True


def _row_split(m: Index, c: int, d: int) -> tuple[Index, Index, Index]:
    return m // (c * d), m // d % c, m % d


def row_input(pattern: tuple[int, int, int, int]) -> InputLayout:
    """The input is read in canonical row order ``m = i·c·d + k·d + l``."""
    a, _, c, d = pattern
    return InputLayout((a * c * d,), lambda m: _row_split(m, c, d))


def stage_input(pattern: tuple[int, int, int, int], b2: int, d2: int,
                shape: tuple[int, int, int]) -> InputLayout:
    """The input is a stage stored as ``S[i', l', j', n]`` whose factor has ``b = b2, d = d2``."""
    _, _, c, d = pattern
    return InputLayout(shape, lambda i2, l2, j2: _row_split(i2 * (b2 * d2) + j2 * d2 + l2, c, d),
                       staged=True)


def permuted_input(pattern: tuple[int, int, int, int], perm: np.ndarray,
                   name: str) -> InputLayout:
    """The input is ``X[perm[m]]``: ``dX[p]`` reads row ``perm^-1(p)`` (bit fields or a table)."""
    a, _, c, d = pattern
    inv = inverse_permutation(perm)
    form = bit_affine_form(inv)
    if form is not None:
        lc, ld = (c * d).bit_length() - 1, d.bit_length() - 1
        bits = (a * c * d).bit_length() - 1
        return InputLayout((a * c * d,), lambda p: (form.field(p, lc, bits),
                                                    form.field(p, ld, lc), form.field(p, 0, ld)),
                           staged=True, buffered=True)
    table = tc.constant(inv, name=f"{name}_invperm")
    return InputLayout((a * c * d,), lambda p: _row_split(table[p], c, d))


def _sum(terms: list) -> Any:
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def declare_stage_rule(out: Tensor, T: Tensor, src: Tensor, pattern: tuple[int, int, int, int],
                       layout: InputLayout, read: Read, *, canonical_out: bool,
                       unroll: bool, tables: tuple[Tensor, ...] = ()) -> None:
    """Attach the rule of the stage ``out`` (factor ``T`` applied to ``src``) to ``out``.

    ``read(i, k, l, n)`` is the forward's input value; ``canonical_out`` says ``out`` is stored
    by rows ``i·b·d + j·d + l`` (else as ``out[i, l, j, n]``); ``tables`` are the int tensors
    the forward reads besides ``T`` and ``src``.  ``unroll`` writes the ``b`` products of the
    transposed stage out (as the forward writes its ``c``).
    """
    known = {id(T), id(src)} | {id(t) for t in tables}
    a, b, c, d = pattern
    bd = b * d

    def vjp(y: Tensor, inputs: list[Tensor], head: Tensor) -> list[Tensor | None] | None:
        if y is not out or {id(t) for t in inputs} != known:
            return None  # rebuilt since declaration: let reverse mode differentiate the body

        def head_read(i, j, l_, n):
            return head[i * bd + j * d + l_, n] if canonical_out else head[i, l_, j, n]

        def transposed(*point):
            *where, n = point
            i, k, l_ = layout.split(*where)
            return transposed_at(i, k, l_, n)

        def transposed_at(i, k, l_, n, unroll=unroll):
            if unroll:
                return _sum([T[i, j, k, l_] * head_read(i, j, l_, n) for j in range(b)])
            j = tc.reduce_axis(b, name="j")
            return tc.sum(T[i, j, k, l_] * head_read(i, j, l_, n), axis=j)

        batch = src.shape[-1]
        if layout.staged:  # computed as D[i, l, k, n], read back in the input's order
            D = tc.compute((a, d, c, batch), lambda i, l_, k, n: transposed_at(
                i, k, l_, n, unroll and (UNROLL_BUFFERED or not layout.buffered)),
                name=f"{y.name}_dx", tag="kron_sparse")
            if (layout.buffered and UNROLL_BUFFERED) or KEEP_ADJOINTS:
                D.attrs["keep_buffer"] = True  # not inlined into what reads it

            def view(*point):
                i, k, l_ = layout.split(*point[:-1])
                return D[i, l_, k, point[-1]]
            d_src = tc.compute(layout.shape + (batch,), view, name=f"{y.name}_dx_view")
            if KEEP_ADJOINTS:
                d_src.attrs["inline"] = True  # a re-indexing of D: never a copy
        else:
            d_src = tc.compute(layout.shape + (batch,), transposed, name=f"{y.name}_dx",
                               tag="kron_sparse")
        n = tc.reduce_axis(batch, name="n")
        d_T = tc.compute(pattern, lambda i, j, k, l_: tc.sum(
            head_read(i, j, l_, n) * read(i, k, l_, n), axis=n), name=f"{y.name}_dT")
        return [d_T if x is T else d_src if x is src else None for x in inputs]

    out.attrs["vjp"] = vjp
