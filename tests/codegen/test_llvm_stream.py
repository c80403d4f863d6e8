"""Non-temporal stores for outputs larger than the last-level cache
(:mod:`tecomp.codegen.llvm.stream`): which loops stream, and that streamed kernels give the
evaluator's results whatever the output's alignment, the loop's length and the thread count.

The rule is forced with a host description whose last-level cache is 8 bytes, so
small outputs stream; the code is then the same as for a real output beyond the cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.llvm import build_kernel
from tecomp.codegen.llvm.stream import Streaming, streaming, streams
from tecomp.host import describe, with_vector_bits
from tecomp.lanes import stream_form
from tecomp.loopir import Buffer, BufferLoad, For, Store
from tecomp.lowering_api import lower

pytestmark = pytest.mark.skipif("+sse2" not in describe().features.split(","),
                                reason="non-temporal stores are emitted on x86-64 only")


def _tiny_llc(host):
    return dataclasses.replace(host, l3=8, l2=8)


def _build(outs, ins, host):
    low = lower(outs, ins)
    return build_kernel(low.func, inputs=ins, outputs=outs, hidden=low.constants,
                        single=len(outs) == 1, host=host)


def _row_sum_grad(rows, cols, dtype):
    X = tc.placeholder((rows, cols), name="X", dtype=dtype)
    k = tc.reduce_axis(cols, name="k")
    Y = tc.compute((rows,), lambda i: tc.sum(X[i, k], axis=k), name="Y")
    H = tc.placeholder((rows,), name="H", dtype=dtype)
    return list(tc.gradient(Y, [X], head=H)), [X, H]


def _scaled(n, dtype):
    X = tc.placeholder((n,), name="X", dtype=dtype)
    s = tc.placeholder((), name="s", dtype=dtype)
    return [tc.compute((n,), lambda i: 2.0 * s[()] * X[i] - X[i], name="Y")], [X, s]


def _arrays(ins, rng):
    return [rng.standard_normal(tuple(int(d) for d in p.shape)).astype(p.dtype) for p in ins]


@pytest.mark.parametrize("vector_bits", [512, 256])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make,shape", [(_row_sum_grad, (37, 1001)), (_row_sum_grad, (8, 64)),
                                        (_scaled, (5003,)), (_scaled, (3,))])
@pytest.mark.parametrize("threads", [1, 2])
def test_streamed_kernels_match_the_evaluator(make, shape, dtype, vector_bits, threads, rng):
    host = _tiny_llc(with_vector_bits(describe(), min(vector_bits, describe().vector_bits)))
    outs, ins = make(*shape, dtype)
    kernel = _build(outs, ins, host)
    kernel.threads = threads
    assert "!nontemporal" in kernel.source and "llvm.x86.sse.sfence" in kernel.source
    arrays = _arrays(ins, rng)
    (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
    got = kernel(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("offset", [0, 1, 3, 7])
def test_streamed_stores_into_misaligned_out_arrays(offset, rng):
    """``out=`` views that start 1-7 elements past a 64-byte boundary: a scalar head up to
    the first aligned element, then aligned vectors, then a scalar tail."""
    outs, ins = _row_sum_grad(19, 203, "float32")
    kernel = _build(outs, ins, _tiny_llc(describe()))
    arrays = _arrays(ins, rng)
    raw = np.zeros(19 * 203 + 64, np.float32)
    start = (-raw.ctypes.data % 64) // 4 + offset
    out = raw[start:start + 19 * 203].reshape(19, 203)
    kernel(*arrays, out=out)
    np.testing.assert_array_equal(out, np.broadcast_to(arrays[1][:, None], (19, 203)))
    assert not raw[:start].any() and not raw[start + 19 * 203:].any()  # nothing else written


def test_outputs_within_the_cache_keep_plain_stores():
    outs, ins = _row_sum_grad(37, 1001, "float32")
    assert "!nontemporal" not in _build(outs, ins, describe()).source
    assert streaming(dataclasses.replace(describe(), features="+neon")) is None


def _loop(value, buf, *, reduce=None):
    j = E.Var("j", "int64")
    return For(j, E.Const(0, "int64"), E.Const(100, "int64"),
               Store(buf, (j,), value(j), reduce=reduce))


def test_which_loops_stream():
    out = Buffer("Y", (E.Const(100, "int64"),), "float32", "output")
    tmp = Buffer("T", (E.Const(100, "int64"),), "float32", "temp")
    x = Buffer("X", (E.Const(101, "int64"),), "float32", "input")
    rule = Streaming(0, 64)
    read = lambda j: BufferLoad(x, (j,), "float32")  # noqa: E731
    assert streams(rule, _loop(read, out)) is not None
    assert streams(None, _loop(read, out)) is None
    assert streams(Streaming(400, 64), _loop(read, out)) is None  # 400 bytes: within the "cache"
    assert streams(rule, _loop(read, tmp)) is None  # temporaries are read again soon
    assert streams(rule, _loop(read, out, reduce="sum")) is None
    # a recurrence (reads what it writes) and a strided store are no streams
    prev = lambda j: BufferLoad(out, (E.Sub(j, E.Const(1, "int64"), "int64"),), "float32")  # noqa: E731
    assert stream_form(_loop(prev, out)) is None
    j = E.Var("j", "int64")
    strided = For(j, E.Const(0, "int64"), E.Const(50, "int64"),
                  Store(out, (E.Mul(j, E.Const(2, "int64"), "int64"),), read(j)))
    assert stream_form(strided) is None


@pytest.mark.parametrize("threads", [1, 2])
def test_a_stage_reads_a_streamed_output(threads, rng):
    """A second output computed from the first after the first was streamed (by other
    threads, or by this one before it starts them)."""
    n = 3001
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: 2.0 * X[i], name="Y")
    k = tc.reduce_axis(n, name="k")
    Z = tc.compute((n,), lambda i: Y[(i * 7) % n] + tc.sum(Y[k], axis=k) * 0.0, name="Z")
    kernel = _build([Y, Z], [X], _tiny_llc(describe()))
    kernel.threads = threads
    assert "!nontemporal" in kernel.source
    x = rng.standard_normal(n).astype(np.float32)
    y, z = kernel(x)
    np.testing.assert_array_equal(y, 2.0 * x)
    np.testing.assert_allclose(z, (2.0 * x)[(np.arange(n) * 7) % n], rtol=1e-6)


def test_a_deep_shared_value_streams_in_linear_time():
    """A value that is a DAG of 40 levels, each using the previous node three times (3**40
    nodes as a tree): deciding that it streams and emitting its vectors visit each node once."""
    a = np.linspace(-0.5, 0.5, 999)
    xp = tc.placeholder((999,), name="x", dtype="float64")

    def deep(i):
        x = xp[i]
        for _ in range(40):
            x = tc.minimum(x * x, 0.25) + tc.maximum(x * x, -1.0) * 0.0 + x * 0.5
        return x

    y = tc.compute((999,), deep, name="y")
    kernel = _build([y], [xp], _tiny_llc(describe()))
    assert "!nontemporal" in kernel.source
    want = a.copy()
    for _ in range(40):
        want = np.minimum(want * want, 0.25) + np.maximum(want * want, -1.0) * 0.0 + want * 0.5
    np.testing.assert_allclose(kernel(a), want, rtol=1e-12, atol=1e-12)
