"""Small networks and a finite-difference oracle for the DOF tests.

Every builder takes a batch of points ``x`` (placeholder ``(B, N)``) and returns the output
``u`` (shape ``(B,)``) and its weight placeholders with random float64 values.
"""

from __future__ import annotations

import numpy as np

import tecomp as tc

F = "float64"


def ph(shape, name, dtype=F):
    return tc.placeholder(shape, name=name, dtype=dtype)


def dense(h, nin, nout, act, name, rng, vals, bias=True):
    """``act(sum_k W[j, k] h[b, k] + c[j])`` as one stage."""
    W = ph((nout, nin), f"W{name}")
    vals[W] = rng.standard_normal((nout, nin)) / np.sqrt(nin)
    k = tc.reduce_axis(nin, f"k{name}")
    if bias:
        c = ph((nout,), f"c{name}")
        vals[c] = 0.3 * rng.standard_normal(nout)
        return tc.compute((h.shape[0], nout), lambda b, j: act(
            tc.sum(W[j, k] * h[b, k], axis=k) + c[j]), name=f"h{name}")
    return tc.compute((h.shape[0], nout), lambda b, j: act(tc.sum(W[j, k] * h[b, k], axis=k)),
                      name=f"h{name}")


def readout(h, nin, name, rng, vals):
    w = ph((nin,), f"w{name}")
    vals[w] = rng.standard_normal(nin) / np.sqrt(nin)
    k = tc.reduce_axis(nin, f"r{name}")
    return tc.compute((h.shape[0],), lambda b: tc.sum(w[k] * h[b, k], axis=k), name=f"u{name}")


def mlp(x, widths, rng, vals, act=tc.tanh, name=""):
    h, nin = x, int(x.shape[1].value)
    for n, w in enumerate(widths):
        h = dense(h, nin, w, act, f"{name}{n}", rng, vals)
        nin = w
    return readout(h, nin, name, rng, vals)


def net_mlp2(x, rng, vals):
    return mlp(x, [5, 4], rng, vals)


def net_mlp3(x, rng, vals):
    return mlp(x, [4, 5, 3], rng, vals)


def net_mlp3_sigmoid(x, rng, vals):
    return mlp(x, [4, 5, 3], rng, vals, act=tc.sigmoid)


def net_residual(x, rng, vals):
    """h1 = tanh(W0 x + c0); h2 = h1 + tanh(W1 h1); u = w . h2."""
    n = int(x.shape[1].value)
    h1 = dense(x, n, 4, tc.tanh, "0", rng, vals)
    t = dense(h1, 4, 4, tc.tanh, "1", rng, vals, bias=False)
    h2 = tc.compute(h1.shape, lambda b, j: h1[b, j] + t[b, j], name="res")
    return readout(h2, 4, "", rng, vals)


def net_product(x, rng, vals):
    """The product of two sub-networks (exercises the cross term 2 Q(g_a, g_b))."""
    a = mlp(x, [4], rng, vals, name="a")
    b = mlp(x, [3], rng, vals, act=tc.sin, name="b")
    return tc.compute(a.shape, lambda i: a[i] * b[i], name="prod")


def net_ops(x, rng, vals):
    """Division, pow, exp/log/sqrt, erf, select, max/min reductions and a softplus-like mix."""
    n = int(x.shape[1].value)
    h = dense(x, n, 4, tc.tanh, "0", rng, vals)
    k, m = tc.reduce_axis(4, "km"), tc.reduce_axis(n, "kn")
    return tc.compute((x.shape[0],), lambda b: (
        tc.exp(h[b, 0]) / (1.5 + h[b, 1] * h[b, 2])
        + tc.pow(h[b, 3] + 2.0, 1.5) + tc.log(2.0 + tc.sin(x[b, 0]))
        + tc.sqrt(1.0 + x[b, 1] * x[b, 1]) * tc.erf(h[b, 2])
        + tc.if_then_else(x[b, 0] > 0.0, h[b, 0] * h[b, 1], tc.cos(h[b, 1]))
        + tc.max(h[b, k] * x[b, 0], axis=k) + tc.min(x[b, m] * h[b, 0], axis=m)
        + tc.maximum(h[b, 0], h[b, 1]) * ((h[b, 2] + 1.5) ** (x[b, 1] * x[b, 1] + 1.0))),
        name="ops")


NETS = {"mlp2": net_mlp2, "mlp3": net_mlp3, "mlp3_sigmoid": net_mlp3_sigmoid,
        "residual": net_residual, "product": net_product, "ops": net_ops}


def operator_fd(f, xv: np.ndarray, A: np.ndarray, h: float = 2e-3) -> np.ndarray:
    """``sum_ij A_ij d2f/dx_i dx_j`` per sample from A's eigenvectors: central second
    differences along each, Richardson-extrapolated (error O(h^4))."""
    lam, U = np.linalg.eigh(A)
    f0 = f(xv)
    out = np.zeros_like(f0)
    for k in range(len(lam)):
        if abs(lam[k]) < 1e-12 * max(1.0, np.abs(lam).max()):
            continue

        def d2(step, u=U[:, k]):
            return (f(xv + step * u) - 2 * f0 + f(xv - step * u)) / step**2
        out += lam[k] * (4 * d2(h / 2) - d2(h)) / 3
    return out


def matrices(rng, n: int) -> dict[str, np.ndarray]:
    """The operator matrices of the tests, of size ``n``."""
    M = rng.standard_normal((n, n))
    d = rng.uniform(0.5, 2.0, n) * np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    lam = rng.uniform(0.5, 2.0, n) * np.where(np.arange(n) < (n + 1) // 2, 1.0, -1.0)
    Q, _ = np.linalg.qr(M)
    return {"laplacian": np.eye(n), "diagonal": np.diag(d), "spd": M @ M.T + 0.1 * np.eye(n),
            "indefinite": Q @ np.diag(lam) @ Q.T}
