"""Real butterfly DCT-II against SciPy, a dense matmul and lazylinop (one thread, float64, float32).

For each ``n`` (a power of two) and a batch of columns, prints the median time of
``scipy.fft.dct(x, 2, norm="ortho", axis=0)``, of ``C @ x`` with the dense DCT matrix, of
``tc.ops.dct`` built with ``tc.build`` for each fusion level (``fuse=auto`` is the default,
adjacent factors in pairs, triples at the ends for ``n >= 1024``; ``fuse=1`` is the chain of
the paper, ``L`` factors; ``fuse=2, 3`` multiply up to 2 or 3 adjacent factors first) and,
when lazylinop is installed, of:

* ``lazylinop-butterfly``: ``lazylinop.butterfly.dct(n)``, lazylinop's real butterfly chain
  (the same ``L`` Kronecker-sparse factors, its default ``ksm`` backend);
* ``lazylinop-opt``: the same chain after ``lazylinop.butterfly.optimize`` (its optimiser
  fuses adjacent factors where its own timings say it pays), only with
  ``--lazylinop-optimize DIR``: the optimiser times candidate fusions on this machine (minutes
  per size) and keeps what it measured in ``DIR`` (its ``wisdom.csv``/``knowledge.csv``), so
  later runs reuse it;
* ``lazylinop-compose``: ``lazylinop.signal.dct(n, backend="lazylinop")``, Makhoul's algorithm
  composed from lazylinop operators around its FFT (an FFT-based DCT, not a butterfly).

Each ``(n, dtype)`` case runs in a process of its own (``--dtypes``, float64 and float32 by
default; lazylinop only in float64), the machine (CPU model, vector width, caches) printed
first.  Within a case the methods are timed interleaved round-robin (``--order interleaved``,
the default) so that every method sees the same machine load, the order rotated by one method
each round: a method's time depends on the one that ran just before it (the caches and heap it
leaves; tecomp's DCT at n = 1024 took 0.39 ms run back to back, 0.50 ms right after lazylinop's
FFT-based DCT and 0.56 ms right after the dense matmul, while SciPy's stayed at 0.47), so a
fixed order would favour some methods.  A sample is as many consecutive calls of one method
as last ``--sample-ms`` (20 ms by default, as ``bench_cpu.py`` times its cases): the first
call of a sample pays for what the method before it left in the caches, the others run as a
program calling the transform in a loop would.  ``--sample-ms 0`` times one call a sample
(each call right after another method's: the cold-cache figure, which the tables up to
2026-12-06 gave).  ``--order grouped`` runs each method's repeats back to back (warm
caches).  The dense product is timed on its own after the others: its matrix (128
MiB at n = 4096) flushes the caches of whatever follows it, which measured the method after it
rather than the method (in the rotation, tecomp's DCT at n = 4096 took 1.47x SciPy's time, and
1.0-1.2x out of it).  Every result is checked against SciPy in float64 before it is timed; the
table gives medians, half the interquartile range (``±``) and the ratio to SciPy's median in
the same process.

    python benchmarks/bench_butterfly.py [--sizes 256 1024 4096] [--batch 128] [--repeat 15]
        [--dtypes float64 float32] [--fuse auto 1 2 3] [--order interleaved|grouped]
        [--sample-ms 20]
        [--lazylinop-optimize DIR]

``--grad`` prints the gradient table instead: for each kind (``dct2``, ``dst2``, ``dht``),
size and dtype (``--dtypes``), in a process of its own, the gradient of ``tc.ops.dct(X, kind)``
with respect to ``X`` for a head ``G`` (the inverse transform of ``G``, as the transforms are
orthonormal) against SciPy's inverse (``idct``/``idst``; for the DHT, which is its own inverse,
``Re((1 + i)·fft(G))/√n``), timed interleaved round-robin in that process, with the static
flops of the gradient and of the forward (``tc.cost``), the build time of the gradient
(``tc.gradient`` + ``tc.build`` with an empty cache directory, after a gradient at ``n = 4``
has loaded the compiler and the passes; in brackets the forward's ``tc.build``, also cold) and
the
largest difference from SciPy's inverse::

    python benchmarks/bench_butterfly.py --grad [--sizes 16 64 256 1024 4096]
        [--dtypes float64 float32] [--repeat 15]

``--retain-heap`` re-runs the script with glibc told to keep freed memory (``GLIBC_TUNABLES``
mmap/trim thresholds).  The kernels keep their intermediate buffers between calls; every
method still allocates its output per call (1 MiB at n = 1024), which glibc returns to the
system at ``free``, so each call page-faults it afresh.  The option shows what reusing that
memory would give.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import functools  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import tecomp as tc  # noqa: E402

_HEAP = "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296"


def _lazylinop_ops(n: int, batch: int = 128, wisdom: str | None = None) -> dict:
    """lazylinop's DCT operators of size n (see the module docstring), or {} when it is not
    installed; ``lazylinop-opt`` only with a ``wisdom`` directory."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import lazylinop.butterfly as lb
            import lazylinop.signal as ls
    except Exception:  # not installed, or a missing optional dependency of it
        return {}
    ops = {"lazylinop-butterfly": lb.dct(n)}
    if wisdom is not None:
        _, B, PR = lb.dct(n, 2, output="LBPR")  # DCT-II has no left factor: C = B (P R)
        cwd = os.getcwd()
        os.makedirs(wisdom, exist_ok=True)
        os.chdir(wisdom)  # the optimiser reads and writes its timings in the working directory
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ops["lazylinop-opt"] = lb.optimize(B, {"batch_size": batch}, verbose=False) @ PR
        finally:
            os.chdir(cwd)
    ops["lazylinop-compose"] = ls.dct(n, backend="lazylinop")
    return ops


def _time(methods: dict, x: np.ndarray, repeat: int, order: str, sample_ms: float = 0.0
          ) -> dict[str, tuple[float, float]]:
    """``(median ms, half the interquartile range in ms)`` per method, interleaved round-robin
    (the order rotated by one method each round, so that every method follows every other
    equally often) or grouped per method.  Interleaved with ``sample_ms > 0``, a sample is as
    many consecutive calls as last ``sample_ms`` (``bench_cpu.py``'s ``round_robin``); with
    0, one call."""
    if order == "interleaved" and sample_ms > 0:
        try:
            from benchmarks.bench_cpu_child import round_robin
        except ImportError:  # run as a script from benchmarks/
            from bench_cpu_child import round_robin
        got = round_robin({m: functools.partial(fn, x) for m, fn in methods.items()}, repeat,
                          sample_ms / 1e3)
        return {m: (med * 1e3, spread * med / 2 * 1e3) for m, (med, spread) in got.items()}
    times: dict[str, list[float]] = {m: [] for m in methods}
    names = list(methods)
    rounds = [names[r % len(names):] + names[:r % len(names)] for r in range(repeat)] \
        if order == "interleaved" else [[m] * repeat for m in names]
    for names in rounds:
        for m in names:
            t0 = time.perf_counter()
            methods[m](x)
            times[m].append(time.perf_counter() - t0)
    out = {}
    for m, t in times.items():
        q = statistics.quantiles(t, n=4) if len(t) >= 2 else [t[0]] * 3
        out[m] = (statistics.median(t) * 1e3, (q[2] - q[0]) / 2 * 1e3)
    return out


def fwd_case(n: int, batch: int, dtype: str, repeat: int, fuses: list, order: str,
             wisdom: str | None, sample_ms: float = 0.0) -> dict:
    """One forward case (see the module docstring), measured in this process."""
    import scipy.fft as sfft

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, batch)).astype(dtype)
    ref = sfft.dct(x.astype(np.float64), 2, norm="ortho", axis=0)
    dense = sfft.dct(np.eye(n), 2, norm="ortho", axis=0).astype(dtype)
    methods = {"scipy": functools.partial(sfft.dct, type=2, norm="ortho", axis=0),
               "dense": dense.__matmul__}
    if dtype == "float64":
        for name, op in _lazylinop_ops(n, batch, wisdom).items():
            methods[name] = op.__matmul__
    X = tc.placeholder((n, batch), name="X", dtype=dtype)
    for f in fuses:
        k = tc.build(tc.ops.dct(X, fuse=f), [X])
        k.threads = 1
        methods[f"tecomp fuse={f}"] = k
    errs = {m: float(np.max(np.abs(np.asarray(fn(x), dtype=np.float64) - ref)))
            for m, fn in methods.items()}
    product = methods.pop("dense")
    tol = 1e-12 if dtype == "float64" else 1e-4
    for m, err in errs.items():
        if m.startswith("tecomp") and err > tol * max(1.0, float(np.abs(ref).max())):
            raise AssertionError(f"{m} at n = {n}, {dtype}: max error {err:.1e} against SciPy")
    med = _time(methods, x, repeat, order, sample_ms)
    med["dense"] = _time({"dense": product}, x, repeat, "grouped")["dense"]
    return {"n": n, "dtype": dtype, "med": med, "errs": errs}


def run(sizes: list[int], batch: int, repeat: int, fuses: list, order: str = "interleaved",
        wisdom: str | None = None, dtypes: tuple[str, ...] = ("float64", "float32"),
        sample_ms: float = 0.0) -> None:
    """The forward table, each ``(n, dtype)`` case in a process of its own."""
    import json

    try:  # the CPU, its vector width and caches
        from benchmarks.bench_cpu import machine
    except ImportError:  # run as a script from benchmarks/
        from bench_cpu import machine

    print(f"machine: {machine()}")
    sample = f"samples of {sample_ms:g} ms of consecutive calls" if sample_ms > 0 and \
        order == "interleaved" else "one call a sample"
    print(f"one thread, batch {batch}, medians of {repeat} {order} rounds, {sample}")
    if not _lazylinop_ops(4):
        print("lazylinop: not installed")
    print(f"{'n':>6} {'dtype':>8} {'method':>20} {'median ms':>10} {'±':>7} {'/scipy':>7} "
          f"{'max err':>9}", flush=True)
    for dtype in dtypes:
        for n in sizes:
            args = [sys.executable, os.path.abspath(__file__), "--fwd-case", str(n), dtype,
                    "--batch", str(batch), "--repeat", str(repeat), "--order", order,
                    "--sample-ms", str(sample_ms), "--fuse", *[str(f) for f in fuses]]
            if wisdom is not None:
                args += ["--lazylinop-optimize", wisdom]
            out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            med, errs = r["med"], r["errs"]
            base = med["scipy"][0]
            for m, (t, spread) in med.items():
                print(f"{n:>6} {dtype:>8} {m:>20} {t:>10.3f} {spread:>7.3f} {t / base:>7.2f} "
                      f"{errs[m]:>9.1e}")
            ours = [m for m in med if m.startswith("tecomp")]
            best = min(ours, key=lambda m: med[m][0])
            for m in dict.fromkeys(["tecomp fuse=auto", best]):
                if m not in med:
                    continue
                t = med[m][0]
                lazy = ", ".join(f"{t / v[0]:.2f}x {k}" for k, v in med.items()
                                 if k.startswith("lazy"))
                print(f"{n:>6} {dtype:>8} {m} {t:.3f} ms: {t / base:.2f}x scipy, "
                      f"{t / med['dense'][0]:.2f}x dense" + (f", {lazy}" if lazy else ""),
                      flush=True)


def _inverse(kind: str):
    """SciPy's inverse of the orthonormal transform ``kind`` along axis 0."""
    import scipy.fft as sfft

    if kind == "dct2":
        return functools.partial(sfft.idct, type=2, norm="ortho", axis=0)
    if kind == "dst2":
        return functools.partial(sfft.idst, type=2, norm="ortho", axis=0)
    return lambda g: ((1 + 1j) * sfft.fft(g, axis=0)).real / np.sqrt(g.shape[0])


def grad_case(kind: str, n: int, batch: int, dtype: str, repeat: int) -> dict:
    """One row of the gradient table (see the module docstring), measured in this process."""
    X = tc.placeholder((n, batch), name="X", dtype=dtype)
    G = tc.placeholder((n, batch), name="G", dtype=dtype)
    Y = tc.ops.dct(X, kind)
    x4 = tc.placeholder((4, 2), name="X4", dtype=dtype)  # loads the compiler and the passes
    tc.build(tc.gradient(tc.ops.dct(x4, kind), [x4]), [x4])
    t0 = time.perf_counter()
    fwd = tc.build(Y, [X])
    fwd_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    (dX,) = tc.gradient(Y, [X], head=G)
    k = tc.build([dX], [G])
    build = time.perf_counter() - t0
    fwd.threads = k.threads = 1
    g = np.random.default_rng(0).standard_normal((n, batch)).astype(dtype)
    inv = _inverse(kind)
    err = float(np.max(np.abs(k(g) - inv(g.astype(np.float64)))))
    med = {m: t for m, (t, _) in _time({"scipy": inv, "tecomp": k}, g, repeat,
                                       "interleaved").items()}
    return {"kind": kind, "n": n, "dtype": dtype, "fwd_flops": tc.cost([Y], [X]).flops,
            "grad_flops": tc.cost([dX], [G]).flops, "build_s": build, "fwd_build_s": fwd_build,
            "err": err,
            "scipy_ms": med["scipy"], "tecomp_ms": med["tecomp"]}


def run_grad(sizes: list[int], batch: int, repeat: int, dtypes: list[str]) -> None:
    """The gradient table, each case in a fresh process (its own compiler and caches)."""
    import json
    import platform

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor()) \
        if os.path.exists("/proc/cpuinfo") else platform.processor()
    print(f"CPU: {cpu}, one thread, batch {batch}, medians of {repeat}")
    print(f"{'kind':>5} {'n':>5} {'dtype':>8} {'fwd flops':>11} {'grad flops':>11} "
          f"{'ratio':>6} {'build s':>8} {'(fwd)':>6} {'scipy ms':>9} {'grad ms':>9} {'/scipy':>7} "
          f"{'max err':>8}")
    for dtype in dtypes:
        for kind in ("dct2", "dst2", "dht"):
            for n in sizes:
                args = [sys.executable, os.path.abspath(__file__), "--grad-case", kind, str(n),
                        dtype, "--batch", str(batch), "--repeat", str(repeat)]
                with tempfile.TemporaryDirectory() as empty:  # cold builds: no cache hits
                    env = dict(os.environ, TECOMP_CACHE="0", TECOMP_CACHE_DIR=empty,
                               XDG_CACHE_HOME=empty)
                    out = subprocess.run(args, capture_output=True, text=True, check=True,
                                         env=env).stdout
                r = json.loads(out.strip().splitlines()[-1])
                print(f"{kind:>5} {n:>5} {dtype:>8} {r['fwd_flops']:>11} {r['grad_flops']:>11} "
                      f"{r['grad_flops'] / r['fwd_flops']:>6.2f} {r['build_s']:>8.2f} "
                      f"{r['fwd_build_s']:>6.2f} "
                      f"{r['scipy_ms']:>9.3f} {r['tecomp_ms']:>9.3f} "
                      f"{r['tecomp_ms'] / r['scipy_ms']:>7.2f} {r['err']:>8.1e}", flush=True)


def _fuse_arg(v: str) -> int | str:
    return v if v == "auto" else int(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--fuse", type=_fuse_arg, nargs="+", default=["auto", 1, 2, 3])
    ap.add_argument("--order", choices=["interleaved", "grouped"], default="interleaved")
    ap.add_argument("--sample-ms", type=float, default=20.0,
                    help="least time of one interleaved sample (0: one call a sample)")
    ap.add_argument("--lazylinop-optimize", metavar="DIR", default=None,
                    help="also time lazylinop's optimised chain, its timings kept in DIR")
    ap.add_argument("--retain-heap", action="store_true",
                    help="re-run with glibc keeping freed memory (see the module docstring)")
    ap.add_argument("--grad", action="store_true", help="the gradient table instead")
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    ap.add_argument("--grad-case", nargs=3, metavar=("KIND", "N", "DTYPE"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--fwd-case", nargs=2, metavar=("N", "DTYPE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    wisdom = None if args.lazylinop_optimize is None else \
        os.path.abspath(args.lazylinop_optimize)
    if args.fwd_case:
        import json

        n, dtype = args.fwd_case
        print(json.dumps(fwd_case(int(n), args.batch, dtype, args.repeat, args.fuse, args.order,
                                  wisdom, args.sample_ms)))
        return
    if args.grad_case:
        import json

        kind, n, dtype = args.grad_case
        print(json.dumps(grad_case(kind, int(n), args.batch, dtype, args.repeat)))
        return
    if args.grad:
        sizes = args.sizes if "--sizes" in sys.argv else [16, 64, 256, 1024, 4096]
        run_grad(sizes, args.batch, args.repeat, args.dtypes)
        return
    if args.retain_heap and os.environ.get("GLIBC_TUNABLES") != _HEAP:
        env = dict(os.environ, GLIBC_TUNABLES=_HEAP)
        argv = [a for a in sys.argv if a != "--retain-heap"]
        print("(glibc keeps freed memory in this run)")
        sys.exit(subprocess.call([sys.executable, *argv], env=env))
    run(args.sizes, args.batch, args.repeat, args.fuse, args.order, wisdom, tuple(args.dtypes),
        args.sample_ms)


if __name__ == "__main__":
    main()
