"""Zero elimination: static cost of naive vs optimised gradients against hand counts.

For each case of the suite, prints the cost (``tc.cost``) of the naive reverse-mode gradient
(``optimize=False``: Kronecker deltas, dense loops), of the optimised one, and the flops a
hand-written gradient needs (for max/min: locating the argmax, one comparison per input
element; when the gradient reads forward values, plus the forward's own flops), with the
ratio optimised / hand (the seed's rule: <= 1.5).  The
last column records what TVM 0.19's ``te.gradient`` did on the same case, from the review
thread and the issue tracker (not re-measured here).

    python benchmarks/bench_zero_elimination.py [--markdown FILE]
"""

from __future__ import annotations

import argparse
import time

import tecomp as tc
from tecomp.functor import topo_order

F = "float64"


def _head(out):
    return tc.placeholder(out.shape, name="head", dtype=out.dtype)


def _case(name, out, inputs, hand_flops, tvm, extra=()):
    h = _head(out)
    ins = list(inputs) + list(extra) + [h]
    t0 = time.perf_counter()
    naive = tc.gradient(out, list(inputs), h, optimize=False)
    opt = tc.gradient(out, list(inputs), h)
    t_opt = time.perf_counter() - t0
    cn = tc.cost(naive, ins, optimize=False)
    co = tc.cost(opt, ins)
    # a hand-written gradient that reads forward values (a softmax, an argmax, a variance)
    # needs the forward computed once too: count it on both sides
    fwd_ids = {id(t) for t in topo_order([out]) if not t.is_placeholder}
    needs_fwd = any(id(t) in fwd_ids for t in topo_order(opt))
    fwd = tc.cost([out], list(inputs) + list(extra)).flops if needs_fwd else 0
    hand = hand_flops + fwd
    return dict(name=name, naive_flops=cn.flops, naive_it=cn.iterations, flops=co.flops,
                it=co.iterations, hand=hand, fwd=fwd, ratio=co.flops / hand, tvm=tvm,
                seconds=t_opt)


def cases():
    out = []
    A, B = tc.placeholder((64, 48), name="A", dtype=F), tc.placeholder((48, 32), name="B", dtype=F)
    k = tc.reduce_axis(48, name="k")
    C = tc.compute((64, 32), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    out.append(_case("matmul 64x48x32", C, [A, B], 4 * 64 * 48 * 32, "46-85 ms at 256^3"))
    for s, d in ((1, 1), (2, 1), (1, 2), (2, 2), (3, 3)):
        X = tc.placeholder((1, 4, 16, 16), name="X", dtype=F)
        W = tc.placeholder((8, 4, 3, 3), name="W", dtype=F)
        Y = tc.ops.conv2d(X, W, stride=s, padding=1, dilation=d)
        macs = 8 * 4 * 9 * int(Y.shape[2].value) * int(Y.shape[3].value)
        out.append(_case(f"conv2d s{s} d{d} p1", Y, [X, W], 4 * macs,
                         "over-iterates all taps with a guard" if s > 1 or d > 1 else "ok"))
    X = tc.placeholder((1, 8, 16, 16), name="X", dtype=F)
    Wd = tc.placeholder((8, 1, 3, 3), name="Wd", dtype=F)
    Y = tc.ops.conv2d(X, Wd, padding=1, groups=8)
    out.append(_case("depthwise 8x3x3", Y, [X, Wd], 4 * 8 * 9 * 256, "-"))
    out.append(_case("max_pool 2x2", tc.ops.max_pool2d(X, 2), [X], 8 * 256,
                     "per-Jacobian-index recomputation"))
    out.append(_case("avg_pool 2x2", tc.ops.avg_pool2d(X, 2), [X], 8 * 256, "-"))
    S = tc.placeholder((32, 128), name="S", dtype=F)
    out.append(_case("softmax 32x128", tc.ops.softmax(S), [S], 5 * 32 * 128,
                     "O(n*m^2): 4.4 s at 1000^2"))
    out.append(_case("layer_norm 32x128", tc.ops.layer_norm(S), [S], 10 * 32 * 128, "-"))
    mk = tc.reduce_axis(128, name="k")
    M = tc.compute((32,), lambda i: tc.max(S[i, mk], axis=mk), name="M")
    out.append(_case("reduce max 32x128", M, [S], 32 * 128, "3.1-4.2 s at 1024^2"))
    E_ = tc.placeholder((1000, 64), name="E", dtype=F)
    idx = tc.placeholder((4096,), name="idx", dtype="int64")
    out.append(_case("take 1000x64, 4096 idx", tc.ops.take(E_, idx), [E_], 4096 * 64,
                     "dense mask: 0.6-0.96 s", extra=[idx]))
    Ar = tc.placeholder((12,), name="Ar", dtype=F)
    Br = tc.compute((10, 3), lambda i, j: Ar[i + j], name="Br")
    out.append(_case("shifted read A[i+j]", Br, [Ar], 30, "identity tensor 10x3x17x3"))
    pat = (4, 2, 2, 8)
    T = tc.placeholder(pat, name="T", dtype=F)
    Xk = tc.placeholder((4 * 2 * 8, 16), name="Xk", dtype=F)
    Yk = tc.ops.kron_sparse_matmul(T, Xk, pat)
    out.append(_case("kron_sparse (4,2,2,8) b16", Yk, [T, Xk], 2 * 2 * 4 * 2 * 2 * 8 * 16, "-"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markdown", help="also write the table to this file")
    args = p.parse_args(argv)
    rows = cases()
    head = ("| case | naive flops | naive iterations | optimised flops | optimised iterations "
            "| hand flops (of which forward) | opt/hand | optimise s | TVM 0.19 |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['name']} | {r['naive_flops']:.3g} | {r['naive_it']:.3g} | "
                     f"{r['flops']} | {r['it']} | {r['hand']} ({r['fwd']}) | {r['ratio']:.2f} | "
                     f"{r['seconds']:.3f} | {r['tvm']} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Zero elimination: naive vs optimised gradient cost\n\n")
            f.write("`python benchmarks/bench_zero_elimination.py` (float64, general head).\n\n")
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
