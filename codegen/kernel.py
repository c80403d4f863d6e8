"""Kernel: a compiled program called on NumPy arrays.

``kernel(*arrays, out=None)`` checks everything before native code runs — argument count,
each array's ndim, dtype (no implicit casting) and extents — binds the symbolic sizes from the
arrays' shapes and checks them for consistency across arrays, allocates the outputs (or checks
``out=``), and calls the compiled function through ctypes (which releases the GIL, so kernels
may run concurrently in threads).  ``kernel.threads`` bounds the threads the compiled code
uses for ``"parallel"`` loops (default: the CPUs this process may run on; calls with less than
:data:`PARALLEL_MIN_BYTES` of data and work run on one thread).  Every failure raises
:class:`~tecomp.errors.ArgumentError` naming the tensor and the axis.

Large temporaries the compiled code needs (``pooled`` on the compiled entry) are allocated here,
once per calling thread, and reused by later calls of that thread.

Inputs are never written: non-contiguous or unaligned arrays are copied to contiguous ones,
contiguous ones are passed as they are and the generated code only stores into outputs and
temporaries.  ``out=`` arrays must be C-contiguous, writeable, of the exact dtype and shape,
and must not overlap an input or each other.

Extents are bound from a dimension that is a bare size variable (``n``); a dimension that is an
expression of one still-unbound size that is affine in it (``n + 2``, ``2 * n``) is solved for
it; every other dimension is checked once the sizes are known.  Scalar ``tc.var`` inputs are
passed as Python (or NumPy) integers in their position among the inputs.  The argument checks
and the binding of sizes live in :mod:`.arguments`.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any, Mapping, Sequence

import numpy as np

from .. import dtypes
from .. import expr as E
from ..cost import count_iterations
from ..divisors import size_divisors, zero_divisor
from ..errors import ArgumentError, CompileError
from ..loopir import Buffer, LoweredFunc
from ..stmt_functor import eval_int
from ..tensor import Tensor
from .arguments import (
    BufArg,
    VarArg,
    bind_extents,
    check_array,
    check_scalar,
    resolve_extents,
    size_vars,
)
from .call_plan import ADAPT_MIN_BYTES, DATA_OFFSET, MAX_PLANS, Plan, data_address, empty_result
from .result_pool import PAGE_SLACK, placement

_address_at = ctypes.c_void_p.from_address  # an array's data pointer at DATA_OFFSET


class Kernel:
    """A compiled program: ``kernel(*arrays, out=None)`` returns one array or a tuple.

    Attributes: ``ir`` (the :class:`~tecomp.loopir.LoweredFunc`), ``source`` (the optimised
    LLVM IR), ``cost`` (the static cost, sizes unbound), ``name``, ``inputs`` and ``outputs``
    (what the arguments and results stand for), ``target``.
    """

    _bounds: Any = None  # a BoundsInfo when the last output buffer is a bounds-error record

    def __init__(self, func: LoweredFunc, entry: Any, *,
                 inputs: Sequence[Tensor | E.Var] | None = None,
                 outputs: Sequence[Tensor] | None = None,
                 hidden: Mapping[Buffer, np.ndarray] | None = None,
                 single: bool | None = None, target: str = "llvm",
                 bounds: Any = None) -> None:
        self.ir = func
        # data-dependent index checks (tecomp.passes.bounds_check): last output is the record
        self._bounds = bounds
        self.name = func.name
        self.target = target
        self._entry = entry
        self._args: list[BufArg | VarArg] = []
        self._bufs: list[tuple[BufArg, int]] = []  # (spec, argument position)
        self._hidden: list[np.ndarray] = []
        # integer divisions by sizes: a zero divisor raises before a call allocates anything
        self._divisions = size_divisors([func], func.params)
        self._map_inputs(func, inputs, hidden or {})
        self._map_outputs(func, outputs)
        self.inputs = tuple(inputs) if inputs is not None else tuple(
            a.buffer if isinstance(a, BufArg) else a.var for a in self._args)
        self.outputs = tuple(outputs) if outputs is not None else tuple(func.outputs)
        self._single = len(self._outs) == 1 if single is None else single
        # temporaries the caller provides (LLVM: emit.pooled_buffers): (extents, item size)
        self._pooled = [(tuple(b.shape), _itemsize(b.dtype)) for b in
                        getattr(entry, "pooled", ())]
        self._pool = threading.local()
        self._work: dict[tuple[int, ...], int] = {}  # iterations per call, by sizes
        self._plans: dict[tuple[tuple[int, ...], ...], Plan] = {}  # by argument shapes
        nbuf = len(func.inputs) + len(func.outputs) + len(self._pooled)
        self._threaded = bool(getattr(entry, "threads", False))
        nint = len(func.params) + (1 if self._threaded else 0)
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * nbuf +
                                                   [ctypes.c_int64] * nint))
        self._fn = proto(entry.address)
        #: the most threads a call uses for ``"parallel"`` loops (1: run serially)
        self.threads = _cpu_count()

    # ------------------------------------------------------------------------ set-up
    def _map_inputs(self, func: LoweredFunc, inputs: Sequence[Any] | None,
                    hidden: Mapping[Buffer, np.ndarray]) -> None:
        bufs = list(func.inputs)
        if inputs is None:
            shaped = {d for b in bufs for d in b.shape if isinstance(d, E.Var)}
            for b in bufs:
                self._add_buffer(f"tensor {b.name!r}", b)
            for p in func.params:
                if p not in shaped and not any(p in size_vars(d) for b in bufs for d in b.shape):
                    self._args.append(VarArg(p))
            used = len(bufs)
        else:
            used = 0
            for x in inputs:
                if isinstance(x, Tensor):
                    if used >= len(bufs):
                        raise CompileError(
                            f"jit: kernel {func.name!r} has no buffer for input {x.name!r}")
                    b = bufs[used]
                    if b.ndim != x.ndim or b.dtype != x.dtype:
                        raise CompileError(
                            f"jit: input {x.name!r} does not match buffer {b.name!r} of "
                            f"kernel {func.name!r}")
                    used += 1
                    self._add_buffer(f"tensor {x.name!r}", b)
                elif isinstance(x, E.Var):
                    self._args.append(VarArg(x))
                else:
                    raise ArgumentError(
                        f"inputs of kernel {func.name!r}: {x!r} is neither a tensor nor a tc.var")
        for b in bufs[used:]:  # data the program carries itself (constant tensors)
            if b not in hidden:
                raise CompileError(f"jit: no data for the input buffer {b.name!r}")
            arr = np.ascontiguousarray(hidden[b], dtype=dtypes.to_numpy(b.dtype))
            self._hidden.append(arr)
        self._hidden_specs = [BufArg(f"constant {b.name!r}", b) for b in bufs[used:]]

    def _add_buffer(self, label: str, b: Buffer) -> None:
        spec = BufArg(label, b)
        self._bufs.append((spec, len(self._args)))
        self._args.append(spec)

    def _map_outputs(self, func: LoweredFunc, outputs: Sequence[Tensor] | None) -> None:
        bufs = func.outputs[:-1] if self._bounds is not None else func.outputs
        labels = [f"output {t.name!r}" for t in outputs] if outputs is not None else \
            [f"output {b.name!r}" for b in bufs]
        if len(labels) != len(bufs):
            raise CompileError(
                f"jit: kernel {func.name!r} has {len(bufs)} output buffer(s) for "
                f"{len(labels)} output(s)")
        self._outs = [BufArg(lab, b) for lab, b in zip(labels, bufs)]

    @property
    def source(self) -> str:
        """The code the kernel runs, as text (the LLVM backend: the IR after LLVM's
        optimisation -- the kernel's own function, then each outlined body's; a kernel's own
        function that only calls its bodies is compiled unoptimised and shows as emitted --
        read from the persistent cache on first use for a kernel loaded from it)."""
        text = self.__dict__.get("_source_text")
        return self._entry.source if text is None else text

    @source.setter
    def source(self, text: str) -> None:
        self._source_text = text

    @property
    def cost(self) -> Any:
        """``tc.cost`` of the compiled program with sizes unbound (SymPy expressions in them)."""
        from ..cost import count_cost

        return count_cost(self.ir, None)

    def __repr__(self) -> str:
        ins = ", ".join(a.label for a in self._args)
        outs = ", ".join(o.label for o in self._outs)
        return f"<Kernel {self.name!r} ({ins}) -> ({outs}) target={self.target}>"

    # ------------------------------------------------------------------------ calling
    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        if self._plans:
            try:
                plan = self._plans.get(tuple([a.shape for a in arrays]))
            except AttributeError:  # not all arrays
                plan = None
            if plan is not None:
                given = None if out is None else (
                    out if isinstance(out, (tuple, list)) else (out,))
                got = self._call_planned(plan, arrays, given)
                if got is not None:
                    return got
        return self._call(arrays, out)

    def _call_planned(self, plan: Plan, arrays: tuple[Any, ...],
                      given: Sequence[Any] | None) -> Any:
        """A call with the shapes of an earlier successful call (``plan``): sizes, output
        shapes and the thread decision are known, so only the dtype and the C-contiguous,
        aligned layout of each array are checked, and that ``out=`` arrays are writeable and
        overlap nothing.  None when an array fails a check (the full path then reports or
        copies it).  The common case -- results allocated here, all small -- reads each
        address inline and allocates with ``np.empty`` (a 64x64 matmul: 2.9 -> 2.4 us of
        Python a call, one core of an Intel Xeon)."""
        ptrs, spans = [], []
        near = size = 0  # the largest input: results are placed away from it
        off = DATA_OFFSET
        placed = plan.small_outputs is None or given is not None or self._pooled
        for a, (dt, strides, align) in zip(arrays, plan.checks):
            if type(a) is not np.ndarray or (a.dtype is not dt and a.dtype != dt) or \
                    a.strides != strides:
                return None
            p = _address_at(id(a) + off).value or 0 if off is not None else a.ctypes.data
            if p % align:
                return None
            ptrs.append(p)
            if placed:  # where results and temporaries go needs the largest input
                if a.nbytes > size:
                    near, size = p, a.nbytes
                if given is not None:
                    spans.append((p, p + a.nbytes))
        ptrs += plan.hidden
        if given is None:
            small = plan.small_outputs
            if small is not None:
                outs = [np.empty(shape, dt) for shape, dt in small]
            else:
                outs = [empty_result(shape, dt, near) for shape, dt, _ in plan.outputs]
            if off is not None:
                ptrs += [_address_at(id(o) + off).value or 0 for o in outs]
            else:
                ptrs += [o.ctypes.data for o in outs]
        else:
            if len(given) != len(plan.outputs):
                return None
            outs = list(given)
            for o, (shape, dt, strides) in zip(outs, plan.outputs):
                if type(o) is not np.ndarray or o.dtype != dt or o.shape != shape or \
                        o.strides != strides or not o.flags.writeable:
                    return None
                p = data_address(o)
                end = p + o.nbytes
                if p % dt.alignment or any(p < hi and lo < end for lo, hi in spans):
                    return None
                spans.append((p, end))
                ptrs.append(p)
        if self._pooled:
            ptrs += self._temporaries(plan.sizes, near)
        ready = plan.ready
        if ready[0] == self.threads:  # the thread decision made for this thread count
            rc = self._fn(*ptrs, *ready[1])
        else:
            params = plan.params
            trial = None
            if self._threaded:
                parallel = plan.work >= PARALLEL_MIN_BYTES
                if not parallel and plan.work >= ADAPT_MIN_BYTES and self.threads > 1:
                    parallel = plan.trial.parallel
                    if parallel is None:  # still timing both ways
                        trial = parallel = plan.trial.next_parallel()
                params = params + [self.threads if parallel else 1]
            if trial is None:
                plan.ready[:] = [self.threads, params]
                rc = self._fn(*ptrs, *params)
            else:  # a timed call of the serial/threaded trial
                t0 = time.perf_counter()
                rc = self._fn(*ptrs, *params)
                plan.trial.record(trial, time.perf_counter() - t0)
        if rc != 0:
            raise ArgumentError(
                f"kernel {self.name!r}: out of memory for a temporary buffer (code {rc})")
        return outs[0] if self._single else tuple(outs)

    def _call(self, arrays: tuple[Any, ...], out: Any) -> Any:
        if len(arrays) != len(self._args):
            names = ", ".join(a.label for a in self._args)
            raise ArgumentError(
                f"kernel {self.name!r} takes {len(self._args)} argument(s) ({names}), "
                f"got {len(arrays)}")
        sizes: dict[E.Var, int] = {}
        source: dict[E.Var, str] = {}
        for spec, x in zip(self._args, arrays):
            if isinstance(spec, VarArg):
                sizes[spec.var] = check_scalar(spec, x)
                source[spec.var] = spec.label
        ins: list[np.ndarray] = []
        for spec, pos in self._bufs:
            ins.append(check_array(spec, arrays[pos], pos))
        pending: list[tuple[BufArg, int, int]] = []
        for (spec, _), a in zip(self._bufs, ins):
            bind_extents(spec, a.shape, sizes, source, pending)
        for spec, a in zip(self._hidden_specs, self._hidden):
            bind_extents(spec, a.shape, sizes, source, pending)
        resolve_extents(pending, sizes, source)
        params = []
        for p in self.ir.params:
            if p not in sizes:
                raise ArgumentError(
                    f"kernel {self.name!r}: the size {p.name!r} is not determined by the "
                    "arguments' shapes; pass it as a tc.var input")
            params.append(sizes[p])
        if self._divisions:
            bad = zero_divisor(self._divisions, sizes)
            if bad is not None:
                raise ArgumentError(f"kernel {self.name!r}: {bad}; nothing was run")
        if self._bounds is not None:
            self._bounds.check_sizes(sizes, self.name)  # affine accesses the sizes break
        big = max(ins, key=lambda a: a.nbytes, default=None)
        near = 0 if big is None else data_address(big)  # results are placed away from it
        outs = self._outputs(out, sizes, ins + [x for x in arrays if isinstance(x, np.ndarray)],
                             near)
        ptrs = [a.ctypes.data for a in ins] + [a.ctypes.data for a in self._hidden] + \
            [o.ctypes.data for o in outs]
        record = self._bounds.new_record() if self._bounds is not None else None
        if record is not None:
            ptrs.append(record.ctypes.data)
        if self._pooled:
            ptrs += self._temporaries(sizes, near)
        work = 0
        plain = list(params)
        if self._threaded:
            nbytes = sum(a.nbytes for a in ins) + sum(o.nbytes for o in outs)
            work = max(nbytes, 4 * self._iterations(params, sizes))
            params.append(self.threads if work >= PARALLEL_MIN_BYTES else 1)
        rc = self._fn(*ptrs, *params)
        if rc != 0:
            raise ArgumentError(
                f"kernel {self.name!r}: out of memory for a temporary buffer (code {rc})")
        if record is not None:
            self._bounds.raise_if_failed(record, sizes, self.name)
        elif len(self._bufs) == len(arrays) and all(a is x for a, x in zip(ins, arrays)):
            self._remember(arrays, plain, sizes, outs, work)
        if self._single:
            return outs[0]
        return tuple(outs)

    def _remember(self, arrays: tuple[Any, ...], params: list[int], sizes: dict[E.Var, int],
                  outs: list[np.ndarray], work: int) -> None:
        """Keep what a successful call with these shapes worked out (see
        :meth:`_call_planned`).  Only calls whose arguments are all arrays, used as given,
        with no bounds record, are remembered; outputs are expected C-contiguous."""
        if len(self._plans) >= MAX_PLANS:
            self._plans.clear()
        self._plans[tuple(a.shape for a in arrays)] = Plan(
            layout=tuple((a.dtype, a.strides) for a in arrays),
            outputs=tuple((o.shape, o.dtype, _c_strides(o.shape, o.dtype))
                          for o in outs),
            hidden=[a.ctypes.data for a in self._hidden],
            params=params, sizes=dict(sizes), work=work)

    def _iterations(self, params: list[int], sizes: dict[E.Var, int]) -> int:
        """Innermost-loop iterations of a call with these sizes (as ``tc.cost`` counts them,
        without SymPy; remembered per sizes; 0 where it cannot be counted)."""
        key = tuple(params)
        hit = self._work.get(key)
        if hit is None:
            try:
                hit = count_iterations(self.ir, sizes)
            except Exception:  # noqa: BLE001 - an estimate only: fall back to the data size
                hit = 0
            if len(self._work) > 64:
                self._work.clear()
            self._work[key] = hit
        return hit

    def _temporaries(self, sizes: dict[E.Var, int], near: int = 0) -> list[int]:
        """Addresses (64-byte aligned) of this thread's memory for the pooled temporaries,
        grown when a call needs more: allocated once per thread, not on every call, so large
        temporaries are not returned to the OS and faulted in again each time.  Concurrent
        calls run on different threads and so never share a block.  The temporaries start a
        quarter page from the largest input ``near`` modulo 4 KiB, alternately before and
        after it, so no loop storing to one loads from the input, a result (half a page off)
        or the next temporary at a nearby page offset (:mod:`.result_pool` on 4K aliasing)."""
        arrays = getattr(self._pool, "arrays", None)
        if arrays is None:
            arrays = self._pool.arrays = [None] * len(self._pooled)
        ptrs = []
        for n, (dims, itemsize) in enumerate(self._pooled):
            nbytes = itemsize
            for d in dims:
                nbytes *= max(eval_int(d, sizes), 0)
            a = arrays[n]
            if a is None or a.nbytes < nbytes + PAGE_SLACK:
                try:
                    a = arrays[n] = np.empty(nbytes + PAGE_SLACK, dtype=np.uint8)
                except (MemoryError, ValueError):
                    raise ArgumentError(
                        f"kernel {self.name!r}: out of memory for a temporary buffer "
                        f"({nbytes} bytes)") from None
            addr = a.ctypes.data
            shift = (1024 if n % 2 else -1024) if near else 0
            ptrs.append(addr + placement(addr, near + shift))
        return ptrs

    def _output_shapes(self, sizes: dict[E.Var, int]) -> list[tuple[int, ...]]:
        """The outputs' shapes for the bound sizes (a negative extent is an error)."""
        shapes = []
        for spec in self._outs:
            shape = []
            for d, e in enumerate(spec.dims):
                v = eval_int(e, sizes)
                if v < 0:
                    raise ArgumentError(
                        f"kernel {self.name!r}, {spec.label}, axis {d}: extent {e} is {v} for "
                        "the given sizes")
                shape.append(v)
            shapes.append(tuple(shape))
        return shapes

    def _outputs(self, out: Any, sizes: dict[E.Var, int], ins: list[np.ndarray],
                 near: int = 0) -> list[np.ndarray]:
        shapes = self._output_shapes(sizes)
        if out is None:
            try:
                return [empty_result(s, o.np_dtype, near) for o, s in zip(self._outs, shapes)]
            except (MemoryError, ValueError):
                desc = ", ".join(f"{o.label} {s}" for o, s in zip(self._outs, shapes))
                raise ArgumentError(
                    f"kernel {self.name!r}: cannot allocate the results ({desc}) for the given "
                    "sizes") from None
        given = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(given) != len(self._outs):
            raise ArgumentError(
                f"kernel {self.name!r}: out= has {len(given)} array(s) for {len(self._outs)} "
                "output(s)")
        for n, (spec, shape, o) in enumerate(zip(self._outs, shapes, given)):
            where = f"kernel {self.name!r}, out= for {spec.label}"
            if not isinstance(o, np.ndarray):
                raise ArgumentError(f"{where}: expected a NumPy array, got {type(o).__name__}")
            if o.dtype != spec.np_dtype:
                raise ArgumentError(f"{where}: expected dtype {spec.dtype}, got {o.dtype}")
            if o.shape != shape:
                raise ArgumentError(f"{where}: expected shape {shape}, got {o.shape}")
            if not (o.flags.c_contiguous and o.flags.aligned and o.flags.writeable):
                raise ArgumentError(f"{where}: the array must be C-contiguous, aligned and "
                                    "writeable")
            for x in ins + given[:n]:
                if np.may_share_memory(o, x):
                    raise ArgumentError(f"{where}: the array overlaps an input or another "
                                        "output")
        return given


# A call runs on one thread when both its arguments and results and 4 bytes per innermost loop
# iteration (its static cost for the call's sizes) stay below this: handing chunks to the
# worker threads costs microseconds a parallel loop (far more on a loaded machine), more than
# such a kernel gains.  Measured on the CPU benchmark's cases (2 cores, workers spinning
# between jobs, benchmarks/README.md): threads lost at 4.7 MiB (a stride-2 convolution,
# 33 us serial) and below, and won from 6 MiB up.  0 threads every call.  Between
# call_plan.ADAPT_MIN_BYTES and this, calls with remembered shapes time both ways and keep the
# faster (call_plan.ThreadTrial).
PARALLEL_MIN_BYTES = 6 << 20


def _c_strides(shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, ...]:
    """The strides NumPy gives a new C-contiguous array of ``shape`` (without allocating
    one, except an empty one, whose strides follow NumPy's own rule)."""
    if 0 in shape:
        return np.empty(shape, dtype).strides
    out, step = [], dtype.itemsize
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def _itemsize(dtype: str) -> int:
    """Bytes per element of a buffer of ``dtype`` (bfloat16 is held as float32)."""
    return 4 if dtype == "bfloat16" else dtypes.to_numpy(dtype).itemsize


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
