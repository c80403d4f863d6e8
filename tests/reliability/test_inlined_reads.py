"""Reads of inlined stages keep their bounds check: the kernel raises where the evaluator does.

Inlining ``P[idx]`` used to drop the read of ``P``: a body that ignores the axis, keeps it in
range or guards it (padding) then gave a value where :func:`tc.evaluate` raised."""

import numpy as np
import pytest

import tecomp as tc
from tecomp.passes.lower import lower


def _temps(outs, ins):
    return [s.buffer.name for s in _walk(lower(outs, ins).body) if type(s).__name__ == "Allocate"
            and s.buffer.scope == "temp"]


def _walk(s):
    yield s
    for name in ("body", "then", "else_"):
        x = getattr(s, name, None)
        if x is not None:
            yield from _walk(x)
    for x in getattr(s, "stmts", ()):
        yield from _walk(x)


def _evaluator_raises(outs, bindings, tensor):
    with pytest.raises(tc.EvaluationError, match=f"read of tensor '{tensor}' out of bounds"):
        tc.evaluate(outs, bindings)


def _constant_columns():
    idx = tc.placeholder((3,), name="idx", dtype="int64")
    F = tc.compute((4, 3), lambda i, j: tc.cast(j % 2, "float32"), name="F")
    G = tc.compute((3,), lambda i: F[idx[i], 2] + F[idx[i], 1], name="G")
    return idx, F, G


def test_gather_from_a_constant_folded_stage_is_checked():
    idx, F, G = _constant_columns()
    kernel = tc.build(G, [idx])
    np.testing.assert_array_equal(kernel(np.array([0, 3, 1])), [1.0, 1.0, 1.0])
    bad = np.array([0, 5, 1])
    _evaluator_raises([G], {idx: bad}, "F")
    with pytest.raises(tc.IndexBoundsError, match=r"tensor 'F' at position \(5, 2\)"):
        kernel(bad)
    assert _temps([G], [idx]) == ["F"]


@pytest.mark.parametrize("bad", [7, -1, 6])
def test_gather_from_a_padded_stage_is_checked(bad):
    X = tc.placeholder((4,), name="X")
    idx = tc.placeholder((3,), name="idx", dtype="int64")
    P = tc.compute((6,), lambda i: tc.if_then_else(tc.all(i >= 1, i <= 4), X[i - 1], 0.0),
                   name="P")
    G = tc.compute((3,), lambda i: P[idx[i]] * 2.0, name="G")
    x = np.arange(1, 5, dtype=np.float32)
    kernel = tc.build(G, [X, idx])
    good = np.array([0, 5, 2])
    np.testing.assert_array_equal(kernel(x, good), tc.evaluate([G], {X: x, idx: good})[0])
    ix = np.array([0, bad, 1])
    _evaluator_raises([G], {X: x, idx: ix}, "P")
    with pytest.raises(tc.IndexBoundsError, match=f"tensor 'P' at position \\({bad},\\)"):
        kernel(x, ix)


def test_guarded_gather_from_an_inlinable_stage_fires_only_where_evaluated():
    X = tc.placeholder((4,), name="X")
    idx = tc.placeholder((3,), name="idx", dtype="int64")
    P = tc.compute((4,), lambda i: X[i % 4] + 1.0, name="P")
    G = tc.compute((3,), lambda i: tc.if_then_else(idx[i] < 4, P[idx[i]], -1.0), name="G")
    x = np.zeros(4, np.float32)
    ix = np.array([0, 9, 3])  # 9 is not read: the guard is false there
    np.testing.assert_array_equal(tc.build(G, [X, idx])(x, ix), [1.0, -1.0, 1.0])
    np.testing.assert_array_equal(tc.evaluate([G], {X: x, idx: ix})[0], [1.0, -1.0, 1.0])


@pytest.mark.parametrize("body", ["padded", "constant", "modular"])
def test_affine_read_out_of_an_inlined_stage_fails_the_build(body):
    X = tc.placeholder((4,), name="X")
    make = {"padded": lambda i: tc.if_then_else(tc.all(i >= 1, i <= 4), X[i - 1], 0.0),
            "constant": lambda i: tc.const(2.0),
            "modular": lambda i: X[i % 4]}[body]
    P = tc.compute((6,), make, name="P")
    H = tc.compute((4,), lambda i: P[i + 3] * 3.0, name="H")
    _evaluator_raises([H], {X: np.zeros(4, np.float32)}, "P")
    with pytest.raises(tc.LoweringError, match=r"tensor 'P' in P\[i \+ 3\]"):
        tc.build(H, [X])


def test_reads_proven_in_range_are_still_inlined(rng):
    X = tc.placeholder((4,), name="X")
    P = tc.compute((6,), lambda i: tc.if_then_else(tc.all(i >= 1, i <= 4), X[i - 1], 0.0),
                   name="P")
    H = tc.compute((4,), lambda i: P[i + 2] - P[5 - i], name="H")  # in [2, 5] and [2, 5]
    G = tc.compute((4,), lambda i: tc.if_then_else(i >= 1, P[i - 1], 0.0) + P[i],
                   name="G")  # guarded: in [0, 2]
    assert _temps([H, G], [X]) == []
    x = rng.standard_normal(4).astype(np.float32)
    for got, want in zip(tc.build([H, G], [X])(x), tc.evaluate([H, G], {X: x})):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_gather_checked_by_a_read_of_the_inlined_body_stays_inlined(rng):
    X = tc.placeholder((3, 5), name="X")
    y = tc.placeholder((3,), name="y", dtype="int64")
    ls = tc.ops.log_softmax(X)
    i = tc.reduce_axis(3, name="i")
    loss = tc.compute((), lambda: tc.sum(-ls[i, y[i]], axis=i), name="loss")
    x = rng.standard_normal((3, 5)).astype(np.float32)
    kernel = tc.build(loss, [X, y])
    good = np.array([4, 0, 2])
    np.testing.assert_allclose(kernel(x, good), tc.evaluate([loss], {X: x, y: good})[0],
                               rtol=1e-5)
    bad = np.array([4, 5, 2])
    with pytest.raises(tc.EvaluationError, match="out of bounds"):
        tc.evaluate([loss], {X: x, y: bad})
    with pytest.raises(tc.IndexBoundsError, match=r"axis 1 index 5 not in \[0, 5\)"):
        kernel(x, bad)
    assert ls.name not in _temps([loss], [X, y])  # X[i, y[i]] is checked in its place


# ------------------------------------------- a stage computed only where a consumer reads it
# The evaluator computes every stage over its whole domain: an index out of range anywhere in
# a stage raises, whether or not the outputs use that element.  Inlining into a reader of
# some of its elements (or absorbing into a crop) must not skip that.
def _partly_read_gather():
    n = tc.var("n")
    X2 = tc.placeholder((5,), name="X2")
    idx5 = tc.placeholder((n,), name="idx5", dtype="int64")
    S4 = tc.compute((n,), lambda i: tc.exp(X2[idx5[i]]) * 2.0, name="S4")
    S6 = tc.compute((2,), lambda i: S4[(i + 1) % n], name="S6")
    x = np.arange(5, dtype=np.float32) / 4
    return S6, [X2, idx5], x


def test_bad_gather_index_where_the_consumer_does_not_read_raises_on_llvm():
    S6, ins, x = _partly_read_gather()
    kernel = tc.build(S6, ins)
    good = np.array([0, 1, 2, 4])
    np.testing.assert_allclose(kernel(x, good), tc.evaluate([S6], dict(zip(ins, [x, good])))[0],
                               rtol=1e-6)
    bad = np.array([0, 1, 2, 9])  # S6 reads S4[1] and S4[2] only
    _evaluator_raises([S6], dict(zip(ins, [x, bad])), "X2")
    with pytest.raises(tc.IndexBoundsError, match=r"tensor 'X2' at position \(9,\)"):
        kernel(x, bad)


def test_bad_gather_index_where_the_consumer_does_not_read_raises_on_cuda():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "codegen" / "cuda"))
    from cuda_emulator import EmulatedDevice, compile_emulated, gxx_available

    S6, ins, x = _partly_read_gather()
    kernel = tc.build(S6, ins, target="cuda", name="partly_read_gather")
    if not gxx_available():
        pytest.skip("g++ is not available")
    compile_emulated([kernel.source])
    good = np.array([3, 1, 2, 0])
    np.testing.assert_allclose(kernel.launch([x, good], device=EmulatedDevice()),
                               tc.evaluate([S6], dict(zip(ins, [x, good])))[0], rtol=1e-6)
    with pytest.raises(tc.IndexBoundsError, match=r"tensor 'X2' at position \(9,\)"):
        kernel.launch([x, np.array([0, 1, 2, 9])], device=EmulatedDevice())


def test_affine_read_out_of_range_where_the_consumer_does_not_read_fails_the_build():
    A = tc.placeholder((4,), name="A")
    P = tc.compute((4,), lambda i: A[i + 1], name="P")
    Q = tc.compute((1,), lambda i: P[0] * 2.0, name="Q")
    _evaluator_raises([Q], {A: np.ones(4, np.float32)}, "A")
    with pytest.raises(tc.LoweringError, match=r"tensor 'A' in A\[i \+ 1\]"):
        tc.build(Q, [A])


def test_undecidable_index_out_of_range_where_the_consumer_does_not_read_raises():
    m = tc.var("m")
    A = tc.placeholder((m,), name="A")
    P = tc.compute((4,), lambda i: A[i * i], name="P")
    Q = tc.compute((1,), lambda i: P[1] + 1.0, name="Q")
    a = np.ones(5, np.float32)
    _evaluator_raises([Q], {A: a}, "A")
    with pytest.raises(tc.IndexBoundsError, match=r"tensor 'A' at position \(9,\)"):
        tc.build(Q, [A])(a)
    np.testing.assert_array_equal(tc.build(Q, [A])(np.ones(10, np.float32)), [2.0])


def test_bad_index_in_the_border_a_crop_drops_raises():
    n = tc.var("n")
    X = tc.placeholder((4, 3), name="X")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    k = tc.reduce_axis(3, name="k")
    P = tc.compute((n,), lambda j: tc.sum(X[idx[j], k], axis=k), name="P")  # a reduction
    C = tc.compute((n - 1,), lambda i: P[i + 1], name="C")  # the crop drops P[0]
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    kernel = tc.build(C, [X, idx])
    good = np.array([0, 3, 1])
    np.testing.assert_array_equal(kernel(x, good), tc.evaluate([C], {X: x, idx: good})[0])
    bad = np.array([7, 3, 1])
    _evaluator_raises([C], {X: x, idx: bad}, "X")
    with pytest.raises(tc.IndexBoundsError, match=r"tensor 'X' at position \(7, 0\)"):
        kernel(x, bad)


def test_gather_read_in_full_stays_inlined():
    n = tc.var("n")
    Em = tc.placeholder((6, 4), name="Em")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    G = tc.compute((n, 4), lambda i, j: Em[idx[i], j], name="G")
    H = tc.compute((n, 4), lambda i, j: G[i, j] * 2.0 + G[i, 3 - j], name="H")
    k = tc.reduce_axis(4, name="k")
    S = tc.compute((n,), lambda i: tc.sum(G[i, k], axis=k), name="S")
    assert _temps([H, S], [Em, idx]) == []
    e = np.arange(24, dtype=np.float32).reshape(6, 4)
    kernel = tc.build([H, S], [Em, idx])
    with pytest.raises(tc.IndexBoundsError, match=r"tensor 'Em' at position \(6, 0\)"):
        kernel(e, np.array([1, 6]))


def test_partly_read_stage_whose_reads_stay_in_range_is_still_inlined():
    n = tc.var("n")
    X = tc.placeholder((n, 4), name="X")
    P = tc.compute((n, 4), lambda i, j: X[i, j] * 3.0 + X[i, 3 - j], name="P")
    Q = tc.compute((n, 2), lambda i, j: P[i, 2 * j] + 1.0, name="Q")  # even columns only
    assert _temps([Q], [X]) == []
