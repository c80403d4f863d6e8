"""Waiting for a forked test child without hanging the test run."""

from __future__ import annotations

import os
import signal
import time


def wait_for(pid: int, seconds: float, what: str) -> int:
    """The exit status of the child ``pid``; a child still running after ``seconds`` (a
    lock or a thread pool held across fork) is killed and fails the test with ``what``."""
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(what)
        time.sleep(0.01)
