"""The persistent cache holds machine code that is run, so it is used only when this user alone
can write it, every entry is checked against its checksum and key, writes are atomic with many
processes at once, and a directory that cannot be used degrades to no cache with one warning.

The tests run as any user, root included: root ignores permission bits, so "another user's
directory" is simulated by making ``os.getuid`` report another uid, and a read-only or full disk
by making the write fail with EROFS / ENOSPC (a mount would need privileges and is not portable).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen import disk_cache as dc
from tecomp.codegen.cache import KERNELS

KEY = "cd" + "1" * 62
OTHER = "ef" + "2" * 62
ENTRY = {"object": bytes(range(256)) * 4, "source": "define void @f()"}


def _cache_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, tc.CacheWarning)]


def test_directory_is_created_private(tmp_path):
    c = dc.DiskCache(tmp_path / "a" / "cache")
    assert c.put(KEY, ENTRY)
    assert (tmp_path / "a" / "cache").stat().st_mode & 0o777 == 0o700
    assert c.path(KEY).parent.stat().st_mode & 0o777 == 0o700
    assert c.path(KEY).stat().st_mode & 0o077 == 0
    assert c.get(KEY) == ENTRY


def test_another_users_directory_is_bypassed(tmp_path, monkeypatch):
    c = dc.DiskCache(tmp_path)
    assert c.put(KEY, ENTRY)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
    fresh = dc.DiskCache(tmp_path)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert fresh.get(KEY) is None and fresh.get(KEY) is None
        assert not fresh.put(OTHER, ENTRY)
    (msg,) = _cache_warnings(record)
    assert "belongs to uid" in msg and "not used" in msg
    assert not fresh.path(OTHER).exists()


@pytest.mark.parametrize("what", ["directory", "folder", "file"])
def test_group_or_world_writable_is_bypassed(tmp_path, what):
    c = dc.DiskCache(tmp_path / "cache")
    assert c.put(KEY, ENTRY)
    target = {"directory": tmp_path / "cache", "folder": c.path(KEY).parent,
              "file": c.path(KEY)}[what]
    os.chmod(target, 0o777 if what != "file" else 0o666)
    fresh = dc.DiskCache(tmp_path / "cache")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert fresh.get(KEY) is None and fresh.get(KEY) is None
    (msg,) = _cache_warnings(record)
    assert "writable by its group or by others" in msg


def test_another_users_entry_is_not_loaded(tmp_path, monkeypatch):
    c = dc.DiskCache(tmp_path)
    assert c.put(KEY, ENTRY)
    real = os.fstat

    def foreign(fd):  # the entry file (only) reports another owner
        st = real(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid + 7,
                               *tuple(st)[5:]))

    monkeypatch.setattr(os, "fstat", foreign)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert c.get(KEY) is None
    assert "belongs to uid" in _cache_warnings(record)[0]


def test_flipped_byte_is_detected_and_the_kernel_rebuilt(tmp_path):
    old = dc.set_default_cache(tmp_path)
    try:
        A = tc.placeholder((16,), name="A")
        B = tc.compute((16,), lambda i: tc.exp(A[i]) * 3.0, name="flip_B")
        a = np.linspace(-1, 1, 16).astype(np.float32)
        want = tc.build(B, [A])(a)
        (entry,) = [p for p in tmp_path.glob("??/*.bin")  # the kernel's machine code
                    if b"flip_B" in dc.decode(p.read_bytes(), p.stem).get("object", b"")]
        raw = bytearray(entry.read_bytes())
        raw[len(raw) // 2] ^= 0x10
        entry.write_bytes(bytes(raw))
        KERNELS.clear()
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            got = tc.build(B, [A])(a)
        np.testing.assert_array_equal(got, want)
        (msg,) = _cache_warnings(record)
        assert "corrupt" in msg and entry.name in msg
        assert dc.decode(entry.read_bytes(), entry.stem) is not None  # rewritten, valid
    finally:
        dc.set_default_cache(old)


def test_entry_under_another_key_is_refused(tmp_path):
    c = dc.DiskCache(tmp_path)
    assert c.put(KEY, ENTRY)
    moved = c.path(OTHER)
    moved.parent.mkdir(mode=0o700)
    moved.write_bytes(c.path(KEY).read_bytes())  # a whole, valid file, in the wrong place
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert c.get(OTHER) is None
    assert _cache_warnings(record) and not moved.exists()
    assert c.get(KEY) == ENTRY


def test_entry_of_an_earlier_format_is_replaced_quietly(tmp_path):
    c = dc.DiskCache(tmp_path)
    assert c.put(KEY, ENTRY)
    c.path(KEY).write_bytes(b"TECOMPK1" + b"\0" * 64)  # the format before keys were stored
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert c.get(KEY) is None
    assert not _cache_warnings(record) and not c.path(KEY).exists()


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_read_only_or_full_disk_degrades_with_one_warning(tmp_path, monkeypatch, code):
    c = dc.DiskCache(tmp_path)
    assert c.put(KEY, ENTRY)

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(dc.tempfile, "mkstemp", fail)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert not c.put(OTHER, ENTRY) and not c.put(OTHER, ENTRY)
        assert c.get(KEY) == ENTRY  # what is there is still read
    (msg,) = _cache_warnings(record)
    assert os.strerror(code) in msg


def test_unusable_directory_builds_without_cache_and_warns_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    old = dc.set_default_cache(blocker / "sub")
    try:
        A = tc.placeholder((5,), name="A")
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for scale in (2.0, 3.0):
                B = tc.compute((5,), lambda i, s=scale: A[i] * s, name="B")
                np.testing.assert_array_equal(tc.build(B, [A])(np.ones(5, np.float32)),
                                              np.full(5, scale))
        assert len(_cache_warnings(record)) == 1
    finally:
        dc.set_default_cache(old)


STORE = textwrap.dedent("""
    import sys, time
    from tecomp.codegen.disk_cache import DiskCache
    c = DiskCache(sys.argv[1])
    entry = {"object": bytes(range(256)) * 2000, "source": "same"}
    while time.time() < float(sys.argv[2]):
        pass
    ok = all(c.put(sys.argv[3], entry) for _ in range(20))
    got = c.get(sys.argv[3])
    print(int(ok and got == entry))
""")


def test_eight_processes_store_one_key_at_once(tmp_path):
    import time

    start = time.time() + 1.5  # all of them write at once
    procs = [subprocess.Popen([sys.executable, "-c", STORE, str(tmp_path), str(start), KEY],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [o.strip() for o, _ in outs] == ["1"] * 8, [e for _, e in outs]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files == [dc.DiskCache(tmp_path).path(KEY)]  # one entry, no temporary left
    assert dc.DiskCache(tmp_path).get(KEY) == {"object": bytes(range(256)) * 2000,
                                               "source": "same"}


# ------------------------------------------------------------------ configuration
ENV_CHILD = textwrap.dedent("""
    import numpy as np, tecomp as tc
    A = tc.placeholder((3,), name="A")
    tc.build(tc.compute((3,), lambda i: A[i] + 1.0, name="B"), [A])(np.ones(3, np.float32))
    print(tc.config.cache_dir)
""")


def _child(env_extra: dict[str, str], home: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TECOMP_CACHE")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / "xdg"), **env_extra)
    res = subprocess.run([sys.executable, "-c", ENV_CHILD], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_environment_chooses_or_disables_the_directory(tmp_path):
    chosen = tmp_path / "chosen"
    assert _child({"TECOMP_CACHE_DIR": str(chosen)}, tmp_path) == str(chosen)
    assert list(chosen.glob("??/*.bin")) and not (tmp_path / "xdg").exists()
    assert _child({"TECOMP_CACHE": "0", "TECOMP_CACHE_DIR": str(tmp_path / "off")},
                  tmp_path) == "None"
    assert not (tmp_path / "off").exists() and not (tmp_path / "xdg").exists()
    assert _child({}, tmp_path) == str(tmp_path / "xdg" / "tecomp")


def test_the_test_run_uses_a_temporary_cache():
    d = tc.config.cache_dir
    assert d is not None and str(d) == os.environ["TECOMP_CACHE_DIR"]
    assert Path(tempfile.gettempdir()) in d.parents
    assert Path.home() / ".cache" not in [d, *d.parents]


def test_config_sets_directory_switch_and_kernel_bound(tmp_path):
    old = dc.set_default_cache(dc.default_cache())
    size = tc.config.kernel_cache_size
    try:
        tc.config.cache_dir = tmp_path / "cfg"
        assert tc.config.cache_dir == tmp_path / "cfg" and tc.config.cache
        A = tc.placeholder((2,), name="A")
        tc.build(tc.compute((2,), lambda i: A[i] * 5.0, name="cfg_B"), [A])
        info = tc.config.cache_info()
        assert info["status"] == "usable" and info["entries"] >= 1
        tc.config.cache = False
        assert tc.config.cache_dir is None and tc.config.cache_info()["status"] == "off"
        tc.config.cache = True
        assert tc.config.cache_dir == Path(os.environ["TECOMP_CACHE_DIR"])
        tc.config.cache_dir = tmp_path / "cfg"
        assert tc.config.clear_cache() == info["entries"]
        tc.config.kernel_cache_size = 2
        for scale in (1.0, 2.0, 3.0, 4.0):
            tc.build(tc.compute((2,), lambda i, s=scale: A[i] * s, name="cfg_C"), [A])
        assert len(KERNELS) <= 2
        for bad in (0, -1, 2.5, True):
            with pytest.raises(tc.TecompError):
                tc.config.kernel_cache_size = bad
        with pytest.raises(tc.TecompError):
            tc.config.cache = "no"
    finally:
        tc.config.kernel_cache_size = size
        dc.set_default_cache(old)


def test_cli_cache_info_and_clear(tmp_path, capsys):
    from tecomp.cli import main

    c = dc.DiskCache(tmp_path / "cli")
    assert c.put(KEY, ENTRY) and c.put(OTHER, ENTRY)
    old = dc.set_default_cache(c)

    def cli(*args: str) -> str:
        assert main(["cache", *args]) == 0
        return capsys.readouterr().out

    try:
        out = cli("info")
        assert str(tmp_path / "cli") in out and "usable" in out and "entries:   2" in out
        assert "removed 2 file(s)" in cli("clear")
        assert "entries:   0" in cli("info")
        dc.set_default_cache(None)  # as TECOMP_CACHE=0
        assert "off" in cli("info")
    finally:
        dc.set_default_cache(old)
