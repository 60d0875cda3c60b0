#!/usr/bin/env python3
"""Summarizes `ncu --page source --csv --print-source sass` output: the SASS lines with the most
warp-stall samples and the most excess shared-memory wavefronts.
  python3 scripts/ncu_top_lines.py source.csv [N]"""
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    header = next(r for r in rows if "Source" in r)
    data = rows[rows.index(header) + 1:]
    col = {h: i for i, h in enumerate(header)}

    def value(row, name):
        try:
            return float(row[col[name]].replace(",", ""))
        except (KeyError, ValueError, IndexError):
            return 0.0

    stall = "Warp Stall Sampling (All Samples)"
    total = sum(value(r, stall) for r in data) or 1.0
    print(f"# {int(total)} stall samples over {len(data)} SASS lines")
    for r in sorted(data, key=lambda r: -value(r, stall))[:top]:
        print(f"{100 * value(r, stall) / total:5.1f}%  {r[col['Address']][-5:]}  {r[col['Source']].strip()[:80]}")
    excess = "L1 Wavefronts Shared Excessive"
    print("# most excess shared-memory wavefronts")
    for r in sorted(data, key=lambda r: -value(r, excess))[:5]:
        print(f"{int(value(r, excess)):>10}  {r[col['Address']][-5:]}  {r[col['Source']].strip()[:80]}")


if __name__ == "__main__":
    main()
