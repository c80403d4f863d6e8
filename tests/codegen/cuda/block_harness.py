"""Shared pieces of the block-schedule tests: programs written with ``tc.compute``, lowered by
``tc.lower``, built as CUDA kernels (no compile check), run on the CPU emulation and compared
with ``tc.evaluate`` (NaN where the evaluator has NaN)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import tecomp as tc
from tecomp.codegen.cuda.kernel import CudaKernel
from tecomp.passes.schedule.gpu import schedule_gpu


@dataclass
class Prog:
    name: str
    outputs: list[Any]
    inputs: list[Any]
    args: Callable[[np.random.Generator], list[np.ndarray]]
    rtol: float = 1e-5
    atol: float = 1e-5


def build(p: Prog) -> CudaKernel:
    low = tc.lower(p.outputs, p.inputs, name=p.name)
    return CudaKernel(schedule_gpu(low.func), inputs=p.inputs, outputs=p.outputs,
                      hidden=low.constants, check=False)


def kinds(kernel: CudaKernel) -> list[str]:
    """One letter per stage: T tiled, B block reduction, P private accumulators combined per
    block, S serial, g plain grid-stride."""
    out = []
    for st in kernel.program.stages:
        out.append("T" if st.tiling else "B" if st.block_reduce else "P" if st.private
                   else "S" if st.serial else "g")
    return out


def assert_matches(p: Prog, args: list[np.ndarray], got: Any) -> None:
    """``got`` equals the evaluator's outputs: same dtype and shape, NaN at the same places,
    integers exactly, floats within the program's tolerance."""
    binds = dict(zip(p.inputs, args))
    want = tc.evaluate(p.outputs, binds)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w)
            continue
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        ok = ~np.isnan(w)
        np.testing.assert_allclose(g[ok], w[ok], rtol=p.rtol, atol=p.atol)


def f32(r: np.random.Generator, *shape: int) -> np.ndarray:
    return r.standard_normal(shape).astype(np.float32)

