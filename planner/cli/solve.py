"""planner solve SPEC: search configs and mappings, write solutions/<name>.yaml."""
from __future__ import annotations

import os

from planner.cli.common import spec_arg


def register(sub) -> None:
    p = sub.add_parser("solve", help="find the fastest plan that fits (config + GPU mapping)")
    p.add_argument("spec", help="plan spec YAML (specs/...)")
    p.add_argument("--method", choices=("auto", "exact", "anneal"), default=None)
    p.add_argument("--time-limit", type=float, default=None, help="seconds (default: the spec's solver.time_limit_s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--robust", choices=("none", "worst", "mean"), default=None,
                   help="optimise over the cluster's bandwidth snapshots: worst case or mean")
    p.add_argument("--out", default=None, help="solution path (default solutions/<spec name>.yaml)")
    p.add_argument("--no-simulate", action="store_true", help="skip the op-level simulation check")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def solution_dir_for(spec_path: str) -> str:
    """solutions/ beside specs/ when the spec lives in a specs/ folder, else ./solutions."""
    d = os.path.dirname(os.path.abspath(spec_path))
    if os.path.basename(d) == "specs":
        return os.path.join(os.path.dirname(d), "solutions")
    return os.path.join(os.getcwd(), "solutions")


def run(args) -> int:
    from planner.report import show_solution
    from planner.search.solve import solve

    spec = spec_arg(args.spec)
    if args.time_limit is not None and args.time_limit <= 0:
        from planner.errors import SpecError
        raise SpecError(None, "--time-limit", "must be positive")
    sol = solve(spec, method=args.method, time_limit_s=args.time_limit, seed=args.seed, robust=args.robust,
                simulate=not args.no_simulate)
    show_solution(sol, args.out or os.path.join(solution_dir_for(args.spec), f"{spec.name}.yaml"), args.json)
    return 0
