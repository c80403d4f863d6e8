"""Random tecomp programs as hypothesis strategies (the fuzzer of the reliability suite).

``programs(smooth=False, dtype=None)`` draws a :class:`Program`: placeholders (float32,
float64 and integer, some with symbolic sizes), one to three compute stages, the outputs, and
a recipe for input data.  The generator covers the DSL:

* shapes of constants and ``tc.var`` sizes (bound per program, so a symbolic ``n`` may be 1);
* indices: a data axis, a reversed axis ``e - 1 - i``, ``i % e``, affine-then-floor-divided
  ``(c*i + b) // q``, strided and dilated ``i*s + r*t + o`` (floor-divided into range when it
  would leave it), ``(i * d) // e`` with ``d``, ``e`` extents (a division by a symbolic size),
  constants, and gathers ``T[idx[i]]`` through integer index tensors whose data are drawn in
  range with repeats (:meth:`Program.arrays` can put one out of range); every other index is
  in bounds *for the drawn sizes* by construction;
* reductions ``sum/max/min/prod`` over fresh reduce axes, with ``where`` conditions on
  indices;
* every math call, ``+ - * /``, ``maximum/minimum``, ``if_then_else`` on index conditions and
  (non-smooth programs) on input data, ``cast`` between int and float;
* multi-stage graphs: later stages read earlier ones, an intermediate may also be an output;
* recurrences (``tc.scan``, one stage in four but never the last): a step that reads its state
  at lag 1 through a drawn index or a matrix-vector sum, over a time axis that may be
  symbolic and may have one step only.

Values stay finite: divisions are by ``y*y + 1``, ``log``/``sqrt``/``pow`` get ``x*x + 1``,
``exp`` gets ``tanh(x)``.  Operations that are discontinuous in the data (``floor``, ``ceil``,
``abs``, data conditions, float→int casts) only ever see input values read directly, so the
JIT and the evaluator cannot disagree through rounding; ``smooth=True`` (for finite
differences) leaves them out, as well as ``max/min`` reductions and ``maximum/minimum``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import tecomp as tc
from tecomp.intrinsics import INTRINSICS

FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
UNARY = tuple(INTRINSICS)  # every math op of the table: exp, log, sqrt, tanh, ..., pow
ROUGH = {"abs", "floor", "ceil"}


@dataclass
class Dim:
    """A dimension: its expression (int or tc.var) and its value in this program."""

    expr: Any
    value: int


@dataclass
class Program:
    inputs: list[Any]  # placeholders and scalar tc.var, in kernel argument order
    outputs: list[tc.Tensor]
    sizes: dict[Any, int]  # every tc.var -> value
    index_high: dict[Any, int]  # integer placeholder -> exclusive upper bound of its data
    floats: list[tc.Tensor] = field(default_factory=list)  # differentiable placeholders
    text: str = ""

    def arrays(self, seed: int, out_of_range: bool = False) -> list[Any]:
        """The kernel arguments (NumPy arrays, ints) for ``seed``; gather indices repeat
        (they are drawn with replacement) and, with ``out_of_range``, one entry of each index
        tensor is one past its range or negative."""
        rng = np.random.default_rng(seed)
        out: list[Any] = []
        for x in self.inputs:
            if isinstance(x, tc.Tensor):
                shape = tuple(_value(s, self.sizes) for s in x.shape)
                npdt = np.dtype(tc.dtypes.to_numpy(x.dtype))
                if npdt.kind == "f":
                    out.append(rng.uniform(-1.0, 1.0, shape).astype(npdt))
                else:
                    high = self.index_high.get(x, 4)
                    data = rng.integers(0, high, shape).astype(npdt)
                    if out_of_range and x in self.index_high and data.size:
                        data.flat[rng.integers(data.size)] = high if seed % 2 else -1
                    out.append(data)
            else:
                out.append(self.sizes[x])
        return out

    def bindings(self, args: list[Any]) -> dict[Any, Any]:
        b: dict[Any, Any] = dict(self.sizes)
        b.update(zip(self.inputs, args))
        return b


def _value(s: Any, sizes: dict[Any, int]) -> int:
    return sizes[s] if isinstance(s, tc.Var) else int(getattr(s, "value", s))


class _Gen:
    """Draws one program; ``draw`` is hypothesis' draw function."""

    def __init__(self, draw: Any, smooth: bool, dtype: str | None) -> None:
        self.draw = draw
        self.smooth = smooth
        self.sizes: dict[Any, int] = {}
        self.index_high: dict[Any, int] = {}
        self.inputs: list[Any] = []
        self.floats: list[tc.Tensor] = []
        self.tensors: list[tc.Tensor] = []  # readable float tensors
        self.count = 0
        self.dtype = dtype or draw(st.sampled_from(FLOATS))
        nvars = draw(st.integers(0, 2))
        self.dims = [Dim(c, c) for c in (1, 2, 3, 4)]
        for k in range(nvars):
            v = tc.var("nm"[k])
            self.sizes[v] = draw(st.integers(1, 4))
            self.dims.append(Dim(v, self.sizes[v]))

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def dim(self) -> Dim:
        return self.draw(st.sampled_from(self.dims))

    def shape(self, lo: int = 1, hi: int = 2) -> list[Dim]:
        return [self.dim() for _ in range(self.draw(st.integers(lo, hi)))]

    def placeholder(self) -> tc.Tensor:
        dims = self.shape()
        dt = self.dtype if self.smooth else self.draw(st.sampled_from([self.dtype, *FLOATS]))
        t = tc.placeholder(tuple(d.expr for d in dims), name=self.name("X"), dtype=dt)
        t.attrs["dims"] = dims
        self.inputs.append(t)
        self.floats.append(t)
        self.tensors.append(t)
        return t

    # -------------------------------------------------------------- indices
    def index(self, d: Dim, axes: list[tuple[Any, Dim]]) -> Any:
        """An integer expression in ``[0, d.value)`` over ``axes``."""
        kinds = ["axis", "mod", "affine", "const", "gather", "strided", "divsize"]
        kind = self.draw(st.sampled_from(kinds))
        same = [(a, e) for a, e in axes if e.value == d.value]
        if kind == "axis" and same:
            a, e = self.draw(st.sampled_from(same))
            return self.draw(st.sampled_from([a, e.expr - 1 - a]))
        if kind in ("axis", "mod") and axes:
            a, _ = self.draw(st.sampled_from(axes))
            return (a + self.draw(st.integers(0, 3))) % d.expr
        if kind == "affine" and axes:
            a, e = self.draw(st.sampled_from(axes))
            c, b = self.draw(st.integers(1, 3)), self.draw(st.integers(0, 2))
            q = -(-((e.value - 1) * c + b + 1) // d.value)  # smallest q keeping it < d
            return (a * c + b) // max(q, 1)
        if kind == "strided" and axes:  # a convolution's i*stride + r*dilation (+ offset)
            (a, e), (b, f) = self.draw(st.sampled_from(axes)), self.draw(st.sampled_from(axes))
            s, t, o = (self.draw(st.integers(1, 2)), self.draw(st.integers(1, 3)),
                       self.draw(st.integers(0, 1)))
            top = (e.value - 1) * s + (f.value - 1) * t + o
            if top < d.value:
                return a * s + b * t + o
            return (a * s + b * t + o) // (top // d.value + 1)  # floor-divided into range
        if kind == "divsize" and axes:  # a floor division by an extent, symbolic or not
            a, e = self.draw(st.sampled_from(axes))
            return (a * d.expr) // e.expr
        if kind == "gather" and axes:
            a, e = self.draw(st.sampled_from(axes))
            idx = tc.placeholder((e.expr,), name=self.name("idx"),
                                 dtype=self.draw(st.sampled_from(INTS)))
            self.inputs.append(idx)
            self.index_high[idx] = d.value
            return idx[a]
        return self.draw(st.integers(0, d.value - 1))

    def read(self, t: tc.Tensor, axes: list[tuple[Any, Dim]]) -> Any:
        return t[tuple(self.index(d, axes) for d in t.attrs["dims"])]

    # -------------------------------------------------------------- values
    def value(self, axes: list[tuple[Any, Dim]], depth: int) -> Any:
        """A float expression of dtype ``self.dtype``."""
        dt = self.dtype
        leaf = ["read", "read", "const", "axis"] + ([] if self.smooth else ["rough", "intcast"])
        node = ["unary", "binary", "binary", "select", "reduce"]
        kind = self.draw(st.sampled_from(leaf + (node if depth > 0 else [])))
        if kind == "read":
            return tc.cast(self.read(self.draw(st.sampled_from(self.tensors)), axes), dt)
        if kind == "const":
            return tc.const(self.draw(st.sampled_from([0.5, -1.25, 2.0, 3.0])), dt)
        if kind == "axis":
            if not axes:
                return tc.const(1.5, dt)
            return tc.cast(self.draw(st.sampled_from(axes))[0], dt) * 0.25
        if kind in ("rough", "intcast"):
            x = self.read(self.draw(st.sampled_from(self.floats)), axes)
            if kind == "intcast":  # float -> int -> float of an input value
                return tc.cast(tc.cast(x * 3.0, self.draw(st.sampled_from(INTS))), dt)
            fn = self.draw(st.sampled_from(sorted(ROUGH)))
            y = getattr(tc, fn)(x * 2.5)
            if self.draw(st.booleans()):
                y = tc.if_then_else(x > 0.0, y, -y)
            return tc.cast(y, dt)
        if kind == "unary":
            fn = self.draw(st.sampled_from([f for f in UNARY if f not in ROUGH]))
            x = self.value(axes, depth - 1)
            if fn == "exp":
                return tc.exp(tc.tanh(x))
            if INTRINSICS[fn].domain[0] >= 0:  # log, sqrt: positive arguments
                return getattr(tc, fn)(x * x + 1.0)
            if fn == "pow":
                return tc.pow(x * x + 1.0, tc.const(self.draw(st.sampled_from([0.5, 2.0])), dt))
            return getattr(tc, fn)(x)
        if kind == "binary":
            ops = ["+", "-", "*", "/"] + ([] if self.smooth else ["max", "min"])
            op = self.draw(st.sampled_from(ops))
            a, b = self.value(axes, depth - 1), self.value(axes, depth - 1)
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return a / (b * b + 1.0)
            return tc.maximum(a, b) if op == "max" else tc.minimum(a, b)
        if kind == "select":
            return tc.if_then_else(self.cond(axes), self.value(axes, depth - 1),
                                   self.value(axes, depth - 1))
        return self.reduce(axes, depth)

    def cond(self, axes: list[tuple[Any, Dim]]) -> Any:
        if not axes:
            return tc.const(True)
        a, _ = self.draw(st.sampled_from(axes))
        b, _ = self.draw(st.sampled_from(axes))
        kind = self.draw(st.sampled_from(["lt", "le", "eq", "mod"]))
        if kind == "lt":
            return a < b
        if kind == "le":
            return a <= b + 1
        if kind == "eq":
            return tc.eq(a, b)
        return tc.eq((a + b) % 2, 0)

    def reduce(self, axes: list[tuple[Any, Dim]], depth: int) -> Any:
        d = self.dim()
        r = tc.reduce_axis(d.expr, name=self.name("r"))
        inner = axes + [(r, d)]
        body = self.value(inner, depth - 1)
        where = self.cond(inner) if self.draw(st.booleans()) else None
        combiners = ["sum", "sum", "prod"] + ([] if self.smooth else ["max", "min"])
        comb = self.draw(st.sampled_from(combiners))
        if comb == "prod":
            body = tc.tanh(body) * 0.5 + 1.0
        if where is not None and comb in ("max", "min"):
            where = tc.any(where, tc.eq(r, 0))  # never empty: max/min identities are +-inf
        return getattr(tc, comb)(body, axis=r, where=where)

    def stage(self, last: bool = False) -> tc.Tensor:
        dims = self.shape(0, 2)
        name = self.name("S")
        depth = self.draw(st.integers(1, 3))

        def body(*ivs: Any) -> Any:
            axes = list(zip(ivs, dims))
            v = self.value(axes, depth)
            if last and self.smooth:  # the loss surely depends on an input
                x = tc.cast(self.read(self.draw(st.sampled_from(self.floats)), axes), self.dtype)
                v = v * x + x * x
            return v

        t = tc.compute(tuple(d.expr for d in dims), body, name=name)
        t.attrs["dims"] = dims
        return t

    def scan_stage(self) -> tc.Tensor:
        """A recurrence ``S[t, ..] = a * tanh(S[t - 1, k]) + v(t, ..)`` over a time axis of a
        drawn (maybe symbolic, maybe 1) extent: ``tc.scan`` of a one-row ``init`` and an update
        that reads the state at lag 1 (its other index drawn like any other: an axis, a
        gather, a constant) and, sometimes, sums a row of it (a matrix-vector step)."""
        time = self.dim()
        rest = self.shape(0, 1)
        dims = [time, *rest]
        name = self.name("S")
        state = tc.placeholder(tuple(d.expr for d in dims), name=f"{name}_state",
                               dtype=self.dtype)
        state.attrs["dims"] = dims
        depth = self.draw(st.integers(0, 2))
        scale = self.draw(st.sampled_from([0.5, -0.75, 1.0]))
        matvec = bool(rest) and self.draw(st.booleans())

        def first(_: Any, *ivs: Any) -> Any:
            return self.value([(i, d) for i, d in zip(ivs, rest)], depth)

        def step(t: Any, *ivs: Any) -> Any:
            axes = list(zip((t, *ivs), dims))
            if matvec:
                k = tc.reduce_axis(rest[0].expr, name=self.name("r"))
                w = self.value(axes + [(k, rest[0])], max(depth - 1, 0))
                earlier = tc.sum(tc.tanh(w) * state[t - 1, k], axis=k) * 0.5
            else:  # drawn only here: an unused index would leave a gather's input unread
                earlier = state[(t - 1, *(self.index(d, axes) for d in rest))]
            return tc.tanh(earlier) * scale + self.value(axes, depth)

        init = tc.compute((1, *(d.expr for d in rest)), first, name=f"{name}_init")
        update = tc.compute(tuple(d.expr for d in dims), step, name=f"{name}_step")
        t = tc.scan(init, update, state, name=name)
        t.attrs["dims"] = dims
        return t

    def int_stage(self) -> tc.Tensor:
        """An integer-valued stage read back as floats (int dtypes end to end)."""
        dims = self.shape(1, 2)
        dt = self.draw(st.sampled_from(INTS))

        def body(*ivs: Any) -> Any:
            axes = list(zip(ivs, dims))
            a, _ = self.draw(st.sampled_from(axes))
            return tc.cast(a * self.draw(st.integers(1, 5)) + self.draw(st.integers(-3, 3)), dt) \
                % tc.const(self.draw(st.integers(2, 7)), dt)

        t = tc.compute(tuple(d.expr for d in dims), body, name=self.name("I"))
        t.attrs["dims"] = dims
        return t


@st.composite
def programs(draw: Any, smooth: bool = False, dtype: str | None = None) -> Program:
    """A random program (see the module docstring); ``smooth`` for finite differences."""
    g = _Gen(draw, smooth, dtype)
    for _ in range(draw(st.integers(1, 2))):
        g.placeholder()
    if not smooth and draw(st.booleans()):
        it = g.int_stage()
        g.tensors.append(tc.compute(it.shape, lambda *i: tc.cast(it[i], g.dtype),
                                    name=g.name("F")))
        g.tensors[-1].attrs["dims"] = it.attrs["dims"]
    outputs = []
    nstages = draw(st.integers(1, 3))
    for k in range(nstages):
        last = k == nstages - 1
        t = g.scan_stage() if not last and draw(st.integers(0, 3)) == 0 else g.stage(last=last)
        g.tensors.append(t)
        if k == 0 or draw(st.booleans()):
            outputs.append(t)
    if outputs[-1] is not g.tensors[-1]:
        outputs.append(g.tensors[-1])
    shaped = {s for x in g.inputs if isinstance(x, tc.Tensor) for s in x.shape
              if isinstance(s, tc.Var)}
    inputs = list(g.inputs) + [v for v in g.sizes if v not in shaped]
    text = tc.show(outputs)
    return Program(inputs, outputs, dict(g.sizes), g.index_high, g.floats, text)
