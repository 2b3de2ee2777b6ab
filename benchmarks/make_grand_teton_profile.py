"""Build clusters/grand-teton-h100-hbm2e.compute.json from the shipped H100 profile by the datasheet HBM ratio (not
measured): the compute profile of torchtitan's benchmark GPUs (pytorch/torchtitan @ b5bcd76c
benchmarks/llama3_h100_202412_torchtitan.md, "Hardware": H100 with 96GB HBM2e at 2.4 TB/sec, default 500W power
limit, Grand Teton hosts).

- element-wise bandwidth (hbm_GBps): the H100 profile's (3350 GB/s: the H100 SXM5 datasheet bound) scaled by
  2400 / 3350, the ratio of the stated HBM2e bandwidth to the H100 SXM5 datasheet's 3.35 TB/s;
- everything else (GEMM curve, attention efficiency, launch floor, overheads, comm): the H100 profile's, unchanged.
  The 500 W cap lowers the tensor-core clock by an amount no datasheet states (torchtitan's footnote: "the actual
  peak TFLOPs number is between SXM and NVL, and we don't know its exact value"); the cluster file keeps the SXM
  peak and docs/notes/fsdp.md reports the rows with the NVL peak as the other end.
No such GPU was measured here: when one is at hand, `bash benchmarks/profile_gpu.sh OUT` and `planner fit compute`
replace this file.

Run: python benchmarks/make_grand_teton_profile.py [-o clusters/grand-teton-h100-hbm2e.compute.json]
"""
from __future__ import annotations

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), os.path.dirname(os.path.abspath(__file__))]

from derived_profile import H100_SXM5_HBM_GBPS, ROOT, from_h100, write_main  # noqa: E402

OUT = os.path.join(ROOT, "clusters", "grand-teton-h100-hbm2e.compute.json")
HBM_GBPS = {"H100-SXM5": H100_SXM5_HBM_GBPS, "H100-HBM2e-96GB": 2400.0}   # NVIDIA datasheet; torchtitan's page


def build() -> dict:
    return from_h100(HBM_GBPS["H100-HBM2e-96GB"], note=(
        "Derived, not measured: the H100 profile with the element-wise bandwidth scaled by 2400/3350 "
        "(torchtitan's stated 2.4 TB/s HBM2e over the H100 SXM5 datasheet's 3.35 TB/s); the 500 W power "
        "cap's effect on the GEMM rate is not in it (no published figure). Built by "
        "benchmarks/make_grand_teton_profile.py."))


def main(argv=None) -> int:
    return write_main(build, OUT, argv)


if __name__ == "__main__":
    sys.exit(main())
