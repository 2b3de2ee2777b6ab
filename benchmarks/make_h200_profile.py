"""Build planner/data/h200_compute_profile.json from the shipped H100 profile by datasheet ratios (not measured).

The H200 SXM is the H100's GH100 compute die with HBM3e: the same dense peaks (bf16 989, fp8 1979 TFLOP/s) and
4.8 TB/s instead of 3.35 TB/s (NVIDIA H100 and H200 Tensor Core GPU datasheets). So:
- GEMM curve (max_efficiency, half_size), attention efficiency, launch floor, tp_sync and iteration overheads:
  carried from the H100 profile unchanged (same SMs, clocks and peak);
- element-wise bandwidth (hbm_GBps): scaled by 4800 / 3350, the ratio of the datasheet HBM bandwidths.
No H200 was measured for this file: when one is lent, `bash benchmarks/profile_gpu.sh OUT` and
`planner fit compute` replace it (docs/ARCHITECTURE.md, "Calibrating on your own GPUs").

Run: python benchmarks/make_h200_profile.py [-o planner/data/h200_compute_profile.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

H100 = os.path.join(ROOT, "planner", "data", "h100_compute_profile.json")
OUT = os.path.join(ROOT, "planner", "data", "h200_compute_profile.json")
HBM_GBPS = {"H100-SXM5": 3350.0, "H200-SXM": 4800.0}     # NVIDIA datasheets
PEAK_BF16 = {"H100-SXM5": 989.0, "H200-SXM": 989.0}      # dense, NVIDIA datasheets


def build() -> dict:
    with open(H100) as f:
        h100 = json.load(f)
    compute = dict(h100["compute"])
    compute["hbm_GBps"] = round(compute["hbm_GBps"] * HBM_GBPS["H200-SXM"] / HBM_GBPS["H100-SXM5"], 1)
    fit = {"kind": "derived", "source": "planner/data/h100_compute_profile.json", "peak_tflops": PEAK_BF16["H200-SXM"],
           "measured": [],
           "note": ("Derived, not measured: the H100 profile (itself a layer fit on one H100 for the GEMM curve and "
                    "launch floor, the rest carried from the A100 fit) with the element-wise bandwidth scaled by the "
                    "datasheet HBM ratio 4800/3350; everything else unchanged because the H200 has the H100's compute "
                    "die and dense peaks. Built by benchmarks/make_h200_profile.py.")}
    return {"comm": dict(h100["comm"]), "compute": compute, "fit": fit}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", default=OUT)
    args = ap.parse_args(argv)
    from planner.io import atomic_write_text
    prof = build()
    atomic_write_text(args.output, json.dumps(prof, indent=2) + "\n")
    print(json.dumps(prof["compute"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
