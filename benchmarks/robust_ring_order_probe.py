"""What-if probe for issue #6: would a ring-order data-parallel model open room for robust mappings?

The planner used to charge a row's inter-node DP ring its slowest *pair* of nodes (any two of the row).
NCCL's inter-node ring visits the nodes in rank order, so only the K neighbour links of the column order
count; MappingProblem.dp_costs now charges that (branch ringorder), and MappingProblem.dp_costs_pairs keeps
the pair model. This probe switches dp_costs between the two (monkeypatch; only the annealer is used:
3 seeds x 20k iterations per solve) and reports, per drift model and seed, the worst case over 5 snapshots
of the mean-optimal and of the worst-case-optimal mapping.

    python benchmarks/robust_ring_order_probe.py ring|set SPEC      (about 5 minutes per mode, 2 cores)
    python benchmarks/robust_ring_order_probe.py nominal SPEC...    (main matrix only: both models' optima and
                                                                    Megatron's rank order under each, ~1 min/spec)
"""
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import robust_mapping as RM  # noqa: E402

from planner.costs import default_costs  # noqa: E402
from planner.costs.iteration import build_problem  # noqa: E402
from planner.mapping import problem as P  # noqa: E402
from planner.mapping.anneal import anneal  # noqa: E402
from planner.spec import load_spec  # noqa: E402

dp_ring = P.MappingProblem.dp_costs           # ring order (the planner's model)
dp_pair = P.MappingProblem.dp_costs_pairs     # the former pair model


def best_of(probs, robust, seeds=3):
    runs = [anneal(probs, seed=s, robust=robust, iterations=20000) for s in range(seeds)]
    return min(runs, key=lambda r: r.objective).assign


def nominal(spec_paths) -> None:
    """One matrix: the pair model's optimum, its time under ring order, the ring model's optimum, rank order."""
    pair_dp = dp_pair
    for path in spec_paths:
        spec = load_spec(os.path.join(ROOT, path))
        costs = default_costs(spec.cluster)
        for cname, minpp in (("megatron", 1), ("dp-rows", 2), ("dp-rows4", 4)):
            pick = RM.tp_node_config(spec, costs, minpp)
            if pick is None:
                continue
            cfg, lay = pick
            prob = build_problem(spec, cfg, lay, costs)
            out = {}
            for name, dp in (("pair", pair_dp), ("ring", dp_ring)):
                P.MappingProblem.dp_costs = dp
                out[name] = (best_of([prob], "worst", seeds=2), prob.objective(prob.rank_order()))
            P.MappingProblem.dp_costs = dp_ring
            pair_opt_under_ring = prob.objective(out["pair"][0])
            ring_opt = prob.objective(out["ring"][0])
            P.MappingProblem.dp_costs = pair_dp
            pair_opt = prob.objective(out["pair"][0])
            print(f"{spec.name} {cname} {cfg.label()} grid {lay.rows}x{lay.cols}: pair-model optimum {pair_opt:.3f} s "
                  f"(under ring order {pair_opt_under_ring:.3f}); ring-model optimum {ring_opt:.3f} s; "
                  f"rank order: pair {out['pair'][1]:.3f}, ring {out['ring'][1]:.3f} s", flush=True)
    P.MappingProblem.dp_costs = dp_ring


def main(mode: str, spec_path: str) -> None:
    P.MappingProblem.dp_costs = dp_ring if mode == "ring" else dp_pair
    spec = load_spec(os.path.join(ROOT, spec_path))
    costs = default_costs(spec.cluster)
    for cname, minpp in (("dp-rows", 2), ("dp-rows4", 4)):
        cfg, lay = RM.tp_node_config(spec, costs, minpp)
        for model in ("uniform", "struct-10", "struct-20"):
            for seed in (0, 1):
                snaps = RM.MODELS[model](spec.cluster.bandwidth, 5, seed)
                probs = [build_problem(spec, cfg, lay, costs, bandwidth=m) for m in snaps]
                res = {rob: best_of(probs, rob) for rob in ("mean", "worst")}
                w = {k: max(p.objective(a) for p in probs) for k, a in res.items()}
                mn = {k: np.mean([p.objective(a) for p in probs]) for k, a in res.items()}
                wbest = min(w["worst"], w["mean"])      # heuristic solves: keep the better worst case
                print(f"{mode} {cname} {cfg.label()} {model} {seed}: mean-opt worst {w['mean']:.3f} "
                      f"robust worst {wbest:.3f} saves {1 - wbest / w['mean']:.2%}  "
                      f"cost on mean {mn['worst'] / mn['mean'] - 1:+.2%}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.split("\n\n")[-1])      # the usage lines
    if sys.argv[1] == "nominal":
        nominal(sys.argv[2:])
    else:
        main(sys.argv[1], sys.argv[2])
