"""Plot of the CPU benchmark: each peer's time relative to tecomp's, per case (log scale)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

PEERS = ("numpy", "torch", "jax", "tvm")


def plot_cpu(rows: Sequence[dict[str, Any]], paths: Sequence[Path], title: str) -> None:
    """Two panels (forward, gradient): bars of peer time / tecomp time (above 1: tecomp is
    faster), one group per case; written to every path in ``paths``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["case"] for r in rows]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.75 * len(rows) + 3), 8), sharex=True)
    width = 0.8 / len(PEERS)
    for ax, kind in zip(axes, ("fwd", "grad")):
        for n, peer in enumerate(PEERS):
            xs, ys = [], []
            for i, r in enumerate(rows):
                v = r.get(f"{peer} {kind}")
                if v:
                    xs.append(i + (n - (len(PEERS) - 1) / 2) * width)
                    ys.append(v / r[f"tecomp {kind}"])
            if xs:
                ax.bar(xs, ys, width, label=peer)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel(f"{'forward' if kind == 'fwd' else 'gradient'}: peer / tecomp time")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, ncol=len(PEERS))
    axes[-1].set_xticks(range(len(names)))
    axes[-1].set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    for p in paths:
        Path(p).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, dpi=110)
    plt.close(fig)
