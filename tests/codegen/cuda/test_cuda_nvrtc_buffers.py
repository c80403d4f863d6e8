"""NVRTC writes its log and cubin into buffers the caller provides; they must be private
(``bytearray``).  ``b" " * 1`` is the interpreter's shared one-byte object, and NVRTC's
empty log (a single NUL) once turned every ``b" "`` in the process into ``b"\\x00"``: PyTorch
imported afterwards could not parse its own operator schemas (seen on a GPU machine)."""

from __future__ import annotations

import pytest

from tecomp.codegen.cuda.compile import compile_cuda, nvrtc_version

SOURCE = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }'


@pytest.mark.skipif(nvrtc_version() is None, reason="NVRTC is not available")
def test_nvrtc_leaves_shared_bytes_objects_intact():
    space = bytes([32])
    binary = compile_cuda(SOURCE, "sm_90", compiler="nvrtc", cache=None)
    assert binary.image[:4] == b"\x7fELF"
    assert b" " == space
    assert b"a b".split(b" ") == [b"a", b"b"]
    assert binary.log == "" or "\x00" not in binary.log
