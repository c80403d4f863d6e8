"""Logging: the ``"tecomp"`` logger hierarchy, per-phase timings, ``TECOMP_LOG``.

tecomp logs through :mod:`logging` only; it attaches no handler unless asked to.

* ``tecomp.phases`` — a DEBUG record when a phase starts (``lower ...``) and one when it
  ends (``lower: 12.3 ms``).  The pipeline's phases -- differentiation (``autodiff``),
  ``zero_elimination``, ``simplify``, ``lower``, code generation (``codegen.llvm``,
  ``codegen.cuda``) -- log their end at INFO; the steps inside code generation
  (``schedule``, the compilers ``llvm``, ``nvrtc``, ``nvcc``) at DEBUG.  Each record carries
  ``phase`` and, at the end, ``seconds`` attributes.
* ``TECOMP_LOG=info`` (or ``debug``, ``warning``) attaches one stderr handler at that level
  to the ``"tecomp"`` logger when tecomp is imported, so timings show without code::

      TECOMP_LOG=debug python train.py

  From code, the usual ``logging.getLogger("tecomp").setLevel(logging.DEBUG)`` plus a
  handler does the same.
* :func:`progress` shows the phases of a slow step on a stream once it has run for about two
  seconds (the command line wraps its builds in it).

Timing costs nothing when DEBUG is disabled for ``tecomp.phases``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from contextlib import contextmanager
from typing import IO, Iterator

LOGGER = logging.getLogger("tecomp")
PHASES = logging.getLogger("tecomp.phases")
LOGGER.addHandler(logging.NullHandler())

ENV = "TECOMP_LOG"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


@contextmanager
def timed(phase: str, level: int = logging.DEBUG) -> Iterator[None]:
    """Log the start of ``phase`` at DEBUG and its wall time at ``level`` (the pipeline's
    phases: INFO; the steps inside them: DEBUG) on ``tecomp.phases``."""
    if not PHASES.isEnabledFor(level):
        yield
        return
    PHASES.debug("%s ...", phase, extra={"phase": phase})
    t0 = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - t0
        PHASES.log(level, "%s: %.1f ms", phase, seconds * 1e3,
                   extra={"phase": phase, "seconds": seconds})


class _EnvHandler(logging.StreamHandler):
    """The stderr handler that ``TECOMP_LOG`` attaches (one at most)."""


def configure_from_environment(value: str | None = None) -> logging.Handler | None:
    """Attach a stderr handler to ``"tecomp"`` at the level ``TECOMP_LOG`` names (if any).

    Called when tecomp is imported; calling it again replaces the handler, never adds a
    second.  Returns the handler, or None when the variable is unset or empty.
    """
    value = os.environ.get(ENV, "") if value is None else value
    for h in [h for h in LOGGER.handlers if isinstance(h, _EnvHandler)]:
        LOGGER.removeHandler(h)
    if not value.strip():
        return None
    level = _LEVELS.get(value.strip().lower())
    if level is None:
        warnings.warn(f"{ENV}={value!r} is not one of {', '.join(_LEVELS)}; ignored",
                      stacklevel=2)
        return None
    handler = _EnvHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("[%(name)s] %(levelname)s %(message)s"))
    LOGGER.addHandler(handler)
    LOGGER.setLevel(min(level, LOGGER.level or logging.WARNING))
    return handler


class _Progress(logging.Handler):
    """Writes phase records to a stream once the step has run for ``after`` seconds."""

    def __init__(self, stream: IO[str], after: float) -> None:
        super().__init__(logging.DEBUG)
        self.stream, self.after, self.t0 = stream, after, time.perf_counter()
        self.pending: list[logging.LogRecord] = []
        self.shown = False

    def emit(self, record: logging.LogRecord) -> None:
        self.pending.append(record)
        if time.perf_counter() - self.t0 < self.after:
            return
        if not self.shown:
            self.stream.write("\n")
            self.shown = True
        for r in self.pending:
            self.stream.write(f"    {r.getMessage()}\n")
        self.pending.clear()
        self.stream.flush()


@contextmanager
def progress(stream: IO[str] | None = None, after: float = 2.0) -> Iterator[None]:
    """Inside the block, phases that end ``after`` seconds or more into it are written to
    ``stream`` (stdout by default), with the earlier ones: quick steps stay quiet."""
    handler = _Progress(stream or sys.stdout, after)
    old_level = PHASES.level
    PHASES.addHandler(handler)
    PHASES.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        PHASES.removeHandler(handler)
        PHASES.setLevel(old_level)
