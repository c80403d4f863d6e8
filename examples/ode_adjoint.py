"""Gradient of an ODE solution with respect to its parameters, through an RK4 integrator.

The damped pendulum ``q'' = -a sin(q) - c q'`` is integrated with classical Runge-Kutta
(4 stages a step) as a ``tc.scan`` over 200 steps; the loss is the squared distance of the
trajectory to a target.  ``tc.gradient`` gives d loss / d (a, c) by the adjoint recurrence
(backward in time, reusing the stored states), compared here with central differences.

    python examples/ode_adjoint.py
"""

from __future__ import annotations

import numpy as np

import tecomp as tc

F = "float64"


def build(T: int, dt: float):
    p = tc.placeholder((2,), name="params", dtype=F)  # a, c
    y0 = tc.placeholder((2,), name="y0", dtype=F)
    target = tc.placeholder((T,), name="target", dtype=F)
    qs = tc.placeholder((T,), name="q_state", dtype=F)
    vs = tc.placeholder((T,), name="v_state", dtype=F)

    def f(q, v):  # the vector field: (q', v')
        return v, -p[0] * tc.sin(q) - p[1] * v

    def slope(name, prev, s):
        """The RK4 slope at y[t-1] + s * dt * prev[t] (one step tensor per component)."""
        def at(t, c):
            y = (qs[t - 1], vs[t - 1])
            return y[c] if prev is None else y[c] + s * dt * prev[c][t]
        return (tc.compute((T,), lambda t: f(at(t, 0), at(t, 1))[0], name=f"{name}_q"),
                tc.compute((T,), lambda t: f(at(t, 0), at(t, 1))[1], name=f"{name}_v"))

    k1 = slope("k1", None, 0.0)
    k2 = slope("k2", k1, 0.5)
    k3 = slope("k3", k2, 0.5)
    k4 = slope("k4", k3, 1.0)

    def rk4(t, c):
        y = (qs[t - 1], vs[t - 1])[c]
        return y + (k1[c][t] + 2 * k2[c][t] + 2 * k3[c][t] + k4[c][t]) * (dt / 6)

    q_step = tc.compute((T,), lambda t: rk4(t, 0), name="q_step")
    v_step = tc.compute((T,), lambda t: rk4(t, 1), name="v_step")
    q_init = tc.compute((1,), lambda s: y0[0], name="q_init")
    v_init = tc.compute((1,), lambda s: y0[1], name="v_init")
    Q, _ = tc.scan([q_init, v_init], [q_step, v_step], [qs, vs], name="pendulum")
    r = tc.reduce_axis(T, name="r")
    loss = tc.compute((), lambda: tc.sum((Q[r] - target[r]) ** 2, axis=r), name="loss")
    (dp,) = tc.gradient(loss, [p])
    return p, y0, target, loss, dp


def program(T: int = 200, dt: float = 0.05) -> tuple[list[tc.Tensor], list[tc.Tensor]]:
    """The loss and its parameter gradient (outputs), and the inputs (``tecomp show`` reads
    this function)."""
    p, y0, target, loss, dp = build(T, dt)
    return [loss, dp], [p, y0, target]


def main() -> float:
    T, dt = 200, 0.05
    p, y0, target, loss, dp = build(T, dt)
    kernel = tc.build([loss, dp], [p, y0, target])
    params = np.array([2.0, 0.3])
    y_start = np.array([1.0, 0.0])
    goal = np.cos(1.3 * dt * np.arange(T)) * np.exp(-0.1 * dt * np.arange(T))
    value, grad = kernel(params, y_start, goal)
    h = 1e-6
    fd = np.array([(float(kernel(params + h * e, y_start, goal)[0])
                    - float(kernel(params - h * e, y_start, goal)[0])) / (2 * h)
                   for e in np.eye(2)])
    err = float(np.max(np.abs(grad - fd)) / np.max(np.abs(fd)))
    print(f"RK4 over {T} steps: loss {float(value):.6f}")
    print(f"d loss / d (a, c)  adjoint {grad}  central difference {fd}")
    print(f"relative error {err:.2e}")
    return err


if __name__ == "__main__":
    main()
