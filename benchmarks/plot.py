"""Plot of the CPU benchmark: each peer's time relative to tecomp's, per case (log scale)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

PEERS = ("torch", "jax", "numpy")


def plot_cpu(rows: Sequence[dict[str, Any]], paths: Sequence[Path], title: str) -> None:
    """Panels (forward, gradient) x (thread counts): bars of peer time / tecomp time (above
    1: tecomp is faster), one group per case of the realistic suite; written to every path
    in ``paths``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.get("suite", "default") == "default"] or list(rows)
    counts = sorted({r["threads"] for r in rows})
    names = list(dict.fromkeys(r["case"] for r in rows))
    fig, axes = plt.subplots(2, len(counts), figsize=(max(8, 0.5 * len(names) + 3) *
                                                       len(counts), 8), squeeze=False,
                             sharex=True)
    width = 0.8 / len(PEERS)
    for col, t in enumerate(counts):
        by_case = {r["case"]: r for r in rows if r["threads"] == t}
        for ax, kind in zip(axes[:, col], ("fwd", "grad")):
            for n, peer in enumerate(PEERS):
                xs, ys = [], []
                for i, name in enumerate(names):
                    times = by_case.get(name, {}).get("times", {})
                    mine, theirs = times.get(f"tecomp {kind}"), times.get(f"{peer} {kind}")
                    if mine and theirs:
                        xs.append(i + (n - (len(PEERS) - 1) / 2) * width)
                        ys.append(theirs[0] / mine[0])
                if xs:
                    ax.bar(xs, ys, width, label=peer)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_yscale("log")
            ax.set_title(f"{'forward' if kind == 'fwd' else 'gradient'}, {t} thread"
                         f"{'s' if t > 1 else ''}", fontsize=9)
            ax.set_ylabel("peer time / tecomp time")
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=8, ncol=len(PEERS))
        axes[-1, col].set_xticks(range(len(names)))
        axes[-1, col].set_xticklabels(names, rotation=40, ha="right", fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    for p in paths:
        Path(p).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, dpi=100)
    plt.close(fig)
