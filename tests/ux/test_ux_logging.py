"""The "tecomp" logger: per-phase timings, TECOMP_LOG, progress of slow CLI steps."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

import tecomp as tc
from tecomp import logs


def _fresh_program():
    """A matmul with a constant nobody compiled before: nothing comes from a cache."""
    scale = 1.0 + int(uuid.uuid4().hex[:6], 16) / 2**24
    A = tc.placeholder((8, 8), name="A")
    k = tc.reduce_axis(8, name="k")
    C = tc.compute((8, 8), lambda i, j: tc.sum(A[i, k] * A[k, j], axis=k) * scale, name="C")
    return A, C, scale


def test_each_phase_logs_its_time_at_debug(caplog):
    A, C, scale = _fresh_program()
    with caplog.at_level(logging.DEBUG, logger="tecomp"):
        (dA,) = tc.gradient(C, [A])
        kernel = tc.build([C, dA], [A])
    ends = {r.phase: r.seconds for r in caplog.records
            if r.name == "tecomp.phases" and hasattr(r, "seconds")}
    for phase in ("autodiff", "zero_elimination", "lower", "codegen.llvm", "schedule", "llvm"):
        assert phase in ends and ends[phase] >= 0, sorted(ends)
    assert ends["codegen.llvm"] >= ends["llvm"]
    a = np.eye(8, dtype=np.float32)
    np.testing.assert_allclose(kernel(a)[0], a * np.float32(scale), rtol=1e-6)


def test_nothing_is_logged_by_default(caplog):
    A, C, _ = _fresh_program()
    with caplog.at_level(logging.WARNING, logger="tecomp"):
        tc.gradient(C, [A])
    assert not [r for r in caplog.records if r.name.startswith("tecomp")]


def test_tecomp_log_environment_variable():
    code = ("import tecomp as tc\n"
            "A = tc.placeholder((4,), name='A')\n"
            "B = tc.compute((4,), lambda i: A[i] * 2.0, name='B')\n"
            "tc.lower(tc.gradient(B, [A]), [A])\n")
    env = dict(os.environ, TECOMP_LOG="info")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "[tecomp.phases] INFO autodiff:" in run.stderr
    assert "[tecomp.phases] INFO lower:" in run.stderr and " ms" in run.stderr
    env["TECOMP_LOG"] = "debug"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert "DEBUG lower ..." in run.stderr
    env.pop("TECOMP_LOG")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and "tecomp.phases" not in run.stderr


def test_configure_from_environment_replaces_its_handler():
    try:
        first = logs.configure_from_environment("debug")
        second = logs.configure_from_environment("INFO")
        assert first is not None and second is not None
        ours = [h for h in logs.LOGGER.handlers if isinstance(h, type(second))]
        assert ours == [second] and second.level == logging.INFO
        with pytest.warns(UserWarning, match="TECOMP_LOG='loud' is not one of"):
            assert logs.configure_from_environment("loud") is None
    finally:
        logs.configure_from_environment("")
        logs.LOGGER.setLevel(logging.NOTSET)
    assert not [h for h in logs.LOGGER.handlers if isinstance(h, logging.StreamHandler)
                and not isinstance(h, logging.NullHandler)]


def test_progress_shows_phases_of_slow_steps_only():
    A, C, _ = _fresh_program()
    quiet = io.StringIO()
    with logs.progress(quiet, after=3600.0):
        tc.gradient(C, [A])
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    A, C, _ = _fresh_program()  # the first one's gradient is in the persistent cache now
    with logs.progress(shown, after=0.0):
        tc.lower(tc.gradient(C, [A]), [A])
    text = shown.getvalue()
    assert "autodiff ..." in text and "lower: " in text and " ms" in text
    assert logs.PHASES.level == logging.NOTSET  # restored
