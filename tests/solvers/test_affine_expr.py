"""Affine expressions and congruences: arithmetic, parsing, printing, hashing."""

import itertools
import random

import pytest

from tecomp.solvers import Affine, Congruence


def test_arithmetic_and_printing():
    x, y = Affine.var("x"), Affine.var("y")
    e = 2 * x + 4 * y - 3
    assert str(e) == "2*x + 4*y - 3"
    assert e == Affine.parse("2*x + 4*y - 3") == Affine({"x": 2, "y": 4}, -3)
    assert str(-e) == "-2*x - 4*y + 3"
    assert e - e == 0 and (e - e).is_constant()
    assert e.gcd() == 2 and e.content() == 1
    assert e.coeff("x") == 2 and e.coeff("z") == 0 and e.variables == {"x", "y"}
    assert str(Affine.constant(0)) == "0" and str(Affine.var("x", -1)) == "-x"
    assert Affine.parse("-(x - 3)*2 + 3*(y)") == Affine({"x": -2, "y": 3}, 6)


def test_substitute_evaluate_rename():
    e = Affine.parse("2*x + 4*y - 3")
    assert e.substitute({"y": Affine.var("x")}) == Affine.parse("6*x - 3")
    # simultaneous substitution
    assert Affine.parse("x - y").substitute({"x": "y", "y": "x"}) == Affine.parse("y - x")
    assert e.evaluate({"x": 1, "y": 2}) == 7
    assert e.partial({"x": 1}) == Affine.parse("4*y - 1")
    assert e.rename({"x": "z"}) == Affine.parse("2*z + 4*y - 3")
    with pytest.raises(KeyError, match="'y'"):
        e.evaluate({"x": 1})


def test_hash_and_equality_structural():
    a = Affine({"x": 1, "y": 0}, 2)
    b = Affine.var("x") + 2
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Affine.var("x") + 3


def test_parse_errors():
    for bad in ["x*y", "2*", "(x", "x + $"]:
        with pytest.raises(ValueError):
            Affine.parse(bad)


def test_random_arithmetic_matches_evaluation():
    for seed in range(100):
        rnd = random.Random(seed)
        names = ["a", "b", "c"]

        e, f = (Affine({n: rnd.randint(-4, 4) for n in names}, rnd.randint(-5, 5))
                for _ in range(2))
        k = rnd.randint(-3, 3)
        env = {n: rnd.randint(-6, 6) for n in names}
        msg = f"seed={seed}"
        assert (e + f).evaluate(env) == e.evaluate(env) + f.evaluate(env), msg
        assert (e - k * f).evaluate(env) == e.evaluate(env) - k * f.evaluate(env), msg
        assert Affine.parse(str(e)) == e, msg


def test_congruence_normalisation():
    x = Affine.var("x")
    c = Congruence.make(6 * x + 9, 12)  # 6x + 9 = 0 mod 12  <=>  2x + 3 = 0 mod 4
    assert c == Congruence(2 * x + 3, 4)
    assert Congruence.make(4 * x + 8, 4) is True
    assert Congruence.make(Affine.constant(3), 4) is False
    assert Congruence.make(2 * x + 1, 2) is False  # 2x + 1 is odd
    c = Congruence.make(x + 7, 4)
    assert isinstance(c, Congruence)
    assert [v for v in range(-8, 8) if c.holds({"x": v})] == [-7, -3, 1, 5]
    for m, a, b in itertools.product(range(1, 7), range(-6, 7), range(-6, 7)):
        c = Congruence.make(a * x + b, m)
        want = [v for v in range(-12, 12) if (a * v + b) % m == 0]
        got = [v for v in range(-12, 12)
               if (c.holds({"x": v}) if isinstance(c, Congruence) else c)]
        assert got == want, (m, a, b)
