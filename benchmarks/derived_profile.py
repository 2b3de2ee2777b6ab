"""Shared by the make_*_profile.py scripts: a compute profile derived from the shipped H100 one by a datasheet HBM
ratio (not measured), and the command line that writes a built profile."""
from __future__ import annotations

import argparse
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
H100 = os.path.join(ROOT, "planner", "data", "h100_compute_profile.json")
H100_SXM5_HBM_GBPS = 3350.0      # NVIDIA H100 SXM5 datasheet


def from_h100(hbm_GBps: float, note: str, **fit) -> dict:
    """The H100 profile with its element-wise bandwidth scaled by hbm_GBps / the H100 SXM5's 3350 GB/s; the GEMM
    curve, attention efficiency, launch floor, overheads and comm carried unchanged. `fit` adds keys to its record."""
    with open(H100) as f:
        h100 = json.load(f)
    compute = dict(h100["compute"])
    compute["hbm_GBps"] = round(compute["hbm_GBps"] * hbm_GBps / H100_SXM5_HBM_GBPS, 1)
    record = {"kind": "derived", "source": "planner/data/h100_compute_profile.json", **fit, "measured": [],
              "note": note}
    return {"comm": dict(h100["comm"]), "compute": compute, "fit": record}


def write_main(build, default_out: str, argv=None, summary_keys: tuple = ()) -> int:
    """`-o PATH` (default: default_out): write build() atomically, print its compute part and fit summary_keys."""
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", default=default_out)
    args = ap.parse_args(argv)
    from planner.io import atomic_write_text
    prof = build()
    atomic_write_text(args.output, json.dumps(prof, indent=2) + "\n")
    print(json.dumps(prof["compute"], indent=1))
    if summary_keys:
        print({k: prof["fit"][k] for k in summary_keys})
    return 0
