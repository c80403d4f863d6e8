"""Residue splitting of sliding sum windows (passes/residue_split.py): convolution gradients
for strides, dilations and paddings against the evaluator (loop interpreter and LLVM), the
split visible in the loop IR, symbolic sizes, and the cases that keep the loop-order form."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import run

import tecomp as tc
from tecomp import expr as E
from tecomp.loopir import For, Store
from tecomp.passes.loop_order import coefficient
from tecomp.passes.residue_split import find_window

I64 = "int64"


def _loops(s, outer=()):
    """``(loop, enclosing loops)`` for every ``For`` in ``s``."""
    if isinstance(s, For):
        yield s, outer
        yield from _loops(s.body, outer + (s,))
    elif hasattr(s, "stmts"):
        for x in s.stmts:
            yield from _loops(x, outer)
    elif hasattr(s, "body"):
        yield from _loops(s.body, outer)
    if hasattr(s, "then"):
        yield from _loops(s.then, outer)


def _accumulating(func, buffer: str):
    """The innermost loops that accumulate into ``buffer``, with their enclosing loops."""
    return [(x, outer) for x, outer in _loops(func.body)
            if isinstance(x.body, Store) and x.body.reduce == "sum"
            and x.body.buffer.name == buffer]


def _moves_with(loop: For, outer: tuple[For, ...], stride: int) -> bool:
    """Whether a bound of ``loop`` steps by ``stride`` with an enclosing loop variable (the
    short window loop that residue splitting removes)."""
    for bound in (loop.lo, loop.hi):
        for o in outer:
            for t in _terms(bound):
                if coefficient(t, o.var) == stride:
                    return True
    return False


def _terms(e: E.Expr):
    if isinstance(e, (E.Max, E.Min)):
        yield from _terms(e.a)
        yield from _terms(e.b)
    else:
        yield e


def _conv_grads(shape, wshape, stride, pad, dil):
    X = tc.placeholder(shape, name="X")
    W = tc.placeholder(wshape, name="W")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=pad, dilation=dil)
    H = tc.placeholder(Y.shape, name="H")
    return X, W, H, tc.gradient(Y, [X, W], head=H)


CASES = [(s, d, p) for s in (1, 2, 3) for d in (1, 2, 3) for p in (0, 1, 2)]


@pytest.mark.parametrize("stride,dil,pad", CASES)
def test_convolution_gradients_match_the_evaluator(stride, dil, pad):
    rng = np.random.default_rng(100 * stride + 10 * dil + pad)
    size = (11, 10) if (stride + dil + pad) % 2 else (10, 13)   # odd and even extents
    X, W, H, grads = _conv_grads((1, 2) + size, (3, 2, 3, 3), stride, pad, dil)
    low = tc.lower(grads, [X, W, H])
    arrays = [rng.standard_normal(tuple(int(s.value) for s in t.shape)).astype(np.float32)
              for t in (X, W, H)]
    want = tc.evaluate(grads, dict(zip([X, W, H], arrays)))
    got = run(low.func, arrays, constants=low.constants)
    compiled = tc.build(grads, [X, W, H])(*arrays)
    for g, c, w in zip(got, compiled, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(c, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride,kernel,pad", [(2, 3, 0), (2, 3, 1), (2, 3, 2), (2, 4, 1),
                                               (2, 5, 2), (3, 4, 1), (3, 4, 2), (3, 5, 2)])
def test_strided_input_gradient_has_no_moving_short_loop(stride, kernel, pad):
    X, W, H, grads = _conv_grads((1, 2, 21, 20), (3, 2, kernel, kernel), stride, pad, 1)
    func = tc.lower(grads[:1], [X, W, H]).func
    name = "X_pad_grad" if pad else "X_grad"
    acc = _accumulating(func, name)
    assert acc, f"no accumulating loop into {name}"
    for loop, outer in acc:
        assert not _moves_with(loop, outer, stride), f"{loop.var.name} moves with the stride"
        last = loop.body.indices[-1]
        assert coefficient(last, loop.var) == stride   # the innermost loop walks one residue
    residues = [x for x, _ in _loops(func.body) if x.lo == E.Const(0, I64)
                and x.hi == E.Const(stride, I64)]
    assert residues, "no loop over the residues modulo the stride"


def _transposed(n: E.Expr | int, stride: int, width: int, name: str = "G"):
    """``G[j] = sum(H[k] * W[j - stride*k])`` over the ``k`` with ``0 <= j - stride*k <
    width``: a 1-D transposed convolution written as a gather with floor-division bounds."""
    H = tc.placeholder((n,), name="H")
    W = tc.placeholder((width,), name="W")

    def body(j):
        lo = E.maximum(0, (j - (width - 1) + stride - 1) // stride)
        hi = E.minimum(n - 1, j // stride) + 1
        k = tc.reduce_axis((lo, hi), name="k")
        return tc.sum(H[k] * W[j - stride * k], axis=k)

    G = tc.compute((stride * (n - 1) + width,), body, name=name)
    return H, W, G


@pytest.mark.parametrize("stride,width", [(1, 2), (2, 3), (2, 4), (3, 3), (3, 7), (4, 5)])
def test_symbolic_size_transposed_convolution(stride, width):
    n = tc.var("n")
    H, W, G = _transposed(n, stride, width)
    func = tc.lower([G], [H, W]).func
    assert any(x.var.name.endswith("_u") for x, _ in _loops(func.body))
    kernel = tc.build([G], [H, W])
    rng = np.random.default_rng(stride * 10 + width)
    for size in (1, 2, 5, 8):
        h = rng.standard_normal(size).astype(np.float32)
        w = rng.standard_normal(width).astype(np.float32)
        (want,) = tc.evaluate([G], {H: h, W: w, n: size})
        (got,) = run(func, [h, w])
        (compiled,) = kernel(h, w)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-5)


def test_float_sums_are_bit_identical_to_the_plain_order():
    """Each element receives its terms in the original order (module docstring)."""
    H, W, G = _transposed(9, 2, 3)
    rng = np.random.default_rng(3)
    h = (rng.standard_normal(9) * 1e3).astype(np.float32)
    w = rng.standard_normal(3).astype(np.float32)
    func = tc.lower([G], [H, W]).func
    (got,) = run(func, [h, w])
    want = np.zeros(19, np.float32)
    for j in range(19):
        for k in range(max(0, (j - 1) // 2), min(8, j // 2) + 1):
            want[j] = np.float32(want[j] + np.float32(h[k] * w[j - 2 * k]))
    np.testing.assert_array_equal(got, want)


def _axis(j: E.Var, lo: E.Expr, hi: E.Expr, name: str = "k") -> E.IterVar:
    return E.IterVar(E.Var(name, I64), lo, E.sub(hi, lo), "reduce")


def test_window_found_for_a_narrow_strided_window():
    j = E.Var("j", I64)
    ax = _axis(j, E.maximum(0, (j - 1) // 2), E.minimum(15, j // 2) + 1)
    win = find_window((ax,), j)
    assert win is not None and win.stride == 2 and win.index == 0


@pytest.mark.parametrize("why,lo,hi", [
    # a dilated kernel-offset window: 3 fixed offsets, wide in j -> the loop-order form
    ("wide", lambda j: E.maximum((j - 30) // 2, 0), lambda j: E.minimum(j // 2, 2) + 1),
    # different divisors on the two sides: no single residue split
    ("mixed", lambda j: E.maximum(0, (j - 1) // 2), lambda j: E.minimum(15, j // 3) + 1),
    # a window term with coefficient -1
    ("flipped", lambda j: E.maximum(0, 5 - j), lambda j: E.minimum(15, 8 - j)),
    # only one side follows j
    ("one side", lambda j: E.maximum(0, (j - 1) // 2), lambda j: E.Const(15, I64)),
])
def test_window_not_split(why, lo, hi):
    j = E.Var("j", I64)
    assert find_window((_axis(j, lo(j), hi(j)),), j) is None, why


def test_two_axes_on_the_window_are_left_alone():
    j = E.Var("j", I64)
    a = _axis(j, E.maximum(0, (j - 1) // 2), E.minimum(15, j // 2) + 1, "a")
    b = _axis(j, E.maximum(0, (j - 1) // 2), E.minimum(15, j // 2) + 1, "b")
    assert find_window((a, b), j) is None
