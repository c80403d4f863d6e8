"""Compile time in fresh processes, cold and from the persistent cache, phase by phase.

    python benchmarks/compile_time.py                      # the suite, 1 cold + 3 warm each
    python benchmarks/compile_time.py --case conv2d --runs 15
    python benchmarks/compile_time.py --bytecode off       # source compiled at import too

The suite (float32; what a notebook user builds):

* ``conv2d``    -- ``X`` 8x32x32x32, ``W`` 64x32x3x3, padding 1: the forward and the gradient
  with respect to ``X`` and ``W`` (head ``H``), both built;
* ``attention`` -- causal attention 4 heads x 256 x 64: forward and the gradient w.r.t.
  ``Q``, ``K``, ``V``, both built;
* ``mlp``       -- MLP 784-1024-10 with ReLU and softmax cross-entropy, batch 64: the loss
  and the gradient w.r.t. the weights and biases, both built;
* ``laplacian`` -- ``tc.laplacian`` (DOF) of a tanh MLP 16-64-64-1, batch 32, float64,
  built;
* ``dct``       -- ``tc.ops.dct`` of 256x64 (the butterfly chain), built.

Every measurement is a new Python process (``python this_file --child CASE``) with a
persistent cache directory of its own for the whole run of a case (``TECOMP_CACHE_DIR`` and
``XDG_CACHE_HOME``).  The first process finds it empty (*cold*); the next ``--runs`` find
every kernel, the parallel-loop runtime and the bounds proofs there (*warm*).  Each child
times ``import tecomp``, the graph (declaration), the derived tensors (``tc.gradient``,
``tc.laplacian``; for ``dct`` the op itself) and the builds with ``time.perf_counter``, and
collects the phase records of the ``"tecomp.phases"`` logger (:mod:`tecomp.logs`) with a
handler, so the table shows where the time of each span goes.  *compile* is derivative +
builds (``import tecomp`` is not in it), *compile CPU* its CPU time (``time.process_time``,
steadier on a loaded machine); *other* is the part of *compile* outside every logged phase
(module imports done on first use, argument checks, Python between passes).

Bytecode: an installed package runs from compiled bytecode, so by default the children write
and read it under a temporary ``PYTHONPYCACHEPREFIX`` (the source tree is left alone), warmed
by one extra process first; ``--bytecode off`` measures source compilation as well (what a
``PYTHONDONTWRITEBYTECODE`` environment sees).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

CASES = ("conv2d", "attention", "mlp", "laplacian", "dct")
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
def run_child(case: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child {case} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cache_env(env: dict[str, str], directory: str) -> dict[str, str]:
    return dict(env, TECOMP_CACHE_DIR=directory, XDG_CACHE_HOME=directory)


def measure(case: str, runs: int, env: dict[str, str], tmp: str) -> tuple[dict, list[dict]]:
    cache = os.path.join(tmp, f"cache-{case}")
    cold = run_child(case, cache_env(env, cache))
    warm = [run_child(case, cache_env(env, cache)) for _ in range(runs)]
    missed = [w for w in warm if "llvm" in w["steps"]]
    if missed:  # LLVM ran: the source changed during the run (the keys cover it), or the
        # persistent cache failed
        print(f"warning: {case}: {len(missed)} warm process(es) missed the persistent cache; "
              f"left out")
    return cold, [w for w in warm if w not in missed]


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=CASES, action="append",
                    help="a case of the suite (repeatable; default: all)")
    ap.add_argument("--runs", type=int, default=3, help="warm processes per case (default 3)")
    ap.add_argument("--bytecode", choices=("on", "off"), default="on")
    ap.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.child:
        child(opts.child)
        return 0
    cases = opts.case or list(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("TECOMP_CACHE", None)
        if opts.bytecode == "on":
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pyc")
            for case in cases:  # writes the bytecode of every module a case imports
                run_child(case, cache_env(env, os.path.join(tmp, "bytecode-warm-up")))
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        results = {case: measure(case, opts.runs, env, tmp) for case in cases}
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
