"""Vectorisable math functions in LLVM IR: exp, log, tanh, sigmoid, softplus, erf for float
and double.

The C library's ``expf``/``logf``/``tanhf`` are scalar calls, so a loop that calls them never
vectorises.  Here each function is an ``internal alwaysinline`` LLVM function of straight-line
code (no branches, no calls: selects, integer bit manipulation, ``llvm.rint``/``llvm.fabs``/
``llvm.copysign``), so after inlining the loop vectoriser turns it into AVX code.  The float
operations inside carry no fast-math flags except ``contract`` (FMA), since reassociation
would destroy the extra precision of the range reductions.

Algorithms (the classic ones of Cody & Waite, "Software Manual for the Elementary Functions",
1980, and of Sun's fdlibm as described in its comments):

* ``exp(x)``: ``n = rint(x / ln2)``, ``r = x - n*ln2_hi - n*ln2_lo`` (two-part ln2, so that
  ``n*ln2_hi`` is exact), ``|r| <= ln2/2``; ``exp(r)`` by its Taylor polynomial (degree 7 for
  float, 13 for double: truncation error below 1e-8 resp. 5e-18 relative); the result is
  ``exp(r) * 2^(n//2) * 2^(n - n//2)``: two exact power-of-two scalings, so results that
  overflow become inf and results in the subnormal range are rounded once.  Where the code is
  for AVX-512 (:func:`for_host`), the scaling is ``llvm.ldexp(exp(r), n)``, which LLVM makes
  one ``vscalefps``/``vscalefpd`` (the same single rounding; on AVX2 it would be a C library
  call per element): 8 of about 30 vector operations become 2, the exponent's conversion back
  to float and the scaling (``LDEXP``; ``python -m
  benchmarks.ab_cpu_steps --only ldexp``, one core: softmax 1.10-1.19x, softmax
  cross-entropy 1.15-1.17x faster).  ``x`` is clamped
  to at most 89 (float) or 710 (double), beyond the overflow threshold, and below -104
  (-746), past the underflow threshold, the result is 0 (computed from ``x = 0`` and
  replaced, so that no subnormal is made), which keeps ``n`` an integer of a few bits.
  NaN gives NaN.
* ``log(x)``: subnormal inputs are scaled by 2^24 (2^54); ``x = 2^k * m`` with ``m`` in
  [sqrt(1/2), sqrt(2)) taken from the bits (adding ``1 - sqrt(1/2)``'s bit pattern moves the
  exponent boundary to sqrt(1/2)); ``f = m - 1``, ``s = f / (2 + f)``, and fdlibm's
  ``log(1+f) = f - f^2/2 + s*(f^2/2 + R(s^2))`` with ``R`` the Taylor series of
  ``2 atanh(s)/s - 2`` (terms up to ``s^8``/``s^20``); ``log(x) = k*ln2_hi + (log(1+f) +
  k*ln2_lo)``.  ``log(0) = -inf``, ``log(x < 0) = NaN``, ``log(inf) = inf``, NaN gives NaN.
* ``tanh(x) = sign(x) * e / (e + 2)`` with ``e = expm1(2|x|)``, where ``expm1(y) = 2^n * q +
  (2^n - 1)`` with ``q = expm1(r)`` by its Taylor polynomial: no cancellation for small
  ``|x|`` (``tanh(x) ~ x`` to the last bit, signed zero kept).  ``|x|`` beyond 9 (float) or
  19.1 (double) gives ``+-1``.
* ``sigmoid(x) = 1 / (1 + exp(-x))`` with the ``exp`` above: the reference evaluator's formula.
* ``softplus(x) = max(x, 0) + log1p(exp(-|x|))``: ``exp(-|x|)`` never overflows, and
  ``log1p(t)`` for ``t`` in [0, 1] is ``log(u) * t / (u - 1)`` with ``u = 1 + t`` (``t`` where
  ``u == 1``): the rounding error of ``1 + t`` cancels in the quotient (Goldberg, "What every
  computer scientist should know about floating-point arithmetic", 1991, Theorem 4).

* ``erf(x)``: for ``|x| < 0.921875``, ``x + x*R(x^2)`` with ``R`` a polynomial fit of
  ``erf(x)/x - 1`` in ``x^2`` (degree 5 for float, 11 for double; the leading ``x`` is exact,
  so tiny and subnormal inputs come out as ``x * 2/sqrt(pi)`` rounded once).  Beyond, up to
  ``top`` (3.9375 for float, 6 for double), past which ``erf`` rounds to ``+-1``, a fit in a
  variable centred on the interval.  Float: ``sign(x) * P(min(v, half))`` with ``v = |x| -
  mid`` (``mid`` and ``half`` the interval's centre and half-width) and ``P`` a degree-14 fit
  of ``erf`` itself (no ``exp``: GELU's erf form costs about what its tanh form does;
  ``P(half)`` evaluates to 1 exactly, so the clamp is the saturation), and the split tested
  on the sign bit of ``v + half``: the loop holds 24 constants (the two polynomials'
  21 coefficients, ``mid``, ``half`` and the sign mask), which leaves room in AVX-512's 32
  vector registers for a GELU's own two and its temporaries.  The previous form
  (:data:`ERF_COMPACT` off: ``u`` mapped onto [-1, 1], a degree-6 ``R``, the split tested
  against a constant) had 27, and LLVM's register allocator answered GELU's 29 with spills
  and a rotation of twenty register copies every iteration (65 instructions a vector of
  sixteen, 43 now; ``python -m benchmarks.ab_cpu_steps --only erf_compact``).  Double:
  ``sign(x) * (1 - exp(Q(u) - x^2))`` with ``Q`` a degree-24 fit of ``log(erfc(x)) + x^2``
  (about ``-log(x sqrt(pi))``: small and smooth); ``x^2`` enters as ``hi + lo`` (``lo =
  fma(x, x, -hi)``, taken as the factor ``1 - lo``), so its rounding does not reach the
  result.  The coefficients are Chebyshev fits (``mpmath.chebyfit`` at 50 digits; the
  constants below).  Both branches are computed and selected, so the loop vectorises.
  ``erf(+-inf) = +-1``, NaN gives NaN, the sign of zero is kept.

Measured accuracy against the exact result (``np.longdouble`` reference;
``tests/codegen/test_llvm_vmath.py`` checks it over wide ranges, subnormals and special values,
which match NumPy's): maximum error below 1 ulp for exp and log (0.9), below 3 ulp for tanh
(2.8: two roundings in ``e / (e + 2)``) and sigmoid (2.3, where ``1 + exp(-x)`` is finite;
beyond, the formula gives 0, as NumPy's) and softplus (2.3), below 2 ulp for erf in float
(1.65 over every float from 2^-126 to 6, 1.59 in the previous form; where the rounding of
``v`` meets the slope of ``erf`` near the split) and 1.5 in double (1.1;
reference: mpmath, SciPy's double ``erf`` for float inputs).  float16
is computed in float.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator

from llvmlite import ir

from . import types as T

# fast-math flags inside these functions: only FMA contraction
_FL = ("contract",)

_LN2 = math.log(2.0)
_LOG2E = 1.0 / _LN2


class _Kind:
    """Constants of one float type."""

    def __init__(self, t: ir.Type) -> None:
        self.t = t
        self.double = t == T.F64
        self.it = T.I64 if self.double else T.I32
        self.mbits = 52 if self.double else 23
        self.bias = 1023 if self.double else 127
        self.suffix = "f64" if self.double else "f32"
        if self.double:  # fdlibm's split of ln2: 21 trailing zero bits in the high part
            self.ln2_hi, self.ln2_lo = 6.93147180369123816490e-01, 1.90821492927058770002e-10
            self.exp_lo, self.exp_hi = -746.0, 710.0
            self.tanh_big = 19.1
            self.min_normal, self.sub_scale = 2.0 ** -1022, 54
            self.sqrt_half_bits = 0x3FE6A09E667F3BCD
            self.exp_terms, self.log_terms = 13, 10
        else:  # float: ln2_hi = 0x3f317180 (k*ln2_hi exact for |k| < 2^11)
            self.ln2_hi, self.ln2_lo = 0.693138122558593750, 9.05800061445916e-06
            self.exp_lo, self.exp_hi = -104.0, 89.0
            self.tanh_big = 9.0
            self.min_normal, self.sub_scale = 2.0 ** -126, 24
            self.sqrt_half_bits = 0x3F3504F3
            self.exp_terms, self.log_terms = 7, 4
        self.one_bits = self.bias << self.mbits
        self.mant_mask = (1 << self.mbits) - 1

    def c(self, v: float) -> ir.Constant:
        return ir.Constant(self.t, v)

    def i(self, v: int) -> ir.Constant:
        return ir.Constant(self.it, v)


class _B:
    """A builder with flagged float helpers."""

    def __init__(self, b: ir.IRBuilder, k: _Kind) -> None:
        self.b, self.k = b, k

    def add(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fadd(x, y, flags=_FL)

    def sub(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fsub(x, y, flags=_FL)

    def mul(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fmul(x, y, flags=_FL)

    def div(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fdiv(x, y)

    def fma(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        return T.intrinsic(self.b, "fma", [x, y, z])

    def lt(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered("<", x, y)

    def gt(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered(">", x, y)

    def isnan(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x)

    def sel(self, c: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(c, x, y)

    def horner(self, x: ir.Value, coeffs: list[float]) -> ir.Value:
        """``coeffs[0] + x*(coeffs[1] + x*(...))``."""
        acc = self.k.c(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.k.c(c))
        return acc

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n for an integer ``n`` in the normal exponent range, from its bits."""
        k = self.k
        bits = self.b.shl(self.b.add(n, k.i(k.bias)), k.i(k.mbits))
        return self.b.bitcast(bits, k.t)

    def reduce_ln2(self, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        """``(n, r)`` with ``x = n*ln2 + r``, ``n`` integral (a float), ``|r| <= ln2/2``."""
        k = self.k
        n = T.intrinsic(self.b, "rint", [self.mul(x, k.c(_LOG2E))])
        r = self.fma(self.b.fneg(n), k.c(k.ln2_hi), x)
        r = self.fma(self.b.fneg(n), k.c(k.ln2_lo), r)
        return n, r


def _exp(f: _B, x: ir.Value) -> ir.Value:
    k, b = f.k, f.b
    nan = f.isnan(x)
    # below exp_lo the result rounds to 0: computed from 0 instead and replaced, so that a
    # masked score (-1e30) does not run the scaling into the subnormal range, which costs
    # a microcode assist per element on some CPUs (about 7x for an all-masked exp loop)
    zero = f.lt(x, k.c(k.exp_lo))
    xc = f.sel(f.gt(x, k.c(k.exp_hi)), k.c(k.exp_hi), x)
    xc = f.sel(b.or_(nan, zero), k.c(0.0), xc)
    n, r = f.reduce_ln2(xc)
    p = f.horner(r, [1.0 / math.factorial(j) for j in range(k.exp_terms + 1)])
    ni = b.fptosi(n, k.it)
    if LDEXP and _scalef():  # one vscalef: the same single rounding, inf on overflow
        fn = T.declare(b.module, f"llvm.ldexp.{k.suffix}.i32", k.t, [k.t, T.I32])
        y = b.call(fn, [p, b.trunc(ni, T.I32) if k.double else ni])
    else:
        n1 = b.ashr(ni, k.i(1))
        n2 = b.sub(ni, n1)
        y = f.mul(f.mul(p, f.pow2(n1)), f.pow2(n2))
    return f.sel(nan, x, f.sel(zero, k.c(0.0), y))


#: the scaling by ``2^n`` of ``exp`` as ``llvm.ldexp`` where the host has AVX-512 (an A/B
#: switch); off, or elsewhere: two multiplications by powers of two made from the bits
LDEXP = True


#: float ``erf`` in the form that needs the fewest constants (24 vector registers on
#: AVX-512: a GELU's loop fits the 32 with its own two, see the module docstring; an A/B
#: switch): off, the previous form (27; the GELU loop spilled and shuffled registers)
ERF_COMPACT = True


#: the features of the host the code being emitted is for (:func:`for_host`); None: this one
_target: dict[str, str | None] = {"features": None}


@contextmanager
def for_host(features: str) -> Iterator[None]:
    """Emit for a host with these LLVM ``features`` (a build for another host than this
    one: an AVX2 description on an AVX-512 machine); callers hold the emitter's lock."""
    before = _target["features"]
    _target["features"] = features
    try:
        yield
    finally:
        _target["features"] = before


def _scalef() -> bool:
    """Whether the code is compiled for AVX-512 (F), whose ``vscalefps``/``vscalefpd`` is what
    LLVM makes of a vector ``llvm.ldexp``; elsewhere it becomes a C library call per element."""
    features = _target["features"]
    if features is None:
        from ...host import describe

        features = describe().features
    return "+avx512f" in features.split(",")


def _log(f: _B, x: ir.Value) -> ir.Value:
    k, b = f.k, f.b
    sub = f.lt(x, k.c(k.min_normal))  # subnormal, zero, negative (handled below)
    xs = f.sel(sub, f.mul(x, k.c(2.0 ** k.sub_scale)), x)
    kadj = b.select(sub, k.i(-k.sub_scale), k.i(0))
    ix = b.add(b.bitcast(xs, k.it), k.i(k.one_bits - k.sqrt_half_bits))
    e = b.add(b.sub(b.lshr(ix, k.i(k.mbits)), k.i(k.bias)), kadj)
    m = b.bitcast(b.add(b.and_(ix, k.i(k.mant_mask)), k.i(k.sqrt_half_bits)), k.t)
    fm = f.sub(m, k.c(1.0))
    s = f.div(fm, f.add(k.c(2.0), fm))
    z = f.mul(s, s)
    R = f.mul(z, f.horner(z, [2.0 / (2 * j + 3) for j in range(k.log_terms)]))
    hfsq = f.mul(k.c(0.5), f.mul(fm, fm))
    kf = b.sitofp(e, k.t)
    # fdlibm: k*ln2_hi - ((hfsq - (s*(hfsq+R) + k*ln2_lo)) - f)
    inner = f.fma(s, f.add(hfsq, R), f.mul(kf, k.c(k.ln2_lo)))
    y = f.sub(f.mul(kf, k.c(k.ln2_hi)), f.sub(f.sub(hfsq, inner), fm))
    inf = k.c(math.inf)
    y = f.sel(b.fcmp_ordered("==", x, inf), inf, y)
    y = f.sel(b.fcmp_ordered("==", x, k.c(0.0)), k.c(-math.inf), y)
    y = f.sel(f.lt(x, k.c(0.0)), k.c(math.nan), y)
    return f.sel(f.isnan(x), x, y)


def _expm1_nonneg(f: _B, x: ir.Value) -> ir.Value:
    """``exp(x) - 1`` for ``0 <= x`` of at most a few dozen (no clamping here)."""
    k, b = f.k, f.b
    n, r = f.reduce_ln2(x)
    q = f.mul(r, f.horner(r, [1.0 / math.factorial(j + 1) for j in range(k.exp_terms)]))
    s = f.pow2(b.fptosi(n, k.it))
    return f.fma(s, q, f.sub(s, k.c(1.0)))


def _tanh(f: _B, x: ir.Value) -> ir.Value:
    k, b = f.k, f.b
    ax = T.intrinsic(b, "fabs", [x])
    big = f.gt(ax, k.c(k.tanh_big))
    nan = f.isnan(x)
    axc = f.sel(b.or_(big, nan), k.c(0.0), ax)
    em = _expm1_nonneg(f, f.add(axc, axc))
    t = f.div(em, f.add(em, k.c(2.0)))
    t = f.sel(big, k.c(1.0), t)
    y = T.intrinsic(b, "copysign", [t, x])
    return f.sel(nan, x, y)


def _sigmoid(f: _B, x: ir.Value) -> ir.Value:
    one = f.k.c(1.0)
    e = _exp(f, f.b.fneg(x))
    return f.div(one, f.add(one, e))


def _log1p_unit(f: _B, t: ir.Value) -> ir.Value:
    """``log(1 + t)`` for ``0 <= t <= 1`` (Goldberg's quotient, see the module docstring)."""
    one = f.k.c(1.0)
    u = f.add(one, t)
    q = f.mul(_log(f, u), f.div(t, f.sub(u, one)))
    return f.sel(f.b.fcmp_ordered("==", u, one), t, q)


def _softplus(f: _B, x: ir.Value) -> ir.Value:
    zero = f.k.c(0.0)
    t = _exp(f, f.b.fneg(T.intrinsic(f.b, "fabs", [x])))
    return f.add(f.sel(f.gt(x, zero), x, zero), _log1p_unit(f, t))  # NaN: 0 + NaN


# erf: coefficients (ascending) of the Chebyshev fits (mpmath.chebyfit, 50 digits) described
# in the module docstring; float32 uses the first set rounded to float, float64 the second
_ERF_SPLIT = 0.921875
_ERF_F32 = dict(
    top=3.9375,
    small=[0.12837915083041535, -0.37612500896193646, 0.11281882319397829,
           -0.026768756699813972, 0.004996020122247473, -0.000600408115592106],
    tail=[0.9994098403982254, 0.003080588556417008, -0.007485138651914424,
          0.011099267038878095, -0.010986546572196136, 0.007339633827232514,
          -0.0030220300404570103, 0.0003669824569097371, 0.0004367072530733083,
          -0.0003246748191918672, 6.944768142533379e-05, 3.2370546357929205e-05,
          -1.8338304501321974e-05, -5.775557425532373e-07, 1.2459225745010218e-06])
#: the previous float form (:data:`ERF_COMPACT` off): ``u`` on [-1, 1], a degree-6 ``R``
_ERF_F32_WIDE = dict(
    top=_ERF_F32["top"],
    small=[0.12837916667316984, -0.3761263402817225, 0.11283699425717714,
           -0.02685959231070588, 0.005201466868966306, -0.0008147202092613495,
           8.387591045708916e-05],
    tail=[0.9994098403982254, 0.00464494993272252, -0.01701745176056887,
          0.03804839296375076, -0.056787213464639406, 0.05720198376612483,
          -0.03551262809809669, 0.006502444879518164, 0.011667266550075297,
          -0.01307900366845933, 0.00421823863019867, 0.0029646317987109243,
          -0.002532370537164673, -0.0001202567099544218, 0.00039115943107362723])
_ERF_F64 = dict(
    top=6.0,
    small=[0.1283791670955126, -0.37612638903183715, 0.11283791670953008,
           -0.026866170644665226, 0.00522397762013796, -0.0008548326666795295,
           0.00012055317752469981, -1.4925221170901272e-05, 1.6454012531282943e-06,
           -1.6264102432769319e-07, 1.3985356985352318e-08, -8.342328901682342e-10],
    tail=[-1.8519918426439947, -0.6822997623200012, 0.21833774812470924,
          -0.08781026383844884, 0.037531184972275596, -0.016160524144444608,
          0.006825910057849579, -0.0027737107119745153, 0.0010617237389217234,
          -0.00037052666270947766, 0.00010981977924123614, -2.147293799711629e-05,
          -2.9934830006951137e-06, 6.565663957497613e-06, -4.84152334406775e-06,
          2.7207477067885357e-06, -1.3140493100562203e-06, 5.572261596818441e-07,
          -1.7942941348783354e-07, 2.7644300828816652e-08, -4.79556942383071e-09,
          3.219803299757306e-09, 1.0366762428323356e-08, -1.144981208077818e-08,
          3.2249440620411444e-09])


def _exp_bounded(f: _B, x: ir.Value) -> ir.Value:
    """``exp(x)`` for ``x`` where ``2^rint(x / ln2)`` is a normal number (no clamps, no NaN)."""
    n, r = f.reduce_ln2(x)
    p = f.horner(r, [1.0 / math.factorial(j) for j in range(f.k.exp_terms + 1)])
    return f.mul(p, f.pow2(f.b.fptosi(n, f.k.it)))


def _erf(f: _B, x: ir.Value) -> ir.Value:
    k, b = f.k, f.b
    cf = _ERF_F64 if k.double else _ERF_F32 if ERF_COMPACT else _ERF_F32_WIDE
    top = cf["top"]
    mid, half = (top + _ERF_SPLIT) / 2, (top - _ERF_SPLIT) / 2
    ax = T.intrinsic(b, "fabs", [x])
    # |x| < split (and NaN, which propagates): x + x*R(x^2)
    small = f.fma(x, f.horner(f.mul(x, x), cf["small"]), x)
    if k.double or not ERF_COMPACT:  # u = (|x| - mid) / half in [-1, 1] from split to top
        u = f.fma(ax, k.c(1.0 / half), k.c(-mid / half))
        if k.double:  # 1 - exp(Q(u) - x^2), x^2 = x2 + x2lo exactly
            x2 = f.mul(ax, ax)
            x2lo = f.fma(ax, ax, b.fneg(x2))
            e = _exp_bounded(f, f.sub(f.horner(u, cf["tail"]), x2))
            big = f.sub(k.c(1.0), f.mul(e, f.sub(k.c(1.0), x2lo)))
            # beyond top erf rounds to 1 (and u leaves the fitted range)
            big = f.sel(f.gt(ax, k.c(top)), k.c(1.0), big)
        else:  # P(1) is 1 exactly: the clamp is the saturation
            one = k.c(1.0)
            big = f.horner(f.sel(f.gt(u, one), one, u), cf["tail"])
        big = T.intrinsic(b, "copysign", [big, x])
        return f.sel(b.fcmp_unordered("<", ax, k.c(_ERF_SPLIT)), small, big)
    # float: erf itself, a polynomial in v = |x| - mid (in [-half, half] from split to top),
    # which stops at half (top), where P is 1 exactly; |x| < split is v + half < 0, tested
    # on its sign bit, so that mid and half are the only constants besides the polynomials'
    # (see the module docstring); NaN gives NaN whichever branch its sign bit picks
    v = f.sub(ax, k.c(mid))
    lim = k.c(half)
    big = f.horner(f.sel(f.gt(v, lim), lim, v), cf["tail"])
    below = b.icmp_signed("<", b.bitcast(f.add(v, lim), k.it), k.i(0))
    return T.intrinsic(b, "copysign", [f.sel(below, small, big), x])


_RULES: dict[str, Callable[[_B, ir.Value], ir.Value]] = {
    "exp": _exp, "log": _log, "tanh": _tanh, "sigmoid": _sigmoid, "softplus": _softplus,
    "erf": _erf,
}

FUNCTIONS = tuple(_RULES)


def call(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """``name(x)`` for ``name`` in :data:`FUNCTIONS` and ``x`` a float or double: a call of
    the module's inline definition (emitted on first use)."""
    k = _Kind(x.type)
    fname = f"tecomp.{name}.{k.suffix}"
    module = b.module
    fn = module.globals.get(fname)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(k.t, [k.t]), fname)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        fb = ir.IRBuilder(fn.append_basic_block("entry"))
        fb.ret(_RULES[name](_B(fb, k), fn.args[0]))
    return b.call(fn, [x])
