"""`planner validate MEASURED.csv --cluster CLUSTER [--json]`: the latency model against measured runs."""
from __future__ import annotations

import json
import sys


def register(subparsers):
    p = subparsers.add_parser("validate", help="compare predicted and measured iteration times (vTrain CSV format)")
    p.add_argument("measured", help="CSV of measured iterations in vTrain's column format")
    p.add_argument("--cluster", required=True, help="cluster YAML the runs were measured on")
    p.add_argument("--compute-profile", default=None, help="compute profile JSON (default: the cluster's or shipped)")
    p.add_argument("--pipeline-engine", choices=("deepspeed", "megatron"), default="deepspeed",
                   help="the engine that ran the pipeline (default deepspeed: vTrain's runs are Megatron-DeepSpeed's "
                        "GPTModelPipe on DeepSpeed's pipeline engine)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from planner.costs import costs_with_compute, default_costs
    from planner.costs.compute import load_profile
    from planner.errors import SpecError
    from planner.profile.validate import read_vtrain_csv, validate
    from planner.spec import load_cluster
    cluster = load_cluster(args.cluster)
    costs = costs_with_compute(load_profile(args.compute_profile)) if args.compute_profile else default_costs(cluster)
    rows = read_vtrain_csv(args.measured)
    rep = validate(rows, cluster, costs, {"pipeline_engine": args.pipeline_engine})
    if not rep.rows:
        why = rep.skipped[0]["reason"] if rep.skipped else "no row"
        raise SpecError(args.measured, None, f"no row could be predicted on {args.cluster} ({len(rep.skipped)} "
                                             f"skipped; the first: {why})")
    if args.json:
        json.dump(rep.as_dict(), sys.stdout, indent=2)
        print()
        return 0
    out = sys.stdout
    print(f"{'group':36s} {'config':24s} {'measured s':>10s} {'predicted s':>11s} {'error %':>8s}", file=out)
    for r in rep.rows:
        print(f"{r['row'].model_key:36s} {r['row'].label():24s} {r['measured_s']:10.3f} {r['predicted_s']:11.3f} "
              f"{r['error_pct']:8.1f}", file=out)
    for s in rep.skipped:
        print(f"skipped line {s['line']} ({s['config']}): {s['reason']}", file=out)
    print(f"\nrows {len(rep.rows)}  MAPE {rep.mape:.2f}%  max |error| {rep.max_abs_pct_error:.1f}%", file=out)
    for g in rep.groups:
        sp = "n/a" if g["spearman"] != g["spearman"] else f"{g['spearman']:.3f}"
        print(f"  {g['name']:36s} n={g['n']:3d}  MAPE {g['mape']:5.1f}%  Spearman {sp:>6s}  "
              f"regret {100 * g['regret']:5.2f}%  (pick {g['pick']}, best {g['best']})", file=out)
    return 0
