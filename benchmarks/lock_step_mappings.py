"""Waited 1F1B plans with two or more stages a node: the estimate (the mapping objective, iteration.evaluate) against
the op-level replay (simulate) on the rank order and on random mappings, where several row boundaries leave the
typical hop at once (docs/notes/simulator.md, "1F1B's lock step walked in the objective").

    python benchmarks/lock_step_mappings.py [--draws 6] [--seed 1]

Plans: fuzz seed 2 case 81 (tp4 pp32 dp1 m32 on the drift cluster, two stages a node), and tp4 pp8 1F1B at two
stages a node on the drift spec's cluster (dp4 m64, recompute none) and the 175B spec's (dp32 m48, selective).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from planner.config import ParallelConfig  # noqa: E402
from planner.costs import default_costs  # noqa: E402
from planner.costs.iteration import build_problem, evaluate  # noqa: E402
from planner.mapping.problem import Layout  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.spec import load_spec  # noqa: E402


def errors(spec, cfg, lay, draws, seed) -> list[float]:
    """est / replay - 1: the rank order, then draws - 1 random placements over the cluster's nodes."""
    costs = default_costs(spec.cluster)
    prob = build_problem(spec, cfg, lay, costs)
    rng = np.random.default_rng(seed)
    out = []
    for k in range(draws):
        n = lay.rows * lay.cols
        a = (np.arange(n) if k == 0 else rng.permutation(len(prob.nodes))[:n]).reshape(lay.rows, lay.cols)
        e = evaluate(spec, cfg, prob, a, costs).iteration_s
        s = simulate(spec, cfg, costs=costs, layout=lay, assign=a, nodes=prob.nodes).iteration_s
        out.append(e / s - 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    import fuzz_plans
    case = fuzz_plans.draw(2, 81)
    plans = [("fuzz seed 2 case 81", fuzz_plans._spec(case["data"], case["spec"]), case["cfg"], Layout(2, 1, 16, 1))]
    tp4pp8 = {"tp": 4, "pp": 8, "micro_batch_size": 1, "schedule": "1f1b", "zero": 1}
    for name, cfg, lay in [
            ("llama2-7b-v100-het-drift-128", {**tp4pp8, "dp": 4, "num_microbatches": 64, "recompute": "none"},
             Layout(2, 1, 4, 4)),
            ("gpt3-175b-a100-het-1024", {**tp4pp8, "dp": 32, "num_microbatches": 48, "recompute": "selective"},
             Layout(2, 1, 4, 32))]:
        plans.append((name, load_spec(os.path.join(ROOT, "specs", f"{name}.yaml")), cfg, lay))
    for name, spec, cfg, lay in plans:
        errs = errors(spec, ParallelConfig.from_dict(cfg, None, "config"), lay, args.draws, args.seed)
        print(f"{name}: {lay}: estimate / replay - 1, rank order then random: "
              + " ".join(f"{x:+.2%}" for x in errs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
