"""The CUDA kernel object: ``kernel(*arrays, out=None)`` on NumPy or device arrays.

:class:`CudaKernel` reuses the argument mapping and checks of
:class:`tecomp.codegen.kernel.Kernel` (count, ndim, dtype, extents, size binding, ``out=``
rules) and replaces the call: it schedules the lowered program into kernels
(:mod:`.schedule`), renders CUDA C (:mod:`.render`), and at call time

1. checks the arguments: NumPy arrays (copied to the device and back) or objects exposing
   ``__cuda_array_interface__`` (CuPy, PyTorch, Numba, :class:`~.runtime.DeviceArray`; used in
   place, never copied; C-contiguous);
2. allocates the outputs: NumPy arrays when every array argument is a NumPy array, else device
   arrays of the caller's library (``torch.empty`` on the tensor's device for PyTorch,
   ``cupy.empty`` for CuPy, a :class:`~.runtime.DeviceArray` otherwise), or uses ``out=``;
3. allocates the temporaries, launches one kernel per stage in program order on the default
   stream (grid-stride stages get blocks for a few waves; block reductions a block per output
   and tiled contractions a block of ``TILE_THREADS`` per output tile, up to the same cap),
   copies NumPy outputs back and frees what it allocated.

With device outputs the call returns without waiting for the kernels (as PyTorch and CuPy do);
``DeviceArray.get()`` waits.  Building needs no GPU: ``source`` is the CUDA C, and the source
is compiled once for ``sm_90`` (or the device's architecture) with NVRTC or nvcc when one is
available (``compile_check`` says what happened).  Calling without a GPU raises
``TecompError("no CUDA device: ...")``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tecomp import expr as E
from tecomp.errors import ArgumentError, CompileError, TecompError
from tecomp.loopir import Buffer, LoweredFunc
from tecomp.tensor import Tensor

from ..kernel import Kernel, _array, _bind, _resolve, _scalar, eval_int
from .blocks import TILE_M, TILE_N, TILE_THREADS
from .compile import DEFAULT_ARCH, CudaBinary, available_compilers, compile_cuda
from .render import BLOCK, CudaRenderer
from .runtime import (
    CudaDevice,
    Device,
    cuda_device,
    device_view,
    empty_like_library,
    interface,
)
from .schedule import GpuProgram, Stage, schedule

# bytes per element of a temporary (bfloat16 temporaries hold __nv_bfloat16)
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8,
             "bool": 1}


class CudaKernel(Kernel):
    """A program compiled for CUDA.  Attributes: ``source`` (CUDA C), ``ir`` (the lowered
    function), ``program`` (its kernels and temporaries), ``compile_check`` (what compiling
    at build time gave), ``binary`` (the cubin of that check, if any), ``target`` ("cuda").
    """

    def __init__(self, func: LoweredFunc, *, inputs: Sequence[Tensor | E.Var] | None = None,
                 outputs: Sequence[Tensor] | None = None,
                 hidden: Mapping[Buffer, np.ndarray] | None = None,
                 single: bool | None = None, check: bool = True, bounds: Any = None) -> None:
        # Kernel.__init__ wraps a CPU entry point; only its argument mapping is shared.
        self.ir = func
        self.name = func.name
        self.target = "cuda"
        # data-dependent index checks (tecomp.passes.bounds_check): last output is the record
        self._bounds = bounds
        records = frozenset() if bounds is None else frozenset((bounds.error,))
        self.program: GpuProgram = schedule(func, records=records)
        self._renderer = CudaRenderer(self.program)
        self.source: str = self._renderer.render()
        self._args = []
        self._bufs = []
        self._hidden = []
        self._map_inputs(func, inputs, hidden or {})
        self._map_outputs(func, outputs)
        self.inputs = tuple(inputs) if inputs is not None else tuple(
            a.buffer if hasattr(a, "buffer") else a.var for a in self._args)
        self.outputs = tuple(outputs) if outputs is not None else tuple(func.outputs)
        self._single = len(self._outs) == 1 if single is None else single
        self._hidden_dev: dict[int, list[int]] = {}
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
        sizes: dict[E.Var, int] = {}
        source: dict[E.Var, str] = {}
        for spec, x in zip(self._args, arrays):
            if not hasattr(spec, "buffer"):
                sizes[spec.var] = _scalar(spec, x)
                source[spec.var] = spec.label
        ins: list[Any] = []
        shapes = []
        protos = []
        for spec, pos in self._bufs:
            x = arrays[pos]
            if interface(x) is not None:
                _, shape, dt = device_view(x, f"argument {pos} ({spec.label})")
                _check_device_arg(spec, shape, dt, pos)
                ins.append(x)
                protos.append(x)
            else:
                x = _array(spec, x, pos)
                ins.append(x)
                shape = x.shape
            shapes.append(shape)
        pending: list = []
        for (spec, _), shape in zip(self._bufs, shapes):
            _bind(spec, shape, sizes, source, pending)
        for spec, a in zip(self._hidden_specs, self._hidden):
            _bind(spec, a.shape, sizes, source, pending)
        _resolve(pending, sizes, source)
        for p in self.ir.params:
            if p not in sizes:
                raise ArgumentError(
                    f"kernel {self.name!r}: the size {p.name!r} is not determined by the "
                    "arguments' shapes; pass it as a tc.var input")
        dev = device if device is not None else _pick_device(protos)
        outs = self._device_outputs(out, sizes, ins, protos, dev)
        return self._run(dev, ins, outs, sizes)

    def _device_outputs(self, out: Any, sizes: dict[E.Var, int], ins: list[Any],
                        protos: list[Any], dev: Device) -> list[Any]:
        shapes = self._output_shapes(sizes)
        if out is None:
            if protos:
                return [empty_like_library(protos[0], s, o.np_dtype, dev)
                        for o, s in zip(self._outs, shapes)]
            return [np.empty(s, dtype=o.np_dtype) for o, s in zip(self._outs, shapes)]
        given = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(given) != len(self._outs):
            raise ArgumentError(
                f"kernel {self.name!r}: out= has {len(given)} array(s) for {len(self._outs)} "
                "output(s)")
        kinds = {interface(o) is None for o in given}
        if len(kinds) > 1:
            raise ArgumentError(f"kernel {self.name!r}: out= mixes NumPy and device arrays; "
                                "give all of one kind")
        if kinds == {True}:  # NumPy: the CPU kernel's rules (dtype, shape, layout, overlap)
            return Kernel._outputs(self, given, sizes,
                                   [x for x in ins if isinstance(x, np.ndarray)])
        spans = [_span(x) for x in ins if interface(x) is not None]
        for n, (o, shape, spec) in enumerate(zip(given, shapes, self._outs)):
            where = f"kernel {self.name!r}, out= for {spec.label}"
            _, oshape, odt = device_view(o, where)
            if odt != spec.np_dtype:
                raise ArgumentError(f"{where}: expected dtype {spec.dtype}, got {odt}")
            if oshape != shape:
                raise ArgumentError(f"{where}: expected shape {shape}, got {oshape}")
            mine = _span(o)
            if any(_overlap(mine, s) for s in spans + [_span(x) for x in given[:n]]):
                raise ArgumentError(f"{where}: the array overlaps an input or another output")
        return given

    def _run(self, dev: Device, ins: list[Any], outs: list[Any], sizes: dict[E.Var, int]
             ) -> Any:
        if self._bounds is not None:  # affine accesses the sizes break: nothing is run
            self._bounds.check_sizes(sizes, self.name)
        fns = dev.load(self.source, self.kernel_names)
        owned: list[int] = []
        ptr: dict[Buffer, int] = {}
        copy_back: list[tuple[np.ndarray, int]] = []
        try:
            for (spec, _), x in zip(self._bufs, ins):
                ptr[spec.buffer] = self._to_device(dev, x, owned)
            for spec, p in zip(self._hidden_specs, self._hidden_pointers(dev)):
                ptr[spec.buffer] = p
            record = None
            if self._bounds is not None:  # the error record: zeroed, read back after
                record = self._bounds.new_record()
                p = dev.alloc(record.nbytes)
                owned.append(p)
                dev.copy_in(p, record)
                copy_back.append((record, p))
                ptr[self._bounds.error] = p
            for spec, o in zip(self._outs, outs):
                if interface(o) is None:
                    p = dev.alloc(o.nbytes)
                    owned.append(p)
                    copy_back.append((o, p))
                    ptr[spec.buffer] = p
                else:
                    ptr[spec.buffer] = device_view(o, spec.label)[0]
            for b in self.program.temps:
                n = 1
                for d, e in enumerate(b.shape):
                    v = eval_int(e, sizes)
                    if v < 0:
                        raise ArgumentError(f"kernel {self.name!r}: temporary {b.name!r}, "
                                            f"axis {d} has extent {e} = {v}")
                    n *= v
                p = dev.alloc(n * _ITEMSIZE[b.dtype])
                owned.append(p)
                ptr[b] = p
            params = [sizes[p] for p in self.ir.params]
            for st in self.program.stages:
                grid, block = self._launch_config(st, dev, sizes)
                if grid == 0:
                    continue
                argv, keep = _pack(st, ptr, params, self.ir.params)
                dev.launch(fns[st.name], grid, block, argv)
                del keep
            for host, p in copy_back:
                dev.copy_out(host, p)
        finally:
            for p in owned:
                dev.free(p)
        if record is not None:
            self._bounds.raise_if_failed(record, sizes, self.name)
        if self._single:
            return outs[0]
        return tuple(outs)

    def _to_device(self, dev: Device, x: Any, owned: list[int]) -> int:
        if interface(x) is not None:
            return device_view(x, "input")[0]
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

    def _launch_config(self, st: Stage, dev: Device, sizes: dict[E.Var, int]
                       ) -> tuple[int, int]:
        if st.serial:
            return 1, 1
        if st.tiling is not None or st.block_reduce is not None:
            return _block_config(st, dev, sizes)
        grid, block = dev.config(_iterations(st, sizes), bool(st.private))
        if st.private:  # the block-wide combine works on whole warps
            block = max(32, block // 32 * 32)
        return grid, block


def _check_device_arg(spec: Any, shape: tuple[int, ...], dt: np.dtype, pos: int) -> None:
    where = f"argument {pos} ({spec.label})"
    if len(shape) != len(spec.dims):
        raise ArgumentError(f"{where}: expected {len(spec.dims)} dimension(s), got a device "
                            f"array with {len(shape)} (shape {shape})")
    if dt != spec.np_dtype:
        raise ArgumentError(f"{where}: expected dtype {spec.dtype}, got {dt}; tecomp does not "
                            "cast implicitly")


def _span(x: Any) -> tuple[int, int]:
    ptr, shape, dt = device_view(x, "array")
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return ptr, ptr + n


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[0] < a[1] and b[0] < b[1]


def _pick_device(protos: list[Any]) -> Device:
    dev = cuda_device(0)
    for x in protos:
        ptr = device_view(x, "array")[0]
        if ptr and isinstance(dev, CudaDevice):
            ordinal = dev.pointer_ordinal(ptr)
            if ordinal is not None and ordinal != dev.ordinal:
                return cuda_device(ordinal)
        break
    return dev


def _iterations(st: Stage, sizes: dict[E.Var, int]) -> int | None:
    """The size of the stage's grid-mapped iteration space, when the host can compute it."""
    env = dict(sizes)
    try:
        for v, value in st.lets:
            env[v] = eval_int(value, env)
        total = 1
        for loop in st.mapped:
            lo, hi = eval_int(loop.lo, env), eval_int(loop.hi, env)
            total *= max(0, -(-(hi - lo) // loop.step))
        return total
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


def _pack(st: Stage, ptr: dict[Buffer, int], params: list[int], pvars: Sequence[E.Var]
          ) -> tuple[np.ndarray, np.ndarray]:
    """``kernelParams``: an array of pointers to the argument values (8-byte slots; an int32
    argument reads the low half of its slot, which is its value on little-endian hosts)."""
    vals = [ptr[b] for b in st.buffers]
    for v, p in zip(pvars, params):
        vals.append(p if v.dtype != "int32" else int(np.int32(p)) & 0xFFFFFFFF)
    slots = np.array([x & 0xFFFFFFFFFFFFFFFF for x in vals] or [0], dtype=np.uint64)
    argv = np.array([slots.ctypes.data + 8 * k for k in range(len(vals))] or [0],
                    dtype=np.uint64)
    return argv, slots


def build_cuda(func: LoweredFunc, *, inputs: Sequence[Any] | None = None,
               outputs: Sequence[Any] | None = None,
               hidden: Mapping[Any, np.ndarray] | None = None, single: bool | None = None,
               check: bool = True, bounds: Any = None) -> CudaKernel:
    """A :class:`CudaKernel` for ``func`` (the CUDA counterpart of
    :func:`tecomp.codegen.llvm.build_kernel`); ``check`` compiles the source at once;
    ``bounds`` describes the error record of :func:`tecomp.passes.bounds_check` (its last
    output), after which a call raises ``IndexBoundsError``."""
    return CudaKernel(func, inputs=inputs, outputs=outputs, hidden=hidden, single=single,
                      check=check, bounds=bounds)


