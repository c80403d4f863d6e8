"""Remembered loop programs (tecomp.program_cache): a warm tc.build runs no pass before codegen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tecomp as tc
from tecomp import pipeline, program_cache
from tecomp.codegen import disk_cache as dc

BEFORE_CODEGEN = ("zero_elimination", "simplify", "lower", "bounds_check")


def _program(scale=2.0, n=12, name="B"):
    """A gather (a data-dependent index: the bounds pass adds a check), a constant tensor and
    a reduction, with its gradient."""
    A = tc.placeholder((n, 5), name="A")
    idx = tc.placeholder((4,), name="idx", dtype="int64")
    C = tc.constant(np.arange(5, dtype=np.float32) * scale, name="C")
    k = tc.reduce_axis(5, name="k")
    B = tc.compute((4,), lambda i: tc.sum(A[idx[i], k] * C[k], axis=k), name=name)
    (dA,) = tc.gradient(B, [A])
    return [B, dA], [A, idx]


def _key(outs, ins, **options):
    opts = dict(name=None, check_bounds=True, target_name="llvm") | options
    return program_cache.program_key(outs, ins, **opts)


def test_key_is_structural_and_covers_what_reaches_the_kernel():
    outs, ins = _program()
    key = _key(outs, ins)
    assert key is not None and key == _key(*_program())          # a rebuilt program: same key
    others = {_key(*_program(scale=3.0)), _key(*_program(n=13)), _key(*_program(name="D")),
              _key(outs, ins, check_bounds=False), _key(outs, ins, name="kern"),
              _key(outs, ins, target_name="cuda"), _key(outs[:1], ins), _key(outs, ins[::-1]),
              _key(pipeline.as_written(list(_program()[0])), ins)}
    assert key not in others and len(others) == 9


def test_unkeyable_program_is_built_without_the_cache():
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] * 2.0, name="B")
    B.attrs["foreign"] = object()
    assert _key([B], [A]) is None


def test_entry_round_trips_the_lowered_program(store):
    outs, ins = _program()
    func, constants = pipeline.lower(outs, ins)
    func, bounds = pipeline.bounds_checked(func)
    assert bounds is not None and constants
    assert program_cache.store("ab" * 32, func, constants, bounds)
    got_func, got_constants, got_bounds = program_cache.load("ab" * 32)
    assert got_func == func and got_bounds == bounds
    assert list(got_constants) == list(constants)
    for b in constants:
        np.testing.assert_array_equal(got_constants[b], constants[b])


def test_decode_names_only_ir_classes():
    with pytest.raises(program_cache.Unkeyable):
        program_cache.decode([["os:system", ["true"]], ["", [{"r": 0}]]])
    with pytest.raises(program_cache.Unkeyable):
        program_cache.decode([["tecomp.expr:TecompError", []], ["", [{"r": 0}]]])
    assert program_cache.load("cd" * 32) is None


def test_warm_build_runs_no_pass_and_gives_the_same_kernel(store, phases, rng):
    outs, ins = _program()
    cold = tc.build(outs, ins)
    assert all(p in phases for p in BEFORE_CODEGEN)
    outs2, ins2 = _program()
    phases.clear()
    warm = tc.build(outs2, ins2)
    assert not any(p in phases for p in BEFORE_CODEGEN) and "program_cache" in phases
    assert warm.ir == cold.ir
    a = rng.standard_normal((12, 5)).astype(np.float32)
    idx = np.array([0, 11, 3, 3])
    for x, y in zip(cold(a, idx), warm(a, idx)):
        np.testing.assert_array_equal(x, y)
    ref = tc.evaluate(outs2, {ins2[0]: a, ins2[1]: idx})
    for x, y in zip(ref, warm(a, idx)):
        np.testing.assert_allclose(x, y, rtol=1e-5)
    with pytest.raises(tc.TecompError):  # the bounds check came from the cache too
        warm(a, np.array([0, 12, 3, 3]))


def test_pass_log_and_off_switch_run_every_pass(store, phases):
    tc.build(*_program())
    with tc.pass_log(costs=False) as log:
        tc.build(*_program())
    assert all(p in log.names() for p in ("lower", "bounds_check"))
    dc.set_default_cache(None)
    phases.clear()
    tc.build(*_program())
    assert "lower" in phases and "program_cache" not in phases


CHILD = textwrap.dedent("""
    import json, logging, sys
    import numpy as np
    import tecomp as tc
    names = []
    class H(logging.Handler):
        def emit(self, r):
            if hasattr(r, "seconds"):
                names.append(r.phase)
    logging.getLogger("tecomp.phases").addHandler(H())
    logging.getLogger("tecomp.phases").setLevel(logging.DEBUG)
    X = tc.placeholder((2, 3, 8, 8), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1)
    gX, gW = tc.gradient(Y, [X, W])
    names.clear()
    k = tc.build([Y, gX, gW], [X, W])
    rng = np.random.default_rng(0)
    outs = k(rng.standard_normal((2, 3, 8, 8)).astype("float32"),
             rng.standard_normal((4, 3, 3, 3)).astype("float32"))
    print(json.dumps({"phases": names, "out": [o.tolist() for o in outs]}))
""")


def test_fresh_process_warm_build_is_identical_and_runs_no_pass(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), TECOMP_CACHE_DIR=str(tmp_path))
    env.pop("TECOMP_CACHE", None)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert "lower" in cold["phases"] and "llvm" in cold["phases"]
    assert not any(p in warm["phases"] for p in (*BEFORE_CODEGEN, "llvm"))
    assert warm["out"] == cold["out"]
