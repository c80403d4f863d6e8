"""A tiny loop-IR interpreter for tests: runs a LoweredFunc on NumPy arrays with plain loops.

It checks what a backend may not: every load and store is in bounds (negative indices
included), ``select`` and ``&``/``|`` evaluate lazily, buffers start filled with garbage
(NaN / a sentinel) so a missing initialisation shows, no loop shadows an enclosing loop
variable, and locals are only touched inside their ``Allocate``.  Expressions are compiled
to Python closures once, so small programs run fast enough.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy.special import erf

from tecomp import dtypes
from tecomp import expr as E
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

Env = dict


class InterpError(AssertionError):
    pass


def _garbage(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    nd = dtypes.to_numpy(dtype)
    if dtypes.is_float(dtype):
        return np.full(shape, np.nan, dtype=nd)
    if dtypes.is_bool(dtype):
        return np.ones(shape, dtype=nd)
    return np.full(shape, -7777777, dtype=nd)


def _cast(v: Any, dtype: str) -> Any:
    nd = dtypes.to_numpy(dtype)
    if dtypes.is_bool(dtype):
        return bool(v)
    if dtypes.is_int(dtype):
        if isinstance(v, (float, np.floating)):
            v = 0 if not math.isfinite(v) else math.trunc(v)
        return nd.type(int(v))
    return nd.type(v)


_MATH: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "sin": np.sin, "cos": np.cos,
    "abs": np.abs, "erf": erf, "floor": np.floor, "ceil": np.ceil, "pow": np.power,
}


class Interpreter:
    def __init__(self, parts_of_one: bool = False) -> None:
        self.bufs: dict[str, np.ndarray] = {}
        #: a parallel loop's ``slot`` (loopir): ``lo`` for all iterations (one thread runs the
        #: loop), or each iteration's own value (each runs as a part of its own)
        self.parts_of_one = parts_of_one
        self._code: dict[E.Expr, Callable[[Env], Any]] = {}

    # ---------------------------------------------------------------- expressions
    def compile(self, e: E.Expr) -> Callable[[Env], Any]:
        f = self._code.get(e)
        if f is None:
            f = self._compile(e)
            self._code[e] = f
        return f

    def _compile(self, e: E.Expr) -> Callable[[Env], Any]:
        c = self.compile
        dt = getattr(e, "dtype", None)
        if isinstance(e, E.Const):
            v = _cast(e.value, e.dtype)
            return lambda env: v
        if isinstance(e, E.Var):
            name = e.name

            def var(env: Env) -> Any:
                if name not in env:
                    raise InterpError(f"unbound variable {name}")
                return env[name]
            return var
        if isinstance(e, BufferLoad):
            idx = [c(i) for i in e.indices]
            buf = e.buffer

            def load(env: Env) -> Any:
                arr = self.array(buf)
                ix = tuple(int(f(env)) for f in idx)
                self.check(buf, arr, ix, "load")
                return arr[ix]
            return load
        if isinstance(e, (E.Add, E.Sub, E.Mul, E.Div, E.Min, E.Max)):
            a, b = c(e.a), c(e.b)
            op = {E.Add: lambda x, y: x + y, E.Sub: lambda x, y: x - y,
                  E.Mul: lambda x, y: x * y, E.Div: lambda x, y: x / y,
                  E.Min: lambda x, y: np.minimum(x, y),  # NaN propagates, as in NumPy
                  E.Max: lambda x, y: np.maximum(x, y)}[type(e)]
            return lambda env: _cast(op(a(env), b(env)), dt)
        if isinstance(e, (E.FloorDiv, E.Mod)):
            a, b = c(e.a), c(e.b)
            if dtypes.is_int(dt):
                if isinstance(e, E.FloorDiv):
                    return lambda env: _cast(int(a(env)) // (int(b(env)) or 1), dt)
                return lambda env: _cast(int(a(env)) % (int(b(env)) or 1), dt)
            f = np.floor_divide if isinstance(e, E.FloorDiv) else np.mod
            return lambda env: _cast(f(a(env), b(env)), dt)
        if isinstance(e, E.Neg):
            a = c(e.a)
            return lambda env: _cast(-a(env), dt)
        if isinstance(e, E.CmpOp):
            a, b = c(e.a), c(e.b)
            op = {E.LT: lambda x, y: x < y, E.LE: lambda x, y: x <= y,
                  E.GT: lambda x, y: x > y, E.GE: lambda x, y: x >= y,
                  E.EQ: lambda x, y: x == y, E.NE: lambda x, y: x != y}[type(e)]
            return lambda env: bool(op(a(env), b(env)))
        if isinstance(e, E.And):
            a, b = c(e.a), c(e.b)
            return lambda env: bool(a(env)) and bool(b(env))
        if isinstance(e, E.Or):
            a, b = c(e.a), c(e.b)
            return lambda env: bool(a(env)) or bool(b(env))
        if isinstance(e, E.Not):
            a = c(e.a)
            return lambda env: not a(env)
        if isinstance(e, E.Select):
            cond, t, f = c(e.cond), c(e.t), c(e.f)
            return lambda env: _cast(t(env) if cond(env) else f(env), dt)
        if isinstance(e, E.Cast):
            v = c(e.value)
            return lambda env: _cast(v(env), dt)
        if isinstance(e, E.Call):
            args = [c(a) for a in e.args]
            fn = _MATH[e.name]
            return lambda env: _cast(fn(*[a(env) for a in args]), dt)
        raise InterpError(f"the loop IR holds a {type(e).__name__}: {e}")

    def array(self, buf: Buffer) -> np.ndarray:
        if buf.name not in self.bufs:
            raise InterpError(f"buffer {buf.name} used outside its allocation")
        return self.bufs[buf.name]

    @staticmethod
    def check(buf: Buffer, arr: np.ndarray, ix: tuple[int, ...], what: str) -> None:
        if len(ix) != arr.ndim:
            raise InterpError(f"{what} of {buf.name} with {len(ix)} indices")
        for d, (i, n) in enumerate(zip(ix, arr.shape)):
            if not 0 <= i < n:
                raise InterpError(f"{what} of {buf.name} out of bounds: axis {d}, index {i}, "
                                  f"extent {n}")

    # ---------------------------------------------------------------- statements
    def run(self, s: Stmt, env: Env) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.run(x, env)
        elif isinstance(s, For):
            name = s.var.name
            if name in env:
                raise InterpError(f"loop variable {name} shadows an enclosing binding")
            lo, hi = int(self.compile(s.lo)(env)), int(self.compile(s.hi)(env))
            assert s.step >= 1
            for v in range(lo, hi, s.step):
                env[name] = v
                if s.slot is not None:  # one part for the whole loop, or one an iteration
                    env[s.slot.name] = v if self.parts_of_one else lo
                self.run(s.body, env)
            env.pop(name, None)
            if s.slot is not None:
                env.pop(s.slot.name, None)
        elif isinstance(s, Store):
            arr = self.array(s.buffer)
            ix = tuple(int(self.compile(i)(env)) for i in s.indices)
            self.check(s.buffer, arr, ix, "store")
            v = self.compile(s.value)(env)
            if s.reduce is not None:
                old = arr[ix]
                v = {"sum": lambda: old + v, "prod": lambda: old * v,
                     "max": lambda: np.maximum(old, v),
                     "min": lambda: np.minimum(old, v)}[s.reduce]()
            arr[ix] = v
        elif isinstance(s, IfThenElse):
            if self.compile(s.cond)(env):
                self.run(s.then, env)
            elif s.else_ is not None:
                self.run(s.else_, env)
        elif isinstance(s, Allocate):
            b = s.buffer
            if b.name in self.bufs:
                raise InterpError(f"buffer {b.name} allocated twice")
            shape = tuple(int(self.compile(d)(env)) for d in b.shape)
            self.bufs[b.name] = _garbage(shape, b.dtype)
            self.run(s.body, env)
            del self.bufs[b.name]
        elif isinstance(s, LetStmt):
            env[s.var.name] = self.compile(s.value)(env)
            self.run(s.body, env)
            del env[s.var.name]
        else:
            raise InterpError(f"unknown statement {type(s).__name__}")


def run(func: LoweredFunc, arrays: Sequence[np.ndarray],
        scalars: Mapping[Any, int] | None = None,
        constants: Mapping[Buffer, np.ndarray] | None = None,
        parts_of_one: bool = False) -> list[np.ndarray]:
    """Execute ``func``: ``arrays`` for its input buffers (constants from ``constants``);
    ``parts_of_one``: each iteration of a parallel loop with a slot as a part of its own."""
    it = Interpreter(parts_of_one)
    env: Env = {}
    for k, v in (scalars or {}).items():
        env[k.name if isinstance(k, E.Var) else k] = int(v)
    given = list(arrays)
    constants = dict(constants or {})
    for b in func.inputs[len(given):]:
        given.append(constants[b])
    assert len(given) == len(func.inputs), "wrong number of input arrays"
    for b, a in zip(func.inputs, given):
        a = np.array(a, dtype=dtypes.to_numpy(b.dtype))
        for d, s in enumerate(b.shape):
            if isinstance(s, E.Var) and s.name not in env:
                env[s.name] = int(a.shape[d])
        it.bufs[b.name] = a
    for p in func.params:
        assert p.name in env, f"parameter {p.name} unbound"
    for b, a in zip(func.inputs, given):
        shape = tuple(int(it.compile(s)(env)) for s in b.shape)
        assert a.shape == shape, f"{b.name}: shape {a.shape} != {shape}"
    originals = {b.name: it.bufs[b.name].copy() for b in func.inputs}
    outs = []
    for b in func.outputs:
        shape = tuple(int(it.compile(s)(env)) for s in b.shape)
        it.bufs[b.name] = _garbage(shape, b.dtype)
        outs.append(it.bufs[b.name])
    with np.errstate(all="ignore"):
        it.run(func.body, env)
    for b in func.inputs:
        np.testing.assert_array_equal(it.bufs[b.name], originals[b.name],
                                      err_msg=f"input {b.name} was modified")
    return outs


def random_inputs(ins, rng):
    """Random arrays for the placeholders ``ins`` (small integers for integer tensors)."""
    out = []
    for t in ins:
        shape = tuple(int(s.value) for s in t.shape)
        if t.dtype.startswith("int"):
            out.append(rng.integers(-5, 6, size=shape).astype(np.int64))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out
