"""Inputs that used to give a wrong or foreign answer without a word now raise a TecompError
at the earliest point: declaration (an output axis reduced over, a Python bool as a condition,
a division by the constant 0), the call (a divisor of sizes that is 0, sizes too large to
allocate), the gradient of a forward that the bounds proofs refuse.  The division semantics
for divisors computed from data are the same in the evaluator, LLVM and CUDA."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc

A = tc.placeholder((4, 3), name="A")
X = tc.placeholder((4,), name="X")


# ---------------------------------------------------------------- 1. data axis as reduce axis
def test_output_axis_as_reduction_axis_is_refused():
    with pytest.raises(tc.DeclarationError, match=r"compute 'S'.*'i' is an axis of the tensor "
                       r"being computed, not a reduction axis"):
        tc.compute((4,), lambda i: tc.sum(A[i, 0], axis=i), name="S")
    with pytest.raises(tc.DeclarationError, match="'j' is an axis"):
        tc.compute((4, 3), lambda i, j: tc.max(A[i, j], axis=[j]), name="M")


# ---------------------------------------------------------------- 2. Python bool as condition
@pytest.mark.parametrize("make", [
    lambda i: tc.if_then_else(tc.all(i % 2 == 0, i >= 0), X[i], 0.0),
    lambda i: tc.if_then_else(tc.any(i >= 3, i == 0), X[i], 0.0),
    lambda i: tc.if_then_else(i == 0, X[i], 0.0),
    lambda i: tc.if_then_else((i >= 1) & (i != 2), X[i], 0.0),
    lambda i: tc.if_then_else((i == 1) | (i >= 2), X[i], 0.0),
    lambda i: tc.sum(A[i, tc.reduce_axis(3, "k")], axis=tc.reduce_axis(3, "k"),
                     where=i == 1),
    lambda i: tc.if_then_else(np.bool_(True), X[i], 0.0),
], ids=["all", "any", "if_then_else", "and", "or", "where", "numpy"])
def test_python_bool_condition_is_refused(make):
    with pytest.raises(tc.DeclarationError, match=r"compute 'Y'.*the condition is the Python "
                       r"value (True|False).*tc\.eq"):
        tc.compute((4,), make, name="Y")


def test_expression_conditions_still_work():
    Y = tc.compute((4,), lambda i: tc.if_then_else(tc.all(tc.eq(i % 2, 0), i >= 0), X[i], 0.0),
                   name="Y")
    x = np.arange(1, 5, dtype=np.float32)
    np.testing.assert_array_equal(tc.build(Y, [X])(x), [1, 0, 3, 0])
    K = tc.compute((4,), lambda i: tc.if_then_else(tc.const(True), X[i], 0.0), name="K")
    np.testing.assert_array_equal(tc.evaluate([K], {X: x})[0], x)


# ---------------------------------------------------------------- 3. division by zero
@pytest.mark.parametrize("op", ["//", "%"])
def test_division_by_constant_zero_is_refused(op):
    fn = (lambda i: A[i // 0, 1]) if op == "//" else (lambda i: A[i % 0, 1])
    with pytest.raises(tc.DeclarationError, match=rf"compute 'D'.*integer division by zero in "
                       rf"\(i\) {op} \(0\)"):
        tc.compute((4,), fn, name="D")


def _size_divided():
    n = tc.var("n")
    Xn = tc.placeholder((8,), name="X")
    return n, Xn, tc.compute((8,), lambda i: Xn[i // n] + Xn[i % n], name="D")


def test_zero_size_divisor_raises_at_call_and_in_the_evaluator():
    n, Xn, D = _size_divided()
    x = np.arange(8, dtype=np.float32)
    k = tc.build(D, [Xn, n])
    with pytest.raises(tc.ArgumentError, match=r"kernel 'D': integer division by zero in the "
                       r"index of tensor 'X': the divisor n of i (//|%) n is 0 for n = 0; "
                       r"nothing was run"):
        k(x, 0)
    with pytest.raises(tc.EvaluationError, match="tensor 'X': the divisor n .* is 0 for n = 0"):
        tc.evaluate([D], {Xn: x, n: 0})
    for v in (1, 3, 8):  # non-zero divisors: kernel == evaluator == NumPy
        want = x[np.arange(8) // v] + x[np.arange(8) % v]
        np.testing.assert_array_equal(k(x, v), want)
        np.testing.assert_array_equal(tc.evaluate([D], {Xn: x, n: v})[0], want)


def test_zero_size_divisor_on_cuda_raises_before_the_device(monkeypatch):
    from tecomp.codegen.cuda.kernel import CudaKernel
    from tecomp.passes.schedule.gpu import schedule_gpu

    n, Xn, D = _size_divided()
    k = CudaKernel(schedule_gpu(tc.lower(D, [Xn, n]).func), inputs=[Xn, n], outputs=[D],
                   check=False)
    monkeypatch.setattr(k, "_device_outputs", lambda *a: pytest.fail("reached the device"))
    with pytest.raises(tc.ArgumentError, match="divisor n of i (//|%) n is 0 for n = 0"):
        k.launch([np.zeros(8, np.float32), 0], device=object())


def _data_divided():
    a = tc.placeholder((6,), name="a", dtype="int64")
    d = tc.placeholder((6,), name="d", dtype="int64")
    Q = tc.compute((6,), lambda i: a[i] // d[i], name="Q")
    R = tc.compute((6,), lambda i: a[i] % d[i], name="R")
    args = [np.array([7, -7, 5, 0, -3, 9]), np.array([2, 2, 0, 0, 0, -1])]
    return [Q, R], [a, d], args


def test_data_dependent_zero_divisor_acts_as_one_in_evaluator_and_llvm():
    outs, ins, args = _data_divided()
    want = tc.evaluate(outs, dict(zip(ins, args)))
    np.testing.assert_array_equal(want[0], [3, -4, 5, 0, -3, -9])  # x // 0 == x
    np.testing.assert_array_equal(want[1], [1, 1, 0, 0, 0, 0])  # x % 0 == 0
    got = tc.build(outs, ins)(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_data_dependent_zero_divisor_acts_as_one_on_cuda():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "codegen" / "cuda"))
    from cuda_emulator import EmulatedDevice, compile_emulated, gxx_available

    from tecomp.codegen.cuda.kernel import CudaKernel
    from tecomp.passes.schedule.gpu import schedule_gpu

    if not gxx_available():
        pytest.skip("g++ is not available")
    outs, ins, args = _data_divided()
    k = CudaKernel(schedule_gpu(tc.lower(outs, ins).func), inputs=ins, outputs=outs, check=False)
    compile_emulated([k.source])
    got = k.launch(args, device=EmulatedDevice())
    for g, w in zip(got, tc.evaluate(outs, dict(zip(ins, args)))):
        np.testing.assert_array_equal(np.asarray(g), w)


# ---------------------------------------------------------------- 4. gradient of a refused forward
def test_gradient_of_out_of_bounds_reduction_is_refused_like_its_forward():
    A10 = tc.placeholder((10,), name="A")
    r = tc.reduce_axis(12, name="r")
    S = tc.compute((), lambda: tc.sum(A10[r], axis=r), name="S")
    with pytest.raises(tc.LoweringError) as forward:
        tc.build(S, [A10])
    with pytest.raises(tc.LoweringError) as backward:
        tc.gradient(S, [A10])
    assert str(backward.value) == str(forward.value)
    assert "out-of-bounds read of tensor 'A' in A[r]" in str(forward.value)
    with pytest.raises(tc.LoweringError):
        tc.jacobian(S, A10)


def test_gradient_of_in_bounds_reduction_still_builds():
    A10 = tc.placeholder((10,), name="A")
    r = tc.reduce_axis(10, name="r")
    S = tc.compute((), lambda: tc.sum(A10[r] * A10[r], axis=r), name="S")
    (g,) = tc.gradient(S, [A10])
    a = np.arange(10, dtype=np.float32)
    np.testing.assert_allclose(tc.build(g, [A10])(a), 2 * a)


# ---------------------------------------------------------------- 5. huge sizes
def test_huge_size_argument_raises_before_allocating():
    m = tc.var("m")
    B = tc.placeholder((5,), name="B")
    k = tc.build(tc.compute((m,), lambda i: B[i], name="C"), [B, m])
    b = np.ones(5, np.float32)
    for size in (7, 2**40):
        with pytest.raises(tc.IndexBoundsError, match=f"m = {size} the read of tensor 'B'"):
            k(b, size)
    # no access to break, but too large to allocate: a clean ArgumentError, not MemoryError
    big = tc.build(tc.compute((m,), lambda i: tc.cast(i, "float32"), name="F"), [m])
    with pytest.raises(tc.ArgumentError, match=r"kernel 'F': cannot allocate the results"):
        big(2**50)
    np.testing.assert_array_equal(big(3), [0, 1, 2])
