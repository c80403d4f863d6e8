"""Shared test fixtures: a seeded random generator per test, and a private persistent cache.

The whole run (and every interpreter a test starts, which inherits the environment) uses a
fresh temporary cache directory through ``TECOMP_CACHE_DIR``, never the user's own cache:
set here, before any test imports tecomp's caches, and removed at the end of the run.
"""

import os
import shutil
import tempfile
import zlib

import numpy as np
import pytest

_CACHE_DIR = tempfile.mkdtemp(prefix="tecomp-test-cache-")
os.environ["TECOMP_CACHE_DIR"] = _CACHE_DIR
os.environ.pop("TECOMP_CACHE", None)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture
def rng(request):
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)
