"""The 700 W profiles' sustained_slowdown, per GPU type, from layer measurements on one H200 and two H100 leases
(benchmarks/data/h200/, benchmarks/data/h100/ and benchmarks/data/h100/repeat/).

Per case (Llama 2 7B s4096 mbs1, Llama 3 8B s8192 mbs2) and SDPA back end (flash, cuDNN): the wall time of one
forward + backward step replayed from a CUDA graph back to back (layer_graphed/layer_graphed.json: no host launches,
clocks where the 700 W limit holds them) over the sum of the same step's kernel times under torch.profiler
(layer_profile/layer_profile_*.json, after 15 s of steps). The ratio is what a step costs beyond its kernels in steady
state: clocks lower than during the profiled steps, and the gaps between dependent kernels. Each type's factor is the
mean over its own runs' cases: H200 1.060 (one machine), H100 1.036 and 1.021 (two leases on Nov 26, each a fresh
machine, the GPU's UUID not read; both below the H200; docs/notes/gpu_h200.md, "One H100").
benchmarks/make_h100_profile.py writes the H100's into the H100 profile, benchmarks/make_h200_profile.py the H200's
into the H200 one.

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
H100_DIR = os.path.join(ROOT, "benchmarks", "data", "h100")
DIRS = {"H200": (DIR,), "H100": (H100_DIR, os.path.join(H100_DIR, "repeat"))}


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


def sustained_slowdown(gpu: str = "H100") -> float:
    """The mean steady / kernels ratio over every case of every machine of the GPU type."""
    return statistics.mean(v for d in DIRS[gpu] for v in ratios(d).values())


def main() -> int:
    for gpu, dirs in DIRS.items():
        for d in dirs:
            r = ratios(d)
            for (case, backend), v in r.items():
                print(f"{os.path.relpath(d, ROOT)} {backend:6s} {case:22s} steady / kernels {v:.3f}")
            print(f"{os.path.relpath(d, ROOT)} mean {statistics.mean(r.values()):.4f} (min {min(r.values()):.3f}, "
                  f"max {max(r.values()):.3f})")
        print(f"{gpu}: {sustained_slowdown(gpu):.4f} over {len(dirs)} machine(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
