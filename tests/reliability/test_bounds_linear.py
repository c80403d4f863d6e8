"""The bounds proofs by substituting linear loop bounds (:mod:`tecomp.passes.bounds_linear`),
which :mod:`~tecomp.passes.bounds_affine` asks before isl: they prove what they should, never
what is false (random nests against enumeration), and spare the conv2d and the symbolic
transformer block of ``benchmarks/compile_time.py`` the import of islpy."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tecomp import expr as E
from tecomp.passes.bounds_linear import ONE, Bounds, linear, plus, provably_nonnegative
from tecomp.stmt_functor import eval_int

I64 = "int64"


def c(v):
    return E.Const(int(v), I64)


def _in_bounds(index, extent, bounds):
    f, x = linear(index), linear(extent)
    return (provably_nonnegative(f, bounds)
            and provably_nonnegative(plus(plus(x, f, -1), {ONE: -1}), bounds))


def test_the_module_examples_are_proven_and_their_off_by_ones_are_not():
    n, j0, t = E.Var("n", I64), E.Var("j0", I64), E.Var("t", I64)
    b = Bounds()
    b.loop(j0, c(0), n)
    b.loop(t, c(0), E.Add(j0, c(1), I64))  # a causal sum: t <= j0 < n
    assert _in_bounds(t, n, b)
    b = Bounds()
    b.loop(j0, c(0), n)
    b.loop(t, c(0), E.Add(j0, c(2), I64))  # one too far: t = n for j0 = n - 1
    assert not _in_bounds(t, n, b)

    y = E.Var("y", I64)
    b = Bounds()
    b.loop(y, c(0), c(34))
    b.guard(E.GE(y, c(1)))
    b.guard(E.LT(y, c(33)))
    assert _in_bounds(E.Sub(y, c(1), I64), c(32), b)  # a padded read under its guard
    b = Bounds()
    b.loop(y, c(0), c(34))
    b.guard(E.GE(y, c(1)))
    assert not _in_bounds(E.Sub(y, c(1), I64), c(32), b)  # the guard's other half missing

    j2, t1 = E.Var("j2", I64), E.Var("t_1", I64)
    b = Bounds()
    b.loop(j2, c(0), c(34))
    b.loop(t1, E.Max(E.Sub(j2, c(31), I64), c(0), I64),
           E.Add(E.Min(j2, c(2), I64), c(1), I64))
    assert _in_bounds(E.Sub(j2, t1, I64), c(32), b)  # a window's input gradient
    assert not _in_bounds(E.Sub(j2, t1, I64), c(31), b)


def _random_nest(rng):
    """Three nested loops, each bound by max/min of linear terms in the outer ones (and
    constants), guards on the way, one linear index: the bounds and the truth by
    enumeration."""
    vs = [E.Var(f"v{d}", I64) for d in range(3)]
    b = Bounds()
    env_bounds = []

    def term(d, const_lo, const_hi):
        f = c(int(rng.integers(const_lo, const_hi)))
        for w in vs[:d]:
            k = int(rng.integers(-1, 2))
            if k:
                f = E.Add(f, E.Mul(c(k), w, I64), I64)
        return f

    for d, v in enumerate(vs):
        lo = term(d, -2, 3)
        if rng.random() < 0.5:
            lo = E.Max(lo, term(d, -2, 3), I64)
        hi = term(d, 1, 7)
        if rng.random() < 0.5:
            hi = E.Min(hi, term(d, 1, 7), I64)
        b.loop(v, lo, hi)
        env_bounds.append((lo, hi))
    guards = []
    if rng.random() < 0.5:
        d = int(rng.integers(0, 3))
        g = E.GE(E.Add(vs[d], c(int(rng.integers(-3, 3))), I64), c(0))
        guards.append(g)
        b.guard(g)
    index = c(int(rng.integers(-1, 3)))
    for w in vs:
        k = int(rng.integers(-1, 2))
        if k:
            index = E.Add(index, E.Mul(c(k), w, I64), I64)
    extent = int(rng.integers(1, 8))

    bad = False

    def walk(d, env):
        nonlocal bad
        if d == 3:
            if all(eval_int(g.a, env) >= eval_int(g.b, env) for g in guards) \
                    and not 0 <= eval_int(index, env) < extent:
                bad = True
            return
        lo, hi = env_bounds[d]
        for x in range(eval_int(lo, env), eval_int(hi, env)):
            walk(d + 1, {**env, vs[d]: x})

    walk(0, {})
    return _in_bounds(index, c(extent), b), bad


@pytest.mark.parametrize("seed", range(3))
def test_a_proof_is_never_wrong(seed):
    rng = np.random.default_rng(seed)
    proven = 0
    for _ in range(300):
        ok, bad = _random_nest(rng)
        assert not (ok and bad)  # proven in bounds while an iteration reads outside
        proven += ok
    assert proven >= 20  # and it does prove things


CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import tecomp as tc
    import compile_time as ct
    for case in ("conv2d", "transformer"):
        derive, build = getattr(ct, "case_" + case)(tc)
        build(derive())
    print("islpy" in sys.modules)
""")


def test_padded_convolutions_and_causal_sums_build_without_isl(tmp_path):
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
    env = dict(os.environ, TECOMP_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", CHILD, bench], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_a_float_inside_an_index_is_not_read_as_linear():
    """``int(i * 0.5)`` is no multiple of ``i``: the linear forms take integers only (a float
    constant truncated to 0 would have "proven" any such index in bounds)."""
    i = E.Var("i", I64)
    half = E.Mul(E.Cast(i, "float64"), E.Const(0.5, "float64"), "float64")
    assert linear(E.Cast(half, I64)) is None
    assert linear(E.Add(i, E.Const(2, I64), I64)) == {i: 1, ONE: 2}
