"""torchtitan's eager Llama 3.1 8B FSDP rows (benchmarks/data/published_recipes_fsdp.yaml), step by step from the
planner's fused-kernel SXM estimate to the eager, HBM2e description of the run (docs/notes/fsdp.md, "Eager
torchtitan"). Nothing here is fitted on the rows: each column changes one stated or cited input.

Columns (step time, s, and error against the published TPS/GPU):
  fused/SXM    training.kernels fused on clusters/dgx-h100.yaml (the planner before this change)
  eager/SXM    training.kernels eager, same GPUs (H100 SXM5 profile: element-wise at 3350 GB/s)
  eager/HBM2e  eager kernels on clusters/grand-teton-h100-hbm2e.yaml with the 700 W SXM5 GEMM ceiling (0.800):
               element-wise at 2400 GB/s, the GEMMs as on the SXM5 (the rows before the 500 W GEMM rate)
  fused/500W   fused kernels on clusters/grand-teton-h100-hbm2e.yaml as shipped: 2400 GB/s and the GEMM ceiling of
               cuBLAS on a 500 W H100 (pytorch/FBGEMM#2546, benchmarks/make_grand_teton_profile.py)
  eager/500W   both: what the data file's rows now state
  eager-stack  eager/500W with element-wise work at the fraction of the datasheet bandwidth that the measured eager
               block reached on one H100 SXM (planner/data/h100_compute_profile.json fit.eager_stack_fit.hbm_GBps,
               1295 of 3350 GB/s, times 2400): a sensitivity, as that fit shares its bytes with an eager softmax
               and dropout path torchtitan does not run

Run: python benchmarks/torchtitan_eager.py [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import published_recipes as pr  # noqa: E402

ROWS = ("tt2412-llama31-8b-fsdp-8", "tt2412-llama31-8b-fsdp-128")
SXM_HBM_GBPS = 3350.0          # H100 SXM5 datasheet


def _eager_stack_GBps(hbm_GBps: float) -> float:
    with open(os.path.join(ROOT, "planner", "data", "h100_compute_profile.json")) as f:
        fit = json.load(f)["fit"]["eager_stack_fit"]["hbm_GBps"]
    return fit / SXM_HBM_GBPS * hbm_GBps


def step_s(row: dict, kernels: str, cluster: str | None, hbm: float | None = None, ceiling: float | None = None):
    from planner.costs import costs_with_compute, default_costs
    from planner.search.solve import estimate_plan
    knobs = {k: v for k, v in row["knobs"].items() if k not in ("kernels", "cluster")}
    knobs["kernels"] = kernels
    if cluster:
        knobs["cluster"] = cluster
    spec, cfg, _, _ = pr.build({**row, "knobs": knobs})
    costs = default_costs(spec.cluster)
    if hbm or ceiling:
        costs = costs_with_compute(costs.compute.with_params(hbm_GBps=hbm or costs.compute.hbm_GBps,
                                                             max_efficiency=ceiling or costs.compute.max_efficiency),
                                   costs.memory)
    return estimate_plan(spec, cfg, costs=costs)[0].iteration_s


def evaluate(row: dict) -> dict:
    spec, _, _, _ = pr.build(row)
    published, _ = pr.published_step_s(row, spec.model)
    gt = "grand-teton-h100-hbm2e"
    from planner.costs import default_costs
    hbm = default_costs(pr.build({**row, "knobs": {**row["knobs"], "cluster": gt}})[0].cluster).compute.hbm_GBps
    sxm = default_costs(pr.build({**row, "knobs": {**row["knobs"], "cluster": "dgx-h100"}})[0].cluster)
    cols = {"fused/SXM": step_s(row, "fused", None), "eager/SXM": step_s(row, "eager", None),
            "eager/HBM2e": step_s(row, "eager", gt, ceiling=sxm.compute.max_efficiency),
            "fused/500W": step_s(row, "fused", gt), "eager/500W": step_s(row, "eager", gt),
            "eager-stack": step_s(row, "eager", gt, hbm=_eager_stack_GBps(hbm))}
    return {"id": row["id"], "published_s": published,
            "columns": {k: {"s": v, "error": v / published - 1} for k, v in cols.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [r for r in pr.load_rows(pr.DATA_FSDP)[1] if r["id"] in ROWS]
    out = [evaluate(r) for r in rows]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    names = list(out[0]["columns"])
    print(f"{'row':<28} {'pub s':>6}  " + "  ".join(f"{n:>17}" for n in names))
    for r in out:
        cells = "  ".join(f"{c['s']:>7.3f} ({c['error']:+6.1%})" for c in r["columns"].values())
        print(f"{r['id']:<28} {r['published_s']:>6.3f}  {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
