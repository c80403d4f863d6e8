"""Packed panels of the register tiles (passes/schedule/cpu/microkernel.py): a flattened
image copied by image rows, a panel gathered along the reduction copied with it innermost, a
transposed operand copied by blocks of rows; each against the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_order import lower_program
from gemm_cases import compiled, dense_case, panel_loops, strided_weight_gradient
from loop_interp import random_inputs

import tecomp as tc
from tecomp.host import Host, describe
from tecomp.loopir import For
from tecomp.passes.schedule.cpu import microkernel, schedule_cpu


@pytest.mark.parametrize("hw, r, pad, stride, c", [(20, 1, 0, 1, 24), (33, 3, 1, 1, 24),
                                                   (18, 3, 0, 1, 24), (16, 3, 1, 2, 256)])
def test_implicit_gemm_panels_are_copied_by_image_rows(hw, r, pad, stride, c, monkeypatch):
    """A convolution's implicit GEMM packs columns ``p`` of the flattened image: the copy
    loops run along image rows (``X[.., jy + ry, jx - jy * w + rx]``, unit stride, or
    ``2 (jx - jy * w) + rx`` at stride 2), with no ``p // w`` or ``p % w`` per element, also
    where rows (20, 33, 16 and 8 wide) and strips of ``nr`` columns cross each other;
    results match the evaluator.  (A window over rows a multiple of the vector wide is read
    in place instead: switched off here; the strided case has channels enough that its
    columns are gathered by the panels, not staged.)"""
    from tecomp import expr as E
    from tecomp.codegen import kernel as kernel_mod
    from tecomp.loopir import Store
    from tecomp.stmt_functor import walk_expr, walk_stmt

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(microkernel, "IN_PLACE", False)
    X = tc.placeholder((2, c, hw, hw), name="X")
    K = tc.placeholder((20, c, r, r), name="K")
    Y = tc.ops.conv2d(X, K, padding=pad, stride=stride)
    func = tc.lower(Y, [X, K], target="llvm").func
    copies = [s for s in walk_stmt(func.body) if isinstance(s, For)
              and not any(isinstance(x, For) for x in walk_stmt(s.body))
              and any(isinstance(x, Store) and x.buffer.name.endswith("_panel")
                      for x in walk_stmt(s.body))]
    assert copies
    if int(Y.shape[-1]) >= 16:  # whole strips: vector copies
        assert any(loop.kind == "lanes" for loop in copies)
    for loop in copies:
        for store in [x for x in walk_stmt(loop.body) if isinstance(x, Store)]:
            divides = [e for idx in store.value.indices + store.indices for e in walk_expr(idx)
                       if isinstance(e, (E.FloorDiv, E.Mod)) and loop.var in set(walk_expr(e))]
            assert not divides, str(loop)
    rng = np.random.default_rng(hw + r)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (X, K)]
    (want,) = tc.evaluate([Y], dict(zip([X, K], arrays)))
    kernel = tc.build(Y, [X, K])
    for threads in (1, 2):
        kernel.threads = threads
        np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-4, atol=1e-4)


def test_panels_gathered_along_the_reduction_are_copied_with_it_innermost():
    """The strided weight gradient's panel reads ``X_pad_s2[k // 256, p // 9, .., k % 16
    + ..]``: unit stride along the reduction ``k``, none along the column ``p``, so each column
    is copied with ``k`` innermost (the loads walk memory; the column's part of the address
    is loop-invariant) instead of gathering a strip of columns per ``k``."""
    from tecomp.stmt_functor import walk_expr

    outs, ins, func = strided_weight_gradient()
    found = panel_loops(schedule_cpu(func, host=describe()))
    assert found
    for _, path, store in found:  # panel[strip, k - kc, column]
        inner = path[-1].var
        assert inner in set(walk_expr(store.indices[1])), str(path[-1])
        assert inner in set(walk_expr(store.value.indices[-1]))


@pytest.mark.parametrize("l1d", [32768, 49152])
def test_transposed_panels_are_copied_by_blocks_of_rows_with_the_reduction_innermost(
        l1d, monkeypatch):
    """``x @ W.T`` reads ``W[j, r]``: unit stride along the reduction, a row apart along the
    column, so each strip is copied by blocks of rows (a quarter of L1, from the host), each
    column's part of a block with ``r`` innermost, and the kernel still matches."""
    from tecomp.codegen import kernel as kernel_mod
    from tecomp.stmt_functor import walk_expr

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    host = Host(vector_bits=512, fma=True, cores=2, l1d=l1d, l2=1 << 20, l3=1 << 25)
    outs, ins = dense_case(45, 700, 70, "float32", "bias")
    func, _ = lower_program(outs, ins)
    scheduled = schedule_cpu(func, host=host)
    found = panel_loops(scheduled)
    assert found
    nr = microkernel.tile_shape(host, 4)[1]
    for _, path, store in found:  # panel[strip, k - kc, column] = W[column, k]
        inner, column, rows = path[-1], path[-2], path[-3]
        assert inner.var in set(walk_expr(store.indices[1]))
        assert store.value.indices[-1] == inner.var, str(store)
        assert column.var in set(walk_expr(store.indices[2]))
        assert rows.step == microkernel.transpose_block(host, nr, 4) == l1d // (4 * nr * 4)
    rng = np.random.default_rng(7)
    arrays = random_inputs(ins, rng)
    (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
    kernel = compiled(scheduled)
    for threads in (1, 2):
        kernel.threads = threads
        np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-4, atol=1e-4)
