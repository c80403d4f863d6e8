"""Code for the host it runs on: 512-bit vectors on AVX-512 hosts, and correct code for a
host description without AVX-512 (as an AVX2 machine would get), checked against the
evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.llvm import build_kernel
from tecomp.host import describe, from_features, with_vector_bits
from tecomp.lowering_api import lower


def _without_avx512(features: str) -> str:
    parts = []
    for f in features.split(","):
        name = f[1:]
        if name.startswith(("avx512", "avx10", "evex512", "amx")):
            f = "-" + name
        parts.append(f)
    return ",".join(parts)


def _programs():
    n = 96
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    k = tc.reduce_axis(n, name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    X = tc.placeholder((40000,), name="X")
    G = tc.compute((40000,), lambda i: 0.5 * X[i] * (1.0 + tc.erf(X[i] * 0.7071067811865476))
                   + tc.exp(X[i] * 0.5), name="G")
    r = tc.reduce_axis(40000, name="r")
    S = tc.compute((), lambda: tc.sum(X[r] * X[r], axis=r), name="S")
    return [([C], [A, B]), ([G], [X]), ([S], [X])]


def _dims(p):
    return tuple(int(getattr(d, "value", d)) for d in p.shape)


def _build(outs, ins, host):
    low = lower(outs, ins)
    return build_kernel(low.func, inputs=ins, outputs=outs, hidden=low.constants, single=True,
                        host=host)


@pytest.mark.parametrize("width", ["avx2", "256", "default"])
def test_forced_targets_match_the_evaluator(width):
    here = describe()
    host = {"avx2": from_features(_without_avx512(here.features)),
            "256": with_vector_bits(here, 256), "default": here}[width]
    rng = np.random.default_rng(0)
    for outs, ins in _programs():
        kernel = _build(outs, ins, host)
        arrays = [rng.standard_normal(_dims(p)).astype(np.float32)
                  for p in ins]
        (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
        np.testing.assert_allclose(kernel(*arrays), want, rtol=2e-5, atol=2e-4)
        if host.vector_bits < 512:  # no 512-bit float vectors in the code
            assert "<16 x float>" not in kernel.source
        if width == "avx2":  # no ldexp, which only AVX-512 does in one instruction
            assert "llvm.ldexp" not in kernel.source


@pytest.mark.skipif(describe().vector_bits < 512, reason="the host has no 512-bit vectors")
def test_avx512_host_uses_512_bit_vectors():
    outs, ins = _programs()[0]
    assert "<16 x float>" in _build(outs, ins, describe()).source
    assert "<16 x float>" not in _build(outs, ins, with_vector_bits(describe(), 256)).source
