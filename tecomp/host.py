"""What the CPU schedule and the LLVM backend need to know about the host they compile for.

:func:`describe` returns a :class:`Host`: the widest vector registers worth using (bits), the
cache sizes, the number of cores the process may run on and whether the CPU fuses
multiply-adds.  Everything comes from the CPU's reported features (LLVM's
``get_host_cpu_features``), the kernel's cache description
(``/sys/devices/system/cpu/cpu0/cache/index*``, else ``os.sysconf``) and the process's CPU
affinity (under a hypervisor, the L3 a guest can count on: :func:`l3_share`); nothing
depends on a CPU model name, so a schedule that reads this description is a pure function
of the loop IR and these numbers.

Vector width.  AVX-512 hosts have 512-bit registers, but LLVM's x86 tuning for recent Intel
cores prefers 256-bit vectors unless told otherwise (the ``prefer-256-bit`` tuning flag): we
ask for the full width (:attr:`Host.vector_bits` = 512) whenever the CPU has AVX-512F (and,
where LLVM lists it, EVEX512).  AVX/AVX2 hosts get 256, others 128.  :func:`with_vector_bits`
gives the same description at another width (an A/B comparison, or a narrower target).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

#: fallback cache sizes (bytes) when neither sysfs nor sysconf reports them: small, safe values
DEFAULT_CACHES = (32 * 1024, 512 * 1024, 4 * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class Host:
    """The host CPU as the schedule and code generator see it."""

    vector_bits: int  # widest profitable vector register width
    fma: bool  # fused multiply-add instructions
    cores: int  # CPUs this process may run on
    l1d: int  # bytes of level-1 data cache (per core)
    l2: int  # bytes of level-2 cache
    l3: int  # bytes of level-3 cache this process can count on (0 when none; :func:`l3_share`)
    features: str = ""  # LLVM's feature string ("+avx2,+fma,...")

    def lanes(self, dtype_bytes: int = 4) -> int:
        """Elements of ``dtype_bytes`` bytes in one vector register."""
        return max(1, self.vector_bits // (8 * dtype_bytes))


def vector_bits_of(features: str) -> int:
    """The widest vector width (bits) that the LLVM feature string ``features`` allows."""
    on = {f[1:] for f in features.split(",") if f.startswith("+")}
    off = {f[1:] for f in features.split(",") if f.startswith("-")}
    if "avx512f" in on and "evex512" not in off:
        return 512
    if "avx" in on:
        return 256
    return 128


def llvm_features(host: Host) -> str:
    """``host.features`` with the vector-width preference LLVM needs for ``host.vector_bits``:
    at 512 bits the x86 ``prefer-256-bit`` tuning is switched off; at 256 on an AVX-512 CPU
    the AVX-512 instructions stay available but vectors are 256 bits wide."""
    feats = [f for f in host.features.split(",") if f and f[1:] != "prefer-256-bit"]
    if "+avx512f" in feats:
        feats.append("-prefer-256-bit" if host.vector_bits >= 512 else "+prefer-256-bit")
    return ",".join(feats)


def with_vector_bits(host: Host, bits: int) -> Host:
    """``host`` using vectors of at most ``bits`` (128, 256 or 512) bits."""
    if bits not in (128, 256, 512):
        raise ValueError(f"vector width must be 128, 256 or 512 bits, not {bits}")
    return replace(host, vector_bits=min(bits, vector_bits_of(host.features)))


def reported_caches() -> tuple[int, int, int]:
    """(L1 data, L2, L3) bytes as reported: sysfs, else sysconf, else :data:`DEFAULT_CACHES`
    (the L3 before :func:`l3_share`)."""
    found: dict[int, int] = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in sorted(root.glob("index*")):
            kind = (idx / "type").read_text().strip()
            if kind == "Instruction":
                continue
            level = int((idx / "level").read_text())
            found[level] = parse_size((idx / "size").read_text())
    except (OSError, ValueError):
        found = {}
    names = {1: "SC_LEVEL1_DCACHE_SIZE", 2: "SC_LEVEL2_CACHE_SIZE", 3: "SC_LEVEL3_CACHE_SIZE"}
    out = []
    for level, default in zip((1, 2, 3), DEFAULT_CACHES):
        size = found.get(level, 0)
        if size <= 0:
            try:
                size = int(os.sysconf(names[level]))
            except (ValueError, OSError, AttributeError):
                size = 0
        out.append(size if size > 0 else (default if level < 3 else 0))
    return out[0], out[1], out[2]


#: the most level-3 cache a core of a virtual machine counts on, in multiples of its L2: the
#: largest ratio of per-core L3 to per-core L2 among server x86 parts that share their L3
#: (Intel Xeon 1-2.5x, AMD EPYC 4-8x; the stacked-cache parts apart)
L3_PER_L2 = 8


def l3_share(l3: int, l2: int, cores: int, virtual: bool) -> int:
    """The level-3 cache a process on ``cores`` CPUs can count on, of the ``l3`` bytes
    reported.  A virtual machine's CPUs may report the whole socket's L3, shared with
    other guests' cores that the guest cannot see (one such guest, 2 vCPUs of an Intel
    Xeon, reports 480 MiB, 16 ways of 491520 sets, shared by its 2 CPUs; a 64 MiB output
    written with plain stores ran at DRAM speed there, 2.3x slower than streamed, and the
    crossover lay between 32 and 40 MiB): under a hypervisor the share is capped at
    :data:`L3_PER_L2` times the L2 of each of the process's cores.  On bare metal the whole
    L3 as reported."""
    if not virtual or l3 <= 0 or l2 <= 0:
        return l3
    return min(l3, L3_PER_L2 * l2 * max(1, cores))


def under_hypervisor() -> bool:
    """Whether the CPU reports that it runs under a hypervisor (the ``hypervisor`` flag of
    ``/proc/cpuinfo``; False where that file is missing)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return "hypervisor" in line.split()
    except OSError:
        pass
    return False


def parse_size(text: str) -> int:
    """Bytes of a sysfs cache size such as ``48K``, ``2048K``, ``300M`` or ``1024``."""
    t = text.strip().upper()
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(t[-1:], 1)
    return int(t[:-1] if scale != 1 else t) * scale


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def from_features(features: str) -> Host:
    """The description of this machine's caches and cores with the CPU features
    ``features`` (an LLVM feature string): a host with another instruction set."""
    l1d, l2, l3 = reported_caches()
    on = {f[1:] for f in features.split(",") if f.startswith("+")}
    cores = cpu_count()
    return Host(vector_bits_of(features), "fma" in on or "fma4" in on, cores, l1d, l2,
                l3_share(l3, l2, cores, under_hypervisor()), features)


#: where :func:`describe` reads the CPU's LLVM feature string when set (:func:`set_feature_source`)
_feature_source: Callable[[], str] | None = None


def set_feature_source(source: Callable[[], str] | None) -> None:
    """Read the CPU's LLVM feature string from ``source`` instead of asking LLVM: the LLVM
    backend's record of this host from an earlier process (``codegen/llvm/identity.py``),
    so that a process whose kernels all come from the persistent cache never loads LLVM.
    It must return what LLVM would; :func:`describe` is recomputed."""
    global _feature_source
    _feature_source = source
    describe.cache_clear()


@functools.lru_cache(maxsize=1)
def describe() -> Host:
    """This machine (computed once per process)."""
    if _feature_source is not None:
        return from_features(_feature_source())
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return from_features(llvm.get_host_cpu_features().flatten())
