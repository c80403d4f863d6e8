"""Lane loops in the loop IR: ``For(kind="lanes")``.

A loop of ``kind="lanes"`` with a constant trip count ``L`` (2 to 64) is a schedule's promise
that its iterations are independent: no iteration reads or writes an element that another
iteration writes.  Its statements may then run one after another, each for all ``L``
iterations at once, as vector operations.  The CPU schedule uses it for register tiles
(:mod:`tecomp.passes.schedule.cpu.gemm`); the LLVM backend emits it
(:mod:`tecomp.codegen.llvm.lanes`).

:func:`vector_form` says when a lane loop has the form a backend emits as vectors: every
statement a store (plain or ``sum``) of float32/float64 whose last index is ``lane + (terms
free of the lane)`` and whose other indices do not use the lane, with a value built from
float ``+ - * /``, ``min``/``max`` (NaN-propagating), negation and ``select`` on per-lane
conditions (comparisons of lane indices such as a causal mask's ``j0 + jj <= i``, or of
such floats) of reads of that same form and of expressions free of the lane (broadcast to
every lane).  Any other lane loop
runs as the serial loop it also is.
"""

from __future__ import annotations

from . import expr as E
from .loopir import Buffer, BufferLoad, For, Seq, Store
from .stmt_functor import expr_children

__all__ = ["OPS", "Uses", "contiguous", "lane_count", "lane_index", "reads_buffer", "stream_form",
           "vector_form"]

_FLOAT = ("float32", "float64")
OPS = {E.Add: "fadd", E.Sub: "fsub", E.Mul: "fmul", E.Div: "fdiv"}


def lane_count(s: For) -> int | None:
    """The constant trip count of ``s`` (``hi - lo``), when the lanes rule can use it."""
    lo, hi = s.lo, s.hi
    if s.step != 1:
        return None
    if isinstance(lo, E.Const) and isinstance(hi, E.Const):
        n = int(hi.value) - int(lo.value)
    elif isinstance(hi, E.Add) and hi.a == lo and isinstance(hi.b, E.Const):
        n = int(hi.b.value)
    else:
        return None
    return n if 2 <= n <= 64 else None


class Uses:
    """``uses(e)``: whether the expression ``e`` reads the variable ``v`` -- each node
    looked at once, however often the rules below ask about its subtrees (asking
    ``v in expr_vars(e)`` at every level walked a deep value quadratically)."""

    __slots__ = ("v", "memo")

    def __init__(self, v: E.Var) -> None:
        self.v = v
        self.memo: dict[int, tuple[bool, E.Expr]] = {}  # by id; the node kept alive

    def __call__(self, e: E.Expr) -> bool:
        found = self.memo.get(id(e))
        if found is not None:
            return found[0]
        if type(e) is E.Var:
            out = e == self.v
        else:
            out = any(self(c) for c in expr_children(e))
        self.memo[id(e)] = (out, e)
        return out


def _coefficient(e: E.Expr, v: E.Var, uses: Uses | None = None) -> int | None:
    """0 when ``e`` does not use ``v``, 1 when it is ``v + (terms free of v)``, else None."""
    uses = uses or Uses(v)
    if not uses(e):
        return 0
    if e == v:
        return 1
    if isinstance(e, E.Add):
        a, b = _coefficient(e.a, v, uses), _coefficient(e.b, v, uses)
        return None if a is None or b is None or a + b != 1 else 1
    if isinstance(e, E.Sub):
        a, b = _coefficient(e.a, v, uses), _coefficient(e.b, v, uses)
        return 1 if a == 1 and b == 0 else None
    return None


def contiguous(buf: Buffer, indices: tuple[E.Expr, ...], v: E.Var,
                uses: Uses | None = None) -> bool:
    """Whether consecutive ``v`` address consecutive elements: the last index, after any
    trailing zeros into dimensions of extent 1 (``W[o, c, 0, 0]``), moves by one, the
    others not at all."""
    while (len(indices) > 1 and isinstance(indices[-1], E.Const) and indices[-1].value == 0
           and isinstance(buf.shape[len(indices) - 1], E.Const)
           and buf.shape[len(indices) - 1].value == 1):
        indices = indices[:-1]
    uses = uses or Uses(v)
    return bool(indices) and _coefficient(indices[-1], v, uses) == 1 and all(
        _coefficient(x, v, uses) == 0 for x in indices[:-1])


_Memo = dict[tuple[int, str], tuple[bool, E.Expr]]


def _vectorisable(e: E.Expr, v: E.Var, dtype: str, uses: Uses,
                  memo: _Memo | None = None) -> bool:
    """Whether ``e`` has the vector form (module docstring); ``memo`` (by node, the node kept
    alive, by dtype) answers each shared node once -- a value may be a DAG far larger as a
    tree."""
    if not uses(e):
        return True
    memo = {} if memo is None else memo
    found = memo.get((id(e), dtype))
    if found is not None:
        return found[0]
    out = _vector_node(e, v, dtype, uses, memo)
    memo[(id(e), dtype)] = (out, e)
    return out


def _vector_node(e: E.Expr, v: E.Var, dtype: str, uses: Uses, memo: _Memo) -> bool:
    if e.dtype != dtype:
        return False
    if isinstance(e, BufferLoad):
        return e.buffer.dtype == dtype and contiguous(e.buffer, e.indices, v, uses)
    if type(e) in OPS or isinstance(e, (E.Max, E.Min)):
        return _vectorisable(e.a, v, dtype, uses, memo) and \
            _vectorisable(e.b, v, dtype, uses, memo)
    if isinstance(e, E.Neg):
        return _vectorisable(e.a, v, dtype, uses, memo)
    if isinstance(e, E.Select):
        return (_condition(e.cond, v, uses, memo) and _vectorisable(e.t, v, dtype, uses, memo)
                and _vectorisable(e.f, v, dtype, uses, memo))
    return False


def _condition(e: E.Expr, v: E.Var, uses: Uses, memo: _Memo) -> bool:
    """A per-lane condition: comparisons of integer lane indices (``j0 + jj <= i``) or of
    vectorisable floats, joined by ``&``/``|``."""
    if not uses(e):
        return True
    if isinstance(e, (E.And, E.Or)):
        return _condition(e.a, v, uses, memo) and _condition(e.b, v, uses, memo)
    if not isinstance(e, E.CmpOp):
        return False
    if e.a.dtype == "int64" and e.b.dtype == "int64":
        return (_coefficient(e.a, v, uses) is not None
                and _coefficient(e.b, v, uses) is not None)
    return (e.a.dtype == e.b.dtype and e.a.dtype in _FLOAT
            and _vectorisable(e.a, v, e.a.dtype, uses, memo)
            and _vectorisable(e.b, v, e.b.dtype, uses, memo))


def lane_index(e: E.Expr, v: E.Var, uses: Uses | None = None) -> int | None:
    """The coefficient (0 or 1) of the lane ``v`` in the integer index ``e``, or None
    (``uses``: a :class:`Uses` of ``v`` to share between calls)."""
    return _coefficient(e, v, uses)


def _stores(s: For) -> list[Store] | None:
    body = s.body
    items = list(body.stmts) if isinstance(body, Seq) else [body]
    if not all(isinstance(x, Store) for x in items):
        return None
    return items  # type: ignore[return-value]


def vector_form(s: For) -> tuple[int, list[Store]] | None:
    """``(lanes, stores)`` when :func:`emit_lanes` can emit ``s`` as vector operations."""
    n = lane_count(s)
    stores = _stores(s) if n is not None else None
    if n is None or stores is None:
        return None
    uses = Uses(s.var)
    for st in stores:
        dt = st.buffer.dtype
        if dt not in _FLOAT or st.reduce not in (None, "sum"):
            return None
        if not contiguous(st.buffer, st.indices, s.var, uses) \
                or not _vectorisable(st.value, s.var, dt, uses):
            return None
    return n, stores




def stream_form(s: For) -> Store | None:
    """The store of ``s`` when ``s`` (any trip count, step 1) is one plain float store at
    consecutive elements of consecutive iterations of a value :func:`vector_form`'s rules
    vectorise and that reads nothing of the buffer it writes (so its iterations are
    independent) -- a loop a backend may run in whole vectors (with a scalar head and tail),
    such as the non-temporal stores of :mod:`tecomp.codegen.llvm.stream` -- else None."""
    st = s.body
    if s.step != 1 or not isinstance(st, Store) or st.reduce is not None \
            or st.buffer.dtype not in _FLOAT:
        return None
    uses = Uses(s.var)
    if not contiguous(st.buffer, st.indices, s.var, uses) \
            or not _vectorisable(st.value, s.var, st.buffer.dtype, uses) \
            or reads_buffer(st.value, st.buffer):
        return None
    return st


def reads_buffer(e: E.Expr, buf: Buffer, seen: set[int] | None = None) -> bool:
    """Whether ``e`` loads from ``buf`` (each shared node looked at once)."""
    seen = set() if seen is None else seen
    if id(e) in seen:
        return False
    seen.add(id(e))
    if isinstance(e, BufferLoad) and e.buffer == buf:
        return True
    return any(reads_buffer(c, buf, seen) for c in expr_children(e))
