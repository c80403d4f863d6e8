"""Accurate long float32 sums: blocked partial sums combined in float64 (CPU scheduling).

A float32 sum into a scalar local lowers to one running accumulator::

    S_sum = 0.0
    for (i, 0, n) { S_sum += X[i] * X[i] }

LLVM vectorises it with ``lanes x interleave`` partial sums (64 at 512 bits), but each partial
still adds ``n / 64`` terms in sequence, and its rounding error grows with it: a sum of
squares of 16M normal numbers came out 1.6e-4 relative from the float64 value (NumPy's
pairwise sum: 1e-8).  :func:`block_sums` cuts the reduction nest into blocks of about
``block`` terms, sums each block in a fresh float32 local (which the vectoriser again splits
into vector partial sums) and adds the block sums into a float64 accumulator::

    S_sum = 0.0
    allocate S_wide: float64 (local) {
      S_wide = float64(S_sum)
      for (ib, 0, n, step 4096) {
        allocate S_part: float32 (local) {
          S_part = 0.0
          for (i, ib, min(ib + 4096, n)) { S_part += X[i] * X[i] }
          S_wide += float64(S_part)
        }
      }
      S_sum = float32(S_wide)
    }

This is the blocked summation of Castaldo, Whaley & Chronopoulos ("Reducing floating point
error in dot product using the superblock family of algorithms", SIAM J. Sci. Comput. 2008)
with a wider outer accumulator (Higham, "Accuracy and Stability of Numerical Algorithms",
2nd ed., §4.2 and §4.6): the error bound of a block of ``b`` terms over ``L`` vector partials
is about ``(b / L + log2 L) * eps32``, and the float64 combination adds about
``(n / b) * eps64``; for 16M terms, ``b = 4096`` and ``L = 64`` that is below 1e-6 relative
even in the worst case of terms of one sign.  The float64 addition runs once per block, so
the loop costs what it did.

When the innermost loops are short and constant (a sum over ``(r, s)`` with ``s`` of 32), the
block is formed one level up: the deepest loop ``d`` of the nest whose loops ``d, ..``
together run at least ``min_part`` steps is stepped by ``max(1, block // P)`` where ``P`` is
the constant trip count of the loops inside it.

Legality.  The rewrite applies to a perfect nest of loops whose innermost body is one
``Store(acc, (), v, reduce="sum")`` into a float32 scalar local ``acc`` allocated outside the
nest, with ``v`` not reading ``acc``, and whose trip count is symbolic or above ``min_terms``.
Every term is added exactly once, into the block of its own loop iteration; only the
association of the additions changes (rounding only, as vectorising the sum already does),
and the float64 steps round less than the float32 ones they replace.  A loop whose body
holds anything else, or whose accumulator is read inside the nest, is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tecomp import expr as E
from tecomp.functor import children, fresh_name
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


def block_sums(func: LoweredFunc, *, block: int = 4096, min_part: int = 256,
               min_terms: int = 16384, parallel: bool = False) -> LoweredFunc:
    """Sum long float32 reductions into scalar locals in blocks of about ``block`` terms,
    combined in float64 (see the module docstring).  Nests of at most ``min_terms`` steps
    (constant trip count) are left alone.  With ``parallel``, a nest outside every loop whose
    blocks are formed at its outermost loop computes its blocks in a ``"parallel"`` loop,
    each into its own element of a float64 temporary, then adds them in order (below)."""
    if block < 1 or min_part < 1:
        raise ValueError("block_sums: block and min_part must be positive")
    opts = _Options(block, min_part, min_terms, parallel,
                    _names(func.body) | {p.name for p in func.params})
    body = _walk(func.body, opts, True)
    return func if body is func.body else replace(func, body=body)


@dataclass
class _Options:
    block: int
    min_part: int
    min_terms: int
    parallel: bool
    taken: set[str]


def _walk(s: Stmt, opts: _Options, top: bool) -> Stmt:
    if isinstance(s, For):
        out = _rewrite(s, opts, top)
        if out is not None:
            return out
        body = _walk(s.body, opts, False)
        return s if body is s.body else replace(s, body=body)
    if isinstance(s, Seq):
        items = tuple(_walk(x, opts, top) for x in s.stmts)
        return s if all(a is b for a, b in zip(items, s.stmts)) else Seq(items)
    if isinstance(s, (Allocate, LetStmt)):
        body = _walk(s.body, opts, top)
        return s if body is s.body else replace(s, body=body)
    if isinstance(s, IfThenElse):
        then = _walk(s.then, opts, False)
        other = None if s.else_ is None else _walk(s.else_, opts, False)
        return s if then is s.then and other is s.else_ else IfThenElse(s.cond, then, other)
    return s


def _extent(loop: For) -> int | None:
    """Constant trip count of ``loop``, or None."""
    if isinstance(loop.lo, E.Const) and isinstance(loop.hi, E.Const):
        return max(0, -(-(int(loop.hi.value) - int(loop.lo.value)) // loop.step))
    return None


def _match(loop: For) -> tuple[list[For], Store] | None:
    """The loops of a perfect nest and its accumulating store, when the nest qualifies."""
    loops = [loop]
    while isinstance(loops[-1].body, For):
        loops.append(loops[-1].body)
    st = loops[-1].body
    if not (isinstance(st, Store) and st.reduce == "sum" and not st.indices):
        return None
    acc = st.buffer
    if acc.scope != "local" or acc.dtype != "float32" or acc.shape:
        return None
    if any(not isinstance(x.step, int) or x.step < 1 for x in loops):
        return None
    if _reads(st.value, acc) or any(_reads(x.lo, acc) or _reads(x.hi, acc) for x in loops):
        return None
    return loops, st


def _rewrite(loop: For, opts: _Options, top: bool) -> Stmt | None:
    block, min_part, min_terms, taken = opts.block, opts.min_part, opts.min_terms, opts.taken
    m = _match(loop)
    if m is None:
        return None
    loops, st = m
    extents = [_extent(x) for x in loops]
    if None not in extents and _product(extents) <= min_terms:
        return None
    # the deepest loop d whose loops d, d+1, .. run at least min_part steps together (or 0)
    depth = next((d for d in range(len(loops) - 1, -1, -1)
                 if None in extents[d:] or _product(extents[d:]) >= min_part), 0)
    inner = _product(extents[depth + 1:])  # constant (deeper loops are short)
    acc = st.buffer
    wide = Buffer(_fresh(f"{acc.name}_wide", taken), (), "float64", "local")
    part = Buffer(_fresh(f"{acc.name}_part", taken), (), "float32", "local")
    nest: Stmt = Store(part, (), st.value, "sum")
    for x in reversed(loops[depth + 1:]):
        nest = replace(x, body=nest)
    partial = [Store(part, (), E.Const(0.0, "float32"))]
    add_part = Store(wide, (), E.Cast(BufferLoad(part, (), "float32"), "float64"), "sum")
    head = loops[depth]
    step = max(1, block // max(inner, 1))
    ext = extents[depth]
    if depth == 0 and top and opts.parallel and (ext is None or ext > step):
        return _parallel(head, nest, acc, part, wide, step, taken)
    if ext is not None and ext <= step:  # one block per iteration of the loops above
        blocked: Stmt = Allocate(part, Seq((*partial, replace(head, body=nest), add_part)))
    else:
        v = head.var
        vb = E.Var(_fresh(f"{v.name}b", taken), v.dtype)
        span = E.Const(step * head.step, v.dtype)
        piece = replace(head, lo=vb, hi=E.Min(E.Add(vb, span, v.dtype), head.hi, v.dtype),
                        body=nest, kind="serial")
        blocked = replace(head, var=vb, step=step * head.step,
                          body=Allocate(part, Seq((*partial, piece, add_part))))
    for x in reversed(loops[:depth]):
        blocked = replace(x, body=blocked)
    return Allocate(wide, Seq((
        Store(wide, (), E.Cast(BufferLoad(acc, (), "float32"), "float64")),
        blocked,
        Store(acc, (), E.Cast(BufferLoad(wide, (), "float64"), "float32")))))


def _parallel(head: For, nest: Stmt, acc: Buffer, part: Buffer, wide: Buffer, step: int,
              taken: set[str]) -> Stmt:
    """The blocks of a top-level nest in a parallel loop, one float64 element each, then
    their sum in block order::

        allocate S_blocks: float64[(n + 4095) // 4096] {
          parallel for (ib, 0, (n + 4095) // 4096) {
            allocate S_part { S_part = 0.0
              for (i, ib * 4096, min(ib * 4096 + 4096, n)) { S_part += X[i] * X[i] }
              S_blocks[ib] = float64(S_part) } }
          allocate S_wide { S_wide = float64(S_sum)
            for (ib, 0, ..) { S_wide += S_blocks[ib] };  S_sum = float32(S_wide) } }
    """
    v, dt = head.var, head.var.dtype
    span = step * head.step
    count = E.FloorDiv(E.Add(E.Sub(head.hi, head.lo, dt), E.Const(span - 1, dt), dt),
                       E.Const(span, dt), dt)
    blocks = Buffer(_fresh(f"{acc.name}_blocks", taken), (count,), "float64", "temp")
    b = E.Var(_fresh(f"{v.name}b", taken), dt)
    first = E.Add(head.lo, E.Mul(b, E.Const(span, dt), dt), dt)
    piece = replace(head, lo=first, hi=E.Min(E.Add(first, E.Const(span, dt), dt), head.hi, dt),
                    body=nest, kind="serial")
    fill = For(b, E.Const(0, dt), count, Allocate(part, Seq((
        Store(part, (), E.Const(0.0, "float32")), piece,
        Store(blocks, (b,), E.Cast(BufferLoad(part, (), "float32"), "float64"))))),
        kind="parallel")
    c = E.Var(_fresh(f"{v.name}c", taken), dt)
    combine = Allocate(wide, Seq((
        Store(wide, (), E.Cast(BufferLoad(acc, (), "float32"), "float64")),
        For(c, E.Const(0, dt), count,
            Store(wide, (), BufferLoad(blocks, (c,), "float64"), "sum")),
        Store(acc, (), E.Cast(BufferLoad(wide, (), "float64"), "float32")))))
    return Allocate(blocks, Seq((fill, combine)))


def _product(xs: list[int | None]) -> int:
    out = 1
    for x in xs:
        out *= int(x or 0)
    return out


def _fresh(base: str, taken: set[str]) -> str:
    name = fresh_name(base, taken)
    taken.add(name)
    return name


def _reads(e: E.Expr, buf: Buffer) -> bool:
    """Whether ``e`` loads from ``buf``."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, BufferLoad):
            if x.buffer == buf:
                return True
            stack.extend(x.indices)
        else:
            stack.extend(children(x))
    return False


def _names(s: Stmt) -> set[str]:
    """Names of the loop/let variables and buffers of ``s``."""
    out: set[str] = set()
    stack = [s]
    while stack:
        x = stack.pop()
        if isinstance(x, For):
            out.add(x.var.name)
            stack.append(x.body)
        elif isinstance(x, LetStmt):
            out.add(x.var.name)
            stack.append(x.body)
        elif isinstance(x, Allocate):
            out.add(x.buffer.name)
            stack.append(x.body)
        elif isinstance(x, Seq):
            stack.extend(x.stmts)
        elif isinstance(x, IfThenElse):
            stack.extend([x.then] + ([x.else_] if x.else_ is not None else []))
        elif isinstance(x, Store):
            out.add(x.buffer.name)
    return out
