"""Accuracy of the planner's iteration-time model on vTrain's measured A100 runs.

    /work/venv/bin/python benchmarks/validate_vtrain.py [--kfold 5] [--png docs/notes/compute_validation.png]

Multi-node file (109 runs, never used for fitting): MAPE, max error, Spearman and regret per group,
with the shipped A100 profile. Single-node file (the fitting set): in-sample and k-fold
cross-validated MAPE (each fold refitted without its rows). Residuals by parallel dimension and by
the analytical memory model's predicted peak (memory pressure), and a predicted-vs-measured plot.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from planner.costs import default_costs
from planner.costs.comm import CommModel
from planner.costs.compute import ComputeModel
from planner.costs.compute_fit import IterationTimeFit, cross_validate
from planner.costs.iteration import stage_memory
from planner.costs.memory import GiB
from planner.costs.metrics import mape, percent_errors
from planner.profile.validate import read_vtrain_csv, row_cluster, row_spec, supported, validate
from planner.spec import load_cluster
from planner.spec.variability import variability_flag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "planner", "data", "vtrain")


def residuals_by(rep, key):
    d = collections.defaultdict(list)
    for r in rep.rows:
        d[getattr(r["row"], key)].append(r["error_pct"])
    return {k: {"n": len(v), "mean_pct": float(np.mean(v)), "mape": float(np.mean(np.abs(v)))} for k, v in sorted(d.items())}


def memory_fraction(rep, cluster, costs):
    out = []
    for r in rep.rows:
        sub = row_cluster(r["row"], cluster)
        spec, cfg = row_spec(r["row"], sub)
        peak = max(m.total for m in stage_memory(spec, cfg, costs)) / GiB
        out.append(peak / cluster.gpu.memory_GiB)
    return np.array(out)


def print_report(title, rep):
    print(f"\n== {title}: {len(rep.rows)} rows, MAPE {rep.mape:.2f}%, max |error| {rep.max_abs_pct_error:.1f}%, "
          f"median |error| {np.median(np.abs(rep.errors)):.2f}%")
    for s in rep.skipped:
        print(f"   skipped line {s['line']} {s['config']}: {s['reason']}")
    for g in rep.groups:
        sp = "  n/a" if g["spearman"] != g["spearman"] else f"{g['spearman']:.3f}"
        print(f"   {g['name']:34s} n={g['n']:3d} MAPE {g['mape']:5.1f}% Spearman {sp} regret {100 * g['regret']:5.2f}% "
              f"pick {g['pick']} best {g['best']}")
    for key in ("tp", "pp", "dp", "mbs"):
        row = "  ".join(f"{k}:{v['mean_pct']:+.1f}/{v['mape']:.1f}({v['n']})" for k, v in residuals_by(rep, key).items())
        print(f"   residual by {key:3s} (signed mean / MAPE, n): {row}")


def plot(path, reps, mem_multi):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(16, 5))
    for (name, rep), c in zip(reps, ("tab:blue", "tab:orange")):
        m = np.array([r["measured_s"] for r in rep.rows])
        p = np.array([r["predicted_s"] for r in rep.rows])
        ax[0].scatter(m, p, s=8, c=c, alpha=0.6, label=f"{name} (MAPE {rep.mape:.1f}%)")
    lim = [0.04, 100]
    ax[0].plot(lim, lim, "k-", lw=0.8)
    ax[0].fill_between(lim, [0.9 * x for x in lim], [1.1 * x for x in lim], color="grey", alpha=0.2, label="±10%")
    ax[0].set(xscale="log", yscale="log", xlabel="measured iteration (s)", ylabel="predicted (s)",
              title="planner latency model vs vTrain A100 runs")
    ax[0].legend(fontsize=8)
    multi = reps[0][1]
    dims = ("tp", "pp", "dp", "mbs")
    pos, labels, vals = [], [], []
    x = 0
    for d in dims:
        for k, v in residuals_by(multi, d).items():
            pos.append(x)
            labels.append(f"{d}{k}")
            vals.append(v["mean_pct"])
            x += 1
        x += 1
    ax[1].bar(pos, vals, color="tab:blue")
    ax[1].set_xticks(pos)
    ax[1].set_xticklabels(labels, rotation=90, fontsize=7)
    ax[1].axhline(0, color="k", lw=0.8)
    ax[1].set(ylabel="mean signed error (%)", title="multi-node residuals by parallel dimension")
    ax[2].scatter(mem_multi, multi.errors, s=10)
    ax[2].axhline(0, color="k", lw=0.8)
    ax[2].set(xlabel="predicted peak memory / GPU memory (analytical model)", ylabel="error (%)",
              title="multi-node residual vs memory pressure")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--kfold", type=int, default=5, help="0 skips the (slow, ~4 min) cross-validation")
    ap.add_argument("--png", default=os.path.join(ROOT, "docs", "notes", "compute_validation.png"))
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--gpu-variability", default=None, type=variability_flag,
                    help="the clusters' gpu.variability (e.g. longhorn-v100-sgemm): a sensitivity, default none")
    args = ap.parse_args(argv)
    cl_multi = load_cluster(os.path.join(ROOT, "clusters", "vtrain-a100-64x8-hdr.yaml"))
    cl_single = load_cluster(os.path.join(ROOT, "clusters", "vtrain-a100-40gb-1node.yaml"))
    if args.gpu_variability:
        from dataclasses import replace

        from planner.spec.variability import read_variability
        var = read_variability(args.gpu_variability, ".", None, "--gpu-variability")   # checked, absolute
        cl_multi, cl_single = (replace(c, gpu=replace(c.gpu, variability=var)) for c in (cl_multi, cl_single))
    costs = default_costs(cl_multi)
    print(f"compute profile: {costs.compute.source}")
    print("parameters:", {k: float(f"{v:.4g}") for k, v in costs.compute.params().items()})
    multi = validate(read_vtrain_csv(os.path.join(DATA, "measured_multi_node.csv")), cl_multi, costs)
    print_report("multi-node (held out, never fitted)", multi)
    mem = memory_fraction(multi, cl_multi, costs)
    hi = mem > 0.9
    if hi.any():
        print(f"   rows predicted above 90% of GPU memory: {int(hi.sum())}, their MAPE "
              f"{np.mean(np.abs(multi.errors[hi])):.1f}% vs {np.mean(np.abs(multi.errors[~hi])):.1f}% for the rest")
    rows1 = read_vtrain_csv(os.path.join(DATA, "measured_single_node.csv"))
    single = validate(rows1, cl_single, default_costs(cl_single))
    print_report("single-node (fitting set, in-sample)", single)
    out = {"multi": {k: v for k, v in multi.as_dict().items() if k != "rows"},
           "single_in_sample": {"mape": single.mape, "max_abs_pct_error": single.max_abs_pct_error}}
    if args.kfold > 1:
        base = ComputeModel(comm=CommModel(grad_bytes=costs.comm.grad_bytes,
                                           allreduce_tables=costs.comm.allreduce_tables))
        use = supported(rows1, cl_single)
        meas = [r.measured_s for r in use]
        pred, _ = cross_validate(IterationTimeFit(cl_single, base), use, k=args.kfold)
        errs = percent_errors(pred, meas)
        print(f"\n== single-node {args.kfold}-fold cross-validated: MAPE {mape(pred, meas):.2f}%, "
              f"max |error| {np.max(np.abs(errs)):.1f}%")
        out["single_cv"] = {"k": args.kfold, "mape": mape(pred, meas),
                            "max_abs_pct_error": float(np.max(np.abs(errs)))}
    if args.png:
        os.makedirs(os.path.dirname(os.path.abspath(args.png)), exist_ok=True)
        plot(args.png, [("multi-node", multi), ("single-node", single)], mem)
        print(f"\nplot: {args.png}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
