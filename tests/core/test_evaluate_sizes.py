"""tc.evaluate binds sizes from every bound array's shape, as a kernel does, and checks them."""

import numpy as np
import pytest

import tecomp as tc


def _matmul():
    n, m = tc.var("n"), tc.var("m")
    A = tc.placeholder((n, 8), name="A", dtype="float64")
    B = tc.placeholder((8, m), name="B", dtype="float64")
    k = tc.reduce_axis(8, name="k")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return n, m, A, B, C


def test_size_bound_from_an_array_the_output_does_not_read(rng):
    n, m, A, B, C = _matmul()
    (dB,) = tc.gradient(C, [B])  # d(sum C)/dB reads A only, but has B's shape (8, m)
    a, b = rng.standard_normal((5, 8)), rng.standard_normal((8, 3))
    (got,) = tc.evaluate([dB], {A: a, B: b})
    np.testing.assert_allclose(got, np.repeat(a.sum(0)[:, None], 3, axis=1), rtol=1e-12)
    built = tc.build(dB, [A, B])(a, b)
    np.testing.assert_allclose(built, got, rtol=1e-12)


def test_inconsistent_sizes_name_tensor_and_axis(rng):
    n, m, A, B, C = _matmul()
    (dB,) = tc.gradient(C, [B])
    a, b = rng.standard_normal((5, 8)), rng.standard_normal((8, 3))
    with pytest.raises(tc.TecompError, match=r"placeholder 'B', axis 1: .*extent 3.*m = 4"):
        tc.evaluate([dB], {A: a, B: b, m: 4})
    D = tc.placeholder((n,), name="D", dtype="float64")
    E = tc.compute((n,), lambda i: D[i] * 2.0, name="E")
    with pytest.raises(tc.TecompError, match=r"placeholder 'D', axis 0: .*extent 4.*"
                                             r"n = 5 from placeholder 'A', axis 0"):
        tc.evaluate([E], {A: a, D: np.ones(4)})
    with pytest.raises(tc.TecompError, match=r"placeholder 'B' has 2 dimension"):
        tc.evaluate([E], {D: np.ones(5), B: np.ones(3)})
