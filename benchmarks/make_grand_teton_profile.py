"""Build clusters/grand-teton-h100-hbm2e.compute.json, the compute profile of torchtitan's benchmark GPUs
(pytorch/torchtitan @ b5bcd76c benchmarks/llama3_h100_202412_torchtitan.md, "Hardware": H100 with 96GB HBM2e at
2.4 TB/sec, default 500W power limit, Grand Teton hosts), from the shipped H100 SXM5 (700 W) profile and two
published figures for that part:

- element-wise bandwidth (hbm_GBps): the H100 profile's (3350 GB/s: the H100 SXM5 datasheet bound) scaled by
  2400 / 3350, the ratio of the stated HBM2e bandwidth to the H100 SXM5 datasheet's 3.35 TB/s;
- GEMM ceiling (max_efficiency): measured cuBLAS bf16 GEMMs on a 500 W H100, pytorch/FBGEMM#2546 (PR description,
  2024-04-29, Meta): 585.23 TFLOP/s at 8192^3, 575.12 at 65536x8192x7168, 546.31 at 65536x3584x8192 (FBGEMM_500W).
  Each implies a ceiling through the H100 curve eff = max_efficiency * F / (F + half_size) with the H100's
  half_size; the profile takes their mean (0.579, against 0.800 measured on the 700 W SXM5). The 500 W cap lowers the
  tensor-core clock; torchtitan's footnote only brackets the peak ("between SXM and NVL, and we don't know its exact
  value"), so the cluster file keeps the SXM datasheet peak (989, for MFU) and the cap lives in this ceiling. The
  same PR's fp8 row-wise GEMMs (1126 / 1083 / 1141 TFLOP/s) are what the fp8 model gives with it at the default
  fp8_relative_efficiency (1979 * 0.96 * 0.579 = 1100), which this profile keeps instead of the H100 profile's 0.89
  (measured at 700 W: a tighter power limit favours fp8; costs/compute.py FP8_GEMM_RELATIVE_EFFICIENCY); and
  sustained_slowdown 1.0, not the H100 profile's 1.03 (a 700 W steady-state over short-run ratio): the 500 W GEMM
  ceiling is FBGEMM's measured rate itself, and a 700 W ratio says nothing of a 500 W part;
- fused attention (attention_rate): its efficiency tables are 700 W parts' (FlashAttention-2's published H100 row,
  PyTorch's flash kernel and cuDNN measured on 700 W H100 / H200); the 500 W cap lowers the clock of every
  tensor-core-bound kernel, and no 500 W attention figure is published, so the attention runs at the same fraction
  of its 700 W rate as the GEMMs do: this ceiling over the H100 profile's (0.579 / 0.800 = 0.72). Until Nov 26 it
  kept the 700 W rate (docs/notes/fsdp.md "Attention under the 500 W cap");
- everything else (launch floor, overheads, comm): the H100 profile's, unchanged.
No such GPU was measured here: when one is at hand, `bash benchmarks/profile_gpu.sh OUT` and `planner fit compute`
replace this file.

Run: python benchmarks/make_grand_teton_profile.py [-o clusters/grand-teton-h100-hbm2e.compute.json]
"""
from __future__ import annotations

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), os.path.dirname(os.path.abspath(__file__))]

from derived_profile import H100_SXM5_HBM_GBPS, ROOT, from_h100, write_main  # noqa: E402

from planner.costs.compute import FP8_GEMM_RELATIVE_EFFICIENCY  # noqa: E402

OUT = os.path.join(ROOT, "clusters", "grand-teton-h100-hbm2e.compute.json")
HBM_GBPS = {"H100-SXM5": H100_SXM5_HBM_GBPS, "H100-HBM2e-96GB": 2400.0}   # NVIDIA datasheet; torchtitan's page


# pytorch/FBGEMM#2546, "H100 500W", cuBLAS bf16: (M, N, K, TFLOP/s)
FBGEMM_500W = ((8192, 8192, 8192, 585.23), (65536, 8192, 7168, 575.12), (65536, 3584, 8192, 546.31))
PEAK_TFLOPS = 989.0              # H100 SXM5 dense bf16: the cluster file's peak, the curve's reference


def gemm_ceiling(half_size: float, points=FBGEMM_500W, peak_tflops: float = PEAK_TFLOPS) -> float:
    """The mean ceiling the measured GEMMs imply on the H100 curve eff = m * F / (F + half_size)."""
    ms = [tf / peak_tflops * (1.0 + half_size / (2.0 * m * n * k)) for m, n, k, tf in points]
    return sum(ms) / len(ms)


def build() -> dict:
    prof = from_h100(HBM_GBPS["H100-HBM2e-96GB"], note=(
        "Derived, not measured here: the H100 profile with the element-wise bandwidth scaled by 2400/3350 "
        "(torchtitan's stated 2.4 TB/s HBM2e over the H100 SXM5 datasheet's 3.35 TB/s) and the GEMM ceiling from "
        "cuBLAS bf16 GEMMs measured on a 500 W H100 (pytorch/FBGEMM#2546: 585 / 575 / 546 TFLOP/s at 8192^3, "
        "65536x8192x7168, 65536x3584x8192; the mean implied ceiling); fused attention at that ceiling's ratio to the "
        "700 W H100's (attention_rate). Built by "
        "benchmarks/make_grand_teton_profile.py."),
        gemm_source="pytorch/FBGEMM#2546 (H100 500W, cuBLAS bf16)",
        gemm_points=[list(p) for p in FBGEMM_500W])
    ceiling = round(gemm_ceiling(prof["compute"]["half_size"]), 4)
    prof["compute"]["attention_rate"] = round(ceiling / prof["compute"]["max_efficiency"], 4)   # 500 W / 700 W
    prof["compute"]["max_efficiency"] = ceiling
    prof["compute"]["fp8_relative_efficiency"] = FP8_GEMM_RELATIVE_EFFICIENCY     # 500 W: FBGEMM's ratio, above
    prof["compute"]["sustained_slowdown"] = 1.0        # the ceiling is FBGEMM's 500 W figure itself, above
    prof["fit"]["measured"] = ["max_efficiency"]      # attention_rate follows from it (above)
    return prof


def main(argv=None) -> int:
    return write_main(build, OUT, argv)


if __name__ == "__main__":
    sys.exit(main())
