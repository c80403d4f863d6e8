"""Cache blocking of "i, k, j" sums (passes/schedule/cpu/gemm.py): block sizes from the host's
caches, the blocked structure, bit-identical results in the loop-IR interpreter, and compiled
kernels (odd and symbolic sizes, gradients) against the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_order import lower_program
from gemm_cases import compiled, dense_case, panel_loops, strided_weight_gradient
from loop_interp import random_inputs, run

import tecomp as tc
from tecomp.host import Host, describe
from tecomp.loopir import For, IfThenElse, Seq
from tecomp.passes.schedule.cpu import schedule_cpu
from tecomp.passes.schedule.cpu.gemm import block_caches, block_sizes

#: a host with tiny caches, so that small programs are blocked in every dimension
TINY = Host(vector_bits=256, fma=True, cores=2, l1d=512, l2=1024, l3=8192)


def _matmul(n, k, m, dtype="float32"):
    """``([C], [A, B])`` of ``C = A @ B``."""
    A = tc.placeholder((n, k), name="A", dtype=dtype)
    B = tc.placeholder((k, m), name="B", dtype=dtype)
    r = tc.reduce_axis(k, name="r")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [C], [A, B]


def _loops(s):
    if isinstance(s, For):
        yield s
        yield from _loops(s.body)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from _loops(x)
    elif hasattr(s, "body"):
        yield from _loops(s.body)


def test_block_sizes_follow_the_cache_formulas():
    host = describe()
    for itemsize in (4, 8):
        lanes = host.vector_bits // (8 * itemsize)
        mc, kc, nc = block_sizes(host, itemsize, 4, 4)
        assert nc % lanes == 0 and 8 * nc * itemsize <= max(host.l1d, 8 * lanes * itemsize)
        assert kc % 4 == 0 and kc * nc * itemsize <= max(host.l2 // 2, 4 * nc * itemsize)
        assert mc % 4 == 0 and 4 <= mc <= 512
    assert block_sizes(TINY, 4, 4, 4) == (32, 16, 8)  # 8192 / 256; 1024 / 64; 512 / 64
    mc, _, _ = block_sizes(TINY, 4, 4, 4, cores=2, m=40)
    assert mc == 20  # 2 blocks of rows (a multiple of the 2 cores), 20 rows each


def test_matmul_is_blocked_in_every_dimension():
    func, _ = lower_program(*_matmul(21, 45, 23))
    out = block_caches(func, TINY, pack=False).body
    assert isinstance(out, For) and out.kind == "parallel" and out.step == 12
    steps: dict[str, set[int]] = {}
    for x in _loops(out):
        steps.setdefault(x.var.name, set()).add(x.step)
    assert steps["jc"] == {8} and steps["rc"] == {16}  # nc and kc
    assert steps["i"] == {1, 4} and steps["r"] == {1, 4}  # block_rows' tile and its tails
    small, _ = lower_program(*_matmul(8, 8, 8))
    assert block_caches(small, describe()) is small  # B fits in L2: left to block_rows


def _random_case(rng: np.random.Generator):
    """A random contraction with tails in every dimension: a matmul (float32 or int64), a
    batched matmul, or the gradients of a dense layer."""
    kind = int(rng.integers(0, 3))
    n, k, m = (int(x) for x in rng.integers(12, 40, size=3))
    if kind == 0:
        dtype = str(rng.choice(["float32", "int64"]))
        outs, ins = _matmul(n, k, m, dtype)
        return outs, ins, [n, k, m, dtype]
    if kind == 1:
        b = int(rng.integers(1, 4))
        A = tc.placeholder((b, n, k), name="A")
        B = tc.placeholder((b, k, m), name="B")
        r = tc.reduce_axis(k, name="r")
        out = tc.compute((b, n, m), lambda p, i, j: tc.sum(A[p, i, r] * B[p, r, j], axis=r),
                         name="BC")
        return [out], [A, B], [b, n, k, m]
    X = tc.placeholder((n, k), name="X")
    W = tc.placeholder((m, k), name="W")
    r = tc.reduce_axis(k, name="r")
    Y = tc.compute((n, m), lambda i, j: tc.sum(X[i, r] * W[j, r], axis=r), name="Y")
    H = tc.placeholder((n, m), name="H")
    return list(tc.gradient(Y, [X, W], head=H)), [X, W, H], [n, k, m, "dense grad"]


@pytest.mark.parametrize("pack", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_blocked_programs_are_bit_identical_in_the_interpreter(seed, pack):
    rng = np.random.default_rng(seed)
    outs, ins, sizes = _random_case(rng)
    func, consts = lower_program(outs, ins)
    blocked = block_caches(func, TINY, pack=pack)
    assert blocked is not func, sizes
    arrays = random_inputs(ins, rng)
    got = run(blocked, arrays, constants=consts)
    plain = run(func, arrays, constants=consts)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    for g, p, w in zip(got, plain, want):
        np.testing.assert_array_equal(g, p, err_msg=f"seed {seed}, sizes {sizes}")
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4, err_msg=f"sizes {sizes}")


@pytest.mark.parametrize("pack", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_compiled_blocked_kernels_match_the_evaluator(seed, pack, monkeypatch):
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)  # thread even tiny calls
    rng = np.random.default_rng(100 + seed)
    outs, ins, sizes = _random_case(rng)
    func, consts = lower_program(outs, ins)
    assert not consts
    assert block_caches(func, TINY) is not func, sizes
    kernel = compiled(schedule_cpu(func, host=TINY, pack=pack))
    arrays = random_inputs(ins, rng)
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    for threads in (1, 2):
        kernel.threads = threads
        got = kernel(*arrays)
        got = [got] if isinstance(got, np.ndarray) else list(got)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4,
                                       err_msg=f"sizes {sizes}, {threads} thread(s)")


def test_symbolic_sizes_compile_and_match(monkeypatch):
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    n, k, m = tc.var("n"), tc.var("k"), tc.var("m")
    A = tc.placeholder((n, k), name="A")
    B = tc.placeholder((k, m), name="B")
    r = tc.reduce_axis(k, name="r")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    func = schedule_cpu(lower_program([C], [A, B])[0], host=TINY)
    assert any(x.var.name == "jc" for x in _loops(func.body))
    kernel = compiled(func)
    rng = np.random.default_rng(7)
    for rows, inner, cols in [(1, 1, 1), (3, 17, 5), (29, 31, 33), (0, 4, 4), (13, 0, 9)]:
        a = rng.standard_normal((rows, inner)).astype(np.float32)
        b = rng.standard_normal((inner, cols)).astype(np.float32)
        for threads in (1, 2):
            kernel.threads = threads
            np.testing.assert_allclose(kernel(a, b), a.astype(np.float64) @ b, rtol=1e-5,
                                       atol=1e-5, err_msg=f"{rows}x{inner}x{cols}")


def test_register_tiles_hold_the_accumulators_in_lane_loops():
    from tecomp.passes.schedule.cpu.microkernel import tile_shape

    host = describe()
    mr, nr = tile_shape(host, 4)
    func, _ = lower_program(*_matmul(3 * mr + 1, 70, 2 * nr + 5))
    body = block_caches(func, host).body
    loops = list(_loops(body))
    lanes = [x for x in loops if x.kind == "lanes"]
    assert lanes and all(int(x.hi.value) == host.lanes(4) for x in lanes)
    text = str(body)
    assert f"acc: float32[{mr}, {nr}] (local)" in text  # the tile, in registers
    assert "B_panel: float32[" in text  # the packed operand, micro-panel order


@pytest.mark.parametrize("k", [70, 72, 3])
@pytest.mark.parametrize("in_backend", [True, False])
def test_a_tiles_reduction_loop_runs_four_steps_a_trip_then_its_tail(k, in_backend,
                                                                    monkeypatch):
    """The tile's ``k`` loop runs ``K_UNROLL`` steps a trip over the whole groups and finishes
    the slice one step at a time (matmul 1024^3 on one AVX-512 core: 130 -> 147 GFLOP/s):
    one loop with the ``unroll`` hint, whose copies LLVM makes, or (the switch off) the
    copies written out, stepping by ``K_UNROLL``, then the tail."""
    from tecomp.passes.schedule.cpu import microkernel
    from tecomp.passes.schedule.cpu.microkernel import K_UNROLL, tile_shape

    monkeypatch.setattr(microkernel, "UNROLL_IN_BACKEND", in_backend)
    host = describe()
    mr, nr = tile_shape(host, 4)
    outs, ins = _matmul(2 * mr + 3, k, 2 * nr + 1)
    func, _ = lower_program(outs, ins)
    body = block_caches(func, host).body
    def updates(x):  # the tile's reduction loop: its body is the update's lane loops
        parts = x.body.stmts if isinstance(x.body, Seq) else (x.body,)
        return x.kind != "lanes" and all(isinstance(y, For) and y.kind == "lanes"
                                         for y in parts)

    around = [x for x in _loops(body) if updates(x)]
    assert K_UNROLL == 4
    if in_backend:
        if k >= K_UNROLL:
            assert {x.unroll for x in around} == {1, K_UNROLL}  # the whole tiles; row tails
        assert all(isinstance(x.body, For) and x.step == 1 for x in around)
    else:
        assert {x.unroll for x in around} <= {1}
        if k >= K_UNROLL:
            assert {x.step for x in around} == {1, K_UNROLL}  # the groups, and the tail
        for x in around:
            assert len(x.body.stmts) == K_UNROLL if x.step == K_UNROLL else \
                isinstance(x.body, For)
    arrays = random_inputs(ins, np.random.default_rng(k))
    got = compiled(schedule_cpu(func))(*arrays)
    (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _odd_contractions(rng, dtype):
    n, k, m = (int(x) for x in rng.integers(40, 110, size=3))
    A = tc.placeholder((n, k), name="A", dtype=dtype)
    B = tc.placeholder((k, m), name="B", dtype=dtype)
    Bt = tc.placeholder((m, k), name="Bt", dtype=dtype)
    r = tc.reduce_axis(k, name="r")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * Bt[j, r] * 0.5, axis=r), name="D")
    H = tc.placeholder((n, m), name="H", dtype=dtype)
    grads = list(tc.gradient(D, [A, Bt], head=H))
    return [C, D] + grads, [A, B, Bt, H], (n, k, m)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(3))
def test_register_tiled_kernels_match_the_evaluator(seed, dtype, monkeypatch):
    """The host's own tile shape, odd sizes (tails of rows, columns and the reduction),
    a transposed operand and a dense layer's gradients, 1 and 2 threads."""
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    rng = np.random.default_rng(300 + seed)
    outs, ins, sizes = _odd_contractions(rng, dtype)
    func, consts = lower_program(outs, ins)
    scheduled = schedule_cpu(func)
    assert any(x.kind == "lanes" for x in _loops(scheduled.body)), sizes
    kernel = compiled(scheduled)
    arrays = [a.astype(t.dtype) for a, t in zip(random_inputs(ins, rng), ins)]
    want = tc.evaluate(outs, dict(zip(ins, arrays)))
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kernel.threads = threads
        for g, w in zip(kernel(*arrays), want):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol,
                                       err_msg=f"sizes {sizes}, {threads} thread(s)")


@pytest.mark.parametrize("epilogue", ["bias", "scaled bias, clamp", "select", "exp"])
@pytest.mark.parametrize("dtype, sizes", [("float32", (45, 700, 70)),
                                          ("float64", (19, 50, 37)),
                                          ("float32", (33, 1000, 100))])
def test_plain_order_contractions_take_register_tiles_with_their_epilogue(
        dtype, sizes, epilogue, monkeypatch):
    """``x @ W.T`` with a bias (and more) applied in registers after the last slice of the
    reduction; reductions longer than one slice keep their partial sums in the output."""
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    outs, ins = dense_case(*sizes, dtype, epilogue)
    func, _ = lower_program(outs, ins)
    scheduled = schedule_cpu(func)
    tiled = any(x.kind == "lanes" for x in _loops(scheduled.body))
    assert tiled == (epilogue != "exp"), epilogue
    if tiled and sizes[1] > 384 and dtype == "float32":
        assert "if (kc + " in str(scheduled.body) or "+ 384 >=" in str(scheduled.body)
    rng = np.random.default_rng(sum(sizes))
    arrays = [a.astype(t.dtype) for a, t in zip(random_inputs(ins, rng), ins)]
    (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
    kernel = compiled(scheduled)
    tol = 1e-4 if dtype == "float32" else 1e-12
    for threads in (1, 2):
        kernel.threads = threads
        np.testing.assert_allclose(kernel(*arrays), want, rtol=tol, atol=tol,
                                   err_msg=f"{sizes} {dtype} {epilogue}, {threads} threads")


@pytest.mark.parametrize("dtype, sizes", [("float32", (45, 700, 70)), ("float64", (19, 50, 37)),
                                          ("float32", (8, 16, 32))])
def test_row_operands_strided_along_the_reduction_are_packed(dtype, sizes, monkeypatch):
    """``h[i, j] = sum_r xT[r, i] * W[j, r] + b[j]``: the row operand ``xT`` steps a whole row
    per step of ``r``; the whole tiles broadcast it from a packed ``xT_rows`` panel, the rows
    past them (45 = 5 tiles of 8 and 5 rows) read it as it is.  A row-major ``x[i, r]``, or
    a convolution's linearised weights, is read in place."""
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    n, k, m = sizes
    xT = tc.placeholder((k, n), name="xT", dtype=dtype)
    W = tc.placeholder((m, k), name="W", dtype=dtype)
    b = tc.placeholder((m,), name="b", dtype=dtype)
    r = tc.reduce_axis(k, name="r")
    out = tc.compute((n, m), lambda i, j: tc.sum(xT[r, i] * W[j, r], axis=r) + b[j], name="h")
    outs, ins = [out], [xT, W, b]
    func, _ = lower_program(outs, ins)
    text = str(schedule_cpu(func).body)
    assert "xT_rows[" in text
    dense = str(schedule_cpu(lower_program(*dense_case(n, k, m, dtype, "bias"))[0]).body)
    assert "lanes for" in dense and "x_rows" not in dense
    X = tc.placeholder((2, 16, 10, 10), name="X")
    K = tc.placeholder((32, 16, 3, 3), name="K")
    conv = str(tc.lower(tc.ops.conv2d(X, K, padding=1), [X, K], target="llvm"))
    assert "lanes for" in conv and "K_rows" not in conv
    _matches_the_evaluator(func, outs, ins, sizes, dtype)


@pytest.mark.parametrize("dtype, sizes", [("float32", (45, 300, 70)), ("float64", (19, 50, 37))])
def test_fused_row_prologues_are_computed_once_per_block(dtype, sizes, monkeypatch):
    """The weight gradient of a ReLU layer, ``dW[i, j] = sum_k select(h[k, i] >= 0, g[k, i],
    0) * x[k, j]`` ("i, k, j" order): the whole tiles broadcast the select from a packed
    ``dW_rows`` panel filled once per block (not once per tile), the rows past them compute
    it in place; a plain ``A[i, k] * B[k, j]`` keeps reading ``A``."""
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    m, k, n = sizes
    h = tc.placeholder((k, m), name="h", dtype=dtype)
    g = tc.placeholder((k, m), name="g", dtype=dtype)
    x = tc.placeholder((k, n), name="x", dtype=dtype)
    r = tc.reduce_axis(k, name="r")
    dW = tc.compute((m, n), lambda i, j: tc.sum(
        tc.if_then_else(h[r, i] >= 0.0, g[r, i], 0.0) * x[r, j], axis=r), name="dW")
    outs, ins = [dW], [h, g, x]
    func, _ = lower_program(outs, ins)
    text = str(schedule_cpu(func).body)
    assert "dW_rows[" in text and "lanes for" in text
    plain = str(schedule_cpu(lower_program(*_matmul(m, k, n, dtype))[0]).body)
    assert "lanes for" in plain and "_rows" not in plain
    _matches_the_evaluator(func, outs, ins, sizes, dtype)


def _matches_the_evaluator(func, outs, ins, sizes, dtype):
    """The scheduled ``func`` compiled, on 1 and 2 threads, against the evaluator."""
    rng = np.random.default_rng(sum(sizes))
    arrays = [a.astype(t.dtype) for a, t in zip(random_inputs(ins, rng), ins)]
    (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
    kernel = compiled(schedule_cpu(func))
    tol = 1e-4 if dtype == "float32" else 1e-12
    for threads in (1, 2):
        kernel.threads = threads
        np.testing.assert_allclose(kernel(*arrays), want, rtol=tol, atol=tol,
                                   err_msg=f"{sizes} {dtype}, {threads} threads")


def test_plain_order_row_prologues_are_packed(monkeypatch):
    """``h[i, j] = sum_r relu(x[i, r]) * W[j, r]`` (plain order): the row operand is the
    computed ``max(x[i, r], 0)``, packed into ``h_rows`` (it once raised AttributeError
    while naming the panel after a buffer it does not have)."""
    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    sizes = (45, 300, 70)
    x = tc.placeholder((45, 300), name="x")
    W = tc.placeholder((70, 300), name="W")
    r = tc.reduce_axis(300, name="r")
    h = tc.compute((45, 70), lambda i, j: tc.sum(tc.maximum(x[i, r], 0.0) * W[j, r], axis=r),
                   name="h")
    outs, ins = [h], [x, W]
    func, _ = lower_program(outs, ins)
    assert "h_rows[" in str(schedule_cpu(func).body)
    _matches_the_evaluator(func, outs, ins, sizes, "float32")


@pytest.mark.parametrize("cores", [2, 4])
def test_few_rows_many_columns_split_the_columns_across_threads(cores, monkeypatch):
    """24 rows fit one row block, so splitting them per core would pack the whole panel once
    per core: the threads take blocks of columns instead (the parallel loop's variable
    bounds the panel copy), each packing its own; a 512-row dense layer keeps its rows
    split.  Compiled results match the evaluator on 1 and 2 threads."""
    from dataclasses import replace

    from tecomp.codegen import kernel as kernel_mod
    from tecomp.stmt_functor import expr_vars

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    host = replace(describe(), cores=cores)
    outs, ins, func = strided_weight_gradient()
    scheduled = schedule_cpu(func, host=host)
    found = panel_loops(scheduled)
    assert found
    def copies_own_columns(top, path):
        return any(top.var in expr_vars(s.lo) | expr_vars(s.hi) for s in path)

    assert all(copies_own_columns(top, path) for top, path, _ in found)
    dense_outs, dense_ins = dense_case(512, 64, 256, "float32", "bias")
    dense = schedule_cpu(lower_program(dense_outs, dense_ins)[0], host=replace(host, cores=2))
    found = panel_loops(dense)
    assert found and not any(copies_own_columns(top, path) for top, path, _ in found)
    kernel = compiled(scheduled)
    rng = np.random.default_rng(cores)
    arrays = random_inputs(ins, rng)
    (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
    for threads in (1, 2):
        kernel.threads = threads
        np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-4, atol=1e-4)


def _copy_context(func, suffix):
    """For each copy into a buffer named ``...suffix``: the loops around the copy nest (from
    the function's top, the copy's own loops left out)."""
    from tecomp.loopir import Store
    from tecomp.stmt_functor import walk_stmt

    def pure(loop):
        stores = [x for x in walk_stmt(loop.body) if isinstance(x, Store)]
        return stores and all(x.buffer.name.endswith(suffix) for x in stores)

    found = []

    def walk(s, path):
        if isinstance(s, For):
            walk(s.body, path + [s])
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, path)
        elif isinstance(s, Store):
            if s.buffer.name.endswith(suffix):
                keep = list(path)
                while keep and pure(keep[-1]):
                    keep.pop()
                found.append(keep)
        elif isinstance(s, IfThenElse):
            walk(s.then, path)
            if s.else_ is not None:
                walk(s.else_, path)
        elif hasattr(s, "body"):
            walk(s.body, path)

    walk(func.body, [])
    return found


@pytest.mark.parametrize("form", ["i, k, j", "plain"])
def test_packed_rows_are_copied_once_per_slice_for_all_column_blocks(form, monkeypatch):
    """With several column blocks (784 columns), a packed row operand is copied outside the
    column-block loop: every loop around the rows' copy also encloses the panel's copy, which
    sits inside one more (the column blocks).  Results match the evaluator."""
    from dataclasses import replace

    from tecomp.codegen import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "PARALLEL_MIN_BYTES", 0)
    m, k, n = 64, 300, 784
    r = tc.reduce_axis(k, name="r")
    if form == "i, k, j":  # a ReLU layer's weight gradient: a select packed as the rows
        h = tc.placeholder((k, m), name="h")
        g = tc.placeholder((k, m), name="g")
        x = tc.placeholder((k, n), name="x")
        out = tc.compute((m, n), lambda i, j: tc.sum(
            tc.if_then_else(h[r, i] >= 0.0, g[r, i], 0.0) * x[r, j], axis=r), name="dW")
        ins = [h, g, x]
    else:  # xT[r, i] * W[j, r]: the row operand strided along the reduction
        xT = tc.placeholder((k, m), name="xT")
        W = tc.placeholder((n, k), name="W")
        out = tc.compute((m, n), lambda i, j: tc.sum(xT[r, i] * W[j, r], axis=r), name="h")
        ins = [xT, W]
    func, _ = lower_program([out], ins)
    one_core = replace(describe(), cores=1)  # rows in one block (more cores: columns split)
    scheduled = schedule_cpu(func, host=one_core)
    rows, panels = _copy_context(scheduled, "_rows"), _copy_context(scheduled, "_panel")
    assert rows and panels
    for row_ctx in rows:
        for panel_ctx in panels:
            assert len(panel_ctx) > len(row_ctx)
            assert all(a is b for a, b in zip(row_ctx, panel_ctx))
    _matches_the_evaluator(func, [out], ins, (m, k, n), "float32")


@pytest.mark.parametrize("form", ["matmul", "dense"])
def test_blocks_of_whole_tiles_have_no_tails(form):
    """Where every block of rows and of columns is whole tiles (the extents and the block
    sizes multiples of ``mr`` and ``nr``), no loop runs past the whole tiles: the empty
    scalar tails of a conv2d's forward and input gradient (eight accumulators each, their
    addresses through divisions) were most of the LLVM time of building them (conv2d
    8x32x32x32 -> 64, forward and gradient: 0.8 -> 0.5 s cold on one AMD EPYC).  One row and
    one column more bring both tails back; the results agree with the evaluator either way."""
    from tecomp.passes.schedule.cpu.microkernel import tile_shape

    mr, nr = tile_shape(TINY, 4)
    rng = np.random.default_rng(5)
    for extra in (0, 1):
        n, m = 4 * mr + extra, 3 * nr + extra
        outs, ins = (_matmul(n, 70, m) if form == "matmul"
                     else dense_case(n, 70, m, "float32", "bias"))
        func, consts = lower_program(outs, ins)
        blocked = block_caches(func, TINY)
        loops = list(_loops(blocked.body))
        whole_ends = {str(x.hi): x.step for x in loops if x.step in (mr, nr)}
        tails = {whole_ends[str(x.lo)] for x in loops if x.step == 1 and str(x.lo) in whole_ends}
        assert tails == (set() if extra == 0 else {mr, nr}), (form, n, m)
        arrays = random_inputs(ins, rng)
        (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
        (got,) = run(blocked, arrays, constants=consts)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=f"{form} {n}x{m}")


@pytest.mark.parametrize("rows,cols,blocks", [(256, 64, 8), (96, 40, 6)])
def test_block_sums_of_one_input_take_register_tiles(rows, cols, blocks):
    """``P[c, j] = sum_t H[c*s + t, j]``: the row operand ``H[c*s + t, j]`` is also the
    column operand's load, so the packed row replaced a load inside the other's indices
    (an internal error before ``rebuild_expr`` rebuilt buffer loads)."""
    H = tc.placeholder((rows, cols), name="H", dtype="float64")
    step = rows // blocks
    t = tc.reduce_axis(step, name="t")
    P = tc.compute((blocks, cols), lambda c, j: tc.sum(H[c * step + t, j], axis=t), name="P")
    h = np.random.default_rng(rows).standard_normal((rows, cols))
    np.testing.assert_allclose(tc.build(P, [H])(h), h.reshape(blocks, step, cols).sum(1),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("one_loop", [True, False])
def test_columns_past_the_whole_tiles_take_one_reduction_loop_for_the_rows(one_loop, monkeypatch):
    """A plain-order contraction's columns past its whole tiles (``m`` not a multiple of
    ``nr``) are computed a column at a time by one reduction loop that updates the tile's
    ``mr`` rows together (``gemm_dot.ONE_COLUMN_LOOP``), where there was a reduction loop a
    row; each element's terms still come in the same order, and the results agree with the
    evaluator either way."""
    from tecomp.passes.schedule.cpu import gemm_dot
    from tecomp.passes.schedule.cpu.microkernel import tile_shape
    from tecomp.stmt_functor import walk_stmt

    monkeypatch.setattr(gemm_dot, "ONE_COLUMN_LOOP", one_loop)
    mr, nr = tile_shape(TINY, 4)
    outs, ins = dense_case(4 * mr, 70, 3 * nr + 5, "float32", "bias")
    func, consts = lower_program(outs, ins)
    blocked = block_caches(func, TINY)
    loops = [s for s in walk_stmt(blocked.body) if isinstance(s, For)]
    whole_ends = {str(x.hi) for x in loops if x.step == nr}
    tails = [x for x in loops if x.step == 1 and str(x.lo) in whole_ends]
    assert tails
    for tail in tails:  # the loops over the reduction inside one column's
        inner = [s for s in walk_stmt(tail.body) if isinstance(s, For)]
        assert len(inner) == (1 if one_loop else mr), (one_loop, len(inner))
    arrays = random_inputs(ins, np.random.default_rng(3))
    (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
    (got,) = run(blocked, arrays, constants=consts)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("from_zero", [True, False])
def test_a_slices_unrolled_tile_loop_counts_its_steps_from_zero(from_zero, monkeypatch):
    """Where the reduction is cut into slices (``kc`` a loop variable), the whole tiles'
    unrolled loop over a slice counts from 0 to the slice's length and reads ``kc + t``
    (``microkernel.FROM_ZERO``: loop strength reduction spent half of such a body's LLVM time
    on the loop counted from ``kc``); switched off it counts from ``kc``.  The results agree
    with the evaluator either way."""
    from tecomp.passes.schedule.cpu import microkernel
    from tecomp.passes.schedule.cpu.microkernel import K_UNROLL, tile_shape

    monkeypatch.setattr(microkernel, "FROM_ZERO", from_zero)
    mr, nr = tile_shape(TINY, 4)
    outs, ins = _matmul(2 * mr, 300, 2 * nr)  # several slices of k on TINY's caches
    func, consts = lower_program(outs, ins)
    blocked = block_caches(func, TINY)
    unrolled = [x for x in _loops(blocked.body) if x.unroll == K_UNROLL]
    assert unrolled
    for x in unrolled:
        assert (str(x.lo) == "0") == from_zero, (from_zero, x.lo)
    arrays = random_inputs(ins, np.random.default_rng(9))
    (want,) = tc.evaluate(outs, dict(zip(ins, arrays)))
    (got,) = run(blocked, arrays, constants=consts)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
