"""Bounds checks on data-dependent indices (a loop-IR pass).

``add_bounds_checks(func)`` guarantees that no ``BufferLoad`` or ``Store`` whose index
depends on data (an index expression that itself reads a buffer: ``E[idx[i], j]``, the
scatter ``dE[idx[i], j] += ...``, ``A[cast(floor(x[i]))]``) touches memory outside its buffer,
and that every such access that *would* be out of range is reported:

* a checked **read** gets its data-dependent indices clamped into ``[0, extent)``
  (``max(min(e, extent - 1), 0)``, branch-free and vectorisable); where an extent of a
  clamped axis is not a positive constant, the read is additionally guarded by the
  loop-invariant condition ``extent > 0`` (a read of an empty buffer yields 0);
* a checked **write** is skipped when out of range;
* before the statement that holds the access, a check statement records the first failure
  into a hidden output buffer ``err`` of dtype int64 and shape ``(1 + r,)`` (``r`` the largest
  rank of a checked buffer): ``err[1:1 + ndim]`` = the index, then ``err[0]`` = the check's
  code (1-based, an entry of :attr:`BoundsInfo.checks`).  Only a call that finds ``err[0] ==
  0`` records, so a serial program reports its first failure in loop order.

Accesses that are not evaluated do not fail: a check holds the *path condition* of its
access, the conjunction of the ``Select`` conditions (and left operands of ``&``/``|``) that
lead to it, because lowering leaves reads that are out of range where they are not evaluated
(padding; see :mod:`tecomp.passes.lower`).  Example: ``G[i, j] = select(idx[i] < m,
E[idx[i], j], 0.0)`` becomes ::

    if (idx[i] < m && (idx[i] < 0 || idx[i] >= m)) { if (err[0] == 0) { err[1] = idx[i]; ... } }
    G[i, j] = select(idx[i] < m, E[max(min(idx[i], m - 1), 0), j], 0.0)

whose check can never fire.

Affine indices (``A[i + 1]``, ``A[i, 5]``) are proven in bounds over their loops, guards and
path conditions by :mod:`.bounds_affine`: always out of range is a build error, out of range
for some sizes a :class:`~.bounds_affine.SizeCheck` that the kernel tests before the call
(:meth:`BoundsInfo.check_sizes`), and an index that cannot be decided (``A[i * i]``) is
checked here like a data-dependent one (its axes in :attr:`BoundsCheck.affine`).

The record is written from inside ``"parallel"`` loops too; that breaks the lowering
convention that a parallel iteration stores only to its own elements, benignly: threads race
only on which failure is recorded (a whole record may mix two failures), never on the
outputs.  :class:`~tecomp.codegen.kernel.Kernel` zeroes ``err`` before a call and raises
:class:`~tecomp.errors.IndexBoundsError` after it (:meth:`BoundsInfo.raise_if_failed`).

Cost: two integer compares and a clamp per checked axis per access, and a predictable
branch; ``tc.build(..., check_bounds=False)`` omits the pass.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping, Sequence

import numpy as np

from tecomp import expr as E
from tecomp.errors import IndexBoundsError
from tecomp.functor import fresh_name
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LetStmt,
    LoweredFunc,
    Seq,
    Stmt,
    Store,
)
from tecomp.printer import format_expr
from tecomp.stmt_functor import StmtMutator, eval_int, walk_stmt

from .bounds_affine import AffineProver, SizeCheck, eval_cond

_I64 = "int64"
_TRUE = E.Const(True, "bool")


@dataclass(frozen=True)
class BoundsCheck:
    """One checked access: ``kind`` is "read" or "write"; ``access`` its text in the program."""

    code: int
    buffer: str
    kind: str
    shape: tuple[E.Expr, ...]
    axes: tuple[int, ...]  # the checked axes
    access: str
    affine: tuple[int, ...] = ()  # those of ``axes`` with an affine index not proven in bounds


@dataclass(frozen=True)
class BoundsInfo:
    """What :func:`add_bounds_checks` added: the error buffer (last output) and the checks."""

    error: Buffer
    checks: tuple[BoundsCheck, ...]
    sizes: tuple[SizeCheck, ...] = ()  # accesses out of bounds exactly for some sizes

    def check_sizes(self, sizes: Mapping[E.Var, int], kernel: str) -> None:
        """Before a call: raise :class:`IndexBoundsError` if the sizes make an access fail."""
        for c in self.sizes:
            if eval_cond(c.cond, sizes):
                raise IndexBoundsError(c.message(sizes, kernel))

    def new_record(self) -> np.ndarray:
        """A zeroed error record to pass as the error buffer."""
        return np.zeros(int(self.error.shape[0].value), dtype=np.int64)

    def raise_if_failed(self, record: np.ndarray, sizes: Mapping[E.Var, int],
                        kernel: str) -> None:
        """Raise :class:`IndexBoundsError` naming tensor, position and axis if a check fired."""
        code = int(record[0])
        if code == 0:
            return
        if not 1 <= code <= len(self.checks):
            raise IndexBoundsError(f"kernel {kernel!r}: corrupt bounds record (code {code})")
        c = self.checks[code - 1]
        index = [int(v) for v in record[1:1 + len(c.shape)]]
        extents = [_extent(e, sizes) for e in c.shape]
        bad = [a for a in c.axes if not 0 <= index[a] < extents[a]] or list(c.axes)
        a = bad[0]
        verb = "read of" if c.kind == "read" else "write to"
        why = ("the index is computed from the loop indices and sizes" if a in c.affine
               else "the index comes from the data")
        raise IndexBoundsError(
            f"kernel {kernel!r}: out-of-bounds {verb} tensor {c.buffer!r} at position "
            f"{tuple(index)} (shape {tuple(extents)}): axis {a} index {index[a]} not in "
            f"[0, {extents[a]}) (in {c.access}); {why}")


def _extent(e: E.Expr, sizes: Mapping[E.Var, int]) -> int:
    return eval_int(e, sizes)


def add_bounds_checks(func: LoweredFunc) -> tuple[LoweredFunc, BoundsInfo | None]:
    """``func`` with every data-dependent access checked, and what was added.

    Affine indices are proven in bounds statically (:mod:`.bounds_affine`): one that leaves
    its tensor wherever it runs raises :class:`~tecomp.errors.LoweringError` here; one that
    does for some sizes only becomes a :class:`SizeCheck` tested before the call; one that
    cannot be decided is checked at run time like a data-dependent one.

    Returns ``(func, None)`` unchanged when nothing needs checking at run time.  Otherwise
    the returned function has one more output buffer (last), described by the
    :class:`BoundsInfo`.
    """
    taken = {b.name for b in (*func.inputs, *func.outputs)} | {p.name for p in func.params}
    taken |= _stmt_names(func.body)
    rank = max((len(b.shape) for b in (*func.inputs, *func.outputs, *_allocated(func.body))),
               default=0)
    err = Buffer(fresh_name("bounds_error", taken), (E.Const(1 + rank, _I64),), _I64,
                 "output")
    checker = _Checker(err, AffineProver(func))
    body = checker.visit(func.body)
    if not checker.checks and not checker.sizes:
        return func, None
    out = replace(func, outputs=(*func.outputs, err), body=body)
    return out, BoundsInfo(err, tuple(checker.checks), tuple(checker.sizes))


# ------------------------------------------------------------------------------ analysis
def _is_dynamic(e: E.Expr) -> bool:
    """Whether ``e`` reads a buffer."""
    if isinstance(e, BufferLoad):
        return True
    return any(_is_dynamic(c) for c in _expr_children(e))


def _expr_children(e: Any) -> list[E.Expr]:
    if isinstance(e, BufferLoad):
        return list(e.indices)
    out = []
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, E.Expr):
            out.append(v)
        elif isinstance(v, tuple):
            out += [x for x in v if isinstance(x, E.Expr)]
    return out


def _stmt_names(s: Stmt) -> set[str]:
    names: set[str] = set()
    for t in walk_stmt(s):
        if isinstance(t, Allocate):
            names.add(t.buffer.name)
        if isinstance(t, (For, LetStmt)):
            names.add(t.var.name)
    return names


def _allocated(s: Stmt) -> list[Buffer]:
    return [t.buffer for t in walk_stmt(s) if isinstance(t, Allocate)]


# ------------------------------------------------------------------------------ rewriting
def _and(a: E.Expr, b: E.Expr) -> E.Expr:
    if a is _TRUE or a == _TRUE:
        return b
    return E.And(a, b)


def _or(terms: Sequence[E.Expr]) -> E.Expr:
    out = terms[0]
    for t in terms[1:]:
        out = E.Or(out, t)
    return out


def _i64(e: E.Expr) -> E.Expr:
    return e if e.dtype == _I64 else E.Cast(e, _I64)


def _out_of_range(indices: Sequence[E.Expr], shape: Sequence[E.Expr],
                  axes: Sequence[int]) -> E.Expr:
    terms: list[E.Expr] = []
    for a in axes:
        i = _i64(indices[a])
        terms += [E.LT(i, E.Const(0, _I64)), E.GE(i, _i64(shape[a]))]
    return _or(terms)


def _positive_const(e: E.Expr) -> bool:
    return isinstance(e, E.Const) and int(e.value) > 0


class _Checker(StmtMutator):
    """The checked program: :meth:`visit` rewrites a statement, the checks its expressions
    need placed before it (sequences and allocations as the mutator rebuilds them)."""

    def __init__(self, err: Buffer, prover: AffineProver) -> None:
        self.err = err
        self.prover = prover
        self.checks: list[BoundsCheck] = []
        self.sizes: list[SizeCheck] = []
        self._pending: list[Stmt] = []  # check statements of the statement being rewritten

    # statements
    def visit_For(self, s: For) -> Stmt:
        lo, hi = self.expr(s.lo, _TRUE), self.expr(s.hi, _TRUE)
        pend = self._take()
        return _prefix(pend, replace(s, lo=lo, hi=hi, body=self._under(
            self.prover.push_loop, s, s.body)))

    def visit_LetStmt(self, s: LetStmt) -> Stmt:
        value = self.expr(s.value, _TRUE)
        pend = self._take()
        return _prefix(pend, replace(s, value=value, body=self._under(
            self.prover.push_let, s, s.body)))

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt:
        cond = self.expr(s.cond, _TRUE)
        pend = self._take()
        then = self._under(self.prover.push_cond, s.cond, s.then)
        else_ = None
        if s.else_ is not None:
            self.prover.push_cond(s.cond, holds=False)
            else_ = self.visit(s.else_)
            self.prover.pop()
        return _prefix(pend, IfThenElse(cond, then, else_))

    def visit_Store(self, s: Store) -> Stmt:
        return self._store(s)

    def _under(self, push: Any, arg: Any, body: Stmt) -> Stmt:
        push(arg)
        out = self.visit(body)
        self.prover.pop()
        return out

    def _affine_axes(self, buf: Buffer, indices: Sequence[E.Expr], path: E.Expr, kind: str,
                     access: str) -> list[int]:
        """The axes with an affine index that needs a check in the loop; size checks noted."""
        out = []
        for a, i in enumerate(indices):
            if _is_dynamic(i):
                continue
            v = self.prover.verdict(buf, a, i, path, kind, access)
            if v == "runtime":
                out.append(a)
            elif isinstance(v, SizeCheck) and v not in self.sizes:
                self.sizes.append(v)
        return out

    def _take(self) -> list[Stmt]:
        pend, self._pending = self._pending, []
        return pend

    def _store(self, s: Store) -> Stmt:
        indices = tuple(self.expr(i, _TRUE) for i in s.indices)
        value = self.expr(s.value, _TRUE)
        access = _access(s.buffer, s.indices)
        affine = self._affine_axes(s.buffer, s.indices, _TRUE, "write", access)
        axes = sorted([a for a, i in enumerate(s.indices) if _is_dynamic(i)] + affine)
        out: Stmt = replace(s, indices=indices, value=value)
        if axes:
            bad = _out_of_range(indices, s.buffer.shape, axes)
            self._record(s.buffer, "write", axes, indices, _TRUE, bad, access, affine)
            out = IfThenElse(E.Not(bad), out)
        return _prefix(self._take(), out)

    # expressions (``path``: the condition under which ``e`` is evaluated)
    def expr(self, e: E.Expr, path: E.Expr) -> E.Expr:
        if isinstance(e, BufferLoad):
            return self._load(e, path)
        if isinstance(e, E.Select):
            c = self.expr(e.cond, path)
            t = self.expr(e.t, _and(path, c))
            f = self.expr(e.f, _and(path, E.Not(c)))
            return e if (c, t, f) == (e.cond, e.t, e.f) else E.Select(c, t, f, e.dtype)
        if isinstance(e, (E.And, E.Or)):
            a = self.expr(e.a, path)
            b = self.expr(e.b, _and(path, a if isinstance(e, E.And) else E.Not(a)))
            return e if (a, b) == (e.a, e.b) else type(e)(a, b, e.dtype)
        kids = {}
        for f in fields(e):
            v = getattr(e, f.name)
            if isinstance(v, E.Expr):
                kids[f.name] = self.expr(v, path)
            elif isinstance(v, tuple) and any(isinstance(x, E.Expr) for x in v):
                kids[f.name] = tuple(self.expr(x, path) if isinstance(x, E.Expr) else x
                                     for x in v)
        if all(kids[k] is getattr(e, k) for k in kids):
            return e
        return replace(e, **kids)

    def _load(self, e: BufferLoad, path: E.Expr) -> E.Expr:
        indices = tuple(self.expr(i, path) for i in e.indices)
        access = _access(e.buffer, e.indices)
        affine = self._affine_axes(e.buffer, e.indices, path, "read", access)
        axes = sorted([a for a, i in enumerate(e.indices) if _is_dynamic(i)] + affine)
        if not axes:
            return e if indices == e.indices else replace(e, indices=indices)
        shape = e.buffer.shape
        bad = _out_of_range(indices, shape, axes)
        self._record(e.buffer, "read", axes, indices, path, bad, access, affine)
        clamped = list(indices)
        for a in axes:
            hi = E.Sub(_i64(shape[a]), E.Const(1, _I64), _I64)
            clamped[a] = E.Max(E.Min(_i64(indices[a]), hi, _I64), E.Const(0, _I64), _I64)
        load = replace(e, indices=tuple(clamped))
        empty = [E.GT(_i64(shape[a]), E.Const(0, _I64)) for a in axes
                 if not _positive_const(shape[a])]
        if not empty:
            return load
        nonempty = empty[0]
        for c in empty[1:]:
            nonempty = E.And(nonempty, c)
        return E.Select(nonempty, load, E.Const(False if e.dtype == "bool" else 0, e.dtype),
                        e.dtype)

    def _record(self, buf: Buffer, kind: str, axes: list[int], indices: Sequence[E.Expr],
                path: E.Expr, bad: E.Expr, access: str, affine: Sequence[int] = ()) -> None:
        code = len(self.checks) + 1
        self.checks.append(BoundsCheck(code, buf.name, kind, tuple(buf.shape), tuple(axes),
                                       access, tuple(affine)))
        err = self.err
        writes: list[Stmt] = [Store(err, (E.Const(1 + d, _I64),), _i64(i))
                              for d, i in enumerate(indices)]
        writes.append(Store(err, (E.Const(0, _I64),), E.Const(code, _I64)))
        first = E.EQ(BufferLoad(err, (E.Const(0, _I64),), _I64), E.Const(0, _I64))
        self._pending.append(IfThenElse(_and(path, bad), IfThenElse(first, Seq(tuple(writes)))))


def _prefix(checks: list[Stmt], s: Stmt) -> Stmt:
    return Seq((*checks, s)) if checks else s


def _access(buf: Buffer, indices: Sequence[E.Expr]) -> str:
    return f"{buf.name}[{', '.join(format_expr(i) for i in indices)}]"
