"""Every case of the autodiff table, optimised: finite differences still agree, and no
Kronecker delta is left in any optimised gradient."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import op_exprs, topo_order, walk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autodiff"))
from test_autodiff_rules import CASES  # noqa: E402


def _heads(c, rng):
    out = c["out"]
    if c.get("head"):
        (y,) = tc.evaluate(out, c["arrays"])
        return rng.standard_normal(np.shape(y))
    if "head_value" in c:
        (y,) = tc.evaluate(out, c["arrays"])
        return np.full(np.shape(y), c["head_value"])
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimised_gradient_matches_finite_differences(name, rng):
    c = CASES[name](rng)
    check_gradient(c["out"], c["inputs"], c["arrays"], head=_heads(c, rng), optimize=True,
                   seed=int(rng.integers(1 << 30)), convergence=False,
                   rtol=c.get("rtol", 1e-6), step=c.get("step", 1e-5), atol=c.get("atol", 1e-9))


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_delta_left(name, rng):
    c = CASES[name](rng)
    grads = tc.gradient(c["out"], c["inputs"])
    left = [x for t in topo_order(grads) for e in op_exprs(t) for x in walk(e)
            if isinstance(x, E.Delta)]
    assert not left, f"{name}: {left[:3]}\n{tc.show(grads)}"
