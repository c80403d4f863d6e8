"""GPU check and benchmark of the CUDA backend (``tc.build(..., target="cuda")``).

For every program of a suite of forward and gradient programs (matmul with a symbolic size,
conv2d NCHW with padding/stride/dilation, pooling, softmax, layer norm, gather, flatten via
``//`` and ``%``, cumsum via ``where``, a scalar loss, float16 and int32 outputs, the butterfly
DCT-II of ``tc.ops.dct`` in float32 and in float16, and the gradients of most of them) it

1. builds the CUDA kernel and checks its results against ``tc.evaluate`` (the reference
   evaluator) on random inputs;
2. times the kernel on device-resident inputs (``DeviceArray``, no host copies) and, when
   PyTorch with CUDA is installed, the same computation in PyTorch (forward, or
   ``torch.autograd.grad`` for gradients);

then prints one table (column ``sched``: one letter per kernel, ``T`` shared-memory tiles,
``B`` a block per output, ``P`` per-block combined accumulators and atomics, ``S`` serial,
``g`` a thread per element).  It exits with 1 on any mismatch, and with 2 (after printing why)
when no CUDA device can be used; needs only ``pip install -e .[cuda]`` (PyTorch optional).

    python benchmarks/gpu.py              # the whole suite
    python benchmarks/gpu.py --only conv  # cases whose name contains "conv"
    python benchmarks/gpu.py --repeat 50 --json results.json

The DCT (n = 1024, batch 4096) is timed against PyTorch's FFT-based DCT in float32 (Makhoul's
reordering, ``torch.fft.fft``, twiddles) and a dense float16 DCT matrix product in float16 (cuBLAS);
the float16 DCT stores every stage in float16 and sums in float32.

Float atomics (gather gradients, scalar losses) make sums order-nondeterministic, hence the
relative tolerances.  Timings are medians of ``--repeat`` runs after warm-up, in
milliseconds, measured with a device synchronisation around each run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import tecomp as tc


@dataclass
class Case:
    """One program: ``outputs`` computed from ``inputs``; ``args(rng)`` gives NumPy data in
    the order of ``inputs``; ``torch(T, *args)`` computes the same with PyTorch tensors."""

    name: str
    kind: str
    outputs: list[tc.Tensor]
    inputs: list[Any]
    args: Callable[[np.random.Generator], list[Any]]
    torch: Callable[..., Any] | None = None
    rtol: float = 1e-4
    atol: float = 1e-4
    grad_of: list[int] = field(default_factory=list)  # torch: which args need gradients
    head: bool = False  # a gradient whose last input is the head (the output's adjoint)


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def suite(small: bool = False) -> list[Case]:
    """The programs; ``small`` shrinks every size (for the CPU emulation in the tests)."""
    s = (lambda big, little: little) if small else (lambda big, little: big)
    cases: list[Case] = []

    # ---- matmul with a symbolic row count, and its gradient (head G)
    n = tc.var("n")
    K, M, N = s(512, 12), s(256, 10), s(2048, 9)
    A = tc.placeholder((n, K), name="A")
    B = tc.placeholder((K, M), name="B")
    k = tc.reduce_axis(K, name="k")
    C = tc.compute((n, M), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    G = tc.placeholder((n, M), name="G")
    cases.append(Case("matmul", "forward", [C], [A, B],
                      lambda r: [_f32(r, N, K), _f32(r, K, M)],
                      lambda T, a, b: T.matmul(a, b), rtol=1e-4, atol=1e-3))
    cases.append(Case("matmul_grad", "gradient", tc.gradient(C, [A, B], head=G), [A, B, G],
                      lambda r: [_f32(r, N, K), _f32(r, K, M), _f32(r, N, M)],
                      lambda T, a, b: T.matmul(a, b), head=True, grad_of=[0, 1], atol=1e-3))

    # ---- conv2d NCHW, padding 1; and stride 2, padding 2, dilation 2
    for name, (xs, ws, kw) in {
        "conv2d": ((s(8, 2), s(16, 3), s(32, 7), s(32, 6)), (s(32, 4), s(16, 3), 3, 3),
                   {"padding": 1}),
        "conv2d_s2d2": ((s(4, 2), s(8, 2), s(33, 9), s(33, 8)), (s(16, 3), s(8, 2), 3, 3),
                        {"stride": 2, "padding": 2, "dilation": 2}),
    }.items():
        X = tc.placeholder(xs, name="X")
        W = tc.placeholder(ws, name="W")
        Y = tc.ops.conv2d(X, W, **kw)
        H = tc.placeholder(tuple(int(d.value) for d in Y.shape), name="H")

        def tconv(T, x, w, kw=kw):
            return T.nn.functional.conv2d(x, w, **kw)

        cases.append(Case(name, "forward", [Y], [X, W],
                          lambda r, xs=xs, ws=ws: [_f32(r, *xs), _f32(r, *ws)], tconv,
                          atol=1e-3))
        cases.append(Case(f"{name}_grad", "gradient", tc.gradient(Y, [X, W], head=H),
                          [X, W, H], lambda r, xs=xs, ws=ws, hs=H.shape: [
                              _f32(r, *xs), _f32(r, *ws), _f32(r, *(int(d.value) for d in hs))],
                          tconv, head=True, grad_of=[0, 1], atol=1e-3))

    # ---- pooling
    X = tc.placeholder((s(8, 2), s(16, 2), s(32, 8), s(32, 6)), name="X")
    P = tc.ops.max_pool2d(X, 2)
    cases.append(Case("max_pool2d", "forward", [P], [X], lambda r, sh=X.shape: [
        _f32(r, *(int(d.value) for d in sh))],
        lambda T, x: T.nn.functional.max_pool2d(x, 2)))
    Q = tc.ops.avg_pool2d(X, 3, stride=2, padding=1)
    HQ = tc.placeholder(tuple(int(d.value) for d in Q.shape), name="HQ")
    cases.append(Case("avg_pool2d_grad", "gradient", tc.gradient(Q, [X], head=HQ), [X, HQ],
                      lambda r, a=X.shape, b=HQ.shape: [_f32(r, *(int(d.value) for d in a)),
                                                        _f32(r, *(int(d.value) for d in b))],
                      lambda T, x: T.nn.functional.avg_pool2d(x, 3, 2, 1,
                                                              count_include_pad=True),
                      head=True, grad_of=[0]))

    # ---- softmax and layer norm over the last axis
    R, D = s(1024, 5), s(512, 7)
    X = tc.placeholder((R, D), name="X")
    SM = tc.ops.softmax(X)
    HS = tc.placeholder((R, D), name="HS")
    cases.append(Case("softmax", "forward", [SM], [X], lambda r: [_f32(r, R, D)],
                      lambda T, x: T.softmax(x, -1), rtol=1e-4, atol=1e-6))
    cases.append(Case("softmax_grad", "gradient", tc.gradient(SM, [X], head=HS), [X, HS],
                      lambda r: [_f32(r, R, D), _f32(r, R, D)], lambda T, x: T.softmax(x, -1),
                      head=True, grad_of=[0], atol=1e-5))
    gam = tc.placeholder((D,), name="gamma")
    bet = tc.placeholder((D,), name="beta")
    LN = tc.ops.layer_norm(X, gam, bet)
    cases.append(Case("layer_norm", "forward", [LN], [X, gam, bet],
                      lambda r: [_f32(r, R, D), _f32(r, D), _f32(r, D)],
                      lambda T, x, g, b: T.nn.functional.layer_norm(x, (D,), g, b)))
    cases.append(Case("layer_norm_grad", "gradient",
                      tc.gradient(LN, [X, gam, bet], head=HS), [X, gam, bet, HS],
                      lambda r: [_f32(r, R, D), _f32(r, D), _f32(r, D), _f32(r, R, D)],
                      lambda T, x, g, b: T.nn.functional.layer_norm(x, (D,), g, b),
                      head=True, grad_of=[0, 1, 2], atol=1e-3))

    # ---- gather (take) and its scatter-add gradient (atomics)
    V, E, L = s(1000, 13), s(64, 3), s(4096, 29)
    EM = tc.placeholder((V, E), name="EM")
    IX = tc.placeholder((L,), name="IX", dtype="int64")
    TK = tc.ops.take(EM, IX)
    HT = tc.placeholder((L, E), name="HT")
    cases.append(Case("gather", "forward", [TK], [EM, IX],
                      lambda r: [_f32(r, V, E), r.integers(0, V, L)],
                      lambda T, e, ix: T.index_select(e, 0, ix)))
    cases.append(Case("gather_grad", "gradient", tc.gradient(TK, [EM], head=HT), [EM, IX, HT],
                      lambda r: [_f32(r, V, E), r.integers(0, V, L), _f32(r, L, E)],
                      lambda T, e, ix: T.index_select(e, 0, ix), head=True, grad_of=[0], atol=1e-4))

    # ---- flatten through // and %
    R2, C2 = s(256, 5), s(128, 6)
    XF = tc.placeholder((R2, C2), name="XF")
    FL = tc.compute((R2 * C2,), lambda i: XF[i // C2, i % C2] * 2.0, name="flat")
    HF = tc.placeholder((R2 * C2,), name="HF")
    cases.append(Case("flatten", "forward", [FL], [XF], lambda r: [_f32(r, R2, C2)],
                      lambda T, x: x.reshape(-1) * 2.0))
    cases.append(Case("flatten_grad", "gradient", tc.gradient(FL, [XF], head=HF), [XF, HF],
                      lambda r: [_f32(r, R2, C2), _f32(r, R2 * C2)],
                      lambda T, x: x.reshape(-1) * 2.0, head=True, grad_of=[0]))

    # ---- cumsum through a where= reduction
    LC = s(4096, 23)
    XC = tc.placeholder((LC,), name="XC")
    kc = tc.reduce_axis(LC, name="kc")
    CS = tc.compute((LC,), lambda i: tc.sum(XC[kc], axis=kc, where=kc <= i), name="cumsum")
    HC = tc.placeholder((LC,), name="HC")
    cases.append(Case("cumsum", "forward", [CS], [XC], lambda r: [_f32(r, LC)],
                      lambda T, x: T.cumsum(x, 0), atol=1e-3))
    cases.append(Case("cumsum_grad", "gradient", tc.gradient(CS, [XC], head=HC), [XC, HC],
                      lambda r: [_f32(r, LC), _f32(r, LC)], lambda T, x: T.cumsum(x, 0),
                      head=True, grad_of=[0], atol=1e-3))

    # ---- a scalar loss (sum of squares) and its gradient
    RS, CS2 = s(1024, 7), s(1024, 9)
    XS = tc.placeholder((RS, CS2), name="XS")
    ra, rb = tc.reduce_axis(RS, name="ra"), tc.reduce_axis(CS2, name="rb")
    LOSS = tc.compute((), lambda: tc.sum(XS[ra, rb] * XS[ra, rb], axis=[ra, rb]), name="loss")
    cases.append(Case("scalar_loss", "forward", [LOSS], [XS], lambda r: [_f32(r, RS, CS2)],
                      lambda T, x: (x * x).sum(), rtol=1e-4, atol=1e-2))
    cases.append(Case("scalar_loss_grad", "gradient", tc.gradient(LOSS, [XS]), [XS],
                      lambda r: [_f32(r, RS, CS2)], lambda T, x: (x * x).sum(), grad_of=[0]))

    # ---- float16 and int32 outputs
    RH, CH = s(4096, 6), s(256, 10)
    XH = tc.placeholder((RH, CH), name="XH", dtype="float16")
    WH = tc.placeholder((CH,), name="WH", dtype="float16")
    YH = tc.compute((RH, CH), lambda i, j: XH[i, j] * WH[j] + 1.0, name="half_affine")
    cases.append(Case("float16", "forward", [YH], [XH, WH],
                      lambda r: [_f32(r, RH, CH).astype(np.float16),
                                 _f32(r, CH).astype(np.float16)],
                      lambda T, x, w: x * w + 1.0, rtol=2e-3, atol=2e-3))
    XI = tc.placeholder((RH, CH), name="XI")
    ki = tc.reduce_axis(CH, name="ki")
    CNT = tc.compute((RH,), lambda i: tc.sum(tc.cast(XI[i, ki] > 0, "int32"), axis=ki),
                     name="count_pos")
    cases.append(Case("int32_count", "forward", [CNT], [XI], lambda r: [_f32(r, RH, CH)],
                      lambda T, x: (x > 0).sum(1, dtype=T.int32), rtol=0, atol=0))

    # ---- the butterfly DCT-II (tc.ops.dct) in float32, and in float16 (float32 sums)
    ND, BD = s(1024, 16), s(4096, 3)
    for dtype, torch_dct in (("float32", _torch_dct_fft), ("float16", _torch_dct_dense)):
        XD = tc.placeholder((ND, BD), name="XD", dtype=dtype)
        tol = 1e-2 if dtype == "float16" else 1e-4
        cases.append(Case(f"dct_{dtype}", "forward", [tc.ops.dct(XD, "dct2")], [XD],
                          lambda r, dt=dtype: [_f32(r, ND, BD).astype(dt)], torch_dct,
                          rtol=tol, atol=tol))
    return cases


_TORCH_DCT: dict[Any, Any] = {}  # (what, n, dtype, device) -> tensor, made once


def _dct_scales(n: int) -> np.ndarray:
    return np.where(np.arange(n) == 0, math.sqrt(1.0 / n), math.sqrt(2.0 / n))


def _torch_dct_fft(T: Any, x: Any) -> Any:
    """Orthonormal DCT-II along axis 0 with Makhoul's reordering and one complex FFT:
    ``y_k = s_k Re(e^{-i pi k / 2n} FFT(v)_k)``, ``v`` the even samples then the odd reversed."""
    n = x.shape[0]
    key = ("twiddle", n, x.dtype, x.device)
    if key not in _TORCH_DCT:
        k = np.arange(n)
        w = np.exp(-1j * np.pi * k / (2 * n)) * _dct_scales(n)
        _TORCH_DCT[key] = T.as_tensor(w[:, None].astype(np.complex64), device=x.device)
    v = T.cat([x[0::2], x[1::2].flip(0)])
    return (T.fft.fft(v, dim=0) * _TORCH_DCT[key]).real.to(x.dtype)


def _torch_dct_dense(T: Any, x: Any) -> Any:
    """Orthonormal DCT-II along axis 0 as one dense matrix product in ``x``'s dtype."""
    n = x.shape[0]
    key = ("matrix", n, x.dtype, x.device)
    if key not in _TORCH_DCT:
        k, j = np.arange(n)[:, None], np.arange(n)[None, :]
        C = _dct_scales(n)[:, None] * np.cos(np.pi * k * (2 * j + 1) / (2 * n))
        _TORCH_DCT[key] = T.as_tensor(C, device=x.device).to(x.dtype)
    return _TORCH_DCT[key] @ x


# ------------------------------------------------------------------------------ running
def check(case: Case, kernel: Any, args: list[Any], got: Any) -> float:
    """The largest error relative to the tolerance (<= 1 passes) against tc.evaluate."""
    binds = {p: a for p, a in zip(case.inputs, args)}
    want = tc.evaluate(case.outputs, binds)
    got = got if isinstance(got, tuple) else (got,)
    worst = 0.0
    for g, w in zip(got, want):
        g = np.asarray(g.get() if hasattr(g, "get") else g)
        if g.shape != w.shape or g.dtype != w.dtype:
            return float("inf")
        err = np.abs(g.astype(np.float64) - w.astype(np.float64))
        scale = float(np.abs(w.astype(np.float64)).max()) if w.size else 0.0
        bound = case.atol + case.rtol * max(scale, 1.0)
        top = float(err.max()) if err.size else 0.0
        if not np.isfinite(top):
            return float("inf")
        worst = max(worst, top / bound if bound else (0.0 if top == 0 else float("inf")))
    return worst


def schedules(kernel: Any) -> str:
    """One letter per kernel: T shared-memory tiles, B a block per output (shuffle reduction),
    P per-block combined accumulators + atomics, S serial, g thread per element."""
    out = ""
    for st in kernel.program.stages:
        out += ("T" if st.tiling else "B" if st.block_reduce else "P" if st.private
                else "S" if st.serial else "g")
    return out


def _median_ms(fn: Callable[[], Any], sync: Callable[[], Any], repeat: int) -> float:
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def time_tecomp(kernel: Any, args: list[Any], repeat: int) -> float:
    from tecomp.codegen.cuda.runtime import DeviceArray, cuda_device

    dev = cuda_device()
    dargs = []
    for a in args:
        if isinstance(a, np.ndarray):
            d = DeviceArray(dev, a.shape, a.dtype)
            dev.copy_in(d.ptr, a)
            dargs.append(d)
        else:
            dargs.append(a)
    outs = kernel(*dargs)  # device outputs, reused through out=
    return _median_ms(lambda: kernel(*dargs, out=outs), dev.synchronize, repeat)


def time_torch(case: Case, args: list[Any], repeat: int) -> float | None:
    if case.torch is None:
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    nfwd = len(args) - (1 if case.head else 0)
    ts = [torch.as_tensor(a, device="cuda") for a in args]
    fwd = ts[:nfwd]
    if case.kind == "forward":
        with torch.no_grad():
            return _median_ms(lambda: case.torch(torch, *fwd), torch.cuda.synchronize, repeat)
    for q in case.grad_of:
        fwd[q].requires_grad_(True)
    y = case.torch(torch, *fwd)
    head = ts[-1].reshape(y.shape) if case.head else torch.ones_like(y)
    wrt = [fwd[q] for q in case.grad_of]
    return _median_ms(lambda: torch.autograd.grad(y, wrt, head, retain_graph=True),
                      torch.cuda.synchronize, repeat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="substrings of case names")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", default=None, help="also write the results here")
    opts = ap.parse_args(argv)
    cases = [c for c in suite() if not opts.only or any(o in c.name for o in opts.only)]
    print(f"building {len(cases)} CUDA programs ...", flush=True)
    built = []
    for case in cases:
        t0 = time.perf_counter()
        kernel = tc.build(case.outputs, case.inputs, target="cuda", name=case.name)
        built.append((case, kernel, time.perf_counter() - t0))
    print(f"built; compile check: {built[0][1].compile_check if built else '-'}", flush=True)
    from tecomp.codegen.cuda.runtime import device_status

    status = device_status()
    if not status.startswith("ok"):
        print(status)
        print("nothing was run: this check needs an NVIDIA GPU with its driver")
        return 2
    print(f"device: {status[4:]}\n", flush=True)
    rng = np.random.default_rng(0)
    rows = []
    failed = 0
    head = f"{'case':20s} {'kind':9s} {'sched':>9s} {'err/tol':>8s} {'ok':>4s} " \
           f"{'tecomp ms':>10s} {'torch ms':>9s} {'ratio':>6s} {'build s':>7s}"
    print(head)
    print("-" * len(head))
    for case, kernel, build_s in built:
        args = case.args(rng)
        try:
            got = kernel(*args)
            err = check(case, kernel, args, got)
            ms = time_tecomp(kernel, args, opts.repeat)
            tms = time_torch(case, args, opts.repeat)
        except Exception as exc:  # report and go on with the other cases
            err, ms, tms = float("inf"), float("nan"), None
            print(f"{case.name}: {type(exc).__name__}: {exc}")
        ok = err <= 1.0
        failed += not ok
        ratio = f"{ms / tms:6.2f}" if tms else "     -"
        tstr = f"{tms:9.3f}" if tms else "        -"
        print(f"{case.name:20s} {case.kind:9s} {schedules(kernel):>9s} {err:8.3f} "
              f"{'yes' if ok else 'NO':>4s} {ms:10.3f} {tstr} {ratio} {build_s:7.2f}",
              flush=True)
        rows.append({"case": case.name, "kind": case.kind, "err_over_tol": err, "ok": ok,
                     "tecomp_ms": ms, "torch_ms": tms, "kernels": len(kernel.kernel_names),
                     "schedules": schedules(kernel), "build_s": build_s})
    ratios = [r["tecomp_ms"] / r["torch_ms"] for r in rows if r["torch_ms"] and r["ok"]]
    if ratios:
        print(f"\ngeometric mean tecomp/torch time: {float(np.exp(np.mean(np.log(ratios)))):.2f}"
              f" over {len(ratios)} case(s)")
    print(f"{len(rows) - failed} passed, {failed} failed")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"device": status, "rows": rows}, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
