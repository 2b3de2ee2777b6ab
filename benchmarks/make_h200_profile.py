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

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), os.path.dirname(os.path.abspath(__file__))]

from derived_profile import H100_SXM5_HBM_GBPS, ROOT, from_h100, write_main  # noqa: E402
from sustained_factor import sustained_slowdown  # noqa: E402

OUT = os.path.join(ROOT, "planner", "data", "h200_compute_profile.json")
HBM_GBPS = {"H100-SXM5": H100_SXM5_HBM_GBPS, "H200-SXM": 4800.0}     # NVIDIA datasheets
PEAK_BF16 = {"H100-SXM5": 989.0, "H200-SXM": 989.0}                  # dense, NVIDIA datasheets


def build() -> dict:
    prof = from_h100(HBM_GBPS["H200-SXM"], peak_tflops=PEAK_BF16["H200-SXM"], note=(
        "Derived, not measured: the H100 profile (itself a layer fit on one H100 for the GEMM curve and "
        "launch floor, the rest carried from the A100 fit) with the element-wise bandwidth scaled by the "
        "datasheet HBM ratio 4800/3350 (so 100% of the datasheet, as the H100's: an assumption carried from the A100 fit's bound, see the H100 profile's bound_limited); everything else unchanged because the H200 has the H100's compute "
        "die and dense peaks, except sustained_slowdown, the H200's own (a Llama layer's steady-state step over "
        "its profiled kernels on one H200, benchmarks/sustained_factor.py). The H100 profile's "
        "fp8_relative_efficiency was itself measured on an H200 (benchmarks/fp8_gemm_ratio.py). Built by "
        "benchmarks/make_h200_profile.py."))
    prof["compute"]["sustained_slowdown"] = round(sustained_slowdown("H200"), 2)
    return prof


def main(argv=None) -> int:
    return write_main(build, OUT, argv)


if __name__ == "__main__":
    sys.exit(main())
