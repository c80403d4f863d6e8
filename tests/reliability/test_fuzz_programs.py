"""Random programs (hypothesis): JIT == evaluator, optimize preserves results, gradients ==
central finite differences, inputs never written, outputs never alias inputs: 280 programs
(derandomized, so every run draws the same ones; ``benchmarks/soak.py`` runs many more)."""

import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tecomp as tc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gradcheck import check_gradient  # noqa: E402
from strategies import programs  # noqa: E402

FAST = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def tolerance(dtype):
    return (2e-4, 2e-5) if np.dtype(dtype) == np.float32 else (1e-9, 1e-12)


def assert_same(got, want, label):
    assert got.shape == want.shape, f"{label}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype} != {want.dtype}"
    if got.dtype.kind == "f":
        rtol, atol = tolerance(got.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=label)
    else:
        np.testing.assert_array_equal(got, want, err_msg=label)


def check_jit(prog, seed):
    args = prog.arrays(seed)
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want = tc.evaluate(prog.outputs, prog.bindings(args))
    kernel = tc.build(prog.outputs, prog.inputs)
    got = kernel(*args)
    for a, c in zip(args, copies):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, c, err_msg="the kernel wrote an input")
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"output {k} of\n{prog.text}")
        for a in args:
            if isinstance(a, np.ndarray):
                assert not np.shares_memory(g, a), "an output aliases an input"


def check_out_of_range(prog, seed, kernel=None):
    """With one gather index out of range: the kernel raises ``IndexBoundsError`` exactly
    when the evaluator raises (a read that is evaluated), else both give the same results.
    Any other outcome fails.  ``kernel``: the program's kernel when
    built already (else ``tc.build``)."""
    args = prog.arrays(seed, out_of_range=True)
    try:
        want = tc.evaluate(prog.outputs, prog.bindings(args))
        failed = None
    except tc.EvaluationError as err:
        want, failed = None, str(err)
    if kernel is None:
        kernel = tc.build(prog.outputs, prog.inputs)
    try:
        got = kernel(*args)
    except tc.IndexBoundsError as err:
        assert want is None, f"the kernel raised ({err}) where the evaluator did not:\n" \
            f"{prog.text}"
        return
    assert want is not None, f"the evaluator raised ({failed}) where the kernel did not:\n" \
        f"{prog.text}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"output {k} of\n{prog.text}")


@given(programs(), st.integers(0, 2**16))
@settings(FAST, max_examples=100)
def test_jit_matches_evaluator(prog, seed):
    check_jit(prog, seed)


@given(programs(), st.integers(0, 2**16))
@settings(FAST, max_examples=40)
def test_out_of_range_gathers_agree(prog, seed):
    check_out_of_range(prog, seed)


@given(programs(), st.integers(0, 2**16))
@settings(FAST, max_examples=100)
def test_optimize_preserves_results(prog, seed):
    args = prog.arrays(seed)
    b = prog.bindings(args)
    want = tc.evaluate(prog.outputs, b)
    got = tc.evaluate(tc.optimize(prog.outputs), b)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"optimized output {k} of\n{prog.text}")


@given(programs(smooth=True, dtype="float64"), st.integers(0, 2**16))
@settings(FAST, max_examples=40)
def test_gradient_matches_finite_differences(prog, seed):
    args = prog.arrays(seed)
    out = prog.outputs[-1]
    check_gradient(out, prog.floats, prog.bindings(args), seed=seed, rtol=1e-5, atol=1e-8,
                   optimize=bool(seed % 2))
