"""Zero elimination over mixed-radix digits: index maps built from ``//`` and ``%``.

A read ``X[perm(i)]`` through a bit reversal, digit reversal or transposition has the
gradient ``dX[j] = G[perm^-1(j)]·...``: a gather, at the forward's cost.  The plain div/mod
elimination left ``L - 1`` free parameters for an ``L``-bit reversal and kept the stage
dense (``n²`` work at ``n = 64`` and above).
"""

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import walk
from tecomp.passes.zero_elimination.bridge import AffineBridge
from tecomp.passes.zero_elimination.digits import fold_digits, pin_digits
from tecomp.solvers.affine import Affine
from tecomp.stmt_functor import eval_int

F = "float64"


def bit_reverse(bits):
    def perm(i):
        e = 0
        for b in range(bits):
            e = e + ((i // 2**b) % 2) * 2 ** (bits - 1 - b)
        return e
    return perm


def digit_reverse(base, digits):
    def perm(i):
        e = 0
        for b in range(digits):
            e = e + ((i // base**b) % base) * base ** (digits - 1 - b)
        return e
    return perm


def _read_gradient(n, perm, cols=3):
    X = tc.placeholder((n, cols), name="X", dtype=F)
    G = tc.placeholder((n, cols), name="G", dtype=F)
    Y = tc.compute((n, cols), lambda i, c: tc.sin(X[perm(i), c]) * 1.5, name="Y")
    (dX,) = tc.gradient(Y, [X], head=G)
    return X, G, Y, dX


def _reductions(t):
    return [x for x in walk(t.op.body) if isinstance(x, E.Reduce)]


@pytest.mark.parametrize("bits", [4, 8, 12])
def test_bit_reversal_gradient_is_a_gather(bits):
    n = 2**bits
    perm = bit_reverse(bits)
    X, G, Y, dX = _read_gradient(n, perm)
    assert not _reductions(dX)  # no summation left: one gather per element
    fwd, grad = tc.cost([Y], [X]).flops, tc.cost([dX], [X, G]).flops
    assert grad <= 1.6 * fwd, (grad, fwd)  # cos, ·1.5 and ·G against sin and ·1.5
    rng = np.random.default_rng(bits)
    x, g = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
    got = tc.build(dX, [X, G])(x, g)
    table = np.array([perm(i) for i in range(n)])
    want = np.zeros_like(x)
    want[table] = 1.5 * np.cos(x[table]) * g
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("name, n, perm", [
    ("digit reversal base 3", 27, digit_reverse(3, 3)),
    ("transpose 4x3", 12, lambda i: (i % 4) * 3 + i // 4),
    ("swap the low two bits", 12, lambda i: (i // 2) % 2 + (i % 2) * 2 + (i // 4) * 4),
    ("complement of a bit reversal", 16, lambda i: 15 - bit_reverse(4)(i)),
])
def test_bijections_become_gathers(name, n, perm):
    X, G, Y, dX = _read_gradient(n, perm)
    assert not _reductions(dX), name
    _check_against_naive(X, G, Y, dX, n)


@pytest.mark.parametrize("n, perm", [
    (16, lambda i: (i // 2) % 2),                       # many-to-one
    (16, lambda i: (i % 4) // 2 + 2 * ((i // 8) % 2)),   # drops bits 0 and 2
    (10, lambda i: i // 4 + i % 4),                      # top digit partial (10 = 2·4 + 2)
    (10, lambda i: 2 * (i // 4) + (i % 4) // 2),
])
def test_non_bijective_maps_stay_exact(n, perm):
    X, G, Y, dX = _read_gradient(n, perm)
    _check_against_naive(X, G, Y, dX, n)


def _check_against_naive(X, G, Y, dX, n):
    (naive,) = tc.gradient(Y, [X], head=G, optimize=False)
    rng = np.random.default_rng(n)
    x, g = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
    got = tc.build(dX, [X, G])(x, g)
    (want,) = tc.evaluate([naive], {X: x, G: g})
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_fold_digits_splits_windows_exactly():
    d0, d1, d2 = (E.Var(f"d{k}", "int64") for k in range(3))
    x = E.add(E.add(d0, E.mul(2, d1)), E.mul(4, d2))  # d0, d1 bits; d2 < 5
    ranges = {"d0": 1, "d1": 1, "d2": 4}
    assert fold_digits(E.mod(E.floordiv(x, 2), 2), ranges) == d1
    assert fold_digits(E.floordiv(x, 4), ranges) == d2
    kept = E.floordiv(E.add(x, 1), 2)  # the low part d0 + 1 can reach 2: not a window
    assert fold_digits(kept, ranges) == kept


def test_pin_digits_needs_a_unique_solution():
    bridge = AffineBridge({"a", "b", "c"})
    box = [Affine.var(u) for u in "abc"] + [1 - Affine.var("a"), 1 - Affine.var("b"),
                                            7 - Affine.var("c")]
    # j = 4c + 2b + a with bits a, b: one solution per j
    eq = Affine.var("j") - Affine.var("c") * 4 - Affine.var("b") * 2 - Affine.var("a")
    eqs, _, unknowns, pinned = pin_digits([eq], box, ["a", "b", "c"], bridge)
    assert not eqs and not unknowns and set(pinned.values) == {"a", "b", "c"}
    for j in range(32):
        env = {name: _atom_value(bridge, name, j) for name in bridge.atom_exprs}
        a, b, c = (pinned.values[u].evaluate(env) for u in "abc")
        assert 4 * c + 2 * b + a == j and 0 <= a <= 1 and 0 <= b <= 1
    # j = 2b + a with 0 <= a <= 2: j = 2 has two solutions, so nothing is pinned
    box3 = [Affine.var("a"), 2 - Affine.var("a"), Affine.var("b"), 5 - Affine.var("b")]
    eq3 = Affine.var("j") - Affine.var("b") * 2 - Affine.var("a")
    eqs3, _, unknowns3, pinned3 = pin_digits([eq3], box3, ["a", "b"], AffineBridge({"a", "b"}))
    assert eqs3 == [eq3] and unknowns3 == ["a", "b"] and not pinned3.values


def _atom_value(bridge, name, j):
    return eval_int(bridge.atom_exprs[name], {E.Var("j", "int64"): j})


def _hand_written_butterfly(bits, batch=2):
    """A radix-2 butterfly chain written with ``//`` and ``%`` (no op, no declared adjoint):
    the bit-reversal input permutation, then ``bits`` stages of 2-tap factors."""
    n = 2**bits
    X = tc.placeholder((n, batch), name="X", dtype=F)
    perm = bit_reverse(bits)
    cur = tc.compute((n, batch), lambda i, c: X[perm(i), c], name="P")
    factors = []
    for stage in range(bits):
        s = 2**stage
        W = tc.placeholder((n, 2), name=f"W{stage}", dtype=F)
        k = tc.reduce_axis(2, name="k")
        prev = cur
        cur = tc.compute(
            (n, batch),
            lambda i, c, prev=prev, W=W, s=s, k=k: tc.sum(
                W[i, k] * prev[(i // (2 * s)) * (2 * s) + k * s + i % s, c], axis=k),
            name=f"S{stage}")
        factors.append(W)
    return X, factors, cur


def test_hand_written_butterfly_gradient_costs_the_forward():
    X, factors, Y = _hand_written_butterfly(8)  # n = 256
    grads = tc.gradient(Y, [X] + factors)
    fwd = tc.cost([Y], [X] + factors).flops
    d_input = tc.cost(grads[:1], [X] + factors).flops
    d_factors = tc.cost(grads[1:], [X] + factors).flops
    assert d_input <= 1.2 * fwd, (d_input, fwd)  # it was 300x at n = 1024
    # the transposed chain (the forward's count) and one product per factor entry and
    # batch column (the forward's count again): 2x, plus the unit head's multiplies
    assert d_factors <= 3 * fwd, (d_factors, fwd)


def test_hand_written_butterfly_gradient_values():
    from tests.gradcheck import check_gradient

    X, factors, Y = _hand_written_butterfly(4)
    rng = np.random.default_rng(4)
    arrays = {X: rng.standard_normal((16, 2))}
    arrays.update({W: rng.standard_normal((16, 2)) for W in factors})
    grads = tc.gradient(Y, [X] + factors)
    got = tc.build(grads, [X] + factors)(*arrays.values())
    naive = tc.evaluate(tc.gradient(Y, [X] + factors, optimize=False), arrays)
    for a, b in zip(got, naive):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    check_gradient(Y, [X] + factors, arrays, optimize=True)


def test_a_window_pins_its_variable_without_a_guard_that_always_holds():
    # a stage stored S[i, l, j] read back in row order r = i·b·d + j·d + l (the butterfly's
    # staged output): the gradient's i is pinned by a window whose own pair gave the guard
    # ``value <= value && value <= value``
    a, b, d = 1, 8, 16
    S = tc.placeholder((a, d, b, 3), name="S", dtype=F)
    G = tc.placeholder((a * b * d, 3), name="G", dtype=F)
    Y = tc.compute((a * b * d, 3), lambda r, c: S[r // (b * d), r % d, r // d % b, c] * 2.0,
                   name="Y")
    (dS,) = tc.gradient(Y, [S], head=G)
    conditions = [x for x in walk(dS.op.body) if isinstance(x, E.CmpOp) and x.a == x.b]
    assert not conditions, tc.show(dS)
    rng = np.random.default_rng(7)
    s, g = rng.standard_normal((a, d, b, 3)), rng.standard_normal((a * b * d, 3))
    got = tc.build(dS, [S, G])(s, g)
    want = 2.0 * g.reshape(a, b, d, 3).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, want, rtol=1e-15)
