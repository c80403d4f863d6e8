"""The CUDA renderer on every expression node and dtype, run on the CPU against tc.evaluate.

All cases form one program (one output per case, one kernel each), so that one g++ call and
one nvcc call cover them.  Loop IR is built by hand (:mod:`cuda_programs`), independently of
``passes/lower.py``.  The generated CUDA source is compiled with ``emulate.h`` and run through
the same host code as on a GPU (:class:`cuda_emulator.EmulatedDevice`).
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_emulator import EmulatedDevice, compile_emulated, gxx_available
from cuda_programs import lower_elementwise

import tecomp as tc
from tecomp import dtypes
from tecomp import expr as E
from tecomp.codegen.cuda.compile import compile_many_nvcc, nvcc_path
from tecomp.codegen.cuda.kernel import CudaKernel
from tecomp.intrinsics import INTRINSICS
from tecomp.passes.schedule.gpu import schedule_gpu

N = 61
n = tc.var("n")
SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
         "int32": "i32", "int64": "i64", "bool": "b"}
FLOATS = ["float16", "float32", "float64"]
INTS = ["int32", "int64"]


def _inputs() -> tuple[dict[str, tc.Tensor], dict[str, np.ndarray]]:
    rng = np.random.default_rng(1234)
    ph: dict[str, tc.Tensor] = {}
    data: dict[str, np.ndarray] = {}

    def add(key: str, dtype: str, arr: np.ndarray) -> None:
        ph[key] = tc.placeholder((n,), name=key, dtype=dtype)
        data[key] = arr.astype(dtypes.to_numpy(dtype))

    for dt in FLOATS + ["bfloat16"]:
        s = SHORT[dt]
        npdt = np.float32 if dt == "bfloat16" else dt
        add(f"a_{s}", dt, rng.uniform(-5, 5, N).astype(npdt))
        add(f"b_{s}", dt, rng.uniform(-5, 5, N).astype(npdt))
        add(f"p_{s}", dt, rng.uniform(0.1, 4, N).astype(npdt))  # positive
        z = rng.uniform(-5, 5, N).astype(npdt)
        z[:6] = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e6 if dt != "float16" else 6e4]
        add(f"z_{s}", dt, z)
    for dt in INTS:
        s = SHORT[dt]
        add(f"a_{s}", dt, rng.integers(-50, 51, N).astype(dt))
        add(f"b_{s}", dt, rng.integers(-50, 51, N).astype(dt))
        d = rng.integers(-7, 8, N).astype(dt)
        d[:4] = [0, -1, 1, 0]
        add(f"d_{s}", dt, d)
        big = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, N, dtype=dt)
        big[:2] = [np.iinfo(dt).min, np.iinfo(dt).max]
        add(f"w_{s}", dt, big)
    add("a_b", "bool", rng.random(N) < 0.5)
    add("b_b", "bool", rng.random(N) < 0.5)
    idx = rng.integers(0, N, N).astype(np.int64)
    idx[::3] = -(10**12)  # a read there would fault: only guarded reads may use it
    add("idx", "int64", idx)
    return ph, data


PH, DATA = _inputs()


def _cases() -> dict[str, tuple]:
    """name -> (fn(reads) -> expr, rtol or None for exact)."""
    c: dict[str, tuple] = {}
    tol = {"float16": 2e-3, "bfloat16": 1e-6, "float32": 2e-6, "float64": 1e-14}
    for dt in FLOATS + INTS:
        s = SHORT[dt]
        t = tol.get(dt)
        c[f"add_{s}"] = (lambda r, s=s: r[f"a_{s}"] + r[f"b_{s}"], t)
        c[f"sub_{s}"] = (lambda r, s=s: r[f"a_{s}"] - r[f"b_{s}"], t)
        c[f"mul_{s}"] = (lambda r, s=s: r[f"a_{s}"] * r[f"b_{s}"] * 3 - 7, t)
        c[f"neg_{s}"] = (lambda r, s=s: -r[f"a_{s}"], t)
        c[f"min_{s}"] = (lambda r, s=s: tc.minimum(r[f"a_{s}"], r[f"b_{s}"]), t)
        c[f"max_{s}"] = (lambda r, s=s: tc.maximum(r[f"a_{s}"], r[f"b_{s}"]), t)
        c[f"abs_{s}"] = (lambda r, s=s: tc.abs(r[f"a_{s}"]), t)
        c[f"cmp_{s}"] = (lambda r, s=s: (r[f"a_{s}"] < r[f"b_{s}"]) | tc.eq(r[f"a_{s}"], 1)
                         & ~(r[f"b_{s}"] >= 2), None)
        c[f"cmp2_{s}"] = (lambda r, s=s: (r[f"a_{s}"] <= r[f"b_{s}"] * 0) & tc.ne(
            r[f"b_{s}"], r[f"a_{s}"]) | (r[f"a_{s}"] > 3), None)
    for dt in FLOATS:
        s = SHORT[dt]
        t = tol[dt]
        c[f"div_{s}"] = (lambda r, s=s: r[f"a_{s}"] / r[f"z_{s}"], t)
        c[f"floordiv_{s}"] = (lambda r, s=s: r[f"a_{s}"] // r[f"b_{s}"], t)
        c[f"mod_{s}"] = (lambda r, s=s: r[f"a_{s}"] % r[f"b_{s}"], 1e-2 if dt == "float16"
                         else t * 10)
        c[f"nanmax_{s}"] = (lambda r, s=s: tc.maximum(r[f"z_{s}"], r[f"a_{s}"])
                            + tc.minimum(r[f"a_{s}"], r[f"z_{s}"]), t)
        for f, op in INTRINSICS.items():  # every unary float op of the table (abs: above)
            if op.arity == 1 and not op.integer_ok:
                x = "p" if op.domain[0] >= 0 else "a"  # positive arguments for log, sqrt
                c[f"{f}_{s}"] = (lambda r, s=s, f=f, x=x: getattr(tc, f)(r[f"{x}_{s}"]), t * 4)
        c[f"pow_{s}"] = (lambda r, s=s: r[f"p_{s}"] ** r[f"a_{s}"], t * 8)
        c[f"toint64_{s}"] = (lambda r, s=s: tc.cast(r[f"z_{s}"], "int64"), None)
        c[f"tobool_{s}"] = (lambda r, s=s: tc.cast(r[f"z_{s}"], "bool"), None)
        c[f"consts_{s}"] = (lambda r, s=s: tc.if_then_else(
            r[f"a_{s}"] > 0, r[f"a_{s}"] * 0.1, float("-inf")), t)
    for dt in INTS:
        s = SHORT[dt]
        c[f"floordiv_{s}"] = (lambda r, s=s: r[f"a_{s}"] // r[f"d_{s}"], None)
        c[f"mod_{s}"] = (lambda r, s=s: r[f"a_{s}"] % r[f"d_{s}"], None)
        c[f"divconst_{s}"] = (lambda r, s=s: r[f"a_{s}"] // 4 + r[f"a_{s}"] % -3, None)
        c[f"wrap_{s}"] = (lambda r, s=s: r[f"w_{s}"] * r[f"w_{s}"] + r[f"w_{s}"], None)
        c[f"minconst_{s}"] = (lambda r, s=s: tc.maximum(r[f"w_{s}"], -(2 ** (
            31 if s == "i32" else 63))) + 0, None)
        c[f"tofloat_{s}"] = (lambda r, s=s: tc.cast(r[f"a_{s}"], "float32") * 0.5, 1e-6)
        c[f"tohalf_{s}"] = (lambda r, s=s: tc.cast(r[f"w_{s}"] % 5000, "float16"), 1e-3)
    c["float_to_int32"] = (lambda r: tc.cast(r["z_f32"] * 1e3, "int32"), None)
    c["mixed_width"] = (lambda r: r["a_i32"] * 3 + r["w_i64"], None)
    c["half_round"] = (lambda r: tc.cast(r["a_f32"] * 1.001, "float16") * 3, 2e-3)
    c["half_to_double"] = (lambda r: tc.cast(r["a_f16"], "float64") / 3, 1e-14)
    c["double_to_float"] = (lambda r: tc.cast(r["a_f64"] * 1e-3, "float32"), 1e-7)
    c["bool_arith"] = (lambda r: tc.cast(r["a_b"] & ~r["b_b"], "float32") * 2, None)
    c["bool_select"] = (lambda r: tc.if_then_else(r["a_b"] | r["b_b"], r["a_i32"], 7), None)
    c["bool_eq"] = (lambda r: tc.eq(r["a_b"], r["b_b"]), None)
    c["bf16_arith"] = (lambda r: r["a_bf16"] * r["b_bf16"] + 1, 1e-6)
    c["bf16_cast"] = (lambda r: tc.cast(r["a_f32"], "bfloat16") * 2, 1e-2)
    c["guarded_read"] = (lambda r: tc.if_then_else(
        r["idx"] >= 0, PH["a_f32"][r["idx"]], -1.0), 0.0)
    c["guarded_and"] = (lambda r: (r["idx"] >= 0) & (PH["a_f32"][r["idx"]] > 0), None)
    c["guarded_or"] = (lambda r: (r["idx"] < 0) | (PH["a_f32"][r["idx"]] > 0), None)
    c["delta"] = (lambda r: E.delta(r["a_i64"] % 3, r["b_i64"] % 3, "float32") * 2, None)
    c["int_consts"] = (lambda r: r["a_i64"] + 2**40 - tc.const(2**33, "int64"), None)
    c["clamped_gather"] = (lambda r: PH["a_f64"][tc.minimum(tc.maximum(r["a_i64"], 0),
                                                             N - 1)], 0.0)
    return c


CASES = _cases()


def _program():
    outs = []
    for name, (fn, _) in CASES.items():
        def body(i, fn=fn):
            return fn({k: p[i] for k, p in PH.items()})
        outs.append(tc.compute((n,), body, name=name))
    func = lower_elementwise("exprs", outs, list(PH.values()))
    return outs, CudaKernel(schedule_gpu(func), check=False)


OUTS, KERNEL = _program()


@pytest.fixture(scope="module")
def results():
    if not gxx_available():
        pytest.skip("g++ is not available")
    compile_emulated([KERNEL.source])
    dev = EmulatedDevice()
    got = KERNEL.launch([DATA[k] for k in PH], device=dev)
    want = tc.evaluate(OUTS, {PH[k]: DATA[k] for k in PH})
    assert not dev.mem, "device memory leaked"
    assert [x[0] for x in dev.launches] == list(KERNEL.kernel_names)
    return dict(zip(CASES, zip(got, want)))


@pytest.mark.parametrize("name", list(CASES))
def test_expression(results, name):
    got, want = results[name]
    rtol = CASES[name][1]
    assert got.dtype == want.dtype and got.shape == want.shape
    if rtol is None or want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_array_equal(g[np.isinf(w)], w[np.isinf(w)])
    scale = float(np.abs(w[finite]).max()) if finite.any() else 0.0
    np.testing.assert_allclose(g[finite], w[finite], rtol=rtol, atol=rtol * scale)


def test_every_node_kind_is_rendered():
    kinds = set()
    for out in OUTS:
        kinds |= {type(x).__name__ for x in tc.functor.walk(out.op.body)}
    want = {"Add", "Sub", "Mul", "Div", "FloorDiv", "Mod", "Min", "Max", "Neg", "LT", "LE",
            "GT", "GE", "EQ", "NE", "And", "Or", "Not", "Select", "Cast", "Call", "Delta",
            "TensorRead", "Const", "Var"}
    assert want <= kinds, want - kinds


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_source_compiles_with_nvcc():
    (binary,) = compile_many_nvcc([KERNEL.source], "sm_90")
    assert binary.image[:4] == b"\x7fELF"


def test_precise_math_only():
    src = KERNEL.source
    for fast in ("__expf", "__logf", "__sinf", "__cosf", "__powf", "__fdividef", "__tanhf"):
        assert fast not in src
    for precise in ("expf(", "exp(", "logf(", "tanhf(", "erff(", "powf(", "sqrtf(", "floorf(",
                    "ceilf(", "sinf(", "cosf("):
        assert precise in src, precise
