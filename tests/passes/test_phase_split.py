"""Output phases of strided windows (passes/phase_split.py): a transposed convolution becomes
one stride-1 convolution per phase (then an implicit GEMM), results match the evaluator in
the interpreter and compiled, and windows whose phases differ in width are left alone."""

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


def test_phases_of_different_widths_are_left_to_the_residue_split():
    """A 3-wide kernel at stride 2: the input gradient's phases have windows of 2 and 1."""
    X = tc.placeholder((2, 4, 16, 16), name="X")
    W = tc.placeholder((8, 4, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    dX, _ = tc.gradient(Y, [X, W], head=H)
    assert "_phases" not in _cpu_text(dX, [X, W, H])
