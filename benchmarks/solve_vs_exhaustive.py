"""The solver's proof against exhaustion: random tiny specs (3-4 nodes of 8 GPUs of 16-80 GiB, heterogeneous links, random
search lists over schedules, recompute, ZeRO, micro-batch), solved by `planner.search.solve.solve`; then every
fitting configuration (the screen's own list, screen.fitting_configs: on fewer nodes where none fits on all), every layout of it (the screen's
mapping.layouts call) and every placement of its blocks on the nodes is scored by its mapping problem's objective
(build_problem(...).objective, the function every solver scores with). Checked per spec:

  bound     the solve's bound <= the exhaustive optimum (a bound over it would make "OPTIMAL" a false claim)
  optimal   where the solve says OPTIMAL, its objective == the exhaustive optimum (relative 1e-6)
  found     otherwise, its objective >= the optimum, and how far over it is (printed)

With --walk-share S the solve gives each configuration's builds S of its work budget (screen.WALK_SHARE, which
is 0.5) and the exhaustion scores each layout on the model the solve's builds then take (iteration.build_problems
with that allowance: walked, or past it the typical hop's): a small S makes the walked relaxations queue layouts
whose full builds fall back (screen.layout_bound's bound under both models).

What it does not check: the memory screen (the configurations it drops are trusted) and the simulator's re-rank
(solve runs with simulate=False). Nothing is tuned on it; it prints figures and exits 1 on a failed check.
Run:  python benchmarks/solve_vs_exhaustive.py [--specs 20] [--seed 0] [--time-limit 20] [--walk-share S]
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np

from planner.costs import default_costs
from planner.costs.iteration import build_problems
from planner.errors import InfeasibleError
from planner.mapping import layouts, work
from planner.search import screen
from planner.search.screen import fitting_configs
from planner.search.solve import solve
from planner.spec import parse_spec

REL = 1e-6


def draw_spec(rng: np.random.Generator, i: int):
    """One tiny spec: 3 or 4 nodes, links 25 GB/s x U(0.1, 1) per direction (some pairs far slower), a 12-24 layer
    GPT on 16-80 GiB GPUs, a search list drawn from what the planner searches; half the draws pin pp to one or two
    stages a node, some run blocking p2p or DeepSpeed's engine."""
    nodes = int(rng.choice([3, 4]))
    bw = 25 * rng.uniform(0.1, 1.0, size=(nodes, nodes))
    np.fill_diagonal(bw, 0)
    layers = int(rng.choice([12, 16, 24, 32]))
    hidden = int(rng.choice([2048, 3072, 4096]))
    memory = int(rng.choice([16, 24, 40, 80]))        # small GPUs force pipelines (the walked objectives)
    scheds = sorted(set(rng.choice(["1f1b", "interleaved", "gpipe", "zb-h1"], size=2).tolist()))
    search = {"schedules": scheds,
              "recompute": sorted(set(rng.choice(["none", "selective", "full"], size=2).tolist())),
              "zero": sorted(set(rng.choice([0, 1], size=2).tolist())),
              "micro_batch_sizes": sorted(set(rng.choice([1, 2, 4], size=2).tolist()))}
    training = {"global_batch_size": int(rng.choice([32, 64, 128])), "seq_length": 2048}
    if rng.random() < 0.5:            # two stages a node on every node row: the walked lock step / interleaved
        search["pipeline_parallel"] = [int(rng.choice([2 * nodes, nodes]))]
    if rng.random() < 0.3:
        training["overlap"] = {"p2p": False}      # interleaved's blocking p2p
    if rng.random() < 0.15:
        training["pipeline_engine"] = "deepspeed"   # its own 1F1B only
        search["schedules"] = ["1f1b"]
    d = {"model": {"name": f"m{i}", "num_layers": layers, "hidden_size": hidden, "num_attention_heads": 16,
                   "vocab_size": 50257},
         "cluster": {"name": "c", "gpu": {"type": "A100", "memory_GiB": memory,
                                             "peak_tflops": {"bf16": 312, "fp16": 312, "fp32": 19.5}},
                     "nodes": nodes, "gpus_per_node": 8,
                     "network": {"intra_node": {"bandwidth_GBps": 300}, "inter_node": {"bandwidth_Gbps": 200},
                                 "bandwidth_matrix": bw.tolist()}},
         "training": training,
         "search": search,
         "solver": {"time_limit_s": 20}}
    return parse_spec(d, f"exhaustive-{i}.yaml")


def exhaustive(spec, walk_work_s: float | None = None) -> tuple[float, object, int]:
    """(the least objective over every fitting config, layout and placement; its config; placements scored), each
    layout on build_problems' model within walk_work_s (None: walked wherever its schedule is)."""
    costs = default_costs(spec.cluster)
    fits, _ = fitting_configs(spec, costs)
    best, arg, scored = float("inf"), None, 0
    n = spec.cluster.nodes
    for _, cfg in fits:
        for lay in layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, spec.cluster.gpus_per_node, cfg.dp_shard):
            prob = build_problems(spec, cfg, lay, costs, None, walk_work_s=walk_work_s)[0]
            for nodes in itertools.permutations(range(n), lay.blocks):
                val = prob.objective(np.array(nodes).reshape(lay.rows, lay.cols))
                scored += 1
                if val < best:
                    best, arg = val, cfg
    return best, arg, scored


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--walk-share", type=float, default=None,
                    help="each configuration's build allowance, a share of the work budget (default: the solve's)")
    args = ap.parse_args()
    allowance = None
    if args.walk_share is not None:
        screen.WALK_SHARE = args.walk_share
        allowance = args.walk_share * work.WORK_PER_S * args.time_limit
    rng = np.random.default_rng(args.seed)
    fails, over, optimal, dropped = [], [], 0, 0
    t0 = time.perf_counter()
    for i in range(args.specs):
        spec = draw_spec(rng, i)
        try:
            sol = solve(spec, time_limit_s=args.time_limit, seed=0, simulate=False)
        except InfeasibleError as e:    # a draw where nothing fits is not a finding; anything else raises
            print(f"  spec {i}: infeasible ({str(e)[:60]}...)")
            continue
        opt, cfg, scored = exhaustive(spec, allowance)
        rec = sol.solver
        dropped += rec.walks_dropped
        line = (f"  spec {i}: {spec.cluster.nodes} nodes, {scored:6d} placements; solve {rec.status:<10} "
                f"{rec.objective:.6f} (bound {rec.bound:.6f}), exhaustive {opt:.6f} ({cfg.label()})")
        print(line)
        if rec.bound > opt * (1 + REL):
            fails.append(f"spec {i}: bound {rec.bound:.6f} over the optimum {opt:.6f}")
        if rec.objective < opt * (1 - REL):
            fails.append(f"spec {i}: objective {rec.objective:.6f} under the exhaustive optimum {opt:.6f}")
        if rec.status == "OPTIMAL":
            optimal += 1
            if rec.objective > opt * (1 + REL):
                fails.append(f"spec {i}: OPTIMAL at {rec.objective:.6f}, the optimum is {opt:.6f}")
        else:
            over.append(rec.objective / opt - 1)
    print(f"{args.specs} specs (seed {args.seed}), {optimal} proved optimal, {time.perf_counter() - t0:.0f} s"
          + (f"; {dropped} plans on the typical hop's model (walk share {args.walk_share:g})"
             if args.walk_share is not None else ""))
    if over:
        print(f"  not proved: {len(over)}, over the optimum by median {np.median(over):+.3%}, max {max(over):+.3%}")
    for f in fails:
        print(f"  FAIL {f}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
