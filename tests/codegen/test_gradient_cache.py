"""Remembered gradients (tecomp.gradient_cache): a warm tc.gradient runs no pass and returns the
same tensors, kernels and results as a cold one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tecomp as tc
from tecomp import gradient_cache
from tecomp.autodiff_api import default_head
from tecomp.codegen import disk_cache as dc

PASSES = ("autodiff", "zero_elimination", "simplify")


def _program(scale=2.0, n=12):
    """A gather, a constant tensor, a symbolic size and a reduction."""
    m = tc.var("m")
    A = tc.placeholder((n, m), name="A")
    idx = tc.placeholder((4,), name="idx", dtype="int64")
    C = tc.constant(np.arange(5, dtype=np.float32) * scale, name="C")
    k = tc.reduce_axis(5, name="k")
    B = tc.compute((4, m), lambda i, j: tc.sum(A[idx[i], j] * C[k] * A[idx[i], j], axis=k),
                   name="B")
    return B, A, idx


def _keyed(B, ins, head=None, optimize=True):
    return gradient_cache.gradient_key(B, ins, head or default_head(B), optimize=optimize)


def _key(B, ins, head=None, optimize=True):
    keyed = _keyed(B, ins, head, optimize)
    return keyed and keyed[0]


def test_key_is_structural_and_covers_the_inputs_of_the_passes():
    B, A, idx = _program()
    key = _key(B, [A])
    B2, A2, _ = _program()
    assert key is not None and key == _key(B2, [A2])        # a rebuilt program: same key
    B3, A3, _ = _program(scale=3.0)
    B4, A4, _ = _program(n=13)
    H = tc.placeholder(B.shape, name="H")
    others = {_key(B3, [A3]), _key(B4, [A4]), _key(B, [A], head=H),
              _key(B, [A], optimize=False), _key(B, [A, A])}
    assert key not in others and len(others) == 5


def test_custom_rule_makes_the_gradient_unkeyable():
    B, A, _ = _program()
    B.attrs["vjp"] = lambda out, ins, head: [None] * len(ins)
    assert _key(B, [A]) is None


def test_warm_gradient_runs_no_pass_and_gives_the_same_tensors(store, phases, rng):
    B, A, idx = _program()
    (cold,) = tc.gradient(B, [A])
    assert all(p in phases for p in PASSES)
    B2, A2, idx2 = _program()
    phases.clear()
    (warm,) = tc.gradient(B2, [A2])
    assert not any(p in phases for p in PASSES) and "gradient_cache" in phases
    assert (warm.name, warm.dtype) == (cold.name, cold.dtype)
    assert str(warm.shape) == str(cold.shape)
    assert tc.show(warm) == tc.show(cold)
    assert str(tc.lower([B2, warm], [A2, idx2])) == str(tc.lower([B, cold], [A, idx]))
    kc, kw = tc.build([B, cold], [A, idx]), tc.build([B2, warm], [A2, idx2])
    assert kw.ir == kc.ir
    a = rng.standard_normal((12, 7)).astype(np.float32)
    ix = np.array([0, 11, 3, 3])
    for x, y in zip(kc(a, ix), kw(a, ix)):
        np.testing.assert_array_equal(x, y)
    ref = tc.evaluate([warm], {A2: a, idx2: ix, tc.var("m"): 7})[0]
    np.testing.assert_allclose(kw(a, ix)[1], ref, rtol=1e-5)


def test_warm_gradient_reads_this_process_placeholders(store):
    B, A, idx = _program()
    tc.gradient(B, [A])
    B2, A2, idx2 = _program()
    (warm,) = tc.gradient(B2, [A2])
    from tecomp.functor import topo_order

    reads = set(map(id, topo_order([warm])))
    assert id(A2) in reads and id(idx2) in reads and id(A) not in reads


def test_optimize_false_is_kept_as_written(store):
    B, A, _ = _program()
    tc.gradient(B, [A], optimize=False)
    B2, A2, _ = _program()
    (warm,) = tc.gradient(B2, [A2], optimize=False)
    assert warm.attrs.get("as_written") is True


def test_corrupt_entry_is_a_miss_and_rebuilt(store, phases):
    B, A, _ = _program()
    (cold,) = tc.gradient(B, [A])
    key, nodes = _keyed(B, [A])
    path = store.path(key)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    B2, A2, _ = _program()
    phases.clear()
    with pytest.warns(tc.CacheWarning, match="corrupt"):
        (again,) = tc.gradient(B2, [A2])
    assert "autodiff" in phases and tc.show(again) == tc.show(cold)
    assert gradient_cache.load(key, nodes) is not None               # rewritten


def test_entry_with_an_unknown_class_is_a_miss(store):
    B, A, _ = _program()
    tc.gradient(B, [A])
    key, nodes = _keyed(B, [A])
    assert gradient_cache.load(key, nodes) is not None
    store.put(key, {"gradient": json.dumps([["os:system", ["true"]], ["", [[{"r": 0}]]]]),
                    "arrays": "[]"})
    assert gradient_cache.load(key, nodes) is None
    store.put(key, {"gradient": json.dumps([["", [[{"x": 10 ** 6}]]]]), "arrays": "[]"})
    assert gradient_cache.load(key, nodes) is None


def test_overrides_pass_log_and_off_switch_skip_the_cache(store, phases):
    B, A, _ = _program()
    tc.gradient(B, [A])
    with tc.pass_log(costs=False) as log:
        tc.gradient(*_program()[:1], [_program()[1]])
    assert "autodiff" in log.names()
    B2, A2, _ = _program()
    phases.clear()
    tc.gradient(B2, [A2], overrides={B2: lambda out, ins, head: [None] * len(ins)})
    assert "autodiff" in phases and "gradient_cache" not in phases
    dc.set_default_cache(None)
    phases.clear()
    tc.gradient(*_program()[:1], [_program()[1]])
    assert "autodiff" in phases and "gradient_cache" not in phases


def test_warm_jacobian_is_the_same(store, phases, rng):
    def program():
        X = tc.placeholder((3,), name="X", dtype="float64")
        return X, tc.compute((2,), lambda i: X[i] * X[i + 1], name="Y")

    X, Y = program()
    cold = tc.jacobian(Y, X)
    X2, Y2 = program()
    phases.clear()
    warm = tc.jacobian(Y2, X2)
    assert "autodiff" not in phases and tc.show(warm) == tc.show(cold)
    x = rng.standard_normal(3)
    np.testing.assert_array_equal(tc.evaluate(warm, {X2: x})[0], tc.evaluate(cold, {X: x})[0])


def test_refused_forward_is_refused_warm_too(store):
    X = tc.placeholder((4,), name="X")
    Y = tc.compute((4,), lambda i: X[i + 1], name="Y")  # reads X[4]: out of range
    for _ in range(2):
        with pytest.raises(tc.TecompError):
            tc.gradient(Y, [X])


CHILD = textwrap.dedent("""
    import json, logging, os, sys
    import numpy as np
    import tecomp as tc
    names = []
    class H(logging.Handler):
        def emit(self, r):
            if hasattr(r, "seconds"):
                names.append(r.phase)
    logging.getLogger("tecomp.phases").addHandler(H())
    logging.getLogger("tecomp.phases").setLevel(logging.DEBUG)
    n = tc.var("n")
    X = tc.placeholder((n, 16), name="X")
    W = tc.placeholder((8, 16), name="W")
    Y = tc.compute((n, 8), lambda i, j: tc.tanh(tc.ops.dense(X, W)[i, j]), name="Y")
    gX, gW = tc.gradient(Y, [X, W])
    k = tc.build([Y, gX, gW], [X, W])
    rng = np.random.default_rng(0)
    outs = k(rng.standard_normal((5, 16)).astype("float32"),
             rng.standard_normal((8, 16)).astype("float32"))
    print(json.dumps({"phases": list(names), "show": tc.show([gX, gW]), "ir": str(k.ir),
                      "lower": str(tc.lower([gX, gW], [X, W])),
                      "out": [o.tolist() for o in outs]}))
""")


def _child(env):
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fresh_process_warm_gradient_is_identical(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), TECOMP_CACHE_DIR=str(tmp_path))
    env.pop("TECOMP_CACHE", None)
    cold, warm = _child(env), _child(env)
    assert "autodiff" in cold["phases"] and "llvm" in cold["phases"]
    assert not any(p in warm["phases"] for p in (*PASSES, "lower", "bounds_check", "llvm"))
    for field in ("show", "ir", "lower", "out"):
        assert warm[field] == cold[field], field
    off = _child(dict(env, TECOMP_CACHE="0"))  # the off switch: every pass runs again
    assert "autodiff" in off["phases"] and "llvm" in off["phases"]
    assert off["out"] == cold["out"] and off["show"] == cold["show"]
