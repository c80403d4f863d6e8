"""Calls that reuse a remembered plan (codegen/call_plan.py): same results and same errors as
the first call of a shape; each argument's layout still checked on every call."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.call_plan import DATA_OFFSET, data_address
from tecomp.errors import ArgumentError

n = tc.var("n")
X = tc.placeholder((n, 3), name="X")
Y = tc.placeholder((3,), name="Y")
Z = tc.compute((n, 3), lambda i, j: X[i, j] * Y[j] + 1.0, name="Z")
S = tc.compute((n,), lambda i: Z[i, 0] + Z[i, 1] * Z[i, 2], name="S")
KERNEL = tc.build([Z, S], [X, Y])


def _want(x, y):
    z = x * y + 1
    return z, z[:, 0] + z[:, 1] * z[:, 2]


def _check(got, x, y):
    for g, w in zip(got, _want(x, y)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)  # FMA contraction


def test_data_address_matches_ctypes():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((5, 3)).astype(np.float32), np.arange(12.0)[2:],
              np.zeros((3, 4), np.int16).T, np.empty(0), np.ones(())]
    for a in arrays:
        assert data_address(a) == a.ctypes.data
    assert DATA_OFFSET is not None  # CPython with NumPy: the fast path is in use


def test_repeated_calls_with_one_and_several_shapes():
    rng = np.random.default_rng(1)
    k = tc.build([Z, S], [X, Y])
    for rows in (4, 7, 4, 7, 0, 4):
        x = rng.standard_normal((rows, 3)).astype(np.float32)
        y = rng.standard_normal(3).astype(np.float32)
        _check(k(x, y), x, y)
    assert len(k._plans) == 3


def test_layout_and_dtype_checked_on_every_call():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    y = rng.standard_normal(3).astype(np.float32)
    _check(KERNEL(x, y), x, y)  # the plan for (6, 3), (3,)
    with pytest.raises(ArgumentError, match="dtype float32, got float64"):
        KERNEL(x.astype(np.float64), y)
    wide = rng.standard_normal((6, 6)).astype(np.float32)
    _check(KERNEL(wide[:, ::2], y), wide[:, ::2], y)  # strided: copied by the full path
    raw = np.empty(6 * 3 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(6, 3)  # unaligned
    raw[...] = x
    _check(KERNEL(raw, y), x, y)
    with pytest.raises(ArgumentError, match="expected extent 3"):
        KERNEL(rng.standard_normal((6, 4)).astype(np.float32), y)
    with pytest.raises(ArgumentError):
        KERNEL([[1.0, 2.0, 3.0]], y)


def test_out_arrays_checked_on_every_call():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    y = rng.standard_normal(3).astype(np.float32)
    z, s = np.empty((5, 3), np.float32), np.empty(5, np.float32)
    for _ in range(2):  # the second call uses the plan
        got = KERNEL(x, y, out=(z, s))
        assert got[0] is z and got[1] is s
        _check(got, x, y)
    with pytest.raises(ArgumentError, match="overlaps"):
        KERNEL(x, y, out=(x, s))
    both = np.empty(20, np.float32)
    with pytest.raises(ArgumentError, match="overlaps"):
        KERNEL(x, y, out=(both[:15].reshape(5, 3), both[10:15]))
    ro = np.empty((5, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="writeable"):
        KERNEL(x, y, out=(ro, s))
    with pytest.raises(ArgumentError, match="shape"):
        KERNEL(x, y, out=(np.empty((5, 4), np.float32), s))
    with pytest.raises(ArgumentError, match="dtype"):
        KERNEL(x, y, out=(z.astype(np.float64), s))


def test_threads_and_threshold_read_at_each_call():
    import tecomp.codegen.kernel as K

    A = tc.placeholder((256, 256), name="A")
    B = tc.compute((256, 256), lambda i, j: tc.exp(A[i, j]) * 2.0, name="B")
    k = tc.build(B, [A])
    a = np.random.default_rng(4).standard_normal((256, 256)).astype(np.float32)
    seen = []
    real = k._fn

    def spy(*args):
        seen.append(args[-1])
        return real(*args)

    k._fn = spy
    old = K.PARALLEL_MIN_BYTES
    try:
        K.PARALLEL_MIN_BYTES = 0
        k.threads = 2
        np.testing.assert_allclose(k(a), np.exp(a) * 2, rtol=1e-6)
        np.testing.assert_allclose(k(a), np.exp(a) * 2, rtol=1e-6)
        k.threads = 1
        k(a)
        K.PARALLEL_MIN_BYTES = 1 << 62
        k.threads = 2
        k(a)
    finally:
        K.PARALLEL_MIN_BYTES = old
    assert seen == [2, 2, 1, 1]


@pytest.mark.parametrize("in_blocks", [True, False])
@pytest.mark.parametrize("threaded_faster", [True, False])
def test_gray_zone_kernels_time_both_ways_then_keep_the_faster(threaded_faster, in_blocks,
                                                               monkeypatch):
    """Between the thresholds the first calls time one thread and two (a block each way, or
    alternating), then every call takes the faster."""
    import tecomp.codegen.kernel as K
    from tecomp.codegen import call_plan
    from tecomp.codegen.call_plan import ADAPT_MIN_BYTES, TRIALS, WARMUP_PAIRS

    monkeypatch.setattr(call_plan, "IN_BLOCKS", in_blocks)

    A = tc.placeholder((512, 1024), name="A")  # 2 MiB in, 2 MiB out: between the thresholds
    B = tc.compute((512, 1024), lambda i, j: tc.exp(A[i, j]) + 1.0, name="B")
    k = tc.build(B, [A])
    k.threads = 2
    a = np.random.default_rng(5).standard_normal((512, 1024)).astype(np.float32)
    seen, real = [], k._fn

    def spy(*args):
        seen.append(args[-1])
        return real(*args)

    clock = [0.0]

    def fake_clock():  # each call takes 1 s serial, 0.5 s threaded (or the reverse)
        return clock[0]

    def timed(*args):
        out = spy(*args)
        fast = (args[-1] > 1) == threaded_faster
        clock[0] += 0.5 if fast else 1.0
        return out

    k._fn = timed
    monkeypatch.setattr(K.time, "perf_counter", fake_clock)
    assert ADAPT_MIN_BYTES <= 4 << 20 < K.PARALLEL_MIN_BYTES
    pairs = WARMUP_PAIRS + TRIALS
    results = [k(a) for _ in range(2 * pairs + 4)]
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])  # the choice never changes results
    want = 2 if threaded_faster else 1
    assert seen[0] == 1  # the first call: the static rule
    assert seen[1:1 + 2 * pairs] == ([1] * pairs + [2] * pairs if in_blocks else [1, 2] * pairs)
    assert seen[1 + 2 * pairs:] == [want] * 3


def test_large_results_start_on_a_cache_line():
    from tecomp.codegen.call_plan import ALIGN_MIN_BYTES

    big = ALIGN_MIN_BYTES // 4 // 3 + 8
    rng = np.random.default_rng(6)
    y = rng.standard_normal(3).astype(np.float32)
    for rows in (big, big, 4):  # the full path, then the remembered plan; then a small one
        x = rng.standard_normal((rows, 3)).astype(np.float32)
        z, s = KERNEL(x, y)
        _check((z, s), x, y)
        assert z.flags.c_contiguous and z.flags.writeable and z.shape == (rows, 3)
        if z.nbytes >= ALIGN_MIN_BYTES:
            assert z.ctypes.data % 64 == 0
        else:
            assert z.base is None  # a plain array


def test_the_trials_warm_up_lasts_warm_s_each_way(monkeypatch):
    """Short calls warm up for WARM_S seconds each way before the timed ones (not only
    WARMUP_PAIRS calls): the first threaded calls after a pause are not yet at speed."""
    import tecomp.codegen.kernel as K
    from tecomp.codegen import call_plan
    from tecomp.codegen.call_plan import TRIALS, WARM_S, WARMUP_PAIRS

    monkeypatch.setattr(call_plan, "IN_BLOCKS", True)
    A = tc.placeholder((512, 1024), name="A")
    k = tc.build(tc.compute((512, 1024), lambda i, j: A[i, j] * 2.0, name="B"), [A])
    k.threads = 2
    a = np.ones((512, 1024), np.float32)
    seen, real, clock = [], k._fn, [0.0]
    serial_s, threaded_s = WARM_S / 4.5, WARM_S / 9.5  # 5 and 10 calls to warm up

    def timed(*args):
        seen.append(args[-1])
        clock[0] += threaded_s if args[-1] > 1 else serial_s
        return real(*args)

    k._fn = timed
    monkeypatch.setattr(K.time, "perf_counter", lambda: clock[0])
    assert 5 > WARMUP_PAIRS
    for _ in range(1 + 5 + TRIALS + 10 + TRIALS + 3):
        k(a)
    assert seen[1:] == [1] * (5 + TRIALS) + [2] * (10 + TRIALS) + [2] * 3


def test_a_remembered_thread_decision_follows_the_thread_count(monkeypatch):
    """A plan keeps the parameters of its thread decision for the kernel's thread count;
    changing ``kernel.threads`` between calls of the same shapes changes what is passed."""
    import tecomp.codegen.kernel as K

    monkeypatch.setattr(K, "PARALLEL_MIN_BYTES", 0)  # always threaded
    A = tc.placeholder((64, 32), name="A")
    k = tc.build(tc.compute((64, 32), lambda i, j: A[i, j] + 1.0, name="B"), [A])
    a = np.ones((64, 32), np.float32)
    seen, real = [], k._fn

    def spy(*args):
        seen.append(args[-1])
        return real(*args)

    k._fn = spy
    for threads in (2, 2, 2, 1, 1, 3, 2):
        k.threads = threads
        np.testing.assert_array_equal(k(a), a + 1)
    assert seen == [2, 2, 2, 1, 1, 3, 2]
