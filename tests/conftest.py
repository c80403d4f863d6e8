"""Shared test fixtures: a seeded random generator per test."""

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = abs(hash(request.node.name)) % (2**31)
    return np.random.default_rng(seed)
