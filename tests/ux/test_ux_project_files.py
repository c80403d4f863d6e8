"""The files a newcomer looks for exist and are linked: design document, licence, changelog,
the extras in the README, ``python -m tecomp``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import tecomp as tc

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")

ROOT = Path(__file__).resolve().parents[2]


def test_design_document_is_in_the_repository_and_linked():
    design = ROOT / "docs" / "design.md"
    assert design.is_file()
    text = design.read_text()
    for contract in ("tc.compute", "tc.gradient", "tc.build", "TECOMP_CACHE_DIR", '"tecomp"',
                     "behaves as a Python int", "tc.scan"):
        assert contract in text, contract
    assert "](docs/design.md)" in (ROOT / "README.md").read_text()
    assert "docs/design.md" in (tc.__doc__ or "")
    assert "DESIGN.md" not in (tc.__doc__ or "")


def test_the_project_speaks_of_itself_only():
    for path in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        assert "/work/" not in text and "../shared" not in text and "seeds/" not in text, path


def test_license_and_changelog():
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "Apache-2.0" in str(project["license"])
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and f"## {tc.__version__}" in changelog


def test_readme_documents_every_extra():
    readme = (ROOT / "README.md").read_text()
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                 ["optional-dependencies"])
    documented = set(re.findall(r"^\| `(\w+)` \|", readme, re.M))
    assert extras <= documented, f"extras not in the README: {sorted(extras - documented)}"
    assert {"cuda", "torch", "jax", "bench", "examples", "test"} <= documented


def test_python_dash_m_tecomp():
    run = subprocess.run([sys.executable, "-m", "tecomp", "--version"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"tecomp {tc.__version__}"
    run = subprocess.run([sys.executable, "-m", "tecomp", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0 and "usage: tecomp" in run.stdout
