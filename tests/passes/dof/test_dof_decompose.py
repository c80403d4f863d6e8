"""A = L^T D L, constant stages, and the user errors of diff_operator / laplacian."""

from __future__ import annotations

import numpy as np
import pytest
from dof_nets import ph

import tecomp as tc
from tecomp.passes.dof import check_operator_matrix, constant_stage, decompose
from tecomp.passes.forward import Names


@pytest.mark.parametrize("kind", ["identity", "diagonal", "spd", "indefinite", "low_rank",
                                  "zero"])
def test_decomposition_reconstructs(kind, rng):
    n = 6
    M = rng.standard_normal((n, n))
    A = {"identity": np.eye(n), "diagonal": np.diag([2.0, 0.0, -3.0, 1.0, 0.5, -0.1]),
         "spd": M @ M.T, "indefinite": M + M.T,
         "low_rank": M[:2].T @ np.diag([3.0, -1.0]) @ M[:2], "zero": np.zeros((n, n))}[kind]
    dec = decompose(A)
    L, s = dec.L, dec.signs
    np.testing.assert_allclose(L.T @ np.diag(s) @ L, A, atol=1e-10 * (1 + np.abs(A).max()))
    assert dec.rank == np.linalg.matrix_rank(A)
    assert set(np.unique(s)) <= {-1.0, 1.0}
    assert np.all(np.diff(s) <= 0), "positive rows first"
    assert dec.positives == int(np.sum(np.linalg.eigvalsh(A) > 1e-9))
    if kind == "identity":
        np.testing.assert_array_equal(L, np.eye(n))


@pytest.mark.parametrize("m", [np.eye(3), np.diag([0.0, 2.0, -1.0])[[1, 2]],
                               np.arange(6.0).reshape(2, 3)])
def test_constant_stage_values(m):
    t = constant_stage(m, "C", "float64", Names([]))
    (v,) = tc.evaluate([tc.compute(t.shape, lambda i, j: t[i, j] * 1.0, name="R")], {})
    np.testing.assert_array_equal(v, m)


def test_matrix_errors():
    x = ph((4, 3), "x")
    Y = tc.compute((4,), lambda b: x[b, 0] * x[b, 1], name="Y")
    with pytest.raises(tc.TecompError, match="symmetric.*A\\[0,1\\]"):
        tc.diff_operator(Y, x, np.array([[1.0, 2.0, 0], [0, 1, 0], [0, 0, 1]]))
    with pytest.raises(tc.TecompError, match="size 2 but x's last axis has extent 3"):
        tc.diff_operator(Y, x, np.eye(2))
    with pytest.raises(tc.TecompError, match="square"):
        tc.diff_operator(Y, x, np.ones((3, 2)))
    with pytest.raises(tc.TecompError, match="non-finite"):
        tc.diff_operator(Y, x, np.full((3, 3), np.nan))
    with pytest.raises(tc.TecompError, match="unknown method 'jet'"):
        tc.laplacian(Y, x, method="jet")
    with pytest.raises(tc.DifferentiationError, match="'xi'"):
        tc.laplacian(Y, ph((4, 3), "xi", "int64"))
    n = tc.var("n")
    xs = ph((4, n), "xs")
    with pytest.raises(tc.TecompError, match="symbolic extent n"):
        tc.laplacian(tc.compute((4,), lambda b: xs[b, 0] * 2.0, name="Z"), xs)
    assert check_operator_matrix([[1, 2], [2, 1]], 2, "t").dtype == np.float64


def test_samples_must_be_independent():
    x = ph((4, 3), "x")
    k, b2 = tc.reduce_axis(3, "k"), tc.reduce_axis(4, "b2")
    H = tc.compute((4, 3), lambda b, j: tc.tanh(x[b, j]), name="H")
    S = tc.compute((4,), lambda b: tc.sum(H[b2, k], axis=[b2, k]), name="S")   # all samples
    with pytest.raises(tc.TecompError, match="'S' reads 'H' at index b2"):
        tc.laplacian(S, x)
    T = tc.compute((4,), lambda b: H[(b + 1) % 4, 0], name="T")                  # a neighbour
    with pytest.raises(tc.TecompError, match="'T' reads 'H'"):
        tc.laplacian(T, x, method="hessian")
    U = tc.compute((3, 4), lambda j, b: H[b, j] * H[b, j], name="U")              # transposed
    with pytest.raises(tc.TecompError, match="leading axes of the output 'U'"):
        tc.laplacian(U, x)
    V = tc.compute((4, 4), lambda b, c: H[b, 0] * H[c, 1], name="V")              # two samples
    with pytest.raises(tc.TecompError, match="'V' reads samples of 'x' along different"):
        tc.laplacian(V, x)
