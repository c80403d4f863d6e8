"""Every user-facing failure mode raises tc.TecompError naming the tensor, axis or expression
(or propagates the user's own exception); none crashes or hangs the interpreter."""

import numpy as np
import pytest

import tecomp as tc
from tecomp import expr as E
from tecomp.codegen.llvm import compile_function
from tecomp.loopir import Buffer, LoweredFunc, Store

n = tc.var("n")
A = tc.placeholder((n, 3), name="A")
B = tc.placeholder((n,), name="B")
IX = tc.placeholder((n,), name="IX", dtype="int64")
C = tc.compute((n,), lambda i: A[i, 0] + B[i], name="C")


@pytest.fixture(scope="module")
def kernel():
    return tc.build(C, [A, B])


def f32(*shape):
    return np.zeros(shape, np.float32)


DECLARATION = [
    ("arity", lambda: A[0], tc.DeclarationError, ["'A'", "2 dimension", "1 index"]),
    ("slice", lambda: A[0:1, 0], tc.DeclarationError, ["'A'", "axis 0", "slice"]),
    ("float index", lambda: A[tc.const(1.0), 0], tc.DeclarationError, ["'A'", "axis 0", "1.0"]),
    ("lambda arity", lambda: tc.compute((n,), lambda i, j: A[i, j], name="D"),
     tc.DeclarationError, ["'D'", "1 dimension", "2 index"]),
    ("dtype name", lambda: tc.placeholder((2,), name="Z", dtype="complex64"),
     tc.DeclarationError, ["complex64"]),
    ("int/float mix", lambda: tc.compute((n,), lambda i: A[i, 0] + IX[i], name="M"),
     tc.DeclarationError, ["float32", "int64", "A[i, 0]", "IX[i]"]),
    ("bool arithmetic", lambda: tc.compute((n,), lambda i: (A[i, 0] > 0) + 1.0, name="BA"),
     tc.DeclarationError, ["boolean", "A[i, 0] > 0.0"]),
    ("negative extent", lambda: tc.placeholder((-1,), name="N"), tc.DeclarationError,
     ["'N'", "axis 0"]),
    ("integer gradient", lambda: tc.gradient(
        tc.compute((n,), lambda i: tc.cast(IX[i], "float32"), name="G"), [IX]),
     tc.DifferentiationError, ["'G'", "'IX'", "int64"]),
    ("hessian of non-scalar", lambda: tc.hessian(C, A), tc.TecompError, ["'C'", "scalar"]),
    ("unknown target", lambda: tc.build(C, [A, B], target="tpu"), tc.TecompError, ["'tpu'"]),
    ("missing input", lambda: tc.build(C, [A]), tc.LoweringError, ["'B'", "'C'"]),
    ("unbound evaluate", lambda: tc.evaluate([C], {A: f32(2, 3)}), tc.EvaluationError, ["'B'"]),
]


@pytest.mark.parametrize("case,fn,cls,words", DECLARATION, ids=[c[0] for c in DECLARATION])
def test_declaration_errors(case, fn, cls, words):
    with pytest.raises(cls) as info:
        fn()
    for w in words:
        assert w in str(info.value), f"{case}: {w!r} not in {info.value}"


CALLS = [
    ("argument count", lambda k: k(f32(2, 3)), ["takes 2 argument", "got 1"]),
    ("extent", lambda k: k(f32(2, 4), f32(2)), ["'A'", "axis 1", "3", "4"]),
    ("dtype", lambda k: k(np.zeros((2, 3)), f32(2)), ["'A'", "float32", "float64"]),
    ("ndim", lambda k: k(f32(2), f32(2)), ["'A'", "2 dimension"]),
    ("inconsistent size", lambda k: k(f32(2, 3), f32(3)), ["'B'", "axis 0", "n = 2", "'A'"]),
    ("not an array", lambda k: k([[1.0] * 3], f32(1)), ["'A'", "list"]),
    ("out= shape", lambda k: k(f32(2, 3), f32(2), out=f32(3)), ["out=", "'C'", "(2,)"]),
    ("out= aliasing", lambda k: (lambda b: k(f32(2, 3), b, out=b))(f32(2)), ["overlaps"]),
]


@pytest.mark.parametrize("case,fn,words", CALLS, ids=[c[0] for c in CALLS])
def test_call_errors(kernel, case, fn, words):
    with pytest.raises(tc.ArgumentError) as info:
        fn(kernel)
    for w in words:
        assert w in str(info.value), f"{case}: {w!r} not in {info.value}"


def test_user_exception_propagates_unchanged():
    with pytest.raises(ZeroDivisionError):
        tc.compute((n,), lambda i: 1 / 0, name="U")


@pytest.mark.parametrize("store,words", [
    (lambda o: Store(o, (E.Const(0, "int64"),), E.Const(1.0, "float32"), reduce="xor"),
     ["emit:", "'xor'"]),
    (lambda o: Store(o, (E.Var("q"),), E.Const(1.0, "float32")), ["emit:", "'q'"]),
])
def test_compile_failure_names_the_stage(store, words):
    o = Buffer("o", (E.Const(1, "int64"),), "float32", "output")
    func = LoweredFunc("bad", (), (o,), (), store(o))
    with pytest.raises(tc.CompileError) as info:
        compile_function(func, cache=None)
    for w in words:
        assert w in str(info.value)


def test_bad_inputs_raise_cleanly():
    """Out-of-range gathers and scatters, empty tables, extreme indices: a clean error.

    The same battery runs in fresh interpreters in ``test_runtime_hygiene.py`` (a crash there
    fails the test instead of the test run)."""
    caught = run_bad_index_battery()
    assert caught == 10


def run_bad_index_battery() -> int:
    n, m = tc.var("n"), tc.var("m")
    E = tc.placeholder((m, 8), name="E")
    idx = tc.placeholder((n,), name="idx", dtype="int64")
    G = tc.compute((n, 8), lambda i, j: E[idx[i], j], name="G")
    (dE,) = tc.gradient(G, [E])
    k = tc.build([G, dE], [E, idx])
    caught = 0
    for table in (np.ones((4, 8), np.float32), np.ones((0, 8), np.float32)):
        for bad in (4, -1, 2**62, -2**63, 10**6):
            try:
                k(table, np.array([0, bad, 1] * 1000))
            except tc.IndexBoundsError:
                caught += 1
    return caught
