"""Register blocking of plain-order reductions (passes/schedule/cpu/dot.py): structure,
bit-identical results in the loop-IR interpreter, compiled kernels against the evaluator."""

from __future__ import annotations

import numpy as np
import pytest
import test_lower_random as random_programs
from cpu_order import lower_program
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_interp import run

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import Allocate, For, Seq, Store
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.dot import block_dots
from tecomp.passes.schedule.cpu.tile import block_rows


def _stmts(s):
    yield s
    if isinstance(s, Seq):
        for x in s.stmts:
            yield from _stmts(x)
    elif isinstance(s, (For, Allocate)) or hasattr(s, "body"):
        yield from _stmts(s.body)


def test_dense_layer_blocks_rows_and_columns():
    X = tc.placeholder((6, 10), name="X")
    W = tc.placeholder((7, 10), name="W")
    b = tc.placeholder((7,), name="b")
    func, _ = lower_program([tc.ops.dense(X, W, b)], [X, W, b])
    out = block_dots(func, rows=4, cols=4).body
    assert isinstance(out, Seq) and len(out.stmts) == 2
    main, rest = out.stmts
    assert main.kind == "parallel" and main.step == 4 and main.hi == E.Const(4, "int64")
    assert rest.lo == E.Const(4, "int64") and rest.body == func.body.body
    locals_ = [s for s in _stmts(main) if isinstance(s, Allocate)]
    assert len({a.buffer.name for a in locals_}) == 16 + 1  # a 4x4 block; the tail's own
    k = next(s for s in _stmts(main) if isinstance(s, For) and s.var.name == "k")
    assert isinstance(k.body, Seq) and len(k.body.stmts) == 16
    stores = [s for s in _stmts(main) if isinstance(s, Store) and s.buffer.scope == "output"]
    assert "b[j + 3]" in {str(s.value.b) for s in stores if hasattr(s.value, "b")}


def test_nests_that_do_not_match_are_left_alone():
    n = 9
    A = tc.placeholder((n, n), name="A")
    r = tc.reduce_axis(n, name="r")
    T = tc.compute((n, n), lambda i, j: tc.sum(A[i, r] * A[j, r], axis=r, where=r < i),
                   name="T")  # a guarded accumulation
    func, _ = lower_program([T], [A])
    assert block_dots(func) is func
    v = tc.compute((n,), lambda i: tc.sum(A[i, r], axis=r), name="v")  # no column loop
    func, _ = lower_program([v], [A])
    assert block_dots(func) is func


def _random_case(rng: np.random.Generator):
    kind = int(rng.integers(0, 3))
    n, m, k = (int(x) for x in rng.integers(1, 10, size=3))
    A = tc.placeholder((n, k), name="A")
    B = tc.placeholder((m, k), name="B")
    if kind == 0:  # x @ W.T + b, as a dense layer
        b = tc.placeholder((m,), name="b")
        return tc.ops.dense(A, B, b), [A, B, b]
    r = tc.reduce_axis(k, name="r")
    if kind == 1:  # a max reduction with a function of the result stored
        out = tc.compute((n, m), lambda i, j: tc.exp(-tc.max(A[i, r] - B[j, r], axis=r)),
                         name="M")
        return out, [A, B]
    A2 = tc.placeholder((n, 2 * k), name="A2")
    B2 = tc.placeholder((m, 2 * k), name="B2")
    q = tc.reduce_axis(2, name="q")  # two reduction loops over one row of each operand
    out = tc.compute((n, m), lambda i, j: tc.sum(A2[i, 2 * r + q] * B2[j, 2 * r + q],
                                                 axis=[r, q]), name="S")
    return out, [A2, B2]


@pytest.mark.parametrize("seed", range(12))
def test_blocked_programs_are_bit_identical_in_the_interpreter(seed):
    rng = np.random.default_rng(seed)
    out, ins = _random_case(rng)
    rows, cols = int(rng.integers(1, 6)), int(rng.integers(2, 6))
    func, _ = lower_program([out], ins)
    blocked = block_dots(func, rows=rows, cols=cols, min_inner=1, fold=1)
    assert blocked is not func or int(out.shape[1].value) == 1
    arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
              for t in ins]
    (got,) = run(blocked, arrays)
    (plain,) = run(func, arrays)
    msg = f"seed {seed}, {out.name}, rows {rows}, cols {cols}"
    np.testing.assert_array_equal(got, plain, err_msg=msg)
    (want,) = tc.evaluate([out], dict(zip(ins, arrays)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=msg)


def test_compiled_matmul_gradient_matches_the_evaluator(monkeypatch):
    from tecomp.codegen import kernel as kernel_mod
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import compile_function

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)  # thread even tiny calls
    n = tc.var("n")
    A = tc.placeholder((n, 11), name="A")
    B = tc.placeholder((11, 6), name="B")
    r = tc.reduce_axis(11, name="r")
    C = tc.compute((n, 6), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    H = tc.placeholder((n, 6), name="H")
    grads = tc.gradient(C, [A, B], head=H)
    func = schedule_cpu(lower_program(grads, [A, B, H])[0])
    kernel = Kernel(func, compile_function(func, disk=None), target="llvm")
    rng = np.random.default_rng(3)
    for rows in (0, 1, 5, 13):
        a = rng.standard_normal((rows, 11)).astype(np.float32)
        b = rng.standard_normal((11, 6)).astype(np.float32)
        h = rng.standard_normal((rows, 6)).astype(np.float32)
        want = tc.evaluate(grads, {A: a, B: b, H: h})
        for threads in (1, 2):
            kernel.threads = threads
            for g, w in zip(kernel(a, b, h), want):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5,
                                           err_msg=f"{rows} rows, {threads} thread(s)")


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_random_programs_keep_their_results_under_both_blockings(seed):
    """Arbitrary lowered programs (few match either pattern): nothing else changes."""
    outs, ins = random_programs._Gen(seed).program()
    rng = np.random.default_rng(seed)
    shape = random_programs.SHAPE
    arrays = [rng.standard_normal(shape), rng.standard_normal(shape[1])]
    func, _ = lower_program(outs, ins)
    blocked = block_dots(block_rows(func, rows=2, factor=2, max_full=2), rows=2, cols=3,
                         min_inner=1)
    for g, w in zip(run(blocked, arrays), run(func, arrays)):
        np.testing.assert_array_equal(g, w, err_msg=f"seed {seed}\n{blocked.body}")


@pytest.mark.parametrize("seed", range(6))
def test_folded_outer_reduction_steps_match_the_plain_order(seed):
    """fold: two reduction loops (rows of a short dot product); the loop around the innermost
    one steps by the fold and each update adds its terms, a reassociation of the sum."""
    rng = np.random.default_rng(100 + seed)
    n, m, k = (int(x) for x in rng.integers(2, 7, size=3))
    rows_ = int(rng.choice([4, 8, 12]))
    A = tc.placeholder((n, rows_, k), name="A")
    B = tc.placeholder((m, rows_, k), name="B")
    y, x = tc.reduce_axis(rows_, name="y"), tc.reduce_axis(k, name="x")
    out = tc.compute((n, m), lambda i, j: tc.sum(A[i, y, x] * B[j, y, x], axis=[y, x]),
                     name="S")
    func, _ = lower_program([out], [A, B])
    blocked = block_dots(func, rows=2, cols=2, min_inner=1)
    steps = [lp.step for lp in _all_loops(blocked.body) if lp.var.name == "y"]
    folded = [s for s in steps if s > 1]   # the blocked tiles (edge rows keep the plain loop)
    assert folded and all(s in (2, 4, 8) and rows_ % s == 0 for s in folded)
    arrays = [rng.standard_normal((n, rows_, k)).astype(np.float32),
              rng.standard_normal((m, rows_, k)).astype(np.float32)]
    (got,) = run(blocked, arrays)
    (plain,) = run(func, arrays)
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")


def _all_loops(s):
    if isinstance(s, For):
        yield s
    for x in getattr(s, "stmts", ()):
        yield from _all_loops(x)
    for attr in ("body", "then", "else_"):
        x = getattr(s, attr, None)
        if x is not None and not isinstance(x, E.Expr):
            yield from _all_loops(x)


@pytest.mark.parametrize("shared_only", [True, False])
def test_rows_that_share_no_load_are_left_alone(monkeypatch, shared_only):
    """A batch of row maxima (each ``X[i, j, :]`` read by one accumulator only) is blocked only
    when SHARED_ONLY is off; a dense layer's rows and columns share loads either way."""
    from tecomp.passes.schedule.cpu import dot

    monkeypatch.setattr(dot, "SHARED_ONLY", shared_only)
    X = tc.placeholder((4, 6, 16), name="X")
    r = tc.reduce_axis(16, name="r")
    out = tc.compute((4, 6), lambda i, j: tc.max(X[i, j, r], axis=r), name="M")
    func, _ = lower_program([out], [X])
    blocked = block_dots(func, rows=2, cols=2, min_inner=1)
    assert (blocked is func) == shared_only
    x = np.random.default_rng(5).standard_normal((4, 6, 16)).astype(np.float32)
    np.testing.assert_array_equal(run(blocked, [x])[0], x.max(axis=2))
    A, B = tc.placeholder((6, 10), name="A"), tc.placeholder((7, 10), name="B")
    dense, _ = lower_program([tc.ops.dense(A, B)], [A, B])
    assert block_dots(dense, rows=2, cols=2) is not dense
