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
