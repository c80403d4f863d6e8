"""Cache blocking of "i, k, j" sums (passes/schedule/cpu/gemm.py): block sizes from the host's
caches, the blocked structure, bit-identical results in the loop-IR interpreter, and compiled
kernels (odd and symbolic sizes, gradients) against the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_order import lower_program
from loop_interp import random_inputs, run

import tecomp as tc
from tecomp.host import Host, describe
from tecomp.loopir import For, Seq
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.gemm import block_caches, block_sizes

#: a host with tiny caches, so that small programs are blocked in every dimension
TINY = Host(vector_bits=256, fma=True, cores=2, l1d=512, l2=1024, l3=8192)


def _matmul(n, k, m, dtype="float32"):
    """``([C], [A, B])`` of ``C = A @ B``."""
    A = tc.placeholder((n, k), name="A", dtype=dtype)
    B = tc.placeholder((k, m), name="B", dtype=dtype)
    r = tc.reduce_axis(k, name="r")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [C], [A, B]


def _loops(s):
    if isinstance(s, For):
        yield s
        yield from _loops(s.body)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from _loops(x)
    elif hasattr(s, "body"):
        yield from _loops(s.body)


def test_block_sizes_follow_the_cache_formulas():
    host = describe()
    for itemsize in (4, 8):
        lanes = host.vector_bits // (8 * itemsize)
        mc, kc, nc = block_sizes(host, itemsize, 4, 4)
        assert nc % lanes == 0 and 8 * nc * itemsize <= max(host.l1d, 8 * lanes * itemsize)
        assert kc % 4 == 0 and kc * nc * itemsize <= max(host.l2 // 2, 4 * nc * itemsize)
        assert mc % 4 == 0 and 4 <= mc <= 512
    assert block_sizes(TINY, 4, 4, 4) == (32, 16, 8)  # 8192 / 256; 1024 / 64; 512 / 64
    mc, _, _ = block_sizes(TINY, 4, 4, 4, cores=2, m=40)
    assert mc == 20  # 2 blocks of rows (a multiple of the 2 cores), 20 rows each


def test_matmul_is_blocked_in_every_dimension():
    func, _ = lower_program(*_matmul(21, 45, 23))
    out = block_caches(func, TINY).body
    assert isinstance(out, For) and out.kind == "parallel" and out.step == 12
    steps: dict[str, set[int]] = {}
    for x in _loops(out):
        steps.setdefault(x.var.name, set()).add(x.step)
    assert steps["jc"] == {8} and steps["rc"] == {16}  # nc and kc
    assert steps["i"] == {1, 4} and steps["r"] == {1, 4}  # block_rows' tile and its tails
    small, _ = lower_program(*_matmul(8, 8, 8))
    assert block_caches(small, describe()) is small  # B fits in L2: left to block_rows


def _random_case(rng: np.random.Generator):
    """A random contraction with tails in every dimension: a matmul (float32 or int64), a
    batched matmul, or the gradients of a dense layer."""
    kind = int(rng.integers(0, 3))
    n, k, m = (int(x) for x in rng.integers(12, 40, size=3))
    if kind == 0:
        dtype = str(rng.choice(["float32", "int64"]))
        outs, ins = _matmul(n, k, m, dtype)
        return outs, ins, [n, k, m, dtype]
    if kind == 1:
        b = int(rng.integers(1, 4))
        A = tc.placeholder((b, n, k), name="A")
        B = tc.placeholder((b, k, m), name="B")
        r = tc.reduce_axis(k, name="r")
        out = tc.compute((b, n, m), lambda p, i, j: tc.sum(A[p, i, r] * B[p, r, j], axis=r),
                         name="BC")
        return [out], [A, B], [b, n, k, m]
    X = tc.placeholder((n, k), name="X")
    W = tc.placeholder((m, k), name="W")
    r = tc.reduce_axis(k, name="r")
    Y = tc.compute((n, m), lambda i, j: tc.sum(X[i, r] * W[j, r], axis=r), name="Y")
    H = tc.placeholder((n, m), name="H")
    return list(tc.gradient(Y, [X, W], head=H)), [X, W, H], [n, k, m, "dense grad"]


@pytest.mark.parametrize("seed", range(12))
def test_blocked_programs_are_bit_identical_in_the_interpreter(seed):
    rng = np.random.default_rng(seed)
    outs, ins, sizes = _random_case(rng)
    func, consts = lower_program(outs, ins)
    blocked = block_caches(func, TINY)
    assert blocked is not func, sizes
    arrays = random_inputs(ins, rng)
    got = run(blocked, arrays, constants=consts)
    plain = run(func, arrays, constants=consts)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    for g, p, w in zip(got, plain, want):
        np.testing.assert_array_equal(g, p, err_msg=f"seed {seed}, sizes {sizes}")
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4, err_msg=f"sizes {sizes}")


def _kernel(func):
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import compile_function

    return Kernel(func, compile_function(func, disk=None), target="llvm")


@pytest.mark.parametrize("seed", range(6))
def test_compiled_blocked_kernels_match_the_evaluator(seed, monkeypatch):
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)  # thread even tiny calls
    rng = np.random.default_rng(100 + seed)
    outs, ins, sizes = _random_case(rng)
    func, consts = lower_program(outs, ins)
    assert not consts
    assert block_caches(func, TINY) is not func, sizes
    kernel = _kernel(schedule_cpu(func, host=TINY))
    arrays = random_inputs(ins, rng)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    for threads in (1, 2):
        kernel.threads = threads
        got = kernel(*arrays)
        got = [got] if isinstance(got, np.ndarray) else list(got)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4,
                                       err_msg=f"sizes {sizes}, {threads} thread(s)")


def test_symbolic_sizes_compile_and_match(monkeypatch):
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    n, k, m = tc.var("n"), tc.var("k"), tc.var("m")
    A = tc.placeholder((n, k), name="A")
    B = tc.placeholder((k, m), name="B")
    r = tc.reduce_axis(k, name="r")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    func = schedule_cpu(lower_program([C], [A, B])[0], host=TINY)
    assert any(x.var.name == "jc" for x in _loops(func.body))
    kernel = _kernel(func)
    rng = np.random.default_rng(7)
    for rows, inner, cols in [(1, 1, 1), (3, 17, 5), (29, 31, 33), (0, 4, 4), (13, 0, 9)]:
        a = rng.standard_normal((rows, inner)).astype(np.float32)
        b = rng.standard_normal((inner, cols)).astype(np.float32)
        for threads in (1, 2):
            kernel.threads = threads
            np.testing.assert_allclose(kernel(a, b), a.astype(np.float64) @ b, rtol=1e-5,
                                       atol=1e-5, err_msg=f"{rows}x{inner}x{cols}")
