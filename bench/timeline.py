#!/usr/bin/env python3
"""Draws per-rank timelines of one sequence-parallel run: what overlapped with what.

Input: the files `tessera bench sp --timeline PREFIX` writes, STEM-rank<r>.json with
STEM = PREFIX-<method>-L<seq> (':' in the method written '_'), one per rank, each listing every step of the rank's plan with its measured interval (start_us,
end_us from the start of the run on that rank) and the sim executor's interval for the same
step. Output: one PNG with two panels, measured above and the cost model's sim below; one lane
per (rank, stream): stream 0 computes, streams 1.. communicate. Steps the executor fused into
one attention launch share a bar.

    python3 bench/timeline.py STEM -o docs/img/timeline.png [--title "..."]
"""
import argparse
import glob
import json
import sys

COLORS = {
    "compute": "#4c72b0", "merge": "#8172b2", "finalize": "#64b5cd",
    "sendrecv": "#dd8452", "alltoall": "#c44e52", "put": "#55a868", "get": "#937860",
    "signal": "#8c8c8c", "wait": "#bbbbbb", "barrier": "#333333",
}


def load(stem):
    paths = glob.glob(f"{stem}-rank*.json")
    if not paths:
        sys.exit(f"timeline.py: no files {stem}-rank*.json")
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    runs.sort(key=lambda r: r["rank"])
    return runs


def lanes(runs):
    """(rank, stream) pairs in drawing order, top to bottom."""
    out = []
    for r in runs:
        streams = sorted({s["stream"] for s in r["steps"]})
        out += [(r["rank"], s) for s in streams]
    return out


def draw(ax, runs, start_key, end_key, title):
    order = lanes(runs)
    y_of = {lane: i for i, lane in enumerate(order)}
    seen = set()
    for r in runs:
        drawn = set()  # fused compute steps share one interval: draw it once
        for s in r["steps"]:
            start, end = s[start_key], s[end_key]
            if start < 0 or end < start:
                continue
            key = (s["stream"], round(start, 2), round(end, 2))
            if key in drawn:
                continue
            drawn.add(key)
            kind = s["kind"]
            ax.barh(y_of[(r["rank"], s["stream"])], max(end - start, 0.5), left=start, height=0.7,
                    color=COLORS.get(kind, "#999999"), edgecolor="white", linewidth=0.3,
                    label=kind if kind not in seen else None)
            seen.add(kind)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"rank {r} " + ("compute" if s == 0 else f"comm {s}") for r, s in order],
                       fontsize=7)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("microseconds from the start of the run", fontsize=8)
    ax.grid(axis="x", linewidth=0.3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stem", help="PREFIX-<method>-L<seq> of the files, e.g. out/tl-torus_one-sided-L36864")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title", default="", help="figure title (default: method and case)")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = load(args.stem)
    title = args.title or f"{runs[0]['method']}: {runs[0]['case']}"
    n = len(lanes(runs))
    fig, axes = plt.subplots(2, 1, figsize=(11, 1.2 + 0.32 * n * 2))
    draw(axes[0], runs, "start_us", "end_us", f"{title}: measured")
    draw(axes[1], runs, "sim_start_us", "sim_end_us", "the same plan on the cost model (sim)")
    handles, labels = [], []
    for ax in axes:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    fig.legend(handles, labels, loc="upper right", fontsize=7, ncol=len(labels))
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(args.output, dpi=130)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
