"""What the README and the guide say about the programs' output agrees with the output."""

from __future__ import annotations

import re
from pathlib import Path

import tecomp as tc

ROOT = Path(__file__).resolve().parents[2]
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def _number(text: str) -> float:
    """``9.2·10⁶`` as 9.2e6."""
    mantissa, exponent = text.split("·10")
    return float(mantissa) * 10 ** int(exponent.translate(SUPERSCRIPT))


def _two_digits(x: float) -> str:
    return f"{x:.1e}"


def test_readme_conv2d_gradient_flops_are_the_demos():
    readme = (ROOT / "README.md").read_text()
    claim = re.search(r"`tecomp demo\s+conv2d`: the gradient goes from (\S+) to (\S+) flops; "
                      r"the forward is ([^)\s]+)\)", readme)
    assert claim, "the README's conv2d figures are not where this test looks for them"
    naive_claim, opt_claim, fwd_claim = (_number(g) for g in claim.groups())
    # the program of `tecomp demo conv2d` (tecomp/cli_demos.py, full size)
    X = tc.placeholder((1, 16, 32, 32), name="X")
    W = tc.placeholder((32, 16, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1, name="Y")
    naive = tc.gradient(Y, [X, W], optimize=False)
    fwd = tc.cost([Y], [X, W]).flops
    opt = tc.cost(naive, [X, W], optimize=True).flops
    before = tc.cost(naive, [X, W], optimize=False).flops
    assert _two_digits(fwd) == _two_digits(fwd_claim)
    assert _two_digits(opt) == _two_digits(opt_claim)
    assert _two_digits(before) == _two_digits(naive_claim)


def test_guide_section_4_describes_the_ir_it_prints(capsys):
    guide = (ROOT / "docs" / "guide.md").read_text()
    head, section = guide.split("## 4. Reading the loop IR", 1)
    section = section.split("\n## ", 1)[0]
    ns: dict = {"__name__": "__doc__"}
    for code in FENCE.findall(head) + FENCE.findall(section):
        exec(compile(code, "guide.md", "exec"), ns)
    ir = str(ns["lowered"])
    capsys.readouterr()
    prose = section.split("Reading it:", 1)[1].split("\n\n", 1)[0]
    quoted = re.findall(r"`([^`]+)`", prose)
    assert quoted
    for snippet in quoted:
        if snippet.startswith(("tc.", "lowered.", "[")) or snippet == "//":
            continue
        assert snippet.removesuffix("...").strip() in ir, (
            f"guide §4 quotes `{snippet}`, which the loop IR above it does not contain:\n{ir}")
