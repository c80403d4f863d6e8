"""System: parsing, tightening, equality elimination, Fourier–Motzkin, divisions, counting."""

import itertools
import random
from fractions import Fraction

import pytest

from tecomp.solvers import Affine, Congruence, System
from tecomp.solvers.inequalities import eliminate_inequalities, tighten


def _points(system, names, box):
    """Brute force: points of ``system`` with every name in ``box``."""
    return [p for p in itertools.product(box, repeat=len(names))
            if system.contains(dict(zip(names, p)))]


def _random_system(rnd, names, box=2):
    eqs, ineqs, congs = [], [], []
    for v in names:
        ineqs += [Affine.var(v) + box, box - Affine.var(v)]
    for _ in range(rnd.randint(1, 3)):
        ineqs.append(Affine({v: rnd.randint(-3, 3) for v in names}, rnd.randint(-2, 4)))
    if rnd.random() < 0.5:
        eqs.append(Affine({v: rnd.randint(-3, 3) for v in names}, rnd.randint(-2, 2)))
    if rnd.random() < 0.4:
        congs.append((Affine({v: rnd.randint(-3, 3) for v in names}, rnd.randint(0, 3)),
                      rnd.randint(2, 4)))
    return System(tuple(names), (), tuple(eqs), tuple(ineqs), tuple(congs))


def test_parse_and_str():
    S = System.parse(["i", "k"], ["n"], ["0 <= k <= i < n", "i + k == 0 mod 2"])
    assert S.inequalities == (Affine.var("k"), Affine.parse("i - k"), Affine.parse("n - i - 1"))
    assert S.congruences == (Congruence(Affine.parse("i + k"), 2),)
    assert str(S) == ("[n] -> { [i, k] : k >= 0 and i - k >= 0 and -i + n - 1 >= 0 "
                      "and i + k = 0 mod 2 }")
    with pytest.raises(ValueError, match="undeclared"):
        System.parse(["i"], [], ["i < m"])
    with pytest.raises(ValueError, match="comparison"):
        System.parse(["i"], [], ["i + 1"])


def test_tightening_and_simplify():
    assert tighten(Affine.parse("2*x + 4*y - 3")) == Affine.parse("x + 2*y - 2")
    assert tighten(Affine.constant(-1)) is False and tighten(Affine.constant(0)) is True
    S = System.parse(["x", "y"], [], ["2*x + 4*y >= 3", "x + 2*y >= 1", "x + 2*y >= 2",
                                      "x <= 5", "x <= 5"]).simplify()
    assert set(S.inequalities) == {Affine.parse("x + 2*y - 2"), Affine.parse("5 - x")}
    assert System.parse(["x"], [], ["3 <= 2*x <= 3"]).is_trivially_empty()
    assert System.parse(["x"], [], ["2*x == 3"]).is_trivially_empty()
    assert System.parse(["x"], [], ["x >= 2", "x <= 1"]).is_trivially_empty()
    assert not System.parse(["x"], [], ["x >= 1", "x <= 1"]).is_trivially_empty()
    assert System.parse(["x"], [], ["3 <= 2*x <= 3"]).is_empty()


def test_fm_random_projection_is_real_shadow_and_exact_when_flagged():
    names = ["x", "y", "z"]
    box = range(-2, 3)
    exact_seen = inexact_seen = 0
    for seed in range(150):
        rnd = random.Random(seed)
        S = System(tuple(names), (), (), _random_system(rnd, names).inequalities)
        P = S.eliminate("z")
        msg = f"seed={seed} S={S} P={P}"
        proj = {p[:2] for p in _points(S, names, box)}
        assert sorted(proj) == S.enumerate(over=["x", "y"]), msg  # brute force == isl
        shadow = set(_points(P, ["x", "y"], box))
        assert proj <= shadow, msg
        for x, y in shadow:  # every shadow point has a rational z
            lo, hi = Fraction(-10**9), Fraction(10**9)
            for e in S.inequalities:
                c, r = e.coeff("z"), e.drop("z").evaluate({"x": x, "y": y})
                if c > 0:
                    lo = max(lo, Fraction(-r, c))
                elif c < 0:
                    hi = min(hi, Fraction(r, -c))
                elif r < 0:
                    lo = hi + 1
            assert lo <= hi, msg
        _, exact = eliminate_inequalities(S.inequalities, "z")
        if exact:
            exact_seen += 1
            assert proj == shadow, msg
        else:
            inexact_seen += 1
    assert exact_seen > 20 and inexact_seen > 5


def test_fm_dark_shadow_example():
    S = System.parse(["x", "y"], [], ["1 <= 3*x - y <= 2", "0 <= y <= 0"])
    assert S.count() == 0
    assert S.eliminate("x").count() == 1  # the real shadow keeps y = 0: over-approximation


def test_eliminate_with_equalities_and_congruences_is_exact():
    for seed in range(150):
        rnd = random.Random(seed)
        S = _random_system(rnd, ["x", "y", "z"])
        if not (S.equalities or S.congruences):
            continue
        P = S.eliminate("z")
        box = range(-2, 3)
        proj = {p[:2] for p in _points(S, ["x", "y", "z"], box)}
        got = set(_points(P, ["x", "y"], box))
        in_eq = any(e.coeff("z") for e in S.equalities)
        only_cong = not in_eq and not any(e.coeff("z") for e in S.inequalities)
        msg = f"seed={seed} S={S} P={P}"
        assert proj <= got, msg
        if in_eq or only_cong:
            assert proj == got, msg


def test_eliminate_equalities_random_round_trip():
    names = ["x", "y", "z"]
    for seed in range(120):
        rnd = random.Random(seed)
        S = _random_system(rnd, names)
        S = S.with_constraints(equalities=[Affine({v: rnd.randint(-3, 3) for v in names}, 1)])
        keep = rnd.sample(names, rnd.randint(0, 1))
        S2, tr = S.eliminate_equalities(keep=keep)
        msg = f"seed={seed} S={S} S2={S2} tr={tr}"
        assert not any(e.coeff(v) for e in S2.equalities for v in tr.solved), msg
        pts = _points(S, names, range(-2, 3))
        if S2.is_trivially_empty():
            assert not pts, msg
            continue
        for p in pts:  # original -> new -> original
            env = dict(zip(names, p))
            new = {v: env[v] for v in S2.variables if v in env and v not in tr.free}
            new.update(tr.backward(env))
            assert S2.contains(new), msg
            assert {**new, **tr.forward(new)} == {**new, **env}, msg
        for q in S2.enumerate():  # new -> original
            env = dict(zip(S2.variables, q))
            full = {**{v: env[v] for v in names if v in env and v not in tr.solved},
                    **tr.forward(env)}
            assert S.contains(full), msg


def test_eliminate_equalities_stride_example():
    S = System.parse(["j", "oy", "ry"], ["H", "OH"],
                     ["j == 2*oy + ry", "0 <= ry < 3", "0 <= oy < OH", "0 <= j < H"])
    S2, tr = S.eliminate_equalities(keep=["j"])
    assert S2.variables == ("j", "oy") and S2.equalities == ()
    assert dict((v, (str(e), d)) for v, e, d in tr.solutions) == {
        "oy": ("oy", 1), "ry": ("j - 2*oy", 1)}
    # dilation 2: the divisibility condition on j appears as a congruence
    D = System.parse(["j", "oy", "ry"], ["OH"], ["j == 2*oy + 2*ry", "0 <= ry < 3",
                                                 "0 <= oy < OH"])
    D2, _ = D.eliminate_equalities(keep=["j"])
    assert Congruence(Affine.var("j"), 2) in D2.congruences


def test_introduce_division():
    S = System.parse(["x"], [], ["-7 <= x <= 7"])
    S, q, r = S.introduce_division(Affine.parse("x + 1"), 3)
    assert S.variables == ("x", q, r)
    pts = S.enumerate()
    assert len(pts) == 15
    for x, qq, rr in pts:
        assert (qq, rr) == ((x + 1) // 3, (x + 1) % 3)
    with pytest.raises(ValueError):
        S.introduce_division("x", 0)


def test_count_and_enumerate_parametric():
    S = System.parse(["i", "k"], ["n"], ["0 <= k <= i < n"])
    assert S.count() is None
    for n in range(0, 6):
        assert S.count({"n": n}) == n * (n + 1) // 2
    assert S.enumerate({"n": 3}) == [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
    assert System.parse(["i"], [], ["i >= 0"]).count() is None
    assert S.count({"n": 4}, over=["i"]) == 4
