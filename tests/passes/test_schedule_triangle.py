"""Triangular "i, k, j" sums cut per block of rows (passes/schedule/cpu/triangle.py): the
rectangles take the register tiles, every shape of moving bound matches the evaluator in the
interpreter and compiled (odd sizes, 1 and 2 threads), and the causal attention gradient
keeps its values."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_order import lower_program
from loop_interp import random_inputs, run

import tecomp as tc
from tecomp.host import Host, describe
from tecomp.loop_printer import format_func
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.microkernel import tile_shape
from tecomp.passes.schedule.cpu.triangle import split_triangles

#: AVX2-like: 4 x 8 float32 register tiles (8 registers of 8 lanes, 6 rows), so blocks of 24
AVX2 = Host(vector_bits=256, fma=True, cores=2, l1d=32768, l2=262144, l3=8388608)


def _triangles(n: int, k: int, m: int, dtype: str = "float32"):
    """Sums whose range moves with the row: ``t <= i`` (lower), ``t >= i`` (upper), ``t < i +
    3`` capped at ``k`` (a ``min``), ``t >= i - 2`` (a ``max`` with 0), each scaled (an
    epilogue)."""
    A = tc.placeholder((n, k), name="A", dtype=dtype)
    B = tc.placeholder((k, m), name="B", dtype=dtype)
    t = tc.reduce_axis(k, name="t")
    lower = tc.compute((n, m), lambda i, j: 0.5 * tc.sum(A[i, t] * B[t, j], axis=t,
                                                         where=t <= i), name="lower")
    upper = tc.compute((n, m), lambda i, j: tc.sum(A[i, t] * B[t, j], axis=t,
                                                   where=t >= i), name="upper")
    ahead = tc.compute((n, m), lambda i, j: tc.sum(A[i, t] * B[t, j], axis=t,
                                                   where=t < i + 3), name="ahead")
    behind = tc.compute((n, m), lambda i, j: tc.sum(A[i, t] * B[t, j], axis=t,
                                                    where=t >= i - 2), name="behind")
    # zero elimination turns each ``where`` into the reduction's bounds, which move with i
    return tc.optimize([lower, upper, ahead, behind]), [A, B]


def _kernel(func):
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import compile_function

    return Kernel(func, compile_function(func, disk=None), target="llvm")


def test_rectangles_take_register_tiles_and_triangles_stay_small():
    host = describe()
    mr, nr = tile_shape(host, 4)
    outs, ins = _triangles(9 * mr + 3, 9 * mr + 3, 2 * nr + 1)
    for out in outs:
        func, _ = lower_program([out], ins)
        split = split_triangles(func, host)
        assert split is not func, out.name
        assert f"step {4 * mr})" in format_func(split)  # blocks of four tiles of rows
        text = format_func(schedule_cpu(func, host=host))
        assert f": float32[{mr}, {nr}] (local)" in text, out.name  # the rectangle's tiles
    func, _ = lower_program([outs[0]], ins)
    assert split_triangles(split_triangles(func, host), host) == split_triangles(func, host)


def test_rectangular_and_short_sums_are_left_alone():
    host = describe()
    mr, _ = tile_shape(host, 4)
    A = tc.placeholder((64, 64), name="A")
    B = tc.placeholder((64, 64), name="B")
    t = tc.reduce_axis(64, name="t")
    C = tc.compute((64, 64), lambda i, j: tc.sum(A[i, t] * B[t, j], axis=t), name="C")
    func, _ = lower_program([C], [A, B])
    assert split_triangles(func, host) is func
    outs, ins = _triangles(2 * 4 * mr - 1, 40, 40)  # fewer rows than two blocks
    func, _ = lower_program(outs, ins)
    assert split_triangles(func, host) is func


@pytest.mark.parametrize("seed", range(2))
def test_split_sums_match_in_the_interpreter(seed):
    rng = np.random.default_rng(seed)
    n, k, m = (int(x) for x in rng.integers(49, 70, size=3))
    outs, ins = _triangles(n, k, m)
    func, consts = lower_program(outs, ins)
    split = split_triangles(func, AVX2)
    assert split is not func
    arrays = random_inputs(ins, rng)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    plain = run(func, arrays, constants=consts)
    got = run(split, arrays, constants=consts)
    for g, p, w, out in zip(got, plain, want, outs):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4, err_msg=f"{out.name} {n, k, m}")
        if out.name in ("lower", "ahead"):  # moving upper bounds keep the order of terms
            np.testing.assert_array_equal(g, p, err_msg=out.name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("host", ["native", "avx2"])
def test_compiled_split_sums_match_the_evaluator(dtype, host, monkeypatch):
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    target = describe() if host == "native" else AVX2
    rng = np.random.default_rng(11)
    n, k, m = 101, 77, 45
    outs, ins = _triangles(n, k, m, dtype)
    func, _ = lower_program(outs, ins)
    kernel = _kernel(schedule_cpu(func, host=target))
    arrays = [a.astype(dtype) for a in random_inputs(ins, rng)]
    want = tc.evaluate(outs, dict(zip(ins, [a.astype(np.float64) for a in arrays])))
    tol = 1e-4 if dtype == "float32" else 1e-12
    for threads in (1, 2):
        kernel.threads = threads
        for g, w, out in zip(kernel(*arrays), want, outs):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol,
                                       err_msg=f"{out.name}, {threads} thread(s)")


def test_causal_attention_gradient_matches_the_evaluator_and_finite_differences():
    """The compiled float64 gradient (its dQ and dK sums are triangles) against the evaluator,
    and the evaluator's against finite differences."""
    from gradcheck import check_gradient

    L, d = 70, 24
    Q, K, V = (tc.placeholder((L, d), name=n, dtype="float64") for n in "QKV")
    c = tc.reduce_axis(d, name="c")
    S = tc.compute((L, L), lambda i, j: tc.if_then_else(
        j <= i, tc.sum(Q[i, c] * K[j, c], axis=c) * 0.25, -1e30), name="S")
    P = tc.ops.softmax(S)
    t = tc.reduce_axis(L, name="t")
    O = tc.compute((L, d), lambda i, e: tc.sum(P[i, t] * V[t, e], axis=t), name="O")
    H = tc.placeholder((L, d), name="H", dtype="float64")
    grads = tc.gradient(O, [Q, K, V], head=H)
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((L, d)) for _ in range(4)]
    kernel = tc.build(grads, [Q, K, V, H])
    text = str(tc.lower(grads, [Q, K, V, H], target="llvm"))
    mr, _ = tile_shape(describe(), 8)
    assert f"step {4 * mr})" in text  # the triangles were cut
    want = tc.evaluate(grads, dict(zip([Q, K, V, H], arrays)))
    for g, w in zip(kernel(*arrays), want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    check_gradient(O, [Q, K, V], dict(zip([Q, K, V], arrays[:3])), head=arrays[3], seed=3)
