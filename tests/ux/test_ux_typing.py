"""A user's file type-checks against tecomp's annotations (``py.typed``), under ``mypy --strict``.

mypy is not a dependency (it is large); the check runs where it is installed
(``pip install mypy``) and is skipped, saying so, elsewhere.  The package is presented to mypy
as it installs -- ``tecomp/`` with ``passes/``, ``solvers/``, ``codegen/`` inside -- through a
tree of links, and errors inside tecomp itself are not the subject here
(``--follow-imports=silent``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER = textwrap.dedent('''
    import numpy as np

    import tecomp as tc

    n = tc.var("n")
    A = tc.placeholder((n, 64), name="A")
    B = tc.placeholder((64, 32), name="B", dtype="float32")
    k = tc.reduce_axis(64, name="k")
    C = tc.compute((n, 32), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    r, s = tc.reduce_axis(n, name="r"), tc.reduce_axis(32, name="s")
    loss = tc.compute((), lambda: tc.sum(C[r, s] * C[r, s], axis=[r, s]), name="loss")
    dA, dB = tc.gradient(C, [A, B])
    J = tc.jacobian(C, A)
    H = tc.hessian(loss, B)
    kernel = tc.build([C, dA, dB], [A, B])
    a = np.ones((4, 64), np.float32)
    b = np.ones((64, 32), np.float32)
    out = kernel(a, b)
    lowered = tc.lower([C, dA, dB], [A, B])
    text: str = tc.show(dA) + str(lowered)
    flops: int = tc.cost([dA], sizes={n: 128}).flops
    values: list[np.ndarray] = tc.evaluate([C], {A: a, B: b})
    size: int = int(B.shape[0])
    rows = list(range(B.shape[1]))
    M = tc.compute((4,), lambda i: tc.if_then_else(tc.all(i > 0, tc.ne(i, 2)),
                                                   tc.cast(i, "float32"), tc.exp(0.5)))
    D = tc.ops.conv2d(tc.placeholder((1, 2, 5, 5)), tc.placeholder((2, 1, 3, 3)), groups=2)
    T = tc.ops.take(B, tc.placeholder((3, 2), dtype="int64"))
    opt = tc.optimize([dA])
    report = tc.explain(opt)
    lap = tc.laplacian(loss, B)
    jv = tc.jvp(C, [A], [tc.placeholder((n, 64), name="tA")])
    op = tc.diff_operator(loss, B, np.eye(32))
    with tc.pass_log() as log:
        tc.gradient(loss, [A])
    print(tc.to_dot(C), report, lap, jv, op, J, H, M, D, T, text, flops, values, size, rows,
          out, log)
''')


def _package_tree(dest: Path) -> Path:
    pkg = dest / "tecomp"
    if pkg.exists():
        return dest
    pkg.mkdir(parents=True)
    for entry in (ROOT / "tecomp").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for folder in ("passes", "solvers", "codegen"):
        (pkg / folder).symlink_to(ROOT / folder)
    return dest


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    user = tmp_path / "user.py"
    user.write_text(source)
    env = dict(os.environ, MYPYPATH=str(_package_tree(tmp_path / "tree")))
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "cache"), str(user)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_package_is_marked_typed():
    assert (ROOT / "tecomp" / "py.typed").is_file()
    assert 'tecomp = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def test_user_file_is_mypy_strict_clean(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    bad = USER + 'wrong: str = tc.var("m")\nreveal_type(tc.compute)\n'
    run = _mypy(tmp_path, bad)
    # the annotations are seen: a wrong use is an error, and compute's signature is known
    assert 'has type "Var", variable has type "str"' in run.stdout, run.stdout + run.stderr
    assert "fcompute: def (" in run.stdout or "fcompute:" in run.stdout, run.stdout
    assert run.stdout.count("error:") == 1, run.stdout
    clean = _mypy(tmp_path, USER)
    assert clean.returncode == 0, clean.stdout + clean.stderr
