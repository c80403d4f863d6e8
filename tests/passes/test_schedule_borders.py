"""Index-set splitting of bordered copies (passes/schedule/cpu/borders.py): the guard of a
select over the innermost loop cut into pieces, with results identical to the guarded store
in the loop-IR interpreter and compiled kernels that match the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_order import lower_program
from loop_interp import random_inputs, run

import tecomp as tc
from tecomp import expr as E
from tecomp.host import describe
from tecomp.loopir import BufferLoad, For, Store
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.borders import split_borders
from tecomp.stmt_functor import walk_expr, walk_stmt


def _copies():
    """(name, outputs, inputs): guarded copies of every kind the pass splits, and two it
    keeps (an equality, a guard on the data)."""
    A = tc.placeholder((6, 9), name="A")
    yield "zero border", tc.compute((8, 12), lambda i, j: tc.if_then_else(
        (i >= 1) & (i < 7) & (j >= 2) & (j < 11), A[i - 1, j - 2], 0.0), name="P"), [A]
    yield "reversed and inclusive", tc.compute((6, 9), lambda i, j: tc.if_then_else(
        (7 - j > 0) & (j - 1 >= 0) & (5 >= j), A[i, j] * 2.0, -1.0), name="P"), [A]
    yield "bound of an outer loop", tc.compute((6, 9), lambda i, j: tc.if_then_else(
        j <= i + 1, A[i, j], 0.5), name="P"), [A]
    yield "empty interior", tc.compute((6, 9), lambda i, j: tc.if_then_else(
        (j >= 20) & (i < 3), A[i, j], 3.0), name="P"), [A]
    yield "invariant guard only", tc.compute((6, 9), lambda i, j: tc.if_then_else(
        i > 2, A[i, j], 0.0), name="P"), [A]
    yield "equality (kept)", tc.compute((6, 9), lambda i, j: tc.if_then_else(
        tc.eq(j, 3), A[i, j], 0.0), name="P"), [A]
    yield "data guard (kept)", tc.compute((6, 9), lambda i, j: tc.if_then_else(
        A[i, j] > 0.0, A[i, j], 0.0), name="P"), [A]


def _guarded_stores(func):
    return [s for s in walk_stmt(func.body) if isinstance(s, Store)
            and any(isinstance(x, E.Select) for x in walk_expr(s.value))]


@pytest.mark.parametrize("name, out, ins", list(_copies()), ids=lambda x: x
                         if isinstance(x, str) else "")
def test_bordered_copies_split_and_keep_their_values(name, out, ins):
    func, consts = lower_program([out], ins)
    split = split_borders(func)
    kept = "kept" in name
    assert (split is func) == kept, name
    if not kept:
        assert not _guarded_stores(split), name
    rng = np.random.default_rng(len(name))
    arrays = random_inputs(ins, rng)
    (want,) = tc.evaluate([out], dict(zip(ins, arrays)))
    (plain,) = run(func, arrays, constants=consts)
    (got,) = run(split, arrays, constants=consts)
    np.testing.assert_array_equal(got, plain, err_msg=name)
    np.testing.assert_array_equal(got, want, err_msg=name)
    kernel = tc.build(out, ins)
    np.testing.assert_array_equal(kernel(*arrays), want, err_msg=name)


def test_a_padded_convolution_input_is_copied_without_a_guard_in_its_interior():
    """The zero-bordered copy of a 3x3 convolution's input: rows outside the image store
    zeros, each row inside is the border's two zeros around a plain copy of 32 elements."""
    X = tc.placeholder((2, 3, 32, 32), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    func, _ = lower_program([Y], [X, W])
    scheduled = schedule_cpu(func, host=describe())
    pads = [s for s in walk_stmt(scheduled.body) if isinstance(s, Store)
            and s.buffer.name.startswith("X_pad") and not s.buffer.name.endswith("_panel")]
    assert pads and not any(isinstance(x, E.Select) for s in pads for x in walk_expr(s.value))
    copies = [s for s in walk_stmt(scheduled.body) if isinstance(s, For)
              and isinstance(s.body, Store) and s.body in pads
              and any(isinstance(x, BufferLoad) for x in walk_expr(s.body.value))]
    assert [(int(c.lo.value), int(c.hi.value)) for c in copies] == [(1, 33)]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    (want,) = tc.evaluate([Y], {X: x, W: w})
    np.testing.assert_allclose(tc.build(Y, [X, W])(x, w), want, rtol=1e-5, atol=1e-5)
