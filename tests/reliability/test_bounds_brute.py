"""The static bounds proofs against brute force: random loop nests (affine, min/max, floordiv
bounds, steps, guards) around one affine read; with constant sizes the proof must accept the
access exactly when no iteration reads out of range, and raise otherwise."""

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import Buffer, BufferLoad, For, IfThenElse, LoweredFunc, Store
from tecomp.passes.bounds_check import add_bounds_checks

I64 = "int64"


def c(v):
    return E.Const(int(v), I64)


def _case(rng):
    i, j = E.Var("i", I64), E.Var("j", I64)
    ext = int(rng.integers(1, 9))
    hi_i = int(rng.integers(0, 7))
    step = int(rng.choice([1, 1, 2, 3]))
    k = int(rng.integers(0, 3))
    # j from max(0, i - k) to min(6, (i + 3) // 2 + k)
    lo_j = E.Max(c(0), E.Sub(i, c(k), I64), I64)
    hi_j = E.Min(c(6), E.Add(E.FloorDiv(E.Add(i, c(3), I64), c(2), I64), c(k), I64), I64)
    a, b, off = (int(x) for x in rng.integers(-2, 3, size=3))
    idx = E.Add(E.Add(E.Mul(c(a), i, I64), E.Mul(c(b), j, I64), I64), c(off + ext // 2), I64)
    if rng.random() < 0.3:
        idx = E.FloorDiv(idx, c(int(rng.integers(1, 4))), I64)
    elif rng.random() < 0.2:
        idx = E.Mod(idx, c(int(rng.integers(1, 4))), I64)
    g = [int(x) for x in rng.integers(-2, 3, size=3)]
    guard = E.GE(E.Add(E.Mul(c(g[0]), i, I64), E.Mul(c(g[1]), j, I64), I64), c(g[2]))
    use_guard = rng.random() < 0.5
    A = Buffer("A", (c(ext),), "float32", "input")
    out = Buffer("out", (), "float32", "output")
    load = BufferLoad(A, (idx,), "float32")
    body = Store(out, (), load, reduce="sum")
    if use_guard:
        body = IfThenElse(guard, body) if rng.random() < 0.5 else \
            Store(out, (), E.Select(guard, load, E.Const(0.0, "float32"), "float32"), "sum")
    func = LoweredFunc("f", (A,), (out,), (),
                       For(i, c(0), c(hi_i), For(j, lo_j, hi_j, body), step=step))

    def val(e, env):
        if isinstance(e, E.Const):
            return e.value
        if isinstance(e, E.Var):
            return env[e.name]
        x, y = val(e.a, env), val(e.b, env)
        return {E.Add: x + y, E.Sub: x - y, E.Mul: x * y, E.Min: min(x, y),
                E.Max: max(x, y), E.FloorDiv: x // y if y else 0, E.Mod: x % y if y else 0,
                E.GE: x >= y}[type(e)]

    bad = []
    for iv in range(0, hi_i, step):
        for jv in range(val(lo_j, {"i": iv}), val(hi_j, {"i": iv})):
            env = {"i": iv, "j": jv}
            if use_guard and not val(guard, env):
                continue
            if not 0 <= val(idx, env) < ext:
                bad.append(env)
    return func, bad


@pytest.mark.parametrize("seed", range(4))
def test_proof_agrees_with_enumeration(seed):
    rng = np.random.default_rng(seed)
    seen = {True: 0, False: 0}
    for _ in range(60):
        func, bad = _case(rng)
        seen[not bad] += 1
        if bad:
            with pytest.raises(tc.LoweringError, match="tensor 'A'"):
                add_bounds_checks(func)
        else:
            out, info = add_bounds_checks(func)
            assert info is None and out is func
    assert min(seen.values()) >= 10, seen  # both outcomes were drawn


def test_enumeration_helper_sees_violations():
    # the brute force itself must find a violation where one is planted
    found = [bool(_case(np.random.default_rng(s))[1]) for s in range(30)]
    assert any(found) and not all(found)


def test_size_conditions_agree_with_enumeration():
    """Symbolic sizes: ``for i in [0, n): A[a*i + b]`` with ``A`` of extent ``m`` (or 5); the
    verdict (in bounds, size condition, build error) matches enumeration for n, m < 8."""
    from tecomp.passes.bounds_affine import eval_cond

    n, m, i = E.Var("n", I64), E.Var("m", I64), E.Var("i", I64)
    rng = np.random.default_rng(7)
    kinds = set()
    for _ in range(40):
        a, b = int(rng.integers(-2, 3)), int(rng.integers(-3, 4))
        ext = m if rng.random() < 0.6 else c(5)
        hi = n if rng.random() < 0.8 else E.Sub(n, c(1), I64)
        idx = E.Add(E.Mul(c(a), i, I64), c(b), I64)
        plus_n = rng.random() < 0.3
        if plus_n:
            idx = E.Add(idx, n, I64)
        A = Buffer("A", (ext,), "float32", "input")
        B = Buffer("B", (n,), "float32", "input")
        out = Buffer("out", (), "float32", "output")
        body = Store(out, (), BufferLoad(A, (idx,), "float32"), reduce="sum")
        func = LoweredFunc("f", (A, B), (out,), (n, m), For(i, c(0), hi, body))

        def bad(nv, mv, a=a, b=b, sym=ext is m, full=hi is n, plus_n=plus_n):
            e, top = (mv if sym else 5), (nv if full else nv - 1)
            return any(not 0 <= a * iv + b + (nv if plus_n else 0) < e for iv in range(top))
        grid = [(nv, mv) for nv in range(8) for mv in range(8)]
        try:
            _, info = add_bounds_checks(func)
        except tc.LoweringError:
            kinds.add("error")  # wrong for all sizes >= 1
            assert all(bad(nv, mv) for nv, mv in grid if nv >= 1 and (mv >= 1 or ext is not m))
            continue
        if info is None:
            kinds.add("safe")
            assert not any(bad(nv, mv) for nv, mv in grid)
            continue
        assert not any(ch.affine for ch in info.checks) and len(info.sizes) == 1
        kinds.add("sizes")
        for nv, mv in grid:
            assert eval_cond(info.sizes[0].cond, {n: nv, m: mv}) == bad(nv, mv), (nv, mv)
    assert kinds == {"error", "safe", "sizes"}
