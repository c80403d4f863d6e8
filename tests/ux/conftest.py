"""Fixtures of the command-line tests: a small program file in the CLI's file convention."""

from __future__ import annotations

import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import tecomp as tc

    n = tc.var("n")
    A = tc.placeholder((n, 16), name="A")
    B = tc.placeholder((16, 8), name="B")
    k = tc.reduce_axis(16, name="k")
    C = tc.compute((n, 8), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
""")


@pytest.fixture
def prog(tmp_path):
    """The path of a file holding :data:`PROGRAM` (module-level tensors)."""
    p = tmp_path / "prog.py"
    p.write_text(PROGRAM)
    return str(p)
