"""Loop bounds print without offsets that cancel: ``n - 1 + 1`` prints ``n``."""

import random

import tecomp as tc
from tecomp import expr as E
from tecomp.int_fold import fold_offsets


def _value(e: E.Expr, env: dict) -> int:
    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        return env[e.name]
    if isinstance(e, E.Neg):
        return -_value(e.a, env)
    a, b = _value(e.a, env), _value(e.b, env)
    return {E.Add: a + b, E.Sub: a - b, E.Mul: a * b, E.Min: min(a, b), E.Max: max(a, b),
            E.FloorDiv: a // b if b else 0, E.Mod: a % b if b else 0}[type(e)]


def _random_expr(rng: random.Random, names: list, depth: int) -> E.Expr:
    if depth == 0 or rng.random() < 0.2:
        return tc.var(rng.choice(names)) if rng.random() < 0.6 else tc.const(rng.randint(-3, 3))
    a, b = _random_expr(rng, names, depth - 1), _random_expr(rng, names, depth - 1)
    op = rng.choice(["+", "+", "-", "-", "*", "//", "min", "max", "neg"])
    if op == "neg":
        return -a
    if op in ("*", "//"):  # by a positive constant, as in index expressions
        k = rng.randint(1, 4)
        return a * k if op == "*" else a // k
    return {"+": a + b, "-": a - b, "min": tc.minimum(a, b), "max": tc.maximum(a, b)}[op]


def test_fold_offsets_keeps_the_value_on_random_sums():
    for seed in range(300):
        rng = random.Random(seed)
        e = _random_expr(rng, ["n", "m", "i"], 4)
        f = fold_offsets(e)
        for _ in range(5):
            env = {v: rng.randint(-6, 6) for v in ("n", "m", "i")}
            assert _value(f, env) == _value(e, env), f"seed {seed}: {e} -> {f} at {env}"


def test_fold_offsets_examples():
    n, m, t, j = tc.var("n"), tc.var("m"), tc.var("t"), tc.var("j")
    assert str(fold_offsets(n - 1 + 1)) == "n"
    assert str(fold_offsets((m + 2 - 2 - 1) // 2 + 1 - 1)) == "(m - 1) // 2"
    assert str(fold_offsets(j - 2 * t + 1)) == "j - 2 * t + 1"
    assert str(fold_offsets(n + t - n)) == "t"
    assert fold_offsets(n - n) == tc.const(0)


def test_loop_bounds_print_without_cancelling_offsets():
    n = tc.var("n")
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n - 1,), lambda i: X[i + 1] - X[i], name="Y")
    (dX,) = tc.gradient(Y, [X])
    text = str(tc.lower([dX], [X]))
    assert "for (j0, 0, n) {" in text and "1 + 1" not in text and "- 1 + 1" not in text


def test_fold_offsets_descends_through_select_and_cast():
    """Loop bounds may hold selects and casts (the CPU schedule's clamped blocks)."""
    n = tc.var("n")
    e = tc.if_then_else(n > 3, n - 1 + 1, tc.cast(n + 2 - 2, "int64"))
    out = fold_offsets(e)
    assert str(out) == str(tc.if_then_else(n > 3, n, tc.cast(n, "int64")))
