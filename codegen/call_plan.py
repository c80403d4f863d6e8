"""What a compiled CPU kernel remembers between calls with the same argument shapes.

A call of :class:`~tecomp.codegen.kernel.Kernel` binds sizes from the shapes, checks them,
works out the output shapes and whether to use threads; a :class:`Plan` keeps that per tuple
of argument shapes, so a later call with those shapes only checks each array's dtype and
layout and passes addresses (about 2.7 us a call for a 4-element add, against 7 us).

Addresses: ``ndarray.ctypes.data`` builds a ctypes helper object (0.7 us); reading the
``data`` field of the array object directly (NumPy's ``PyArrayObject``, whose layout NumPy
documents in ``ndarraytypes.h``) costs a tenth of that.  The field's offset is not assumed:
:func:`_data_offset` finds it by probing arrays against ``.ctypes.data`` at import, and
without a match (or outside CPython, where ``id()`` is not an address) the slow way is used.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, field

import numpy as np

from .. import expr as E
from .result_pool import PAGE_SLACK, POOL_MIN_BYTES, RESULTS, placement


@dataclass(frozen=True)
class Plan:
    """What a call with given argument shapes needs beyond the arrays' addresses.

    Derived once, for the call's own checks (:meth:`.kernel.Kernel._call_planned`): ``checks``
    (each argument's dtype, strides and required alignment), ``small_outputs`` (the results'
    shapes and dtypes when every result is below :data:`ALIGN_MIN_BYTES`, which then are
    plain ``np.empty`` arrays and need no placement; else None) and ``ready`` (the thread
    count a call passes and the parameters with it, once the thread decision is made)."""

    layout: tuple[tuple[np.dtype, tuple[int, ...]], ...]  # each argument's dtype and strides
    outputs: tuple[tuple[tuple[int, ...], np.dtype, tuple[int, ...]], ...]  # shape, dtype, strides
    hidden: list[int]  # addresses of the constant tensors
    params: list[int]  # the size parameters, in the kernel's order
    sizes: dict[E.Var, int]
    work: int  # bytes moved or 4 per innermost iteration, compared with PARALLEL_MIN_BYTES
    trial: ThreadTrial = field(default_factory=lambda: ThreadTrial())
    checks: tuple[tuple[np.dtype, tuple[int, ...], int], ...] = field(init=False)
    small_outputs: tuple[tuple[tuple[int, ...], np.dtype], ...] | None = field(init=False)
    ready: list = field(init=False, compare=False)  # [threads, params] or [None, None]

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "checks", tuple((dt, st, dt.alignment) for dt, st in self.layout))
        small = all(dt.itemsize * int(np.prod(shape, dtype=np.int64)) < ALIGN_MIN_BYTES
                    for shape, dt, _ in self.outputs)
        setattr_(self, "small_outputs", tuple((shape, dt) for shape, dt, _ in self.outputs)
                 if small else None)
        setattr_(self, "ready", [None, None])


class ThreadTrial:
    """Serial or threaded, decided by timing: for work between ``ADAPT_MIN_BYTES`` and
    ``PARALLEL_MIN_BYTES`` (where the static estimate cannot tell: on the benchmark machine a
    4 MiB row maximum gained from threads and a 4.7 MiB stride-2 convolution lost), the
    first calls run one way, then the other: each way untimed calls first, at least
    :data:`WARMUP_PAIRS` of them and :data:`WARM_S` seconds (caches and the worker threads
    warm up), then :data:`TRIALS` timed calls, and the faster median wins for the plan's
    life.  Results do not depend on the choice: every element is computed by the same code
    either way.

    The warm-up is timed, not counted: the threaded calls after the serial block find the
    workers asleep, and on a virtual machine their CPU takes a while to come back to speed (a
    256x256 softmax on two cores of an Intel Xeon: 170-200 us for the first threaded call,
    then 26-32, 23-29, and 17 from about the fourth to the seventh, against 29 us serial);
    after two untimed calls the trial kept the serial code in 2 of 8 fresh processes.

    The threaded calls come in one block (:data:`IN_BLOCKS`), as repeated calls do: alternated
    with serial ones, each found the pool's workers asleep again wherever a serial call
    outlasts their spin (a softmax of 256x256 floats on an Intel Xeon with AVX-512: about 50
    us serial, 33 us threaded with the workers awake, 42-150 us for most threaded calls right
    after a serial one), and the trial kept the serial code."""

    __slots__ = ("times", "start", "parallel")

    def __init__(self) -> None:
        self.times: tuple[list[float], list[float]] = ([], [])  # serial, threaded
        self.start: list[int | None] = [None, None]  # where each way's timed calls begin
        self.parallel: bool | None = None

    def _timed(self, way: bool) -> list[float]:
        start = self.start[way]
        return [] if start is None else self.times[way][start:]

    def next_parallel(self) -> bool:
        """Whether the next trial call runs threaded (the serial block first, or alternating,
        serial first)."""
        serial, threaded = self.times
        if IN_BLOCKS:
            return len(self._timed(False)) >= TRIALS
        return len(threaded) < len(serial)

    def record(self, parallel: bool, seconds: float) -> None:
        xs = self.times[parallel]
        xs.append(seconds)
        if self.start[parallel] is None and len(xs) >= WARMUP_PAIRS and sum(xs) >= WARM_S:
            self.start[parallel] = len(xs)
        s, t = sorted(self._timed(False)), sorted(self._timed(True))
        if len(s) >= TRIALS and len(t) >= TRIALS:
            self.parallel = t[TRIALS // 2] < s[TRIALS // 2]


MAX_PLANS = 32  # shapes remembered per kernel (all forgotten when full)
ADAPT_MIN_BYTES = 1 << 20  # below: one thread, without trials
WARMUP_PAIRS = 2  # untimed calls each way first, at least
WARM_S = 0.002  # and at least this long, each way
TRIALS = 5  # then timed calls each way, before a plan settles on serial or threaded
#: the trial's calls one way in a block, then the other (:class:`ThreadTrial`); False: alternate
IN_BLOCKS = True


def _data_offset() -> int | None:
    """Where a NumPy array object keeps its data pointer (the ``data`` field of
    ``PyArrayObject``, after the object header), found by probing arrays whose address
    ``.ctypes.data`` reports; None unless ``id()`` is an object's address (CPython) and one
    offset matches every probe."""
    if sys.implementation.name != "cpython":
        return None
    probes = [np.empty(3, np.float32), np.arange(10.0)[3:], np.zeros((2, 5), np.int8)[1],
              np.ones((4, 4), np.complex128).T]
    for off in range(8, 72, 8):
        if all(ctypes.c_void_p.from_address(id(a) + off).value == a.ctypes.data
               for a in probes):
            return off
    return None


#: where an array object keeps its data pointer (None: use ``.ctypes.data``)
DATA_OFFSET = _data_offset()


def data_address(a: np.ndarray) -> int:
    """``a.ctypes.data`` (a tenth of its cost where :func:`_data_offset` found the field)."""
    if DATA_OFFSET is None:
        return a.ctypes.data
    return ctypes.c_void_p.from_address(id(a) + DATA_OFFSET).value or 0


# Results of at least this many bytes start on a 64-byte boundary (a cache line, an AVX-512
# vector): NumPy's large allocations start 16 or 48 bytes past one, which splits every
# vector store in two (a 512^3 float32 matmul: 0.80 ms into such an array, 0.64 ms aligned).
# Aligning costs about 0.6 us a call, more than it saves on results below this size.
ALIGN_MIN_BYTES = 256 << 10


def empty_result(shape: tuple[int, ...], dtype: np.dtype, near: int = 0) -> np.ndarray:
    """An uninitialised C-contiguous array for a kernel's result, 64-byte aligned when large
    (then a view of a slightly larger byte buffer) and half a page from the address ``near``
    (the kernel's largest input, :func:`.result_pool.placement`: no 4K aliasing between its
    loads and the result's stores); from :data:`.result_pool.RESULTS`, which recycles the
    memory of released results, from :data:`.result_pool.POOL_MIN_BYTES` on."""
    nbytes = dtype.itemsize
    for d in shape:
        nbytes *= d
    if nbytes < ALIGN_MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    if nbytes >= POOL_MIN_BYTES:
        return RESULTS.empty(shape, dtype, nbytes, near)
    raw = np.empty(nbytes + PAGE_SLACK, dtype=np.uint8)
    return np.ndarray(shape, dtype, raw, placement(data_address(raw), near))
