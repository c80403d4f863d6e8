"""Register/cache blocking of "i, k, j" sums (passes/schedule/cpu/tile.py): structure, bit-identical
results in the loop-IR interpreter, and compiled kernels against the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_order import lower_program
from loop_interp import random_inputs, run

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import For, Seq, Store
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.tile import block_rows


def _matmul(n, k, m, dtype="float32"):
    A = tc.placeholder((n, k), name="A", dtype=dtype)
    B = tc.placeholder((k, m), name="B", dtype=dtype)
    r = tc.reduce_axis(k, name="r")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    return C, [A, B]


def _loops(s):
    if isinstance(s, For):
        yield s
        yield from _loops(s.body)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from _loops(x)
    elif hasattr(s, "body"):
        yield from _loops(s.body)


def test_matmul_rows_share_loads_and_reduction_steps_fold():
    C, ins = _matmul(10, 10, 16)
    func, _ = lower_program([C], ins)
    out = block_rows(func, rows=4, factor=4).body
    assert isinstance(out, Seq) and len(out.stmts) == 2  # blocked rows, then the last 2 rows
    main, rest = out.stmts
    assert main.kind == "parallel" and main.step == 4 and main.hi == E.Const(8, "int64")
    assert rest.lo == E.Const(8, "int64") and rest.step == 1 and rest.body == func.body.body
    kmain = [x for x in _loops(main) if x.var.name == "r"]
    assert [x.step for x in kmain] == [4, 1]  # 8 folded steps of 4, then k = 8, 9 one by one
    jloop = kmain[0].body
    assert isinstance(jloop.body, Seq) and len(jloop.body.stmts) == 4  # one update per row
    upd = jloop.body.stmts[1]
    assert isinstance(upd, Store) and upd.reduce is None
    assert str(upd.indices[0]) == "i + 1"
    assert str(upd.value).count("*") == 4  # four products folded into one update


def test_guarded_and_short_sums_are_left_alone():
    n = 12
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    r = tc.reduce_axis(n, name="r")
    G = tc.compute((n, n), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r, where=r < i),
                   name="G")
    func, _ = lower_program([G], [A, B])
    assert block_rows(func) is func
    C, ins = _matmul(1, 1, 8)
    func, _ = lower_program([C], ins)
    assert block_rows(func) is func


def test_convolution_puts_the_output_column_innermost():
    X = tc.placeholder((1, 4, 12, 12), name="X")
    W = tc.placeholder((8, 4, 3, 3), name="W")
    func, _ = lower_program([tc.ops.conv2d(X, W, padding=1)], [X, W])
    inner = [x for x in _loops(func.body) if isinstance(x.body, Store)
             and x.body.buffer.scope == "output"]
    assert [x.var.name for x in inner] == ["x", "x"]  # zero fill, then the accumulation
    assert inner[1].body.reduce == "sum"
    assert "select" not in str(inner[1].body.value)  # it reads the padded copy
    blocked = block_rows(func).body
    names = [x.var.name for x in _loops(blocked)]
    y = next(x for x in _loops(blocked) if x.var.name == "y" and x.step > 1)
    assert y.step == 4 and y.hi == E.Const(12, "int64")  # 3 blocks of 4 rows, no last rows
    assert "ry" in names and "rx" not in names  # the 3-wide rx folded into one update


def test_short_row_sum_keeps_the_plain_order():
    n = tc.var("n")
    E_ = tc.placeholder((n, 4), name="E")
    r = tc.reduce_axis(4, name="r")
    S = tc.compute((n,), lambda i: tc.sum(E_[i, r], axis=r), name="S")
    func, _ = lower_program([S], [E_])
    loop = func.body
    assert isinstance(loop, For) and loop.var.name == "i" and loop.kind == "parallel"


def _random_case(rng: np.random.Generator):
    """A random contraction the loop-order pass puts in "i, k, j" order: a (batched) matmul
    or a 2-D valid convolution (reduction nest rc, ry, rx)."""
    kind = rng.integers(0, 4)
    if kind == 3:  # a convolution's input gradient: the column range moves with the window
        c, f, h, w = (int(x) for x in rng.integers(1, 4, size=4))
        kw, dil, pad = int(rng.integers(2, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 3))
        X = tc.placeholder((1, c, h + 3, w + 8), name="X")
        W = tc.placeholder((f, c, 2, kw), name="W")
        Y = tc.ops.conv2d(X, W, padding=pad, dilation=dil)
        H = tc.placeholder(Y.shape, name="H")
        (dX,) = tc.gradient(Y, [X], head=H)
        return dX, [X, W, H], [c, f, h, w, kw, dil, pad]
    if kind == 0:
        n, k, m = (int(x) for x in rng.integers(1, 11, size=3))
        dtype = str(rng.choice(["float32", "int64"]))
        out, ins = _matmul(n, k, m, dtype)
        return out, ins, [n, k, m]
    if kind == 1:
        b, n, k, m = (int(x) for x in rng.integers(1, 7, size=4))
        A = tc.placeholder((b, n, k), name="A")
        B = tc.placeholder((b, k, m), name="B")
        r = tc.reduce_axis(k, name="r")
        out = tc.compute((b, n, m), lambda p, i, j: tc.sum(A[p, i, r] * B[p, r, j], axis=r),
                         name="BC")
        return out, [A, B], [b, n, k, m]
    c, h, w, f = (int(x) for x in rng.integers(1, 5, size=4))
    kh, kw = (int(x) for x in rng.integers(1, 4, size=2))
    pad = int(rng.integers(0, 2))
    X = tc.placeholder((1, c, h + kh, w + kw + 4), name="X")
    W = tc.placeholder((f, c, kh, kw), name="W")
    return tc.ops.conv2d(X, W, padding=pad), [X, W], [c, h, w, f, kh, kw, pad]


@pytest.mark.parametrize("seed", range(16))
def test_blocked_programs_are_bit_identical_in_the_interpreter(seed):
    rng = np.random.default_rng(seed)
    out, ins, sizes = _random_case(rng)
    rows, factor = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    func, consts = lower_program([out], ins)
    blocked = block_rows(func, rows=rows, factor=factor, max_full=int(rng.choice([2, 3, 8])))
    arrays = random_inputs(ins, rng)
    (got,) = run(blocked, arrays, constants=consts)
    (plain,) = run(func, arrays, constants=consts)
    msg = f"seed {seed}, sizes {sizes}, rows {rows}, factor {factor}"
    np.testing.assert_array_equal(got, plain, err_msg=msg)
    (want,) = tc.evaluate([out], dict(zip(ins, arrays)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=msg)


def test_symbolic_sizes_compile_and_match_the_evaluator(monkeypatch):
    from tecomp.codegen import kernel as kernel_mod
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import compile_function

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)  # thread even tiny calls
    n, m = tc.var("n"), tc.var("m")
    A = tc.placeholder((n, 13), name="A")
    B = tc.placeholder((13, m), name="B")
    r = tc.reduce_axis(13, name="r")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    # pack=False: the register tile of block_rows (register tiles of the GEMM micro-kernel,
    # the default for float sums, are tested in test_schedule_gemm.py)
    func = schedule_cpu(lower_program([C], [A, B])[0], pack=False)
    assert any(x.step == 4 for x in _loops(func.body))
    kernel = Kernel(func, compile_function(func, disk=None), target="llvm")
    rng = np.random.default_rng(7)
    for rows, cols in [(1, 1), (3, 5), (9, 33), (0, 4)]:
        a = rng.standard_normal((rows, 13)).astype(np.float32)
        b = rng.standard_normal((13, cols)).astype(np.float32)
        for threads in (1, 2):
            kernel.threads = threads
            np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{rows}x13x{cols}, {threads} thread(s)")


def test_input_gradient_window_is_split_and_folded():
    from tecomp.loopir import LetStmt

    rng = np.random.default_rng(11)
    X = tc.placeholder((1, 2, 6, 12), name="X")
    W = tc.placeholder((3, 2, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    (dX,) = tc.gradient(Y, [X], head=H)
    func, consts = lower_program([dX], [X, W, H])
    blocked = block_rows(func)
    lets = [s for s in _stmts(blocked.body) if isinstance(s, LetStmt)]
    assert len(lets) == 1 and lets[0].var.name == "t_2"  # the 3 window taps in one update
    assert isinstance(lets[0].body, For) and isinstance(lets[0].body.body, Store)
    assert str(lets[0].body.body.value).count("*") == 3
    arrays = random_inputs([X, W, H], rng)
    (got,) = run(blocked, arrays, constants=consts)
    (plain,) = run(func, arrays, constants=consts)
    np.testing.assert_array_equal(got, plain)


def _stmts(s):
    yield s
    for x in getattr(s, "stmts", ()):
        yield from _stmts(x)
    if hasattr(s, "body"):
        yield from _stmts(s.body)
