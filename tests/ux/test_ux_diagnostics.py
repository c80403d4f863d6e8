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


def test_explain_reports_scatter():
    E = tc.placeholder((10, 4), name="E")
    idx = tc.placeholder((5,), name="idx", dtype="int64")
    (dE,) = tc.gradient(tc.ops.take(E, idx), [E])
    report = tc.explain(dE)
    assert report.kinds() == {"scatter"}
    assert "idx" in str(report)


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
