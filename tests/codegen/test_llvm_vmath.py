"""Accuracy of the LLVM backend's inline math (``codegen/llvm/vmath.py``) against NumPy.

Errors are measured in ulps of the correctly rounded result, computed in higher precision
(float64 for float32 inputs is not enough for the last bit of a double, so ``np.longdouble``
is the reference for both).  Special values must match NumPy exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc

# documented maximum errors (codegen/llvm/vmath.py); measured up to 0.9, 0.8, 2.8, 2.3, 2.3
MAX_ULP = {"exp": 1.0, "log": 1.0, "tanh": 3.0, "sigmoid": 3.0, "softplus": 3.0}

_KERNELS: dict[tuple[str, str], tc.Kernel] = {}


def kernel(name: str, dtype: str) -> tc.Kernel:
    key = (name, dtype)
    if key not in _KERNELS:
        n = tc.var("n")
        X = tc.placeholder((n,), name="X", dtype=dtype)
        Y = tc.compute((n,), lambda i: getattr(tc, name)(X[i]), name="Y")
        _KERNELS[key] = tc.build(Y, [X])
    return _KERNELS[key]


def reference(name: str, x: np.ndarray) -> np.ndarray:
    xl = x.astype(np.longdouble)
    with np.errstate(all="ignore"):
        if name == "sigmoid":
            return 1 / (1 + np.exp(-xl))
        if name == "softplus":
            return np.logaddexp(0, xl)
        return getattr(np, name)(xl)


def ulp_error(got: np.ndarray, ref: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
    spacing = np.spacing(np.abs(rounded)).astype(np.longdouble)
    with np.errstate(all="ignore"):
        return np.abs(got.astype(np.longdouble) - ref) / spacing


def samples(name: str, dtype: str, rng: np.random.Generator) -> np.ndarray:
    big = 760.0 if dtype == "float64" else 110.0
    tiny = np.finfo(dtype).smallest_subnormal
    if name == "exp":
        parts = [rng.uniform(-big, big, 40000), rng.uniform(-1, 1, 20000)]
    elif name == "log":
        lo, hi = (-744, 709) if dtype == "float64" else (-103, 88)
        parts = [np.exp(rng.uniform(lo, hi, 40000)), rng.uniform(0.5, 2, 20000),
                 tiny * rng.integers(1, 1 << 20, 2000)]
    elif name == "tanh":
        parts = [rng.uniform(-25, 25, 40000), rng.uniform(-1e-3, 1e-3, 10000),
                 rng.uniform(-1, 1, 10000), tiny * rng.integers(-1000, 1000, 100)]
    elif name == "softplus":  # both tails: exp(x) there, x + exp(-x) here; subnormal results
        parts = [rng.uniform(-big, big, 40000), rng.uniform(-5, 5, 20000),
                 rng.uniform(-1e-6, 1e-6, 2000)]
    else:  # sigmoid: where 1 + exp(-x) is finite (beyond, the formula itself gives 0)
        lo = -700.0 if dtype == "float64" else -88.0
        parts = [rng.uniform(lo, 100, 40000), rng.uniform(-5, 5, 20000)]
    x = np.concatenate(parts).astype(dtype)
    return x[np.isfinite(x)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "softplus"])
def test_max_ulp_error(name: str, dtype: str) -> None:
    rng = np.random.default_rng(7)
    x = samples(name, dtype, rng)
    got = kernel(name, dtype)(x)
    ref = reference(name, x)
    with np.errstate(all="ignore"):
        finite = np.isfinite(ref.astype(dtype))
    assert np.array_equal(np.isfinite(got), finite), x[np.isfinite(got) != finite][:5]
    err = ulp_error(got[finite], ref[finite], dtype)
    worst = int(np.argmax(err))
    assert err[worst] <= MAX_ULP[name], (x[finite][worst], got[finite][worst], err[worst])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "softplus"])
def test_special_values_match_numpy(name: str, dtype: str) -> None:
    fi = np.finfo(dtype)
    over = np.log(fi.max)  # the overflow threshold of exp
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, fi.smallest_subnormal,
                  -fi.smallest_subnormal, fi.tiny, fi.max, -fi.max, 1.0, -1.0,
                  over, np.nextafter(over, np.inf), -over, 2 * over, -2 * over], dtype=dtype)
    with np.errstate(all="ignore"):
        want = reference(name, x).astype(dtype)
        if name == "sigmoid":  # the evaluator's formula in the dtype: 0 where exp(-x) is inf
            want = (1 / (1 + np.exp(-x))).astype(dtype)
    got = kernel(name, dtype)(x)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (x, got, want)
    ok = np.isnan(want) | (got == want) | (ulp_error(got, reference(name, x), dtype)
                                           <= MAX_ULP[name])
    assert ok.all(), (x[~ok], got[~ok], want[~ok])
    zeros = want == 0
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros])), (x, got, want)


@pytest.mark.parametrize("name", ["exp", "softplus"])
def test_vectorised(name: str) -> None:
    """The loop over ``exp`` (``softplus``) vectorises (no scalar libm call remains)."""
    src = kernel(name, "float32").source
    assert "x float>" in src and "@expf" not in src and "llvm.exp." not in src
    assert "@log" not in src


# erf: documented below 2 ulp in float, 1.5 in double (measured 1.3, 1.1); the reference is
# mpmath at 40 digits (float64 inputs) or SciPy's double erf (float32 inputs, exact to far
# below an ulp of a float)
ERF_MAX_ULP = {"float32": 2.0, "float64": 1.5}


def erf_reference(x: np.ndarray) -> list:
    import mpmath

    with mpmath.workdps(40):
        return [mpmath.erf(mpmath.mpf(float(v))) for v in x]


def erf_ulp_error(got: np.ndarray, x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float32":
        from scipy.special import erf

        ref = erf(x.astype(np.float64))
        spacing = np.spacing(np.abs(ref.astype(np.float32))).astype(np.float64)
        return np.abs(got.astype(np.float64) - ref) / spacing
    import mpmath

    refs = erf_reference(x)
    spacing = np.spacing(np.abs(np.array([float(r) for r in refs])))
    with mpmath.workdps(40):
        return np.array([float(abs(mpmath.mpf(float(g)) - r)) for g, r in zip(got, refs)]) \
            / spacing


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erf_max_ulp_error(dtype: str) -> None:
    rng = np.random.default_rng(11)
    count = 40000 if dtype == "float32" else 6000
    tiny = np.finfo(dtype).smallest_subnormal
    # both sides of the split at 0.921875, the tails up to and past saturation (|x| > 3.94 / 6),
    # tiny and subnormal inputs
    x = np.concatenate([rng.uniform(-7, 7, count), rng.uniform(-1.2, 1.2, count // 4),
                        rng.uniform(0.9, 0.95, count // 8), rng.uniform(3.9, 4.0, count // 8),
                        rng.uniform(5.9, 6.1, count // 8), rng.uniform(-1e-3, 1e-3, 500),
                        tiny * rng.integers(-1000, 1000, 100)]).astype(dtype)
    got = kernel("erf", dtype)(x)
    assert np.all(np.abs(got) <= 1)
    err = erf_ulp_error(got, x, dtype)
    worst = int(np.argmax(err))
    assert err[worst] <= ERF_MAX_ULP[dtype], (x[worst], got[worst], err[worst])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erf_special_values(dtype: str) -> None:
    fi = np.finfo(dtype)
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, fi.smallest_subnormal,
                  -fi.smallest_subnormal, fi.tiny, fi.max, -fi.max, 6.0, -30.0, 3.9375, -3.9375],
                 dtype=dtype)
    got = kernel("erf", dtype)(x)
    want = np.array([0.0, -0.0, 1.0, -1.0, np.nan], dtype=dtype)
    assert np.array_equal(got[:5], want, equal_nan=True)
    assert np.array_equal(np.signbit(got[:2]), [False, True])
    assert np.array_equal(got[8:12], np.array([1, -1, 1, -1], dtype=dtype))
    assert (erf_ulp_error(got[12:], x[12:], dtype) <= ERF_MAX_ULP[dtype]).all()
    assert (erf_ulp_error(got[5:8], x[5:8], dtype) <= ERF_MAX_ULP[dtype]).all()
    assert np.signbit(got[6]) and not np.signbit(got[5])


def test_erf_vectorised() -> None:
    for dtype, lane in (("float32", "x float>"), ("float64", "x double>")):
        src = kernel("erf", dtype).source
        assert lane in src and "@erf" not in src


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("ldexp", [True, False])
def test_exp_either_scaling(monkeypatch, store, ldexp: bool, dtype: str) -> None:
    """``exp``'s scaling by ``2^n``: ``llvm.ldexp`` (one ``vscalef`` on AVX-512 hosts) or two
    multiplications by powers of two; both within the bound, subnormal results and the
    overflow threshold included."""
    from tecomp.codegen.cache import KERNELS
    from tecomp.codegen.llvm import parts, vmath

    monkeypatch.setattr(vmath, "LDEXP", ldexp)  # ``store``: a fresh persistent cache
    KERNELS.clear()
    parts.BODIES.clear()  # bodies are keyed by their loops, which the switch does not change
    try:
        n = tc.var("n")
        X = tc.placeholder((n,), name="X", dtype=dtype)
        k = tc.build(tc.compute((n,), lambda i: tc.exp(X[i]), name="Y"), [X])
        assert ("llvm.ldexp" in k.source) == (ldexp and vmath._scalef())
        fi = np.finfo(dtype)
        over = float(np.log(fi.max))
        sub = float(np.log(fi.tiny))  # below: subnormal results
        rng = np.random.default_rng(11)
        x = np.concatenate([rng.uniform(-1.05 * -sub, 1.05 * over, 40000),
                            rng.uniform(sub - 30, sub, 20000), [over, -over, sub]]).astype(dtype)
        got = k(x)
        ref = reference("exp", x)
        with np.errstate(all="ignore"):
            finite = np.isfinite(ref.astype(dtype))
        assert np.array_equal(np.isfinite(got), finite)
        assert ulp_error(got[finite], ref[finite], dtype).max() <= MAX_ULP["exp"]
    finally:
        KERNELS.clear()
        parts.BODIES.clear()


@pytest.mark.parametrize("compact", [True, False])
def test_erf_either_float_form(monkeypatch, store, compact: bool) -> None:
    """float ``erf`` in either form (``vmath.ERF_COMPACT``: the one with the fewest constants,
    or the previous one): within the bound on both sides of the split and past saturation,
    the sign of zero, infinities and NaN; GELU, whose loop the compact form was made for,
    against float64."""
    from tecomp.codegen.cache import KERNELS
    from tecomp.codegen.llvm import parts, vmath

    monkeypatch.setattr(vmath, "ERF_COMPACT", compact)  # ``store``: a fresh persistent cache
    KERNELS.clear()
    parts.BODIES.clear()  # bodies are keyed by their loops, which the switch does not change
    try:
        n = tc.var("n")
        X = tc.placeholder((n,), name="X")
        k = tc.build(tc.compute((n,), lambda i: tc.erf(X[i]), name="Y"), [X])
        c = 1.0 / np.sqrt(2.0)
        g = tc.build(tc.compute((n,), lambda i: 0.5 * X[i] * (1.0 + tc.erf(X[i] * c)),
                                name="G"), [X])
        rng = np.random.default_rng(5)
        x = np.concatenate([rng.uniform(-7, 7, 20000), rng.uniform(0.9, 0.95, 5000),
                            rng.uniform(-0.95, -0.9, 5000), rng.uniform(3.9, 4.0, 5000),
                            rng.uniform(-1e-3, 1e-3, 500),
                            np.finfo(np.float32).smallest_subnormal * rng.integers(-99, 99, 100),
                            [0.921875, -0.921875, 3.9375, np.nextafter(0.921875, 0)]]
                           ).astype(np.float32)
        got = k(x)
        assert np.all(np.abs(got) <= 1)
        assert erf_ulp_error(got, x, "float32").max() <= ERF_MAX_ULP["float32"]
        special = k(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30], np.float32))
        assert np.array_equal(special, [0.0, -0.0, 1.0, -1.0, np.nan, 1.0, -1.0], equal_nan=True)
        assert np.array_equal(np.signbit(special[:2]), [False, True])
        from scipy.special import erf

        x64 = x.astype(np.float64)
        want = 0.5 * x64 * (1.0 + erf(x64 * c))
        assert np.abs(g(x) - want).max() <= 4e-7 * max(1.0, np.abs(want).max())
    finally:
        KERNELS.clear()
        parts.BODIES.clear()
