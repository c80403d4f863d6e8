"""The ``tecomp`` command line: ``tecomp demo [NAME]`` runs a built-in example end to end."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import tecomp as tc


def _median_time(f, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))
    return np.einsum("nchwrs,kcrs->nkhw", cols, w, optimize=True)


def demo_conv2d(args: argparse.Namespace) -> int:
    print("== tecomp demo: conv2d NCHW 1x16x32x32 * 32x16x3x3, padding 1 ==\n")
    X = tc.placeholder((1, 16, 32, 32), name="X")
    W = tc.placeholder((32, 16, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1, name="Y")
    print("-- tensor expression --")
    print(tc.show(Y))
    lowered = tc.lower([Y], [X, W])
    print("\n-- loop IR --")
    print(lowered)
    cost = tc.cost([Y], [X, W])
    print(f"\n-- static cost -- flops={cost.flops} iterations={cost.iterations} "
          f"bytes={cost.bytes}")
    t0 = time.perf_counter()
    kernel = tc.build([Y], [X, W])
    print(f"\ncompiled in {time.perf_counter() - t0:.2f} s")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    y = kernel(x, w)
    ref = tc.evaluate(Y, {X: x, W: w})[0]
    npy = _conv_ref(x, w)
    err_eval = float(np.abs(y - ref).max())
    err_np = float(np.abs(y - npy).max())
    print(f"max |JIT - evaluator| = {err_eval:.2e}; max |JIT - NumPy| = {err_np:.2e}")
    t_jit = _median_time(lambda: kernel(x, w))
    t_np = _median_time(lambda: _conv_ref(x, w))
    print(f"time: tecomp {t_jit * 1e3:.3f} ms, NumPy (einsum) {t_np * 1e3:.3f} ms "
          f"(ratio {t_jit / t_np:.2f})")
    ok = err_eval < 1e-3 and err_np < 1e-3
    if hasattr(tc, "gradient"):
        ok = _demo_gradient(X, W, Y, x, w) and ok
    print("\nOK" if ok else "\nMISMATCH")
    return 0 if ok else 1


def _demo_gradient(X, W, Y, x, w) -> bool:
    print("\n== gradient of sum(Y) with respect to X and W ==")
    naive = tc.gradient(Y, [X, W], optimize=False)
    opt = tc.optimize(naive)
    print("-- naive gradient (reverse mode, with Kronecker deltas) --")
    print(tc.show(naive[0]))
    print("\n-- after zero elimination --")
    print(tc.show(opt[0]))
    for label, ts, flag in (("naive", naive, False), ("optimised", opt, True)):
        c = tc.cost(ts, [X, W], optimize=flag)
        print(f"cost {label:9s}: flops={c.flops} iterations={c.iterations}")
    kernel = tc.build(opt, [X, W])
    dx, dw = kernel(x, w)
    rx, rw = tc.evaluate(opt, {X: x, W: w})
    err = max(float(np.abs(dx - rx).max()), float(np.abs(dw - rw).max()) / 100)
    print(f"max |JIT - evaluator| on the gradient = {err:.2e}")
    return err < 1e-2


DEMOS = {"conv2d": demo_conv2d}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tecomp", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    d = sub.add_parser("demo", help="run a built-in example end to end")
    d.add_argument("name", nargs="?", default="conv2d", choices=sorted(DEMOS))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "demo":
        try:
            return DEMOS[args.name](args)
        except tc.TecompError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
