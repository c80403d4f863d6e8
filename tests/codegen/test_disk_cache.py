"""The persistent kernel cache: round trips, corrupt files, concurrent writers, LLVM reuse."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen import disk_cache as dc
from tecomp.codegen.llvm import compile_function, jit
from tecomp.codegen.llvm import disk_key as llvm_disk_key

KEY = "ab" + "0" * 62


def test_round_trip_and_miss(tmp_path):
    c = dc.DiskCache(tmp_path)
    assert c.get(KEY) is None and c.misses == 1
    entry = {"object": bytes(range(256)) * 3, "source": "define i32 @f() ünïcode"}
    assert c.put(KEY, entry)
    assert c.get(KEY) == entry and c.hits == 1
    assert c.path(KEY).parent.name == "ab"
    c.clear()
    assert c.get(KEY) is None


def test_bad_keys_and_values(tmp_path):
    c = dc.DiskCache(tmp_path)
    for key in ("", "../etc", "ABC", "x" * 64):
        with pytest.raises(ValueError):
            c.path(key)
    with pytest.raises(TypeError):
        c.put(KEY, {"object": 3})


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "empty", "garbage"])
def test_corrupt_file_is_a_miss_and_removed(tmp_path, damage):
    c = dc.DiskCache(tmp_path)
    c.put(KEY, {"object": b"\x01\x02" * 500, "source": "s"})
    p = c.path(KEY)
    raw = p.read_bytes()
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "flip":
        raw = raw[:-5] + bytes([raw[-5] ^ 0xFF]) + raw[-4:]
    elif damage == "magic":
        raw = b"X" + raw[1:]
    elif damage == "empty":
        raw = b""
    else:
        raw = os.urandom(len(raw))
    p.write_bytes(raw)
    with pytest.warns(tc.CacheWarning, match="corrupt"):
        assert c.get(KEY) is None
    assert not p.exists()
    assert c.put(KEY, {"object": b"ok"}) and c.get(KEY) == {"object": b"ok"}


def test_concurrent_writers_never_expose_partial_files(tmp_path):
    c = dc.DiskCache(tmp_path)
    blobs = [{"object": bytes([n]) * 200_000, "source": str(n)} for n in range(4)]
    seen: list = []
    stop = threading.Event()

    def write(n: int) -> None:
        for _ in range(15):
            assert c.put(KEY, blobs[n])

    def read() -> None:
        while not stop.is_set():
            got = c.get(KEY)
            if got is not None:
                seen.append(got["source"])
                assert got in blobs

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert c.get(KEY) in blobs
    assert not [p for p in c.path(KEY).parent.iterdir() if p.suffix == ".tmp"]


def test_unwritable_directory_is_ignored(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = dc.DiskCache(blocker / "sub")
    with pytest.warns(tc.CacheWarning, match="Not a directory"):
        assert not c.put(KEY, {"object": b"x"})
    assert c.get(KEY) is None


def _program():
    n = tc.var("n")
    A = tc.placeholder((n, 8), name="A")
    k = tc.reduce_axis(8, name="k")
    S = tc.compute((n,), lambda i: tc.sum(tc.exp(A[i, k]), axis=k), name="S")
    return tc.lower(S, [A]).func


def test_second_compile_skips_llvm(tmp_path, monkeypatch, rng):
    store = dc.DiskCache(tmp_path)
    func = _program()
    first = compile_function(func, cache=None, disk=store)
    # the machine code, and the optimised IR in an entry of its own, of the kernel and of
    # its parallel loop's body (codegen/llvm/parts.py: looked up before it is compiled)
    assert store.misses == 2 and len(list(tmp_path.glob("??/*.bin"))) == 4

    def no_llvm(*args, **kwargs):
        raise AssertionError("LLVM ran although the program is in the disk cache")

    monkeypatch.setattr(jit, "optimise", no_llvm)
    monkeypatch.setattr("tecomp.codegen.llvm.compile_ir", no_llvm)
    second = compile_function(func, cache=None, disk=store)
    # the kernel (the body is still loaded in this process); the IR was not read
    assert store.hits == 1 and second.address != first.address
    assert second.source == first.source and second.threads == first.threads
    assert store.hits == 2  # read when asked for
    from tecomp.codegen.kernel import Kernel

    a = rng.standard_normal((5, 8)).astype(np.float32)
    got = Kernel(func, second)(a)
    np.testing.assert_allclose(got, np.exp(a).sum(1), rtol=1e-5)


def test_corrupt_entry_is_recompiled_and_rewritten(tmp_path):
    store = dc.DiskCache(tmp_path)
    func = _program()
    compile_function(func, cache=None, disk=store)
    (path,) = [p for p in tmp_path.glob("??/*.bin")  # the machine code's entry
               if "object" in dc.decode(p.read_bytes(), p.stem)]
    path.write_bytes(path.read_bytes()[:100])
    with pytest.warns(tc.CacheWarning, match="corrupt"):
        again = compile_function(func, cache=None, disk=store)
    assert again.address and store.get(path.stem) is not None


def test_key_depends_on_program_options_and_versions(monkeypatch):
    import llvmlite

    from tecomp.codegen.cache import program_key

    func = _program()
    k1 = program_key(func, "llvm-O3-threads1", jit.target_key())
    k2 = program_key(func, "llvm-O2-threads1", jit.target_key())
    d1 = llvm_disk_key(k1)
    assert d1 != llvm_disk_key(k2) and len(d1) == 64
    monkeypatch.setattr(llvmlite, "__version__", "0.0.0-other")
    assert llvm_disk_key(k1) != d1


def test_default_cache_can_be_turned_off(tmp_path):
    old = dc.set_default_cache(tmp_path)
    try:
        assert dc.default_cache().directory == tmp_path
        dc.set_default_cache(None)
        assert dc.default_cache() is None
    finally:
        dc.set_default_cache(old)


def test_the_key_names_the_cores_and_caches_the_schedule_read():
    # a kernel built by a process pinned to one CPU has no threaded loops: stored under the same
    # key as an unpinned build, it ran serially in every later process (a 512^3 matmul on two
    # threads 2.5 ms instead of 1.4)
    from dataclasses import replace

    from tecomp.host import describe

    host = describe()
    one_core = replace(host, cores=1)
    keys = {jit.target_key(h) for h in (replace(host, cores=2), one_core,
                                        replace(one_core, l2=host.l2 * 2))}
    assert len(keys) == 3
    assert jit.target_key() == jit.target_key(host)
