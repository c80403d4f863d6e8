"""Static cost of a lowered program: flops, iterations and bytes of intermediates.

The rules (DESIGN.md, "Optimization and inspection"):

* Every operation in a loop body counts once per iteration of its enclosing loops, whether or
  not a guard (``IfThenElse``, ``select``) would skip it: only loop bounds lower the cost.
* ``flops``: float ``+ - * /`` (unary minus included), ``//`` and ``%`` on floats, ``min``,
  ``max`` and each math call count 1; a float ``Store(reduce=...)`` counts its combine (1).
  Comparisons, selects, casts, loads and integer arithmetic count 0.  Within one statement
  (or one condition, bound or ``let`` value) a subexpression that occurs several times
  counts once, as the backend computes it once.
* ``iterations``: executions of the bodies of innermost loops.  Loops that only store
  constants (initialisation, e.g. zero-filling an accumulator) are not counted; a program
  with no other loop counts 1.
* ``bytes``: the bytes of the ``"temp"`` buffers it allocates (each ``Allocate`` once), not
  inputs, outputs or scalar ``"local"`` accumulators.

Counting is exact.  Trip counts of loops whose bounds depend only on sizes multiply; loops
whose bounds depend on enclosing loop variables (triangular, ``min``/``max``, strided) are
counted by enumerating only the loops they depend on, vectorised with NumPy: the points of
the loops some inner bound needs are materialised in chunks, and the innermost of them is
summed as a vector of trip counts ``max(0, ceil((hi - lo) / step))``.  A triangular
1000 x 1000 nest enumerates 1000 points.

With sizes left unbound, counts are SymPy expressions in symbols named after the size
variables, provided every loop bound depends on sizes only; trip counts are then taken as
``hi - lo`` (or ``ceiling((hi - lo) / step)``), i.e. ranges are assumed non-empty as sizes
are.  A bound that depends on an enclosing loop needs ``sizes=``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from . import dtypes
from . import expr as E
from .errors import TecompError
from .functor import children
from .loopir import Allocate, BufferLoad, For, IfThenElse, LetStmt, LoweredFunc, Seq, Stmt, Store
from .stmt_functor import walk_stmt


class _LazySympy:
    """SymPy is only needed for symbolic (size-free) counts: import it on first use, so that
    ``import tecomp`` (and a kernel loaded from the persistent cache) stays fast."""

    def __getattr__(self, name: str) -> Any:
        import sympy as _sympy

        return getattr(_sympy, name)


sympy = _LazySympy()

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4,
             "int64": 8, "bool": 1}
_FLOAT_OPS = (E.Add, E.Sub, E.Mul, E.Div, E.FloorDiv, E.Mod, E.Min, E.Max, E.Neg)
_CHUNK = 1 << 20  # points materialised at once while counting

Number = Any  # int or a SymPy expression


@dataclass(frozen=True)
class Cost:
    """Static cost: ints when every size is known, else SymPy expressions in the sizes."""

    flops: Number
    iterations: Number
    bytes: Number

    def __str__(self) -> str:
        return f"flops={self.flops}, iterations={self.iterations}, bytes={self.bytes}"


# ------------------------------------------------------------------------------ flops
def _children(e: E.Expr) -> tuple[E.Expr, ...]:
    if isinstance(e, BufferLoad):
        return e.indices
    return children(e)


def op_flops(e: E.Expr) -> int:
    """The flops of the node ``e`` itself (its children not included)."""
    if isinstance(e, E.Call):
        return 1
    if isinstance(e, _FLOAT_OPS) and dtypes.is_float(e.dtype):
        return 1
    return 0


def expr_flops(*exprs: E.Expr | None) -> int:
    """Flops of evaluating ``exprs`` together, each distinct subexpression once."""
    seen: set[E.Expr] = set()
    stack = [e for e in exprs if e is not None]
    total = 0
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        total += op_flops(x)
        stack.extend(_children(x))
    return total


def varying_flops(e: E.Expr, names: frozenset[str]) -> int:
    """Flops of ``e`` in the subexpressions that use a variable named in ``names``: the rest is
    invariant in loops over those variables and is computed once, outside them (each distinct
    subexpression counted once, as in :func:`expr_flops`)."""
    memo: dict[E.Expr, bool] = {}

    def varies(x: E.Expr) -> bool:
        if x not in memo:
            memo[x] = (x.name in names) if isinstance(x, E.Var) else \
                any([varies(c) for c in _children(x)])
        return memo[x]

    seen: set[E.Expr] = set()
    stack = [e]
    total = 0
    while stack:
        x = stack.pop()
        if x in seen or not varies(x):
            continue
        seen.add(x)
        total += op_flops(x)
        stack.extend(_children(x))
    return total


# ------------------------------------------------------------------------------ collection
@dataclass(frozen=True)
class _Loop:
    var: E.Var
    lo: E.Expr
    hi: E.Expr
    step: int


class _Collector:
    """Walk the statements: flops per loop path, counted innermost paths, temp buffers."""

    def __init__(self) -> None:
        self.flops: dict[tuple[_Loop, ...], int] = {}
        self.inner: list[tuple[_Loop, ...]] = []
        self.temps: list[tuple[E.Expr, ...] | tuple[str, tuple[E.Expr, ...]]] = []

    def add(self, path: tuple[_Loop, ...], n: int) -> None:
        if n:
            self.flops[path] = self.flops.get(path, 0) + n

    def visit(self, s: Stmt, path: tuple[_Loop, ...], lets: dict[E.Var, E.Expr]) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.visit(x, path, lets)
        elif isinstance(s, For):
            self.add(path, expr_flops(s.lo) + expr_flops(s.hi))
            lo, hi = _subst(s.lo, lets), _subst(s.hi, lets)
            if s.step < 1:
                raise TecompError(f"cost: the loop over {s.var.name!r} has step {s.step} < 1")
            inner = path + (_Loop(s.var, lo, hi, s.step),)
            self.visit(s.body, inner, lets)
            if not _has_loop(s.body) and not _only_constant_stores(s.body):
                self.inner.append(inner)
        elif isinstance(s, Store):
            n = expr_flops(s.value, *s.indices)
            if s.reduce is not None and dtypes.is_float(s.buffer.dtype):
                n += 1
            self.add(path, n)
        elif isinstance(s, IfThenElse):
            self.add(path, expr_flops(s.cond))
            self.visit(s.then, path, lets)
            if s.else_ is not None:
                self.visit(s.else_, path, lets)
        elif isinstance(s, Allocate):
            if s.buffer.scope == "temp":
                self.temps.append((s.buffer.dtype, s.buffer.shape))
            self.visit(s.body, path, lets)
        elif isinstance(s, LetStmt):
            self.add(path, expr_flops(s.value))
            inner_lets = dict(lets)
            inner_lets[s.var] = _subst(s.value, lets)
            self.visit(s.body, path, inner_lets)
        else:
            raise TecompError(f"cost: unknown statement {type(s).__name__}")


def _subst(e: E.Expr, lets: dict[E.Var, E.Expr]) -> E.Expr:
    if not lets:
        return e
    from .functor import substitute

    return substitute(e, lets)


def _has_loop(s: Stmt) -> bool:
    return any(isinstance(x, For) for x in walk_stmt(s))


def _only_constant_stores(s: Stmt) -> bool:
    if isinstance(s, Store):
        return s.reduce is None and isinstance(s.value, (E.Const, E.Zero))
    if isinstance(s, Seq):
        return all(_only_constant_stores(x) for x in s.stmts)
    return False


# ------------------------------------------------------------------------------ sizes
def _free(e: E.Expr) -> set[E.Var]:
    out: set[E.Var] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.Var):
            out.add(x)
        elif isinstance(x, BufferLoad):
            raise TecompError(
                f"cost: a loop bound reads the buffer {x.buffer.name!r} ({x}); bounds that "
                "depend on data cannot be counted statically")
        else:
            stack.extend(_children(x))
    return out


def _normalise_sizes(sizes: Mapping[Any, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in (sizes or {}).items():
        name = k.name if isinstance(k, E.Var) else k
        if not isinstance(name, str):
            raise TecompError(f"cost: sizes key {k!r} is neither a tc.var nor a name")
        try:
            out[name] = int(v)
        except (TypeError, ValueError):
            raise TecompError(f"cost: the size {name}={v!r} is not an integer") from None
    return out


_NP_BIN = {E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.Min: np.minimum,
           E.Max: np.maximum, E.LT: np.less, E.LE: np.less_equal, E.GT: np.greater,
           E.GE: np.greater_equal, E.EQ: np.equal, E.NE: np.not_equal,
           E.And: np.logical_and, E.Or: np.logical_or}


def eval_index(e: E.Expr, env: dict[E.Var, Any], sizes: dict[str, int]) -> Any:
    """An integer index or bound expression over arrays of loop-variable values (or scalars);
    raises :class:`~tecomp.errors.TecompError` on a form it cannot evaluate statically (a
    load, a float)."""
    if isinstance(e, E.Const):
        return e.value
    if isinstance(e, E.Var):
        if e in env:
            return env[e]
        if e.name in sizes:
            return sizes[e.name]
        raise TecompError(f"cost: the size {e.name!r} is unbound; pass sizes={{{e.name}: ...}}")
    if type(e) in _NP_BIN:
        return _NP_BIN[type(e)](eval_index(e.a, env, sizes), eval_index(e.b, env, sizes))
    if isinstance(e, (E.FloorDiv, E.Mod)):
        a, b = eval_index(e.a, env, sizes), eval_index(e.b, env, sizes)
        b = np.where(np.equal(b, 0), 1, b)
        return np.floor_divide(a, b) if isinstance(e, E.FloorDiv) else np.mod(a, b)
    if isinstance(e, E.Neg):
        return np.negative(eval_index(e.a, env, sizes))
    if isinstance(e, E.Not):
        return np.logical_not(eval_index(e.a, env, sizes))
    if isinstance(e, E.Select):
        c = eval_index(e.cond, env, sizes)
        return np.where(c, eval_index(e.t, env, sizes), eval_index(e.f, env, sizes))
    if isinstance(e, E.Cast) and not dtypes.is_float(e.value.dtype):
        v = eval_index(e.value, env, sizes)
        return np.asarray(v).astype(np.int64) if dtypes.is_int(e.dtype) else v
    raise TecompError(f"cost: cannot evaluate the loop bound {e} statically")


_SYM_BIN = {E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b,
            E.Mul: lambda a, b: a * b, E.FloorDiv: lambda a, b: sympy.floor(a / b),
            E.Mod: lambda a, b: sympy.Mod(a, b), E.Min: lambda a, b: sympy.Min(a, b),
            E.Max: lambda a, b: sympy.Max(a, b)}


def _sym(e: E.Expr, sizes: dict[str, int]) -> Any:
    if isinstance(e, E.Const) and dtypes.is_int(e.dtype):
        return sympy.Integer(e.value)
    if isinstance(e, E.Var):
        return sympy.Integer(sizes[e.name]) if e.name in sizes else sympy.Symbol(e.name)
    if type(e) in _SYM_BIN:
        return _SYM_BIN[type(e)](_sym(e.a, sizes), _sym(e.b, sizes))
    if isinstance(e, E.Neg):
        return -_sym(e.a, sizes)
    if isinstance(e, E.Cast) and dtypes.is_int(e.dtype) and dtypes.is_int(e.value.dtype):
        return _sym(e.value, sizes)
    raise TecompError(f"cost: the loop bound {e} is not a simple expression of the sizes; "
                      "pass sizes= to count it exactly")


# ------------------------------------------------------------------------------ counting
def _trips(lo: Any, hi: Any, step: int) -> Any:
    return np.maximum(0, -((np.asarray(lo) - np.asarray(hi)) // step))


def _count_component(loops: list[_Loop], sizes: dict[str, int]) -> int:
    """Exact number of points of a nest whose bounds refer to its own outer loops."""
    needed = [any(lp.var in _free(x.lo) | _free(x.hi) for x in loops[m + 1:])
              for m, lp in enumerate(loops)]

    def rec(m: int, env: dict[E.Var, np.ndarray], w: np.ndarray) -> int:
        if m == len(loops):
            return int(w.sum())
        lp = loops[m]
        n = len(w)
        lo = np.broadcast_to(np.asarray(eval_index(lp.lo, env, sizes), dtype=np.int64), (n,))
        hi = np.broadcast_to(np.asarray(eval_index(lp.hi, env, sizes), dtype=np.int64), (n,))
        trip = _trips(lo, hi, lp.step)
        if not needed[m]:
            return rec(m + 1, env, w * trip)
        keep = trip > 0
        if not keep.all():
            env = {k: v[keep] for k, v in env.items()}
            w, lo, trip = w[keep], lo[keep], trip[keep]
            n = len(w)
        total = int(trip.sum())
        if total == 0:
            return 0
        if total > _CHUNK and n > 1:
            half = n // 2
            return sum(rec(m, {k: v[s] for k, v in env.items()}, w[s])
                       for s in (slice(0, half), slice(half, n)))
        if total > _CHUNK:  # one point with a huge range: walk the range in chunks
            out = 0
            for start in range(0, total, _CHUNK):
                idx = np.arange(start, min(total, start + _CHUNK), dtype=np.int64)
                sub = {k: np.repeat(v, len(idx)) for k, v in env.items()}
                sub[lp.var] = lo[0] + lp.step * idx
                out += rec(m + 1, sub, np.repeat(w, len(idx)))
            return out
        rep = np.repeat(np.arange(n), trip)
        first = np.repeat(np.cumsum(trip) - trip, trip)
        offset = np.arange(total, dtype=np.int64) - first
        sub = {k: v[rep] for k, v in env.items()}
        sub[lp.var] = lo[rep] + lp.step * offset
        return rec(m + 1, sub, w[rep])

    return rec(0, {}, np.ones(1, dtype=np.int64))


def count_points(path: Iterable[_Loop], sizes: dict[str, int]) -> Number:
    """Executions of the innermost body of the loop nest ``path`` (outermost first)."""
    loops = list(path)
    if not loops:
        return 1
    # dependences of each loop's bounds on enclosing loops of the path
    deps: list[set[int]] = []
    for m, lp in enumerate(loops):
        d: set[int] = set()
        for v in _free(lp.lo) | _free(lp.hi):
            outer = [j for j in range(m) if loops[j].var == v]
            if outer:
                d.add(outer[-1])
        deps.append(d)
    params = {v.name for lp in loops for v in _free(lp.lo) | _free(lp.hi)} - {
        lp.var.name for lp in loops}
    if params <= sizes.keys():
        parent = list(range(len(loops)))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for m, d in enumerate(deps):
            for j in d:
                parent[find(m)] = find(j)
        groups: dict[int, list[_Loop]] = {}
        for m in range(len(loops)):
            groups.setdefault(find(m), []).append(loops[m])
        total = 1
        for comp in groups.values():
            total *= _count_component(comp, sizes)
            if total == 0:
                return 0
        return total
    for m, d in enumerate(deps):
        if d:
            outer = loops[min(d)].var.name
            missing = sorted(params - sizes.keys())
            raise TecompError(
                f"cost: the bounds of the loop over {loops[m].var.name!r} depend on the "
                f"enclosing loop {outer!r}; pass sizes= for {', '.join(missing)} to count "
                "exactly")
    total = sympy.Integer(1)
    for lp in loops:
        span = _sym(lp.hi, sizes) - _sym(lp.lo, sizes)
        total *= span if lp.step == 1 else sympy.ceiling(span / lp.step)
    return _simplify(total)


def _simplify(x: Any) -> Number:
    x = sympy.expand(x) if isinstance(x, sympy.Basic) else x
    if isinstance(x, sympy.Basic) and x.is_Integer:
        return int(x)
    return x


def _bytes(temps: list[Any], sizes: dict[str, int]) -> Number:
    total: Any = 0
    for dtype, shape in temps:
        n: Any = 1
        for s in shape:
            n = n * _sym(s, sizes)
        total = total + n * _ITEMSIZE.get(dtype, 8)
    return _simplify(sympy.sympify(total))


def count_cost(func: LoweredFunc, sizes: Mapping[Any, Any] | None = None) -> Cost:
    """The static :class:`Cost` of ``func``; ``sizes`` binds size variables (or their names)."""
    sz = _normalise_sizes(sizes)
    col = _Collector()
    col.visit(func.body, (), {})
    memo: dict[tuple[_Loop, ...], Number] = {}

    def points(path: tuple[_Loop, ...]) -> Number:
        if path not in memo:
            memo[path] = count_points(path, sz)
        return memo[path]

    flops: Any = 0
    for path in sorted(col.flops, key=len):
        flops = flops + col.flops[path] * points(path)
    iterations: Any = 0
    for path in col.inner:
        iterations = iterations + points(path)
    if not col.inner:
        iterations = 1
    return Cost(_simplify(sympy.sympify(flops)), _simplify(sympy.sympify(iterations)),
                _bytes(col.temps, sz))


def count_iterations(func: LoweredFunc, sizes: Mapping[Any, Any]) -> int:
    """``count_cost(func, sizes).iterations`` when ``sizes`` binds every size: an int,
    counted without SymPy (a kernel estimates the work of a call with it)."""
    sz = _normalise_sizes(sizes)
    col = _Collector()
    col.visit(func.body, (), {})
    if not col.inner:
        return 1
    total = sum(count_points(path, sz) for path in col.inner)
    if not isinstance(total, (int, np.integer)):
        raise TecompError("cost: count_iterations needs every size bound")
    return int(total)
