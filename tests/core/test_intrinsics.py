"""The op table (tecomp.intrinsics): every entry complete, every consumer handling every entry.

Each test is parametrized over the table itself, so an op added to it is checked end to end
without touching this file: its public function and docstring example, constant folding, the
evaluator against the entry's Python function, the LLVM backend against the evaluator, the C
spelling, reverse mode against central finite differences, forward mode, and DOF's
Laplacian against the Hessian method and second differences.  A name the DSL can build as a
``Call`` without an entry fails here too.
"""

from __future__ import annotations

import doctest
import inspect
import math
import re
from dataclasses import replace

import numpy as np
import pytest
from gradcheck import check_gradient

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.cstyle import CStyleRenderer
from tecomp.codegen.llvm import vmath
from tecomp.intrinsics import INTRINSICS, Point

NAMES = sorted(INTRINSICS)
SMOOTH = [n for n in NAMES if not INTRINSICS[n].zero_derivative]
F = "float64"


def ph(shape, name, dtype=F):
    return tc.placeholder(shape, name=name, dtype=dtype)


def sample(name: str, rng: np.random.Generator, shape) -> list[np.ndarray]:
    """Arguments inside the op's domain, away from its kinks (0 for abs, integers for floor
    and ceil), so that finite differences see a smooth function."""
    lo, hi = INTRINSICS[name].domain
    lo, hi = max(lo, -2.0), min(hi, 2.0)
    out = []
    for _ in range(INTRINSICS[name].arity):
        x = rng.uniform(lo + 0.25 if lo == 0 else lo, hi, shape)
        x = np.where(np.abs(x - np.round(x)) < 0.1, x + 0.25, x)  # off integers and 0
        out.append(x)
    if name == "pow":
        out[0] = np.abs(out[0]) + 0.5
    return out


def program(name: str, n: int = 5, dtype: str = F):
    xs = [ph((n,), f"x{k}", dtype) for k in range(INTRINSICS[name].arity)]
    fn = getattr(tc, name)
    Y = tc.compute((n,), lambda i: fn(*(x[i] for x in xs)), name="Y")
    return xs, Y


# ---------------------------------------------------------------------------- completeness
@pytest.mark.parametrize("name", NAMES)
def test_entry_is_complete(name):
    op = INTRINSICS[name]
    assert op.name == name and op.arity in (1, 2)
    assert "Example::" in op.doc and "Derivative" in op.doc
    assert callable(op.fold) and callable(op.numpy)
    op.c.format(*(f"a{k}" for k in range(op.arity)), f="f")  # a template of its arity
    kind, _, fn = op.llvm.partition(".")
    assert kind in ("vmath", "llvm", "libm", "abs"), op.llvm
    if kind == "vmath":
        assert fn in vmath.FUNCTIONS
    kinds = [op.zero_derivative, op.d1 is not None, op.d1_divisor is not None,
             op.partials is not None]
    assert sum(kinds) == 1 and op.differentiable, "exactly one way to differentiate"
    if op.partials is not None:
        assert op.second_partials is not None and op.arity > 1
    elif not op.zero_derivative:
        assert op.arity == 1 and (op.d2 is not None or op.d2_over_d1 is not None)
        u = E.Var("u", F)
        p = Point(op, [u], E.call(name, u))
        assert p.f1.dtype == F and op.second_derivative(p).dtype == F


def test_every_call_the_public_api_builds_has_an_entry():
    u, v = E.Var("u", F), E.Var("v", F)
    built = set()
    for public in tc.__all__:
        fn = getattr(tc, public)
        if getattr(fn, "__module__", None) != "tecomp.dsl":  # the declaration language
            continue
        for args in ((u,), (u, v)):
            try:
                e = fn(*args)
            except (tc.TecompError, TypeError):  # not a function of these args
                continue
            if isinstance(e, E.Call):
                assert e.name in INTRINSICS, public
                built.add(e.name)
    assert (u ** v).name in INTRINSICS
    assert built == set(INTRINSICS)


@pytest.mark.parametrize("name", NAMES)
def test_public_function_and_docstring_example(name):
    fn = getattr(tc, name)
    assert name in tc.__all__ and fn.__name__ == name
    assert list(inspect.signature(fn).parameters) == list(INTRINSICS[name].params)
    assert inspect.getdoc(fn).startswith("Element-wise")
    finder = doctest.DocTestFinder()
    (test,) = finder.find(fn, name, globs={})
    assert test.examples
    result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
    assert result.failed == 0, name


def test_unknown_names_and_wrong_arity_are_declaration_errors():
    x = E.Var("u", F)
    with pytest.raises(tc.DeclarationError, match="unknown math function"):
        E.call("no_such_function", x)
    with pytest.raises(tc.DeclarationError, match="takes 1 argument"):
        E.call("exp", x, x)
    with pytest.raises(tc.DeclarationError, match="needs a float argument"):
        tc.exp(tc.var("n"))


# ---------------------------------------------------------------------------- values
@pytest.mark.parametrize("name", NAMES)
def test_folding_and_evaluator_agree_with_the_python_function(name, rng):
    op = INTRINSICS[name]
    args = sample(name, rng, 6)
    ref = np.array([op.fold(*(float(a[k]) for a in args)) for k in range(6)])
    xs, Y = program(name, 6)
    got = tc.evaluate([Y], dict(zip(xs, args)))[0]
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)
    folded = E.call(name, *(E.Const(float(a[0]), F) for a in args))
    assert isinstance(folded, E.Const) and math.isclose(folded.value, ref[0], rel_tol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_llvm_matches_the_evaluator(name, dtype, rng):
    xs, Y = program(name, 37, dtype)
    args = [a.astype(dtype) for a in sample(name, rng, 37)]
    args[0][:3] = [0.0, -0.0, 3.0] if INTRINSICS[name].domain[0] < 0 else [1.0, 0.5, 3.0]
    ref = tc.evaluate([Y], dict(zip(xs, args)))[0]
    got = tc.build(Y, xs)(*args)
    tol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-8, -1e-8, 0.75, -0.75, 30.0, -30.0, 100.0,
           -100.0, 1000.0, -1000.0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_llvm_matches_the_evaluator_at_special_values(name, dtype):
    """Signed zeros, infinities, NaN, tiny and huge arguments (overflowing tails)."""
    n = len(SPECIAL)
    xs, Y = program(name, n, dtype)
    args = [np.array(SPECIAL, dtype)] + [np.full(n, 1.5, dtype)] * (len(xs) - 1)
    with np.errstate(all="ignore"):
        ref = tc.evaluate([Y], dict(zip(xs, args)))[0]
    got = tc.build(Y, xs)(*args)
    tol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, ref, rtol=tol, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
def test_c_renderer_spells_every_entry(name):
    for dtype, suffix in (("float32", "f"), ("float64", "")):
        r = CStyleRenderer()
        e = E.call(name, *(E.Var(f"v{k}", dtype) for k in range(INTRINSICS[name].arity)))
        assert r.expr(e) == INTRINSICS[name].c.format(
            *(f"v{k}" for k in range(len(e.args))), f=suffix)
    for helper in re.findall(r"tc_\w+", INTRINSICS[name].c):  # defined by the prelude
        assert re.search(rf"\b{helper}\(", r.prelude()), helper


# ---------------------------------------------------------------------------- derivatives
@pytest.mark.parametrize("name", SMOOTH)
def test_gradient_matches_finite_differences(name, rng):
    xs, Y = program(name)
    arrays = dict(zip(xs, sample(name, rng, 5)))
    check_gradient(Y, xs, arrays, rtol=1e-6, atol=1e-8, convergence=True)
    check_gradient(Y, xs, arrays, optimize=True, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", SMOOTH)
def test_jvp_matches_finite_differences(name, rng):
    xs, Y = program(name)
    arrays = dict(zip(xs, sample(name, rng, 5)))
    tans = [ph(x.shape, f"t_{x.name}") for x in xs]
    dirs = {t: rng.standard_normal(5) for t in tans}
    (j,) = tc.evaluate([tc.jvp(Y, xs, tans)], {**arrays, **dirs})

    def f(h):
        return tc.evaluate([Y], {x: arrays[x] + h * dirs[t] for x, t in zip(xs, tans)})[0]
    h = 1e-6
    np.testing.assert_allclose(j, (f(h) - f(-h)) / (2 * h), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", SMOOTH)
def test_laplacian_matches_hessian_and_second_differences(name, rng):
    """u(x) = sum_j w_j f(z_j(x)) with z = W x (x's last axis of 3 entries, a batch of 2):
    every second-order term of the entry is exercised, DOF against the Hessian method."""
    arity = INTRINSICS[name].arity
    fn = getattr(tc, name)
    x = ph((2, 3), "x")
    Ws = [ph((4, 3), f"W{k}") for k in range(arity)]
    w = ph((4,), "w")
    ks = [tc.reduce_axis(3, f"k{k}") for k in range(arity)]
    Z = [tc.compute((2, 4), lambda i, j, W=W, k=k: tc.sum(W[j, k] * x[i, k], axis=k),
                    name=f"z{m}") for m, (W, k) in enumerate(zip(Ws, ks))]
    H = tc.compute((2, 4), lambda i, j: fn(*(z[i, j] + c for z, c in zip(Z, (1.5, 0.5)))),
                   name="h")
    r = tc.reduce_axis(4, "r")
    u = tc.compute((2,), lambda i: tc.sum(w[r] * H[i, r], axis=r), name="u")
    vals = {x: rng.uniform(0.1, 0.3, (2, 3)), w: rng.standard_normal(4)}
    for W in Ws:  # z + 1.5 stays inside (0, inf) and off 0 and the integers: z in (0.1, 0.4)
        vals[W] = rng.uniform(0.2, 0.4, (4, 3))
    dof = tc.evaluate([tc.laplacian(u, x)], vals)[0]
    hess = tc.evaluate([tc.laplacian(u, x, method="hessian")], vals)[0]
    np.testing.assert_allclose(dof, hess, rtol=1e-10, atol=1e-12)

    def f(xv):
        return tc.evaluate([u], {**vals, x: xv})[0]
    h, lap = 1e-3, np.zeros(2)
    for d in range(3):
        e = np.zeros((2, 3))
        e[:, d] = h
        lap += (f(vals[x] + e) - 2 * f(vals[x]) + f(vals[x] - e)) / h**2
    np.testing.assert_allclose(dof, lap, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", [n for n in NAMES if INTRINSICS[n].zero_derivative])
def test_piecewise_constant_ops_have_zero_derivatives(name, rng):
    xs, Y = program(name)
    arrays = dict(zip(xs, sample(name, rng, 5)))
    for g in tc.evaluate(tc.gradient(Y, xs), arrays):
        assert not np.any(g)
    (t,) = xs
    tan = ph(t.shape, "tan")
    assert not np.any(tc.evaluate([tc.jvp(Y, xs, [tan])], {**arrays, tan: np.ones(5)})[0])


def test_an_entry_without_derivative_data_is_refused_by_every_mode(monkeypatch):
    """A hypothetical half-declared op: it evaluates, but each differentiation mode names it
    in a DifferentiationError instead of guessing a derivative."""
    half = replace(INTRINSICS["exp"], name="half_exp", d1=None, d2_over_d1=None)
    assert not half.differentiable
    monkeypatch.setitem(INTRINSICS, "half_exp", half)
    x = ph((3,), "x")
    Y = tc.compute((3,), lambda i: E.call("half_exp", x[i]), name="Y")
    np.testing.assert_allclose(tc.evaluate([Y], {x: np.zeros(3)})[0], np.ones(3))
    with pytest.raises(tc.DifferentiationError, match="half_exp"):
        tc.gradient(Y, [x])
    with pytest.raises(tc.DifferentiationError, match="half_exp"):
        tc.jvp(Y, [x], [ph((3,), "t")])
    with pytest.raises(tc.DifferentiationError, match="half_exp"):
        tc.laplacian(tc.compute((3,), lambda i: Y[i] * x[i], name="U"), x)
