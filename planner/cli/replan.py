"""planner replan SOLUTION --exclude-nodes a,b: a new plan on the remaining GPUs."""
from __future__ import annotations

import os

from planner.cli.common import finite_float, seed_int


def register(sub) -> None:
    p = sub.add_parser("replan", help="re-plan a solution without some nodes (failed or slow)")
    p.add_argument("solution", help="solution YAML to re-plan (solutions/...)")
    p.add_argument("--exclude-nodes", required=True, help="comma-separated node indices or host names")
    p.add_argument("--time-limit", type=finite_float, default=10.0, help="seconds (default 10)")
    p.add_argument("--seed", type=seed_int, default=0, help="random seed (default 0)")
    p.add_argument("--robust", choices=("none", "worst", "mean"), default=None,
                   help="objective over the cluster's bandwidth snapshots (default: the solution's)")
    p.add_argument("--spec", default=None, help="the plan spec (default: the one the solution names)")
    p.add_argument("--out", default=None, help="default: <solution>-replan.yaml")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from planner.inputs import solution_inputs
    from planner.io import check_out
    from planner.report import show_solution
    from planner.search.replan import replan

    out = args.out or os.path.splitext(args.solution)[0] + "-replan.yaml"
    # before the re-plan: not over the solution, its spec, model and cluster files or the cluster's measured data, and
    # into a folder that exists (the default lies beside the solution)
    check_out(out, "--out", solution_inputs(args.solution, args.spec))
    sol = replan(args.solution, args.exclude_nodes, args.time_limit, args.seed, args.spec, args.robust)
    r = sol.extra["replan"]
    show_solution(sol, out, args.json,
                  f"excluded nodes {r['excluded_nodes']}"
                  + (f" ({', '.join(r['excluded_hosts'])})" if r["excluded_hosts"] else "")
                  + f": {r['old_iteration_s']:.3f} s -> "
                  f"{r['new_iteration_s']:.3f} s per iteration"
                  + (f"; idle nodes {r['idle_nodes']} (no plan uses every node left)" if r["idle_nodes"] else "")
                  + f"; re-planned in {r['wall_s']:.1f} s; wrote {out}")
    return 0
