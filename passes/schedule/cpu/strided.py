"""Unit-stride inner loops for strided reads: exact divisions folded, inputs deinterleaved.

A stride-``s`` convolution reads its input at ``x*s + rx`` in its innermost (vectorised)
loop over the output column ``x``.  A vector of those loads is a gather, or ``s`` loads and
shuffles, for every multiply-add: a stride-2 3x3 convolution ran at a quarter of the stride-1
one's speed per flop.  :func:`unit_stride` makes the reads of every innermost loop unit-stride
where they are not, by two exact rewrites:

* :func:`tecomp.passes.exact_div.fold_exact_divisions`: indices such as ``(2*xq + 2*xu) // 2``
  that zero elimination leaves in transposed convolutions become ``xq + xu``;
* :func:`deinterleave`: a buffer ``B`` read at ``B[.., s*v + e]`` (``s >= 2`` a constant,
  ``v`` the variable of an innermost loop, ``e`` free of ``v``) is copied once into its
  polyphase layout ``B_s[.., p, q] = B[.., s*q + p]`` (``0 <= p < s``) and the read becomes
  ``B_s[.., e % s, v + e // s]``, unit-stride in ``v``.  For the convolution::

      for (x, 0, 16) { Y[b, f, y, x] += Xp[b, c, 2*y + ry, 2*x + rx] * W[f, c, ry, rx] }
  ==>
      for (x, 0, 16) { Y[b, f, y, x] += Xp_s2[b, c, 2*y + ry, rx % 2, x + rx // 2] * W[..] }

  after which the register blocking of :mod:`.tile` unrolls ``rx`` (the phase and offset
  become constants) exactly as for a stride-1 convolution.  This is the polyphase (space-to-
  depth) decomposition of a strided convolution into ``s`` dense ones (Bellanger et al.,
  IEEE Trans. ASSP 1976), applied to the layout only: the loop nest is unchanged.

When deinterleaving applies: ``B`` is an input of the function or a buffer it allocates, of
at least one dimension; every strided read is inside an innermost loop with step 1 and its
last index walks no enclosing loop with unit stride for :data:`LEAST_RUN` elements or more
(the flattened columns of a dilated
convolution, ``X_pad[b, c, p // 32 + 2*ry, p % 32 + 2*rx]`` with ``rx`` innermost, are the
unit-stride direction the register tiles pack their panels along: the polyphase copy made
that packing a gather per element, 7.3 -> 5.4 ms for an 8x64x32x32 -> 64 3x3 convolution at
dilation 2 on one core); the copy
is placed before the first top-level statement (of the function, or of ``B``'s allocation)
that holds such a read, and no statement from there on stores to ``B``; and it pays: the
innermost loops' iterations that read ``B`` (products of constant trip counts) number at least
:data:`REUSE` times the elements of ``B`` (either unknown: it applies).

Legality.  ``B_s[.., p, q]`` holds ``B[.., s*q + p]`` for every ``s*q + p`` inside ``B``; a
rewritten read ``B_s[.., e % s, v + e // s]`` is ``B[.., s*(v + e // s) + e % s]`` =
``B[.., s*v + e]`` (Euclid's division by ``s > 0``, exact for every integer ``e``), the very
element it read before, and ``B`` no longer changes once copied.  The copy writes each element
of ``B_s`` once (its first loop parallel: distinct iterations write distinct rows).
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.functor import fresh_name
from tecomp.host import Host
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    LoweredFunc,
    Seq,
    Stmt,
    Store,
)
from tecomp.stmt_functor import (
    StmtMutator,
    bound_names,
    expr_children,
    rebuild_expr,
    stmt_children,
    stmt_exprs,
    walk_expr,
    walk_stmt,
)

from ...exact_div import affine, build, fold_exact_divisions, fold_index

#: deinterleave only when the strided reads touch each element this many times on average
REUSE = 4


def unit_stride(func: LoweredFunc, host: Host | None = None) -> LoweredFunc:
    """Exact divisions folded, then strided reads of innermost loops deinterleaved (module
    docstring).  ``host`` is accepted for the schedule's uniform calling convention."""
    return deinterleave(fold_exact_divisions(func))


def deinterleave(func: LoweredFunc) -> LoweredFunc:
    """``func`` with the buffers read at a constant stride ``>= 2`` along an innermost loop
    read from a polyphase copy instead (module docstring)."""
    found: dict[tuple[Buffer, int], int | None] = {}
    _strided_reads(func.body, [], found)
    if not found:
        return func
    allocated = {s.buffer: s for s in walk_stmt(func.body) if isinstance(s, Allocate)}
    names = bound_names(func.body) | {p.name for p in func.params}
    names |= {b.name for b in (*func.inputs, *func.outputs, *allocated)}
    body = func.body
    for (buf, s), reads in found.items():
        if not _pays(buf, reads):
            continue
        if buf in func.inputs:
            new = _place(body, buf, s, names)
        elif buf in allocated:
            new = _in_allocation(body, buf, s, names)
        else:
            new = None
        if new is not None:
            body = new
    if body is func.body:
        return func
    return LoweredFunc(func.name, func.inputs, func.outputs, func.params, body)


# ---------------------------------------------------------------------------- finding reads
def stride_of(load: BufferLoad, v: E.Var) -> int | None:
    """The constant stride ``s >= 2`` of ``load``'s last index along ``v``, else None."""
    if not load.indices:
        return None
    terms, _ = affine(load.indices[-1])
    s = terms.get(v, 0)
    if s < 2 or any(v in set(walk_expr(a)) for a in terms if a != v):
        return None
    return s


def _innermost(loop: For) -> bool:
    return not any(isinstance(x, For) for x in walk_stmt(loop.body))


def _trips(loop: For) -> int | None:
    if isinstance(loop.lo, E.Const) and isinstance(loop.hi, E.Const):
        return max(0, -(-(int(loop.hi.value) - int(loop.lo.value)) // loop.step))
    return None


def _strided_reads(s: Stmt, trips: list[int | None],
                   found: dict[tuple[Buffer, int], int | None],
                   outer: dict[E.Var, int | None] | None = None) -> None:
    """Record each (buffer, stride) read strided in an innermost loop, with the iterations
    of those loops (None: unknown); ``outer`` maps the enclosing loops' variables to their
    trip counts."""
    outer = {} if outer is None else outer
    if isinstance(s, For):
        inner = trips + [_trips(s)]
        if not _innermost(s):
            _strided_reads(s.body, inner, found, {**outer, s.var: _trips(s)})
            return
        if s.step != 1:
            return
        total: int | None = 1
        for t in inner:
            total = None if t is None or total is None else total * t
        for x in walk_stmt(s.body):
            for e in stmt_exprs(x):
                for ld in walk_expr(e):
                    if isinstance(ld, BufferLoad):
                        st = stride_of(ld, s.var)
                        if st is not None and not _walks_unit(ld, outer):
                            key = (ld.buffer, st)
                            old = found.get(key, 0)
                            found[key] = None if old is None or total is None else old + total
        return
    for c in stmt_children(s):
        _strided_reads(c, trips, found, outer)


#: the shortest unit-stride run along an enclosing loop that keeps a strided read in place
LEAST_RUN = 8


def _walks_unit(load: BufferLoad, outer: dict[E.Var, int | None]) -> bool:
    """Whether ``load``'s last index also walks an enclosing loop with unit stride for at
    least :data:`LEAST_RUN` elements: a term ``u`` (a loop of that many iterations, or of
    unknown length) or ``u % w`` (``w`` that many) with coefficient 1 (module docstring)."""
    terms, _ = affine(load.indices[-1])
    for atom, c in terms.items():
        if c != 1:
            continue
        if isinstance(atom, E.Var) and atom in outer:
            trips = outer[atom]
            if trips is None or trips >= LEAST_RUN:
                return True
        if (isinstance(atom, E.Mod) and isinstance(atom.a, E.Var) and atom.a in outer
                and isinstance(atom.b, E.Const) and int(atom.b.value) >= LEAST_RUN):
            return True
    return False


def _pays(buf: Buffer, reads: int | None) -> bool:
    size: int | None = 1
    for d in buf.shape:
        size = int(d.value) * size if isinstance(d, E.Const) and size is not None else None
    return reads is None or size is None or reads >= REUSE * size


# ---------------------------------------------------------------------------- placing the copy
def _in_allocation(body: Stmt, buf: Buffer, s: int, names: set[str]) -> Stmt | None:
    """``body`` with the copy of ``buf`` placed inside ``buf``'s allocation."""
    class Inside(StmtMutator):
        done: Stmt | None = None

        def visit_Allocate(self, a: Allocate) -> Stmt:
            if a.buffer != buf:
                return super().visit_Allocate(a)
            inner = _place(a.body, buf, s, names)
            if inner is None:
                return a
            self.done = inner
            return Allocate(a.buffer, inner)

        def visit_Store(self, st: Store) -> Stmt:
            return st

    m = Inside()
    out = m.visit(body)
    return out if m.done is not None else None


def _place(s: Stmt, buf: Buffer, stride: int, names: set[str]) -> Stmt | None:
    """``s`` with the copy of ``buf`` before the first statement that reads it strided and
    those reads redirected, or None when that cannot be done (``buf`` stored to later)."""
    items = list(s.stmts) if isinstance(s, Seq) else [s]
    for n, item in enumerate(items):
        if not _reads_strided(item, buf, stride):
            continue
        if _stores(items[n:], buf):
            # the stores may all come first inside ``item``: place the copy further in
            if not isinstance(item, (Allocate, Seq)) or _stores(items[n + 1:], buf) or \
                    any(_reads_strided(x, buf, stride) for x in items[n + 1:]):
                return None
            inner = _place(item.body if isinstance(item, Allocate) else item, buf, stride,
                           names)
            if inner is None:
                return None
            new = Allocate(item.buffer, inner) if isinstance(item, Allocate) else inner
            return _seq(items[:n] + [new] + items[n + 1:])
        phased = _phased(buf, stride, names)
        redirect = _Redirect(buf, stride, phased)
        tail = [redirect.visit(x) for x in items[n:]]
        copy = _copy(buf, phased, stride, names)
        return _seq(items[:n] + [Allocate(phased, _seq([copy] + tail))])
    return None


def _seq(items: list[Stmt]) -> Stmt:
    return items[0] if len(items) == 1 else Seq(tuple(items))


def _phased(buf: Buffer, s: int, names: set[str]) -> Buffer:
    name = fresh_name(f"{buf.name}_s{s}", names)
    names.add(name)
    last = buf.shape[-1]
    q = E.Const(-(-int(last.value) // s), last.dtype) if isinstance(last, E.Const) else \
        E.floordiv(E.add(last, s - 1), s)
    return Buffer(name, tuple(buf.shape[:-1]) + (E.Const(s, "int64"), q), buf.dtype, "temp")


def _copy(buf: Buffer, phased: Buffer, s: int, names: set[str]) -> Stmt:
    """``for (.., p, q) { phased[.., p, q] = buf[.., s*q + p] }``, the first loop parallel."""
    def var(base: str) -> E.Var:
        name = fresh_name(base, names)
        names.add(name)
        return E.Var(name, "int64")

    outer = [var(f"d{k}") for k in range(buf.ndim - 1)]
    p, q = var("phase"), var("q")
    last = buf.shape[-1]
    src = E.add(E.mul(E.Const(s, "int64"), q), p)
    body: Stmt = Store(phased, (*outer, p, q), BufferLoad(buf, (*outer, src), buf.dtype))
    qhi = E.floordiv(E.add(E.sub(last, p), E.Const(s - 1, "int64")), E.Const(s, "int64"))
    body = For(q, E.Const(0, "int64"), qhi, body)
    body = For(p, E.Const(0, "int64"), E.Const(s, "int64"), body)
    for k in reversed(range(buf.ndim - 1)):
        body = For(outer[k], E.Const(0, "int64"), buf.shape[k], body,
                   kind="parallel" if k == 0 else "serial")
    return body


# ---------------------------------------------------------------------------- redirecting reads
class _Redirect(StmtMutator):
    """Reads ``buf[.., s*v + e]`` of innermost loops over ``v`` become ``phased[.., e % s,
    v + e // s]``."""

    def __init__(self, buf: Buffer, s: int, phased: Buffer) -> None:
        self.buf, self.s, self.phased = buf, s, phased

    def visit_For(self, loop: For) -> Stmt:
        if not _innermost(loop) or loop.step != 1:
            return super().visit_For(loop)
        return _LoadsIn(self, loop.var).visit(loop)

    def rewrite(self, load: BufferLoad, v: E.Var) -> E.Expr:
        if load.buffer != self.buf or stride_of(load, v) != self.s:
            return load
        terms, c = affine(load.indices[-1])
        rest = build(({a: k for a, k in terms.items() if a != v}, c), load.indices[-1].dtype)
        st = E.Const(self.s, rest.dtype)
        phase = fold_index(E.mod(rest, st))
        offset = fold_index(E.add(v, E.floordiv(rest, st)))
        return BufferLoad(self.phased, (*load.indices[:-1], phase, offset), load.dtype)


class _LoadsIn(StmtMutator):
    def __init__(self, owner: _Redirect, v: E.Var) -> None:
        self.owner, self.v, self.memo = owner, v, {}

    def mutate_expr(self, e: E.Expr) -> E.Expr:
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit[1]
        cs = expr_children(e)
        new = tuple(self.mutate_expr(x) for x in cs)
        out = e if all(a is b for a, b in zip(new, cs)) else rebuild_expr(e, new) \
            if not isinstance(e, BufferLoad) else BufferLoad(e.buffer, new, e.dtype)
        if isinstance(out, BufferLoad):
            out = self.owner.rewrite(out, self.v)
        self.memo[id(e)] = (e, out)
        return out


def _reads_strided(s: Stmt, buf: Buffer, stride: int) -> bool:
    found: dict[tuple[Buffer, int], int | None] = {}
    _strided_reads(s, [], found)
    return (buf, stride) in found


def _stores(items: list[Stmt], buf: Buffer) -> bool:
    return any(isinstance(x, Store) and x.buffer == buf for s in items for x in walk_stmt(s))


