"""tc.pass_log and tc.explain: which passes ran, what they cost, why a gradient is slow."""

from __future__ import annotations

import warnings

import pytest

import tecomp as tc


def _conv():
    X = tc.placeholder((1, 3, 8, 8), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    return X, W, tc.ops.conv2d(X, W, stride=2, padding=1, name="Y")


def test_pass_log_records_passes_times_and_costs():
    X, W, Y = _conv()
    with tc.pass_log() as log:
        grads = tc.gradient(Y, [X, W])
        tc.build(grads, [X, W])
    names = log.names()
    assert names[0] == "autodiff"
    for expected in ("zero_elimination", "lower", "codegen.llvm"):
        assert expected in names
    assert names.index("zero_elimination") < names.index("lower") < names.index("codegen.llvm")
    ze = log.records[names.index("zero_elimination")]
    naive = tc.cost(tc.gradient(Y, [X, W], optimize=False), optimize=False)
    assert ze.cost_before.flops == naive.flops
    assert ze.cost_after.flops < ze.cost_before.flops / 100
    assert all(r.seconds >= 0 for r in log.records)
    text = str(log)
    assert "zero_elimination" in text and str(naive.flops) in text


def test_pass_log_is_off_outside_the_block_and_costs_optional():
    X, W, Y = _conv()
    with tc.pass_log(costs=False) as log:
        tc.gradient(Y, [X, W])
    n = len(log.records)
    assert n >= 2 and all(r.cost_before is None and r.cost_after is None for r in log.records)
    tc.gradient(Y, [X, W])
    assert len(log.records) == n


def test_explain_clean_gradient_has_no_findings():
    X, W, Y = _conv()
    report = tc.explain(tc.gradient(Y, [X, W]), reference=Y)
    assert not report and report.stages >= 2
    assert "nothing looks slower" in str(report)


def test_explain_unoptimized_gradient_and_cost_ratio():
    X, W, Y = _conv()
    naive = tc.gradient(Y, [X, W], optimize=False)
    report = tc.explain(naive, reference=Y)
    assert "unoptimized" in report.kinds() and "cost" in report.kinds()
    assert any("X_grad" in f.tensor for f in report.findings)
    with pytest.warns(tc.PerformanceWarning):
        tc.explain(naive, warn=True)


def test_explain_notes_an_inherent_scatter():
    # the gradient of a gather scatters into data-dependent rows: inherent, O(domain), so a
    # note and no finding (no cost finding either: the forward moves data without flops)
    E = tc.placeholder((10, 4), name="E")
    idx = tc.placeholder((5,), name="idx", dtype="int64")
    T = tc.ops.take(E, idx)
    (dE,) = tc.gradient(T, [E])
    report = tc.explain(dE, reference=T)
    assert not report and report.kinds() == set()
    assert "idx" in str(report) and "the gradient of a gather): inherent" in str(report)


def test_explain_delta_inside_nonlinear_function():
    from tecomp import expr as E  # users meet deltas only in gradients; build one directly

    A = tc.placeholder((6,), name="A")
    B = tc.compute((6, 6), lambda i, j: tc.exp(E.delta(i, j) * A[j]), name="B")
    report = tc.explain(B)
    assert report.kinds() == {"delta"}
    assert "non-linear exp" in str(report) and "delta(i, j)" in str(report)


def test_explain_guard_that_is_not_affine():
    A = tc.placeholder((16,), name="A")
    r = tc.reduce_axis(16, "r")
    S = tc.compute((), lambda: tc.sum(A[r], axis=r, where=tc.eq((r * r) % 5, 1)), name="S")
    report = tc.explain(S)
    assert "guard" in report.kinds()
    assert "r" in str(report)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tc.explain(S)  # warn=False: no warning


def test_explain_conv_gradient_with_a_head_is_clean():
    # each adjoint costs about the forward; the gradient as a whole about twice: no finding,
    # and never a "look at the findings above" with no finding above
    X, W, Y = _conv()
    H = tc.placeholder(Y.shape, name="H")
    report = tc.explain(tc.gradient(Y, [X, W], head=H), reference=Y)
    assert not report, str(report)


def test_explain_cost_finding_names_the_output_and_says_what_to_look_at():
    X, W, Y = _conv()
    (dX,) = tc.gradient(Y, [X], optimize=False)
    report = tc.explain(dX, reference=Y)
    costs = [f for f in report.findings if f.kind == "cost"]
    assert [f.tensor for f in costs] == ["X_grad"]
    assert "look at the findings above" in costs[0].message
    A = tc.placeholder((64, 64), name="A")
    k = tc.reduce_axis(64, name="k")
    cheap = tc.compute((64,), lambda i: A[i, 0] * 2.0, name="cheap")
    dear = tc.compute((64,), lambda i: tc.sum(A[i, k] * A[k, i], axis=k), name="dear")
    alone = tc.explain(dear, reference=cheap)
    assert alone.kinds() == {"cost"}
    assert "look at the findings above" not in str(alone)
    assert "no stage has a delta, guard or avoidable scatter left" in str(alone)


def test_explain_clamped_index_is_not_called_data_dependent():
    A0 = tc.placeholder((10, 10), name="A0")
    k = tc.reduce_axis(4, name="k")
    B = tc.compute((10,), lambda j: tc.sum(A0[tc.minimum(j + k, 9), j], axis=k), name="B")
    report = tc.explain(tc.gradient(B, [A0]), reference=B)
    text = str(report)
    assert "min(j + k, 9)" in text and "clamp" in text
    assert "depends on data" not in text and "destination is data" not in text
    assert not report
