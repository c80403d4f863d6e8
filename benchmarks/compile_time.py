"""Compile time in fresh processes, cold and from the persistent cache, phase by phase, beside
JAX's jit compile of the same programs, and the import time of tecomp.

    python benchmarks/compile_time.py                      # the suite, 3 cold + 3 warm each
    python benchmarks/compile_time.py --case conv2d --runs 15
    python benchmarks/compile_time.py --bytecode off       # source compiled at import too
    python benchmarks/compile_time.py --no-jax --markdown out.md

The suite (float32 unless said; what a notebook user builds):

* ``conv2d``      -- ``X`` 8x32x32x32, ``W`` 64x32x3x3, padding 1: the forward and the gradient
  with respect to ``X`` and ``W`` (head ``H``), both built;
* ``attention``   -- causal attention 4 heads x 256 x 64: forward and the gradient w.r.t.
  ``Q``, ``K``, ``V``, both built;
* ``transformer`` -- a pre-norm transformer block of a symbolic length ``n`` (width 64, one
  attention head, MLP 64-256-64 with tanh): the squared-output loss and its gradient w.r.t.
  the seven weights, both built once for every ``n`` (JAX: compiled for ``n = 128``, as it
  compiles one shape at a time);
* ``mlp``         -- MLP 784-1024-10 with ReLU and softmax cross-entropy, batch 64: the loss
  and the gradient w.r.t. the weights and biases, both built;
* ``laplacian``   -- ``tc.laplacian`` (DOF) of a tanh MLP 16-64-64-1, batch 32, float64,
  built (JAX: the trace of ``jax.hessian`` per sample under ``vmap``);
* ``dct``         -- ``tc.ops.dct`` of 256x64 (the butterfly chain), built (JAX:
  ``jax.scipy.fft.dct(norm="ortho")``).

Every measurement is a new Python process (``python this_file --child CASE``) with a
persistent cache directory of its own (``TECOMP_CACHE_DIR`` and ``XDG_CACHE_HOME``).
``--cold`` processes find theirs empty (*cold*; the median is reported, its phases shown: a
single cold process of a case varied by up to a fifth from run to run on a shared 2-core
machine: the attention case 0.54-0.64 s),
each followed by JAX's cold process of the same program; the next ``--runs`` processes find
every kernel, the parallel-loop runtime, the bounds proofs, the gradients and the loop
programs in the median cold one's directory (*warm*).  Each child times ``import tecomp``,
the graph (declaration), the derived tensors (``tc.gradient``, ``tc.laplacian``; for ``dct``
the op itself) and the builds with ``time.perf_counter``, and collects the phase records of
the ``"tecomp.phases"`` logger (:mod:`tecomp.logs`) with a handler, so the table shows where
the time of each span goes.
*compile* is derivative + builds (``import tecomp`` is not in it), *compile CPU* its CPU time
(``time.process_time``, steadier on a loaded machine); *other* is the part of *compile*
outside every logged phase (module imports done on first use, argument checks, Python
between passes).

JAX (when installed; ``--no-jax`` skips it): the same programs written in ``jax.numpy``, in
fresh processes too (``--jax-child CASE``), each timed from the traced function to the
compiled executables (``jax.jit(f).lower(*shapes).compile()`` of the forward and of
``jax.grad``, the way a first call compiles them; ``import jax`` not included); cold with no
cache (the median of ``--cold``, interleaved with tecomp's), warm with JAX's persistent
compilation cache in a directory of its own (every entry stored: minimum compile time and
size 0).

Import: the wall time of a fresh ``python -c "import tecomp"`` (median of ``--runs``), and
the largest self times of ``python -X importtime -c "import tecomp"``.

A/B of a switch of the cold path (``--ab MODULE.NAME=VALUE``, such as
``tecomp.passes.schedule.cpu.microkernel.WHOLE_PACKS=False`` or
``tecomp.codegen.llvm.jit.LSR=False``): ``--pairs`` pairs of cold processes per case, one
with the switch as it is and one with ``NAME`` set to ``VALUE`` (a Python literal) right
after ``import tecomp`` (the other process imports the same modules there, setting nothing),
the order alternating; medians of *compile* and *compile CPU* and their ratios.  Several
switches, set together, are separated by ``;``.

    python benchmarks/compile_time.py --ab tecomp.codegen.llvm.jit.LSR=False --pairs 5

Bytecode: an installed package runs from compiled bytecode, so by default the children write
and read it under a temporary ``PYTHONPYCACHEPREFIX`` (the source tree is left alone), warmed
by one extra process first; ``--bytecode off`` measures source compilation as well (what a
``PYTHONDONTWRITEBYTECODE`` environment sees).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

#: the environment variable that hands a child the switch of ``--ab``
AB_VARIABLE = "TECOMP_BENCH_AB"
CASES = ("conv2d", "attention", "transformer", "mlp", "laplacian", "dct")
SPANS = ("import", "graph", "derivative", "build", "compile", "compile CPU")


# ------------------------------------------------------------------ the cases (child side)
def case_conv2d(tc: Any) -> tuple[Callable[[], list], Callable[[list], None]]:
    X = tc.placeholder((8, 32, 32, 32), name="X")
    W = tc.placeholder((64, 32, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, stride=1, padding=1)
    H = tc.placeholder(Y.shape, name="H")
    return (lambda: tc.gradient(Y, [X, W], H),
            lambda g: (tc.build(Y, [X, W]), tc.build(g, [X, W, H])))


def case_attention(tc: Any) -> tuple[Callable[[], list], Callable[[list], None]]:
    heads, length, d = 4, 256, 64
    Q, K, V = (tc.placeholder((heads, length, d), name=n) for n in "QKV")
    c = tc.reduce_axis(d, name="c")
    S = tc.compute((heads, length, length), lambda h, i, j: tc.if_then_else(
        j <= i, tc.sum(Q[h, i, c] * K[h, j, c], axis=c) * 0.125, -1e30), name="S")
    P = tc.ops.softmax(S)
    t = tc.reduce_axis(length, name="t")
    O = tc.compute((heads, length, d), lambda h, i, e: tc.sum(P[h, i, t] * V[h, t, e], axis=t),
                   name="O")
    H = tc.placeholder(O.shape, name="H")
    return (lambda: tc.gradient(O, [Q, K, V], H),
            lambda g: (tc.build(O, [Q, K, V]), tc.build(g, [Q, K, V, H])))


def case_transformer(tc: Any) -> tuple[Callable[[], list], Callable[[list], None]]:
    n, d, hidden = tc.var("n"), 64, 256
    x = tc.placeholder((n, d), name="x")
    Wq, Wk, Wv, Wo = (tc.placeholder((d, d), name=f"W{c}") for c in "qkvo")
    W1, W2 = tc.placeholder((hidden, d), name="W1"), tc.placeholder((d, hidden), name="W2")
    g = tc.placeholder((d,), name="g")
    h = tc.ops.layer_norm(x, g, name="ln")
    q, k, v = (tc.ops.dense(h, W, name=f"{c}") for W, c in ((Wq, "q"), (Wk, "k"), (Wv, "v")))
    c = tc.reduce_axis(d, name="c")
    S = tc.compute((n, n), lambda i, j: tc.if_then_else(
        j <= i, tc.sum(q[i, c] * k[j, c], axis=c) * 0.125, -1e30), name="S")
    P = tc.ops.softmax(S)
    t = tc.reduce_axis(n, name="t")
    a = tc.compute((n, d), lambda i, e: tc.sum(P[i, t] * v[t, e], axis=t), name="a")
    r = tc.compute((n, d), lambda i, e: x[i, e] + tc.ops.dense(a, Wo, name="o")[i, e],
                   name="r")
    m = tc.compute((n, hidden), lambda i, j: tc.tanh(tc.ops.dense(r, W1, name="m1")[i, j]),
                   name="m")
    y = tc.compute((n, d), lambda i, e: r[i, e] + tc.ops.dense(m, W2, name="m2")[i, e],
                   name="y")
    i, e = tc.reduce_axis(n, name="i"), tc.reduce_axis(d, name="e")
    loss = tc.compute((), lambda: tc.sum(y[i, e] * y[i, e], axis=[i, e]), name="loss")
    weights = [Wq, Wk, Wv, Wo, W1, W2, g]
    return (lambda: tc.gradient(loss, weights),
            lambda grads: (tc.build(loss, [x, *weights]), tc.build(grads, [x, *weights])))


def case_mlp(tc: Any) -> tuple[Callable[[], list], Callable[[list], None]]:
    batch, nin, hidden, classes = 64, 784, 1024, 10
    x = tc.placeholder((batch, nin), name="x")
    W1, b1 = tc.placeholder((hidden, nin), name="W1"), tc.placeholder((hidden,), name="b1")
    W2, b2 = tc.placeholder((classes, hidden), name="W2"), tc.placeholder((classes,), name="b2")
    y = tc.placeholder((batch,), name="y", dtype="int64")
    h = tc.ops.dense(x, W1, b1, name="h")
    r = tc.compute(h.shape, lambda i, j: tc.maximum(h[i, j], 0.0), name="relu")
    ls = tc.ops.log_softmax(tc.ops.dense(r, W2, b2, name="z"))
    i = tc.reduce_axis(batch, name="i")
    loss = tc.compute((), lambda: tc.sum(-ls[i, y[i]], axis=i) / float(batch), name="loss")
    ins = [x, W1, b1, W2, b2, y]
    return (lambda: tc.gradient(loss, [W1, b1, W2, b2]),
            lambda g: (tc.build(loss, ins), tc.build(g, ins)))


def case_laplacian(tc: Any) -> tuple[Callable[[], list], Callable[[list], None]]:
    batch, n, width = 32, 16, 64
    x = tc.placeholder((batch, n), name="x", dtype="float64")
    h, nin, params = x, n, []
    for layer in range(2):
        W = tc.placeholder((width, nin), name=f"W{layer}", dtype="float64")
        k = tc.reduce_axis(nin, f"k{layer}")
        h = tc.compute((batch, width), lambda b, j, h=h, W=W, k=k: tc.tanh(
            tc.sum(W[j, k] * h[b, k], axis=k)), name=f"h{layer}")
        params.append(W)
        nin = width
    w = tc.placeholder((width,), name="w", dtype="float64")
    k = tc.reduce_axis(width, "ko")
    u = tc.compute((batch,), lambda b: tc.sum(w[k] * h[b, k], axis=k), name="u")
    return (lambda: [tc.laplacian(u, x)],
            lambda g: tc.build(g, [x, *params, w]))


def case_dct(tc: Any) -> tuple[Callable[[], list], Callable[[list], None]]:
    X = tc.placeholder((256, 64), name="X")
    return (lambda: [tc.ops.dct(X)], lambda g: tc.build(g, [X]))


# ------------------------------------------------------------------ the same in JAX (child side)
def jax_conv2d(jax: Any, jnp: Any) -> list[tuple[Callable, list]]:
    def f(X, W):
        return jax.lax.conv_general_dilated(X, W, (1, 1), ((1, 1), (1, 1)),
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def g(X, W, H):
        return jax.vjp(f, X, W)[1](H)

    x, w, h = _specs(jax, (8, 32, 32, 32), (64, 32, 3, 3), (8, 64, 32, 32))
    return [(f, [x, w]), (g, [x, w, h])]


def jax_attention(jax: Any, jnp: Any) -> list[tuple[Callable, list]]:
    heads, length, d = 4, 256, 64
    mask = jnp.tril(jnp.ones((length, length), bool))

    def f(Q, K, V):
        S = jnp.where(mask, jnp.einsum("hic,hjc->hij", Q, K) * 0.125, -1e30)
        return jnp.einsum("hit,hte->hie", jax.nn.softmax(S, axis=-1), V)

    def g(Q, K, V, H):
        return jax.vjp(f, Q, K, V)[1](H)

    q = _specs(jax, (heads, length, d))[0]
    return [(f, [q, q, q]), (g, [q, q, q, q])]


def jax_transformer(jax: Any, jnp: Any) -> list[tuple[Callable, list]]:
    n, d, hidden = 128, 64, 256

    def loss(x, Wq, Wk, Wv, Wo, W1, W2, g):
        mu = x.mean(-1, keepdims=True)
        h = (x - mu) / jnp.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g
        q, k, v = h @ Wq.T, h @ Wk.T, h @ Wv.T
        S = jnp.where(jnp.tril(jnp.ones((n, n), bool)), q @ k.T * 0.125, -1e30)
        r = x + (jax.nn.softmax(S, axis=-1) @ v) @ Wo.T
        y = r + jnp.tanh(r @ W1.T) @ W2.T
        return jnp.sum(y * y)

    specs = _specs(jax, (n, d), (d, d), (d, d), (d, d), (d, d), (hidden, d), (d, hidden), (d,))
    return [(loss, specs), (jax.grad(loss, argnums=tuple(range(1, 8))), specs)]


def jax_mlp(jax: Any, jnp: Any) -> list[tuple[Callable, list]]:
    batch, nin, hidden, classes = 64, 784, 1024, 10

    def loss(x, W1, b1, W2, b2, y):
        ls = jax.nn.log_softmax(jnp.maximum(x @ W1.T + b1, 0.0) @ W2.T + b2)
        return -jnp.take_along_axis(ls, y[:, None], axis=1).sum() / batch

    specs = _specs(jax, (batch, nin), (hidden, nin), (hidden,), (classes, hidden), (classes,))
    specs.append(jax.ShapeDtypeStruct((batch,), jnp.int32))
    return [(loss, specs), (jax.grad(loss, argnums=(1, 2, 3, 4)), specs)]


def jax_laplacian(jax: Any, jnp: Any) -> list[tuple[Callable, list]]:
    batch, n, width = 32, 16, 64

    def u(xb, W0, W1, w):
        return w @ jnp.tanh(W1 @ jnp.tanh(W0 @ xb))

    def lap(x, W0, W1, w):
        return jax.vmap(lambda xb: jnp.trace(jax.hessian(u)(xb, W0, W1, w)))(x)

    specs = _specs(jax, (batch, n), (width, n), (width, width), (width,), dtype="float64")
    return [(lap, specs)]


def jax_dct(jax: Any, jnp: Any) -> list[tuple[Callable, list]]:
    import jax.scipy.fft

    return [(lambda X: jax.scipy.fft.dct(X, type=2, norm="ortho", axis=0),
             _specs(jax, (256, 64)))]


def _specs(jax: Any, *shapes: tuple, dtype: str = "float32") -> list:
    return [jax.ShapeDtypeStruct(shape, dtype) for shape in shapes]


def jax_child(case: str, cache: str | None) -> None:
    """One JAX measurement of ``case`` (compiled from traced functions to executables), cold
    or with the persistent compilation cache in ``cache``; prints a JSON object."""
    import jax

    jax.config.update("jax_enable_x64", True)
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import jax.numpy as jnp

    t0 = time.perf_counter()
    for fn, specs in globals()[f"jax_{case}"](jax, jnp):
        jax.jit(fn).lower(*specs).compile()
    print(json.dumps({"compile": time.perf_counter() - t0}))


class PhaseRecords(logging.Handler):
    """Sums the seconds of the phase-end records of ``"tecomp.phases"`` by phase name; the
    pipeline's phases (INFO) in ``seconds``, the steps inside them (DEBUG) in ``steps``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seconds: dict[str, float] = {}
        self.steps: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        seconds = getattr(record, "seconds", None)
        if seconds is not None:
            into = self.seconds if record.levelno >= logging.INFO else self.steps
            phase = str(getattr(record, "phase", "?"))
            into[phase] = into.get(phase, 0.0) + float(seconds)


def child(case: str) -> None:
    """One measurement of ``case`` in this (fresh) process; prints a JSON object."""
    t0 = time.perf_counter()
    import tecomp as tc

    t1 = time.perf_counter()
    switch = os.environ.get(AB_VARIABLE)
    as_is = bool(switch) and switch.startswith("?")  # the A side: import, set nothing
    for one in switch.lstrip("?").split(";") if switch else ():  # an A/B (--ab)
        target, value = one.split("=", 1)
        module, name = target.rsplit(".", 1)
        found = importlib.import_module(module)
        if not as_is:
            setattr(found, name, ast.literal_eval(value))
    records = PhaseRecords()
    phases = logging.getLogger("tecomp.phases")
    phases.addHandler(records)
    phases.setLevel(logging.DEBUG)
    derive, build = globals()[f"case_{case}"](tc)
    t2, c2 = time.perf_counter(), time.process_time()
    derived = derive()
    t3 = time.perf_counter()
    build(derived)
    t4, c4 = time.perf_counter(), time.process_time()
    print(json.dumps({"import": t1 - t0, "graph": t2 - t1, "derivative": t3 - t2,
                      "build": t4 - t3, "compile": t4 - t2, "compile CPU": c4 - c2,
                      "phases": records.seconds, "steps": records.steps}))


# ------------------------------------------------------------------ the driver
def run_child(case: str, env: dict[str, str], *extra: str, kind: str = "--child"
              ) -> dict[str, Any]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), kind, case, *extra],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child {case} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_jax(case: str, runs: int, env: dict[str, str], tmp: str) -> float:
    """JAX's warm compile of ``case``: the median of ``runs`` processes with its persistent
    cache filled by one process first."""
    cache = os.path.join(tmp, f"jax-{case}")
    run_child(case, env, cache, kind="--jax-child")
    return median([run_child(case, env, cache, kind="--jax-child")["compile"]
                   for _ in range(runs)])


def measure_import(runs: int, env: dict[str, str]) -> tuple[float, list[tuple[float, str]]]:
    """The median wall time of a fresh ``python -c "import tecomp"`` (process start
    included) and the largest self times of ``-X importtime``."""
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import tecomp"], env=env, check=True)
        walls.append(time.perf_counter() - t0)
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import tecomp"], env=env,
                         capture_output=True, text=True, check=True)
    selfs = []
    for line in out.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            selfs.append((int(parts[0]) * 1e-6, parts[2].strip()))
    return median(walls), sorted(selfs, reverse=True)[:8]


def cache_env(env: dict[str, str], directory: str) -> dict[str, str]:
    return dict(env, TECOMP_CACHE_DIR=directory, XDG_CACHE_HOME=directory)


def measure(case: str, runs: int, env: dict[str, str], tmp: str, colds: int = 1,
            jax: bool = False) -> tuple[dict, list[dict], tuple[float, float] | None]:
    """``colds`` cold processes of ``case`` (each with an empty cache directory of its own;
    with ``jax``, each followed by a cold JAX process: the two interleaved), the median by
    *compile*; then ``runs`` warm ones on that median one's cache (and JAX's, by
    :func:`measure_jax`)."""
    caches = [os.path.join(tmp, f"cache-{case}-{r}") for r in range(max(colds, 1))]
    cold_runs, jax_colds = [], []
    for cache in caches:
        cold_runs.append(run_child(case, cache_env(env, cache)))
        if jax:
            jax_colds.append(run_child(case, env, "", kind="--jax-child")["compile"])
    cold = sorted(cold_runs, key=lambda r: r["compile"])[(len(cold_runs) - 1) // 2]
    cache = caches[cold_runs.index(cold)]
    warm = [run_child(case, cache_env(env, cache)) for _ in range(runs)]
    missed = [w for w in warm if "llvm" in w["steps"]]
    if missed:  # LLVM ran: the source changed during the run (the keys cover it), or the
        # persistent cache failed
        print(f"warning: {case}: {len(missed)} warm process(es) missed the persistent cache; "
              f"left out")
    jax_times = (median(jax_colds), measure_jax(case, runs, env, tmp)) if jax else None
    return cold, [w for w in warm if w not in missed], jax_times


def measure_ab(case: str, switch: str, pairs: int, env: dict[str, str], tmp: str) -> str:
    """``pairs`` pairs of cold processes of ``case``, without and with ``switch``, alternating
    which goes first; a table row of the medians (wall and CPU) and their ratios."""
    base: list[dict] = []
    other: list[dict] = []
    for r in range(pairs):
        order = ((base, None), (other, switch))
        for into, value in (order if r % 2 == 0 else order[::-1]):
            # both sides import the switch's modules before the timed part (one imported on
            # first use would otherwise be timed on one side only)
            e = dict(env, **{AB_VARIABLE: value or "?" + switch})
            cache = os.path.join(tmp, f"ab-{case}-{r}-{bool(value)}")
            into.append(run_child(case, cache_env(e, cache)))
    b, o = (median([x["compile"] for x in xs]) for xs in (base, other))
    bc, oc = (median([x["compile CPU"] for x in xs]) for xs in (base, other))
    return (f"| {case} | {b:.2f} s | {o:.2f} s | {o / b:.3f} | {bc:.2f} s | {oc:.2f} s | "
            f"{oc / bc:.3f} |")


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def row(label: str, cold: float, warm: list[float]) -> str:
    return f"{label:<26}{cold * 1e3:>9.1f}{median(warm) * 1e3:>9.1f}"


def report(case: str, cold: dict, warm: list[dict]) -> None:
    print(f"\n{case}  (ms; warm: median of {len(warm)})")
    print(f"  {'span / phase':<24}{'cold':>9}{'warm':>9}")
    for s in SPANS:
        print(row(f"  {s}", cold[s], [w[s] for w in warm]))
    for kind, indent in (("phases", "    "), ("steps", "      ")):
        names = sorted(set(cold[kind]) | {p for w in warm for p in w[kind]},
                       key=lambda p: -cold[kind].get(p, 0.0))
        for p in names:
            label = f"{indent}{p}" + (" (step)" if kind == "steps" else "")
            print(row(label, cold[kind].get(p, 0.0), [w[kind].get(p, 0.0) for w in warm]))

    def other(r: dict) -> float:
        return r["compile"] - sum(r["phases"].values())

    print(row("    other", other(cold), [other(w) for w in warm]))


def summary(results: dict, jax_times: dict, import_wall: float) -> list[str]:
    """The table of the issue: derivative + builds, cold and warm, beside JAX."""
    lines = ["| program | tecomp cold | tecomp warm | warm CPU | JAX jit cold | JAX warm | "
             "cold / JAX |", "|---|---|---|---|---|---|---|"]
    ratios = []
    for case, (cold, warm) in results.items():
        w = median([r["compile"] for r in warm])
        cpu = median([r["compile CPU"] for r in warm])
        row = f"| {case} | {cold['compile']:.2f} s | {w * 1e3:.0f} ms | {cpu * 1e3:.0f} ms | "
        if case in jax_times:
            jc, jw = jax_times[case]
            ratios.append(cold["compile"] / jc)
            row += f"{jc:.2f} s | {jw * 1e3:.0f} ms | {ratios[-1]:.2f} |"
        else:
            row += "- | - | - |"
        lines.append(row)
    if ratios:
        geo = statistics.geometric_mean(ratios)
        lines.append(f"\ncold / JAX: geometric mean {geo:.2f}, largest {max(ratios):.2f}")
    lines.append(f"fresh `python -c \"import tecomp\"`: {import_wall * 1e3:.0f} ms "
                 "(process start included)")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=CASES, action="append",
                    help="a case of the suite (repeatable; default: all)")
    ap.add_argument("--runs", type=int, default=3, help="warm processes per case (default 3)")
    ap.add_argument("--cold", type=int, default=3,
                    help="cold processes per case, tecomp's and JAX's interleaved; the "
                         "medians are reported (default 3)")
    ap.add_argument("--bytecode", choices=("on", "off"), default="on")
    ap.add_argument("--no-jax", action="store_true", help="leave JAX out")
    ap.add_argument("--markdown", help="also write the summary table to this file")
    ap.add_argument("--ab", metavar="MODULE.NAME=VALUE",
                    help="A/B of a switch in cold processes instead of the suite")
    ap.add_argument("--pairs", type=int, default=5, help="cold process pairs per case (--ab)")
    ap.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    ap.add_argument("--jax-child", choices=CASES, help=argparse.SUPPRESS)
    ap.add_argument("cache", nargs="?", default="", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.child:
        child(opts.child)
        return 0
    if opts.jax_child:
        jax_child(opts.jax_child, opts.cache or None)
        return 0
    cases = opts.case or list(CASES)
    try:
        import jax  # noqa: F401
        with_jax = not opts.no_jax and not opts.ab
    except ImportError:
        with_jax = False
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("TECOMP_CACHE", None)
        if opts.bytecode == "on":
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pyc")
            for case in cases:  # writes the bytecode of every module a case imports
                run_child(case, cache_env(env, os.path.join(tmp, "bytecode-warm-up")))
                if with_jax:
                    run_child(case, env, "", kind="--jax-child")
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        if opts.ab:
            print(f"cold compile, {opts.pairs} pairs of fresh processes a case, medians; "
                  f"B: {opts.ab}; {time.strftime('%Y-%m-%d %H:%M')}")
            print("| program | A | B | B / A | A CPU | B CPU | B / A CPU |")
            print("|---|---|---|---|---|---|---|")
            for case in cases:
                print(measure_ab(case, opts.ab, opts.pairs, env, tmp), flush=True)
            return 0
        import_wall, import_selfs = measure_import(max(opts.runs, 3), env)
        results, jax_times = {}, {}
        for case in cases:  # interleaved: tecomp then JAX, cold process by cold process
            cold, warm, jax_pair = measure(case, opts.runs, env, tmp, opts.cold, with_jax)
            results[case] = (cold, warm)
            if jax_pair is not None:
                jax_times[case] = jax_pair
    print(f"compile time, fresh processes; bytecode {opts.bytecode}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    failed = False
    for case, (cold, warm) in results.items():
        if not warm:
            print(f"\n{case}: every warm process missed the persistent cache")
            failed = True
            continue
        report(case, cold, warm)
    print("\n(compile = derivative + build, wall clock; compile CPU: its CPU time; indented: "
          "the\npipeline's phases from the 'tecomp.phases' logger, summed over the builds; "
          "(step):\nsteps inside them, such as llvm inside codegen.llvm; other: compile outside "
          "every\nphase -- imports on first use, Python between passes)")
    print("\nimport tecomp, largest self times (-X importtime):")
    for seconds, module in import_selfs:
        print(f"  {seconds * 1e3:7.1f} ms  {module}")
    if not failed:
        table = summary(results, jax_times, import_wall)
        print("\n" + "\n".join(table))
        if opts.markdown:
            with open(opts.markdown, "w") as f:
                f.write("\n".join(table) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
