"""Clipped windows widened over zero-padded copies (passes/pad_windows.py) and short rows
flattened without a column buffer (passes/flatten_rows.py, in place): convolution forwards and
input gradients on short rows become constant-box sums over a flat row, and every program
still matches the evaluator (interpreter and compiled), while windows that a mask (not a
read's bounds) clips, or that span a wide box, are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import run

import tecomp as tc
from tecomp import pipeline
from tecomp.host import describe
from tecomp.loop_printer import format_func
from tecomp.passes.schedule.cpu.microkernel import tile_shape


def _cpu_text(outs, ins) -> str:
    """The loop IR the CPU target lowers (before its schedule): the implicit-GEMM rewrites of
    convolution windows are CPU-only."""
    return format_func(pipeline.lower(outs if isinstance(outs, list) else [outs], ins,
                                      target_name="llvm")[0])

def _conv(n, c, o, hw, r, pad, stride=1, dtype="float32"):
    X = tc.placeholder((n, c, hw, hw), name="X", dtype=dtype)
    W = tc.placeholder((o, c, r, r), name="W", dtype=dtype)
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad)
    H = tc.placeholder(Y.shape, name="H", dtype=dtype)
    return X, W, Y, H


def _arrays(ts, rng, dtype="float32"):
    return [rng.standard_normal(tuple(int(s) for s in t.shape)).astype(dtype) for t in ts]


def test_input_gradient_of_a_padded_convolution_reads_a_padded_head():
    X, W, Y, H = _conv(2, 5, 16, 8, 3, 1)
    dX, _ = tc.gradient(Y, [X, W], head=H)
    text = _cpu_text(dX, [X, W, H])
    assert "H_pad: float32[2, 16, 10, 10]" in text  # one zero row and column each side
    assert "X_grad_rows: float32[2, 5, 64]" in text  # then the flat row of 8 x 8
    assert "max(" not in text and "min(" not in text  # no clipped window left
    # the target-independent IR (what the CUDA schedule tiles) keeps the clipped windows
    assert "H_pad" not in str(tc.lower(dX, [X, W, H]))


@pytest.mark.parametrize("seed", range(3))
def test_widened_sums_match_the_evaluator_in_the_interpreter(seed):
    rng = np.random.default_rng(seed)
    hw = int(rng.integers(5, 10))
    r = int(rng.choice([2, 3, 5]))
    pad = int(rng.integers(0, r))
    X, W, Y, H = _conv(2, 3, 8, hw, r, pad)
    grads = list(tc.gradient(Y, [X, W], head=H))
    outs, ins = [Y] + grads, [X, W, H]
    func, consts = pipeline.lower(outs, ins, target_name="llvm")
    arrays = _arrays(ins, rng)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    for g, w in zip(run(func, arrays, constants=consts), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4, err_msg=f"{hw} {r} {pad}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_short_row_convolutions_match_the_evaluator(dtype):
    """A forward and both gradients in the implicit-GEMM form: a flat row, the input read in
    place by the packed panels of the register tiles, for 1 and 2 threads."""
    rng = np.random.default_rng(7)
    X, W, Y, H = _conv(3, 24, 40, 8, 3, 1, dtype=dtype)
    grads = list(tc.gradient(Y, [X, W], head=H))
    outs, ins = [Y] + grads, [X, W, H]
    text = str(tc.lower(outs, ins, target="llvm"))
    assert "conv2d_rows" in text and "_cols" not in text  # no column buffer
    mr, nr = tile_shape(describe(), 4 if dtype == "float32" else 8)
    assert f"{dtype}[{mr}, {nr}] (local)" in text
    kernel = tc.build(outs, ins)
    arrays = _arrays(ins, rng, dtype)
    want = tc.evaluate(outs, dict(zip(ins, [a.astype(np.float64) for a in arrays])))
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kernel.threads = threads
        for g, w in zip(kernel(*arrays), want):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_strided_convolution_too_big_to_stage_is_read_in_place():
    X, W, Y, H = _conv(4, 64, 16, 32, 3, 1, stride=2)  # columns: 590k elements
    text = _cpu_text(Y, [X, W])
    assert "conv2d_rows" in text and "_cols" not in text
    rng = np.random.default_rng(2)
    arrays = _arrays([X, W], rng)
    np.testing.assert_allclose(tc.build(Y, [X, W])(*arrays),
                               tc.evaluate([Y], dict(zip([X, W], arrays)))[0],
                               rtol=1e-4, atol=1e-4)


def test_masked_windows_are_left_clipped():
    A = tc.placeholder((24, 24), name="A")
    B = tc.placeholder((24, 16), name="B")
    t = tc.reduce_axis(24, name="t")
    # a causal mask: the bounds t <= i keep no read in bounds, so the box must not be widened
    C = tc.compute((24, 16), lambda i, j: tc.sum(A[i, t] * B[t, j], axis=t, where=t <= i),
                   name="C")
    assert "_pad" not in _cpu_text(C, [A, B])


def test_sliding_window_moves_to_start_at_zero():
    """A transposed convolution's input gradient: its column window (4 wide) slides across
    the 16-wide image; it becomes the kernel's own axis over [0, 4) and the head is padded."""
    X = tc.placeholder((2, 8, 8, 8), name="X")
    W = tc.placeholder((8, 4, 4, 4), name="W")
    Y = tc.ops.conv_transpose2d(X, W, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    dX, _ = tc.gradient(Y, [X, W], head=H)
    text = _cpu_text(dX, [X, W, H])
    assert "H_pad" in text and "max(" not in text
    rng = np.random.default_rng(4)
    arrays = _arrays([X, W, H], rng)
    np.testing.assert_allclose(tc.build(dX, [X, W, H])(*arrays),
                               tc.evaluate([dX], dict(zip([X, W, H], arrays)))[0],
                               rtol=1e-4, atol=1e-4)


def test_strided_weight_gradient_is_one_flat_row_of_kernel_columns():
    """``W_grad[o, c, ky, kx]`` of a stride-2 convolution: ``(c, ky, kx)`` becomes one row of
    columns gathered in place; at stride 1 the weight gradient keeps its form."""
    rng = np.random.default_rng(9)
    for stride, flat in ((2, True), (1, False)):
        X, W, Y, H = _conv(2, 8, 12, 16, 3, 1, stride=stride)
        _, dW = tc.gradient(Y, [X, W], head=H)
        text = _cpu_text(dW, [X, W, H])
        assert ("W_grad_rows: float32[12, 72]" in text) == flat, stride
        arrays = _arrays([X, W, H], rng)
        want = tc.evaluate([dW], dict(zip([X, W, H], arrays)))[0]
        np.testing.assert_allclose(tc.build(dW, [X, W, H])(*arrays), want,
                                   rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("both", [False, True])
def test_stages_that_pad_one_tensor_share_one_copy(rng, both):
    """A stride-2 transposed convolution's weight gradient is four phase stages, each padding
    ``H`` by a row or column on another side: one copy bordered for all of them (and the
    input gradient's too), read at each stage's offset, with the evaluator's results."""
    X = tc.placeholder((2, 4, 6, 6), name="X")
    W = tc.placeholder((4, 3, 4, 4), name="W")
    Y = tc.ops.conv_transpose2d(X, W, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    gX, gW = tc.gradient(Y, [X, W], head=H)
    outs = [gX, gW] if both else [gW]
    text = _cpu_text(outs, [X, W, H])
    assert text.count("allocate H_pad") == 1, text
    assert "H_pad: float32[2, 3, 14, 14]" in text  # 12 x 12, one zero row and column each side
    func, consts = pipeline.lower(outs, [X, W, H], target_name="llvm")
    arrays = _arrays([X, W, H], rng)
    want = tc.evaluate(outs, dict(zip([X, W, H], arrays)))
    for g, w in zip(run(func, arrays, constants=consts), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)
    kern = tc.build(outs, [X, W, H])
    for g, w in zip(kern(*arrays), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
