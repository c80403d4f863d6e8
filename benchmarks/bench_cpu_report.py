"""Tables of the CPU benchmark (``bench_cpu.py``): one per suite and thread count."""

from __future__ import annotations

import math
from typing import Any, Sequence

PEERS = ("torch", "jax", "numpy")


def _ms(v: float | None) -> str:
    if v is None:
        return "—"
    ms = v * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def time_of(row: dict[str, Any], key: str) -> float | None:
    t = row.get("times", {}).get(key)
    return t[0] if t else None


def ratio(row: dict[str, Any], kind: str) -> float | None:
    """tecomp / best of (PyTorch, JAX) for ``kind`` "fwd" or "grad"."""
    mine = time_of(row, f"tecomp {kind}")
    best = [t for t in (time_of(row, f"{p} {kind}") for p in ("torch", "jax")) if t]
    return mine / min(best) if mine and best else None


def geomean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(row: dict[str, Any]) -> str:
    fr, gr = ratio(row, "fwd"), ratio(row, "grad")
    parts = [f"fwd {fr:.2f}x" if fr else "fwd —", f"grad {gr:.2f}x" if gr else "grad —"]
    if row.get("notes"):
        parts.append(f"{len(row['notes'])} note(s)")
    return ", ".join(parts)


def _cell(row: dict[str, Any], key: str) -> str:
    t = row.get("times", {}).get(key)
    if not t:
        return "—"
    return f"{_ms(t[0])} ±{t[1] * 50:.0f}%" if t[1] >= 0.1 else _ms(t[0])


def table(rows: list[dict[str, Any]], peak: float) -> list[str]:
    head = ["case"]
    for kind in ("fwd", "grad"):
        head += [f"tecomp {kind}"] + [f"{p} {kind}" for p in PEERS] + [f"{kind} ratio"]
    head += ["tecomp GFLOP/s fwd (% peak)", "tecomp / OpenBLAS"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["case"]]
        for kind in ("fwd", "grad"):
            cells += [_cell(r, f"{fw} {kind}") for fw in ("tecomp",) + PEERS]
            x = ratio(r, kind)
            cells.append(f"**{x:.2f}**" if x and x > 1.0 else (f"{x:.2f}" if x else "—"))
        t = time_of(r, "tecomp fwd")
        if r.get("flops") and t:
            gf = r["flops"] / t / 1e9
            pct = 100 * gf / peak if peak else 0
            cells.append(f"{gf:.0f} ({pct:.0f}%{' BUG: above peak' if pct > 100 else ''})")
        else:
            cells.append("—")
        nb = time_of(r, "numpy fwd")
        cells.append(f"{nb / t:.0%}" if r.get("flops") and nb and t else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def document(rows: list[dict[str, Any]], peaks: dict[int, float], counts: list[int],
             stamp: str, machine: str, command: str) -> str:
    out = ["# CPU benchmark", "", f"{stamp}; {machine}.", "",
           f"Command: `python -m benchmarks.bench_cpu {command}`", "",
           "Measured float32 FMA peak (benchmarks/peak.py, same run): " + ", ".join(
               f"{t} thread{'s' if t > 1 else ''} {p:.0f} GFLOP/s" for t, p in peaks.items())
           + ".", "",
           "Times in milliseconds: medians of round-robin rounds in one process per case "
           "(± half the interquartile range when it exceeds 5%). Ratios: tecomp / best of "
           "(PyTorch, JAX); below 1 tecomp is faster, above 1 in bold. GFLOP/s for "
           "contractions, with % of the measured peak for the same thread count.", ""]
    blas = sorted({r["blas"] for r in rows if r.get("blas")})
    for suite, title in (("default", "Realistic sizes"), ("latency", "Latency (small cases)")):
        for t in counts:
            part = [r for r in rows if r.get("suite") == suite and r["threads"] == t]
            if not part:
                continue
            out += [f"## {title}, {t} thread{'s' if t > 1 else ''}", "",
                    *table(part, peaks.get(t, 0.0)), ""]
            fwd = [ratio(r, "fwd") for r in part]
            grad = [ratio(r, "grad") for r in part]
            gf, gg = geomean([x for x in fwd if x]), geomean([x for x in grad if x])
            if gf and gg:
                worst = max(x for x in fwd + grad if x)
                out += [f"Geometric mean tecomp / best(PyTorch, JAX): forward {gf:.2f}, "
                        f"gradient {gg:.2f}; worst case {worst:.2f}.", ""]
    notes = [f"* {r['case']} ({r['threads']} thr): {n}" for r in rows for n in r.get("notes", [])]
    if notes:
        out += ["Notes:", "", *notes, ""]
    if blas:
        out += ["NumPy's BLAS (threadpoolctl, OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset): "
                + " / ".join(blas), ""]
    return "\n".join(out)


README_START = "<!-- benchmark-table -->"
README_END = "![CPU benchmark](docs/bench_cpu.png)"


def readme_section(rows: list[dict[str, Any]], peaks: dict[int, float], counts: list[int],
                   stamp: str, cpu: str, load: str, results: str = "cpu.md") -> str:
    """The README's benchmark paragraph: the realistic suite's ratios for each thread
    count, from one run (``rows``)."""
    head = ["case"] + [f"{k} ratio, {t} thr" for t in counts for k in ("fwd", "grad")] + \
        [f"GFLOP/s (% peak), {counts[0]} thr"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    names = list(dict.fromkeys(r["case"] for r in rows if r.get("suite") == "default"))
    by = {(r["case"], r["threads"]): r for r in rows}
    summary = []
    for name in names:
        cells = [name]
        for t in counts:
            r = by.get((name, t), {})
            for kind in ("fwd", "grad"):
                x = ratio(r, kind) if r else None
                cells.append(f"{x:.2f}" if x else "—")
        r = by.get((name, counts[0]), {})
        t0 = time_of(r, "tecomp fwd") if r else None
        if r.get("flops") and t0:
            gf = r["flops"] / t0 / 1e9
            cells.append(f"{gf:.0f} ({100 * gf / peaks[counts[0]]:.0f}%)")
        else:
            cells.append("—")
        lines.append("| " + " | ".join(cells) + " |")
    for t in counts:
        part = [r for r in rows if r.get("suite") == "default" and r["threads"] == t]
        gf = geomean([x for x in (ratio(r, "fwd") for r in part) if x])
        gg = geomean([x for x in (ratio(r, "grad") for r in part) if x])
        if gf and gg:
            summary.append(f"* {t} thread{'s' if t > 1 else ''}: geometric mean tecomp / "
                           f"best(PyTorch, JAX) forward {gf:.2f}, gradient {gg:.2f}")
    peak = ", ".join(f"{t} thr {p:.0f}" for t, p in peaks.items())
    import textwrap

    return "\n".join([
        README_START, *textwrap.wrap(
        f"CPU, {stamp}, {cpu} ({load}); float32; ratios are tecomp / best of (PyTorch, JAX) "
        "timed round-robin in one process per case (below 1: tecomp is faster); measured FMA "
        f"peak {peak} GFLOP/s. Times, spreads, NumPy/OpenBLAS, notes and (in a full run) "
        "the latency suite: "
        f"[benchmarks/results/{results}](benchmarks/results/{results}); reproduce with "
        "`python -m benchmarks.bench_cpu` (peers per [benchmarks/README.md]"
        "(benchmarks/README.md)).", 100, break_on_hyphens=False), "", *lines, "", *summary,
        "", ""])


def update_readme(path: Any, section: str) -> bool:
    """Replace the README's benchmark paragraph (from :data:`README_START` up to the plot)
    with ``section``; False when the markers are missing."""
    from pathlib import Path

    p = Path(path)
    text = p.read_text()
    a, b = text.find(README_START), text.find(README_END)
    if a < 0 or b < a:
        return False
    p.write_text(text[:a] + section + text[b:])
    return True
