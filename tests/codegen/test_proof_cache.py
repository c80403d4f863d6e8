"""Remembered bounds verdicts (tecomp.proof_cache): only "proven" is remembered."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp import proof_cache
from tecomp.codegen import disk_cache as dc
from tecomp.passes import bounds_check


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """A fresh disk cache and in-memory verdicts; counts the runs of the bounds pass."""
    calls = []
    real = bounds_check.add_bounds_checks

    def counting(func):
        calls.append(func.name)
        return real(func)

    monkeypatch.setattr(bounds_check, "add_bounds_checks", counting)
    monkeypatch.setattr(proof_cache, "PROVEN", proof_cache.CompileCache(16))
    old = dc.set_default_cache(tmp_path)
    yield calls
    dc.set_default_cache(old)


def _stencil(name):
    A = tc.placeholder((10,), name="A")
    return tc.compute((8,), lambda i: A[i] + A[i + 2], name=name), A


def test_proven_program_is_proved_once_in_memory_and_on_disk(counted):
    B, A = _stencil("stencil")
    func = tc.lower(B, [A]).func
    for _ in range(3):
        assert proof_cache.bounds_checked(func) == (func, None)
    assert counted == ["stencil"]
    proof_cache.PROVEN.clear()  # a fresh process: the verdict comes from disk
    assert proof_cache.bounds_checked(func, check_bounds=False) == (func, None)
    assert counted == ["stencil"]
    a = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(tc.build(B, [A])(a), a[:8] + a[2:])


def test_a_changed_program_is_proved_again(counted):
    B, A = _stencil("stencil")
    proof_cache.bounds_checked(tc.lower(B, [A]).func)
    C = tc.compute((7,), lambda i: A[i] + A[i + 3], name="stencil")
    proof_cache.bounds_checked(tc.lower(C, [A]).func)
    assert counted == ["stencil", "stencil"]


def test_checked_and_wrong_programs_run_the_pass_every_time(counted):
    n = tc.var("n")
    E = tc.placeholder((n, 4), name="E")
    idx = tc.placeholder((3,), name="idx", dtype="int64")
    G = tc.compute((3, 4), lambda i, j: E[idx[i], j], name="G")
    func = tc.lower(G, [E, idx]).func
    for _ in range(2):
        checked, info = proof_cache.bounds_checked(func)
        assert info is not None and len(checked.outputs) == len(func.outputs) + 1
    assert proof_cache.bounds_checked(func, check_bounds=False) == (func, None)
    A = tc.placeholder((8,), name="A")
    bad = tc.lower(tc.compute((8,), lambda i: A[i + 1], name="bad"), [A]).func
    for check in (True, False):
        with pytest.raises(tc.LoweringError, match="leaves"):
            proof_cache.bounds_checked(bad, check_bounds=check)
    assert counted == ["G", "G", "G", "bad", "bad"]
    with pytest.raises(tc.IndexBoundsError):
        tc.build(G, [E, idx])(np.ones((2, 4), np.float32), np.array([0, 1, 2]))
