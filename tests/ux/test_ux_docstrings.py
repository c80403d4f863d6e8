"""Every public function has a real docstring with an example, and the example runs.

The examples are doctests (``>>>``), run here with ``tc`` and ``np`` in scope; the element-wise
math functions are documented from the op table and are not listed here.
"""

from __future__ import annotations

import doctest
import inspect

import numpy as np
import pytest

import tecomp as tc

PUBLIC = ["var", "const", "constant", "placeholder", "reduce_axis", "compute", "sum", "prod",
          "max", "min", "if_then_else", "cast", "eq", "ne", "all", "any", "gradient",
          "jacobian", "jvp", "hessian", "diff_operator", "laplacian", "optimize", "show",
          "lower", "cost", "build", "evaluate", "explain", "pass_log", "to_dot"]
OPS = ["conv2d", "take"]


def _functions():
    for name in PUBLIC:
        yield f"tc.{name}", getattr(tc, name)
    for name in OPS:
        yield f"tc.ops.{name}", getattr(tc.ops, name)


@pytest.mark.parametrize("qualname,fn", list(_functions()), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_docstring_has_a_running_example(qualname, fn):
    doc = inspect.getdoc(fn) or ""
    summary = doc.split("\n\n", 1)[0]
    assert len(summary) >= 20, f"{qualname}: no real summary line: {summary!r}"
    assert "Example" in doc and ">>>" in doc, f"{qualname}: no example in its docstring"
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE
                                   | doctest.ELLIPSIS)
    for test in finder.find(fn, qualname, globs={"tc": tc, "np": np}):
        result = runner.run(test, out=lambda text: pytest.fail(text, pytrace=False))
        assert result.attempted > 0 and result.failed == 0


def test_help_of_compute_explains_it():
    text = inspect.getdoc(tc.compute)
    for words in ("element-wise", "fcompute", "reduce_axis", "tag", "Example"):
        assert words in text
