"""Every example in ``examples/`` runs, in a small configuration.

(``examples/pinn_poisson.py --quick`` is run by the DOF tests.)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_mlp_digits_learns(capsys):
    pytest.importorskip("sklearn")
    acc = _load("mlp_digits").main(["--epochs", "2"])
    assert acc > 0.85  # chance is 0.1; two epochs reach ~0.95
    out = capsys.readouterr().out
    assert "test accuracy" in out


def test_custom_gradient_example(capsys):
    _load("custom_gradient").main()  # asserts against the hand-written STE gradient itself
    out = capsys.readouterr().out
    assert "straight-through gradient" in out and "max error vs hand-written 0.00e+00" in out


def test_butterfly_dct_example_small(capsys):
    pytest.importorskip("scipy")
    import numpy as np

    mod = _load("butterfly_dct")
    rng = np.random.default_rng(0)
    x = mod.audio_frames(64, 4, rng)
    mod.part1(x)
    mod.part2(x)
    mod.part3(rng, n=8, batch=16, steps=5)
    out = capsys.readouterr().out
    err = float(out.split("max |tecomp - scipy| = ")[1].split()[0])
    assert err < 1e-10
    assert "[2] float16" in out and "learning a 8-point butterfly" in out


def test_rnn_sequence_example_trains(capsys):
    losses = _load("rnn_sequence").main(["--steps", "100", "--train-steps", "6"])
    assert losses[-1] < losses[0]
    assert "Elman RNN, 100 steps" in capsys.readouterr().out


def test_ode_adjoint_example_matches_finite_differences(capsys):
    err = _load("ode_adjoint").main()
    assert err < 1e-6
    assert "relative error" in capsys.readouterr().out


def test_torch_layer_example_trains_under_torch_compile(capsys):
    pytest.importorskip("torch", reason="PyTorch is not installed (the torch extra)")
    # aot_eager traces the same full graphs as Inductor without its C++ compile (the
    # Inductor path of a tecomp layer is tested in tests/interop/test_interop_torch.py)
    final = _load("torch_layer").main(["--backend", "aot_eager", "--steps", "40"])
    out = capsys.readouterr().out
    first = float(out.split("loss ")[-1].split(" ->")[0])
    assert final < 0.6 * first, out
    assert "fullgraph=True" in out


def test_jax_layer_example_trains_under_jit_grad(capsys):
    pytest.importorskip("jax", reason="JAX is not installed (the jax extra)")
    final = _load("jax_layer").main(["--steps", "40"])
    out = capsys.readouterr().out
    first = float(out.split("loss ")[-1].split(" ->")[0])
    assert final < 0.6 * first, out
