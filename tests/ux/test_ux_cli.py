"""The ``tecomp`` command line: demos (small sizes), show/lower on program files, bench, help.

(The installed ``tecomp`` console script is run by ``test_ux_fresh_venv.py``.)
"""

from __future__ import annotations

import textwrap

import pytest

from tecomp import cli
from tecomp.cli_demos import DEMOS


@pytest.mark.parametrize("name", sorted(DEMOS))
def test_every_demo_runs_and_checks(name, capsys):
    assert cli.main(["demo", name, "--small"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("OK") and "MISMATCH" not in out
    assert "max error" in out and "..." in out  # checks made, progress shown


def test_help_everywhere(capsys):
    for argv in ([], ["--help"], ["demo", "--help"], ["show", "--help"], ["lower", "--help"],
                 ["bench", "--help"]):
        try:
            assert cli.main(argv) == 0
        except SystemExit as e:
            assert e.code == 0
        assert "usage: tecomp" in capsys.readouterr().out


def test_show_module_level_tensors(prog, capsys):
    assert cli.main(["show", prog]) == 0
    out = capsys.readouterr().out
    assert "C[i, j] = sum(A[i, k] * B[k, j]" in out and "A = placeholder" in out


def test_show_gradient_naive_and_optimised(prog, capsys):
    assert cli.main(["show", prog, "--grad", "--no-optimize", "--wrt", "B"]) == 0
    naive = capsys.readouterr().out
    assert "delta(" in naive and "B_grad" in naive and "A_grad" not in naive
    assert cli.main(["show", prog, "--grad", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "delta(" not in out and "A_grad" in out and "nothing looks slower" in out


def test_show_dot(prog, capsys):
    assert cli.main(["show", prog, "--dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph")


def test_lower_cost_and_build(prog, capsys):
    assert cli.main(["lower", prog, "--grad", "--head", "--size", "n=32", "--build"]) == 0
    out = capsys.readouterr().out
    assert "func " in out and "for (" in out
    # dA = H Bᵀ and dB = Aᵀ H: 2 x 32*16*8 multiply-adds, 2 flops each
    assert "cost: flops=16384" in out and "built <Kernel" in out
    assert cli.main(["lower", prog, "--grad", "--no-optimize", "--size", "n=32"]) == 0
    naive = capsys.readouterr().out
    flops = int(naive.split("cost: flops=")[1].split(",")[0])
    assert flops > 100 * 16384


def test_program_function_convention(tmp_path, prog, capsys):
    p = tmp_path / "fn.py"
    p.write_text(textwrap.dedent("""
        import tecomp as tc

        def program():
            X = tc.placeholder((4, 5), name="X")
            return tc.ops.softmax(X), [X]
    """))
    assert cli.main(["lower", str(p), "--grad"]) == 0
    assert "X_grad" in capsys.readouterr().out
    q = tmp_path / "outs.py"
    q.write_text(open(prog).read() + "\nD = C\nOUTPUTS = [C]\nINPUTS = [A, B]\n")
    assert cli.main(["show", str(q)]) == 0
    assert "C[i, j]" in capsys.readouterr().out


def test_user_errors_exit_1_with_a_message(tmp_path, prog, capsys):
    assert cli.main(["show", str(tmp_path / "missing.py")]) == 1
    assert "missing.py: no such file" in capsys.readouterr().err
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert cli.main(["show", str(empty)]) == 1
    assert "defines no tensor" in capsys.readouterr().err
    assert cli.main(["show", prog, "--grad", "--wrt", "Z"]) == 1
    assert "--wrt Z: no such input" in capsys.readouterr().err
    assert cli.main(["lower", prog, "--size", "n"]) == 1
    assert "NAME=INTEGER" in capsys.readouterr().err


def test_bench_calls_the_benchmark_main(tmp_path, monkeypatch, capsys):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench_cpu.py").write_text(
        "def main(argv=None):\n    print('BENCH', argv)\n    return 0\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--quick"]) == 0
    assert "BENCH ['--quick']" in capsys.readouterr().out

