"""The README's set-up commands work in a fresh virtual environment.

Follows the README: ``pip install -e ".[test]" && tecomp demo``, on the committed tree
(``git archive HEAD``, like a fresh clone), in a new venv.  To stay fast and work offline,
the venv is created with ``--system-site-packages`` (the dependencies -- NumPy, llvmlite,
islpy, SymPy, pytest -- come from the running interpreter) and pip runs with
``--no-deps --no-build-isolation``: what is tested is tecomp's own packaging (the
package-dir mapping of ``passes/``, ``solvers/``, ``codegen/`` into ``tecomp.*``, the
``tecomp`` console script) and the demo.  It runs in the normal suite (about 10-20 s) so
CI exercises it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _export_head(dest: Path) -> None:
    """The committed tree (``git archive HEAD``): a consistent snapshot, as a fresh clone."""
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT,
                             capture_output=True, timeout=120)
    if archive.returncode != 0:
        pytest.skip("not a git checkout")
    dest.mkdir()
    subprocess.run(["tar", "xf", "-"], cwd=dest, input=archive.stdout, check=True, timeout=120)


def test_readme_setup_in_a_fresh_venv(tmp_path):
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[test]" && tecomp demo' in readme
    repo = tmp_path / "checkout"
    _export_head(repo)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    bindir = venv / ("Scripts" if sys.platform == "win32" else "bin")
    # the running interpreter's pip installs into the venv (its bundled setuptools may be old)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(bindir / "python"),
                          "install", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                          "-e", ".[test]"],
                         cwd=repo, capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    where = subprocess.run([str(bindir / "python"), "-c",
                            "import tecomp, tecomp.passes, tecomp.solvers, tecomp.codegen; "
                            "print(tecomp.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).resolve().is_relative_to(repo.resolve())
    demo = subprocess.run([str(bindir / "tecomp"), "demo"], cwd=repo, capture_output=True,
                          text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert demo.stdout.rstrip().endswith("OK")
