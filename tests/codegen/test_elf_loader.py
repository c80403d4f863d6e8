"""The ELF loader of the LLVM backend (codegen/llvm/elf.py): objects LLVM emits in the code
models it links (large: absolute addresses; small and PIC: PC-relative calls through stubs,
GOT slots, constant pools), calls into libc, libm and the parallel runtime, refusal of what it
does not take (nothing left mapped), unmapping, and the LLJIT fallback giving the same
results."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.cache import KERNELS
from tecomp.codegen.llvm import elf, jit

pytestmark = pytest.mark.skipif(not elf.available(), reason="the ELF loader is x86-64 Linux")

# f(x, n): sum over i < n of erf(x * i) + a constant pool; malloc/memset/free on the way
IR = r"""
declare double @erf(double)
declare ptr @malloc(i64)
declare void @free(ptr)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
@table = internal constant [4 x double] [double 0.5, double 1.5, double 2.5, double 3.5]

define double @probe(double %x, i64 %n) {
entry:
  %buf = call ptr @malloc(i64 4096)
  call void @llvm.memset.p0.i64(ptr %buf, i8 0, i64 4096, i1 false)
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %acc = phi double [0.0, %entry], [%acc1, %loop]
  %fi = sitofp i64 %i to double
  %xi = fmul double %x, %fi
  %e = call double @erf(double %xi)
  %slot = and i64 %i, 3
  %p = getelementptr [4 x double], ptr @table, i64 0, i64 %slot
  %t = load double, ptr %p
  %s = fadd double %e, %t
  %acc1 = fadd double %acc, %s
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %done
done:
  call void @free(ptr %buf)
  ret double %acc1
}
"""


def _want(x, n):
    from math import erf

    return sum(erf(x * i) + (0.5, 1.5, 2.5, 3.5)[i % 4] for i in range(n))


def _object(codemodel, reloc):
    llvm = jit.binding()
    mod = llvm.parse_assembly(IR)
    target = llvm.Target.from_triple(jit._init()["triple"])
    tm = target.create_target_machine(codemodel=codemodel, reloc=reloc, opt=2)
    return tm.emit_object(mod)


def _relocation_types(obj):
    import struct

    (shoff,) = struct.unpack_from("<Q", obj, 40)
    (shnum,) = struct.unpack_from("<H", obj, 60)
    types = set()
    for i in range(shnum):
        sec = struct.unpack_from("<IIQQQQIIQQ", obj, shoff + 64 * i)
        if sec[1] == 4:
            for k in range(sec[5] // 24):
                (info,) = struct.unpack_from("<Q", obj, sec[4] + 24 * k + 8)
                types.add(info & 0xFFFFFFFF)
    return types


@pytest.mark.parametrize("codemodel, reloc", [("jitdefault", "default"), ("large", "static"),
                                              ("small", "pic"), ("small", "static")])
def test_objects_of_every_code_model_link_and_run(codemodel, reloc):
    obj = _object(codemodel, reloc)
    try:
        image = elf.load(obj)
    except elf.UnsupportedObject as err:  # absolute 32-bit addresses of a mapping that the
        # kernel placed above 2 GiB: refused, and the caller links it with LLJIT
        assert (codemodel, reloc) == ("small", "static") and "out of range" in str(err)
        return
    fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_int64)(
        image.address("probe"))
    for x, n in ((0.25, 1), (0.1, 37), (-0.3, 200)):
        assert fn(x, n) == pytest.approx(_want(x, n), rel=1e-12)
    if (codemodel, reloc) == ("small", "pic"):  # PC-relative calls, GOT or PC32 constants
        assert _relocation_types(obj) & {2, 4, 9, 41, 42}
    image.close()
    image.close()  # idempotent


def test_what_it_does_not_take_is_refused_and_nothing_stays_mapped():
    def mappings():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    before = mappings()
    for bad in (b"", b"not an object at all" * 8, b"\x7fELF\x01\x01" + b"\0" * 100):
        with pytest.raises(elf.UnsupportedObject):
            elf.load(bad)
    unknown = _object("jitdefault", "default").replace(b"erf\0", b"zzq\0")
    with pytest.raises(elf.UnsupportedObject, match="undefined symbol 'zzq'"):
        elf.load(unknown)
    assert mappings() <= before + 1


def test_images_are_unmapped_when_dropped():
    import gc

    obj = _object("jitdefault", "default")

    def mappings():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    elf.load(obj)
    gc.collect()
    before = mappings()
    for _ in range(300):
        image = elf.load(obj)
        assert image.address("probe")
    del image
    gc.collect()
    assert mappings() <= before + 4


def _program():
    n = 70
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    k = tc.reduce_axis(n, name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * tc.erf(B[k, j]), axis=k), name="C")
    return C, [A, B]


def test_kernels_load_through_it_and_through_lljit_alike(monkeypatch):
    """A threaded kernel (the runtime's symbol, libm's erf) loads through the ELF loader and,
    with it switched off, through an LLJIT: the same results."""
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setenv("TECOMP_CACHE", "0")
    C, ins = _program()
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((70, 70)).astype(np.float32) for _ in ins)
    want = tc.evaluate([C], dict(zip(ins, (a, b))))[0]
    results = {}
    for with_elf in (True, False):
        monkeypatch.setattr(jit, "LOAD_WITH_ELF", with_elf)
        KERNELS.clear()
        kernel = tc.build(C, ins)
        loader = type(kernel._entry._tracker).__name__
        assert loader == ("Image" if with_elf else "_Library")
        kernel.threads = 2
        results[with_elf] = kernel(a, b)
        np.testing.assert_allclose(results[with_elf], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(results[True], results[False])
    KERNELS.clear()
