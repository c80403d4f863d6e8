"""Gradient checking against central finite differences, with the reference evaluator.

``check_gradient`` compares the directional derivative ``⟨grad, v⟩`` (from ``tc.gradient``)
with ``(f(x + h v) - f(x - h v)) / 2h`` for one random direction ``v``, where
``f(x) = Σ head · output(x)`` evaluated in float64 with ``tc.evaluate`` (JAX's ``check_vjp``).
With ``convergence=True`` it also checks that the Taylor remainder
``|f(x + h v) - f(x) - h ⟨grad, v⟩|`` shrinks at second order in ``h`` — a wrong gradient leaves
a first-order remainder (loopy's ``test_diff``).

Declare the differentiated placeholders as float64 for tight tolerances.  Works on naive and
optimised gradients alike (``optimize=``), so zero elimination can reuse it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

import tecomp as tc


def _scalar(output: tc.Tensor, bindings: dict, head: np.ndarray | None) -> float:
    (y,) = tc.evaluate([output], bindings)
    y = np.asarray(y, dtype=np.float64)
    return float(np.sum(y if head is None else head * y))


def _with_sizes(arrays: Mapping[Any, Any]) -> dict:
    """The bindings plus every symbolic size that a bound placeholder's shape determines
    (an optimised gradient may no longer read the placeholder that bound it)."""
    out = dict(arrays)
    for t, a in arrays.items():
        if isinstance(t, tc.Tensor):
            for s, n in zip(t.shape, np.shape(a)):
                if isinstance(s, tc.Var) and s not in out:
                    out[s] = int(n)
    return out


def check_gradient(output: tc.Tensor, inputs: Sequence[tc.Tensor],
                   arrays: Mapping[Any, Any], *, head: np.ndarray | None = None,
                   optimize: bool = False, rtol: float = 1e-6, atol: float = 1e-9,
                   step: float = 1e-5, seed: int = 0, convergence: bool = False,
                   overrides: Mapping[Any, Any] | None = None) -> dict[str, float]:
    """Check ``tc.gradient(output, inputs)`` in one random direction; return the figures.

    ``arrays`` binds every placeholder (and symbolic size) the output needs; ``head`` is an
    array of ``output``'s shape (None: ones).  Raises AssertionError (with the seed and the
    figures) on a mismatch.
    """
    rng = np.random.default_rng(seed)
    bindings = _with_sizes(arrays)
    head_t = None
    if head is not None:
        head = np.asarray(head, dtype=tc.dtypes.to_numpy(output.dtype))
        head_t = tc.placeholder(output.shape, name="head", dtype=output.dtype)
        bindings[head_t] = head
    grads = tc.gradient(output, list(inputs), head_t, optimize=optimize, overrides=overrides)
    values = tc.evaluate(grads, bindings)
    base = {t: np.asarray(bindings[t], dtype=np.float64) for t in inputs}
    dirs = {t: rng.standard_normal(base[t].shape) for t in inputs}
    dot = 0.0
    scale = 0.0
    for t, g in zip(inputs, values):
        assert g.shape == base[t].shape, f"gradient of {t.name}: shape {g.shape}"
        assert g.dtype == tc.dtypes.to_numpy(t.dtype), f"gradient of {t.name}: dtype {g.dtype}"
        dot += float(np.sum(g.astype(np.float64) * dirs[t]))
        scale += float(np.sum(np.abs(g.astype(np.float64) * dirs[t])))

    def f(h: float) -> float:
        b = dict(bindings)
        for t in inputs:
            b[t] = base[t] + h * dirs[t]
        return _scalar(output, b, head)

    fd = (f(step) - f(-step)) / (2 * step)
    tol = atol + rtol * max(abs(dot), abs(fd), scale)
    figures = {"directional": dot, "finite_difference": fd, "tolerance": tol}
    assert abs(dot - fd) <= tol, (
        f"gradient check failed (seed {seed}): <grad, v> = {dot!r}, central difference = "
        f"{fd!r}, |diff| = {abs(dot - fd)!r} > {tol!r}")
    if convergence:
        figures["order"] = _remainder_order(f, dot, seed)
    return figures


def _remainder_order(f, dot: float, seed: int) -> float:
    """The observed order of ``f(h) - f(0) - h·dot`` as h halves (2 for a right gradient)."""
    f0 = f(0.0)
    hs = (1e-2, 5e-3, 2.5e-3)
    rs = [abs(f(h) - f0 - h * dot) for h in hs]
    noise = 1e-12 * max(1.0, abs(f0))
    if max(rs) <= noise * 1e3:  # f is linear along v: nothing left to measure
        return float("inf")
    orders = [np.log2(rs[n] / max(rs[n + 1], noise)) for n in range(len(rs) - 1)]
    order = float(orders[-1])  # the smallest steps, where the leading term dominates
    assert order > 1.5, (
        f"Taylor remainder does not shrink at second order (seed {seed}): remainders {rs} "
        f"for steps {hs}; observed orders {orders}")
    return order
