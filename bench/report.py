#!/usr/bin/env python3
"""Side-by-side tables from benchmark JSON records (DESIGN.md section 5 format).

    python3 bench/report.py out/comm_1x4.json out/torch_comm.json [--markdown]

For each (bench, topology, case) it lists every impl's rate and the ratio of each Tessera
impl to the best non-Tessera impl of the same case (the anchor measured in the same run).
For one-sided put/get it also gives the ratio to the peer copy of the same size.
"""
import argparse
import collections
import json


def load(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            recs.extend(json.load(f))
    return recs


def rate(r):
    if "busbw_gbps" in r:
        return r["busbw_gbps"], "busbw GB/s"
    if "tflops" in r:
        return r["tflops"], "TFLOP/s"
    return r.get("gbps", 0.0), "GB/s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    recs = load(args.files)
    groups = collections.OrderedDict()
    for r in recs:
        topo = r["topology"] if not r["impl"].startswith("torch") else r["topology"]
        groups.setdefault((r["bench"], topo, r["case"]), []).append(r)
    sep = " | " if args.markdown else "  "
    if args.markdown:
        print("| bench | topology | case | impl | median us | rate | vs anchor | ok |")
        print("|---|---|---|---|---|---|---|---|")
    peer = {}
    for (bench, topo, case), rs in groups.items():
        for r in rs:
            if r.get("op") == "peer_copy":
                peer[(topo, case.split(" ")[-1])] = rate(r)[0]
    for (bench, topo, case), rs in groups.items():
        anchors = [rate(r)[0] for r in rs if not r["impl"].startswith("tessera")]
        best_anchor = max(anchors) if anchors else None
        for r in rs:
            val, unit = rate(r)
            ratio = ""
            if r["impl"].startswith("tessera") and best_anchor:
                ratio = f"{val / best_anchor:.3f}x anchor"
            elif r.get("op") in ("put", "get") and (topo, case.split(" ")[-1]) in peer and r.get("ring") == "intra":
                ratio = f"{val / peer[(topo, case.split(' ')[-1])]:.3f}x peer copy"
            cells = [bench, topo, case, r["impl"], f"{r['median_us']:.1f}", f"{val:.2f} {unit}", ratio,
                     "yes" if r["ok"] else "NO"]
            if args.markdown:
                print("| " + sep.join(cells) + " |")
            else:
                print(f"{bench:5s} {topo:12s} {case:28s} {r['impl']:28s} {r['median_us']:10.1f} us "
                      f"{val:9.2f} {unit:10s} {ratio:18s} {'ok' if r['ok'] else 'WRONG'}")


if __name__ == "__main__":
    main()
