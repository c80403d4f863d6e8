"""One XLA FFI handler on the CPU that runs tecomp kernels on XLA's own buffers.

XLA's typed foreign-function interface (``xla/ffi/api/c_api.h``, used by ``jax.ffi``) calls a
handler ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)`` with the argument and result buffers of
a custom call: for each a dtype, a data pointer, a rank and the extents.  This module declares
the few structures of that C API it reads (ABI version 0.x: the layouts below follow the
header's field order), makes one handler of them with ``ctypes`` -- the *trampoline* -- and
registers it once as the target ``tecomp_kernel`` for the CPU platform.

A call names the function it runs with two integer attributes: ``tecomp_key`` (which live
:class:`Callee` to run, looked up in a weak registry: the registry never keeps a function
alive, and a call for a function that is gone is an FFI error, not a crash) and
``tecomp_check`` (a hash of the program, compared before running, so that a key reused after
a function was freed cannot run the wrong program).  The trampoline wraps each buffer in a
NumPy array without copying (a view of the data pointer, kept in a bounded cache) and calls the
kernel with the result buffers as ``out=``: the kernel reads XLA's inputs and writes XLA's
outputs in place.  Any exception becomes an ``XLA_FFI_Error`` (``XLA_FFI_Error_Create`` from
the call frame's API table), which JAX raises with the message.

The call frame may carry the *metadata* extension instead of buffers: XLA asks the handler
which API version it was written for; the trampoline answers (0, 1) and no traits.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from typing import Any, Sequence

import numpy as np

TARGET = "tecomp_kernel"
KEY_ATTR = b"tecomp_key"
CHECK_ATTR = b"tecomp_check"

_VOIDP = ctypes.c_void_p
_SIZE = ctypes.c_size_t


class _ExtensionBase(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("type", ctypes.c_int), ("next", _VOIDP)]


class _ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _VOIDP),
                ("major_version", ctypes.c_int), ("minor_version", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("api_version", _ApiVersion),
                ("traits", ctypes.c_uint32), ("state_type_id", ctypes.c_int64)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", _ExtensionBase), ("metadata", ctypes.POINTER(_Metadata))]


class _Buffer(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _VOIDP), ("dtype", ctypes.c_int),
                ("data", _VOIDP), ("rank", ctypes.c_int64),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class _List(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets have one layout
    _fields_ = [("struct_size", _SIZE), ("extension_start", _VOIDP), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("items", ctypes.POINTER(_VOIDP))]


class _ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", ctypes.POINTER(ctypes.c_char)), ("len", _SIZE)]


class _Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", _VOIDP)]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _VOIDP), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)),
                ("names", ctypes.POINTER(ctypes.POINTER(_ByteSpan))),
                ("attrs", ctypes.POINTER(_VOIDP))]


class _CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", ctypes.POINTER(_ExtensionBase)),
                ("api", _VOIDP), ("ctx", _VOIDP), ("stage", ctypes.c_int), ("args", _List),
                ("rets", _List), ("attrs", _Attrs), ("future", _VOIDP)]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _VOIDP),
                ("message", ctypes.c_char_p), ("errc", ctypes.c_int)]


_ERROR_CREATE = ctypes.CFUNCTYPE(_VOIDP, ctypes.POINTER(_ErrorCreateArgs))


class _ApiHead(ctypes.Structure):  # the start of XLA_FFI_Api: the first function we call
    _fields_ = [("struct_size", _SIZE), ("extension_start", _VOIDP),
                ("api_version", _ApiVersion), ("internal_api", _VOIDP),
                ("error_create", _ERROR_CREATE)]


_HANDLER = ctypes.CFUNCTYPE(_VOIDP, ctypes.POINTER(_CallFrame))

_METADATA_EXTENSION = 1
_STAGE_EXECUTE = 3
_SCALAR_ATTR = 3
_ERROR_INVALID_ARGUMENT = 3
_ERROR_INTERNAL = 13
#: XLA_FFI_DataType -> NumPy dtype, for the dtypes tecomp kernels take
DTYPES = {1: np.dtype(np.bool_), 4: np.dtype(np.int32), 5: np.dtype(np.int64),
          10: np.dtype(np.float16), 11: np.dtype(np.float32), 12: np.dtype(np.float64)}


class Callee:
    """What the trampoline runs: ``kernel(*inputs, out=outputs)`` on NumPy views."""

    def __init__(self, kernel: Any, check: int, label: str) -> None:
        self.kernel = kernel
        self.check = check
        self.label = label

    def __call__(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        self.kernel(*inputs, out=tuple(outputs))


# the live callees by key; weak, so registering a function never keeps it alive
_CALLEES: weakref.WeakValueDictionary[int, Callee] = weakref.WeakValueDictionary()


def enlist(callee: Callee) -> int:
    """Make ``callee`` reachable from the trampoline while it lives; returns its key."""
    register_target()
    key = id(callee)
    _CALLEES[key] = callee
    return key


#: NumPy views of XLA buffers by (address, shape, dtype code): XLA reuses its allocations, so
#: a steady loop finds its views here instead of making them (a few microseconds each).  A
#: view is only used when XLA hands over that same address again, i.e. while it is mapped.
_VIEWS: dict[tuple[int, tuple[int, ...], int], np.ndarray] = {}
MAX_VIEWS = 256


def _array(buf: _Buffer, what: str) -> np.ndarray:
    shape = tuple(buf.dims[d] for d in range(buf.rank))
    key = (buf.data or 0, shape, buf.dtype)
    hit = _VIEWS.get(key)
    if hit is not None:
        return hit
    dt = DTYPES.get(buf.dtype)
    if dt is None:
        raise ValueError(f"{what}: XLA dtype code {buf.dtype} is not one tecomp kernels take")
    count = int(np.prod(shape, dtype=np.int64))
    if not buf.data or count == 0:  # an empty buffer
        return np.empty(shape, dtype=dt)
    raw = (ctypes.c_char * (count * dt.itemsize)).from_address(buf.data)
    view = np.frombuffer(raw, dtype=dt).reshape(shape)
    if len(_VIEWS) >= MAX_VIEWS:
        _VIEWS.clear()
    _VIEWS[key] = view
    return view


def _attrs(frame: _CallFrame) -> dict[bytes, int]:
    got = {}
    a = frame.attrs
    for k in range(a.size):
        if a.types[k] != _SCALAR_ATTR:
            continue
        span = a.names[k].contents
        name = ctypes.string_at(span.ptr, span.len)
        scalar = ctypes.cast(a.attrs[k], ctypes.POINTER(_Scalar)).contents
        got[name] = ctypes.cast(scalar.value, ctypes.POINTER(ctypes.c_int64)).contents.value
    return got


def _error(frame: _CallFrame, message: str, code: int) -> int:
    api = ctypes.cast(frame.api, ctypes.POINTER(_ApiHead)).contents
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), None,
                            message.encode("utf-8", "replace"), code)
    return api.error_create(ctypes.byref(args)) or 0


def _metadata(frame: _CallFrame) -> None:
    ext = ctypes.cast(frame.extension_start, ctypes.POINTER(_MetadataExtension)).contents
    meta = ext.metadata.contents
    meta.api_version = _ApiVersion(ctypes.sizeof(_ApiVersion), None, 0, 1)
    meta.traits = 0
    if meta.struct_size >= ctypes.sizeof(_Metadata):
        meta.state_type_id = 0


def _trampoline(frame_ptr: Any) -> int | None:
    frame = frame_ptr.contents
    try:
        ext = frame.extension_start
        if ext and ext.contents.type == _METADATA_EXTENSION:
            _metadata(frame)
            return None
        if frame.stage != _STAGE_EXECUTE:
            return None
        attrs = _attrs(frame)
        callee = _CALLEES.get(attrs.get(KEY_ATTR, -1))
        if callee is None or callee.check != attrs.get(CHECK_ATTR):
            return _error(frame, "tecomp: the function this computation calls no longer "
                          "exists (it was freed); trace it again", _ERROR_INVALID_ARGUMENT)
        ins = [_array(ctypes.cast(frame.args.items[k], ctypes.POINTER(_Buffer)).contents,
                      f"{callee.label}: argument {k}") for k in range(frame.args.size)]
        outs = [_array(ctypes.cast(frame.rets.items[k], ctypes.POINTER(_Buffer)).contents,
                       f"{callee.label}: result {k}") for k in range(frame.rets.size)]
        callee(ins, outs)
        return None
    except Exception as err:  # an exception must not cross into XLA
        try:
            return _error(frame, f"tecomp: {type(err).__name__}: {err}", _ERROR_INTERNAL)
        except Exception:  # no API table to report through: nothing else can be done
            return None


#: the handler XLA calls; module-level so that it lives as long as the process
HANDLER = _HANDLER(_trampoline)


@functools.lru_cache(maxsize=1)
def register_target() -> str:
    """Register :data:`HANDLER` as the FFI target :data:`TARGET` on the CPU (once)."""
    import jax.ffi

    address = ctypes.cast(HANDLER, _VOIDP).value
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(address), platform="cpu")
    return TARGET
