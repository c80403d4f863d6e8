"""The cases of the CPU benchmark (``bench_cpu.py``), each written once per framework.

A case lists its inputs (shape, dtype, whether it is differentiated) and one function per
framework that computes the forward output from that framework's inputs: tecomp (DSL), NumPy,
PyTorch, JAX and TVM (``te``/``topi``).  The gradient is the vector-Jacobian product with a
random head of the output's shape, with respect to the differentiated inputs: ``tc.gradient``,
``torch.autograd.grad``, ``jax.vjp`` (jitted) and TVM's ``te.gradient``.  NumPy gradients are
hand-written where short.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import tecomp as tc


@dataclass
class Input:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    diff: bool = True
    high: int = 0  # integer inputs: values in [0, high)


@dataclass
class Case:
    name: str
    inputs: list[Input]
    tecomp: Callable[..., Any]
    numpy: Callable[..., Any]
    torch: Callable[..., Any] | None = None
    jax: Callable[..., Any] | None = None
    tvm: Callable[..., Any] | None = None
    numpy_grad: Callable[..., Any] | None = None  # (*inputs, head) -> grads of diff inputs
    flops: int = 0

    def arrays(self, rng: np.random.Generator) -> list[np.ndarray]:
        out = []
        for x in self.inputs:
            if x.dtype.startswith("int"):
                out.append(rng.integers(0, x.high, x.shape).astype(x.dtype))
            else:
                out.append(rng.standard_normal(x.shape).astype(x.dtype))
        return out


def _np_conv(x, w, stride=1, pad=0, dil=1, groups=1):
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (s - 1) - 1) // stride + 1
    cols = np.empty((n, c, r, s, oh, ow), x.dtype)
    for a in range(r):
        for b in range(s):
            cols[:, :, a, b] = xp[:, :, a * dil:a * dil + stride * oh:stride,
                                  b * dil:b * dil + stride * ow:stride]
    if groups == 1:
        return np.einsum("ncrsyx,kcrs->nkyx", cols, w, optimize=True)
    return np.einsum("ncrsyx,crs->ncyx", cols, w[:, 0], optimize=True)


def _torch():
    import torch
    import torch.nn.functional as F

    return torch, F


def _jnp():
    import jax
    import jax.numpy as jnp

    return jax, jnp


def _topi():
    from tvm import te, topi

    return te, topi


def matmul(n: int) -> Case:
    def tcf(A, B):
        k = tc.reduce_axis(n, name="k")
        return tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")

    def tvmf(A, B):
        te, _ = _topi()
        k = te.reduce_axis((0, n), name="k")
        return te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    return Case(f"matmul {n}^3", [Input("A", (n, n)), Input("B", (n, n))], tcf,
                lambda a, b: a @ b, lambda a, b: a @ b, lambda a, b: a @ b, tvmf,
                lambda a, b, h: (h @ b.T, a.T @ h), 2 * n ** 3)


def conv(name: str, stride: int, pad: int, dil: int, depthwise: bool = False) -> Case:
    c, k = 16, (16 if depthwise else 32)
    wshape = (16, 1, 3, 3) if depthwise else (32, 16, 3, 3)
    groups = 16 if depthwise else 1

    def tcf(X, W):
        return tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dil, groups=groups)

    def torchf(x, w):
        _, F = _torch()
        return F.conv2d(x, w, stride=stride, padding=pad, dilation=dil, groups=groups)

    def jaxf(x, w):
        jax, _ = _jnp()
        return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2,
                                            rhs_dilation=(dil, dil),
                                            feature_group_count=groups)

    def tvmf(X, W):
        _, topi = _topi()
        if depthwise:
            return topi.nn.depthwise_conv2d_nchw(X, W, stride, pad, dil)
        return topi.nn.conv2d_nchw(X, W, stride, pad, dil)

    oh = (32 + 2 * pad - dil * 2 - 1) // stride + 1
    flops = 2 * k * (1 if depthwise else c) * 9 * oh * oh
    return Case(name, [Input("X", (1, c, 32, 32)), Input("W", wshape)], tcf,
                lambda x, w: _np_conv(x, w, stride, pad, dil, groups), torchf, jaxf, tvmf,
                flops=flops)


def pool(kind: str) -> Case:
    def tcf(X):
        f = tc.ops.max_pool2d if kind == "max" else tc.ops.avg_pool2d
        return f(X, 2, 2)

    def npf(x):
        v = x.reshape(1, 16, 16, 2, 16, 2)
        return v.max(axis=(3, 5)) if kind == "max" else v.mean(axis=(3, 5))

    def torchf(x):
        _, F = _torch()
        return F.max_pool2d(x, 2, 2) if kind == "max" else F.avg_pool2d(x, 2, 2)

    def jaxf(x):
        jax, jnp = _jnp()
        if kind == "max":
            return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                         "VALID")
        return jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID") * 0.25

    def tvmf(X):
        _, topi = _topi()
        return topi.nn.pool2d(X, [2, 2], [2, 2], [1, 1], [0, 0, 0, 0], kind, layout="NCHW")

    return Case(f"{kind} pool 2x2/2", [Input("X", (1, 16, 32, 32))], tcf, npf, torchf, jaxf,
                tvmf)


def softmax(n: int) -> Case:
    def npf(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    def npg(x, h):
        y = npf(x)
        return (y * (h - (h * y).sum(1, keepdims=True)),)

    def torchf(x):
        torch, _ = _torch()
        return torch.softmax(x, 1)

    def jaxf(x):
        jax, _ = _jnp()
        return jax.nn.softmax(x, axis=1)

    def tvmf(X):
        _, topi = _topi()
        return topi.nn.softmax(X, axis=1)

    return Case(f"softmax {n}^2", [Input("X", (n, n))], tc.ops.softmax, npf, torchf, jaxf,
                tvmf, npg)


def sigmoid() -> Case:
    n = 1024

    def tcf(X):
        return tc.compute((n, n), lambda i, j: tc.sigmoid(X[i, j]), name="sig")

    def npf(x):
        return 1 / (1 + np.exp(-x))

    def npg(x, h):
        y = npf(x)
        return (h * y * (1 - y),)

    def torchf(x):
        torch, _ = _torch()
        return torch.sigmoid(x)

    def jaxf(x):
        jax, _ = _jnp()
        return jax.nn.sigmoid(x)

    def tvmf(X):
        _, topi = _topi()
        return topi.sigmoid(X)

    return Case("sigmoid 1024^2", [Input("X", (n, n))], tcf, npf, torchf, jaxf, tvmf, npg)


def take() -> Case:
    def npg(e, idx, h):
        g = np.zeros_like(e)
        np.add.at(g, idx, h)
        return (g,)

    def torchf(e, idx):
        return e[idx]

    def jaxf(e, idx):
        _, jnp = _jnp()
        return jnp.take(e, idx, axis=0)

    def tvmf(E, idx):
        _, topi = _topi()
        return topi.take(E, idx, axis=0)

    return Case("take 1000x64[4096]", [Input("E", (1000, 64)),
                                       Input("idx", (4096,), "int64", False, 1000)],
                tc.ops.take, lambda e, idx: e[idx], torchf, jaxf, tvmf, npg)


def broadcast_add() -> Case:
    n = 1024

    def tcf(A, b):
        return tc.compute((n, n), lambda i, j: A[i, j] + b[j], name="badd")

    def tvmf(A, b):
        _, topi = _topi()
        return topi.add(A, b)

    return Case("broadcast add 1024^2", [Input("A", (n, n)), Input("b", (n,))], tcf,
                lambda a, b: a + b, lambda a, b: a + b, lambda a, b: a + b, tvmf,
                lambda a, b, h: (h.copy(), h.sum(0)))


def reduce_max() -> Case:
    n = 1024

    def tcf(A):
        k = tc.reduce_axis(n, name="k")
        return tc.compute((n,), lambda i: tc.max(A[i, k], axis=k), name="rmax")

    def npg(a, h):
        return ((a == a.max(1, keepdims=True)) * h[:, None],)

    def torchf(a):
        return a.amax(1)

    def jaxf(a):
        return a.max(1)

    def tvmf(A):
        _, topi = _topi()
        return topi.max(A, axis=1)

    return Case("reduce max 1024^2", [Input("A", (n, n))], tcf, lambda a: a.max(1), torchf,
                jaxf, tvmf, npg)


def mlp() -> Case:
    sizes = [100, 256, 256, 256, 256, 10]
    ins = [Input("x", (64, 100), diff=False)]
    for n in range(5):
        ins += [Input(f"W{n}", (sizes[n + 1], sizes[n])), Input(f"b{n}", (sizes[n + 1],))]

    def tcf(x, *wb):
        h = x
        for n in range(5):
            h = tc.ops.dense(h, wb[2 * n], wb[2 * n + 1], name=f"d{n}")
            if n < 4:
                h = tc.compute(h.shape, lambda i, j, h=h: tc.tanh(h[i, j]), name=f"t{n}")
        return h

    def generic(x, *wb, tanh=np.tanh):
        h = x
        for n in range(5):
            h = h @ wb[2 * n].T + wb[2 * n + 1]
            if n < 4:
                h = tanh(h)
        return h

    def torchf(x, *wb):
        torch, _ = _torch()
        return generic(x, *wb, tanh=torch.tanh)

    def jaxf(x, *wb):
        _, jnp = _jnp()
        return generic(x, *wb, tanh=jnp.tanh)

    def tvmf(x, *wb):
        _, topi = _topi()
        h = x
        for n in range(5):
            h = topi.nn.dense(h, wb[2 * n], wb[2 * n + 1])
            if n < 4:
                h = topi.tanh(h)
        return h

    return Case("tanh MLP 64x100, 4x256", ins, tcf, generic, torchf, jaxf, tvmf)


def layer_norm() -> Case:
    def npf(x, g, b):
        m = x.mean(1, keepdims=True)
        v = ((x - m) ** 2).mean(1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * g + b

    def torchf(x, g, b):
        _, F = _torch()
        return F.layer_norm(x, (1024,), g, b, 1e-5)

    def jaxf(x, g, b):
        _, jnp = _jnp()
        m = x.mean(1, keepdims=True)
        v = ((x - m) ** 2).mean(1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * g + b

    def tvmf(X, g, b):
        _, topi = _topi()
        return topi.nn.layer_norm(X, g, b, axis=[-1], epsilon=1e-5)

    return Case("layer norm 512x1024", [Input("X", (512, 1024)), Input("g", (1024,)),
                                        Input("b", (1024,))],
                lambda X, g, b: tc.ops.layer_norm(X, g, b), npf, torchf, jaxf, tvmf)


def all_cases() -> list[Case]:
    return [
        matmul(256), matmul(512),
        conv("conv2d s1 p1", 1, 1, 1), conv("conv2d s2 p1", 2, 1, 1),
        conv("conv2d dil2 p2", 1, 2, 2), conv("depthwise 16x1x3x3 p1", 1, 1, 1, True),
        pool("max"), pool("avg"), softmax(256), softmax(1000), sigmoid(), take(),
        broadcast_add(), reduce_max(), mlp(), layer_norm(),
    ]
