"""The one pipeline (tecomp.pipeline): the choice optimize=False travels with the tensors, and
tc.lower shows a target's scheduled loop IR."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import pipeline
from tecomp.loopir import For
from tecomp.lowering_api import Lowered


def _matmul():
    n = tc.var("n")
    A = tc.placeholder((n, 12), name="A", dtype="float64")
    B = tc.placeholder((12, 8), name="B", dtype="float64")
    k = tc.reduce_axis(12, name="k")
    C = tc.compute((n, 8), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _loops(s):
    from tecomp.stmt_functor import walk_stmt

    return [x for x in walk_stmt(s) if isinstance(x, For)]


def test_a_gradient_built_with_optimize_false_is_built_as_written():
    A, B, C = _matmul()
    raw = tc.gradient(C, [A, B], optimize=False)
    fast = tc.gradient(C, [A, B])
    sizes = {"n": 16}
    naive = tc.cost(raw, optimize=False, sizes=sizes)
    assert tc.cost(raw, sizes=sizes).flops == naive.flops  # not optimised by tc.cost either
    assert tc.cost(fast, sizes=sizes).flops < naive.flops / 4
    kernel = tc.build(raw, [A, B])
    assert kernel.ir == tc.lower(raw, [A, B], optimize=False).func
    assert kernel.ir != tc.build(fast, [A, B]).ir
    assert Lowered(kernel.ir).cost(sizes).flops == naive.flops
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 12)), rng.standard_normal((12, 8))
    want = tc.evaluate(fast, {A: a, B: b})
    for got, ref in zip(kernel(a, b), want):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_only_the_outputs_built_as_written_skip_optimisation():
    A, B, C = _matmul()
    (raw,) = tc.gradient(C, [A], optimize=False)
    (fast,) = tc.gradient(C, [B])
    seen = []
    real = pipeline.optimize_tensors

    def spy(tensors):
        seen.append(list(tensors))
        return real(tensors)

    mp = pytest.MonkeyPatch()
    mp.setattr(pipeline, "optimize_tensors", spy)
    try:
        tc.lower([raw, fast], [A, B])
    finally:
        mp.undo()
    assert seen == [[fast]]


def test_lower_for_a_target_shows_the_scheduled_loop_ir():
    A, B, C = _matmul()
    plain = tc.lower(C, [A, B])
    cpu = tc.lower(C, [A, B], target="llvm")
    from tecomp.passes.schedule.cpu import schedule_cpu

    assert cpu.func == schedule_cpu(plain.func, threads=True)
    assert cpu.func != plain.func and str(cpu) != str(plain)
    assert any(x.step > 1 for x in _loops(cpu.func.body))  # register-blocked rows
    assert not any(x.step > 1 for x in _loops(plain.func.body))
    gpu = tc.lower(C, [A, B], target="cuda")
    assert gpu.func.name == plain.func.name and str(gpu)
    with pytest.raises(tc.TecompError, match="unknown target 'tpu'"):
        tc.lower(C, [A, B], target="tpu")


def test_every_pass_of_a_build_is_logged_in_pipeline_order():
    A, B, C = _matmul()
    with tc.pass_log() as log:
        tc.build(tc.gradient(C, [A, B]), [A, B])
    names = log.names()
    order = ["autodiff", "zero_elimination", "simplify", "lower", "bounds_check",
             "codegen.llvm"]
    assert [n for n in names if n in order][-4:] == order[-4:]
    assert names.index("autodiff") < names.index("zero_elimination") < names.index("lower")


def test_targets_key_programs_the_same_way():
    from tecomp.codegen.cuda.target import CudaTarget
    from tecomp.codegen.llvm import LlvmTarget

    A, B, C = _matmul()
    func = tc.lower(C, [A, B]).func
    cpu, gpu = pipeline.target("llvm"), pipeline.target("cuda")
    assert isinstance(cpu, LlvmTarget) and isinstance(gpu, CudaTarget)
    assert cpu.key(func) == pipeline.target("llvm").key(func)
    assert cpu.key(func) != gpu.key(func)
    assert cpu.key(func) != LlvmTarget().key(func)  # the schedule's version is in the key
    assert cpu.schedule.version in cpu.version() and gpu.schedule.version in gpu.version()
    other = tc.lower(C, [A, B], name="other").func
    assert cpu.key(other) != cpu.key(func)


def test_explicit_optimize_true_optimises_a_gradient_built_as_written():
    A, B, C = _matmul()
    raw = tc.gradient(C, [A, B], optimize=False)
    sizes = {"n": 16}
    naive = tc.cost(raw, sizes=sizes).flops
    assert tc.cost(raw, sizes=sizes, optimize=True).flops < naive / 4
    assert tc.cost(raw, sizes=sizes, optimize=True).flops == tc.cost(
        tc.gradient(C, [A, B]), sizes=sizes).flops
