"""Fourier–Motzkin projection of several variables with Chernikov's rule."""

import itertools

import numpy as np

from tecomp.solvers.affine import Affine
from tecomp.solvers.inequalities import (
    Projection,
    eliminate_inequalities,
    normalize_inequalities,
)

BOX = range(-3, 4)


def _random_system(rng, names, rows):
    cons = []
    for _ in range(rows):
        coeffs = {v: int(c) for v, c in zip(names, rng.integers(-3, 4, len(names)))}
        cons.append(Affine(coeffs, int(rng.integers(-4, 9))))
    for v in names:  # a box, so that the integer points are finite
        cons += [Affine.var(v) + 3, 3 - Affine.var(v)]
    return cons


def _holds(cons, env):
    return all(c.evaluate(env) >= 0 for c in cons)


def test_chernikov_projection_contains_every_integer_point_and_drops_rows():
    rng = np.random.default_rng(0)
    names = ["x", "y", "z", "w"]
    kept = plain_rows = 0
    for _ in range(30):
        cons = _random_system(rng, names, 6)
        points = [p for p in itertools.product(BOX, repeat=4)
                  if _holds(cons, dict(zip(names, p)))]
        proj = Projection(cons)
        plain = normalize_inequalities(cons)
        for k, v in enumerate(names[:3], start=1):
            if not proj.eliminate(v):
                assert not points  # empty only when there is no integer point
                break
            if plain is not None:
                plain, _ = eliminate_inequalities(plain, v)
            if plain is not None:
                kept += len(proj.constraints)
                plain_rows += len(plain)
            # the projection of every integer point satisfies what is left
            for p in points:
                assert _holds(proj.constraints, dict(zip(names[k:], p[k:])))
    assert kept < plain_rows  # the rule removed rows that plain pairing keeps
