"""Real butterfly DCT with tecomp: audio frames, float16, and learning a butterfly.

1. The orthonormal DCT-II of a batch of audio frames (n = 1024 samples, 128 frames) with
   ``tc.ops.dct``: a chain of real Kronecker-sparse factors (seed "On the Real Part of
   Butterfly Factorizations"), checked against SciPy and timed (one thread) against SciPy,
   a dense matmul and lazylinop when it is installed.
2. The same DCT with float16 storage, and with float16 input/output around a float32
   computation: the error against float64.  Real factors are what make this possible.
3. Learning: a chain with the DCT's architecture (patterns of ``real_butterfly``) starts from
   random factors and is fitted to the DCT by gradient descent (Adam) on
   ``sum((chain(x) - dct(x))^2)``, the gradients with respect to all factors coming from
   ``tc.gradient``.  The loss is printed as it falls.

    python examples/butterfly_dct.py
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread for SciPy and NumPy's BLAS as well

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import scipy.fft as sfft  # noqa: E402

import tecomp as tc  # noqa: E402
from tecomp.ops.butterfly_factors import real_butterfly  # noqa: E402


def median_ms(fn, x, repeat: int = 15) -> float:
    fn(x)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def audio_frames(n: int, frames: int, rng: np.random.Generator) -> np.ndarray:
    """A chirp plus noise, cut into ``frames`` columns of ``n`` samples."""
    t = np.arange(n * frames) / 16000.0
    signal = np.sin(2 * np.pi * (200 + 900 * t) * t) + 0.1 * rng.standard_normal(t.size)
    return signal.reshape(frames, n).T.copy()


def program() -> tuple[list[tc.Tensor], list[tc.Tensor]]:
    """The DCT-II of 8 frames of 64 samples, for ``tecomp show|lower examples/butterfly_dct.py``."""
    X = tc.placeholder((64, 8), name="frames", dtype="float64")
    return [tc.ops.dct(X)], [X]


def part1(x: np.ndarray) -> None:
    n, batch = x.shape
    X = tc.placeholder((n, batch), name="frames", dtype="float64")
    kernel = tc.build(tc.ops.dct(X), [X])  # fuse="auto": adjacent factors fused
    kernel.threads = 1
    ref = sfft.dct(x, 2, norm="ortho", axis=0)
    print(f"[1] DCT-II of {batch} frames of {n} samples: max |tecomp - scipy| = "
          f"{np.max(np.abs(kernel(x) - ref)):.1e}")
    dense = sfft.dct(np.eye(n), 2, norm="ortho", axis=0)
    rows = {"tecomp": kernel,
            "scipy.fft.dct": lambda v: sfft.dct(v, 2, norm="ortho", axis=0),
            "dense matmul": dense.__matmul__}
    try:
        import lazylinop.butterfly as lb
        import lazylinop.signal as ls

        rows["lazylinop butterfly"] = lb.dct(n).__matmul__
        rows["lazylinop dct"] = ls.dct(n, backend="lazylinop").__matmul__
    except Exception:
        print("    lazylinop: not installed")
    times = {name: median_ms(fn, x) for name, fn in rows.items()}
    for name, ms in times.items():
        print(f"    {name:>20}: {ms:8.3f} ms (median, one thread), "
              f"{ms / times['scipy.fft.dct']:5.2f}x scipy")


def part2(x: np.ndarray) -> None:
    n, batch = x.shape
    ref = sfft.dct(x, 2, norm="ortho", axis=0)
    scale = np.max(np.abs(ref))
    X16 = tc.placeholder((n, batch), name="x16", dtype="float16")
    y16 = tc.build(tc.ops.dct(X16, fuse=2), [X16])(x.astype(np.float16))
    X32 = tc.compute((n, batch), lambda i, j: tc.cast(X16[i, j], "float32"), name="x32")
    Y32 = tc.ops.dct(X32, fuse=2)
    Yh = tc.compute((n, batch), lambda i, j: tc.cast(Y32[i, j], "float16"), name="y16")
    y_mixed = tc.build(Yh, [X16])(x.astype(np.float16))
    rounding = np.max(np.abs(ref.astype(np.float16).astype(np.float64) - ref)) / scale
    for name, y in (("float16 storage and arithmetic", y16),
                    ("float16 in/out, float32 inside", y_mixed)):
        err = np.max(np.abs(y.astype(np.float64) - ref)) / scale
        print(f"[2] {name}: max error / max|y| = {err:.1e} (float16 rounding of the exact "
              f"result alone: {rounding:.1e})")


def part3(rng: np.random.Generator, n: int = 16, batch: int = 64, steps: int = 400) -> None:
    perm, patterns, target_factors, _ = real_butterfly(n, "dct2")
    Ts = [tc.placeholder(p, name=f"T{i + 1}", dtype="float64") for i, p in enumerate(patterns)]
    X = tc.placeholder((n, batch), name="X", dtype="float64")
    Yref = tc.placeholder((n, batch), name="Yref", dtype="float64")
    P = tc.constant(perm, name="perm")
    Y = tc.ops.butterfly_chain(X, patterns, Ts, name="learned", perm=P)
    i, j = tc.reduce_axis(n, name="i"), tc.reduce_axis(batch, name="j")
    loss = tc.compute((), lambda: tc.sum((Y[i, j] - Yref[i, j]) ** 2, axis=[i, j]) / batch,
                      name="loss")
    grads = tc.gradient(loss, Ts)
    step = tc.build([loss, *grads], [X, Yref, *Ts])
    step.threads = 1
    factors = [rng.standard_normal(p) / np.sqrt(p[2]) for p in patterns]
    m = [np.zeros_like(f) for f in factors]
    v = [np.zeros_like(f) for f in factors]
    lr, b1, b2 = 0.02, 0.9, 0.999
    print(f"[3] learning a {n}-point butterfly with patterns {patterns} from a random start")
    for it in range(1, steps + 1):
        x = rng.standard_normal((n, batch))
        value, *g = step(x, sfft.dct(x, 2, norm="ortho", axis=0), *factors)
        for f, gi, mi, vi in zip(factors, g, m, v):
            mi *= b1
            mi += (1 - b1) * gi
            vi *= b2
            vi += (1 - b2) * gi * gi
            f -= lr * (mi / (1 - b1**it)) / (np.sqrt(vi / (1 - b2**it)) + 1e-12)
        if it % 50 == 0 or it == 1:
            print(f"    step {it:4d}: loss {float(value):.3e}")
        if it == steps // 2:
            lr /= 4
    x = rng.standard_normal((n, 8))
    chain = x[perm]
    for T in reversed(factors):
        a, b, c, d = T.shape
        chain = np.einsum("ijkl,ikln->ijln", T, chain.reshape(a, c, d, -1)).reshape(a * b * d, -1)
    err = np.max(np.abs(chain - sfft.dct(x, 2, norm="ortho", axis=0)))
    print(f"    learned chain vs DCT on fresh data: max error {err:.1e} "
          f"({sum(t.size for t in target_factors)} parameters)")


def main() -> None:
    rng = np.random.default_rng(0)
    x = audio_frames(1024, 128, rng)
    part1(x)
    part2(x)
    part3(rng)


if __name__ == "__main__":
    main()
