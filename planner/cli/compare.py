"""planner compare SPEC: exact vs anneal vs baselines, side by side."""
from __future__ import annotations

from planner.cli.common import finite_float, seed_int, spec_arg


def register(sub) -> None:
    p = sub.add_parser("compare", help="the portfolio vs exact vs annealing vs Megatron / rank-order / "
                                       "Pipette-style baselines")
    p.add_argument("spec", help="plan spec YAML (specs/...)")
    p.add_argument("--time-limit", type=finite_float, default=None,
                   help="seconds per solve (default: the spec's solver.time_limit_s)")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="random seed of every solve (default 0, not the spec's solver.seed)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.add_argument("--robust-plan", action="store_true",
                   help="with bandwidth snapshots: also solve the whole plan (config included) for the mean "
                        "and for the worst case over them")
    p.set_defaults(func=run)


def run(args) -> int:
    from rich.table import Table

    from planner.io import print_json
    from planner.report import console
    from planner.search.compare import compare

    spec = spec_arg(args.spec)
    res = compare(spec, args.time_limit, args.seed, robust_plan=args.robust_plan)
    if args.json:
        print_json(res)
        return 0
    over = ("" if res.get("objective", "none") == "none" else
            f", every row the {res['objective']} case over {res['scenarios']} bandwidth snapshots (solver.robust)")
    t = Table(title=f"{spec.name}: proven bound {res['bound']:.4f} s{over}")
    for c in ("method", "config", "iteration s", "vs best", "gap to bound", "mapping gap", "status", "stopped by",
              "wall s"):
        t.add_column(c)
    for r in res["rows"]:
        mg = f"{r['mapping_gap']:.2%}" if "mapping_gap" in r else "-"
        vs = "-" if r["vs_best"] is None else f"{r['vs_best']:+.2%}"         # None: outside the search space
        gap = "-" if r["gap_to_bound"] is None else f"{r['gap_to_bound']:.2%}"
        t.add_row(r["method"], r["config"], f"{r['iteration_s']:.4f}", vs, gap, mg, r["status"],
                  r.get("stopped_by", "-"), f"{r['wall_s']:.1f}")
    console().print(t)
    rb = res.get("robust")
    if rb:
        r = Table(title=f"robust mapping over {rb['snapshots']} bandwidth snapshots ({rb['config']})")
        for c in ("mapping optimised for", "mean iteration s", "worst iteration s", "status"):
            r.add_column(c)
        for k, label in (("mean_optimal", "mean over snapshots"), ("worst_optimal", "worst case (robust)")):
            r.add_row(label, f"{rb[k]['mean_s']:.4f}", f"{rb[k]['worst_s']:.4f}", rb[k]["status"])
        console().print(r)
        console().print(f"robustness costs {rb['robust_costs_on_mean']:+.2%} on the mean and saves "
                        f"{rb['robust_saves_on_worst']:.2%} on the worst case "
                        f"({rb['robust_saves_on_worst_mapping_part']:.1%} of the mapping-dependent time)")
    rp = res.get("robust_plan")
    if rp:
        r = Table(title=f"robust plan (config and mapping) over {rp['snapshots']} bandwidth snapshots")
        for c in ("plan optimised for", "config", "mean iteration s", "worst iteration s", "status"):
            r.add_column(c)
        for k, label in (("mean_optimal", "mean over snapshots"), ("worst_optimal", "worst case (robust)")):
            r.add_row(label, rp[k]["config"], f"{rp[k]['mean_s']:.4f}", f"{rp[k]['worst_s']:.4f}", rp[k]["status"])
        console().print(r)
        console().print(f"robust plan costs {rp['robust_costs_on_mean']:+.2%} on the mean and saves "
                        f"{rp['robust_saves_on_worst']:.2%} on the worst case")
    return 0
