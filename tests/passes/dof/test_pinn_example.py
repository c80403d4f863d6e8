"""The PINN example runs end to end (tc.laplacian + tc.gradient + tc.build) and learns."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "pinn_poisson.py"


def test_pinn_poisson_quick_loss_decreases():
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    losses = [float(v) for v in re.findall(r"^step\s+\d+\s+loss\s+(\S+)$", run.stdout, re.M)]
    assert len(losses) >= 5, run.stdout
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    err = re.search(r"relative L2 error against the exact solution: (\S+)", run.stdout)
    assert err is not None and float(err.group(1)) >= 0.0, run.stdout
