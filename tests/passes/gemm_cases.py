"""Programs and probes shared by the contraction-schedule tests (test_schedule_gemm.py,
test_schedule_panels.py): a dense layer with an epilogue, a strided convolution's weight
gradient, the stores into packed panels, and a scheduled function compiled as it is."""

from __future__ import annotations

import tecomp as tc
from tecomp.loopir import For, IfThenElse, Seq
from tecomp.pipeline import lower as pipeline_lower


def compiled(func):
    from tecomp.codegen.kernel import Kernel
    from tecomp.codegen.llvm import compile_function

    return Kernel(func, compile_function(func, disk=None), target="llvm")


def dense_case(n, k, m, dtype, epilogue):
    x = tc.placeholder((n, k), name="x", dtype=dtype)
    W = tc.placeholder((m, k), name="W", dtype=dtype)
    b = tc.placeholder((m,), name="b", dtype=dtype)
    r = tc.reduce_axis(k, name="r")
    if epilogue == "bias":
        out = tc.ops.dense(x, W, b, name="h")
    elif epilogue == "select":
        out = tc.compute((n, m), lambda i, j: tc.if_then_else(
            tc.sum(x[i, r] * W[j, r], axis=r) > b[j], b[j], -1.0), name="h")
    elif epilogue == "scaled bias, clamp":
        out = tc.compute((n, m), lambda i, j: tc.maximum(
            tc.sum(x[i, r] * W[j, r], axis=r) * 0.5 + b[j], 0.0), name="h")
    else:  # exp: not a vector lane form, so the plain-order schedule keeps it
        out = tc.compute((n, m), lambda i, j: tc.exp(tc.sum(x[i, r] * W[j, r], axis=r) * 0.1),
                         name="h")
    return [out], [x, W, b]


def strided_weight_gradient():
    """The weight gradient of a stride-2 3x3 convolution: ``dW_rows[o, p] = sum_k head[..o..k]
    * X_pad[..p..k]``, 24 rows, 144 columns ``p = (c, ky, kx)``, 2*16*16 terms ``k = (n, y,
    x)``, its panel gathered from the (phase-split) image."""
    X = tc.placeholder((2, 16, 32, 32), name="X")
    W = tc.placeholder((24, 16, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=2, padding=1)
    H = tc.placeholder(tuple(Y.shape), name="head")
    outs, ins = [tc.gradient(Y, [W], head=H)[0]], [X, W, H]
    func, consts = pipeline_lower(outs, ins, target_name="llvm")  # implicit-GEMM rows
    assert not consts
    return outs, ins, func


def panel_loops(func):
    """``(top, path, store)`` for each store into a packed panel: the top-level parallel loop
    around it and the loops from there to the store, innermost last."""
    from tecomp.loopir import Store

    found = []

    def walk(s, path, top):
        if isinstance(s, For):
            if top is None and s.kind == "parallel":
                walk(s.body, [], s)
            else:
                walk(s.body, path + [s], top)
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, path, top)
        elif isinstance(s, Store):
            if top is not None and s.buffer.name.endswith("_panel"):
                found.append((top, path, s))
        elif isinstance(s, IfThenElse):
            walk(s.then, path, top)
            if s.else_ is not None:
                walk(s.else_, path, top)
        elif hasattr(s, "body"):
            walk(s.body, path, top)

    walk(func.body, [], None)
    return found
