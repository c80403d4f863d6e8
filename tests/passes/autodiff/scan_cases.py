"""Recurrences for the scan tests: each case builds an output, its float inputs, bindings
and a NumPy reference of the output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import tecomp as tc

F = "float64"


@dataclass
class Case:
    output: tc.Tensor
    inputs: list  # the float inputs differentiated
    arrays: dict  # every placeholder bound
    reference: Callable[[], np.ndarray]


def _sig(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def cumsum(rng: Any) -> Case:
    X = tc.placeholder((6, 3), name="X", dtype=F)
    x = rng.standard_normal((6, 3))
    return Case(tc.ops.cumsum(X, 0), [X], {X: x}, lambda: np.cumsum(x, 0))


def cumsum_axis1(rng: Any) -> Case:
    X = tc.placeholder((3, 5, 2), name="X", dtype=F)
    x = rng.standard_normal((3, 5, 2))
    return Case(tc.ops.cumsum(X, 1), [X], {X: x}, lambda: np.cumsum(x, 1))


def cumprod_zeros(rng: Any) -> Case:
    X = tc.placeholder((7, 4), name="X", dtype=F)
    x = rng.standard_normal((7, 4))
    x[2, 0] = 0.0
    x[4, 1] = 0.0
    x[0, 3] = 0.0
    x[5, 2] = x[6, 2] = 0.0
    return Case(tc.ops.cumprod(X, 0), [X], {X: x}, lambda: np.cumprod(x, 0))


def fibonacci(rng: Any) -> Case:
    T, n = 8, 3
    X = tc.placeholder((T, n), name="X", dtype=F)
    st = tc.placeholder((T, n), name="fib_state", dtype=F)
    init = tc.compute((2, n), lambda s, i: X[s, i], name="fib_init")
    upd = tc.compute((T, n), lambda t, i: st[t - 1, i] + st[t - 2, i] * X[t, i],
                     name="fib_step")
    S = tc.scan(init, upd, st, inputs=[X], name="fib")
    x = 0.5 * rng.standard_normal((T, n))

    def ref() -> np.ndarray:
        s = np.zeros((T, n))
        s[:2] = x[:2]
        for t in range(2, T):
            s[t] = s[t - 1] + s[t - 2] * x[t]
        return s

    return Case(S, [X], {X: x}, ref)


def elman(rng: Any, T: int = 5, B: int = 2, H: int = 3, I: int = 2) -> Case:  # noqa: E741
    X = tc.placeholder((T, B, I), name="X", dtype=F)
    W = tc.placeholder((H, H), name="W", dtype=F)
    U = tc.placeholder((H, I), name="U", dtype=F)
    b = tc.placeholder((H,), name="b", dtype=F)
    H0 = tc.placeholder((1, B, H), name="H0", dtype=F)
    st = tc.placeholder((T, B, H), name="h_state", dtype=F)
    j = tc.reduce_axis(H, name="j")
    k = tc.reduce_axis(I, name="k")
    xin = tc.compute((T, B, H), lambda t, n, i: tc.sum(U[i, k] * X[t, n, k], axis=k) + b[i],
                     name="xin")
    upd = tc.compute((T, B, H), lambda t, n, i: tc.tanh(
        tc.sum(W[i, j] * st[t - 1, n, j], axis=j) + xin[t, n, i]), name="h_step")
    init = tc.compute((1, B, H), lambda s, n, i: H0[s, n, i], name="h_init")
    S = tc.scan(init, upd, st, inputs=[xin], name="elman")
    a = {X: rng.standard_normal((T, B, I)), W: 0.5 * rng.standard_normal((H, H)),
         U: rng.standard_normal((H, I)), b: 0.1 * rng.standard_normal(H),
         H0: rng.standard_normal((1, B, H))}

    def ref() -> np.ndarray:
        h = np.zeros((T, B, H))
        h[0] = a[H0][0]
        for t in range(1, T):
            h[t] = np.tanh(h[t - 1] @ a[W].T + a[X][t] @ a[U].T + a[b])
        return h

    return Case(S, [X, W, U, b, H0], a, ref)


def lstm(rng: Any, T: int = 5, B: int = 2, H: int = 3, I: int = 2) -> Case:  # noqa: E741
    X = tc.placeholder((T, B, I), name="X", dtype=F)
    Wh = tc.placeholder((4 * H, H), name="Wh", dtype=F)
    Wx = tc.placeholder((4 * H, I), name="Wx", dtype=F)
    sh = tc.placeholder((T, B, H), name="h_state", dtype=F)
    sc = tc.placeholder((T, B, H), name="c_state", dtype=F)
    j = tc.reduce_axis(H, name="j")
    k = tc.reduce_axis(I, name="k")
    gates = tc.compute((T, B, 4 * H), lambda t, n, g: tc.sum(Wh[g, j] * sh[t - 1, n, j], axis=j)
                       + tc.sum(Wx[g, k] * X[t, n, k], axis=k), name="gates")
    c_new = tc.compute((T, B, H), lambda t, n, i: tc.sigmoid(gates[t, n, H + i]) * sc[t - 1, n, i]
                       + tc.sigmoid(gates[t, n, i]) * tc.tanh(gates[t, n, 2 * H + i]),
                       name="c_step")
    h_new = tc.compute((T, B, H), lambda t, n, i: tc.sigmoid(gates[t, n, 3 * H + i])
                       * tc.tanh(c_new[t, n, i]), name="h_step")
    h0 = tc.compute((1, B, H), lambda s, n, i: tc.const(0.0, F), name="h0")
    c0 = tc.compute((1, B, H), lambda s, n, i: X[0, n, i % I], name="c0")
    hS, cS = tc.scan([h0, c0], [h_new, c_new], [sh, sc], inputs=[X], name="lstm")
    a = {X: rng.standard_normal((T, B, I)), Wh: 0.5 * rng.standard_normal((4 * H, H)),
         Wx: 0.5 * rng.standard_normal((4 * H, I))}

    def ref() -> np.ndarray:
        h = np.zeros((T, B, H))
        c = np.zeros((T, B, H))
        c[0] = a[X][0][:, np.arange(H) % I]
        for t in range(1, T):
            g = h[t - 1] @ a[Wh].T + a[X][t] @ a[Wx].T
            c[t] = _sig(g[:, H:2 * H]) * c[t - 1] + _sig(g[:, :H]) * np.tanh(g[:, 2 * H:3 * H])
            h[t] = _sig(g[:, 3 * H:]) * np.tanh(c[t])
        return h

    return Case(hS, [X, Wh, Wx], a, ref)


def euler(rng: Any, T: int = 12, n: int = 3, dt: float = 0.1) -> Case:
    th = tc.placeholder((3,), name="theta", dtype=F)
    Y0 = tc.placeholder((1, n), name="y0", dtype=F)
    st = tc.placeholder((T, n), name="y_state", dtype=F)

    def f(y: Any) -> Any:
        return th[0] * y - th[1] * y * y * y + th[2] * tc.sin(y)

    upd = tc.compute((T, n), lambda t, i: st[t - 1, i] + dt * f(st[t - 1, i]), name="euler_step")
    init = tc.compute((1, n), lambda s, i: Y0[s, i], name="y_init")
    S = tc.scan(init, upd, st, name="euler")
    a = {th: np.array([0.5, 0.3, 0.2]) + 0.1 * rng.standard_normal(3),
         Y0: rng.standard_normal((1, n))}

    def ref() -> np.ndarray:
        y = np.zeros((T, n))
        y[0] = a[Y0][0]
        p = a[th]
        for t in range(1, T):
            v = y[t - 1]
            y[t] = v + dt * (p[0] * v - p[1] * v ** 3 + p[2] * np.sin(v))
        return y

    return Case(S, [th, Y0], a, ref)


def rk4(rng: Any, T: int = 8, dt: float = 0.1) -> Case:
    """A pendulum integrated by RK4, the whole step in one expression per state (two states)."""
    p = tc.placeholder((2,), name="params", dtype=F)
    y0 = tc.placeholder((2,), name="y0", dtype=F)
    qs = tc.placeholder((T,), name="q_state", dtype=F)
    vs = tc.placeholder((T,), name="v_state", dtype=F)

    def f(q: Any, v: Any) -> tuple:
        return v, -p[0] * tc.sin(q) - p[1] * v

    def step(t: Any, c: int) -> Any:
        q, v = qs[t - 1], vs[t - 1]
        k1 = f(q, v)
        k2 = f(q + 0.5 * dt * k1[0], v + 0.5 * dt * k1[1])
        k3 = f(q + 0.5 * dt * k2[0], v + 0.5 * dt * k2[1])
        k4 = f(q + dt * k3[0], v + dt * k3[1])
        return (q, v)[c] + (k1[c] + 2 * k2[c] + 2 * k3[c] + k4[c]) * (dt / 6)

    upd = [tc.compute((T,), lambda t, c=c: step(t, c), name=f"rk4_{'qv'[c]}") for c in (0, 1)]
    init = [tc.compute((1,), lambda s, c=c: y0[c], name=f"init_{'qv'[c]}") for c in (0, 1)]
    Q, _ = tc.scan(init, upd, [qs, vs], name="rk4")
    a = {p: np.array([2.0, 0.3]) + 0.1 * rng.standard_normal(2), y0: rng.standard_normal(2)}

    def ref() -> np.ndarray:
        def fn(y: np.ndarray) -> np.ndarray:
            return np.array([y[1], -a[p][0] * np.sin(y[0]) - a[p][1] * y[1]])
        ys = [a[y0]]
        for _ in range(1, T):
            y = ys[-1]
            k1 = fn(y)
            k2 = fn(y + 0.5 * dt * k1)
            k3 = fn(y + 0.5 * dt * k2)
            k4 = fn(y + dt * k3)
            ys.append(y + (k1 + 2 * k2 + 2 * k3 + k4) * (dt / 6))
        return np.array(ys)[:, 0]

    return Case(Q, [p, y0], a, ref)


def reduce_gather(rng: Any, T: int = 6, n: int = 4, V: int = 5) -> Case:
    tok = tc.placeholder((T,), name="tok", dtype="int64")
    E = tc.placeholder((V, n), name="E", dtype=F)
    W = tc.placeholder((n, n), name="W", dtype=F)
    st = tc.placeholder((T, n), name="g_state", dtype=F)
    j = tc.reduce_axis(n, name="j")
    upd = tc.compute((T, n), lambda t, i: tc.tanh(tc.sum(W[i, j] * st[t - 1, j], axis=j)
                                                  + E[tok[t], i]), name="g_step")
    init = tc.compute((1, n), lambda s, i: E[tok[0], i], name="g_init")
    S = tc.scan(init, upd, st, name="embed_rnn")
    a = {tok: rng.integers(0, V, T), E: rng.standard_normal((V, n)),
         W: 0.5 * rng.standard_normal((n, n))}

    def ref() -> np.ndarray:
        s = np.zeros((T, n))
        s[0] = a[E][a[tok][0]]
        for t in range(1, T):
            s[t] = np.tanh(a[W] @ s[t - 1] + a[E][a[tok][t]])
        return s

    return Case(S, [E, W], a, ref)


def state_gather(rng: Any, T: int = 6, n: int = 4) -> Case:
    """A step that gathers from its own state (``state[t - 1, perm[i]]``, a repeated index)."""
    perm = tc.placeholder((n,), name="perm", dtype="int64")
    X = tc.placeholder((T, n), name="X", dtype=F)
    W = tc.placeholder((n, n), name="W", dtype=F)
    st = tc.placeholder((T, n), name="p_state", dtype=F)
    j = tc.reduce_axis(n, name="j")
    upd = tc.compute((T, n), lambda t, i: tc.tanh(tc.sum(W[i, j] * st[t - 1, perm[j]], axis=j))
                     + st[t - 1, perm[i]] * X[t, i], name="p_step")
    init = tc.compute((1, n), lambda s, i: X[0, i], name="p_init")
    S = tc.scan(init, upd, st, inputs=[X], name="gather_state")
    a = {perm: np.array([2, 0, 0, 1]), X: rng.standard_normal((T, n)),
         W: 0.5 * rng.standard_normal((n, n))}

    def ref() -> np.ndarray:
        s = np.zeros((T, n))
        s[0] = a[X][0]
        for t in range(1, T):
            g = s[t - 1][a[perm]]
            s[t] = np.tanh(a[W] @ g) + g * a[X][t]
        return s

    return Case(S, [X, W], a, ref)


CASES = {f.__name__: f for f in (cumsum, cumsum_axis1, cumprod_zeros, fibonacci, elman, lstm,
                                 euler, rk4, reduce_gather, state_gather)}
