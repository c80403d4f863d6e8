"""Output phases of strided windows (passes/phase_split.py): a transposed convolution becomes
one stride-1 convolution per phase (then an implicit GEMM), results match the evaluator in
the interpreter and compiled; windows whose phases differ in width get a stage per phase when
each phase sums enough terms, and are left to the residue split otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import run

import tecomp as tc
from tecomp import pipeline
from tecomp.loop_printer import format_func


def _cpu_text(outs, ins) -> str:
    """The loop IR the CPU target lowers (before its schedule): the implicit-GEMM rewrites of
    convolution windows are CPU-only."""
    return format_func(pipeline.lower(outs if isinstance(outs, list) else [outs], ins,
                                      target_name="llvm")[0])

def _transposed(n, c, f, hw, r, stride, pad, out_pad=0):
    X = tc.placeholder((n, c, hw, hw), name="X")
    W = tc.placeholder((c, f, r, r), name="W")
    Y = tc.ops.conv_transpose2d(X, W, stride=stride, padding=pad, output_padding=out_pad)
    return X, W, Y


def _arrays(ts, rng):
    return [rng.standard_normal(tuple(int(s) for s in t.shape)).astype(np.float32) for t in ts]


def test_transposed_convolution_is_computed_per_phase_as_a_flat_row():
    X, W, Y = _transposed(2, 8, 4, 8, 4, 2, 1)
    text = _cpu_text(Y, [X, W])
    assert "conv_transpose2d_phases_rows: float32[2, 2, 2, 4, 64]" in text
    assert "X_pad" in text and "max(" not in text  # constant windows over a padded input


@pytest.mark.parametrize("r,stride,pad,out_pad", [(4, 2, 1, 0), (4, 2, 0, 0), (6, 2, 2, 1),
                                                  (3, 3, 0, 0), (6, 3, 1, 2)])
def test_phase_split_transposed_convolutions_match_the_evaluator(r, stride, pad, out_pad):
    rng = np.random.default_rng(r * 10 + stride + pad)
    X, W, Y = _transposed(2, 3, 4, 6, r, stride, pad, out_pad)
    H = tc.placeholder(Y.shape, name="H")
    grads = list(tc.gradient(Y, [X, W], head=H))
    outs, ins = [Y] + grads, [X, W, H]
    arrays = _arrays(ins, rng)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    func, consts = pipeline.lower(outs, ins, target_name="llvm")
    for g, w in zip(run(func, arrays, constants=consts), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)
    for g, w in zip(tc.build(outs, ins)(*arrays), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


def test_phases_of_different_widths_are_left_to_the_residue_split_with_few_channels():
    """A 3-wide kernel at stride 2: the input gradient's phases have windows of 2 and 1, and
    with 8 output channels the narrowest phase sums only 8 terms."""
    X = tc.placeholder((2, 4, 16, 16), name="X")
    W = tc.placeholder((8, 4, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    dX, _ = tc.gradient(Y, [X, W], head=H)
    text = _cpu_text(dX, [X, W, H])
    assert "_phases" not in text and "_p00" not in text


def _strided_input_gradient(c, f, hw, r, stride, pad, dilation=1):
    X = tc.placeholder((2, c, hw, hw), name="X")
    W = tc.placeholder((f, c, r, r), name="W")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dilation)
    H = tc.placeholder(Y.shape, name="H")
    return X, W, H, tc.gradient(Y, [X], head=H)[0]


def test_phases_of_different_widths_get_a_stage_each():
    """The input gradient of a 3x3 stride-2 convolution, 16 -> 32 channels: four phase
    stages (windows 1x1, 1x2, 2x1, 2x2, 32 to 128 terms), each an implicit GEMM."""
    X, W, H, dX = _strided_input_gradient(16, 32, 16, 3, 2, 1)
    text = _cpu_text(dX, [X, W, H])
    for tag in ("00", "01", "10", "11"):
        assert f"X_grad_p{tag}_rows: float32[2, 16, 64]" in text
    assert "_phases" not in text and "max(" not in text
    scheduled = str(tc.lower(dX, [X, W, H], target="llvm"))
    assert "(local)" in scheduled and "lanes for" in scheduled  # the register tiles


def _matches_the_evaluator(dX, ins, rng):
    """``dX``'s CPU loop IR in the interpreter, and its compiled kernel, against the
    evaluator on random inputs."""
    arrays = _arrays(ins, rng)
    want = tc.evaluate([dX], dict(zip(ins, arrays)))[0]
    func, consts = pipeline.lower([dX], ins, target_name="llvm")
    np.testing.assert_allclose(run(func, arrays, constants=consts)[0], want, rtol=1e-5,
                               atol=1e-4)
    np.testing.assert_allclose(tc.build(dX, ins)(*arrays), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("c,f,hw,r,stride,pad", [(3, 32, 16, 3, 2, 1), (2, 16, 12, 3, 2, 0),
                                                 (3, 20, 15, 5, 3, 2), (2, 17, 20, 5, 2, 2)])
def test_stage_per_phase_matches_the_evaluator(c, f, hw, r, stride, pad):
    rng = np.random.default_rng(c * 100 + f + r)
    X, W, H, dX = _strided_input_gradient(c, f, hw, r, stride, pad)
    ins = [X, W, H]
    text = _cpu_text(dX, ins)
    assert "X_grad_p0" in text  # the split applies (widths 2 and 1, or 2 and 3 for r = 5)
    _matches_the_evaluator(dX, ins, rng)


@pytest.mark.parametrize("stride", [2, 3])
def test_phases_no_term_reaches_read_zero(stride):
    """The input gradient of a 1x1 convolution at stride 2 (3): only the phase of the
    positions the kernel reads has terms; it becomes one implicit GEMM stage, the other
    phases read 0 (no stage, no empty sums).  Results match the evaluator in the loop-IR
    interpreter and compiled.  (It was a scalar nest with a 0- or 1-step loop per axis:
    8x256x16x16 -> 128, 8-9 ms for this gradient on one core; 0.5 ms split.)"""
    rng = np.random.default_rng(stride)
    X, W, H, dX = _strided_input_gradient(24, 32, 12, 1, stride, 0)
    ins = [X, W, H]
    text = _cpu_text(dX, ins)
    assert "X_grad_p00[" in text and "0.0)" in text
    tags = {f"{a}{b}" for a in range(stride) for b in range(stride)} - {"00"}
    assert not any(f"X_grad_p{t}" in text for t in tags)
    _matches_the_evaluator(dX, ins, rng)


@pytest.mark.parametrize("c,f,hw,r,stride,pad", [(3, 32, 17, 3, 2, 1), (2, 24, 13, 3, 2, 0),
                                                 (2, 20, 16, 5, 3, 2)])
def test_odd_images_get_a_stage_per_phase(c, f, hw, r, stride, pad):
    """An image the stride does not divide (17 rows at stride 2: phases of 9 and 8 rows):
    each phase a stage of its own extent, matching the evaluator.  (The 3x3 stride-2 input
    gradient of 8x64x33x33 -> 128 was a scalar nest of 1-2 steps per axis before.)"""
    rng = np.random.default_rng(hw * 10 + r)
    X, W, H, dX = _strided_input_gradient(c, f, hw, r, stride, pad)
    ins = [X, W, H]
    text = _cpu_text(dX, ins)
    rows = -(-hw // stride)
    assert f"X_grad_p00: float32[2, {c}, {rows}, {rows}]" in text
    last = hw // stride if hw % stride else rows
    tag = str(stride - 1) * 2
    assert f"X_grad_p{tag}: float32[2, {c}, {last}, {last}]" in text or \
        f"X_grad_p{tag}_rows" in text
    _matches_the_evaluator(dX, ins, rng)


@pytest.mark.parametrize("hw", [16, 17])
def test_stride_and_dilation_sharing_a_factor_split_into_phases(hw):
    """The input gradient of a 3x3 convolution at stride 2 and dilation 2: each output
    phase is a stride-1 convolution whose 3x3 kernel the image edges clip (in the odd phases
    no term reaches: they read 0).  It was a scalar nest over every position with 1-step
    windows (8x32x33x33 -> 64: 34 ms; 1.5 ms split)."""
    rng = np.random.default_rng(hw)
    X, W, H, dX = _strided_input_gradient(3, 32, hw, 3, 2, 2, dilation=2)
    ins = [X, W, H]
    text = _cpu_text(dX, ins)
    assert "X_grad_p00" in text
    assert not any(f"X_grad_p{t}[" in text for t in ("01", "10", "11"))
    _matches_the_evaluator(dX, ins, rng)


def test_transposed_weight_gradient_phases_are_flat_rows_of_their_kernel_columns():
    """``W_grad`` of a stride-2 transposed convolution: each kernel phase reads ``X`` at the
    summed position alone (``(2*kq + 2*t - 2*kq) // 2`` folded to ``t``), so its ``(o, ky, kx)``
    columns flatten into one row; with no more columns than twice the 32 input channels, they
    are the rows of ``W_grad_p00_rows[(o, ky, kx), c]`` (passes/flatten_rows.py)."""
    rng = np.random.default_rng(12)
    X, W, Y = _transposed(2, 32, 16, 8, 4, 2, 1)
    H = tc.placeholder(Y.shape, name="H")
    _, dW = tc.gradient(Y, [X, W], head=H)
    ins = [X, W, H]
    text = _cpu_text(dW, ins)
    for tag in ("00", "01", "10", "11"):
        assert f"W_grad_p{tag}_rows: float32[64, 32]" in text
    _matches_the_evaluator(dW, ins, rng)


@pytest.mark.parametrize("hw", [16, 13])
def test_stride_one_dilated_input_gradient_is_not_split(hw):
    """The input gradient of a stride-1, dilation-2 3x3 convolution: its windows' bounds
    divide by 2 (the image edges clip the kernel), but every phase sums the whole kernel
    where nothing is clipped -- one dense dilated convolution, left unsplit (no ``_p00``
    stage) and read as an implicit GEMM over the padded head; results match the evaluator
    in the interpreter and compiled."""
    X, W, H, dX = _strided_input_gradient(8, 32, hw, 3, 1, 2, dilation=2)
    text = _cpu_text(dX, [X, W, H])
    assert "_p00" not in text and "_phases" not in text and "X_grad_rows" in text
    rng = np.random.default_rng(hw)
    arrays = _arrays([X, W, H], rng)
    (want,) = tc.evaluate([dX], dict(zip([X, W, H], arrays)))
    func, consts = pipeline.lower([dX], [X, W, H], target_name="llvm")
    (got,) = run(func, arrays, constants=consts)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(tc.build(dX, [X, W, H])(*arrays), want, rtol=1e-5, atol=1e-4)
