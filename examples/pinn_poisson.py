"""A physics-informed network for the Poisson equation, trained with tecomp.

Solve ``Δu = f`` on the unit square with ``u = 0`` on its boundary, where
``f = -2 π² sin(πx) sin(πy)`` (exact solution ``u* = sin(πx) sin(πy)``).  The network is a
tanh MLP ``2 → 16 → 16 → 1``; the loss is

    mean over interior points of (Δu - f)²  +  λ · mean over boundary points of u²

(``λ = 100`` by default: the residual is of the size of ``f``, about 20, so the boundary term
needs the weight to be enforced.)

The Laplacian ``Δu`` comes from ``tc.laplacian(u, X)`` (forward propagation of the second-order
operator, method "dof"), the weight gradients from ``tc.gradient`` of the loss, and the whole
step -- loss and gradients -- is compiled once with ``tc.build``.  Adam is written in NumPy.

    python examples/pinn_poisson.py              # 3000 steps, relative L2 error ~4e-3
    python examples/pinn_poisson.py --quick      # a few seconds: small sets, 40 steps
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import tecomp as tc

DT = "float64"


def network(X: tc.Tensor, params: list[tc.Tensor], widths: list[int], name: str) -> tc.Tensor:
    """``u[b] = w · tanh(W1 tanh(W0 X[b] + c0) + c1) + c2``, one stage per layer."""
    batch = X.shape[0]
    h, nin = X, int(X.shape[1].value)
    for layer, width in enumerate(widths):
        W, c = params[2 * layer], params[2 * layer + 1]
        k = tc.reduce_axis(nin, f"k{layer}")
        h = tc.compute((batch, width), lambda b, j, h=h, W=W, c=c, k=k: tc.tanh(
            tc.sum(W[j, k] * h[b, k], axis=k) + c[j]), name=f"{name}_h{layer}")
        nin = width
    w, c = params[-2], params[-1]
    k = tc.reduce_axis(nin, "ko")
    return tc.compute((batch,), lambda b: tc.sum(w[k] * h[b, k], axis=k) + c[0], name=name)


def declare_params(widths: list[int]) -> list[tc.Tensor]:
    params, nin = [], 2
    for layer, width in enumerate(widths):
        params += [tc.placeholder((width, nin), f"W{layer}", DT),
                   tc.placeholder((width,), f"c{layer}", DT)]
        nin = width
    return params + [tc.placeholder((nin,), "w_out", DT), tc.placeholder((1,), "c_out", DT)]


def init_params(params: list[tc.Tensor], rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for p in params:
        shape = tuple(int(s.value) for s in p.shape)
        if len(shape) == 2:
            out.append(rng.standard_normal(shape) * np.sqrt(1.0 / shape[1]))
        elif p.name == "w_out":
            out.append(rng.standard_normal(shape) * np.sqrt(1.0 / shape[0]))
        else:
            out.append(np.zeros(shape))
    return out


def build_step(n_in: int, n_bd: int, widths: list[int], method: str, bc_weight: float):
    """Declare the loss, differentiate it, and compile loss + gradients into one kernel."""
    loss, inputs = declare_loss(n_in, n_bd, widths, method, bc_weight)
    params = inputs[2:]
    grads = tc.gradient(loss, params)
    kernel = tc.build([loss, *grads], inputs, name="pinn_step")
    return params, kernel


def program() -> tuple[list[tc.Tensor], list[tc.Tensor]]:
    """A small loss and its inputs, for ``tecomp show|lower examples/pinn_poisson.py``."""
    loss, inputs = declare_loss(64, 32, [16, 16], "dof", 10.0)
    return [loss], inputs


def declare_loss(n_in: int, n_bd: int, widths: list[int], method: str, bc_weight: float
                 ) -> tuple[tc.Tensor, list[tc.Tensor]]:
    """The PINN loss and its inputs ``[X, Xb, *params]``."""
    params = declare_params(widths)
    X = tc.placeholder((n_in, 2), "X", DT)       # interior collocation points
    Xb = tc.placeholder((n_bd, 2), "Xb", DT)     # boundary points
    u = network(X, params, widths, "u")
    ub = network(Xb, params, widths, "ub")
    lap = tc.laplacian(u, X, method=method)
    k = -2.0 * math.pi**2
    f = tc.compute((n_in,), lambda b: k * tc.sin(math.pi * X[b, 0]) * tc.sin(math.pi * X[b, 1]),
                   name="f")
    b, e = tc.reduce_axis(n_in, "b"), tc.reduce_axis(n_bd, "e")
    loss = tc.compute((), lambda: tc.sum((lap[b] - f[b]) * (lap[b] - f[b]), axis=b) / n_in
                      + tc.sum(ub[e] * ub[e], axis=e) * (bc_weight / n_bd), name="loss")
    return loss, [X, Xb, *params]


def build_predict(n: int, widths: list[int]):
    params = declare_params(widths)
    X = tc.placeholder((n, 2), "X", DT)
    return tc.build(network(X, params, widths, "u"), [X, *params], name="pinn_predict")


def boundary_points(n: int, rng: np.random.Generator) -> np.ndarray:
    t = rng.uniform(0.0, 1.0, n)
    side = np.arange(n) % 4
    x = np.where(side == 0, t, np.where(side == 1, 1.0, np.where(side == 2, t, 0.0)))
    y = np.where(side == 0, 0.0, np.where(side == 1, t, np.where(side == 2, 1.0, t)))
    return np.stack([x, y], axis=1)


def adam(params: list[np.ndarray], lr: float, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8):
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    t = 0

    def step(grads: list[np.ndarray]) -> None:
        nonlocal t
        t += 1
        for p, g, mi, vi in zip(params, grads, m, v):
            mi *= b1
            mi += (1 - b1) * g
            vi *= b2
            vi += (1 - b2) * g * g
            p -= lr * (mi / (1 - b1**t)) / (np.sqrt(vi / (1 - b2**t)) + eps)
    return step


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="Adam steps (default 3000)")
    ap.add_argument("--quick", action="store_true", help="small sets and 40 steps")
    ap.add_argument("--interior", type=int, default=256, help="interior collocation points")
    ap.add_argument("--boundary", type=int, default=128, help="boundary points")
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--method", default="dof", choices=["dof", "hessian"])
    ap.add_argument("--bc-weight", type=float, default=100.0, help="weight of the boundary term")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    widths = [16, 16]
    n_in, n_bd = (64, 32) if args.quick else (args.interior, args.boundary)
    steps = args.steps if args.steps is not None else (40 if args.quick else 3000)
    rng = np.random.default_rng(args.seed)

    t0 = time.perf_counter()
    params, kernel = build_step(n_in, n_bd, widths, args.method, args.bc_weight)
    predict = build_predict(33 * 33, widths)
    print(f"built loss + {len(params)} gradients ({args.method} Laplacian) in "
          f"{time.perf_counter() - t0:.2f} s")

    X = rng.uniform(0.0, 1.0, (n_in, 2))
    Xb = boundary_points(n_bd, rng)
    values = init_params(params, rng)
    update = adam(values, args.lr)
    every = max(1, steps // 10)
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        loss, *grads = kernel(X, Xb, *values)
        losses.append(float(loss))
        if step % every == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {float(loss):.6e}")
        update(grads)
    elapsed = time.perf_counter() - t0

    g = np.linspace(0.0, 1.0, 33)
    grid = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
    exact = np.sin(np.pi * grid[:, 0]) * np.sin(np.pi * grid[:, 1])
    pred = predict(grid, *values)
    err = float(np.linalg.norm(pred - exact) / np.linalg.norm(exact))
    print(f"{steps} steps in {elapsed:.2f} s; first loss {losses[0]:.6e}, "
          f"final loss {losses[-1]:.6e}")
    print(f"relative L2 error against the exact solution: {err:.4e}")
    return {"first_loss": losses[0], "final_loss": losses[-1], "rel_l2": err}


if __name__ == "__main__":
    main()
