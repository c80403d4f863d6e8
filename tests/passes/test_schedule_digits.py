"""Register tiles that read a flattened image in place and walk a flattened window or box in
its digits (passes/schedule/cpu/microkernel.py ``window_in_place``, passes/schedule/cpu/
digits.py): which programs take them, that no division of a loop variable is left, that the
scheduled programs are provably in bounds, and that they match the evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.kernel import Kernel
from tecomp.codegen.llvm import compile_function
from tecomp.host import Host, describe
from tecomp.loopir import For
from tecomp.passes.lower import lower_program as pipeline_lower_program
from tecomp.passes.schedule.cpu import schedule_cpu


def _kernel(func):
    return Kernel(func, compile_function(func, disk=None), target="llvm")


@pytest.mark.parametrize("host", ["native", "avx2"])
@pytest.mark.parametrize("hw, pad, dilation, c", [(16, 1, 1, 20), (32, 2, 2, 20),
                                                 (18, 0, 1, 48)])
def test_window_is_read_in_place_one_address_per_period(host, hw, pad, dilation, c,
                                                        monkeypatch):
    """A 3x3 convolution whose output rows are a multiple of the vector wide reads its
    padded image where it lies (no ``_panel`` copy), and its tile loop runs over the
    window's digits, ``k = 9 q + 3 a + t`` (``a`` a loop of 3, ``t`` unrolled): no
    division or remainder of a loop variable is left in the tile.  Results match the
    evaluator on 1 and 2 threads, on this host's vectors and on AVX2's; 48 channels make
    432 reduction steps, more than one slice of the tile loop (slices of whole windows)."""
    from tecomp import expr as E
    from tecomp.codegen import kernel as kernel_mod
    from tecomp.passes.bounds_affine import check_static_bounds
    from tecomp.stmt_functor import walk_expr, walk_stmt

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    chosen = describe() if host == "native" else Host(
        vector_bits=256, fma=True, cores=2, l1d=32768, l2=262144, l3=8388608)
    X = tc.placeholder((2, c, hw, hw), name="X")
    K = tc.placeholder((24, c, 3, 3), name="K")
    Y = tc.ops.conv2d(X, K, padding=pad, dilation=dilation)
    func, _ = pipeline_lower_program([Y], [X, K], cpu=True)
    sched = schedule_cpu(func, host=chosen)
    text = str(sched.body)
    assert "_panel" not in text
    check_static_bounds(sched)
    period_loops = [s for s in walk_stmt(sched.body) if isinstance(s, For)
                    and "_q" in s.var.name]
    assert period_loops
    for loop in period_loops:
        digits = [x for x in walk_stmt(loop.body) if isinstance(x, For)
                  and "_a" in x.var.name and x.hi == E.Const(3, "int64")]
        assert digits
        loop_vars = {loop.var, digits[0].var}
        assert not [e for e in walk_expr_all(loop.body) if isinstance(e, (E.FloorDiv, E.Mod))
                    and loop_vars & set(walk_expr(e))]
    rng = np.random.default_rng(hw)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (X, K)]
    (want,) = tc.evaluate([Y], dict(zip([X, K], arrays)))
    kernel = _kernel(sched)
    for threads in (1, 2):
        kernel.threads = threads
        np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-4, atol=1e-4)


def test_window_in_place_gradient_matches_the_evaluator(monkeypatch):
    """The gradient of a 3x3 convolution with 48 output channels: its input gradient reads
    the padded head in place with the weights' rows packed, over 432 reduction steps, more
    than one slice of whole windows (slices and the rows' copy once disagreed on the slice
    length, and the copy ran past its buffer: the bounds proof of the scheduled program
    fails on that); both gradients match the evaluator on 1 and 2 threads."""
    from tecomp.codegen import kernel as kernel_mod
    from tecomp.passes.bounds_affine import check_static_bounds

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    X = tc.placeholder((2, 40, 16, 16), name="X")
    K = tc.placeholder((48, 40, 3, 3), name="K")
    Y = tc.ops.conv2d(X, K, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    grads = list(tc.gradient(Y, [X, K], head=H))
    ins = [X, K, H]
    func, _ = pipeline_lower_program(grads, ins, cpu=True)
    sched = schedule_cpu(func, host=describe())
    assert "H_pad_panel" not in str(sched.body) and "K_rows" in str(sched.body)
    check_static_bounds(sched)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in ins]
    want = tc.evaluate(grads, dict(zip(ins, arrays)))
    kernel = _kernel(sched)
    for threads in (1, 2):
        kernel.threads = threads
        for got, w in zip(kernel(*arrays), want):
            np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-3)


def walk_expr_all(s):
    """Every expression node under the statement ``s``."""
    from tecomp.stmt_functor import stmt_exprs, walk_expr, walk_stmt

    for x in walk_stmt(s):
        for e in stmt_exprs(x):
            yield from walk_expr(e)


def test_window_packing_is_kept_for_rows_narrower_than_a_vector():
    """An 8-wide output image (each vector would cross image rows) keeps its packed panel."""
    X = tc.placeholder((2, 16, 8, 8), name="X")
    K = tc.placeholder((32, 16, 3, 3), name="K")
    func, _ = pipeline_lower_program([tc.ops.conv2d(X, K, padding=1)], [X, K], cpu=True)
    assert "X_pad_panel" in str(schedule_cpu(func, host=describe()).body)


@pytest.mark.parametrize("hw, packed", [(16, False), (32, True)])
def test_one_by_one_in_place_unless_steps_alias(hw, packed):
    """A 1x1 kernel reads a 16x16 image in place (a step of 1 KiB), a 32x32 one from its
    packed panel (a step of 4 KiB: every step's rows share their cache sets)."""
    X = tc.placeholder((2, 32, hw, hw), name="X")
    K = tc.placeholder((24, 32, 1, 1), name="K")
    func, _ = pipeline_lower_program([tc.ops.conv2d(X, K)], [X, K], cpu=True)
    assert ("X_panel" in str(schedule_cpu(func, host=describe()).body)) == packed


def test_fold_digits_and_window_period():
    """With ``0 <= a < 3`` and a constant ``0 <= t < 3``: ``(9 q + 3 a + t) // 9 -> q``,
    ``(9 q + 3 a + t) // 3 % 3 -> a``, ``(9 q + 3 a + t) % 3 -> t``; without a range for
    ``a``, or a divisor that can be crossed, the division is kept.  A window's flattened
    digits have period 9, a 2x2 window's 4, a plain reduction 1; a box of 8 x 32 x 32 in
    slices of 384 has period 32 (``(32 q + r) // 1024 -> q // 32`` for ``0 <= r < 32``)."""
    from tecomp import expr as E
    from tecomp.passes.schedule.cpu.digits import fold_digits, window_period

    q, a, k = E.Var("q", "int64"), E.Var("a", "int64"), E.Var("k", "int64")
    c = lambda n: E.Const(n, "int64")  # noqa: E731
    ranges = {a: (0, 2)}
    for t in range(3):
        e = E.add(E.add(E.mul(c(9), q), E.mul(c(3), a)), c(t))
        assert fold_digits(E.floordiv(e, c(9)), ranges) == q
        assert fold_digits(E.mod(E.floordiv(e, c(3)), c(3)), ranges) == a
        assert fold_digits(E.mod(e, c(3)), ranges) == c(t)
        unbounded = E.floordiv(e, c(9))
        assert fold_digits(unbounded, {}) == unbounded
    assert fold_digits(E.floordiv(E.add(E.mul(c(9), q), E.mul(c(4), a)), c(9)), ranges) == q
    crossed = E.floordiv(E.add(E.mul(c(9), q), E.mul(c(5), a)), c(9))
    assert fold_digits(crossed, ranges) == crossed  # 5 a reaches 10: kept
    digits = E.add(E.add(E.floordiv(k, c(9)), E.mod(E.floordiv(k, c(3)), c(3))), E.mod(k, c(3)))
    assert window_period(digits, k) == 9
    assert window_period(E.add(E.floordiv(k, c(4)), E.mod(E.floordiv(k, c(2)), c(2))), k) == 4
    assert window_period(E.add(k, c(1)), k) == 1
    # a box longer than a slice: only the outer digit is divided, once a trip
    t = E.Var("t", "int64")
    low = E.add(E.add(E.mul(c(32), q), E.mul(c(4), t)), c(1))
    assert fold_digits(E.floordiv(low, c(1024)), {t: (0, 7)}) == E.FloorDiv(q, c(32), "int64")
    assert fold_digits(E.mod(E.floordiv(low, c(32)), c(32)), {t: (0, 7)}) == E.Mod(
        q, c(32), "int64")
    assert fold_digits(E.floordiv(low, c(1024)), {t: (0, 8)}) == E.floordiv(low, c(1024))
    box = E.add(E.add(E.floordiv(k, c(1024)), E.mod(E.floordiv(k, c(32)), c(32))),
                E.mod(k, c(32)))
    assert window_period(box, k, 384) == 32
    assert window_period(box, k, 4096) == 1024


@pytest.mark.parametrize("in_backend", [True, False])
def test_strided_weight_gradient_steps_in_digits(monkeypatch, in_backend):
    """A stride-2 convolution's weight gradient sums over the box ``(n, y, x)`` flattened
    into one ``k``: its tiles broadcast ``H[k // 64, f, k // 8 % 8, k % 8]`` and its panel
    gathers the image through the same divisions.  Both loops run over the box's digits
    instead (``k = 64 q + 8 a + 4 t + s``): no division or remainder of a loop variable is
    left in them; the program is provably in bounds and matches the evaluator.  The
    innermost digit's steps are one step in a loop whose ``unroll`` hint asks the code
    generator for the copies, or (the switch off) the copies written out."""
    from tecomp import expr as E
    from tecomp.codegen import kernel as kernel_mod
    from tecomp.passes.bounds_affine import check_static_bounds
    from tecomp.passes.schedule.cpu import digits
    from tecomp.stmt_functor import walk_expr, walk_stmt

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(digits, "UNROLL_IN_BACKEND", in_backend)
    X = tc.placeholder((2, 16, 16, 16), name="X")
    K = tc.placeholder((32, 16, 3, 3), name="K")
    Y = tc.ops.conv2d(X, K, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    (grad,) = tc.gradient(Y, [K], head=H)
    func, _ = pipeline_lower_program([grad], [X, K, H], cpu=True)
    sched = schedule_cpu(func, host=describe())
    check_static_bounds(sched)
    digit_loops = [s for s in walk_stmt(sched.body) if isinstance(s, For) and "_q" in s.var.name]
    assert len(digit_loops) >= 2  # the panel's copy and the tiles
    hinted = [s for s in walk_stmt(sched.body) if isinstance(s, For) and s.unroll > 1
              and "_t" in s.var.name]
    assert bool(hinted) == in_backend
    for loop in digit_loops:
        inner = {x.var for x in walk_stmt(loop.body) if isinstance(x, For)} | {loop.var}
        assert not [e for e in walk_expr_all(loop.body) if isinstance(e, (E.FloorDiv, E.Mod))
                    and inner & set(walk_expr(e))]
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (X, K, H)]
    (want,) = tc.evaluate([grad], dict(zip([X, K, H], arrays)))
    kernel = _kernel(sched)
    for threads in (1, 2):
        kernel.threads = threads
        np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-4, atol=1e-3)
