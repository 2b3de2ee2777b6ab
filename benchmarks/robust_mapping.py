"""Robust mapping benchmark: on snapshot sets with 20% per-link drift, how much better is the
worst-case iteration time of the worst-case-optimal mapping than that of the mean-optimal one?

Snapshots are synthetic (planner.synth.snapshots: log-normal per-link drift, AR(1) over time) on the
shipped heterogeneous matrices; say so when quoting the figures.
Run:  python benchmarks/robust_mapping.py [--drift 0.2] [--snapshots 5] [--seeds 0 1 2]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from planner.robust import robust_report  # noqa: E402
from planner.solve import solve  # noqa: E402
from planner.spec import load_spec  # noqa: E402
from planner.synth import snapshots  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")
SPECS = ["specs/gpt3-13b-a100-het-128.yaml", "specs/llama2-7b-v100-het-128.yaml"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drift", type=float, default=0.2)
    ap.add_argument("--snapshots", type=int, default=5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--time-limit", type=float, default=20.0)
    args = ap.parse_args()
    print(f"{'spec':<28} {'seed':>4} {'mean-opt worst':>15} {'robust worst':>13} {'saves (iter)':>12} "
          f"{'saves (mapping)':>15} {'costs on mean':>13}")
    for path in SPECS:
        spec = load_spec(os.path.join(ROOT, path))
        sol = solve(spec, time_limit_s=20, simulate=False)
        for seed in args.seeds:
            snaps = snapshots(spec.cluster.bandwidth, args.snapshots, drift=args.drift, seed=seed)
            r = robust_report(spec, sol.config, sol.layout, snaps, time_limit_s=args.time_limit, seed=0)
            print(f"{spec.name:<28} {seed:>4} {r['mean_optimal']['worst_s']:>14.4f}s {r['worst_optimal']['worst_s']:>12.4f}s "
                  f"{r['robust_saves_on_worst']:>12.2%} {r['robust_saves_on_worst_mapping_part']:>15.2%} "
                  f"{r['robust_costs_on_mean']:>+13.2%}", flush=True)


if __name__ == "__main__":
    main()
