"""Solver benchmark: plan time and certified gap from 16 to 256 heterogeneous nodes, and mapping
quality of exact CP-SAT vs our annealer vs a Pipette-style annealer at equal time.

Run:  python benchmarks/solver_scaling.py [--nodes 16 32 64 128 256] [--time-limit 60] [--equal-time 10]
          [--det 20] [--det-nodes 32 64]
Prints one table per part; parts 1-2 are wall-clock on this machine (2 cores in CI-sized machines,
noisy when shared). Part 3 runs the exact model of the chosen config in CP-SAT deterministic time
(same figures on any load), seeded by our annealer's incumbent, with and without the ring slice.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from planner.costs import default_costs
from planner.costs.iteration import build_problem
from planner.mapping.anneal import anneal
from planner.mapping.cpsat import solve_exact
from planner.search.solve import solve
from planner.spec import parse_spec

ROOT = os.path.join(os.path.dirname(__file__), "..")
CLUSTERS = {16: "a100-16x8-hdr-het", 32: "a100-32x8-het", 64: "a100-64x8-het", 128: "a100-128x8-het",
            256: "a100-256x8-het"}


def make_spec(nodes: int, model: str):
    d = {"name": f"{model}-{nodes}n",
         "model": f"../models/{model}.yaml", "cluster": f"../clusters/{CLUSTERS[nodes]}.yaml",
         "training": {"global_batch_size": 1536 if nodes < 256 else 3072, "seq_length": 2048, "precision": "bf16"},
         "search": {"schedules": ["1f1b", "interleaved", "zb-h1"], "recompute": ["selective", "full"],
                    "zero": [0, 1], "micro_batch_sizes": [1, 2], "tensor_parallel": [2, 4, 8]},
         "solver": {"method": "auto", "time_limit_s": 60, "seed": 0}}
    return parse_spec(d, os.path.join(ROOT, "specs", "_bench.yaml"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--equal-time", type=float, default=10.0)
    ap.add_argument("--det", type=float, default=20.0, help="part 3: CP-SAT deterministic time limit")
    ap.add_argument("--det-nodes", type=int, nargs="*", default=[32, 64], help="part 3: node counts (none: skip)")
    args = ap.parse_args()
    print(f"# part 1: full search ({args.model}), method auto, limit {args.time_limit:.0f} s")
    print(f"{'nodes':>5} {'GPUs':>5} {'wall s':>7} {'status':>10} {'gap':>8} {'map gap':>8} {'configs':>7} "
          f"{'solved':>6} {'proved':>6}  plan")
    chosen = {}
    for n in args.nodes:
        spec = make_spec(n, args.model)
        t = time.perf_counter()
        sol = solve(spec, time_limit_s=args.time_limit, seed=0, simulate=False)
        wall = time.perf_counter() - t
        s = sol.solver
        mg = (s.mapping_objective - s.mapping_bound) / s.mapping_objective if s.mapping_objective > 0 else 0.0
        print(f"{n:>5} {8 * n:>5} {wall:>7.1f} {s.status:>10} {s.gap:>8.2%} {mg:>8.2%} {s.candidates:>7} "
              f"{s.mappings_solved:>6} {s.mappings_proved:>6}  {sol.config.label()} {sol.estimate.iteration_s:.3f} s",
              flush=True)
        chosen[n] = (spec, sol)
    print(f"\n# part 2: mapping of the chosen config at equal time ({args.equal_time:.0f} s each); "
          "mapping part = objective - compute constant")
    print(f"{'nodes':>5} {'rank order':>11} {'pipette SA':>11} {'planner SA':>11} {'CP-SAT':>11} {'bound':>11} "
          f"{'CP-SAT status':>14}")
    for n, (spec, sol) in chosen.items():
        costs = default_costs(spec.cluster)
        prob = build_problem(spec, sol.config, sol.layout, costs)
        c = prob.const
        ro = prob.objective(prob.rank_order()) - c
        pip = anneal(prob, seed=0, style="pipette", time_limit_s=args.equal_time, init=prob.rank_order())
        ours = anneal(prob, seed=0, time_limit_s=args.equal_time, init=prob.rank_order(),
                      iterations=10 ** 9, cooling="time")
        ex = solve_exact(prob, time_limit_s=args.equal_time, seed=0, hint=prob.rank_order())
        print(f"{n:>5} {ro * 1e3:>9.2f}ms {(pip.objective - c) * 1e3:>9.2f}ms {(ours.objective - c) * 1e3:>9.2f}ms "
              f"{(ex.objective - c) * 1e3:>9.2f}ms {(max(ex.bound, prob.lower_bound()) - c) * 1e3:>9.2f}ms "
              f"{ex.status:>14}", flush=True)

    det_nodes = [n for n in args.det_nodes if n in chosen]
    if det_nodes:
        print(f"\n# part 3: exact model of the chosen config, CP-SAT deterministic time {args.det:.0f}, "
              "hint = our SA (iteration budget, seed 0); mapping part in ms")
        print(f"{'nodes':>5} {'ring slice':>10} {'hint':>9} {'CP-SAT':>9} {'bound':>9} {'map gap':>8} {'status':>10} "
              f"{'wall s':>7}")
    for n in det_nodes:
        spec, sol = chosen[n]
        prob = build_problem(spec, sol.config, sol.layout, default_costs(spec.cluster))
        c = prob.const
        hint = anneal(prob, seed=0, init=prob.rank_order()).assign
        for cap in (False, True):
            t = time.perf_counter()
            ex = solve_exact(prob, time_limit_s=args.det, wall_limit_s=20 * args.det + 60, seed=0, hint=hint,
                             ring_cap=cap)
            gap = (ex.objective - ex.bound) / (ex.objective - c)
            print(f"{n:>5} {'on' if cap else 'off':>10} {(prob.objective(hint) - c) * 1e3:>9.3f} "
                  f"{(ex.objective - c) * 1e3:>9.3f} {(ex.bound - c) * 1e3:>9.3f} {gap:>8.3%} {ex.status:>10} "
                  f"{time.perf_counter() - t:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
