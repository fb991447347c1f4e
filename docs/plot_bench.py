#!/usr/bin/env python3
"""Draw docs/bench.png from the standard benchmark's own output (docs/bench-300x5.txt).

    pip install matplotlib
    python3 docs/plot_bench.py [bench output] [png]

The input is what `just bench` prints (examples/bench.rs, its final table: one line per
controller manager under a "controller manager ... peak RSS MB" header), one block per run,
each block after a "== run N" line; lines starting with "#" are comments. The plot shows, per
measure, the median over the runs of edgekcm against the other controller manager, with the
range of the runs as error bars, and the ratio.
"""

import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
COLUMNS = ["create s", "converge s", "converge CPU s", "ns delete s", "delete CPU s", "peak RSS MB"]
SHOWN = [
    ("converge s", "converge (s)"),
    ("converge CPU s", "converge CPU (s)"),
    ("ns delete s", "namespace deletion (s)"),
    ("delete CPU s", "deletion CPU (s)"),
    ("peak RSS MB", "peak RSS (MB)"),
]


def parse(path):
    """{manager name: {column: [value per run]}} from the bench's printed tables."""
    runs = {}
    in_table = False
    for line in Path(path).read_text().splitlines():
        if not line.strip() or line.startswith("#") or line.startswith("=="):
            in_table = False
            continue
        if line.startswith("controller manager"):
            in_table = True
            continue
        if not in_table:
            continue
        fields = line.split()
        name, values = fields[0], fields[1:]
        if len(values) != len(COLUMNS):
            raise SystemExit(f"{path}: unexpected line {line!r}")
        row = runs.setdefault(name, {c: [] for c in COLUMNS})
        for column, value in zip(COLUMNS, values):
            if value not in ("-", "timeout"):
                row[column].append(float(value))
    if len(runs) != 2 or "edgekcm" not in runs:
        raise SystemExit(f"{path}: expected edgekcm and one other controller manager")
    return runs


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else HERE / "bench-300x5.txt"
    target = sys.argv[2] if len(sys.argv) > 2 else HERE / "bench.png"
    runs = parse(source)
    other = next(n for n in runs if n != "edgekcm")
    n_runs = len(runs["edgekcm"]["converge s"])

    fig, axes = plt.subplots(1, len(SHOWN), figsize=(12, 3.6))
    for ax, (column, title) in zip(axes, SHOWN):
        bars = []
        for name, colour in (("edgekcm", "#d95f02"), (other, "#7570b3")):
            values = runs[name][column]
            median = statistics.median(values)
            low, high = median - min(values), max(values) - median
            bars.append(median)
            ax.bar(name if name == "edgekcm" else "upstream", median, color=colour,
                   yerr=[[low], [high]], capsize=4)
        ax.set_title(title, fontsize=10)
        ax.text(0.5, 0.95, f"{bars[0] / bars[1]:.2f}x", transform=ax.transAxes,
                ha="center", va="top", fontsize=11, fontweight="bold")
        ax.set_ylim(0, max(max(runs[n][column]) for n in runs) * 1.25)
        ax.tick_params(axis="x", labelsize=9)
    fig.suptitle(
        f"300 Deployments x 5 on kube-apiserver v1.28.4, 2 cores: edgekcm against {other} "
        f"v1.28.4 (median of {n_runs} runs, bars: range)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
