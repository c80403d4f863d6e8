"""Static bounds proofs of affine indices (``tecomp.passes.bounds_affine``): build-time
errors for accesses out of range wherever they run, size checks before the call where the
sizes decide, runtime checks where nothing can be proven, and no false positive on the
operator library or on any gradient of the autodiff rule table."""

import sys
from pathlib import Path

import numpy as np
import pytest

import tecomp as tc
from tecomp.passes.bounds_check import add_bounds_checks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes" / "autodiff"))


def _checks(outputs, inputs):
    """(size checks, affine runtime-checked accesses) that the pass adds to the program."""
    _, info = add_bounds_checks(tc.lower(list(outputs), list(inputs)).func)
    if info is None:
        return [], []
    return list(info.sizes), [c.access for c in info.checks if c.affine]


def test_shifted_read_past_the_end_is_a_build_error():
    A = tc.placeholder((8,), name="A")
    B = tc.compute((8,), lambda i: A[i + 1], name="B")
    with pytest.raises(tc.LoweringError, match=r"tensor 'A' in A\[i \+ 1\]: axis 0 index "
                                               r"i \+ 1 leaves \[0, 8\) \(e\.g\. at i = 7\)"):
        tc.build(B, [A])


def test_constant_index_past_a_narrow_axis_is_a_build_error():
    n = tc.var("n")
    A = tc.placeholder((n, 4), name="A")
    B = tc.compute((n,), lambda i: A[i, 5], name="B")
    with pytest.raises(tc.LoweringError, match=r"'A' in A\[i, 5\]: axis 1 index 5 leaves "
                                               r"\[0, 4\)"):
        tc.build(B, [A])
    with pytest.raises(tc.LoweringError, match="axis 1"):  # the opt-out keeps the static proof
        tc.build(B, [A], check_bounds=False)


def test_negative_write_index_is_a_build_error():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[n - 1 - i] + A[i - 1], name="B")
    with pytest.raises(tc.LoweringError, match=r"A\[i - 1\]: axis 0 .*for all sizes"):
        tc.build(B, [A])


def test_symbolic_shift_fails_for_every_size_that_runs_it():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i + 1], name="B")
    with pytest.raises(tc.LoweringError, match=r"leaves \[0, n\) \(e\.g\. at n = \d+, i = "):
        tc.build(B, [A])


def test_guards_protect_the_access():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: tc.if_then_else(i + 1 < n, A[i + 1], tc.const(0.0)),
                   name="B")
    r = tc.reduce_axis(n, name="r")
    C = tc.compute((n,), lambda i: tc.sum(A[r - 1], axis=r, where=r >= 1), name="C")
    assert _checks([B, C], [A]) == ([], [])
    a = np.arange(5, dtype=np.float32)
    b, c = tc.build([B, C], [A])(a)
    np.testing.assert_array_equal(b, [1, 2, 3, 4, 0])
    np.testing.assert_array_equal(c, np.full(5, a[:4].sum()))


def test_size_dependent_access_is_checked_before_the_call():
    n, m = tc.var("n"), tc.var("m")
    A = tc.placeholder((m,), name="A")
    idx = tc.placeholder((n,), name="idx")
    B = tc.compute((n,), lambda i: A[i] * idx[i], name="B")
    sizes, runtime = _checks([B], [A, idx])
    assert len(sizes) == 1 and sizes[0].buffer == "A" and runtime == []
    k = tc.build(B, [A, idx])
    np.testing.assert_array_equal(k(np.ones(5, np.float32), np.full(3, 2, np.float32)),
                                  [2, 2, 2])
    with pytest.raises(tc.IndexBoundsError, match=r"m = 3, n = 5 the read of tensor 'A' in "
                                                  r"A\[i\] leaves axis 0.*nothing was run"):
        k(np.ones(3, np.float32), np.ones(5, np.float32))


def test_unprovable_index_is_checked_at_run_time():
    n = tc.var("n")
    A = tc.placeholder((16,), name="A")
    B = tc.compute((n,), lambda i: A[i * i], name="B")
    sizes, runtime = _checks([B], [A, n])
    assert sizes == [] and runtime == ["A[i * i]"]
    a = np.arange(16, dtype=np.float32)
    got = tc.build(B, [A, n])(a, 4)
    np.testing.assert_array_equal(got, [0, 1, 4, 9])
    with pytest.raises(tc.IndexBoundsError, match=r"'A' at position \(16,\).*axis 0 index 16 "
                                                  r"not in \[0, 16\).*computed from the loop"):
        tc.build(B, [A, n])(a, 5)


def test_cuda_build_applies_the_static_check():
    A = tc.placeholder((8,), name="A")
    B = tc.compute((8,), lambda i: A[i + 1], name="B")
    with pytest.raises(tc.LoweringError, match="'A'"):
        tc.build(B, [A], target="cuda")


def _ops_programs():
    n, h, w, m = tc.var("n"), tc.var("h"), tc.var("w"), tc.var("m")
    X = tc.placeholder((n, 3, h, w), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    D = tc.placeholder((n, 6), name="D")
    Wd = tc.placeholder((5, 6), name="Wd")
    bias = tc.placeholder((5,), name="bias")
    S = tc.placeholder((n, m), name="S")
    g = tc.placeholder((m,), name="g")
    E = tc.placeholder((m, 4), name="E")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    T = tc.placeholder((2, 2, 3, 2), name="T")
    K = tc.placeholder((12, n), name="K")
    Q = tc.placeholder((8, n), name="Q")
    ops = tc.ops
    return [
        ([ops.conv2d(X, W, stride=2, padding=1, dilation=2)], [X, W], [X, W]),
        ([ops.conv2d(X, W, stride=1, padding=2)], [X, W], [X, W]),
        ([ops.max_pool2d(X, 3, stride=2, padding=1)], [X], [X]),
        ([ops.avg_pool2d(X, 2, dilation=2)], [X], [X]),
        ([ops.dense(D, Wd, bias)], [D, Wd, bias], [D, Wd, bias]),
        ([ops.softmax(S)], [S], [S]),
        ([ops.log_softmax(S)], [S], [S]),
        ([ops.layer_norm(S, g, g)], [S, g], [S, g]),
        ([ops.take(E, idx)], [E, idx], [E]),
        ([ops.kron_sparse_matmul(T, K, (2, 2, 3, 2))], [T, K], [T, K]),
        ([ops.dct(Q, "dct2")], [Q], [Q]),
        ([ops.dct(Q, "dht", fuse=2)], [Q], [Q]),
    ]


@pytest.mark.parametrize("k", range(12))
def test_op_library_and_gradients_have_no_false_positive(k):
    outs, ins, wrt = _ops_programs()[k]
    grads = tc.gradient(outs[0], wrt)
    assert _checks(outs + grads, ins) == ([], [])


def test_rule_table_gradients_have_no_false_positive():
    from test_autodiff_rules import CASES

    rng = np.random.default_rng(0)
    for name, case in sorted(CASES.items()):
        c = case(rng)
        outs = [c["out"], *tc.gradient(c["out"], c["inputs"])]
        assert _checks(outs, list(c["arrays"])) == ([], []), name


def test_cuda_size_check_runs_before_anything_reaches_the_device():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "codegen" / "cuda"))
    from cuda_emulator import EmulatedDevice, compile_emulated, gxx_available

    n, m = tc.var("n"), tc.var("m")
    A = tc.placeholder((m,), name="A")
    w = tc.placeholder((n,), name="w")
    B = tc.compute((n,), lambda i: A[i] * w[i], name="B")
    kernel = tc.build(B, [A, w], target="cuda", name="size_checked")
    assert len(kernel._bounds.sizes) == 1
    dev = EmulatedDevice()
    with pytest.raises(tc.IndexBoundsError, match=r"m = 2, n = 4 .*'A'.*nothing was run"):
        kernel.launch([np.ones(2, np.float32), np.ones(4, np.float32)], device=dev)
    assert not dev.mem
    if not gxx_available():
        return
    compile_emulated([kernel.source])
    a, x = np.arange(5, dtype=np.float32), np.full(3, 2.0, np.float32)
    np.testing.assert_array_equal(kernel.launch([a, x], device=EmulatedDevice()), [0, 2, 4])


def test_loop_that_runs_only_for_larger_sizes_gives_a_size_check():
    # zero elimination folds guards into loop bounds: for t in [0, select(n >= 2, 4, 0)) the
    # read A[t + 4] is out of range whenever it runs, but the program is correct for n = 1
    from tecomp import expr as E
    from tecomp.loopir import Buffer, BufferLoad, For, LoweredFunc, Store
    from tecomp.passes.bounds_affine import eval_cond

    n, t = E.Var("n"), E.Var("t")
    A = Buffer("A", (E.Const(4, "int64"),), "float32", "input")
    B = Buffer("B", (n,), "float32", "input")
    out = Buffer("out", (), "float32", "output")
    hi = E.Select(E.GE(n, E.Const(2, "int64")), E.Const(4, "int64"), E.Const(0, "int64"),
                  "int64")
    load = BufferLoad(A, (E.Add(t, E.Const(4, "int64"), "int64"),), "float32")
    func = LoweredFunc("f", (A, B), (out,), (n,),
                       For(t, E.Const(0, "int64"), hi, Store(out, (), load, reduce="sum")))
    _, info = add_bounds_checks(func)
    (check,) = info.sizes
    assert [eval_cond(check.cond, {n: v}) for v in range(5)] == [False, False, True, True,
                                                                 True]


def test_interval_bounds_contain_every_value():
    """``value_range`` (the bounds pass's interval proofs) over-approximates: for random
    index expressions of two loop variables (``+ - *``, ``//`` and ``%`` by positive
    constants, min, max), every value over the box lies in the interval, and bit-reversed
    reads are tight enough to prove."""
    from tecomp import expr as E
    from tecomp.passes.value_range import value_range

    def interval(e, ranges):
        return value_range(e, ranges, signed=True)

    rng = np.random.default_rng(7)
    i, j = E.Var("i"), E.Var("j")
    box = {i: (0, 11), j: (3, 9)}

    def make(depth):
        if depth == 0 or rng.random() < 0.25:
            return [i, j, E.Const(int(rng.integers(-5, 9)), "int64")][rng.integers(3)]
        a, b = make(depth - 1), make(depth - 1)
        c = E.Const(int(rng.integers(1, 7)), "int64")
        k = int(rng.integers(7))
        return [E.Add(a, b, "int64"), E.Sub(a, b, "int64"), E.Mul(a, b, "int64"),
                E.FloorDiv(a, c, "int64"), E.Mod(a, c, "int64"), E.Min(a, b, "int64"),
                E.Max(a, b, "int64")][k]

    def value(e, at):
        if isinstance(e, E.Const):
            return e.value
        if isinstance(e, E.Var):
            return at[e]
        a, b = value(e.a, at), value(e.b, at)
        return {E.Add: a + b, E.Sub: a - b, E.Mul: a * b, E.FloorDiv: a // b if b else a,
                E.Mod: a % b if b else 0, E.Min: min(a, b), E.Max: max(a, b)}[type(e)]

    for _ in range(300):
        e = make(4)
        lo, hi = interval(e, box)
        for x in range(0, 12):
            for y in range(3, 10):
                assert lo <= value(e, {i: x, j: y}) <= hi, e
    reversed_bits = sum((E.Mul(E.Mod(E.FloorDiv(i, E.Const(1 << b, "int64"), "int64"),
                                     E.Const(2, "int64"), "int64"),
                               E.Const(1 << (5 - b), "int64"), "int64") for b in range(6)),
                        E.Const(0, "int64"))
    assert interval(reversed_bits, {i: (0, 63)}) == (0, 63)
    assert interval(E.Var("n"), {}) is None  # a size: left to isl
