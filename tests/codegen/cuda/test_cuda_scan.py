"""Scans on the CUDA backend: forward and gradient programs of the scan cases, run on the CPU
emulation of the generated CUDA source against ``tc.evaluate``, and compiled with nvcc."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_emulator import EmulatedDevice, emulated_fixture

import tecomp as tc
from tecomp.codegen.cuda.compile import compile_many_nvcc, nvcc_path
from tecomp.codegen.cuda.kernel import CudaKernel
from tecomp.passes.schedule.gpu import schedule_gpu
from tests.passes.autodiff.scan_cases import CASES

NAMES = ["cumsum", "cumprod_zeros", "fibonacci", "elman", "lstm", "reduce_gather",
         "state_gather"]


def _program(name):
    c = CASES[name](np.random.default_rng(3))
    outs = [c.output, *tc.gradient(c.output, c.inputs)]
    ins = list(c.arrays)
    low = tc.lower(outs, ins, name=name)
    kernel = CudaKernel(schedule_gpu(low.func), inputs=ins, outputs=outs,
                        hidden=low.constants, check=False)
    return c, outs, ins, kernel


PROGRAMS = {name: _program(name) for name in NAMES}
emulated = emulated_fixture({name: p[3] for name, p in PROGRAMS.items()})


@pytest.mark.parametrize("name", NAMES)
def test_scan_program_matches_the_evaluator(emulated, name):
    c, outs, ins, kernel = PROGRAMS[name]
    got = kernel.launch([c.arrays[t] for t in ins], device=EmulatedDevice())
    want = tc.evaluate(outs, c.arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_scan_programs_compile_with_nvcc():
    bins = compile_many_nvcc([p[3].source for p in PROGRAMS.values()], "sm_90")
    assert len(bins) == len(PROGRAMS)
    assert all(b.image[:4] == b"\x7fELF" for b in bins)


def test_threaded_steps_on_the_emulation():
    from cuda_emulator import compile_emulated

    from tests.passes.autodiff.scan_cases import elman

    c = elman(np.random.default_rng(5), T=3, B=64, H=64, I=2)
    outs = [c.output, *tc.gradient(c.output, c.inputs)]
    ins = list(c.arrays)
    low = tc.lower(outs, ins, name="elman_wide")
    kernel = CudaKernel(schedule_gpu(low.func), inputs=ins, outputs=outs,
                        hidden=low.constants, check=False)
    compile_emulated([kernel.source])
    got = kernel.launch([c.arrays[t] for t in ins], device=EmulatedDevice())
    for g, w in zip(got, tc.evaluate(outs, c.arrays)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
