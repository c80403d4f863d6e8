"""The cases of the CPU benchmark (``bench_cpu.py``), each written once per framework.

A case lists its inputs (shape, dtype, whether it is differentiated) and one function per
framework computing the forward output from that framework's inputs: tecomp (DSL), PyTorch,
JAX and, where it is one line, NumPy.  The gradient is the vector-Jacobian product with a
random head of the output's shape with respect to the differentiated inputs
(``tc.gradient``, ``torch.autograd.grad``, jitted ``jax.vjp``).  The PyTorch function, run
in float64, is the reference every result is checked against.

Suites: ``"default"`` — realistic sizes (ResNet-style convolutions of batch 8, transformer
pieces, dense layers 768-3072 wide, matmul 256-2048, embeddings, losses, long reductions);
``"latency"`` — the small cases of earlier versions, where a call's fixed overhead of a few
microseconds decides the ratio.  ``quick`` marks the subset ``--quick`` runs.
"""

from __future__ import annotations

import math
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
    torch: Callable[..., Any]
    jax: Callable[..., Any] | None = None
    numpy: Callable[..., Any] | None = None
    numpy_grad: Callable[..., Any] | None = None  # (*inputs, head) -> grads of diff inputs
    flops: int = 0  # forward multiply-adds x 2, for contractions (0: not a contraction)
    suite: str = "default"
    quick: bool = False

    def arrays(self, rng: np.random.Generator) -> list[np.ndarray]:
        out = []
        for x in self.inputs:
            if x.dtype.startswith("int"):
                out.append(rng.integers(0, x.high, x.shape).astype(x.dtype))
            else:
                out.append(rng.standard_normal(x.shape).astype(x.dtype))
        return out


def _F():
    import torch.nn.functional as F

    return F


def _jax():
    import jax

    return jax


# ------------------------------------------------------------------------------ contractions
def matmul(n: int, quick: bool = False, suite: str = "default") -> Case:
    def tcf(A, B):
        k = tc.reduce_axis(n, name="k")
        return tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")

    def mm(a, b):
        return a @ b

    return Case(f"matmul {n}^3", [Input("A", (n, n)), Input("B", (n, n))], tcf, mm, mm, mm,
                lambda a, b, h: (h @ b.T, a.T @ h), 2 * n ** 3, suite, quick)


def bmm(b: int, m: int, k: int, n: int) -> Case:
    def tcf(A, B):
        r = tc.reduce_axis(k, name="r")
        return tc.compute((b, m, n), lambda z, i, j: tc.sum(A[z, i, r] * B[z, r, j], axis=r),
                          name="C")

    def mm(x, y):
        return x @ y

    return Case(f"batched matmul {b}x{m}x{k}x{n}",
                [Input("A", (b, m, k)), Input("B", (b, k, n))], tcf, mm, mm, mm,
                flops=2 * b * m * n * k)


def dense(batch: int, nin: int, nout: int, quick: bool = False) -> Case:
    def lin(x, w, bias):
        return x @ w.T + bias

    return Case(f"dense {batch}x{nin}->{nout}",
                [Input("X", (batch, nin)), Input("W", (nout, nin)), Input("b", (nout,))],
                lambda X, W, b: tc.ops.dense(X, W, b), lambda x, w, b: _F().linear(x, w, b),
                lin, lin, flops=2 * batch * nin * nout, quick=quick)


def conv(n: int, c: int, k: int, hw: int, r: int, stride: int, pad: int,
         depthwise: bool = False, quick: bool = False, suite: str = "default",
         dilation: int = 1) -> Case:
    groups = c if depthwise else 1
    wshape = (c, 1, r, r) if depthwise else (k, c, r, r)
    oh = (hw + 2 * pad - dilation * (r - 1) - 1) // stride + 1

    def tcf(X, W):
        return tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dilation,
                             groups=groups)

    def torchf(x, w):
        return _F().conv2d(x, w, stride=stride, padding=pad, dilation=dilation, groups=groups)

    def jaxf(x, w):
        return _jax().lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2,
                                               rhs_dilation=(dilation, dilation),
                                               feature_group_count=groups)

    kind = "depthwise" if depthwise else f"conv{r}x{r}"
    step = ("/2" if stride == 2 else "") + (f" d{dilation}" if dilation > 1 else "")
    name = f"{kind}{step} {n}x{c}x{hw}x{hw}" + ("" if depthwise else f"->{k}")
    flops = 2 * n * (c if depthwise else k) * (1 if depthwise else c) * r * r * oh * oh
    return Case(name, [Input("X", (n, c, hw, hw)), Input("W", wshape)], tcf, torchf, jaxf,
                flops=flops, suite=suite, quick=quick)


def conv_transpose(n: int, c: int, k: int, hw: int) -> Case:
    """Stride 2, padding 1, kernel 4 (output 2*hw): ``tc.ops.conv_transpose2d`` where the
    library has it, else ``Y[n,o,y,x] = sum X[n,c,(y+1-ky)/2,(x+1-kx)/2] * W[c,o,ky,kx]``
    over the terms whose divisions are exact and in range."""
    out = 2 * hw

    def tcf(X, W):
        op = getattr(tc.ops, "conv_transpose2d", None)
        if op is not None:
            return op(X, W, stride=2, padding=1)
        rc, ry, rx = (tc.reduce_axis(c, name="rc"), tc.reduce_axis(4, name="ry"),
                      tc.reduce_axis(4, name="rx"))

        def body(b, o, y, x):
            iy, ix = (y + 1 - ry) // 2, (x + 1 - rx) // 2
            ok = tc.all(tc.eq((y + 1 - ry) % 2, 0), tc.eq((x + 1 - rx) % 2, 0), iy >= 0,
                        iy < hw, ix >= 0, ix < hw)
            return tc.sum(X[b, rc, iy, ix] * W[rc, o, ry, rx], axis=[rc, ry, rx], where=ok)

        return tc.compute((n, k, out, out), body, name="convT")

    def jaxf(x, w):
        return _jax().lax.conv_transpose(x, w, (2, 2), [(2, 2), (2, 2)],
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                         transpose_kernel=True)

    return Case(f"conv_transpose4x4/2 {n}x{c}x{hw}x{hw}->{k}",
                [Input("X", (n, c, hw, hw)), Input("W", (c, k, 4, 4))], tcf,
                lambda x, w: _F().conv_transpose2d(x, w, stride=2, padding=1), jaxf,
                flops=2 * n * c * k * 16 * hw * hw)


# ------------------------------------------------------------------------------ transformer
def attention(heads: int, length: int, d: int, quick: bool = False,
              causal: bool = True) -> Case:
    scale = 1.0 / math.sqrt(d)

    def tcf(Q, K, V):
        c = tc.reduce_axis(d, name="c")
        if causal:
            S = tc.compute((heads, length, length), lambda h, i, j: tc.if_then_else(
                j <= i, tc.sum(Q[h, i, c] * K[h, j, c], axis=c) * scale, -1e30), name="S")
        else:
            S = tc.compute((heads, length, length), lambda h, i, j: tc.sum(
                Q[h, i, c] * K[h, j, c], axis=c) * scale, name="S")
        P = tc.ops.softmax(S)
        t = tc.reduce_axis(length, name="t")
        return tc.compute((heads, length, d),
                          lambda h, i, e: tc.sum(P[h, i, t] * V[h, t, e], axis=t), name="O")

    def torchf(q, k, v):
        import torch

        s = (q @ k.transpose(-1, -2)) * scale
        if not causal:
            return torch.softmax(s, -1) @ v
        mask = torch.ones(length, length, dtype=torch.bool).triu(1)
        return torch.softmax(s.masked_fill(mask, -1e30), -1) @ v

    def jaxf(q, k, v):
        jnp = _jax().numpy
        s = (q @ jnp.swapaxes(k, -1, -2)) * scale
        if not causal:
            return _jax().nn.softmax(s, axis=-1) @ v
        i = jnp.arange(length)
        s = jnp.where(i[None, :] <= i[:, None], s, -1e30)
        return _jax().nn.softmax(s, axis=-1) @ v

    shape = (heads, length, d)
    scores = length * (length + 1) // 2 if causal else length * length
    return Case(f"{'causal ' if causal else ''}attention {heads}x{length}x{d}",
                [Input("Q", shape), Input("K", shape), Input("V", shape)], tcf, torchf, jaxf,
                # the products tecomp computes: with the mask, the lower triangle of Q K^T
                # (the masked scores are never evaluated), all of P V
                flops=2 * heads * d * (scores + length * length), quick=quick)


def layer_norm(rows: int, cols: int, quick: bool = False) -> Case:
    def jaxf(x, g, b):
        jnp = _jax().numpy
        m = x.mean(1, keepdims=True)
        v = ((x - m) ** 2).mean(1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * g + b

    return Case(f"layer norm {rows}x{cols}",
                [Input("X", (rows, cols)), Input("g", (cols,)), Input("b", (cols,))],
                lambda X, g, b: tc.ops.layer_norm(X, g, b),
                lambda x, g, b: _F().layer_norm(x, (cols,), g, b, 1e-5), jaxf, quick=quick)


def gelu_tc(X: Any) -> Any:
    """The tanh form of GELU (Hendrycks & Gimpel 2016; GPT-2's), which every framework has:
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    c = math.sqrt(2.0 / math.pi)
    return tc.compute(X.shape, lambda *i: 0.5 * X[i] * (
        1.0 + tc.tanh(c * (X[i] + 0.044715 * X[i] * X[i] * X[i]))), name="gelu")


def gelu(rows: int, cols: int, quick: bool = False) -> Case:
    return Case(f"GELU (tanh) {rows}x{cols}", [Input("X", (rows, cols))], gelu_tc,
                lambda x: _F().gelu(x, approximate="tanh"),
                lambda x: _jax().nn.gelu(x, approximate=True), quick=quick)


def gelu_erf_tc(X: Any) -> Any:
    """The exact form of GELU, ``0.5 x (1 + erf(x / sqrt(2)))`` (PyTorch's default)."""
    c = 1.0 / math.sqrt(2.0)
    return tc.compute(X.shape, lambda *i: 0.5 * X[i] * (1.0 + tc.erf(c * X[i])), name="gelu")


def gelu_erf(rows: int, cols: int) -> Case:
    return Case(f"GELU (erf) {rows}x{cols}", [Input("X", (rows, cols))], gelu_erf_tc,
                lambda x: _F().gelu(x), lambda x: _jax().nn.gelu(x, approximate=False))


def _cross_entropy_tc(logits: Any, y: Any, batch: int) -> Any:
    ls = tc.ops.log_softmax(logits)
    i = tc.reduce_axis(batch, name="i")
    return tc.compute((), lambda: tc.sum(-ls[i, y[i]], axis=i) / float(batch), name="loss")


def _cross_entropy_jax(logits: Any, y: Any) -> Any:
    jax = _jax()
    ls = jax.nn.log_softmax(logits, axis=1)
    return -jax.numpy.take_along_axis(ls, y[:, None], axis=1).mean()


def cross_entropy(batch: int, classes: int, quick: bool = False) -> Case:
    return Case(f"softmax cross-entropy {batch}x{classes}",
                [Input("Z", (batch, classes)), Input("y", (batch,), "int64", False, classes)],
                lambda Z, y: _cross_entropy_tc(Z, y, batch),
                lambda z, y: _F().cross_entropy(z, y), _cross_entropy_jax, quick=quick)


def mlp_loss(batch: int, nin: int, hidden: int, classes: int, quick: bool = False) -> Case:
    ins = [Input("x", (batch, nin), diff=False), Input("W1", (hidden, nin)),
           Input("b1", (hidden,)), Input("W2", (classes, hidden)), Input("b2", (classes,)),
           Input("y", (batch,), "int64", False, classes)]

    def tcf(x, W1, b1, W2, b2, y):
        h = tc.ops.dense(x, W1, b1, name="h")
        r = tc.compute(h.shape, lambda i, j: tc.maximum(h[i, j], 0.0), name="relu")
        return _cross_entropy_tc(tc.ops.dense(r, W2, b2, name="z"), y, batch)

    def torchf(x, W1, b1, W2, b2, y):
        F = _F()
        return F.cross_entropy(F.linear(F.relu(F.linear(x, W1, b1)), W2, b2), y)

    def jaxf(x, W1, b1, W2, b2, y):
        jnp = _jax().numpy
        return _cross_entropy_jax(jnp.maximum(x @ W1.T + b1, 0.0) @ W2.T + b2, y)

    return Case(f"MLP {nin}-{hidden}-{classes} + CE, batch {batch}", ins, tcf, torchf, jaxf,
                flops=2 * batch * (nin * hidden + hidden * classes), quick=quick)


# ------------------------------------------------------------------------------ memory-bound
def embedding(vocab: int, dim: int, count: int) -> Case:
    return Case(f"embedding {vocab}x{dim}[{count}]",
                [Input("E", (vocab, dim)), Input("idx", (count,), "int64", False, vocab)],
                tc.ops.take, lambda e, i: e[i], lambda e, i: _jax().numpy.take(e, i, axis=0),
                lambda e, i: e[i])


def sum_squares(n: int, quick: bool = False) -> Case:
    def tcf(X):
        i = tc.reduce_axis(n, name="i")
        return tc.compute((), lambda: tc.sum(X[i] * X[i], axis=i), name="ss")

    return Case(f"sum of squares {n // (1 << 20)}M", [Input("X", (n,))], tcf,
                lambda x: (x * x).sum(), lambda x: (x * x).sum(), lambda x: np.dot(x, x),
                quick=quick)


def row_sum(rows: int, cols: int) -> Case:
    def tcf(X):
        j = tc.reduce_axis(cols, name="j")
        return tc.compute((rows,), lambda i: tc.sum(X[i, j], axis=j), name="rs")

    def rs(x):
        return x.sum(1)

    return Case(f"row sum {rows}x{cols}", [Input("X", (rows, cols))], tcf, rs, rs, rs)


# ------------------------------------------------------------------------------ latency
def softmax(n: int) -> Case:
    return Case(f"softmax {n}^2", [Input("X", (n, n))], tc.ops.softmax,
                lambda x: x.softmax(1), lambda x: _jax().nn.softmax(x, axis=1), suite="latency")


def max_pool() -> Case:
    def jaxf(x):
        jax = _jax()
        return jax.lax.reduce_window(x, -jax.numpy.inf, jax.lax.max, (1, 1, 2, 2),
                                     (1, 1, 2, 2), "VALID")

    return Case("max pool 2x2/2 1x16x32x32", [Input("X", (1, 16, 32, 32))],
                lambda X: tc.ops.max_pool2d(X, 2, 2), lambda x: _F().max_pool2d(x, 2, 2), jaxf,
                suite="latency")


def small_take() -> Case:
    c = embedding(1000, 64, 4096)
    c.suite = "latency"
    return c


def all_cases() -> list[Case]:
    latency = [conv(1, 16, 32, 32, 3, 1, 1, suite="latency"),
               conv(1, 16, 32, 32, 3, 2, 1, suite="latency"),
               conv(1, 16, 16, 32, 3, 1, 1, depthwise=True, suite="latency"),
               matmul(64, suite="latency"), softmax(256), max_pool(), small_take()]
    return [
        conv(8, 64, 64, 32, 3, 1, 1, quick=True), conv(8, 64, 128, 32, 3, 2, 1),
        conv(8, 128, 256, 16, 3, 2, 1), conv(8, 256, 128, 16, 1, 2, 0),
        conv(8, 64, 64, 32, 3, 1, 2, dilation=2),
        conv(8, 256, 64, 16, 1, 1, 0), conv(8, 256, 256, 8, 3, 1, 1),
        conv(8, 128, 128, 32, 3, 1, 1, depthwise=True), conv_transpose(8, 64, 32, 16),
        attention(4, 256, 64, quick=True), attention(8, 1024, 64),
        attention(8, 512, 64, causal=False),
        layer_norm(2048, 768, quick=True), gelu(2048, 2048, quick=True),
        gelu_erf(2048, 2048),
        dense(512, 768, 3072), dense(512, 3072, 768),
        mlp_loss(256, 784, 1024, 10, quick=True), cross_entropy(4096, 1000),
        matmul(256), matmul(512, quick=True), matmul(1024), matmul(2048), bmm(16, 256, 64, 256),
        embedding(32000, 512, 8192), sum_squares(1 << 24, quick=True), row_sum(4096, 4096),
        *latency,
    ]
