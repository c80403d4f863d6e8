"""The import layers: API -> pipeline -> passes -> solvers; codegen sees IR modules only.

Every import of the package (lazy ones included, ``TYPE_CHECKING`` ones not) is read from the
source with :mod:`ast`.  Layers: a module of ``passes/``, ``solvers/`` or ``codegen/`` is in
that layer; ``tecomp`` itself, ``tecomp/*_api.py``, the command line, ``interop`` and
``diagnostics`` are the API; every other module of ``tecomp/`` is IR (the pipeline included,
which may import everything).  Arrows against the layers: passes -> codegen, codegen ->
passes, passes/codegen/solvers -> API, solvers -> passes/codegen/IR.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"tecomp": "tecomp", "passes": "tecomp.passes", "solvers": "tecomp.solvers",
           "codegen": "tecomp.codegen"}
API_LEAVES = ("cli", "cli_demos", "interop", "diagnostics")
FORBIDDEN = {("passes", "codegen"), ("codegen", "passes"), ("passes", "api"),
             ("codegen", "api"), ("solvers", "api"), ("solvers", "passes"),
             ("solvers", "codegen"), ("solvers", "ir")}


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ("passes", "solvers", "codegen"):
        return parts[1]
    if module == "tecomp":
        return "api"
    leaf = parts[1] if len(parts) > 1 else ""
    return "api" if leaf.endswith("_api") or leaf in API_LEAVES else "ir"


def package_modules(root: Path) -> list[tuple[Path, str, bool]]:
    out = []
    for folder, dotted in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            rel = list(path.relative_to(root / folder).with_suffix("").parts)
            is_pkg = rel[-1] == "__init__"
            if is_pkg:
                rel = rel[:-1]
            out.append((path, ".".join([dotted, *rel]), is_pkg))
    return out


def imported(source: str, module: str, is_pkg: bool) -> list[tuple[str, int]]:
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    out = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                out.append((f"{target}.{a.name}" if target == "tecomp" else target,
                            node.lineno))
    return out


def arrows(root: Path) -> list[str]:
    found = []
    for path, module, is_pkg in package_modules(root):
        src = layer(module)
        if src in ("api", "ir"):
            continue
        for target, line in imported(path.read_text(), module, is_pkg):
            if target.startswith("tecomp") and (src, layer(target)) in FORBIDDEN:
                found.append(f"{path.relative_to(root)}:{line}: {src} -> {layer(target)} "
                             f"({target})")
    return found


def test_no_import_against_the_layers():
    assert arrows(ROOT) == []


@pytest.mark.parametrize("folder, source, arrow", [
    ("passes", "from tecomp.codegen.kernel import eval_int\n", "passes -> codegen"),
    ("passes", "def f():\n    from tecomp.autodiff_api import gradient\n", "passes -> api"),
    ("passes", "from ..diagnostics import run_pass\n", "passes -> api"),
    ("codegen", "from ..passes.schedule import cpu\n", "codegen -> passes"),
    ("codegen", "import tecomp.build_api\n", "codegen -> api"),
    ("solvers", "from tecomp import expr\n", "solvers -> ir"),
    ("solvers", "from ..passes import simplify\n", "solvers -> passes"),
])
def test_an_arrow_against_the_layers_is_found(tmp_path, folder, source, arrow):
    for name in FOLDERS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / folder / "bad.py").write_text(source)
    (found,) = arrows(tmp_path)
    assert found.startswith(f"{folder}/bad.py:") and arrow in found


@pytest.mark.parametrize("folder, source", [
    ("passes", "from tecomp.loopir import For\nfrom tecomp.solvers import Affine\n"),
    ("codegen", "from tecomp.stmt_functor import eval_int\nfrom . import cache\n"),
    ("tecomp", "from .codegen.llvm import LlvmTarget\nfrom .passes.lower import lower\n"),
    ("passes", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
               "    from tecomp.codegen.kernel import Kernel\n"),
])
def test_imports_along_the_layers_are_allowed(tmp_path, folder, source):
    for name in FOLDERS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / folder / "fine.py").write_text(source)
    assert arrows(tmp_path) == []
