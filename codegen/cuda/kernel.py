"""The CUDA kernel object: ``kernel(*arrays, out=None)`` on NumPy or device arrays.

:class:`CudaKernel` reuses the argument mapping and checks of
:class:`tecomp.codegen.kernel.Kernel` (count, ndim, dtype, extents, size binding, ``out=``
rules) and replaces the call: it takes a program the GPU schedule cut into kernels
(:mod:`tecomp.passes.schedule.gpu`), renders CUDA C (:mod:`.render`), and at call time

1. checks the arguments: NumPy arrays (copied to the device and back) or objects exposing
   ``__cuda_array_interface__`` (CuPy, PyTorch, Numba, :class:`~.runtime.DeviceArray`; used in
   place, never copied; C-contiguous);
2. allocates the outputs: NumPy arrays when every array argument is a NumPy array, else device
   arrays of the caller's library (``torch.empty`` on the tensor's device for PyTorch,
   ``cupy.empty`` for CuPy, a :class:`~.runtime.DeviceArray` otherwise), or uses ``out=``;
3. launches one kernel per stage in program order on the default stream, following the
   launch plan for the call's sizes (:mod:`.launch_plan`, made at the first call with them:
   grid-stride stages get blocks for a few waves; block reductions a block per output and
   tiled contractions a block of ``TILE_THREADS`` per output tile, up to the same cap; on a
   GPU the temporaries are kept with the plan), copies NumPy outputs back and frees what it
   allocated.

The argument checks and the sizes they bind are remembered for the last shapes seen, so a
steady-state call with device arrays and ``out=`` costs the checks of the arrays' interfaces,
one ``cuCtxSetCurrent`` and one ``cuLaunchKernel`` per stage (plus a memset and a read-back of
the error record for kernels with data-dependent index checks).

With device outputs the call returns without waiting for the kernels (as PyTorch and CuPy do);
``DeviceArray.get()`` waits.  Building needs no GPU: ``source`` is the CUDA C, and the source
is compiled once for ``sm_90`` (or the device's architecture) with NVRTC or nvcc when one is
available (``compile_check`` says what happened).  Calling without a GPU raises
``TecompError("no CUDA device: ...")``.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

import numpy as np

from tecomp import expr as E
from tecomp.divisors import size_divisors, zero_divisor
from tecomp.errors import ArgumentError, TecompError
from tecomp.gpuir import GpuProgram
from tecomp.loopir import Buffer, LoweredFunc
from tecomp.tensor import Tensor

from ..kernel import Kernel, bind_extents, check_array, check_scalar, resolve_extents
from .compile import DEFAULT_ARCH, CudaBinary, available_compilers, compile_cuda
from .launch_plan import MAX_PLANS, LaunchPlan
from .render import CudaRenderer
from .runtime import (
    Device,
    cuda_device,
    device_view,
    empty_like_library,
    interface,
)


class CudaKernel(Kernel):
    """A program compiled for CUDA.  Attributes: ``source`` (CUDA C), ``ir`` (the lowered
    function: ``ir`` if given, else the scheduled program's), ``program`` (its kernels and
    temporaries), ``compile_check`` (what compiling at build time gave), ``binary`` (the
    cubin of that check, if any), ``target`` ("cuda").
    """

    def __init__(self, program: GpuProgram, *, inputs: Sequence[Tensor | E.Var] | None = None,
                 outputs: Sequence[Tensor] | None = None,
                 hidden: Mapping[Buffer, np.ndarray] | None = None,
                 single: bool | None = None, check: bool = True, bounds: Any = None,
                 ir: LoweredFunc | None = None) -> None:
        # Kernel.__init__ wraps a CPU entry point; only its argument mapping is shared.
        func = program.func if ir is None else ir
        self.ir = func
        self.name = func.name
        self.target = "cuda"
        # data-dependent index checks (tecomp.passes.bounds_check): last output is the record
        self._bounds = bounds
        self.program = program
        self._renderer = CudaRenderer(self.program)
        self.source: str = self._renderer.render()
        self._args = []
        self._bufs = []
        self._hidden = []
        self._divisions = size_divisors([func], func.params)  # checked before each call
        self._map_inputs(func, inputs, hidden or {})
        self._map_outputs(func, outputs)
        self.inputs = tuple(inputs) if inputs is not None else tuple(
            a.buffer if hasattr(a, "buffer") else a.var for a in self._args)
        self.outputs = tuple(outputs) if outputs is not None else tuple(func.outputs)
        self._single = len(self._outs) == 1 if single is None else single
        self._hidden_dev: dict[int, list[int]] = {}
        self._sizes_memo: dict[tuple, tuple[dict[E.Var, int], list[tuple[int, ...]]]] = {}
        self._plans: dict[tuple, LaunchPlan] = {}
        self._plans_lock = threading.Lock()
        self.binary: CudaBinary | None = None
        self.compile_check = "not run"
        if check:
            self._check_compile()

    def _check_compile(self) -> None:
        if not available_compilers():
            self.compile_check = "skipped: no CUDA compiler (NVRTC or nvcc) available"
            return
        arch = DEFAULT_ARCH
        try:
            arch = cuda_device().arch
        except TecompError:
            pass
        self.binary = compile_cuda(self.source, arch)
        self.compile_check = f"ok: {self.binary.compiler}, {arch}"

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(st.name for st in self.program.stages)

    def __repr__(self) -> str:
        return super().__repr__().replace("target=cuda", f"target=cuda, "
                                          f"{len(self.program.stages)} kernel(s)")

    # ------------------------------------------------------------------------ calling
    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        return self.launch(arrays, out=out)

    def launch(self, arrays: Sequence[Any], *, out: Any = None,
               device: Device | None = None) -> Any:
        """Run the program; ``device`` defaults to the GPU owning the device arguments (else
        GPU 0).  Returns one array or a tuple, as ``kernel(*arrays, out=out)``."""
        if len(arrays) != len(self._args):
            names = ", ".join(a.label for a in self._args)
            raise ArgumentError(
                f"kernel {self.name!r} takes {len(self._args)} argument(s) ({names}), "
                f"got {len(arrays)}")
        scalars: list[tuple[E.Var, int, str]] = []
        for spec, x in zip(self._args, arrays):
            if not hasattr(spec, "buffer"):
                scalars.append((spec.var, check_scalar(spec, x), spec.label))
        ins: list[Any] = []
        views: list[tuple[int, tuple[int, ...], np.dtype] | None] = []
        shapes = []
        protos = []
        for spec, pos in self._bufs:
            x = arrays[pos]
            cai = interface(x)
            if cai is not None:
                view = device_view(x, f"argument {pos} ({spec.label})", cai)
                _check_device_arg(spec, view[1], view[2], pos)
                protos.append(x)
                shape = view[1]
            else:
                x = check_array(spec, x, pos)
                view = None
                shape = x.shape
            ins.append(x)
            views.append(view)
            shapes.append(shape)
        sizes, out_shapes = self._sizes(tuple(shapes), scalars)
        dev = device if device is not None else _pick_device(views)
        outs, out_ptrs = self._device_outputs(out, sizes, out_shapes, ins, views, protos, dev)
        return self._run(dev, ins, [None if v is None else v[0] for v in views], outs,
                         out_ptrs, sizes)

    def _sizes(self, shapes: tuple[tuple[int, ...], ...],
               scalars: list[tuple[E.Var, int, str]]
               ) -> tuple[dict[E.Var, int], list[tuple[int, ...]]]:
        """The size parameters bound by the arguments' shapes and scalars, and the outputs'
        shapes (remembered for the last shapes seen: a call with the same shapes binds the
        same sizes).  The dict returned must not be modified."""
        key = (shapes, tuple(v for _, v, _ in scalars))
        hit = self._sizes_memo.get(key)
        if hit is not None:
            return hit
        sizes: dict[E.Var, int] = {}
        source: dict[E.Var, str] = {}
        for var, value, label in scalars:
            sizes[var] = value
            source[var] = label
        pending: list = []
        for (spec, _), shape in zip(self._bufs, shapes):
            bind_extents(spec, shape, sizes, source, pending)
        for spec, a in zip(self._hidden_specs, self._hidden):
            bind_extents(spec, a.shape, sizes, source, pending)
        resolve_extents(pending, sizes, source)
        for p in self.ir.params:
            if p not in sizes:
                raise ArgumentError(
                    f"kernel {self.name!r}: the size {p.name!r} is not determined by the "
                    "arguments' shapes; pass it as a tc.var input")
        # before anything is allocated: a zero divisor of sizes, sizes that break an access
        bad = zero_divisor(self._divisions, sizes) if self._divisions else None
        if bad is not None:
            raise ArgumentError(f"kernel {self.name!r}: {bad}; nothing was run")
        if self._bounds is not None:
            self._bounds.check_sizes(sizes, self.name)
        if len(self._sizes_memo) >= MAX_PLANS:
            self._sizes_memo.pop(next(iter(self._sizes_memo)), None)
        hit = self._sizes_memo[key] = (sizes, self._output_shapes(sizes))
        return hit

    def _device_outputs(self, out: Any, sizes: dict[E.Var, int],
                        shapes: list[tuple[int, ...]], ins: list[Any], views: list[Any],
                        protos: list[Any], dev: Device) -> tuple[list[Any], list[int | None]]:
        """The output arrays and their device addresses (None for NumPy outputs)."""
        if out is None:
            if protos:
                outs = [empty_like_library(protos[0], s, o.np_dtype, dev)
                        for o, s in zip(self._outs, shapes)]
                return outs, [device_view(o, spec.label)[0] for o, spec in zip(outs, self._outs)]
            return [np.empty(s, dtype=o.np_dtype) for o, s in zip(self._outs, shapes)], \
                [None] * len(self._outs)
        given = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(given) != len(self._outs):
            raise ArgumentError(
                f"kernel {self.name!r}: out= has {len(given)} array(s) for {len(self._outs)} "
                "output(s)")
        cais = [interface(o) for o in given]
        kinds = {c is None for c in cais}
        if len(kinds) > 1:
            raise ArgumentError(f"kernel {self.name!r}: out= mixes NumPy and device arrays; "
                                "give all of one kind")
        if kinds == {True}:  # NumPy: the CPU kernel's rules (dtype, shape, layout, overlap)
            return Kernel._outputs(self, given, sizes,
                                   [x for x in ins if isinstance(x, np.ndarray)]), \
                [None] * len(given)
        spans = [_span(v) for v in views if v is not None]
        ptrs: list[int | None] = []
        for o, cai, shape, spec in zip(given, cais, shapes, self._outs):
            where = f"kernel {self.name!r}, out= for {spec.label}"
            view = device_view(o, where, cai)
            if view[2] != spec.np_dtype:
                raise ArgumentError(f"{where}: expected dtype {spec.dtype}, got {view[2]}")
            if view[1] != shape:
                raise ArgumentError(f"{where}: expected shape {shape}, got {view[1]}")
            mine = _span(view)
            if any(_overlap(mine, s) for s in spans):
                raise ArgumentError(f"{where}: the array overlaps an input or another output")
            spans.append(mine)
            ptrs.append(view[0])
        return given, ptrs

    def _plan(self, dev: Device, sizes: dict[E.Var, int]) -> LaunchPlan:
        """The launch plan for these sizes on ``dev`` (made at the first call with them)."""
        key = (id(dev), tuple(sizes[p] for p in self.ir.params))
        plan = self._plans.get(key)
        if plan is not None and plan.device is dev:
            return plan
        if self._bounds is not None:  # affine accesses the sizes break: nothing is run
            self._bounds.check_sizes(sizes, self.name)
        fns = dev.load(self.source, self.kernel_names)
        order = [spec.buffer for spec, _ in self._bufs]
        order += [spec.buffer for spec in self._hidden_specs]
        record_bytes = 0
        if self._bounds is not None:
            order.append(self._bounds.error)
            record_bytes = self._bounds.new_record().nbytes
        order += [spec.buffer for spec in self._outs]
        order += list(self.program.temps)
        plan = LaunchPlan(self.name, self.program, dev, fns, sizes, order, self.ir.params,
                          record_bytes, self._hidden_pointers(dev))
        with self._plans_lock:
            if len(self._plans) >= MAX_PLANS:
                self._plans.pop(next(iter(self._plans)), None)
            self._plans[key] = plan
        return plan

    def _run(self, dev: Device, ins: list[Any], in_ptrs: list[int | None], outs: list[Any],
             out_ptrs: list[int | None], sizes: dict[E.Var, int]) -> Any:
        with dev.session():  # the device's context made current once for the whole call
            plan = self._plan(dev, sizes)
            owned: list[int] = []
            copy_back: list[tuple[np.ndarray, int]] = []
            record = None
            try:
                ptrs = [self._to_device(dev, x, owned) if p is None else p
                        for x, p in zip(ins, in_ptrs)]
                ptrs += plan.hidden
                record_ptr = 0
                if self._bounds is not None:  # the error record: zeroed, read back after
                    record = self._bounds.new_record()
                    if plan.record is not None:
                        record_ptr = plan.record.ptr
                    else:
                        record_ptr = dev.alloc(record.nbytes)
                        owned.append(record_ptr)
                        dev.copy_in(record_ptr, record)
                    ptrs.append(record_ptr)
                for o, p in zip(outs, out_ptrs):
                    if p is None:
                        p = dev.alloc(o.nbytes)
                        owned.append(p)
                        copy_back.append((o, p))
                    ptrs.append(p)
                if plan.keep:
                    ptrs += [t.ptr for t in plan.temps]
                else:
                    for n in plan.temp_bytes:
                        p = dev.alloc(n)
                        owned.append(p)
                        ptrs.append(p)
                plan.run(dev, ptrs, copy_back, record, record_ptr)
            finally:
                for p in owned:
                    dev.free(p)
        if record is not None:
            self._bounds.raise_if_failed(record, sizes, self.name)
        if self._single:
            return outs[0]
        return tuple(outs)

    def _to_device(self, dev: Device, x: Any, owned: list[int]) -> int:
        p = dev.alloc(x.nbytes)
        owned.append(p)
        dev.copy_in(p, x)
        return p

    def _hidden_pointers(self, dev: Device) -> list[int]:
        """Constant tensors, copied to each device once and kept there."""
        key = id(dev)
        hit = self._hidden_dev.get(key)
        if hit is None:
            hit = []
            for a in self._hidden:
                p = dev.alloc(a.nbytes)
                dev.copy_in(p, a)
                hit.append(p)
            self._hidden_dev[key] = hit
        return hit


def _check_device_arg(spec: Any, shape: tuple[int, ...], dt: np.dtype, pos: int) -> None:
    where = f"argument {pos} ({spec.label})"
    if len(shape) != len(spec.dims):
        raise ArgumentError(f"{where}: expected {len(spec.dims)} dimension(s), got a device "
                            f"array with {len(shape)} (shape {shape})")
    if dt != spec.np_dtype:
        raise ArgumentError(f"{where}: expected dtype {spec.dtype}, got {dt}; tecomp does not "
                            "cast implicitly")


def _span(view: tuple[int, tuple[int, ...], np.dtype]) -> tuple[int, int]:
    ptr, shape, dt = view
    n = dt.itemsize
    for s in shape:
        n *= s
    return ptr, ptr + n


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[0] < a[1] and b[0] < b[1]


def _pick_device(views: list[Any]) -> Device:
    """GPU 0, or the GPU owning the first device argument when there are several GPUs."""
    dev = cuda_device(0)
    if dev.device_count > 1:
        for v in views:
            if v is not None:
                ordinal = dev.pointer_ordinal(v[0]) if v[0] else None
                if ordinal is not None and ordinal != dev.ordinal:
                    return cuda_device(ordinal)
                break
    return dev


def build_cuda(program: GpuProgram, *, inputs: Sequence[Any] | None = None,
               outputs: Sequence[Any] | None = None,
               hidden: Mapping[Any, np.ndarray] | None = None, single: bool | None = None,
               check: bool = True, bounds: Any = None) -> CudaKernel:
    """A :class:`CudaKernel` for the scheduled ``program`` (the CUDA counterpart of
    :func:`tecomp.codegen.llvm.build_kernel`); ``check`` compiles the source at once;
    ``bounds`` describes the error record of :func:`tecomp.passes.bounds_check` (its last
    output), after which a call raises ``IndexBoundsError``."""
    return CudaKernel(program, inputs=inputs, outputs=outputs, hidden=hidden, single=single,
                      check=check, bounds=bounds)


