"""A loader of the relocatable x86-64 ELF objects this backend emits, without LLVM.

:func:`load` maps an object file made by :func:`.jit.compile_ir` (``ET_REL``, x86-64, little
endian) into executable memory of this process, resolves its undefined symbols (the
parallel-loop runtime, ``malloc``/``free``/``memset`` of libc, libm, the compiler runtime)
and applies its relocations, as a static linker would for one object.  A kernel from the
persistent cache is then ready in well under a millisecond and without importing LLVM at all
(llvmlite's shared library takes 20-30 ms to load; an ORC JIT of its own a few more per
kernel), which is most of what a warm build costs.

What it takes (the System V x86-64 psABI, "Relocation Types"; the ELF-64 object file
format): sections with ``SHF_ALLOC`` (code, constants, data; ``SHT_NOBITS`` zero-filled),
one symbol table, ``SHT_RELA`` sections for allocated targets, and the relocations LLVM's
code models produce -- ``R_X86_64_64`` (S + A; the large code model of ``jitdefault``, all
this backend uses), ``R_X86_64_PC32``/``PLT32`` (S + A - P, through a jump stub when the
symbol is too far for 32 bits), ``R_X86_64_PC64``, ``R_X86_64_32``/``32S`` when the value
fits, and ``GOTPCREL`` forms (a slot per symbol next to the code).  Anything else --
another machine or byte order, common or TLS symbols, an unknown relocation, a symbol that
cannot be found -- raises :class:`UnsupportedObject`, and the caller links the object with
LLVM's JIT instead (:func:`.jit.load_object`); nothing is half-loaded.

Memory: one anonymous mapping per object; code pages become read+execute and constant pages
read-only once relocated (never writable and executable at once), data pages stay
read+write; the mapping is unmapped when the :class:`Image` is dropped.  Unwind tables are
copied but not registered: kernels never unwind (they return a status).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import struct
import sys
import threading
from typing import Callable, Mapping

__all__ = ["Image", "UnsupportedObject", "available", "load"]


class UnsupportedObject(Exception):
    """The object uses something this loader does not handle (the caller falls back)."""


# ELF constants (ELF-64 object file format; x86-64 psABI)
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 0x1, 0x2, 0x4
_SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 2, 4, 8, 9
_SHN_UNDEF, _SHN_ABS, _SHN_COMMON = 0, 0xFFF1, 0xFFF2
_STT_TLS = 6
_R_64, _R_PC32, _R_GOT32, _R_PLT32 = 1, 2, 3, 4
_R_GOTPCREL, _R_32, _R_32S, _R_PC64 = 9, 10, 11, 24
_R_GOTPCRELX, _R_REX_GOTPCRELX = 41, 42
_PAGE = mmap.PAGESIZE
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether this process can use the loader (x86-64 Linux with a usable libc; asked once:
    every kernel load asks)."""
    import platform

    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64") \
        and _libc() is not None


_LIBS: list = []
_LIBS_LOCK = threading.Lock()


def _libc() -> ctypes.CDLL | None:
    libs = _libraries()
    return libs[0] if libs else None


def _libraries() -> list:
    """The process's global symbols, then libm and the compiler runtime (loaded by name)."""
    with _LIBS_LOCK:
        if not _LIBS:
            try:
                main = ctypes.CDLL(None, use_errno=True)
                main.mmap.restype = ctypes.c_void_p
                main.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                      ctypes.c_int, ctypes.c_int, ctypes.c_long)
                main.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
                main.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
            except (OSError, AttributeError):
                return []
            _LIBS.append(main)
            for name in ("libm.so.6", "libgcc_s.so.1"):
                try:
                    _LIBS.append(ctypes.CDLL(name))
                except OSError:
                    found = ctypes.util.find_library(name.split(".")[0][3:])
                    if found:
                        try:
                            _LIBS.append(ctypes.CDLL(found))
                        except OSError:
                            pass
        return _LIBS


def _process_symbol(name: str) -> int | None:
    for lib in _libraries():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        address = ctypes.cast(fn, ctypes.c_void_p).value
        if address:
            return address
    return None


class Image:
    """An object file mapped into the process; ``address(name)`` of a defined symbol."""

    def __init__(self, base: int, size: int, symbols: dict[str, int]) -> None:
        self._base, self._size, self._symbols = base, size, symbols

    def address(self, name: str) -> int:
        return self._symbols.get(name, 0)

    def close(self) -> None:
        if self._base:
            libc = _libc()
            if libc is not None:
                libc.munmap(self._base, self._size)
            self._base = 0

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a if a > 1 else n


def load(obj: bytes,
         resolve: Mapping[str, int] | Callable[[str], int | None] | None = None) -> Image:
    """Map ``obj`` and link it; undefined symbols from ``resolve`` (a mapping or a function,
    None or 0 for unknown), then this process's libraries.  Raises
    :class:`UnsupportedObject` (nothing left mapped) when the object is not one it takes."""
    if not available():
        raise UnsupportedObject("not an x86-64 Linux process")
    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise UnsupportedObject("not a little-endian ELF-64 object")
    e_type, e_machine = struct.unpack_from("<HH", obj, 16)
    if e_type != 1 or e_machine != 62:
        raise UnsupportedObject("not a relocatable x86-64 object")
    (e_shoff,) = struct.unpack_from("<Q", obj, 40)
    e_shentsize, e_shnum = struct.unpack_from("<HH", obj, 58)
    if e_shentsize != 64 or e_shoff + 64 * e_shnum > len(obj):
        raise UnsupportedObject("malformed section headers")
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, e_shoff + 64 * i) for i in range(e_shnum)]
    for sec in sections:
        if sec[1] == _SHT_REL:
            raise UnsupportedObject("REL relocations")
        if sec[1] in (14, 15, 16):  # SHT_INIT_ARRAY, FINI_ARRAY, PREINIT_ARRAY: not run here
            raise UnsupportedObject("constructors or destructors")
        if sec[1] != _SHT_NOBITS and sec[4] + sec[5] > len(obj):
            raise UnsupportedObject("a section runs past the end of the file")

    # layout: code, then read-only data, then writable data, each group page-aligned, then
    # the jump stubs and GOT slots (read+execute with the code's protection: after the data)
    groups: dict[str, list[int]] = {"x": [], "r": [], "w": []}
    for i, sec in enumerate(sections):
        if sec[2] & _SHF_ALLOC and sec[5] > 0:
            kind = "x" if sec[2] & _SHF_EXECINSTR else "w" if sec[2] & _SHF_WRITE else "r"
            groups[kind].append(i)
    offsets: dict[int, int] = {}
    pos = 0
    spans = {}
    for kind in ("x", "r", "w"):
        start = pos = _align(pos, _PAGE)
        for i in groups[kind]:
            pos = _align(pos, max(1, sections[i][8]))
            offsets[i] = pos
            pos += sections[i][5]
        spans[kind] = (start, pos)

    symtabs = [i for i, s in enumerate(sections) if s[1] == _SHT_SYMTAB]
    if len(symtabs) != 1:
        raise UnsupportedObject("not exactly one symbol table")
    symtab = sections[symtabs[0]]
    strtab = sections[symtab[6]]

    def string(off: int) -> str:
        start = strtab[4] + off
        end = obj.index(b"\0", start)
        return obj[start:end].decode()

    raw_symbols = []
    for k in range(symtab[5] // 24):
        st_name, st_info, _, st_shndx, st_value, _ = struct.unpack_from(
            "<IBBHQQ", obj, symtab[4] + 24 * k)
        raw_symbols.append((string(st_name) if st_name else "", st_info, st_shndx, st_value))

    relocations = []  # (target section, offset, type, symbol index, addend)
    for sec in sections:
        if sec[1] != _SHT_RELA:
            continue
        target = sec[7]
        if target not in offsets:  # relocations of a section not loaded (debug info)
            continue
        if sec[6] != symtabs[0]:
            raise UnsupportedObject("relocations against another symbol table")
        for k in range(sec[5] // 24):
            r_offset, r_info, r_addend = struct.unpack_from("<QQq", obj, sec[4] + 24 * k)
            relocations.append((target, r_offset, r_info & 0xFFFFFFFF, r_info >> 32, r_addend))

    # undefined symbols that 32-bit forms reach get a stub (PLT32/PC32) or a GOT slot
    far = sorted({sym for _, _, typ, sym, _ in relocations
                  if typ in (_R_PC32, _R_PLT32, _R_GOTPCREL, _R_GOTPCRELX, _R_REX_GOTPCRELX)
                  and raw_symbols[sym][2] == _SHN_UNDEF})
    got_syms = sorted({sym for _, _, typ, sym, _ in relocations
                       if typ in (_R_GOTPCREL, _R_GOTPCRELX, _R_REX_GOTPCRELX)})
    extra_start = _align(pos, _PAGE)
    stub_at = {sym: extra_start + 16 * n for n, sym in enumerate(far)}
    got_at = {sym: extra_start + 16 * len(far) + 8 * n for n, sym in enumerate(got_syms)}
    size = _align(extra_start + 16 * len(far) + 8 * len(got_syms), _PAGE) or _PAGE

    libc = _libc()
    base = libc.mmap(None, size, _PROT_READ | _PROT_WRITE, 0x22, -1, 0)  # PRIVATE|ANONYMOUS
    if base in (None, ctypes.c_void_p(-1).value, 2 ** 64 - 1):
        raise UnsupportedObject("mmap failed")
    ok = False
    try:
        image = (ctypes.c_char * size).from_address(base)
        for i, off in offsets.items():
            sec = sections[i]
            if sec[1] != _SHT_NOBITS:
                ctypes.memmove(base + off, obj[sec[4]:sec[4] + sec[5]], sec[5])

        def lookup(external: str) -> int:
            found = resolve(external) if callable(resolve) else (resolve or {}).get(external)
            if not found:
                found = _process_symbol(external)
            if not found:
                raise UnsupportedObject(f"undefined symbol {external!r}")
            return found

        values: list[int] = []
        exported: dict[str, int] = {}
        for name, info, shndx, value in raw_symbols:
            if info & 0xF == _STT_TLS or shndx == _SHN_COMMON:
                raise UnsupportedObject(f"TLS or common symbol {name!r}")
            if shndx == _SHN_UNDEF:
                values.append(lookup(name) if name else 0)
            elif shndx == _SHN_ABS:
                values.append(value)
            elif shndx in offsets:
                values.append(base + offsets[shndx] + value)
                if name and info >> 4 in (1, 2):  # GLOBAL, WEAK
                    exported[name] = values[-1]
            elif shndx < len(sections):  # a section not loaded: unusable if referenced
                values.append(0)
            else:
                raise UnsupportedObject(f"symbol {name!r} in special section {shndx:#x}")

        for sym, at in stub_at.items():  # jmp *0(%rip); .quad target
            image[at:at + 14] = b"\xff\x25\x00\x00\x00\x00" + struct.pack("<Q", values[sym])
        for sym, at in got_at.items():
            image[at:at + 8] = struct.pack("<Q", values[sym])

        for target, r_offset, typ, sym, addend in relocations:
            where = offsets[target] + r_offset
            if r_offset + (8 if typ in (_R_64, _R_PC64) else 4) > sections[target][5]:
                raise UnsupportedObject("a relocation outside its section")
            if sym and raw_symbols[sym][2] not in offsets and raw_symbols[sym][2] not in (
                    _SHN_UNDEF, _SHN_ABS):
                raise UnsupportedObject("a relocation against a section not loaded")
            s, p = values[sym], base + where
            if typ == _R_64:
                image[where:where + 8] = struct.pack("<Q", (s + addend) % 2 ** 64)
                continue
            if typ == _R_PC64:
                image[where:where + 8] = struct.pack("<q", s + addend - p)
                continue
            if typ in (_R_PC32, _R_PLT32):
                if sym in stub_at and not -2 ** 31 <= s + addend - p < 2 ** 31:
                    s = base + stub_at[sym]
                v = s + addend - p
            elif typ in (_R_GOTPCREL, _R_GOTPCRELX, _R_REX_GOTPCRELX):
                v = base + got_at[sym] + addend - p
            elif typ == _R_32:
                v = s + addend
                if not 0 <= v < 2 ** 32:
                    raise UnsupportedObject("R_X86_64_32 out of range")
                image[where:where + 4] = struct.pack("<I", v)
                continue
            elif typ == _R_32S:
                v = s + addend
            else:
                raise UnsupportedObject(f"relocation type {typ}")
            if not -2 ** 31 <= v < 2 ** 31:
                raise UnsupportedObject(f"relocation type {typ} out of range")
            image[where:where + 4] = struct.pack("<i", v)

        def protect(lo: int, hi: int, prot: int) -> None:
            if hi > lo and libc.mprotect(base + lo, _align(hi - lo, _PAGE), prot) != 0:
                raise UnsupportedObject("mprotect refused")

        protect(*spans["x"], _PROT_READ | _PROT_EXEC)
        protect(*spans["r"], _PROT_READ)
        protect(extra_start, size, _PROT_READ | _PROT_EXEC)
        ok = True
        return Image(base, size, exported)
    finally:
        if not ok:
            libc.munmap(base, size)
