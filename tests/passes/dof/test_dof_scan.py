"""DOF through scans: the (value, L grad, operator) triple of every state is a forward scan;
checked in float64 against the Hessian method and second differences on an RNN with a
matrix-vector product, a lag-2 recurrence and an LSTM-like two-state scan."""

from __future__ import annotations

import numpy as np
import pytest
from dof_nets import matrices, operator_fd, ph

import tecomp as tc
from tecomp.functor import topo_order
from tecomp.scan_op import ScanOp

B = 2


def rnn(rng, n=3, H=4, T=6):
    x = ph((B, n), "x")
    W, U = ph((H, H), "W"), ph((H, n), "U")
    st = ph((T, B, H), "h")
    j, k = tc.reduce_axis(H, "j"), tc.reduce_axis(n, "k")
    xin = tc.compute((B, H), lambda b, i: tc.sum(U[i, k] * x[b, k], axis=k), name="xin")
    upd = tc.compute((T, B, H), lambda t, b, i: tc.tanh(
        tc.sum(W[i, j] * st[t - 1, b, j], axis=j) + xin[b, i] * st[t - 1, b, i] + x[b, i % n]),
        name="upd")
    init = tc.compute((1, B, H), lambda s, b, i: tc.sin(x[b, i % n]) * xin[b, i], name="init")
    S = tc.scan(init, upd, st, name="rnn")
    l = tc.reduce_axis(H, "l")
    u = tc.compute((B,), lambda b: tc.sum(S[T - 1, b, l] * S[T - 2, b, l], axis=l), name="u")
    vals = {W: 0.5 * rng.standard_normal((H, H)), U: rng.standard_normal((H, n)) / 2,
            x: rng.standard_normal((B, n))}
    return x, u, vals


def fib(rng, n=2, T=7):
    x = ph((B, n), "x")
    st = ph((T, B), "f")
    init = tc.compute((2, B), lambda s, b: x[b, s % n] * x[b, 0], name="finit")
    upd = tc.compute((T, B), lambda t, b: st[t - 1, b] + tc.sin(st[t - 2, b]) * x[b, 1],
                     name="fstep")
    S = tc.scan(init, upd, st, name="fib")
    u = tc.compute((B,), lambda b: S[T - 1, b], name="u")
    return x, u, {x: 0.5 * rng.standard_normal((B, n))}


def two_states(rng, n=2, T=5):
    x = ph((B, n), "x")
    sh, sc = ph((T, B, n), "sh"), ph((T, B, n), "sc")
    c_new = tc.compute((T, B, n), lambda t, b, i: tc.sigmoid(sh[t - 1, b, i] + x[b, i])
                       * sc[t - 1, b, i] + tc.tanh(sh[t - 1, b, (i + 1) % n]), name="c_new")
    h_new = tc.compute((T, B, n), lambda t, b, i: tc.tanh(c_new[t, b, i]) * x[b, (i + 1) % n],
                       name="h_new")
    h0 = tc.compute((1, B, n), lambda s, b, i: x[b, i], name="h0")
    c0 = tc.compute((1, B, n), lambda s, b, i: x[b, i] * x[b, i], name="c0")
    hS, cS = tc.scan([h0, c0], [h_new, c_new], [sh, sc], name="lstm")
    l = tc.reduce_axis(n, "l")
    u = tc.compute((B,), lambda b: tc.sum(hS[T - 1, b, l] + cS[T - 1, b, l] * hS[T - 2, b, l],
                                          axis=l), name="u")
    return x, u, {x: 0.5 * rng.standard_normal((B, n))}


CASES = {"rnn": rnn, "fib": fib, "two_states": two_states}


def _has_dof_scan(t):
    return any(isinstance(s.op, ScanOp) and s.op.scan.name.startswith("dof_")
               for s in topo_order([t]))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", ["laplacian", "indefinite"])
def test_dof_through_a_scan_matches_hessian_and_fd(case, kind, rng):
    x, u, vals = CASES[case](rng)
    n = int(x.shape[-1])
    A = matrices(rng, n)[kind]
    dof = tc.diff_operator(u, x, A, method="dof")
    assert _has_dof_scan(dof)                     # DOF's own scan, not the Hessian method
    (got,) = tc.evaluate([dof], vals)
    (hess,) = tc.evaluate([tc.diff_operator(u, x, A, method="hessian")], vals)
    np.testing.assert_allclose(got, hess, rtol=1e-10, atol=1e-10)

    def f(xv):
        return tc.evaluate([u], {**vals, x: xv})[0]
    np.testing.assert_allclose(got, operator_fd(f, vals[x], A), rtol=1e-5, atol=1e-6)


def test_dof_through_a_scan_builds(rng):
    x, u, vals = rnn(rng)
    lap = tc.laplacian(u, x)
    inputs = sorted(vals, key=lambda t: t.name)
    kernel = tc.build([lap], inputs)
    (got,) = kernel(*[vals[t] for t in inputs])
    np.testing.assert_allclose(got, tc.evaluate([lap], vals)[0], rtol=1e-12, atol=1e-12)


def test_batch_along_the_time_axis_is_an_error():
    x = ph((4, 2), "x")                        # 4 samples, read as the scan's time axis
    st = ph((4,), "s")
    init = tc.compute((1,), lambda s: x[s, 0], name="i0")
    upd = tc.compute((4,), lambda t: st[t - 1] * x[t, 1], name="up")
    S = tc.scan(init, upd, st, name="along_time")
    with pytest.raises(tc.TecompError, match="carries batch axis 0"):
        tc.laplacian(S, x)


def test_dof_through_a_scan_with_a_symbolic_time_extent(rng):
    T = tc.var("T")
    n = 3
    x = ph((B, n), "x")
    st = ph((T, B), "st")
    k = tc.reduce_axis(n, "k")
    init = tc.compute((1, B), lambda s, b: 0.1 * tc.sum(x[b, k] * x[b, k], axis=k), name="init")
    upd = tc.compute((T, B), lambda t, b: tc.tanh(st[t - 1, b] * x[b, t % n] + x[b, 0]),
                     name="upd")
    S = tc.scan(init, upd, st, name="sym")
    u = tc.compute((B,), lambda b: S[T - 1, b], name="u")
    xv = rng.standard_normal((B, n))
    lap = tc.laplacian(u, x)
    assert _has_dof_scan(lap)
    (got,) = tc.build([lap], [x, T])(xv, 7)
    (hess,) = tc.evaluate([tc.laplacian(u, x, method="hessian")], {x: xv, T: 7})
    np.testing.assert_allclose(got, hess, rtol=1e-10, atol=1e-12)


def test_step_names_do_not_clash_with_dof_axes(rng):
    """The step's own reduction axis is called ``kr``, DOF's rank axis name: the new axes
    avoid the names inside a scan's step too."""
    n, T = 3, 5
    x = ph((B, n), "x")
    st = ph((T, B, n), "st")
    kr = tc.reduce_axis(n, "kr")
    init = tc.compute((1, B, n), lambda s, b, i: x[b, i], name="init")
    upd = tc.compute((T, B, n), lambda t, b, i: tc.tanh(
        tc.sum(st[t - 1, b, kr] * x[b, kr], axis=kr) + x[b, i]), name="upd")
    S = tc.scan(init, upd, st, name="named")
    q = tc.reduce_axis(n, "q")
    u = tc.compute((B,), lambda b: tc.sum(S[T - 1, b, q], axis=q), name="u")
    vals = {x: rng.standard_normal((B, n))}
    (got,) = tc.evaluate([tc.laplacian(u, x)], vals)
    (hess,) = tc.evaluate([tc.laplacian(u, x, method="hessian")], vals)
    np.testing.assert_allclose(got, hess, rtol=1e-10, atol=1e-12)
