"""Run generated CUDA source on the CPU: g++ with ``emulate.h``, driven through ctypes.

:func:`compile_emulated` compiles several CUDA sources with one g++ call into one shared
library (one translation unit per source, each with a ``tc_emu_<kernel>`` launcher per kernel).
:class:`EmulatedDevice` implements the runtime's :class:`Device` interface on host memory, so
``CudaKernel.launch(..., device=EmulatedDevice(...))`` exercises the same host code as a GPU
run: argument checks, temporaries, grid sizes, argument packing and launch order.  Fresh
allocations are filled with 0xFF bytes (NaN for floats) so reads of uninitialised memory show.

A kernel whose text uses block-level features (``__syncthreads``, ``__shared__``, warp
shuffles, the ``tc_block_*`` helpers) gets the threaded launcher of ``emulate.h`` (one fiber per
CUDA thread); the others the plain one (threads one after another).
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tecomp.codegen.cuda.runtime import Device

HERE = Path(__file__).resolve().parent
EMULATE_H = HERE / "emulate.h"
_KERNEL_RE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')
_LIBS: dict[str, ctypes.CDLL] = {}  # source digest -> library (kept for the session)
_DIRS: list[str] = []


_BLOCK_LEVEL_RE = re.compile(r"__syncthreads|__shared__|__shfl_|__syncwarp|tc_block_")


def gxx_available() -> bool:
    return shutil.which("g++") is not None


def kernel_names(source: str) -> list[str]:
    return _KERNEL_RE.findall(source)


def threaded_kernels(source: str) -> set[str]:
    """The kernels of ``source`` that need the threaded launcher (block-level features)."""
    heads = list(_KERNEL_RE.finditer(source))
    out = set()
    for n, m in enumerate(heads):
        end = heads[n + 1].start() if n + 1 < len(heads) else len(source)
        if _BLOCK_LEVEL_RE.search(source, m.end(), end):
            out.add(m.group(1))
    return out


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def compile_emulated(sources: list[str], opt: str = "-O1", one_unit: bool = False) -> None:
    """Compile the sources not compiled yet (one g++ call) and remember their libraries.

    ``one_unit`` concatenates them into one translation unit (their preludes are guarded),
    much faster for many small sources; their kernel names must then differ."""
    todo = []
    seen_names: dict[str, str] = {}
    for src in sources:
        d = _digest(src)
        if d in _LIBS or any(_digest(s) == d for s in todo):
            continue
        for name in kernel_names(src):
            if name in seen_names:
                raise ValueError(f"kernel name {name!r} appears in two sources of one batch")
            seen_names[name] = d
        todo.append(src)
    if not todo:
        return
    tmp = tempfile.mkdtemp(prefix="tecomp_emu_")
    _DIRS.append(tmp)
    stubs = Path(tmp, "stubs")
    stubs.mkdir()
    for h in ("cuda_fp16.h", "cuda_bf16.h"):
        (stubs / h).write_text("// emulation: the types come from emulate.h\n")
    units = []
    for src in todo:
        threaded = threaded_kernels(src)
        launchers = "".join(
            f'\nextern "C" void tc_emu_{k}(unsigned g, unsigned b, void** a) '
            f"{{ tc_emu_launch{'_threaded' if k in threaded else ''}({k}, g, b, a); }}"
            for k in kernel_names(src))
        units.append(src + launchers + "\n")
    if one_unit:
        units = ["\n".join(units)]
    files = []
    for n, text in enumerate(units):
        path = Path(tmp, f"prog{n}.cu")
        path.write_text(text)
        files.append(str(path))
    lib = str(Path(tmp, "emu.so"))
    cmd = ["g++", opt, "-std=c++17", "-shared", "-fPIC", "-w", "-include", str(EMULATE_H),
           "-I", str(stubs), "-x", "c++", *files, "-o", lib]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"g++ failed:\n{proc.stderr[-6000:]}")
    handle = ctypes.CDLL(lib)
    for src in todo:
        _LIBS[_digest(src)] = handle


class EmulatedDevice(Device):
    """Host memory and g++-compiled kernels behind the runtime's device interface.

    ``block`` and ``max_blocks`` are kept small so that grid-stride loops take several rounds.
    """

    name = "cpu-emulation"

    def __init__(self, block: int = 64, max_blocks: int = 3) -> None:
        self.block = block
        self.max_blocks = max_blocks
        self.mem: dict[int, np.ndarray] = {}
        self.launches: list[tuple[str, int, int]] = []
        self.allocated = 0

    @property
    def multiprocessors(self) -> int:
        return 1

    def config(self, total: int | None, private: bool) -> tuple[int, int]:
        if total is None:
            return self.max_blocks, self.block
        return min(self.max_blocks, -(-total // self.block)), self.block

    def alloc(self, nbytes: int) -> int:
        buf = np.full(max(int(nbytes), 1) + 64, 0xFF, dtype=np.uint8)
        base = buf.ctypes.data
        ptr = base + (-base) % 64  # aligned like cudaMalloc memory
        self.mem[ptr] = buf
        self.allocated += 1
        return ptr

    def free(self, ptr: int) -> None:
        del self.mem[ptr]

    def copy_in(self, ptr: int, host: np.ndarray) -> None:
        ctypes.memmove(ptr, host.ctypes.data, host.nbytes)

    def copy_out(self, host: np.ndarray, ptr: int) -> None:
        ctypes.memmove(host.ctypes.data, ptr, host.nbytes)

    def load(self, source: str, names: tuple[str, ...]) -> dict[str, Any]:
        compile_emulated([source])
        lib = _LIBS[_digest(source)]
        out = {}
        for n in names:
            fn = getattr(lib, f"tc_emu_{n}")
            fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
            fn.restype = None
            out[n] = (n, fn)
        return out

    def launch(self, fn: Any, grid: int, block: int, argv: np.ndarray) -> None:
        name, f = fn
        assert 1 <= grid and 1 <= block
        self.launches.append((name, grid, block))
        f(grid, block, argv.ctypes.data)


class FakeDeviceArray:
    """A host array that claims to live on the device (``__cuda_array_interface__``), for
    testing the zero-copy path on the emulated device."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = np.ascontiguousarray(a)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.a.shape, "typestr": self.a.dtype.str,
                "data": (self.a.ctypes.data, False), "strides": None, "version": 3}


def emulated_fixture(kernels: dict[str, Any], *, one_unit: bool = False) -> Any:
    """A module fixture that compiles ``kernels`` (name -> CudaKernel) against the emulation
    once, skipped without g++; a test module binds it as ``emulated =
    emulated_fixture(KERNELS)``."""

    @pytest.fixture(scope="module")
    def emulated() -> None:
        if not gxx_available():
            pytest.skip("g++ is not available")
        compile_emulated([k.source for k in kernels.values()], one_unit=one_unit)

    return emulated
