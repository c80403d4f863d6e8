"""The programs of the rest of the test suite on the CUDA backend: the reverse-mode table of
``tests/passes/autodiff/test_autodiff_rules.py`` (each case's forward output and its optimised
gradient under a random head), the forward-mode table of ``tests/passes/forward``, the
neural-network ops of ``tc.ops`` (convolutions with stride, dilation and groups, pools,
softmax, layer norm, dense, take) with their gradients, DOF Laplacians and operators of the
small networks of ``tests/passes/dof``, and butterfly chains and DCTs at n = 16..64.

Each program is lowered by ``tc.lower`` into a :class:`CudaKernel`; all sources compile with
one nvcc call (``-arch=sm_90 -cubin``) and with one g++ call against the CPU emulation of
``emulate.h``, each as one translation unit (the guarded preludes allow it: ~10 s instead of
~100 s for one unit per program), and every program runs in emulation against
``tc.evaluate`` (float64 programs to 1e-12 relative, float32 to 1e-5, integer outputs exactly).
"""

from __future__ import annotations

import importlib.util
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cuda_emulator import EmulatedDevice, emulated_fixture

import tecomp as tc
from tecomp.codegen.cuda.compile import compile_many_nvcc, nvcc_path
from tecomp.codegen.cuda.kernel import CudaKernel
from tecomp.ops.butterfly_factors import monarch_patterns, square_dyadic_patterns
from tecomp.passes.schedule.gpu import schedule_gpu

TESTS = Path(__file__).resolve().parents[2]
F64 = "float64"
RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-2, "bfloat16": 2e-2}


def _load(rel: str, alias: str):
    """A test module of another directory (its directory and ``tests/`` go on the path for its
    own helper imports), under a name of its own."""
    path = TESTS / rel
    for d in (str(TESTS), str(path.parent)):
        if d not in sys.path:
            sys.path.append(d)
    spec = importlib.util.spec_from_file_location(alias, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[alias] = mod
    spec.loader.exec_module(mod)
    return mod


RULES = _load("passes/autodiff/test_autodiff_rules.py", "cuda_suite_autodiff_rules")
FORWARD = _load("passes/forward/test_forward_jvp.py", "cuda_suite_forward_jvp")
DOF_NETS = _load("passes/dof/dof_nets.py", "cuda_suite_dof_nets")


@dataclass
class Program:
    name: str
    outputs: list[Any]
    arrays: dict[Any, np.ndarray]  # every placeholder the kernel takes, in argument order

    @property
    def inputs(self) -> list[Any]:
        return list(self.arrays)


def _ph(shape, name, dtype=F64):
    return tc.placeholder(shape, name=name, dtype=dtype)


def _float(t) -> bool:
    return t.dtype.startswith(("float", "bfloat"))


def _with_gradient(name: str, out, wrt, arrays, rng, head_value=None) -> list[Program]:
    """The forward program and its optimised gradient w.r.t. ``wrt`` under a random head
    (a constant one where the case fixes it)."""
    H = _ph(tuple(out.shape), f"{out.name}_head", out.dtype)
    (y,) = tc.evaluate([out], arrays)
    h = (np.full(np.shape(y), head_value) if head_value is not None
         else rng.standard_normal(np.shape(y))).astype(out.dtype)
    grads = tc.gradient(out, [x for x in wrt if _float(x)], head=H)
    return [Program(name, [out], dict(arrays)),
            Program(f"{name}_grad", grads, {**arrays, H: h})]


def autodiff_programs() -> list[Program]:
    progs = []
    for name, case in RULES.CASES.items():
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        c = case(rng)
        arrays = {k: np.asarray(v) for k, v in c["arrays"].items()}
        progs += _with_gradient(f"ad_{name}", c["out"], c["inputs"], arrays, rng,
                                c.get("head_value"))
    return progs


def forward_programs() -> list[Program]:
    progs = []
    for name, case in FORWARD.CASES.items():
        rng = np.random.default_rng(len(name))
        out, inputs, arrays, _ = case(rng)
        tans = [_ph(x.shape, f"t_{x.name}", x.dtype) for x in inputs]
        J = tc.jvp(out, inputs, tans)
        binds = {**{k: np.asarray(v) for k, v in arrays.items()},
                 **{t: rng.standard_normal(np.shape(arrays[x])) for x, t in zip(inputs, tans)}}
        progs.append(Program(f"fw_{name}", [J], binds))
    return progs


def dof_programs() -> list[Program]:
    """Laplacian by DOF of every network, a general operator on one, and a JVP w.r.t. the
    points and the weights of the MLP."""
    progs = []
    for name, net in DOF_NETS.NETS.items():
        rng = np.random.default_rng(len(name) + 11)
        x = _ph((3, 4), "x")
        vals: dict[Any, np.ndarray] = {}
        u = net(x, rng, vals)
        vals[x] = rng.uniform(0.2, 1.0, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))
        progs.append(Program(f"dof_lap_{name}", [tc.laplacian(u, x, method="dof")],
                             {x: vals[x], **vals}))
        if name == "mlp3":
            A = DOF_NETS.matrices(rng, 4)["indefinite"]
            progs.append(Program("dof_op_mlp3", [tc.diff_operator(u, x, A, method="dof")],
                                 {x: vals[x], **vals}))
            wrt = [x, *[p for p in vals if p is not x][:2]]
            tans = [_ph(p.shape, f"t_{p.name}") for p in wrt]
            binds = {**vals, **{t: rng.standard_normal(np.shape(vals[p]))
                                for p, t in zip(wrt, tans)}}
            progs.append(Program("dof_jvp_mlp3", [tc.jvp(u, wrt, tans)], binds))
    return progs


def nn_programs() -> list[Program]:
    rng = np.random.default_rng(3)
    progs = []
    r = rng.standard_normal
    for s, p, d, g in [(1, 1, 1, 1), (2, 0, 1, 1), (1, 2, 2, 1), (3, 1, 2, 1), (1, 1, 1, 4),
                       (2, 1, 2, 4)]:
        X, W = _ph((2, 4, 9, 8), "X"), _ph((4, 4 // g, 3, 3), "W")
        Y = tc.ops.conv2d(X, W, stride=s, padding=p, dilation=d, groups=g)
        progs += _with_gradient(f"nn_conv_s{s}p{p}d{d}g{g}", Y, [X, W],
                                {X: r((2, 4, 9, 8)), W: r((4, 4 // g, 3, 3))}, rng)
    X = _ph((1, 2, 7, 7), "X")
    for name, Y in {"maxpool": tc.ops.max_pool2d(X, 2),
                    "maxpool_pad_dil": tc.ops.max_pool2d(X, 3, 2, padding=1, dilation=2),
                    "avgpool": tc.ops.avg_pool2d(X, 2),
                    "avgpool_pad": tc.ops.avg_pool2d(X, 3, 2, padding=1)}.items():
        progs += _with_gradient(f"nn_{name}", Y, [X], {X: r((1, 2, 7, 7))}, rng)
    X, G, Bt = _ph((4, 7), "X"), _ph((7,), "G"), _ph((7,), "Bt")
    W, b = _ph((3, 7), "W"), _ph((3,), "b")
    x = {X: r((4, 7)), G: r(7), Bt: r(7), W: r((3, 7)), b: r(3)}
    progs += _with_gradient("nn_softmax", tc.ops.softmax(X), [X], {X: x[X]}, rng)
    progs += _with_gradient("nn_log_softmax", tc.ops.log_softmax(X), [X], {X: x[X]}, rng)
    progs += _with_gradient("nn_layer_norm", tc.ops.layer_norm(X, G, Bt), [X, G, Bt],
                            {X: x[X], G: x[G], Bt: x[Bt]}, rng)
    progs += _with_gradient("nn_dense", tc.ops.dense(X, W, b), [X, W, b],
                            {X: x[X], W: x[W], b: x[b]}, rng)
    E32, idx = _ph((10, 5), "E", "float32"), _ph((12,), "idx", "int32")
    arrays = {E32: r((10, 5)).astype(np.float32), idx: rng.integers(0, 5, 12).astype(np.int32)}
    progs += _with_gradient("nn_take", tc.ops.take(E32, idx), [E32], arrays, rng)
    progs += _with_gradient("nn_take_axis1", tc.ops.take(E32, idx, axis=1, name="take1"), [E32],
                            arrays, rng)
    # an integer output (exact): integer arithmetic on the indices
    Yi = tc.compute((12,), lambda i: idx[i] * 3 - idx[(i + 5) % 12] % 4, name="Yi")
    progs.append(Program("nn_int_out", [Yi], {idx: arrays[idx]}))
    return progs


def butterfly_programs() -> list[Program]:
    rng = np.random.default_rng(5)
    progs = []
    for tag, patterns in {"dyadic16": square_dyadic_patterns(16),
                          "monarch12": monarch_patterns(12, 12, 3, 4)}.items():
        Ts = [_ph(p, f"T{i}") for i, p in enumerate(patterns)]
        a, _, c, d = patterns[-1]
        X = _ph((a * c * d, 3), "X")
        Y = tc.ops.butterfly_chain(X, patterns, Ts)
        arrays = {X: rng.standard_normal((a * c * d, 3)),
                  **{T: rng.standard_normal(p) for T, p in zip(Ts, patterns)}}
        progs += _with_gradient(f"bf_{tag}", Y, [X, *Ts], arrays, rng)
    for n, kind, dtype in [(16, "dct2", F64), (32, "dst2", F64), (64, "dht", F64),
                           (32, "dct2", "float32")]:
        X = _ph((n, 3), "X", dtype)
        progs += _with_gradient(f"bf_{kind}_{n}_{dtype}", tc.ops.dct(X, kind), [X],
                                {X: rng.standard_normal((n, 3)).astype(dtype)}, rng)
    # forward only at n = 64: lowering the gradients of the DCT-II / DST-II at n = 64 exhausts
    # memory in zero elimination (outside the CUDA backend; the DHT's at n = 64 is above)
    for kind in ("dct2", "dst2"):
        X = _ph((64, 3), "X", "float32")
        progs.append(Program(f"bf_{kind}_64_float32", [tc.ops.dct(X, kind)],
                             {X: rng.standard_normal((64, 3)).astype(np.float32)}))
    return progs


def _kernel(p: Program) -> CudaKernel:
    low = tc.lower(p.outputs, p.inputs, name=p.name)
    return CudaKernel(schedule_gpu(low.func), inputs=p.inputs, outputs=p.outputs,
                      hidden=low.constants, check=False)


PROGRAMS = {p.name: p for p in (autodiff_programs() + forward_programs() + dof_programs()
                                + nn_programs() + butterfly_programs())}
KERNELS = {name: _kernel(p) for name, p in PROGRAMS.items()}


emulated = emulated_fixture(KERNELS, one_unit=True)


def _compare(p: Program, got) -> None:
    want = tc.evaluate(p.outputs, p.arrays)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for out, g, w in zip(p.outputs, got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (out.name, g.shape, g.dtype)
        if not _float(out):
            np.testing.assert_array_equal(g, w, err_msg=out.name)
            continue
        scale = max(float(np.abs(w.astype(np.float64)).max()) if w.size else 0.0, 1.0)
        rtol = RTOL[out.dtype]
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=rtol, atol=rtol * scale, err_msg=out.name)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_matches_the_evaluator(emulated, name):
    p, kernel = PROGRAMS[name], KERNELS[name]
    dev = EmulatedDevice()
    got = kernel.launch(list(p.arrays.values()), device=dev)
    _compare(p, got)
    # only the program's constants (an operator's matrix) stay on the device, by design
    kept = kernel._hidden_dev.get(id(dev), [])
    assert set(dev.mem) == set(kept) and len(kept) == len(kernel._hidden), "memory leaked"
    assert [x[0] for x in dev.launches] == [st.name for st in kernel.program.stages]


def test_the_suite_is_covered():
    """Every case of the reverse- and forward-mode tables is here, forward and gradient."""
    assert {f"ad_{n}" for n in RULES.CASES} | {f"ad_{n}_grad" for n in RULES.CASES} <= set(PROGRAMS)
    assert {f"fw_{n}" for n in FORWARD.CASES} <= set(PROGRAMS)
    assert len(RULES.CASES) >= 76


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not available")
def test_suite_compiles_with_nvcc():
    """All sources in one translation unit (their preludes are guarded): one cubin holding
    every kernel."""
    (cubin,) = compile_many_nvcc(["\n".join(k.source for k in KERNELS.values())], "sm_90")
    assert cubin.image[:4] == b"\x7fELF"
    names = [st.name for k in KERNELS.values() for st in k.program.stages]
    assert len(names) == len(set(names)) > len(KERNELS)
    missing = [n for n in names if n.encode() not in cubin.image]
    assert not missing
