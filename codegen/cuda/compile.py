"""Compile CUDA C to a cubin: NVRTC through ``cuda.bindings.nvrtc`` when it is importable and
its library loads, else the ``nvcc`` command (``nvcc -cubin -arch=sm_XY``).

A cubin is machine code for exactly one architecture: the device's own compute capability at
run time (``sm_90`` for an H100/H200), ``sm_90`` for the compile check of a build without a
device.  Cubins, not PTX, because a newer NVRTC emits PTX that an older driver or ptxas rejects
(NVRTC 13.5 writes PTX 9.5, which CUDA 13.0 refuses); a cubin only needs a driver of the same
major version.

NVRTC has no built-in CUDA headers: kernels that use ``__half`` or ``__nv_bfloat16`` need the
directory holding ``cuda_fp16.h``.  It is looked for in the ``nvidia`` wheels next to the NVRTC
wheel (``nvidia-cuda-runtime``), in ``$CUDA_HOME``/``$CUDA_PATH``, next to ``nvcc`` and in
``/usr/local/cuda``.

Compiled binaries are cached in memory, keyed by the source text, the architecture and the
compiler (:data:`BINARIES`); no fast-math flags are passed to either compiler.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tecomp.errors import CompileError
from tecomp.logs import timed

from ..cache import CompileCache

DEFAULT_ARCH = "sm_90"
NVCC_TIMEOUT_S = 600


@dataclass(frozen=True)
class CudaBinary:
    """A compiled CUDA module: the cubin ``image`` for ``arch``, and who made it."""

    image: bytes
    arch: str
    compiler: str
    log: str = ""


BINARIES: CompileCache[CudaBinary] = CompileCache(128)


def _nvrtc():
    """The ``cuda.bindings.nvrtc`` module when its library loads, else None."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # cuda-python before 12.6
        except ImportError:
            return None
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # the Python module imports but libnvrtc.so is missing
        return None
    if int(err) != 0:
        return None
    return nvrtc


@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int] | None:
    """NVRTC's (major, minor), or None when NVRTC cannot be used."""
    mod = _nvrtc()
    if mod is None:
        return None
    _, major, minor = mod.nvrtcVersion()
    return int(major), int(minor)


def nvcc_path() -> str | None:
    """The ``nvcc`` on the PATH (or in ``$CUDA_HOME/bin``), if any."""
    found = shutil.which("nvcc")
    if found:
        return found
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return os.path.join(root, "bin", "nvcc")
    return None


def available_compilers() -> list[str]:
    """The compilers usable here, in order of preference: ``"nvrtc"``, ``"nvcc"``."""
    out = []
    if nvrtc_version() is not None:
        out.append("nvrtc")
    if nvcc_path() is not None:
        out.append("nvcc")
    return out


@lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """Directories holding ``cuda_fp16.h`` (for NVRTC, which has no CUDA headers built in)."""
    cands: list[Path] = []
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        for sub in ("cu13", "cuda_runtime", "cu12", "cuda_nvrtc"):
            cands.append(base / sub / "include")
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root:
            cands.append(Path(root) / "include")
    nvcc = nvcc_path()
    if nvcc:
        cands.append(Path(nvcc).resolve().parent.parent / "include")
    cands.append(Path("/usr/local/cuda/include"))
    out: list[str] = []
    for c in cands:
        try:
            ok = (c / "cuda_fp16.h").is_file()
        except OSError:
            ok = False
        if ok and str(c) not in out:
            out.append(str(c))
    return tuple(out)


def compile_cuda(source: str, arch: str = DEFAULT_ARCH, *, compiler: str | None = None,
                 cache: CompileCache[CudaBinary] | None = BINARIES) -> CudaBinary:
    """Compile ``source`` to a cubin for ``arch`` (``"sm_90"``).

    ``compiler`` is ``"nvrtc"``, ``"nvcc"`` or None (NVRTC if usable, else nvcc).  Raises
    :class:`~tecomp.errors.CompileError` with the compiler's log when compilation fails, or
    when no compiler is available.
    """
    _check_arch(arch)
    order = [compiler] if compiler else available_compilers()
    if not order:
        raise CompileError(
            "cuda compile: no CUDA compiler: install the cuda extra (pip install "
            "'tecomp[cuda]', which brings NVRTC) or put nvcc on the PATH")
    for c in order:
        if c not in ("nvrtc", "nvcc"):
            raise CompileError(f"cuda compile: unknown compiler {c!r}; use 'nvrtc' or 'nvcc'")

    def build() -> CudaBinary:
        errors = []
        for c in order:
            try:
                with timed(c):
                    if c == "nvrtc":
                        return _compile_nvrtc(source, arch)
                    return compile_many_nvcc([source], arch)[0]
            except CompileError as err:
                errors.append(err)
                if compiler is not None or not _missing_headers(str(err)):
                    break
        raise errors[-1]

    if cache is None:
        return build()
    key = hashlib.sha256(f"{arch}\0{','.join(order)}\0{source}".encode()).hexdigest()
    return cache.get_or_compile(key, build)


def _check_arch(arch: str) -> None:
    if not (arch.startswith("sm_") and arch[3:].rstrip("a").isdigit()):
        raise CompileError(f"cuda compile: architecture {arch!r} is not of the form 'sm_90'")


def _missing_headers(log: str) -> bool:
    return "cuda_fp16.h" in log or "cuda_bf16.h" in log


def _compile_nvrtc(source: str, arch: str) -> CudaBinary:
    nvrtc = _nvrtc()
    if nvrtc is None:
        raise CompileError("cuda compile: NVRTC is not available")
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"tecomp_kernel.cu", 0, [], [])
    if err != ok:
        raise CompileError(f"cuda compile: nvrtcCreateProgram failed ({err})")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"]
        opts += [f"-I{d}".encode() for d in cuda_include_dirs()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        # NVRTC writes into the buffers it is given: a bytearray, never ``b" " * size``,
        # which for size 1 is the interpreter's shared ``b" "`` object (NVRTC's empty log
        # "\0" then turns every ``b" "`` of the process into ``b"\x00"``: PyTorch imported
        # after that failed to parse its own operator schemas)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log_buf = bytearray(max(size, 1))
        nvrtc.nvrtcGetProgramLog(prog, log_buf)
        log = bytes(log_buf).rstrip(b"\0 ").decode(errors="replace")
        if err != ok:
            raise CompileError(f"cuda compile: NVRTC failed for {arch}:\n{log}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        if err != ok or size == 0:
            raise CompileError(f"cuda compile: NVRTC produced no cubin for {arch} ({err})")
        image = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, image)
        if err != ok:
            raise CompileError(f"cuda compile: nvrtcGetCUBIN failed ({err})")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    major, minor = nvrtc_version() or (0, 0)
    return CudaBinary(bytes(image), arch, f"nvrtc {major}.{minor}", log)


def compile_many_nvcc(sources: list[str], arch: str = DEFAULT_ARCH) -> list[CudaBinary]:
    """Compile several sources with one ``nvcc -cubin`` call (nvcc costs about a second a call,
    most of it start-up).  Raises :class:`CompileError` with nvcc's output on failure."""
    _check_arch(arch)
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("cuda compile: nvcc is not on the PATH")
    if not sources:
        return []
    with tempfile.TemporaryDirectory(prefix="tecomp_cuda_") as tmp:
        names = [f"k{n}.cu" for n in range(len(sources))]
        for name, src in zip(names, sources):
            Path(tmp, name).write_text(src)
        cmd = [nvcc, "-cubin", f"-arch={arch}", "-std=c++17", *names]
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True,
                                  timeout=NVCC_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CompileError(f"cuda compile: running nvcc failed: {err}") from err
        log = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            raise CompileError(f"cuda compile: nvcc failed for {arch}:\n{log}")
        out = []
        for name in names:
            image = Path(tmp, name[:-3] + ".cubin").read_bytes()
            out.append(CudaBinary(image, arch, "nvcc", log))
        return out
