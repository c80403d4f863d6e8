"""Command-line edges: the shipped examples, options of ``lower``, ``--size`` checks, syntax
errors in the user's file, options and help passed through to the benchmark."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tecomp import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))



@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_show_works_on_every_shipped_example(example, capsys):
    if example.name in ("mlp_digits.py", "butterfly_dct.py"):
        pytest.importorskip("scipy")
    assert cli.main(["show", str(example)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "= placeholder" in out and "[" in out


def test_lower_accepts_explain_and_dot(prog, capsys):
    assert cli.main(["lower", prog, "--grad", "--explain", "--size", "n=8"]) == 0
    out = capsys.readouterr().out
    assert "for (" in out and "cost: flops=" in out and "nothing looks slower" in out
    assert cli.main(["lower", prog, "--dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph")


def test_unknown_option_gets_the_commands_usage(prog, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["lower", prog, "--bogus"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "usage: tecomp lower" in err and "unrecognized arguments: --bogus" in err


def test_size_is_checked_before_anything_is_printed(prog, capsys):
    assert cli.main(["lower", prog, "--size", "m=3"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "--size m: the program has no symbolic size" in err
    assert "its sizes: n" in err
    assert cli.main(["lower", prog, "--size", "n=abc"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "--size 'n=abc': expected NAME=INTEGER" in err
    assert cli.main(["show", prog, "--explain", "--size", "n=4"]) == 0


def test_syntax_error_in_the_users_file_is_a_message(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import tecomp as tc\nA = tc.placeholder((3, 4) name='A')\n")
    assert cli.main(["show", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2: syntax error" in err and "Traceback" not in err
    assert "placeholder((3, 4) name='A')" in err


BENCH = textwrap.dedent("""
    import argparse

    def main(argv=None):
        ap = argparse.ArgumentParser(description="the benchmark")
        ap.add_argument("--cases", default="")
        ap.add_argument("--budget", type=float, default=0.4)
        args = ap.parse_args(argv)
        print("BENCH", args.cases, args.budget)
        return 0
""")


def test_bench_passes_options_and_help_to_the_benchmark(tmp_path, monkeypatch, capsys):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench_cpu.py").write_text(BENCH)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--cases", "matmul", "--budget", "0.1"]) == 0
    assert "BENCH matmul 0.1" in capsys.readouterr().out
    assert cli.main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: tecomp bench" in out and "--budget" in out
    assert cli.main(["bench", "--budget", "abc"]) == 2
    assert "tecomp bench: error: argument --budget" in capsys.readouterr().err
