"""The 700 W profiles' sustained_slowdown from the H200 layer measurements (benchmarks/data/h200/).

Per case (Llama 2 7B s4096 mbs1, Llama 3 8B s8192 mbs2) and SDPA back end (flash, cuDNN): the wall time of one
forward + backward step replayed from a CUDA graph back to back (layer_graphed/layer_graphed.json: no host launches,
clocks where the 700 W limit holds them) over the sum of the same step's kernel times under torch.profiler
(layer_profile/layer_profile_*.json, after 15 s of steps). The planner's layer parts match those kernel times within
2-12% with both signs (benchmarks/gpu_layer_compare.py); the ratio is what a step costs beyond its kernels in steady
state: clocks lower than during the profiled steps, and the gaps between dependent kernels. The factor is the mean
over the four; benchmarks/make_h100_profile.py writes it into the H100 profile (and so the H200 one).

    python benchmarks/sustained_factor.py
"""
from __future__ import annotations

import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
DIR = os.path.join(ROOT, "benchmarks", "data", "h200")


def ratios(data_dir: str = DIR) -> dict[tuple[str, str], float]:
    """(case, back end) -> graphed steady-state wall / profiled kernel sum."""
    from gpu_layer_compare import measured
    graphed = {(r["case"], r["backend"]): r["graphed_s"]
               for r in json.load(open(os.path.join(data_dir, "layer_graphed", "layer_graphed.json"))) if "graphed_s" in r}
    out = {}
    for backend in ("flash", "cudnn"):
        for case in json.load(open(os.path.join(data_dir, "layer_profile", f"layer_profile_{backend}.json"))):
            key = (case["case"], backend)
            if "ops" in case and key in graphed:
                out[key] = graphed[key] / sum(measured(case).values())
    return out


def sustained_slowdown(data_dir: str = DIR) -> float:
    return statistics.mean(ratios(data_dir).values())


def main() -> int:
    r = ratios()
    for (case, backend), v in r.items():
        print(f"{backend:6s} {case:22s} steady / kernels {v:.3f}")
    print(f"mean {statistics.mean(r.values()):.4f} (min {min(r.values()):.3f}, max {max(r.values()):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
