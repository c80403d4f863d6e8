"""Smith and Hermite normal forms: invariants on random matrices, sympy cross-check."""

import random

import numpy as np
from sympy import ZZ, Matrix
from sympy.matrices.normalforms import smith_normal_decomp

from tecomp.solvers import hermite_normal_form, smith_normal_form
from tecomp.solvers.smith import determinant, matmul


def _random_matrix(rnd: random.Random) -> list[list[int]]:
    m, n = rnd.randint(1, 5), rnd.randint(1, 6)
    rank_one = rnd.random() < 0.2
    if rank_one:  # rank-deficient on purpose
        u = [rnd.randint(-3, 3) for _ in range(m)]
        v = [rnd.randint(-3, 3) for _ in range(n)]
        return [[a * b for b in v] for a in u]
    big = 20 if rnd.random() < 0.2 else 4
    return [[rnd.randint(-big, big) for _ in range(n)] for _ in range(m)]


def _check_snf(A, seed):
    U, S, V = smith_normal_form(A)
    m, n = len(A), len(A[0])
    msg = f"seed={seed} A={A}"
    assert matmul(matmul(U, A), V) == S, msg
    assert abs(determinant(U)) == 1 and abs(determinant(V)) == 1, msg
    assert all(type(x) is int for row in U + S + V for x in row), msg
    diag = [S[i][i] for i in range(min(m, n))]
    assert all(S[i][j] == 0 for i in range(m) for j in range(n) if i != j), msg
    assert all(d >= 0 for d in diag), msg
    for a, b in zip(diag, diag[1:]):
        assert (b % a == 0) if a else b == 0, msg
    return diag


def test_snf_random_invariants_and_sympy():
    for seed in range(300):
        rnd = random.Random(seed)
        A = _random_matrix(rnd)
        diag = _check_snf(A, seed)
        if seed % 5 == 0:  # sympy is slow; cross-check a sample
            S, _, _ = smith_normal_decomp(Matrix(A), domain=ZZ)
            theirs = [abs(int(S[i, i])) for i in range(min(S.shape))]
            assert sorted(theirs, key=lambda d: (d == 0, d)) == diag, f"seed={seed}"


def test_snf_examples_and_input_types():
    A = [[2, 4, 4], [-6, 6, 12], [10, -4, -16]]
    assert [smith_normal_form(A)[1][i][i] for i in range(3)] == [2, 6, 12]
    U, S, V = smith_normal_form(np.array(A, dtype=object))
    assert S == [[2, 0, 0], [0, 6, 0], [0, 0, 12]]
    big = [[10**30, 3], [7, 10**20]]  # exact Python ints, no overflow
    _check_snf(big, "big")
    assert smith_normal_form([[0, 0], [0, 0]])[1] == [[0, 0], [0, 0]]


def test_hermite_random_invariants():
    for seed in range(300):
        rnd = random.Random(seed)
        A = _random_matrix(rnd)
        H, V, piv = hermite_normal_form(A)
        msg = f"seed={seed} A={A}"
        assert matmul(A, V) == H and abs(determinant(V)) == 1, msg
        r = len(piv)
        assert piv == sorted(set(piv)), msg
        for k, p in enumerate(piv):
            assert H[p][k] > 0 and all(H[i][k] == 0 for i in range(p)), msg
            assert all(0 <= H[p][j] < H[p][k] for j in range(k)), msg
        assert all(H[i][k] == 0 for i in range(len(A)) for k in range(r, len(A[0]))), msg
