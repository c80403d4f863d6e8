"""Shared test fixtures: a seeded random generator per test."""

import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)
