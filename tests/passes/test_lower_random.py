"""Random programs: the lowered loop IR (interpreted) equals the reference evaluator.

Programs are built from a seed that hypothesis draws: element-wise arithmetic, math calls,
selects, casts, reads of inputs and earlier stages at shifted/modular indices, and
reductions (sum/prod/max/min, where-conditions, bounds depending on data axes and on outer
reduction axes, nested) anywhere in a body.  The seed is in the failure message.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from loop_interp import run

import tecomp as tc
from tecomp.passes.lower import lower

SHAPE = (4, 5)


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def index(self, vars_, n):
        v = self.pick(vars_)
        return self.pick([lambda: v % n, lambda: (v + 1) % n, lambda: (v * 2 + 3) % n,
                          lambda: (v // 2) % n])()

    def value(self, tensors, vars_, depth):
        r = self.rng.random()
        if depth <= 0 or r < 0.2:
            t = self.pick(tensors)
            if t.ndim == 0:
                return t[()]
            return t[tuple(self.index(vars_, int(s.value)) for s in t.shape)]
        if r < 0.35:
            return tc.const(float(self.rng.integers(-3, 4)) / 2.0)
        if r < 0.55:
            a, b = self.value(tensors, vars_, depth - 1), self.value(tensors, vars_, depth - 1)
            return self.pick([lambda: a + b, lambda: a * b, lambda: a - b,
                              lambda: tc.maximum(a, b)])()
        if r < 0.62:
            return tc.tanh(self.value(tensors, vars_, depth - 1))
        if r < 0.72:
            v = self.pick(vars_)
            cond = self.pick([lambda: v % 2 == 0, lambda: v < 2, lambda: v >= 1])
            cond = cond() if not isinstance(cond(), bool) else tc.eq(v % 2, 0)
            return tc.if_then_else(cond, self.value(tensors, vars_, depth - 1),
                                   self.value(tensors, vars_, depth - 1))
        return self.reduce(tensors, vars_, depth - 1)

    def reduce(self, tensors, vars_, depth):
        self.count += 1
        v = self.pick(vars_)
        lo = self.pick([lambda: 0, lambda: v % 3, lambda: tc.minimum(v, 2)])()
        ext = self.pick([lambda: 3, lambda: 1, lambda: 0, lambda: v % 3 + 1])()
        k = tc.reduce_axis((lo, lo + ext), name=f"k{self.count}")
        body = self.value(tensors, vars_ + [k], depth)
        comb = self.pick(["sum", "sum", "max", "min", "prod"])
        where = None
        if self.rng.random() < 0.3:
            where = tc.ne((k + v) % 3, 0)
        return getattr(tc, comb)(body, axis=k, where=where)

    def program(self):
        X = tc.placeholder(SHAPE, name="X")
        Y = tc.placeholder((SHAPE[1],), name="Y")
        tensors = [X, Y]
        stages = []
        for s in range(int(self.rng.integers(1, 4))):
            shape = self.pick([SHAPE, (SHAPE[0],), ()])
            names = ["i", "j"][:len(shape)]

            def f(*axes, _names=names):
                vars_ = list(axes) if axes else [tc.const(1)]
                return self.value(tensors, vars_, 4)

            f.__signature__ = __import__("inspect").Signature(
                [__import__("inspect").Parameter(n, 1) for n in names])
            t = tc.compute(shape, f, name=f"S{s}")
            tensors.append(t)
            stages.append(t)
        outs = [t for t in stages if self.rng.random() < 0.5] or [stages[-1]]
        return outs, [X, Y]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
@example(67637)  # NaN through max: the interpreter must propagate it like NumPy
def test_random_program_matches_evaluator(seed):
    outs, ins = _Gen(seed).program()
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(SHAPE), rng.standard_normal(SHAPE[1])]
    func = lower(outs, ins)
    got = run(func, arrays)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5,
                                   err_msg=f"seed {seed}\n{tc.show(outs)}\n{tc.Lowered(func)}")
