"""Integer linear systems: random cases against brute force over small boxes."""

import itertools
import random

import numpy as np

from tecomp.solvers import (
    Affine,
    Congruence,
    smith_normal_form,
    solve_integer_system,
    solve_parametric,
)
from tecomp.solvers.smith import matmul

BOX = range(-4, 5)


def _random_system(rnd):
    m, n = rnd.randint(1, 3), rnd.randint(1, 4)
    A = [[rnd.randint(-3, 3) for _ in range(n)] for _ in range(m)]
    if rnd.random() < 0.2 and m > 1:  # dependent rows
        A[-1] = [2 * a - b for a, b in zip(A[0], A[1 % m])]
    return A, m, n


def _apply(A, x):
    return [sum(a * v for a, v in zip(row, x)) for row in A]


def _rank(M):
    if not M or not M[0]:
        return 0
    S = smith_normal_form(M)[1]
    return sum(1 for i in range(min(len(S), len(S[0]))) if S[i][i])


def test_numeric_against_brute_force():
    for seed in range(250):
        rnd = random.Random(seed)
        A, m, n = _random_system(rnd)
        if rnd.random() < 0.6:
            b = _apply(A, [rnd.randint(-3, 3) for _ in range(n)])
        else:
            b = [rnd.randint(-6, 6) for _ in range(m)]
        brute = [x for x in itertools.product(BOX, repeat=n) if _apply(A, x) == b]
        sol = solve_integer_system(A, b)
        msg = f"seed={seed} A={A} b={b}"
        if sol is None:
            assert not brute, msg
            continue
        x0, N = sol
        assert _apply(A, x0) == b, msg
        k = len(N[0])
        assert all(len(row) == k for row in N) and len(N) == n, msg
        assert k == n - _rank(A), msg
        if k:  # N is a basis of the integer kernel: A N = 0, saturated (SNF diagonal all 1)
            assert all(v == 0 for row in matmul(A, N) for v in row), msg
            S = smith_normal_form(N)[1]
            assert all(S[i][i] == 1 for i in range(k)), msg
        for x in brute:  # every solution in the box is x0 + N t for an integer t
            diff = [a - c for a, c in zip(x, x0)]
            assert (solve_integer_system(N, diff) if k else (None if any(diff) else 0)) \
                is not None, msg
        for _ in range(3):  # every generated point is a solution
            t = [rnd.randint(-5, 5) for _ in range(k)]
            x = [c + sum(a * tj for a, tj in zip(row, t)) for c, row in zip(x0, N)]
            assert _apply(A, x) == b, msg


def test_numeric_special_shapes():
    assert solve_integer_system([[2, 1]], [5]) is not None
    assert solve_integer_system([[2, 4]], [3]) is None
    assert solve_integer_system([[1, 1], [1, 1]], [1, 2]) is None  # rank deficient, inconsistent
    x0, N = solve_integer_system([[3, 0], [0, 5]], [6, -10])
    assert x0 == [2, -2] and N == [[], []]
    x0, N = solve_integer_system(np.zeros((0, 2), dtype=object), [])
    assert x0 == [0, 0] and sorted(map(tuple, N)) == [(0, 1), (1, 0)]
    x0, N = solve_integer_system(np.array([[6, 10, 15]], dtype=object), [1])
    assert 6 * x0[0] + 10 * x0[1] + 15 * x0[2] == 1 and len(N[0]) == 2


def test_parametric_worked_examples():
    # stride 2: 2*oy + ry = j, one solution family for every j
    sol = solve_parametric([[2, 1]], ["j"])
    assert sol.conditions == () and sol.equalities == ()
    (oy, d1), (ry, d2) = sol.expressions(["t"])
    assert (d1, d2) == (1, 1)
    for j in range(-5, 6):
        for t in range(-3, 4):
            x = sol.evaluate({"j": j}, [t])
            assert 2 * x[0] + x[1] == j and sol.free_values(x) == [t]
    # stride 2 and dilation 2: 2*oy + 2*ry = j needs j even
    sol = solve_parametric([[2, 2]], [Affine.var("j")])
    assert sol.conditions == (Congruence(Affine.var("j"), 2),)
    assert not sol.admits({"j": 3}) and sol.admits({"j": 4})
    # inconsistent for all parameter values
    assert solve_parametric([[2, 2]], [Affine.parse("2*j + 1")]) is None
    # rank deficient: rows force a relation between parameters
    sol = solve_parametric([[1, 1], [2, 2]], ["p", "q"])
    assert len(sol.equalities) == 1
    assert sol.admits({"p": 2, "q": 4}) and not sol.admits({"p": 2, "q": 5})


def test_parametric_against_numeric():
    for seed in range(200):
        rnd = random.Random(seed)
        A, m, n = _random_system(rnd)
        b = [Affine({"p": rnd.randint(-2, 2), "q": rnd.randint(-2, 2)}, rnd.randint(-3, 3))
             for _ in range(m)]
        sol = solve_parametric(A, b)
        msg = f"seed={seed} A={A} b={b}"
        for p, q in itertools.product(range(-2, 3), repeat=2):
            env = {"p": p, "q": q}
            bv = [e.evaluate(env) for e in b]
            num = solve_integer_system(A, bv)
            admits = sol is not None and sol.admits(env)
            assert admits == (num is not None), f"{msg} p={p} q={q}"
            if not admits:
                continue
            brute = [x for x in itertools.product(range(-2, 3), repeat=n)
                     if _apply(A, x) == bv]
            for x in brute:  # maps back and forth
                assert sol.evaluate(env, sol.free_values(x)) == list(x), msg
            t = [rnd.randint(-4, 4) for _ in range(sol.num_free)]
            assert _apply(A, sol.evaluate(env, t)) == bv, msg
