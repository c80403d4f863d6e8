"""Large results recycled by the result pool (codegen/result_pool.py): memory is reused only
once no array can read it, and the pool stays within its byte budget."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.call_plan import empty_result
from tecomp.codegen.result_pool import PAGE_SLACK, POOL_MIN_BYTES, RESULTS, ResultPool, placement

ROWS, COLS = 1024, 1024  # float32: 4 MiB, pooled


@pytest.fixture(scope="module")
def scale():
    X = tc.placeholder((ROWS, COLS), name="X")
    s = tc.placeholder((), name="s")
    return tc.build(tc.compute(X.shape, lambda i, j: X[i, j] * s[()], name="Y"), [X, s])


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_released_result_memory_is_reused(scale):
    assert ROWS * COLS * 4 >= POOL_MIN_BYTES
    x = np.ones((ROWS, COLS), np.float32)
    first = scale(x, np.float32(2.0))
    where = address(first)
    assert where % 64 == 0 and first.flags.writeable and first.flags.c_contiguous
    del first
    gc.collect()
    again = scale(x, np.float32(3.0))
    assert address(again) == where
    assert (again == 3.0).all()


def test_held_results_and_views_keep_their_memory(scale):
    x = np.ones((ROWS, COLS), np.float32)
    a = scale(x, np.float32(1.0))
    b = scale(x, np.float32(2.0))
    assert address(a) != address(b)
    part = a[10:20, 5:]  # a view: the memory stays a's while it lives
    where = address(a)
    del a
    gc.collect()
    c = scale(x, np.float32(5.0))
    assert address(c) != where and address(c) != address(b)
    assert (part == 1.0).all() and (b == 2.0).all() and (c == 5.0).all()
    flat = b.reshape(-1)  # reshape and ravel views too
    del b, part
    gc.collect()
    d = scale(x, np.float32(7.0))
    assert (flat == 2.0).all() and (d == 7.0).all()


def test_budget_and_clear():
    pool = ResultPool(max_bytes=3 * POOL_MIN_BYTES)
    shape = (POOL_MIN_BYTES // 8,)
    arrays = [pool.empty(shape, np.dtype(np.float64), POOL_MIN_BYTES) for _ in range(5)]
    assert pool.held_bytes == 0
    del arrays
    gc.collect()
    assert 0 < pool.held_bytes <= 3 * POOL_MIN_BYTES
    pool.clear()
    assert pool.held_bytes == 0


def test_small_results_are_not_pooled():
    a = empty_result((16,), np.dtype(np.float32))
    assert a.base is None


def test_concurrent_calls_get_distinct_memory(scale):
    x = np.ones((ROWS, COLS), np.float32)
    bad: list[str] = []

    def work(v: float) -> None:
        for _ in range(6):
            y = scale(x, np.float32(v))
            if not (y == v).all():
                bad.append(f"{v}")

    threads = [threading.Thread(target=work, args=(float(v),)) for v in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
    assert RESULTS.held_bytes <= RESULTS.max_bytes


def test_placement_is_aligned_and_half_a_page_from_the_input():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        raw = int(rng.integers(1, 1 << 40)) * 16
        near = int(rng.integers(1, 1 << 40)) * int(rng.choice([1, 4, 16, 64]))
        off = placement(raw, near)
        assert 0 <= off < PAGE_SLACK
        assert (raw + off) % 64 == 0
        assert 2048 <= (raw + off - near) % 4096 < 2048 + 64
    assert placement(48, 0) == 16  # no input: the first cache line boundary


def _at(offset: int, shape: tuple[int, ...]) -> np.ndarray:
    """A float32 array of ``shape`` starting ``offset`` bytes past a page boundary."""
    n = int(np.prod(shape)) * 4
    raw = np.empty(n + 8192, np.uint8)
    s = -address(raw) % 4096 + offset
    return raw[s:s + n].view(np.float32).reshape(shape)


@pytest.mark.parametrize("rows", [ROWS, 128])  # pooled (4 MiB) and aligned-only (512 KiB)
def test_results_start_half_a_page_from_the_largest_input(rows):
    X = tc.placeholder((rows, COLS), name="X")
    v = tc.placeholder((COLS,), name="v")
    k = tc.build(tc.compute(X.shape, lambda i, j: X[i, j] + v[j], name="Y"), [v, X])
    for offset in (16, 64, 2048, 4032):
        x = _at(offset, (rows, COLS))
        x[...] = 1.0
        vv = np.arange(COLS, dtype=np.float32)
        for _ in range(2):  # the first call takes the full path, the second the planned one
            y = k(vv, x)
            assert address(y) % 64 == 0
            assert 2048 <= (address(y) - address(x)) % 4096 < 2048 + 64, offset
            np.testing.assert_array_equal(y, np.broadcast_to(1.0 + vv, y.shape))
            del y
