"""Robust mapping benchmark: on snapshot sets with link drift, how much better is the worst-case
iteration time of the worst-case-optimal mapping (or plan) than that of the mean-optimal one, and what
does it cost on the mean?

Every snapshot set is SYNTHETIC (no measured time series is at hand), built from the cluster's shipped
(also synthetic) matrix by one of three drift models (planner/profile/snapshots.py):
  uniform      drifted_snapshots(drift=0.2): every link independently x U[0.8, 1] (mean loss 10%)
  struct-10    structured_snapshots(loss=0.10): small noise x U[0.9, 1], 30% of node pairs flaky
               (degrade to x U[0.1, 0.5] in a snapshot with a calibrated probability), 2 flaky nodes
               (all links x U[0.4, 0.8]); mean loss 10%, the same as 'uniform'
  struct-20    the same structure at mean loss 20%
  volatile     volatile_snapshots(drift=0.2, fraction=0.3): 30% of node pairs vary x U[0.8, 1] per snapshot,
               the rest are steady at the factor with the same mean time (x 0.896): the mean cannot tell
               them apart, the worst case can (the case robust mapping is made for)
  shipped      the snapshots the cluster YAML ships (a100-16x8-hdr-het: AR(1) log-normal, log-sd 0.05;
               v100-16x8-edr-drift-het: struct-10 with seed 101), when it has any
Scenarios (all printed, none dropped):
  configs      solver   = the planner's nominal optimum (solve on the main matrix)
               megatron = tp = GPUs per node, the smallest pp that fits, 1F1B (DP ring across nodes)
               dp-rows  = as megatron but pp >= 2, so that the nodes form >= 2 pipeline rows and the
                          mapping chooses which nodes share a DP ring (with pp = 1 every node is in the one
                          ring and no mapping can differ)
               dp-rows4 = as megatron but pp >= 4 (smaller DP rings, more for the mapping to choose)
  plan level   (--plans) the whole plan solved with --robust mean vs --robust worst: config choice too
Run:  python benchmarks/robust_mapping.py [--models uniform struct-10 struct-20] [--seeds 0 1]
          [--snapshots 5] [--time-limit 10] [--plans] [--specs ...] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from planner.costs import default_costs
from planner.costs.iteration import default_layout
from planner.profile.snapshots import drifted_snapshots, mean_loss, structured_snapshots, volatile_snapshots
from planner.search.compare import megatron_config
from planner.search.robust import robust_plan_report, robust_report
from planner.search.solve import solve
from planner.spec import load_spec

ROOT = os.path.join(os.path.dirname(__file__), "..")
SPECS = ["specs/llama2-7b-v100-het-128.yaml", "specs/gpt3-13b-a100-het-128.yaml",
         "specs/llama2-7b-v100-het-drift-128.yaml"]
MODELS = {
    "uniform": lambda base, k, seed: drifted_snapshots(base, k, drift=0.2, seed=seed),
    "struct-10": lambda base, k, seed: structured_snapshots(base, k, loss=0.10, seed=seed),
    "struct-20": lambda base, k, seed: structured_snapshots(base, k, loss=0.20, seed=seed),
    "volatile": lambda base, k, seed: volatile_snapshots(base, k, drift=0.2, fraction=0.3, seed=seed),
    "shipped": None,     # the cluster's own bandwidth_snapshots (specs whose cluster ships them; seed unused)
}


def tp_node_config(spec, costs, min_pp: int = 1):
    """Megatron's tp = GPUs-per-node config (planner.compare.megatron_config) and its rank-order layout."""
    cfg = megatron_config(spec, costs, min_pp)
    return None if cfg is None else (cfg, default_layout(cfg, spec.cluster.gpus_per_node))


def snapshot_sets(spec, args):
    """(model, seed, snapshots) for every drift model and seed asked for; 'shipped' once, if any."""
    for model in args.models:
        if model == "shipped":
            if spec.cluster.snapshots:
                yield model, "-", list(spec.cluster.snapshots)
            continue
        for seed in args.seeds:
            yield model, seed, MODELS[model](spec.cluster.bandwidth, args.snapshots, seed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--specs", nargs="+", default=SPECS)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--configs", nargs="+", default=["solver", "megatron", "dp-rows", "dp-rows4"])
    ap.add_argument("--snapshots", type=int, default=5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--time-limit", type=float, default=10.0, help="per mapping solve (s)")
    ap.add_argument("--plans", action="store_true", help="also solve whole plans robust vs mean")
    ap.add_argument("--plan-time-limit", type=float, default=20.0)
    ap.add_argument("--json", help="write all rows here")
    args = ap.parse_args()
    rows = []
    hdr = (f"{'spec':<24} {'config':<8} {'drift':<9} {'seed':>4} {'loss':>5} {'mean-opt worst':>14} "
           f"{'robust worst':>12} {'saves':>7} {'(mapping)':>9} {'cost on mean':>12} {'map share':>10}  status")
    print(hdr, flush=True)
    for path in args.specs:
        spec = load_spec(os.path.join(ROOT, path))
        costs = default_costs(spec.cluster)
        picks = {}
        if "solver" in args.configs:
            sol = solve(spec, time_limit_s=20, simulate=False, costs=costs)
            picks["solver"] = (sol.config, sol.layout)
        if "megatron" in args.configs:
            picks["megatron"] = tp_node_config(spec, costs, 1)
        if "dp-rows" in args.configs:
            picks["dp-rows"] = tp_node_config(spec, costs, 2)
        if "dp-rows4" in args.configs:
            picks["dp-rows4"] = tp_node_config(spec, costs, 4)
        for cname, pick in picks.items():
            if pick is None:
                print(f"{spec.name:<24} {cname:<8} no config fits", flush=True)
                continue
            cfg, lay = pick
            print(f"# {spec.name} {cname}: {cfg.label()} layout {lay.label()}", flush=True)
            for model, seed, snaps in snapshot_sets(spec, args):
                    base = spec.cluster.bandwidth
                    t = time.perf_counter()
                    r = robust_report(spec, cfg, lay, snaps, time_limit_s=args.time_limit, seed=0, costs=costs)
                    mo, wo = r["mean_optimal"], r["worst_optimal"]
                    share = mo["mapping_worst_s"] / mo["worst_s"]
                    row = {"level": "mapping", "spec": spec.name, "config_rule": cname, "drift": model,
                           "seed": seed, "loss": mean_loss(base, snaps), "wall_s": time.perf_counter() - t, **r}
                    rows.append(row)
                    print(f"{spec.name:<24} {cname:<8} {model:<9} {seed:>4} {row['loss']:>5.2f} {mo['worst_s']:>13.3f}s "
                          f"{wo['worst_s']:>11.3f}s {r['robust_saves_on_worst']:>7.2%} "
                          f"{r['robust_saves_on_worst_mapping_part']:>9.1%} {r['robust_costs_on_mean']:>+12.2%} "
                          f"{share:>10.1%}  {mo['status']}/{wo['status']}"
                          f"{' (swap)' if mo['picked_other'] or wo['picked_other'] else ''}", flush=True)
        if args.plans:
            for model, seed, snaps in snapshot_sets(spec, args):
                    r = robust_plan_report(spec, snaps, time_limit_s=args.plan_time_limit, seed=0, costs=costs)
                    mo, wo = r["mean_optimal"], r["worst_optimal"]
                    rows.append({"level": "plan", "spec": spec.name, "drift": model, "seed": seed, **r})
                    print(f"{spec.name:<24} {'PLAN':<8} {model:<9} {seed:>4} {mean_loss(spec.cluster.bandwidth, snaps):>5.2f} "
                          f"{mo['worst_s']:>13.3f}s {wo['worst_s']:>11.3f}s {r['robust_saves_on_worst']:>7.2%} "
                          f"{'':>9} {r['robust_costs_on_mean']:>+12.2%} {'':>10}  "
                          f"mean-opt {mo['config']} [{mo['layout']}] / robust {wo['config']} [{wo['layout']}]", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    maps = [r for r in rows if r["level"] == "mapping"]
    met = [r for r in maps if r["robust_saves_on_worst"] >= 0.05]
    print(f"\n>= 5% worst-case saving (whole iteration, mapping level): {len(met)} of {len(maps)} rows"
          + "".join(f"\n  {r['spec']} {r['config_rule']} {r['drift']} seed {r['seed']}: "
                    f"{r['robust_saves_on_worst']:.2%}" for r in met))


if __name__ == "__main__":
    main()
