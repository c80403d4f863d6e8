"""Column blocks and row groups (passes/schedule/cpu/column_blocks.py, row_groups.py): a chain of
stages that never mixes columns runs block of columns by block, tree-shaped stages group by
group; both refused where a stage reads another column or another group, and every result
equal to the unscheduled program's (interpreted) and to the evaluator's (compiled)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.fft
from cpu_order import lower_program
from gemm_cases import compiled
from loop_interp import run

import tecomp as tc
from tecomp.host import Host
from tecomp.loopir import Allocate, BufferLoad, For, Seq, Store
from tecomp.passes.schedule.cpu import column_blocks, row_groups
from tecomp.passes.schedule.cpu.column_blocks import block_columns
from tecomp.stmt_functor import StmtMutator, walk_stmt

#: a host whose level-2 cache is small enough for test-sized chains to be blocked
SMALL = Host(vector_bits=256, fma=True, cores=2, l1d=4096, l2=8192, l3=0)


@pytest.fixture(autouse=True)
def _widest_blocks(monkeypatch):
    """The tests here were written for the widest block (two vectors); narrowing a block to
    one vector where two would not fit half of L2 (``FIT_L2``, which also gates the L1 rule
    ``FIT_L1``: no column sizes without it) has tests of its own."""
    monkeypatch.setattr(column_blocks, "FIT_L2", False)


def _loops(func, kind=None):
    return [s for s in walk_stmt(func.body) if isinstance(s, For)
            and (kind is None or s.kind == kind)]


def _top(func):
    s = func.body
    while isinstance(s, Allocate):
        s = s.body
    return s


def _dct(n, batch, dtype="float64"):
    X = tc.placeholder((n, batch), name="X", dtype=dtype)
    return [tc.ops.dct(X)], [X]


def _same_when_interpreted(func, blocked, constants, arrays):
    """Equal results with the chunk loop run as one part (every chunk in one slot) and as a
    part a chunk (a slot each, as threads that run at once)."""
    want = run(func, arrays, constants=constants)
    for parts_of_one in (False, True):
        got = run(blocked, arrays, constants=constants, parts_of_one=parts_of_one)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_dct_chain_runs_block_by_block_in_lanes():
    outs, ins = _dct(64, 32)
    func, constants = lower_program(outs, ins)
    blocked = block_columns(func, SMALL)
    assert blocked is not func
    top = _top(blocked)
    assert isinstance(top, For) and top.kind == "parallel" and int(top.hi.value) == 2  # chunks
    (blocks,) = [s for s in walk_stmt(top) if isinstance(s, For) and s.var.name.startswith("nb")]
    assert isinstance(blocks.body, Seq)
    lanes = _loops(blocked, "lanes")
    assert lanes and all(int(s.hi.value) == 8 for s in lanes)  # 2 vectors of 4 float64
    assert _loops(blocked, "parallel") == [top]
    temps = [s.buffer for s in walk_stmt(blocked.body) if isinstance(s, Allocate)]
    assert temps and all(int(b.shape[0].value) == 2 and int(b.shape[-1].value) == 8
                         for b in temps)
    assert [tuple(int(d) for d in b.shape) for b in temps if b.name == "X_cols"] == [(2, 64, 8)]
    # the intermediates are indexed by the slot of the part a thread runs, not by the chunk
    assert top.slot is not None and top.slot != top.var
    stores = [s for s in walk_stmt(top) if isinstance(s, Store) and s.buffer in temps]
    assert stores and all(s.indices[0] == top.slot for s in stores)
    x = np.random.default_rng(0).standard_normal((64, 32))
    _same_when_interpreted(func, blocked, constants, [x])
    column_blocks.SLOTS = False
    try:
        by_chunk = block_columns(func, SMALL)
    finally:
        column_blocks.SLOTS = True
    top = _top(by_chunk)
    chunked = {s.buffer for s in walk_stmt(by_chunk.body) if isinstance(s, Allocate)}
    stores = [s for s in walk_stmt(top) if isinstance(s, Store) and s.buffer in chunked]
    assert top.slot is None and stores and all(s.indices[0] == top.var for s in stores)
    _same_when_interpreted(func, by_chunk, constants, [x])


def test_block_narrows_to_one_vector_where_two_would_not_fit_half_of_l2(monkeypatch):
    from tecomp.passes.schedule.cpu.column_blocks import _block_width
    monkeypatch.setattr(column_blocks, "FIT_L2", True)
    assert _block_width(32, 4, 256, 4096) == 8  # two vectors: 2 KiB of the largest buffer
    assert _block_width(32, 4, 1024, 4096) == 4  # 8 KiB at two vectors, 4 KiB at one
    assert _block_width(32, 4, 4096, 4096) == 4  # none fits: the narrowest
    assert _block_width(6, 4, 8, 4096) is None  # no multiple of the vector divides 6
    assert _block_width(32, 4) == 8  # no size given: the widest
    # the 64-point chain's largest stage (128 realified rows of float64) is 8 KiB at two
    # vectors of four: more than half of SMALL's L2, so its blocks are one vector wide
    outs, ins = _dct(64, 32)
    func, constants = lower_program(outs, ins)
    blocked = block_columns(func, SMALL)
    lanes = _loops(blocked, "lanes")
    assert lanes and all(int(s.hi.value) == 4 for s in lanes)
    x = np.random.default_rng(1).standard_normal((64, 32))
    _same_when_interpreted(func, blocked, constants, [x])


def test_an_input_read_in_scattered_rows_is_copied_a_block_at_a_time_when_larger_than_l2():
    outs, ins = _dct(64, 32)  # X: 16 KiB, read in bit-reversed row order
    func, constants = lower_program(outs, ins)
    x = np.random.default_rng(6).standard_normal((64, 32))

    def copies(host):
        blocked = block_columns(func, host)
        _same_when_interpreted(func, blocked, constants, [x])
        return [s.buffer.name for s in walk_stmt(blocked.body)
                if isinstance(s, Allocate) and s.buffer.name.endswith("_cols")]

    assert copies(SMALL) == ["X_cols"]
    wider = Host(vector_bits=256, fma=True, cores=2, l1d=4096, l2=16384, l3=0)
    assert copies(wider) == []  # X fits L2: read where it lies
    column_blocks.PACK = False
    try:
        assert copies(SMALL) == []
    finally:
        column_blocks.PACK = True


def test_tree_stages_run_group_by_group_with_group_sized_intermediates():
    outs, ins = _dct(64, 16)
    func, constants = lower_program(outs, ins)
    blocked = block_columns(func, SMALL)
    groups = [s for s in walk_stmt(blocked.body) if isinstance(s, For) and s.var.name == "g"]
    assert len(groups) == 1 and isinstance(groups[0].body, Seq)
    members = groups[0].body.stmts
    assert len(members) >= 2
    G = int(groups[0].hi.value)
    sizes = {s.buffer.name: s.buffer.shape for s in walk_stmt(blocked.body)
             if isinstance(s, Allocate)}
    before = {s.buffer.name: s.buffer.shape for s in walk_stmt(func.body)
              if isinstance(s, Allocate)}
    cut = [name for name in sizes if int(sizes[name][1].value) * G == int(before[name][0].value)]
    assert cut, "an intermediate only the tree reads holds one group's rows"
    x = np.random.default_rng(1).standard_normal((64, 16))
    _same_when_interpreted(func, blocked, constants, [x])
    row_groups.ROW_GROUPS = False
    try:
        plain = block_columns(func, SMALL)
    finally:
        row_groups.ROW_GROUPS = True
    assert not [s for s in walk_stmt(plain.body) if isinstance(s, For) and s.var.name == "g"]
    _same_when_interpreted(func, plain, constants, [x])


def test_tree_stages_are_grouped_where_a_block_part_exceeds_l1_but_fits_in_l2():
    """The DCT chain of 64 points and 16 float64 columns: a block's part of the largest
    intermediate (8 KiB at the widest block, which these tests take) is above a 4 KiB L1 and
    within half of a 64 KiB L2 -- grouped with ``GROUP_IN_L1``, not without."""
    outs, ins = _dct(64, 16)
    func, constants = lower_program(outs, ins)
    roomy = Host(vector_bits=256, fma=True, cores=2, l1d=4096, l2=65536, l3=0)

    def groups(f):
        return [s for s in walk_stmt(f.body) if isinstance(s, For) and s.var.name == "g"]

    blocked = block_columns(func, roomy)
    assert groups(blocked)
    x = np.random.default_rng(5).standard_normal((64, 16))
    _same_when_interpreted(func, blocked, constants, [x])
    column_blocks.GROUP_IN_L1 = False
    try:
        assert not groups(block_columns(func, roomy))
    finally:
        column_blocks.GROUP_IN_L1 = True


@pytest.mark.parametrize("n, dtype", [(256, "float64"), (256, "float32"), (1024, "float64")])
def test_blocked_dct_compiles_to_scipy_values(n, dtype):
    outs, ins = _dct(n, 64, dtype)
    func, constants = lower_program(outs, ins)
    from tecomp.passes.schedule.cpu import schedule_cpu

    scheduled = schedule_cpu(func, host=SMALL)
    assert _loops(scheduled, "lanes")
    kernel = compiled(scheduled)
    x = np.random.default_rng(2).standard_normal((n, 64)).astype(dtype)
    want = scipy.fft.dct(x.astype(np.float64), 2, norm="ortho", axis=0)
    tol = 1e-12 if dtype == "float64" else 2e-5
    for threads in (1, 2):  # one slot for both chunks, or a slot a thread
        kernel.threads = threads
        got = kernel(x, *[constants[b] for b in scheduled.inputs[1:]])
        np.testing.assert_allclose(got, want, atol=tol * np.abs(want).max())


def _chain(read):
    """Three stages over (rows, 64 columns); the second reads its input as ``read`` says."""
    X = tc.placeholder((64, 64), name="X", dtype="float64")
    A = tc.compute((64, 64), lambda i, n: X[i, n] * 2.0 + X[63 - i, n], name="A")
    if read == "column":
        B = tc.compute((64, 64), lambda i, n: A[i, n] + A[(i + 1) % 64, n], name="B")
    elif read == "next column":
        B = tc.compute((64, 64), lambda i, n: A[i, n] + A[i, (n + 1) % 64], name="B")
    else:  # a sum along the columns
        k = tc.reduce_axis(64, name="k")
        B = tc.compute((64, 64), lambda i, n: tc.sum(A[i, k], axis=k) + A[i, n], name="B")
    C = tc.compute((64, 64), lambda i, n: B[i, n] * B[63 - i, n], name="C")
    return [C], [X]


def test_stages_that_keep_to_their_column_are_blocked():
    outs, ins = _chain("column")
    func, constants = lower_program(outs, ins)
    blocked = block_columns(func, SMALL)
    assert blocked is not func and _loops(blocked, "lanes")
    x = np.random.default_rng(3).standard_normal((64, 64))
    _same_when_interpreted(func, blocked, constants, [x])


@pytest.mark.parametrize("read", ["next column", "sum along the columns"])
def test_stages_that_read_other_columns_are_left_alone(read):
    outs, ins = _chain(read)
    func, _ = lower_program(outs, ins)
    assert block_columns(func, SMALL) is func


def test_small_chains_are_blocked_too_and_the_switches_leave_the_program_alone():
    outs, ins = _chain("column")
    func, constants = lower_program(outs, ins)
    big = Host(vector_bits=256, fma=True, cores=2, l1d=32768, l2=1 << 20, l3=0)
    blocked = block_columns(func, big)  # 64 KiB of intermediates, within half of L2
    assert blocked is not func
    x = np.random.default_rng(4).standard_normal((64, 64))
    _same_when_interpreted(func, blocked, constants, [x])
    column_blocks.SMALL_RUNS = False
    try:
        assert block_columns(func, big) is func  # the rule before: they meet in L2
    finally:
        column_blocks.SMALL_RUNS = True
    column_blocks.COLUMN_BLOCKS = False
    try:
        assert block_columns(func, SMALL) is func
    finally:
        column_blocks.COLUMN_BLOCKS = True


def test_the_block_is_the_widest_whose_part_fits_in_l1_where_one_does():
    from tecomp.passes.schedule.cpu.column_blocks import _block_width

    # 128 columns of 16 lanes, 2 KiB a column of the largest intermediate: two vectors a
    # row are 64 KiB, one 32 KiB
    assert _block_width(128, 16, 2048, 1 << 20, 48 << 10) == 16
    assert _block_width(128, 16, 2048, 1 << 20, 0) == 32  # without the L1 rule
    assert _block_width(128, 16, 512, 1 << 20, 48 << 10) == 32  # both fit: the widest
    # neither fits in L1: the widest within half of L2, as before
    assert _block_width(128, 16, 8192, 1 << 20, 48 << 10) == 32
    assert _block_width(128, 16, 65536, 1 << 20, 48 << 10) == 16


def test_a_stage_reading_outside_its_group_ends_the_tree():
    X = tc.placeholder((64, 32), name="X", dtype="float64")
    A = tc.compute((16, 4, 32), lambda i, j, n: X[4 * i + j, n] + X[63 - 4 * i - j, n], name="A")
    # B's block i reads A's blocks 2i and 2i + 1: a tree
    B = tc.compute((8, 8, 32), lambda i, j, n: A[2 * i + j // 4, j % 4, n] * 3.0
                   + A[2 * i + 1 - j // 4, (j + 1) % 4, n], name="B")
    # C's block i reads B's block 7 - i: outside its group
    C = tc.compute((8, 8, 32), lambda i, j, n: B[7 - i, j, n] - B[i, j, n], name="C")
    func, constants = lower_program([C], [X])
    tiny = Host(vector_bits=256, fma=True, cores=2, l1d=1024, l2=4096, l3=0)
    blocked = block_columns(func, tiny)
    groups = [s for s in walk_stmt(blocked.body) if isinstance(s, For) and s.var.name == "g"]
    assert len(groups) == 1 and len(groups[0].body.stmts) == 2  # A and B, not C
    assert not [s for s in walk_stmt(block_columns(func, SMALL).body)
                if isinstance(s, For) and s.var.name == "g"]  # a block's stage fits half L2
    x = np.random.default_rng(4).standard_normal((64, 32))
    _same_when_interpreted(func, blocked, constants, [x])


def test_dct_values_with_and_without_the_blocks_agree_compiled():
    outs, ins = _dct(256, 128)
    x = np.random.default_rng(5).standard_normal((256, 128))
    want = scipy.fft.dct(x, 2, norm="ortho", axis=0)
    from tecomp.codegen.cache import KERNELS

    results = []
    for on in (True, False):
        column_blocks.COLUMN_BLOCKS = on
        try:
            KERNELS.clear()
            func, constants = lower_program(outs, ins)
            from tecomp.passes.schedule.cpu import schedule_cpu

            kernel = compiled(schedule_cpu(func, host=SMALL))
            results.append(kernel(x, *[constants[b] for b in func.inputs[1:]]))
        finally:
            column_blocks.COLUMN_BLOCKS = True
    for got in results:
        np.testing.assert_allclose(got, want, atol=1e-12)


def _staged_chain(n=256, batch=16):
    """The DCT's chain with its last stage stored ``M1_staged[i, l, j]`` and copied into ``M1``
    in row order (as ``tc.ops.dct`` builds it from 1024 points)."""
    from tecomp.ops.butterfly import butterfly_chain
    from tecomp.ops.butterfly_factors import real_butterfly
    from tecomp.ops.butterfly_fuse import auto_grouping, fuse_chain

    perm, patterns, factors, _ = real_butterfly(n, "dct2")
    patterns, factors = fuse_chain(patterns, factors, auto_grouping(patterns, fewer_passes=True))
    X = tc.placeholder((n, batch), name="X", dtype="float64")
    Ts = [tc.constant(np.asarray(f), name=f"T{k}") for k, f in enumerate(factors)]
    Y = butterfly_chain(X, patterns, Ts, name="M", perm=np.asarray(perm), unroll=True,
                        staged_out=True)
    return [Y], [X]


def _allocated(func):
    return {s.buffer.name for s in walk_stmt(func.body) if isinstance(s, Allocate)}


def test_a_stage_copied_into_the_output_in_row_order_stores_there_itself():
    from tecomp.passes.schedule.cpu import copy_forward, schedule_cpu

    outs, ins = _staged_chain()
    func, constants = lower_program(outs, ins)
    assert "M1_staged" in _allocated(func)
    blocked = block_columns(func, SMALL)
    assert "M1_staged" not in _allocated(blocked)
    stores = [s for s in walk_stmt(blocked.body) if isinstance(s, Store) and s.buffer.name == "M1"]
    assert len(stores) == 1 and "T0" in str(stores[0].value)  # the stage's sum, stored in place
    kernel = compiled(schedule_cpu(func, host=SMALL))
    x = np.random.default_rng(8).standard_normal((256, 16))
    got = kernel(x, *[constants[b] for b in func.inputs[1:]])
    np.testing.assert_allclose(got, scipy.fft.dct(x, 2, norm="ortho", axis=0), atol=1e-12)
    copy_forward.COPY_FORWARD = False
    try:
        assert "M1_staged" in _allocated(block_columns(func, SMALL))
    finally:
        copy_forward.COPY_FORWARD = True


class _Reread(StmtMutator):
    """The copy into ``M1`` with one of its read indices replaced."""

    def __init__(self, change):
        self.change = change

    def visit_Store(self, s):
        if s.buffer.name != "M1":
            return s
        load = s.value
        return Store(s.buffer, s.indices, BufferLoad(
            load.buffer, self.change(load.indices, load.buffer.shape), load.dtype))


@pytest.mark.parametrize("read", ["not every element", "a bijection with no affine inverse"])
def test_copies_that_are_not_affine_bijections_stay(read):
    from tecomp import expr as E

    outs, ins = _staged_chain()
    func, _ = lower_program(outs, ins)
    if read == "not every element":
        def change(idx, shape):
            return (idx[0], E.Const(0, "int64"), *idx[2:])
    else:  # the j digit rotated, (j + 1) % b: every element once, r no affine form of them
        def change(idx, shape):
            one, b = E.Const(1, "int64"), shape[2]
            return (*idx[:2], E.Mod(E.Add(idx[2], one, "int64"), b, "int64"), idx[3])
    func = replace(func, body=_Reread(change).visit(func.body))
    assert "M1_staged" in _allocated(block_columns(func, SMALL))
