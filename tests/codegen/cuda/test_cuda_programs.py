"""The programs of ``benchmarks/gpu.py`` (forward and gradient: matmul with a symbolic size,
conv2d with padding/stride/dilation, pooling, softmax, layer norm, gather, flatten via // and
%, cumsum via where, a scalar loss, float16 and int32 outputs, the butterfly DCT in float32 and
float16), at small sizes, lowered by ``tc.lower`` and run on the CPU emulation of the generated
CUDA source against ``tc.evaluate``; their sources also compile with nvcc (one call for all)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from cuda_emulator import EmulatedDevice, compile_emulated, emulated_fixture

import tecomp as tc
from tecomp.codegen.cuda.compile import compile_many_nvcc, nvcc_path
from tecomp.codegen.cuda.kernel import CudaKernel
from tecomp.passes.schedule.gpu import schedule_gpu

ROOT = Path(__file__).resolve().parents[3]


def _load_bench():
    spec = importlib.util.spec_from_file_location("tecomp_gpu_bench", ROOT / "benchmarks/gpu.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


BENCH = _load_bench()
CASES = {c.name: c for c in BENCH.suite(small=True)}


def _kernel(case):
    low = tc.lower(case.outputs, case.inputs, name=case.name)
    return CudaKernel(schedule_gpu(low.func), inputs=case.inputs, outputs=case.outputs,
                      hidden=low.constants, check=False)


KERNELS = {name: _kernel(c) for name, c in CASES.items()}


emulated = emulated_fixture(KERNELS)


@pytest.mark.parametrize("name", list(CASES))
def test_program_matches_the_evaluator(emulated, name):
    case, kernel = CASES[name], KERNELS[name]
    args = case.args(np.random.default_rng(7))
    dev = EmulatedDevice()
    got = kernel.launch(args, device=dev)
    assert BENCH.check(case, kernel, args, got) <= 1.0
    # constant tensors (the DCT factors) stay on the device; nothing else may
    assert len(dev.mem) == len(kernel._hidden), "device memory leaked"
    # one launch per stage, in program order
    assert [x[0] for x in dev.launches] == [st.name for st in kernel.program.stages]


def test_scheduling_of_the_suite():
    """Every stage of the suite maps onto the grid except the scalar loss's init and copy,
    and only the gather gradient needs atomics (its scatter-add)."""
    serial = [st.name for k in KERNELS.values() for st in k.program.stages if st.serial]
    assert serial == ["scalar_loss_k0", "scalar_loss_k2"]
    atomic = {k.name for k in KERNELS.values() for st in k.program.stages if st.atomic}
    assert atomic == {"gather_grad"}
    private = {k.name for k in KERNELS.values() for st in k.program.stages if st.private}
    assert private == {"scalar_loss"}
    # matmul and conv map one thread per output element
    assert [m.var.name for m in KERNELS["matmul"].program.stages[0].mapped] == ["i", "j"]
    assert len(KERNELS["conv2d"].program.stages[0].mapped) == 4


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_suite_compiles_with_nvcc():
    bins = compile_many_nvcc([k.source for k in KERNELS.values()], "sm_90")
    assert all(b.image[:4] == b"\x7fELF" for b in bins)


def test_tc_build_cuda_end_to_end(emulated):
    case = CASES["matmul"]
    kernel = tc.build(case.outputs, case.inputs, target="cuda", name="matmul_e2e")
    assert kernel.target == "cuda" and kernel.source.count("__global__") == 1
    assert kernel.compile_check.startswith(("ok: ", "skipped: "))
    assert kernel.cost.flops != 0
    compile_emulated([kernel.source])
    args = case.args(np.random.default_rng(3))
    (got,) = kernel.launch(args, device=EmulatedDevice())  # a list of outputs: a tuple back
    np.testing.assert_allclose(got, args[0] @ args[1], rtol=1e-5, atol=1e-5)


def test_benchmark_stops_cleanly_without_a_gpu(capsys):
    from tecomp.codegen.cuda.runtime import device_status

    if device_status().startswith("ok"):
        pytest.skip("a GPU is present")
    assert BENCH.main(["--only", "flatten"]) == 2
    out = capsys.readouterr().out
    assert "no CUDA device: " in out and "nothing was run" in out



def test_bounds_checked_gather_and_scatter(emulated):
    """tc.build checks data-dependent indices on CUDA too: the racy error record does not stop
    the stages from mapping onto the grid, and a bad index raises IndexBoundsError."""
    for name in ("gather", "gather_grad"):
        case = CASES[name]
        kernel = tc.build(case.outputs, case.inputs, target="cuda", name=f"{name}_checked")
        assert kernel._bounds is not None
        assert not any(st.serial for st in kernel.program.stages)
        compile_emulated([kernel.source])
        args = case.args(np.random.default_rng(5))
        got = kernel.launch(args, device=EmulatedDevice())
        assert BENCH.check(case, kernel, args, got) <= 1.0
        bad = list(args)
        bad[1] = bad[1].copy()
        bad[1][4] = 10**6
        dev = EmulatedDevice()
        with pytest.raises(tc.IndexBoundsError, match=r"tensor 'EM(_grad)?'.*index 1000000"):
            kernel.launch(bad, device=dev)
        assert not dev.mem


def test_block_schedules_at_full_size():
    """At the benchmark's sizes the static rules pick the block-level schedules: tiles for the
    matmul and the convolutions, a block per row for softmax and layer norm (1024 rows of
    512), block-combined accumulators for the scalar loss (schedule only, nothing is run)."""
    full = {c.name: c for c in BENCH.suite() if c.name in (
        "matmul", "conv2d", "conv2d_s2d2", "softmax", "layer_norm", "scalar_loss")}
    got = {name: BENCH.schedules(_kernel(c)) for name, c in full.items()}
    assert got["matmul"] == "T"
    assert "T" in got["conv2d"] and "T" in got["conv2d_s2d2"]
    assert got["softmax"].count("B") == 2 and got["layer_norm"].count("B") == 2
    assert "P" in got["scalar_loss"]
