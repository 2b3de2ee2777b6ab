"""Build planner/data/b200_compute_profile.json from the shipped H100 profile by a datasheet ratio (not measured).

The B200 is not the H100's die (Blackwell, two dies, 1,000 W, dense bf16 2250 / fp8 4500 TFLOP/s against 989 /
1979), so unlike the H200 nothing here is the same silicon. What is derived and what is assumed:
- element-wise bandwidth (hbm_GBps): the H100's scaled by the datasheet HBM ratio 8000 / 3350 (NVIDIA DGX B200
  datasheet: 64 TB/s for 8 GPUs; H100 SXM5 datasheet: 3.35 TB/s) -- derived;
- GEMM curve (max_efficiency as a fraction of the dense peak, half_size), fp8_relative_efficiency, attention
  efficiency, launch floor, tp_sync, iteration overheads, sustained_slowdown and the comm efficiencies: carried
  from the H100 profile unchanged -- an ASSUMPTION, not a measurement: that a B200 reaches the same fraction of its
  own peak at the same GEMM size, with the H100's per-kernel and per-layer host costs.
The B200 validation (benchmarks/published_recipes_b200.py, docs/notes/published_recipes.md "B200") is a held-out
check of this file: nothing here is tuned on it. When a B200 is lent, `bash benchmarks/profile_gpu.sh OUT` and
`planner fit compute` replace it (docs/ARCHITECTURE.md, "Calibrating on your own GPUs").

Run: python benchmarks/make_b200_profile.py [-o planner/data/b200_compute_profile.json]
"""
from __future__ import annotations

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), os.path.dirname(os.path.abspath(__file__))]

from derived_profile import H100_SXM5_HBM_GBPS, ROOT, from_h100, write_main  # noqa: E402

OUT = os.path.join(ROOT, "planner", "data", "b200_compute_profile.json")
HBM_GBPS = {"H100-SXM5": H100_SXM5_HBM_GBPS, "B200": 8000.0}     # NVIDIA datasheets (DGX B200: 64 TB/s / 8 GPUs)
PEAK_BF16 = {"H100-SXM5": 989.0, "B200": 2250.0}                 # dense (HGX B200: 36 PFLOPS sparse / 8 / 2)


def build() -> dict:
    return from_h100(HBM_GBPS["B200"], peak_tflops=PEAK_BF16["B200"], note=(
        "Derived, not measured: the H100 profile (a layer fit on one H100 for the GEMM curve and launch floor, its "
        "fp8 speed-up measured on an H200, its steady-state slowdown on an H100, the rest carried from the A100 fit) "
        "with the element-wise bandwidth scaled by the datasheet HBM ratio 8000/3350. Everything else, the GEMM "
        "curve as a fraction of the dense peak included, is carried over unchanged: an assumption (the B200 is "
        "another die, at 1,000 W), not a measurement. No B200 was measured for this file. Built by "
        "benchmarks/make_b200_profile.py."))


def main(argv=None) -> int:
    return write_main(build, OUT, argv)


if __name__ == "__main__":
    sys.exit(main())
