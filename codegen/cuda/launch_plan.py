"""Launch plans: what a call of a CUDA kernel launches for one binding of its sizes, worked
out once and reused by every later call with the same sizes (the steady state of a training
or inference loop).

A :class:`LaunchPlan` holds, for one device and one value of the size parameters,

* the loaded kernels and each stage's launch configuration (blocks, threads), from the loop
  bounds evaluated on the host (grid-stride stages: a few waves; block reductions: a block per
  output; shared-memory tiles: a block per output tile; all capped);
* each stage's ``kernelParams`` block: 8-byte value slots with the size parameters already
  written, and the array of pointers to the slots (``cuLaunchKernel`` copies the values when it
  is called, so the slots are rewritten by the next call); a call only writes the buffer
  addresses into the slots;
* on devices that keep buffers (:attr:`Device.keeps_buffers`, a GPU): the temporaries and the
  bounds-error record, allocated once and reused.  All kernels run in order on one stream, so
  the next call's kernels start after this call's last reader of a temporary; a lock makes
  concurrent calls from several threads take turns.  The record is zeroed by an asynchronous
  memset and read back after the launches (the read waits for the kernels), so an error is
  raised by the call that caused it.  Other devices get temporaries for each call, as before.

A kernel keeps its last :data:`MAX_PLANS` plans (per kernel, all devices together); an evicted
plan's buffers are freed (stream-ordered) when it is garbage-collected.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from tecomp import expr as E
from tecomp.errors import ArgumentError, CompileError
from tecomp.gpuir import TILE_M, TILE_N, TILE_THREADS, GpuProgram, Stage
from tecomp.loopir import Buffer
from tecomp.stmt_functor import eval_int

from .render import BLOCK
from .runtime import Device, DeviceArray

MAX_PLANS = 8

# bytes per element of a temporary (bfloat16 temporaries hold __nv_bfloat16)
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8,
            "bool": 1}


class LaunchPlan:
    """The launches of one call for given sizes (see the module doc).  ``order`` lists the
    buffers whose addresses a call passes to :meth:`run`, in that order."""

    def __init__(self, name: str, program: GpuProgram, dev: Device, fns: dict[str, Any],
                 sizes: dict[E.Var, int], order: Sequence[Buffer], pvars: Sequence[E.Var],
                 record_bytes: int, hidden: list[int]) -> None:
        self.device = dev
        self.hidden = hidden  # addresses of the kernel's constant tensors on ``dev``
        index = {b: n for n, b in enumerate(order)}  # a later position wins, as before
        params = [sizes[p] for p in pvars]
        self.lock = threading.Lock()
        self.launches: list[tuple[Any, int, int, np.ndarray, np.ndarray, list[int]]] = []
        for st in program.stages:
            grid, block = launch_config(st, dev, sizes)
            if grid == 0:
                continue
            argv, slots = pack(st, {b: 0 for b in st.buffers}, params, pvars)
            self.launches.append((fns[st.name], grid, block, argv, slots,
                                  [index[b] for b in st.buffers]))
        self.temp_bytes = [temp_bytes(name, b, sizes) for b in program.temps]
        self.keep = dev.keeps_buffers
        self.temps: list[DeviceArray] = []
        self.record: DeviceArray | None = None
        if self.keep:
            self.temps = [DeviceArray(dev, (n,), np.uint8) for n in self.temp_bytes]
            if record_bytes:
                self.record = DeviceArray(dev, (record_bytes,), np.uint8)

    def run(self, dev: Device, ptrs: list[int], copy_back: list[tuple[np.ndarray, int]],
            record: np.ndarray | None, record_ptr: int) -> None:
        """Launch every stage with the buffer addresses ``ptrs`` (in ``order``), then copy
        ``copy_back`` and the error record (when there is one) to the host."""
        with self.lock:
            if record is not None and self.keep:
                dev.zero(record_ptr, record.nbytes)
            for fn, grid, block, argv, slots, idx in self.launches:
                if idx:
                    slots[:len(idx)] = [ptrs[n] for n in idx]
                dev.launch(fn, grid, block, argv)
            for host, p in copy_back:
                dev.copy_out(host, p)
            if record is not None:
                dev.copy_out(record, record_ptr)


def temp_bytes(kernel: str, b: Buffer, sizes: dict[E.Var, int]) -> int:
    n = 1
    for d, e in enumerate(b.shape):
        v = eval_int(e, sizes)
        if v < 0:
            raise ArgumentError(f"kernel {kernel!r}: temporary {b.name!r}, axis {d} has "
                                f"extent {e} = {v}")
        n *= v
    return n * ITEMSIZE[b.dtype]


def launch_config(st: Stage, dev: Device, sizes: dict[E.Var, int]) -> tuple[int, int]:
    """(blocks, threads per block) of a stage for these sizes."""
    if st.serial:
        return 1, 1
    if st.tiling is not None or st.block_reduce is not None:
        return _block_config(st, dev, sizes)
    grid, block = dev.config(iterations(st, sizes), bool(st.private))
    if st.private:  # the block-wide combine works on whole warps
        block = max(32, block // 32 * 32)
    return grid, block


def iterations(st: Stage, sizes: dict[E.Var, int]) -> int | None:
    """The size of the stage's grid-mapped iteration space, when the host can compute it."""
    env = dict(sizes)
    try:
        for v, value in st.lets:
            env[v] = eval_int(value, env)
        return _trips(st.mapped, env)
    except (ArgumentError, CompileError, KeyError, TypeError, ZeroDivisionError):
        return None  # bounds read memory or wrapper lets: the grid-stride loop copes


def _block_config(st: Stage, dev: Device, sizes: dict[E.Var, int]) -> tuple[int, int]:
    """(blocks, threads) of a block-level stage: a block per output (block reduction) or per
    output tile (tiling, exactly TILE_THREADS threads), capped like a grid-stride loop."""
    units = None
    env = dict(sizes)
    try:
        for v, value in st.lets:
            env[v] = eval_int(value, env)
        if st.tiling is not None:
            tl = st.tiling
            units = _trips(tl.batch, env) * (-(-_trips(tl.rows, env) // TILE_M)) * (
                -(-_trips(tl.cols, env) // TILE_N))
        else:
            units = _trips(st.block_reduce.outer, env)
    except (ArgumentError, CompileError, KeyError, TypeError, ZeroDivisionError):
        units = None
    grid, block = dev.config(None if units is None else units * BLOCK, False)
    if units is not None:
        grid = max(1, min(grid, units))
    if st.tiling is not None:
        block = TILE_THREADS
    return grid, max(32, block // 32 * 32)  # the block-wide combine works on whole warps


def _trips(loops: Sequence[Any], env: dict[E.Var, int]) -> int:
    total = 1
    for loop in loops:
        lo, hi = eval_int(loop.lo, env), eval_int(loop.hi, env)
        total *= max(0, -(-(hi - lo) // loop.step))
    return total


def pack(st: Stage, ptr: dict[Buffer, int], params: list[int], pvars: Sequence[E.Var]
         ) -> tuple[np.ndarray, np.ndarray]:
    """``kernelParams``: an array of pointers to the argument values (8-byte slots; an int32
    argument reads the low half of its slot, which is its value on little-endian hosts), and
    the slots (buffers first, then the size parameters)."""
    vals = [ptr[b] for b in st.buffers]
    for v, p in zip(pvars, params):
        vals.append(p if v.dtype != "int32" else int(np.int32(p)) & 0xFFFFFFFF)
    slots = np.array([x & 0xFFFFFFFFFFFFFFFF for x in vals] or [0], dtype=np.uint64)
    argv = np.array([slots.ctypes.data + 8 * k for k in range(len(vals))] or [0],
                    dtype=np.uint64)
    return argv, slots
