"""The built-in examples of ``tecomp demo NAME``: each declares a program, shows what tecomp
makes of it (tensor expressions, zero elimination's effect on the cost, loop IR), compiles
it, checks the kernel against the reference evaluator or NumPy, and times it.

Each demo returns True when every check passed.  ``small=True`` (``tecomp demo --small``)
uses sizes that run in a few seconds, for tests.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Callable, Iterator

import numpy as np

import tecomp as tc
from tecomp.logs import progress


@contextlib.contextmanager
def step(label: str) -> Iterator[None]:
    """Print ``label ...`` before a step that may be slow and its duration after it; a step
    that runs longer than about 2 s also lists its phases as they end (tecomp.logs)."""
    print(f"... {label}", end="", flush=True)
    t0 = time.perf_counter()
    with progress(sys.stdout, after=2.0):
        yield
    print(f" ({time.perf_counter() - t0:.2f} s)", flush=True)


def median_time(f: Callable[[], Any], repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _title(text: str) -> None:
    print(f"\n== {text} ==")


def _err(a: Any, b: Any) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _naive_vs_optimised(naive: list, inputs: list, sizes: dict | None = None) -> list:
    """Print the naive gradient's and the optimised one's cost; return the optimised one."""
    with step("zero elimination"):
        opt = tc.optimize(naive)
    for label, ts, flag in (("naive", naive, False), ("optimised", opt, True)):
        c = tc.cost(ts, inputs, sizes=sizes, optimize=flag)
        print(f"cost {label:9s}: flops={c.flops} iterations={c.iterations}")
    return opt


def _check(label: str, err: float, tol: float) -> bool:
    ok = err < tol
    print(f"{label}: max error {err:.2e} ({'ok' if ok else 'MISMATCH'})")
    return ok


# ------------------------------------------------------------------------------ conv2d
def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwrs,kcrs->nkhw", cols, w, optimize=True)


def demo_conv2d(small: bool) -> bool:
    c, k, hw = (4, 8, 8) if small else (16, 32, 32)
    _title(f"conv2d NCHW 1x{c}x{hw}x{hw} * {k}x{c}x3x3, padding 1")
    X = tc.placeholder((1, c, hw, hw), name="X")
    W = tc.placeholder((k, c, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1, name="Y")
    print("-- tensor expression --\n" + tc.show(Y))
    print("\n-- loop IR --\n" + str(tc.lower([Y], [X, W])))
    print(f"\n-- static cost -- {tc.cost([Y], [X, W])}")
    with step("compiling"):
        kernel = tc.build([Y], [X, W])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    y = kernel(x, w)
    ok = _check("JIT vs evaluator", _err(y, tc.evaluate(Y, {X: x, W: w})[0]), 1e-3)
    ok = _check("JIT vs NumPy", _err(y, _conv_ref(x, w)), 1e-3) and ok
    t_jit, t_np = median_time(lambda: kernel(x, w)), median_time(lambda: _conv_ref(x, w))
    print(f"time: tecomp {t_jit * 1e3:.3f} ms, NumPy (einsum) {t_np * 1e3:.3f} ms "
          f"(ratio {t_jit / t_np:.2f})")
    _title("gradient of sum(Y) with respect to X and W")
    with step("reverse mode"):
        naive = tc.gradient(Y, [X, W], optimize=False)
    print("-- naive gradient (Kronecker deltas) --\n" + tc.show(naive[0]))
    opt = _naive_vs_optimised(naive, [X, W])
    print("-- after zero elimination --\n" + tc.show(opt[0]))
    with step("compiling the gradient"):
        gk = tc.build(opt, [X, W])
    dx, dw = gk(x, w)
    rx, rw = tc.evaluate(opt, {X: x, W: w})
    return _check("gradient JIT vs evaluator", max(_err(dx, rx), _err(dw, rw) / 100), 1e-2) \
        and ok


# ------------------------------------------------------------------------------ softmax
def demo_softmax(small: bool) -> bool:
    rows, cols = (16, 10) if small else (4096, 128)
    _title(f"softmax over the last axis of ({rows}, {cols}) and its gradient")
    n = tc.var("n")
    X = tc.placeholder((n, cols), name="X", dtype="float64")
    H = tc.placeholder((n, cols), name="H", dtype="float64")
    S = tc.ops.softmax(X)
    print(tc.show(S))
    with step("reverse mode"):
        naive = tc.gradient(S, [X], head=H, optimize=False)
    opt = _naive_vs_optimised(naive, [X, H], sizes={n: rows})
    with step("compiling forward and gradient"):
        kernel = tc.build([S, *opt], [X, H])
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal((rows, cols)), rng.standard_normal((rows, cols))
    s, dx = kernel(x, h)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    ref_dx = ref * (h - (h * ref).sum(axis=1, keepdims=True))
    ok = _check("softmax vs NumPy", _err(s, ref), 1e-10)
    ok = _check("gradient vs hand-written NumPy", _err(dx, ref_dx), 1e-10) and ok

    def numpy_step():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        return p, p * (h - (h * p).sum(axis=1, keepdims=True))

    t_jit, t_np = median_time(lambda: kernel(x, h)), median_time(numpy_step)
    print(f"time forward+gradient: tecomp {t_jit * 1e3:.3f} ms, NumPy {t_np * 1e3:.3f} ms "
          f"(ratio {t_jit / t_np:.2f})")
    return ok


# ------------------------------------------------------------------------------ take
def demo_take(small: bool) -> bool:
    vocab, dim, count = (50, 8, 20) if small else (20000, 64, 4096)
    _title(f"embedding lookup take(E[{vocab}, {dim}], idx[{count}]) and its gradient")
    n = tc.var("n")
    E = tc.placeholder((vocab, dim), name="E")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    H = tc.placeholder((n, dim), name="H")
    T = tc.ops.take(E, idx)
    with step("reverse mode"):
        naive = tc.gradient(T, [E], head=H, optimize=False)
    print("-- naive gradient: a dense mask over every (row, lookup) pair --\n"
          + tc.show(naive[0]).splitlines()[-1])
    opt = _naive_vs_optimised(naive, [E, idx, H], sizes={n: count})
    print("-- after zero elimination: a scatter-add, O(lookups) --\n"
          + tc.show(opt[0]).splitlines()[-1])
    with step("compiling"):
        kernel = tc.build(opt, [E, idx, H])
    rng = np.random.default_rng(0)
    e = rng.standard_normal((vocab, dim)).astype(np.float32)
    ix = rng.integers(0, vocab, count)
    h = rng.standard_normal((count, dim)).astype(np.float32)
    de = kernel(e, ix, h)
    ref = np.zeros_like(e)
    np.add.at(ref, ix, h)
    ok = _check("gradient vs np.add.at", _err(de, ref), 1e-4)

    def numpy_grad():
        r = np.zeros_like(e)
        np.add.at(r, ix, h)
        return r

    t_jit, t_np = median_time(lambda: kernel(e, ix, h)), median_time(numpy_grad)
    print(f"time: tecomp {t_jit * 1e3:.3f} ms, NumPy np.add.at {t_np * 1e3:.3f} ms "
          f"(ratio {t_jit / t_np:.2f})")
    return ok


# ------------------------------------------------------------------------------ mlp
def mlp_loss(X: tc.Tensor, W1: tc.Tensor, W2: tc.Tensor, Y: tc.Tensor) -> tc.Tensor:
    """Mean squared error of the two-layer tanh MLP ``tanh(X W1ᵀ) W2ᵀ`` against ``Y``."""
    n = X.shape[0]
    z1 = tc.ops.dense(X, W1, name="z1")
    hidden = tc.compute((n, W1.shape[0]), lambda i, j: tc.tanh(z1[i, j]), name="h1")
    out = tc.ops.dense(hidden, W2, name="out")
    r, c = tc.reduce_axis(n, "r"), tc.reduce_axis(W2.shape[0], "c")
    diff = out[r, c] - Y[r, c]
    return tc.compute((), lambda: tc.sum(diff * diff, axis=[r, c]) / tc.cast(n, X.dtype),
                      name="loss")


def demo_mlp(small: bool) -> bool:
    batch, nin, nh, nout = (8, 6, 5, 3) if small else (512, 256, 256, 10)
    _title(f"two-layer tanh MLP {nin}-{nh}-{nout}, batch {batch}: loss and weight gradients")
    n = tc.var("n")
    X = tc.placeholder((n, nin), name="X", dtype="float64")
    Y = tc.placeholder((n, nout), name="Y", dtype="float64")
    W1 = tc.placeholder((nh, nin), name="W1", dtype="float64")
    W2 = tc.placeholder((nout, nh), name="W2", dtype="float64")
    loss = mlp_loss(X, W1, W2, Y)
    with step("reverse mode"):
        naive = tc.gradient(loss, [W1, W2], optimize=False)
    opt = _naive_vs_optimised(naive, [X, Y, W1, W2], sizes={n: batch})
    with step("compiling loss and gradients"):
        kernel = tc.build([loss, *opt], [X, Y, W1, W2])
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((batch, nin)), rng.standard_normal((batch, nout))
    w1, w2 = rng.standard_normal((nh, nin)) / nin ** 0.5, rng.standard_normal((nout, nh)) / nh

    def numpy_step():
        h = np.tanh(x @ w1.T)
        d = 2 * (h @ w2.T - y) / batch
        dh = (d @ w2) * (1 - h * h)
        return float((batch * d * d / 4).sum()), dh.T @ x, d.T @ h

    value, d1, d2 = kernel(x, y, w1, w2)
    ref_value, ref1, ref2 = numpy_step()
    ok = _check("loss vs NumPy", abs(float(value) - ref_value), 1e-8 * max(1, ref_value))
    ok = _check("gradients vs hand-written backprop", max(_err(d1, ref1), _err(d2, ref2)),
                1e-8) and ok
    t_jit, t_np = median_time(lambda: kernel(x, y, w1, w2)), median_time(numpy_step)
    print(f"time loss+gradients: tecomp {t_jit * 1e3:.3f} ms, NumPy {t_np * 1e3:.3f} ms "
          f"(ratio {t_jit / t_np:.2f})")
    return ok


# ------------------------------------------------------------------------------ butterfly
def demo_butterfly(small: bool) -> bool:
    size, batch = (16, 4) if small else (1024, 256)
    _title(f"DCT-II of size {size} as a product of real Kronecker-sparse factors, batch {batch}")
    X = tc.placeholder((size, batch), name="X", dtype="float64")
    with step("declaring the butterfly chain"):
        D = tc.ops.dct(X, kind="dct2")
    c = tc.cost([D], [X])
    dense = size * size * batch
    print(f"cost: flops={c.flops} (a dense matrix product: {2 * dense} flops)")
    with step("compiling"):
        kernel = tc.build(D, [X])
    x = np.random.default_rng(0).standard_normal((size, batch))
    y = kernel(x)
    try:
        from scipy.fft import dct
    except ModuleNotFoundError:
        ref = tc.evaluate(D, {X: x})[0]
        return _check("DCT vs evaluator (scipy not installed)", _err(y, ref), 1e-9)
    ref = dct(x, type=2, norm="ortho", axis=0)
    ok = _check("DCT vs scipy.fft.dct", _err(y, ref), 1e-9)
    t_jit = median_time(lambda: kernel(x))
    t_sp = median_time(lambda: dct(x, type=2, norm="ortho", axis=0))
    print(f"time: tecomp {t_jit * 1e3:.3f} ms, scipy.fft {t_sp * 1e3:.3f} ms "
          f"(ratio {t_jit / t_sp:.2f})")
    return ok


# ------------------------------------------------------------------------------ laplacian
def demo_laplacian(small: bool) -> bool:
    batch, dim, width = (4, 3, 8) if small else (256, 16, 64)
    _title(f"Laplacian of a tanh MLP {dim}-{width}-{width}-1 over a batch of {batch} points")
    X = tc.placeholder((batch, dim), name="X", dtype="float64")
    Ws = [tc.placeholder((width, dim), name="W0", dtype="float64"),
          tc.placeholder((width, width), name="W1", dtype="float64")]
    w = tc.placeholder((width,), name="w", dtype="float64")
    h = X
    for n, W in enumerate(Ws):
        z = tc.ops.dense(h, W, name=f"z{n}")
        h = tc.compute((batch, W.shape[0]), lambda b, j, z=z: tc.tanh(z[b, j]), name=f"h{n}")
    k = tc.reduce_axis(width, "k")
    u = tc.compute((batch,), lambda b: tc.sum(w[k] * h[b, k], axis=k), name="u")
    with step("forward-propagating the operator (DOF)"):
        lap = tc.laplacian(u, X, method="dof")
    with step("the Hessian baseline"):
        lap_h = tc.laplacian(u, X, method="hessian")
    ins = [X, *Ws, w]
    c_dof, c_h = tc.cost([lap], ins), tc.cost([lap_h], ins)
    print(f"cost dof: flops={c_dof.flops}; hessian: flops={c_h.flops} "
          f"(ratio {c_h.flops / c_dof.flops:.2f})")
    with step("compiling both"):
        k_dof, k_h = tc.build(lap, ins), tc.build(lap_h, ins)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((batch, dim)), rng.standard_normal((width, dim)) / dim ** 0.5,
            rng.standard_normal((width, width)) / width ** 0.5, rng.standard_normal(width)]
    a, b = k_dof(*args), k_h(*args)
    ok = _check("dof vs hessian method", _err(a, b), 1e-8)
    t_dof, t_h = median_time(lambda: k_dof(*args)), median_time(lambda: k_h(*args))
    print(f"time: dof {t_dof * 1e3:.3f} ms, hessian {t_h * 1e3:.3f} ms "
          f"(speed-up {t_h / t_dof:.2f})")
    return ok


DEMOS: dict[str, Callable[[bool], bool]] = {
    "conv2d": demo_conv2d, "softmax": demo_softmax, "take": demo_take, "mlp": demo_mlp,
    "butterfly": demo_butterfly, "laplacian": demo_laplacian,
}


def run_demo(name: str, small: bool = False) -> int:
    """Run one demo (or ``all``); 0 when every check passed."""
    names = list(DEMOS) if name == "all" else [name]
    ok = True
    for n in names:
        print(f"== tecomp demo: {n} ==", flush=True)
        ok = DEMOS[n](small) and ok
        sys.stdout.flush()
    print("\nOK" if ok else "\nMISMATCH")
    return 0 if ok else 1
