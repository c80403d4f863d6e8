"""Strided, dilated and transposed convolutions and their gradients keep every innermost loop
at least a vector long, unless the image axis it walks is that short (#19).

After the phase split (stride phases as stages of their own), the CPU schedule's innermost
loops are register tiles (lane loops: vectors), reductions and row copies along an image
axis.  The failure this guards against is what the issue measured before: innermost loops of
2-3 iterations over kernel taps, with strided access.  A loop shorter than the host's float32
vector passes only when it walks an image axis (an extent above the kernel's) that is itself
that short, give or take the kernel's halo (the columns a window clips at the image edge
run in a stage or a loop of their own).  A loop that only stores a constant (the zero border
of a padded copy, :mod:`tecomp.passes.schedule.cpu.borders`, as wide as the padding) computes
nothing and is not counted.
"""

from __future__ import annotations

import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.host import describe
from tecomp.loopir import BufferLoad, For, LetStmt, Store
from tecomp.pipeline import scheduled
from tecomp.stmt_functor import expr_vars, stmt_exprs, walk_expr, walk_stmt

CASES = {  # name: batch, channels, filters, image, kernel, stride, padding, dilation, transposed
    "conv3x3/2": (8, 64, 128, 32, 3, 2, 1, 1, False),
    "conv1x1/2": (8, 256, 128, 16, 1, 2, 0, 1, False),
    "conv3x3 d2": (8, 64, 64, 32, 3, 1, 2, 2, False),
    "conv3x3/2 d2": (8, 32, 64, 33, 3, 2, 2, 2, False),
    "conv_transpose4x4/2": (8, 64, 32, 16, 4, 2, 1, 1, True),
}


def _programs(name: str):
    n, c, k, hw, r, s, p, d, transposed = CASES[name]
    X = tc.placeholder((n, c, hw, hw), name="X")
    if transposed:
        W = tc.placeholder((c, k, r, r), name="W")
        Y = tc.ops.conv_transpose2d(X, W, stride=s, padding=p)
    else:
        W = tc.placeholder((k, c, r, r), name="W")
        Y = tc.ops.conv2d(X, W, stride=s, padding=p, dilation=d)
    H = tc.placeholder(Y.shape, name="H")
    gX, gW = tc.gradient(Y, [X, W], H)
    return r, {"forward": ([Y], [X, W]), "input gradient": ([gX], [X, W, H]),
               "weight gradient": ([gW], [X, W, H])}


def _walked_extents(loop: For) -> list[int]:
    """The extents of the buffer axes the loop's variable indexes (directly or through the
    ``let`` variables bound from it)."""
    moving = {loop.var}
    out: list[int] = []

    def visit(ix_list, buf) -> None:
        for axis, ix in enumerate(ix_list):
            if expr_vars(ix) & moving and isinstance(buf.shape[axis], E.Const):
                out.append(int(buf.shape[axis].value))

    for st in walk_stmt(loop.body):
        if isinstance(st, LetStmt) and expr_vars(st.value) & moving:
            moving.add(st.var)
    for st in walk_stmt(loop.body):
        if isinstance(st, Store):
            visit(st.indices, st.buffer)
        for e in stmt_exprs(st):
            for x in walk_expr(e):
                if isinstance(x, BufferLoad):
                    visit(x.indices, x.buffer)
    return out


def _short_loops(func, lanes: int, kernel: int) -> list[str]:
    bad = []
    for s in walk_stmt(func.body):
        if not isinstance(s, For) or s.kind == "lanes":
            continue
        if any(isinstance(x, For) for x in walk_stmt(s.body)):
            continue  # not innermost
        if isinstance(s.body, Store) and isinstance(s.body.value, E.Const):
            continue  # a border of a padded copy: stores of a constant
        if not (isinstance(s.lo, E.Const) and isinstance(s.hi, E.Const)):
            continue  # a symbolic or blocked extent: not a short constant loop
        trips = max(0, (int(s.hi.value) - int(s.lo.value) + s.step - 1) // s.step)
        if trips >= lanes:
            continue
        image_axes = [e for e in _walked_extents(s) if e > kernel]
        if not image_axes or trips + kernel - 1 < min(image_axes):
            bad.append(f"{s.var.name}: {trips} trips over axes {_walked_extents(s)}")
    return bad


@pytest.mark.parametrize("name", sorted(CASES))
def test_innermost_loops_are_a_vector_long_unless_the_image_axis_is_shorter(name):
    lanes = describe().lanes(4)
    kernel, programs = _programs(name)
    for part, (outs, ins) in programs.items():
        func = scheduled(tc.lower(outs, ins).func, "llvm", check_bounds=False)
        assert not _short_loops(func, lanes, kernel), (name, part, _short_loops(func, lanes,
                                                                               kernel))


def test_the_check_finds_a_loop_over_kernel_taps():
    """The rule rejects what #19 measured before the phase split: the taps innermost."""
    x, w, y = E.Var("x"), E.Var("kx"), E.Var("y")
    from tecomp.loopir import Buffer

    img = Buffer("X", (E.Const(8, "int64"), E.Const(32, "int64")), "float32", "input")
    ker = Buffer("W", (E.Const(3, "int64"),), "float32", "input")
    out = Buffer("Y", (E.Const(8, "int64"), E.Const(32, "int64")), "float32", "output")
    zero = E.Const(0, "int64")
    taps = For(w, zero, E.Const(3, "int64"), Store(out, (y, x), BufferLoad(
        img, (y, x + w), "float32") * BufferLoad(ker, (w,), "float32"), reduce="sum"))
    nest = For(y, zero, E.Const(8, "int64"), For(x, zero, E.Const(30, "int64"), taps))

    class F:
        body = nest

    found = _short_loops(F, 16, 3)
    assert len(found) == 1 and found[0].startswith("kx: 3 trips"), found
