"""torchtitan's async TP: the planner's step time with and without it against published gains (docs/notes/fsdp.md,
"torchtitan's async TP, read from the source"). Nothing here is fitted: each case is a published run's shape, built
with published_recipes.build from the Dec 2024 70B 2-D row of benchmarks/data/published_recipes_fsdp.yaml.

Cases (measured gain = tokens/s with async TP / without - 1):
  tt2412 70B 2-D   the row pair itself (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 4:
                   829 -> 876 TPS/GPU, Float8, 256 H100, local batch 16)
  pr149990 bf16    pytorch/pytorch#149990 (2025-03-25): Llama 3 70B, 128 H100, full AC, FSDP 16, TP 8, bf16:
                   598 -> 673 TPS; local batch 8, seq 8192 as torchtitan's llama3_70b.toml of the time (bab83a4c)
  pr149990 fp8     the same with float8 tensorwise: 820 -> 950 TPS
The cluster is the rows' (clusters/grand-teton-h100-hbm2e.yaml); #149990 does not name its H100s.

Run: python benchmarks/async_tp_gain.py
"""
from __future__ import annotations

import copy
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import published_recipes as pr  # noqa: E402

CASES = (  # name, knob changes to the tt2412-70b-2d-256 row, GPUs, measured TPS without / with async TP
    ("tt2412 70B 2-D fp8", {}, 256, (829, 876)),
    ("pr149990 70B bf16", {"mbs": 8, "gbs": 128, "fsdp": 16, "precision": "bf16"}, 128, (598, 673)),
    ("pr149990 70B fp8", {"mbs": 8, "gbs": 128, "fsdp": 16}, 128, (820, 950)),
)


def step_s(row: dict, async_tp: bool) -> tuple[float, str]:
    from planner.search.solve import estimate_plan
    r = copy.deepcopy(row)
    r["knobs"]["tp_comm_overlap"] = async_tp
    spec, cfg, _, _ = pr.build(r)
    return estimate_plan(spec, cfg)[0].iteration_s, cfg.label()


def main() -> int:
    _, rows = pr.load_rows(pr.DATA_FSDP)
    base = next(r for r in rows if r["id"] == "tt2412-70b-2d-256")
    print(f"{'case':22s} {'config':44s} {'off s':>7s} {'on s':>7s} {'model gain':>10s} {'measured':>9s}")
    for name, knobs, gpus, (tps_off, tps_on) in CASES:
        row = copy.deepcopy(base)
        row["gpus"] = gpus
        row["knobs"].update(knobs)
        if row["knobs"].get("precision") == "bf16":      # the fp8 all-gather key exists only with fp8
            row["assumed"] = {k: v for k, v in row["assumed"].items() if k != "fsdp_float8_all_gather"}
        off, label = step_s(row, False)
        on, _ = step_s(row, True)
        print(f"{name:22s} {label:44s} {off:7.3f} {on:7.3f} {off / on - 1:+10.1%} {tps_on / tps_off - 1:+9.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
