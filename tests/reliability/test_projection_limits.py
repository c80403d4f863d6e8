"""Size limits of the exact integer reasoning: Fourier–Motzkin projections in zero
elimination and isl proofs in the static bounds check give up (keeping a correct, slower
form) instead of exhausting memory or time."""

import numpy as np
import pytest

import tecomp as tc
from tecomp.functor import topo_order
from tecomp.passes import bounds_affine
from tecomp.passes.zero_elimination import eliminate
from tecomp.solvers.affine import Affine
from tecomp.solvers.inequalities import ProjectionTooLarge, eliminate_inequalities


def _box(name: str, k: int) -> list[Affine]:
    x = Affine.var(name)
    lows = [x - Affine.var(f"a{i}") for i in range(k)]   # x >= a_i
    ups = [Affine.var(f"b{i}") - x for i in range(k)]    # x <= b_i
    return lows + ups


def test_elimination_raises_past_its_pair_limit():
    cons = _box("x", 3)
    out, exact = eliminate_inequalities(cons, "x", limit=9)
    assert exact and len(out) == 9
    with pytest.raises(ProjectionTooLarge, match="3 lower with 3 upper"):
        eliminate_inequalities(cons, "x", limit=8)


def test_implied_is_not_proven_past_the_limit(monkeypatch):
    context = _box("x", 3)
    goal = Affine.var("b0") - Affine.var("a0")  # a0 <= x <= b0, so b0 >= a0
    assert eliminate.implied(goal, context)
    monkeypatch.setattr(eliminate, "MAX_PAIRS", 0)
    assert not eliminate.implied(goal, context)


def _conv_gradient():
    X = tc.placeholder((1, 2, 7, 7), name="X", dtype="float64")
    W = tc.placeholder((3, 2, 3, 3), name="W", dtype="float64")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    H = tc.placeholder(Y.shape, name="H", dtype="float64")
    rng = np.random.default_rng(0)
    arrays = {t: rng.standard_normal(tuple(int(d.value) for d in t.shape)) for t in (X, W, H)}
    return Y, [X, W], H, arrays


def test_zero_elimination_past_the_limit_keeps_correct_stages(monkeypatch):
    Y, ins, H, arrays = _conv_gradient()
    naive = tc.gradient(Y, ins, H, optimize=False)
    want = tc.evaluate(naive, arrays)
    monkeypatch.setattr(eliminate, "MAX_PAIRS", 0)  # every projection with a pair gives up
    grads = tc.gradient(Y, ins, H)
    kernel = tc.build(grads, [*ins, H])
    for got, w in zip(kernel(*(arrays[t] for t in [*ins, H])), want):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_bounds_proofs_past_the_budget_become_runtime_checks(monkeypatch):
    Y, ins, H, arrays = _conv_gradient()
    grads = tc.gradient(Y, ins, H)
    want = tc.evaluate(grads, arrays)
    proven = tc.lower(grads, [*ins, H])
    monkeypatch.setattr(bounds_affine, "MAX_OPERATIONS", 1)
    # the proofs by substituting linear bounds would settle this gradient's windows before
    # isl is asked: off, so that isl's budget decides
    monkeypatch.setattr(bounds_affine, "SUBSTITUTION", False)
    from tecomp.passes.bounds_check import add_bounds_checks

    _, record = add_bounds_checks(proven.func)
    assert record is not None  # nothing proven: the accesses are checked at run time
    kernel = tc.build(grads, [*ins, H], name="over_budget")
    for got, w in zip(kernel(*(arrays[t] for t in [*ins, H])), want):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_bit_reversed_dct_gradient_lowers():
    # its input permutation is index arithmetic with one // and % per bit: projecting the
    # re-eliminated gradient once grew to 1e10 pairs (tens of GB) at n = 64
    X = tc.placeholder((64, 3), name="X", dtype="float64")
    H = tc.placeholder((64, 3), name="H", dtype="float64")
    Y = tc.ops.dct(X, "dct2")
    for t in topo_order([Y]):  # zero elimination on the bodies, not the declared adjoints
        t.attrs.pop("vjp", None)
    (g,) = tc.gradient(Y, [X], head=H)
    tc.lower(g, [X, H])
    rng = np.random.default_rng(1)
    x, h = rng.standard_normal((64, 3)), rng.standard_normal((64, 3))
    scipy_fft = pytest.importorskip("scipy.fft")
    want = scipy_fft.idct(h, type=2, axis=0, norm="ortho")  # D^T h, D orthonormal
    np.testing.assert_allclose(tc.evaluate([g], {X: x, H: h})[0], want, atol=1e-12)
