"""The reference evaluator: the oracle every backend and pass is tested against.

It shares no code with lowering or codegen.  A compute tensor is evaluated with NumPy over a
grid of its output axes (extra trailing dimensions for reduction axes), broadcasting, so a
whole stage is a handful of array operations.  Semantics are exact:

* ``if_then_else`` evaluates each arm only where it is selected: every sub-expression carries a
  mask of the points where its value matters, and a tensor read out of bounds at a point that
  matters raises :class:`~tecomp.errors.EvaluationError` (points that do not matter are clipped).
* ``//`` and ``%`` follow Python (floor) semantics (division by zero: :mod:`tecomp.divisors`);
  casts from float to int truncate toward zero.
* Reduction axes may have bounds that depend on outer variables (as zero elimination produces);
  empty reductions give 0 (sum), 1 (prod), -inf / the integer minimum (max), +inf / maximum
  (min).

Large stages are evaluated in chunks along their first axis to bound memory.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import dtypes
from . import expr as E
from .divisors import size_divisors, zero_divisor
from .errors import EvaluationError
from .functor import topo_order
from .intrinsics import lookup
from .scan_op import ScanOp
from .tensor import ComputeOp, ScatterOp, Tensor

_CHUNK_ELEMS = 1 << 22

# an integer // or % whose divisor is computed from indices or data and is 0 behaves as if the
# divisor were 1 (x // 0 == x, x % 0 == 0), as in the backends; a divisor of sizes only that
# is 0 raises before evaluation (tecomp.divisors)
_NP_BINARY = {
    E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.Div: np.true_divide,
    E.FloorDiv: np.floor_divide, E.Mod: np.mod, E.Min: np.minimum, E.Max: np.maximum,
    E.LT: np.less, E.LE: np.less_equal, E.GT: np.greater, E.GE: np.greater_equal,
    E.EQ: np.equal, E.NE: np.not_equal,
}


def _np(dtype: str) -> np.dtype:
    return dtypes.to_numpy(dtype)


def _identity(combiner: str, dtype: str) -> Any:
    nd = _np(dtype)
    if combiner == "sum":
        return nd.type(0)
    if combiner == "prod":
        return nd.type(1)
    if dtypes.is_float(dtype):
        return nd.type(-np.inf if combiner == "max" else np.inf)
    info = np.iinfo(nd)
    return nd.type(info.min if combiner == "max" else info.max)


class _Scope:
    """Variables in scope: each maps to an array with ``depth`` dimensions (or a scalar)."""

    def __init__(self, env: dict[E.Var, Any], depth: int) -> None:
        self.env = env
        self.depth = depth


class _Evaluator:
    def __init__(self, values: dict[int, np.ndarray], names: dict[int, str]) -> None:
        self.values = values
        self.names = names
        # shared sub-expressions are evaluated once per (scope, mask): gradients are DAGs
        # whose tree expansion is exponential.  The key objects are kept alive in the value
        # so that their ids cannot be reused while the entry exists.
        self.memo: dict[tuple[int, int, int], tuple[Any, ...]] = {}

    # every method returns an array broadcastable to the scope's grid (ndim <= depth)
    def ev(self, e: E.Expr, sc: _Scope, mask: Any) -> Any:
        key = (id(e), id(sc), id(mask))
        hit = self.memo.get(key)
        if hit is not None:
            return hit[0]
        m = getattr(self, "ev_" + type(e).__name__, None)
        if m is None:
            raise EvaluationError(f"the evaluator has no rule for {type(e).__name__}: {e}")
        out = m(e, sc, mask)
        self.memo[key] = (out, e, sc, mask)
        return out

    def ev_Const(self, e: E.Const, sc: _Scope, mask: Any) -> Any:
        return _np(e.dtype).type(e.value)

    def ev_Zero(self, e: E.Zero, sc: _Scope, mask: Any) -> Any:
        return _np(e.dtype).type(0)

    def ev_Var(self, e: E.Var, sc: _Scope, mask: Any) -> Any:
        if e not in sc.env:
            raise EvaluationError(f"unbound variable {e.name!r}: bind it in the bindings")
        x = sc.env[e]
        if isinstance(x, np.ndarray) and x.ndim < sc.depth:
            x = x.reshape(x.shape + (1,) * (sc.depth - x.ndim))
        return x

    def _bin(self, e: E.BinaryOp, sc: _Scope, mask: Any) -> tuple[Any, Any]:
        return self.ev(e.a, sc, mask), self.ev(e.b, sc, mask)

    def _arith(self, e: E.BinaryOp, sc: _Scope, mask: Any) -> Any:
        a, b = self._bin(e, sc, mask)
        if isinstance(e, (E.FloorDiv, E.Mod)) and dtypes.is_int(e.dtype):
            b = np.where(b == 0, 1, b) if isinstance(b, np.ndarray) else (b or 1)
        return _as(_NP_BINARY[type(e)](a, b), e.dtype)

    ev_Add = ev_Sub = ev_Mul = ev_Div = ev_FloorDiv = ev_Mod = ev_Min = ev_Max = _arith

    def _compare(self, e: E.CmpOp, sc: _Scope, mask: Any) -> Any:
        return _NP_BINARY[type(e)](*self._bin(e, sc, mask))

    ev_LT = ev_LE = ev_GT = ev_GE = ev_EQ = ev_NE = _compare

    def ev_Neg(self, e, sc, mask):
        return _as(np.negative(self.ev(e.a, sc, mask)), e.dtype)

    def ev_And(self, e, sc, mask):
        a = self.ev(e.a, sc, mask)
        return np.logical_and(a, self.ev(e.b, sc, _and(mask, a)))

    def ev_Or(self, e, sc, mask):
        a = self.ev(e.a, sc, mask)
        return np.logical_or(a, self.ev(e.b, sc, _and(mask, np.logical_not(a))))

    def ev_Not(self, e, sc, mask):
        return np.logical_not(self.ev(e.a, sc, mask))

    def ev_Select(self, e, sc, mask):
        c = self.ev(e.cond, sc, mask)
        t = self.ev(e.t, sc, _and(mask, c))
        f = self.ev(e.f, sc, _and(mask, np.logical_not(c)))
        return _as(np.where(c, t, f), e.dtype)

    def ev_Cast(self, e, sc, mask):
        v = self.ev(e.value, sc, mask)
        if dtypes.is_int(e.dtype) and dtypes.is_float(e.value.dtype):
            v = np.where(np.isfinite(v), v, 0)
            v = np.trunc(v)
        if dtypes.is_bool(e.dtype):
            return np.not_equal(v, 0)
        return _as(np.asarray(v).astype(_np(e.dtype)), e.dtype)

    def ev_Call(self, e, sc, mask):
        op = lookup(e.name)
        if op is None:
            raise EvaluationError(f"unknown math function {e.name!r} in {e}")
        return _as(op.numpy(*(self.ev(a, sc, mask) for a in e.args)), e.dtype)

    def ev_Delta(self, e, sc, mask):
        a, b = self.ev(e.a, sc, mask), self.ev(e.b, sc, mask)
        return np.equal(a, b).astype(_np(e.dtype))

    def ev_TensorRead(self, e: E.TensorRead, sc: _Scope, mask: Any) -> Any:
        t = e.tensor
        if id(t) not in self.values:
            raise EvaluationError(f"tensor {t.name!r} is not bound (pass it in the bindings)")
        arr = self.values[id(t)]
        if arr.ndim == 0:
            return arr[()]
        idx = [np.asarray(self.ev(i, sc, mask)) for i in e.indices]
        shaped = np.broadcast_arrays(*idx) if len(idx) > 1 else idx
        fixed = []
        for axis, (ix, n) in enumerate(zip(shaped, arr.shape)):
            bad = (ix < 0) | (ix >= n)
            if mask is not None:
                bad = bad & mask
            if np.any(bad):
                where = np.argwhere(np.broadcast_to(bad, np.broadcast(bad, ix).shape))[0]
                raise EvaluationError(
                    f"read of tensor {self.names.get(id(t), t.name)!r} out of bounds on axis "
                    f"{axis}: index {int(np.broadcast_to(ix, bad.shape)[tuple(where)])} not "
                    f"in [0, {n}) (in {e})")
            fixed.append(np.clip(ix, 0, max(n - 1, 0)))
        return arr[tuple(fixed)]

    def ev_Reduce(self, e: E.Reduce, sc: _Scope, mask: Any) -> Any:
        env = dict(sc.env)
        depth = sc.depth
        valid = mask
        grid_shapes: list[tuple[int, ...]] = []
        extents: list[int] = []  # the grid spans every axis even where the body ignores it
        for ax in e.axes:
            inner = _Scope(env, depth)
            lo = np.asarray(self.ev(ax.lo, inner, valid))
            ext = np.asarray(self.ev(ax.extent, inner, valid))
            hi = lo + ext
            if valid is not None and np.ndim(lo) > 0:
                vlo = np.where(np.broadcast_to(valid, np.broadcast(valid, lo).shape), lo, hi.max()
                               if hi.size else 0)
                lmin = int(vlo.min()) if vlo.size else 0
            else:
                lmin = int(lo.min()) if lo.size else 0
            hmax = int(hi.max()) if hi.size else 0
            n = builtins_max(hmax - lmin, 0)
            extents.append(n)
            rng = np.arange(lmin, lmin + n, dtype=np.int64).reshape((1,) * depth + (n,))
            depth += 1
            env[ax.var] = rng
            grid_shapes.append(rng.shape)
            grow = (1,)
            if lo.ndim or ext.ndim:
                lo_x = lo.reshape(lo.shape + (1,) * (depth - lo.ndim)) if lo.ndim else lo
                hi_x = hi.reshape(hi.shape + (1,) * (depth - hi.ndim)) if hi.ndim else hi
                inr = (rng >= lo_x) & (rng < hi_x)
            else:
                inr = None
            valid = _expand(valid, depth, grow)
            valid = _and(valid, inr)
        inner = _Scope(env, depth)
        if e.where is not None:
            w = self.ev(e.where, inner, valid)
            valid = _and(valid, w)
        body = self.ev(e.body, inner, valid)
        shape = np.broadcast_shapes(*(np.shape(x) for x in (body, valid) if x is not None),
                                    (1,) * sc.depth + tuple(extents))
        full = np.broadcast_to(body, shape)
        ident = _identity(e.combiner, e.dtype)
        if valid is not None:
            full = np.where(valid, full, ident)
        axes = tuple(range(sc.depth, depth))
        if any(shape[a] == 0 for a in axes):
            out_shape = tuple(shape[: sc.depth])
            return np.full(out_shape, ident, dtype=_np(e.dtype))
        op = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[e.combiner]
        return _as(op(full, axis=axes), e.dtype)


builtins_max = max


def _as(x: Any, dtype: str) -> Any:
    nd = _np(dtype)
    if isinstance(x, np.ndarray):
        return x if x.dtype == nd else x.astype(nd)
    return nd.type(x)


def _and(mask: Any, cond: Any) -> Any:
    if cond is None:
        return mask
    if mask is None:
        return np.asarray(cond, dtype=bool)
    return np.logical_and(mask, cond)


def _expand(mask: Any, depth: int, _grow: tuple[int, ...]) -> Any:
    if mask is None or not isinstance(mask, np.ndarray):
        return mask
    return mask.reshape(mask.shape + (1,) * (depth - mask.ndim))


def _eval_shape(t: Tensor, sizes: dict[E.Var, int], ev: _Evaluator) -> tuple[int, ...]:
    out = []
    for d, s in enumerate(t.shape):
        v = ev.ev(s, _Scope(dict(sizes), 0), None)
        v = int(v)
        if v < 0:
            raise EvaluationError(f"tensor {t.name!r}, axis {d}: extent {s} evaluates to {v}")
        out.append(v)
    return tuple(out)


def evaluate(outputs: Tensor | Sequence[Tensor],
             bindings: Mapping[Any, Any]) -> list[np.ndarray]:
    """Evaluate ``outputs`` given ``{placeholder: array, var: int}``; returns a list of arrays.

    The reference evaluator: plain NumPy, independent of every backend.  Symbolic sizes that
    appear alone as the extent of a bound placeholder are bound from its array's shape when
    not given, whether or not the outputs still read that placeholder (as a kernel binds
    them from its inputs); sizes bound twice must agree.

    Example::

        >>> n = tc.var("n")
        >>> A = tc.placeholder((n, 3), name="A")
        >>> S = tc.compute((n,), lambda i: A[i, 0] + A[i, 2], name="S")
        >>> tc.evaluate([S], {A: np.ones((5, 3), np.float32)})   # n = 5 from the shape
        [array([2., 2., 2., 2., 2.], dtype=float32)]
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    order = topo_order(outs)
    values: dict[int, np.ndarray] = {}
    sizes: dict[E.Var, int] = {}
    arrays: dict[int, Any] = {}
    for k, v in bindings.items():
        if isinstance(k, E.Var):
            sizes[k] = int(v)
        elif isinstance(k, Tensor):
            arrays[id(k)] = v
        else:
            raise EvaluationError(f"binding key {k!r} is neither a placeholder nor a tc.var")
    _bind_sizes(bindings, sizes)
    bad = zero_divisor(size_divisors(outs, sizes), sizes)
    if bad is not None:
        raise EvaluationError(bad)
    ev = _Evaluator(values, {})
    with np.errstate(all="ignore"):
        for t in order:
            shape = _eval_shape(t, sizes, ev)
            if t.is_constant:
                values[id(t)] = t.op.data
            elif t.is_placeholder:
                if id(t) not in arrays:
                    from .scan import check_not_state

                    check_not_state(t, None)
                    raise EvaluationError(f"placeholder {t.name!r} is not bound")
                a = np.asarray(arrays[id(t)])
                if a.shape != shape:
                    for d, (x, y) in enumerate(zip(a.shape, shape)):
                        if x != y:
                            raise EvaluationError(
                                f"placeholder {t.name!r}, axis {d}: the array has extent {x}, "
                                f"the declaration says {t.shape[d]} = {y}")
                values[id(t)] = np.ascontiguousarray(a, dtype=_np(t.dtype))
            elif isinstance(t.op, ScatterOp):
                values[id(t)] = _eval_scatter(t, shape, sizes, ev)
            elif isinstance(t.op, ScanOp):
                values[id(t)] = _eval_scan(t.op.scan, sizes, ev)[t.op.index]
            else:
                values[id(t)] = _eval_compute(t, shape, sizes, ev)
    return [values[id(t)] for t in outs]


def _bind_sizes(bindings: Mapping[Any, Any], sizes: dict[E.Var, int]) -> None:
    """Bind the sizes that bound placeholders' shapes determine; check they agree."""
    source = {v: f"the binding {v.name} = {n}" for v, n in sizes.items()}
    for t, value in bindings.items():
        if not (isinstance(t, Tensor) and t.is_placeholder):
            continue
        a = np.asarray(value)
        if a.ndim != t.ndim:
            raise EvaluationError(
                f"placeholder {t.name!r} has {t.ndim} dimension(s), the array has {a.ndim}")
        for d, s in enumerate(t.shape):
            if not isinstance(s, E.Var):
                continue
            n = int(a.shape[d])
            if s in sizes and sizes[s] != n:
                raise EvaluationError(
                    f"placeholder {t.name!r}, axis {d}: the array has extent {n}, but "
                    f"{s.name} = {sizes[s]} from {source[s]}")
            sizes.setdefault(s, n)
            source.setdefault(s, f"placeholder {t.name!r}, axis {d}")


def _reduce_volume(e: E.Expr) -> int:
    from .functor import walk

    vol = 1
    for x in walk(e):
        if isinstance(x, E.Reduce):
            for a in x.axes:
                vol *= int(a.extent.value) if isinstance(a.extent, E.Const) else 64
    return vol


def _eval_compute(t: Tensor, shape: tuple[int, ...], sizes: dict[E.Var, int],
                  ev: _Evaluator) -> np.ndarray:
    assert isinstance(t.op, ComputeOp)
    axes = t.op.axes
    out = np.empty(shape, dtype=_np(t.dtype))
    if out.size == 0:
        return out
    nd = len(shape)
    if nd == 0:
        v = ev.ev(t.op.body, _Scope(dict(sizes), 0), None)
        ev.memo.clear()
        out[()] = v
        return out
    per_row = int(np.prod(shape[1:])) * builtins_max(_reduce_volume(t.op.body), 1)
    step = builtins_max(1, _CHUNK_ELEMS // builtins_max(per_row, 1))
    for start in range(0, shape[0], step):
        stop = min(shape[0], start + step)
        env: dict[E.Var, Any] = dict(sizes)
        for d, ax in enumerate(axes):
            rng = np.arange(start, stop) if d == 0 else np.arange(shape[d])
            env[ax.var] = rng.astype(np.int64).reshape((1,) * d + (-1,) + (1,) * (nd - d - 1))
        v = ev.ev(t.op.body, _Scope(env, nd), None)
        ev.memo.clear()
        out[start:stop] = np.broadcast_to(v, (stop - start,) + shape[1:])
    return out


def _eval_scatter(t: Tensor, shape: tuple[int, ...], sizes: dict[E.Var, int],
                  ev: _Evaluator) -> np.ndarray:
    """Accumulate ``value`` into ``indices`` over the scatter's domain (duplicates summed)."""
    op = t.op
    assert isinstance(op, ScatterOp)
    if op.init is not None:
        out = np.array(ev.values[id(op.init)], dtype=_np(t.dtype), copy=True)
    else:
        out = np.zeros(shape, dtype=_np(t.dtype))
    # The domain is evaluated as a sum reduction whose body we intercept: reuse ev_Reduce's
    # axis handling by building the grid here.
    env: dict[E.Var, Any] = dict(sizes)
    depth = 0
    valid: Any = None
    for ax in op.axes:
        sc = _Scope(env, depth)
        lo = np.asarray(ev.ev(ax.lo, sc, valid))
        hi = lo + np.asarray(ev.ev(ax.extent, sc, valid))
        lmin = int(lo.min()) if lo.size else 0
        n = builtins_max(int(hi.max()) - lmin, 0) if hi.size else 0
        rng = np.arange(lmin, lmin + n, dtype=np.int64).reshape((1,) * depth + (n,))
        depth += 1
        env[ax.var] = rng
        valid = _expand(valid, depth, (1,))
        if lo.ndim or hi.ndim:
            lo_x = lo.reshape(lo.shape + (1,) * (depth - lo.ndim))
            hi_x = hi.reshape(hi.shape + (1,) * (depth - hi.ndim))
            valid = _and(valid, (rng >= lo_x) & (rng < hi_x))
    sc = _Scope(env, depth)
    if op.where is not None:
        valid = _and(valid, ev.ev(op.where, sc, valid))
    grid = tuple(int(np.shape(env[a.var])[d]) for d, a in enumerate(op.axes))
    mask = np.ones(grid, dtype=bool) if valid is None else np.broadcast_to(valid, grid)
    if not mask.any():
        return out
    val = np.broadcast_to(ev.ev(op.value, sc, mask), grid)[mask]
    idx = []
    for axis, ix in enumerate(op.indices):
        v = np.broadcast_to(np.asarray(ev.ev(ix, sc, mask)), grid)[mask]
        if np.any((v < 0) | (v >= shape[axis])):
            bad = int(v[(v < 0) | (v >= shape[axis])][0])
            raise EvaluationError(
                f"scatter into {t.name!r} out of bounds on axis {axis}: index {bad} not in "
                f"[0, {shape[axis]})")
        idx.append(v)
    np.add.at(out, tuple(idx), val.astype(out.dtype))
    ev.memo.clear()
    return out


def _eval_scan(sc: Any, sizes: dict[E.Var, int], ev: _Evaluator) -> list[np.ndarray]:
    """A scan step by step: each step evaluates row ``t`` of every body stage in step order
    (reads of rows not yet computed see zeros); the states are read through their arrays."""
    key = id(sc)
    if key in ev.values:
        return ev.values[key]  # type: ignore[return-value]
    states = []
    for s, i0 in zip(sc.state, sc.init):
        arr = np.zeros(_eval_shape(s, sizes, ev), dtype=_np(s.dtype))
        init = ev.values[id(i0)]
        if init.shape[0] > arr.shape[0]:
            raise EvaluationError(
                f"scan {sc.name!r}: init {i0.name!r} gives {init.shape[0]} steps but the scan "
                f"has only {arr.shape[0]}")
        if sc.reverse:
            arr[arr.shape[0] - init.shape[0]:] = init
        else:
            arr[:init.shape[0]] = init
        ev.values[id(s)] = arr
        states.append(arr)
    for b in sc.body:
        ev.values[id(b)] = np.zeros(_eval_shape(b, sizes, ev), dtype=_np(b.dtype))
    n = states[0].shape[0]
    steps = range(n - sc.steps - 1, -1, -1) if sc.reverse else range(sc.steps, n)
    slot = {id(u): k for k, u in enumerate(sc.update)}
    for t in steps:
        for b in sc.body:
            out = ev.values[id(b)]
            if isinstance(b.op, ScatterOp):  # a step scatter (an adjoint's): its row t
                from .scan import row_scatter, scatter_time

                m, c = scatter_time(b)
                part = Tensor(b.name, b.shape, b.dtype,
                              row_scatter(b.op, m, c, E.Const(t, "int64")))
                row = _eval_scatter(part, out.shape, sizes, ev)[t]
                out[t] = row if b.op.init is None else ev.values[id(b.op.init)][t] + row
                if id(b) in slot:
                    states[slot[id(b)]][t] = out[t]
                continue
            nd = out.ndim
            env: dict[E.Var, Any] = dict(sizes)
            for d, ax in enumerate(b.op.axes):
                rng = np.arange(t, t + 1) if d == 0 else np.arange(out.shape[d])
                env[ax.var] = rng.astype(np.int64).reshape((1,) * d + (-1,) + (1,) * (nd - d - 1))
            v = ev.ev(b.op.body, _Scope(env, nd), None)
            ev.memo.clear()
            out[t] = np.broadcast_to(v, (1,) + out.shape[1:])[0]
            if id(b) in slot:
                states[slot[id(b)]][t] = out[t]
    for s in sc.state:
        del ev.values[id(s)]
    ev.values[key] = states  # type: ignore[assignment]
    return states
