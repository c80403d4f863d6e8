"""The isl bridge: System -> isl -> System keeps the points; isl divisions come back."""

import random

import islpy as isl

from tecomp.solvers import Affine, System
from tecomp.solvers.isl_bridge import ast_code, exact_projection, from_isl, to_isl_set


def _random_system(rnd):
    names = ["x", "y", "e"]
    ineqs = []
    for v in names:
        ineqs += [Affine.var(v) + 3, 3 - Affine.var(v)]
    ineqs.append(Affine({v: rnd.randint(-3, 3) for v in names}, rnd.randint(0, 4)))
    eqs = [Affine({v: rnd.randint(-2, 2) for v in names}, 1)] if rnd.random() < 0.4 else []
    congs = [(Affine({v: rnd.randint(-3, 3) for v in names}, 1), rnd.randint(2, 4))]
    return System(tuple(names), ("n",), tuple(eqs), tuple(ineqs) + (Affine.parse("n - x"),),
                  tuple(congs))


def test_round_trip_random():
    for seed in range(60):
        rnd = random.Random(seed)
        S = _random_system(rnd)
        over = ["x", "y"]
        back = from_isl(to_isl_set(S, over), over)
        for n in (-1, 2):
            want = S.enumerate({"n": n}, over=over)
            got = sorted({p for B in back for p in B.enumerate({"n": n}, over=over)})
            assert got == want, f"seed={seed} S={S} back={[str(b) for b in back]}"
        pieces = exact_projection(S, over)
        assert all(p.variables[:2] == ("x", "y") for p in pieces), f"seed={seed}"


def test_divisions_come_back_with_their_windows():
    text = "[n] -> { [i, j] : 0 <= i < n and 0 <= j < n and j = floor((i + 5*floor(i/7))/11) }"
    (B,) = from_isl(isl.Set(text), ["i", "j"])
    assert B.params == ("n",) and B.variables[:2] == ("i", "j") and len(B.variables) == 3
    for n in (0, 10, 40):
        want = [(i, (i + 5 * (i // 7)) // 11) for i in range(n) if (i + 5 * (i // 7)) // 11 < n]
        assert B.enumerate({"n": n}, over=["i", "j"]) == want
        assert list(B.loop_bounds(["i", "j"]).enumerate({"n": n})) == want


def test_text_and_ast():
    S = System.parse(["y", "oy", "ry"], ["H", "OH"],
                     ["y == 2*oy + ry", "0 <= ry < 3", "0 <= oy < OH", "0 <= y < H"])
    s = to_isl_set(S, ["y", "ry"])
    assert s.get_space().dim(isl.dim_type.param) == 2
    code = ast_code(S, ["y", "ry"])
    assert "for (int c0 = 0; c0 <= min(H - 1, 2 * OH); c0 += 1)" in code
    assert "c1 += 2" in code
