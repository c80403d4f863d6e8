"""Vector partial sums across reduction nests with a short innermost loop
(passes/schedule/cpu/vector_sums.py): the weight gradients of convolutions over small images
keep one vector per accumulator for the whole nest, results match the evaluator (loop-IR
interpreter and compiled, float32 and float64), and nests it must not take are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import run

import tecomp as tc
from tecomp import pipeline
from tecomp.host import describe
from tecomp.loopir import For, Store
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.microkernel import vector_registers
from tecomp.stmt_functor import walk_stmt


def _weight_gradient(n, c, f, hw, r, stride, pad, dtype="float32", transposed=False):
    X = tc.placeholder((n, c, hw, hw), name="X", dtype=dtype)
    if transposed:
        W = tc.placeholder((c, f, r, r), name="W", dtype=dtype)
        Y = tc.ops.conv_transpose2d(X, W, stride=stride, padding=pad)
    else:
        W = tc.placeholder((f, c, r, r), name="W", dtype=dtype)
        Y = tc.ops.conv2d(X, W, stride=stride, padding=pad)
    H = tc.placeholder(Y.shape, name="H", dtype=dtype)
    return [X, W, H], tc.gradient(Y, [W], head=H)[0]


def _vector_partials(func):
    return [s for s in walk_stmt(func.body) if isinstance(s, Store)
            and s.buffer.scope == "local" and s.buffer.name.endswith("_v")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("hw, r, stride, pad, transposed", [
    (8, 3, 1, 1, False),     # 8x8 images: rows of 8 (a half vector on a 16-lane host)
    (16, 3, 1, 1, False),
    (16, 4, 2, 1, True),     # a transposed convolution's weight gradient, 4x4 taps
    (12, 3, 2, 1, False),    # rows of 6, which no 4-lane vector divides: left alone
])
def test_weight_gradients_sum_in_vector_partials(dtype, hw, r, stride, pad, transposed):
    ins, dW = _weight_gradient(2, 5, 6, hw, r, stride, pad, dtype, transposed)
    func, consts = pipeline.lower([dW], ins, target_name="llvm")
    scheduled = schedule_cpu(pipeline.bounds_checked(func)[0])
    rows = hw // (1 if transposed else stride)  # the innermost loop: rows of the sum's image
    lanes = describe().lanes(4 if dtype == "float32" else 8)
    width = lanes
    while width > 4 and rows < width:
        width //= 2
    applies = rows % width == 0 and r * r <= vector_registers(describe()) - 4  # one a tap
    partials = _vector_partials(scheduled)
    assert bool(partials) == applies, rows
    if applies:
        assert any(isinstance(s, For) and s.kind == "lanes" for s in walk_stmt(scheduled.body))
    rng = np.random.default_rng(hw + r)
    arrays = [rng.standard_normal(tuple(int(d) for d in t.shape)).astype(dtype) for t in ins]
    (want,) = tc.evaluate([dW], dict(zip(ins, arrays)))
    tol = 1e-4 if dtype == "float32" else 1e-11
    np.testing.assert_allclose(run(scheduled, arrays, constants=consts)[0], want, rtol=tol,
                               atol=tol)
    kernel = tc.build(dW, ins)
    for threads in (1, 2):
        kernel.threads = threads
        np.testing.assert_allclose(kernel(*arrays), want, rtol=tol, atol=tol)


def test_long_float32_sums_stay_blocked_in_float64():
    """A sum of 2^15 terms in rows of 16 is longer than ``max_terms``: the blocked float64
    combination of reduce_accumulators applies, not vector partial sums."""
    X = tc.placeholder((2048, 16), name="X")
    a, b = tc.reduce_axis(2048, name="a"), tc.reduce_axis(16, name="b")
    S = tc.compute((), lambda: tc.sum(X[a, b] * X[a, b], axis=[a, b]), name="S")
    func = tc.lower(S, [X], target="llvm").func
    assert not _vector_partials(func)
    assert "float64" in str(func)
