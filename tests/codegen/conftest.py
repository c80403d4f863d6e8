"""Fixtures of the cache tests: a persistent cache in a temporary directory, and the names of
the pipeline phases the ``"tecomp.phases"`` logger reports."""

from __future__ import annotations

import logging

import pytest

from tecomp.codegen import disk_cache as dc


@pytest.fixture
def store(tmp_path):
    old = dc.set_default_cache(tmp_path)
    yield dc.default_cache()
    dc.set_default_cache(old)


class Phases(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.names = []

    def emit(self, record):
        if hasattr(record, "seconds"):
            self.names.append(record.phase)


@pytest.fixture
def phases():
    h = Phases()
    log = logging.getLogger("tecomp.phases")
    old = log.level
    log.addHandler(h)
    log.setLevel(logging.DEBUG)
    yield h.names
    log.removeHandler(h)
    log.setLevel(old)
