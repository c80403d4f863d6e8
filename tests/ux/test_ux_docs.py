"""The documentation's Python blocks run: each file's blocks in order, in one namespace.

Covers ``README.md`` and the guides in ``docs/`` (files owned by other topics, such as
``docs/robustness.md``, are included too when they have Python blocks).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS = {"interop.md": ("torch", "jax")}


def blocks(path: Path) -> list[str]:
    return FENCE.findall(path.read_text())


def test_docs_have_code():
    assert len(blocks(ROOT / "docs" / "guide.md")) >= 15
    assert blocks(ROOT / "README.md")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_doc_blocks_run(path, tmp_path, monkeypatch, capsys):
    for module in NEEDS.get(path.name, ()):
        pytest.importorskip(module, reason=f"{module} is not installed (the {module} extra)")
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__doc__"}
    for n, code in enumerate(blocks(path)):
        try:
            exec(compile(code, f"{path.name}[block {n}]", "exec"), ns)
        except Exception as err:
            raise AssertionError(f"{path.name}, block {n} failed:\n{code}") from err
    capsys.readouterr()
