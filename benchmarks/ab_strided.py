"""A/B of the CPU schedule's unit-stride rewrite (:mod:`tecomp.passes.schedule.cpu.strided`):
the same strided, dilated and transposed convolutions (forward and gradient) built with it
(``schedule_cpu(strided=True)``) and without, timed round-robin in one process with
PyTorch's ``F.conv2d`` / ``F.conv_transpose2d`` (and autograd) where PyTorch is installed.

    python -m benchmarks.ab_strided [--reps 9] [--threads 1] [--case NAME]

Every tecomp result is checked against PyTorch in float64 (or, without PyTorch, the two
builds against each other) before timing.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tecomp as tc  # noqa: E402
from benchmarks.bench_cpu_child import rel_error, round_robin  # noqa: E402
from tecomp.codegen.llvm import build_kernel  # noqa: E402
from tecomp.codegen.target import Schedule  # noqa: E402
from tecomp.lowering_api import lower  # noqa: E402
from tecomp.passes.schedule.cpu import schedule_cpu  # noqa: E402


def cases():
    """(name, x shape, w shape, tecomp op, torch op name, keyword arguments)."""
    yield "conv3x3/2 8x64x32x32->128", (8, 64, 32, 32), (128, 64, 3, 3), "conv2d", \
        dict(stride=2, padding=1)
    yield "conv1x1/2 8x64x32x32->128", (8, 64, 32, 32), (128, 64, 1, 1), "conv2d", \
        dict(stride=2, padding=0)
    yield "conv3x3 d2 8x64x32x32->64", (8, 64, 32, 32), (64, 64, 3, 3), "conv2d", \
        dict(padding=2, dilation=2)
    yield "conv3x3/2 d2 8x32x33x33->64", (8, 32, 33, 33), (64, 32, 3, 3), "conv2d", \
        dict(stride=2, padding=2, dilation=2)
    yield "conv_transpose4x4/2 8x64x16x16->32", (8, 64, 16, 16), (64, 32, 4, 4), \
        "conv_transpose2d", dict(stride=2, padding=1)


def build(outs, ins, strided: bool, threads: int):
    low = lower(outs, ins)
    sched = Schedule(functools.partial(schedule_cpu, strided=strided), f"ab-strided-{strided}")
    kern = build_kernel(low.func, inputs=ins, outputs=outs, hidden=low.constants,
                        schedule=sched)
    kern.threads = threads
    return kern


def _torch_grad(torch, tfn, tx, tw, th, kw):
    a, b = tx.requires_grad_(), tw.requires_grad_()
    return torch.autograd.grad(tfn(a, b, **kw), [a, b], th)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sample-ms", type=float, default=30.0)
    ap.add_argument("--case", default=None, help="run only cases whose name holds this")
    args = ap.parse_args(argv)
    try:
        import torch
        import torch.nn.functional as F
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    print(f"{args.threads} thread(s); ms a call (median, ±IQR/2 %); new/old and new/torch")
    print("| case | old ms | new ms | torch ms | new/old | new/torch |")
    print("|---|---|---|---|---|---|")
    for name, xs, ws, op, kw in cases():
        if args.case and args.case not in name:
            continue
        X, W = tc.placeholder(xs, name="X"), tc.placeholder(ws, name="W")
        Y = getattr(tc.ops, op)(X, W, **kw)
        H = tc.placeholder(tuple(int(d) for d in Y.shape), name="H")
        x, w = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws))
        h = rng.standard_normal(tuple(int(d) for d in Y.shape)).astype(np.float32)
        for kind, outs, ins, arrays in (("fwd", [Y], [X, W], [x, w]),
                                        ("grad", tc.gradient(Y, [X, W], head=H), [X, W, H],
                                         [x, w, h])):
            fns: dict[str, Any] = {}
            results = {}
            for strided in (False, True):
                kern = build(outs, ins, strided, args.threads)
                results[strided] = kern(*arrays)
                fns["new" if strided else "old"] = functools.partial(kern, *arrays)
            if torch is not None:
                tfn = getattr(F, op)
                tx, tw = (torch.from_numpy(a) for a in (x, w))
                if kind == "fwd":
                    want = tfn(tx.double(), tw.double(), **kw).numpy()
                    fns["torch"] = functools.partial(tfn, tx, tw, **kw)
                else:
                    xd, wd = (t.double().requires_grad_() for t in (tx, tw))
                    want = torch.autograd.grad(tfn(xd, wd, **kw), [xd, wd],
                                               torch.from_numpy(h).double())
                    want = tuple(t.numpy() for t in want)

                    fns["torch"] = functools.partial(_torch_grad, torch, tfn, tx, tw,
                                                     torch.from_numpy(h), kw)
                for strided, got in results.items():
                    err = rel_error(got, want)
                    assert err < 1e-4, f"{name} {kind} strided={strided}: error {err:.1e}"
            else:
                assert rel_error(results[True], results[False]) < 1e-5
            times = round_robin(fns, args.reps, args.sample_ms / 1e3)
            t = {k: v[0] * 1e3 for k, v in times.items()}
            cell = {k: f"{t[k]:.3g} ±{times[k][1] * 50:.0f}%" for k in t}
            ratio_t = f"{t['new'] / t['torch']:.2f}" if "torch" in t else "—"
            print(f"| {name} {kind} | {cell['old']} | {cell['new']} | "
                  f"{cell.get('torch', '—')} | {t['new'] / t['old']:.2f} | {ratio_t} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
