"""Unit loops dropped, reduction nests linearised and dead code dropped
(passes/schedule/cpu/flat_loops.py): the digits enumerate the box in the nest's order, the
weight gradient of a 1x1 convolution (data loops of one iteration, a sum over (n, y, x))
takes the register tiles and matches the evaluator, and loops of one or no iteration and
branches on constants leave the scheduled program."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.host import describe
from tecomp.loop_printer import format_func
from tecomp.loopir import Allocate, Buffer, For, IfThenElse, LoweredFunc, Seq, Store
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.flat_loops import drop_dead_code, drop_unit_loops, linear_nest
from tecomp.passes.schedule.cpu.microkernel import tile_shape
from tecomp.stmt_functor import eval_int, walk_stmt

I64 = "int64"


def _c(v: int) -> E.Const:
    return E.Const(v, I64)


def test_digits_enumerate_the_box_in_nest_order():
    a, b, c = (E.Var(n, I64) for n in "abc")
    out = Buffer("out", (_c(60),), I64, "output")
    body = Store(out, (a,), a)
    ks = [For(a, _c(2), _c(5), For(b, _c(0), _c(4), For(c, _c(-1), _c(4), body))),
          For(b, _c(0), _c(4), For(c, _c(-1), _c(4), body)), For(c, _c(-1), _c(4), body)]
    flat, digits = linear_nest(ks, {"a", "b", "c"})
    assert (flat.lo, flat.hi) == (_c(0), _c(60))
    got = [tuple(eval_int(digits[v], {flat.var: k}) for v in (a, b, c)) for k in range(60)]
    assert got == list(itertools.product(range(2, 5), range(4), range(-1, 4)))
    n = E.Var("n", I64)
    assert linear_nest([For(a, _c(0), n, body)], {"a"}) is None  # symbolic: not taken


@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_convolution_weight_gradient_takes_register_tiles(threads, monkeypatch):
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    X = tc.placeholder((3, 40, 6, 7), name="X")
    W = tc.placeholder((37, 40, 1, 1), name="W")
    Y = tc.ops.conv2d(X, W)
    H = tc.placeholder(Y.shape, name="H")
    grads = tc.gradient(Y, [X, W], head=H)
    text = str(tc.lower(grads[1], [X, W, H], target="llvm"))
    mr, nr = tile_shape(describe(), 4)
    assert f"float32[{mr}, {nr}] (local)" in text  # the tile, over the linearised (n, y, x)
    assert "_flat" in text
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (X, W, H)]
    kernel = tc.build(grads, [X, W, H])
    kernel.threads = threads
    want = tc.evaluate(grads, dict(zip([X, W, H], [a.astype(np.float64) for a in arrays])))
    for g, w in zip(kernel(*arrays), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_serial_unit_loops_go_and_parallel_ones_stay():
    X = tc.placeholder((1, 4, 5, 1), name="X")
    Y = tc.compute((1, 4, 5, 1), lambda b, c, y, x: X[b, c, y, x] * 2.0, name="Y")
    from tecomp.passes.lower import lower_program

    func, _ = lower_program([Y], [X])
    dropped = drop_unit_loops(func)
    loops = [s for s in walk_stmt(dropped.body) if isinstance(s, For)]
    assert [(s.var.name, s.kind) for s in loops] == [("b", "parallel"), ("c", "serial"),
                                                     ("y", "serial")]
    assert "Y[b, c, y, 0]" in format_func(dropped)
    kernel = tc.build(Y, [X])
    x = np.arange(20, dtype=np.float32).reshape(1, 4, 5, 1)
    np.testing.assert_array_equal(kernel(x), x * 2)
    assert schedule_cpu(func) is not None


def test_dead_code_of_constant_bounds_is_dropped():
    pc, p, q = (E.Var(n, I64) for n in ("pc", "p", "q"))
    out = Buffer("out", (_c(300),), I64, "output")
    tmp = Buffer("acc", (_c(1),), I64, "local")
    full = For(p, pc, E.minimum(E.add(pc, _c(256)), _c(256)), Store(out, (p,), p))
    edge = For(p, E.minimum(E.add(pc, _c(256)), _c(256)), _c(256), Store(out, (p,), _c(-1)))
    last = IfThenElse(E.compare(E.GE, E.add(pc, _c(256)), _c(256)),
                      Store(out, (_c(299),), _c(7)), Store(out, (_c(299),), _c(8)))
    block = For(pc, _c(0), _c(256), Seq((full, Allocate(tmp, edge), last)), step=256)
    par = For(q, _c(0), _c(1), Store(out, (E.add(q, _c(298)),), _c(5)), kind="parallel")
    func = LoweredFunc("f", (), (out,), (), Seq((block, par)))
    new = drop_dead_code(func)
    loops = [s for s in walk_stmt(new.body) if isinstance(s, For)]
    assert [(x.var, x.lo, x.hi, x.kind) for x in loops] == [
        (p, _c(0), _c(256), "serial"), (q, _c(0), _c(1), "parallel")]  # parallel loops stay
    assert not any(isinstance(s, (IfThenElse, Allocate)) for s in walk_stmt(new.body))
    stores = [s for s in walk_stmt(new.body) if isinstance(s, Store)]
    assert [s.value for s in stores][1] == _c(7)
    assert drop_dead_code(new) is new  # nothing left to drop
