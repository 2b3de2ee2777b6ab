"""The 700 W profiles' fp8_relative_efficiency from the H200 GEMM measurement (data/h200/bias_probe/gemm_warm.json).

Per recipe GEMM shape, the fp8-over-bf16 speed-up with clocks held at the power limit (`warm`: after 2 s of
back-to-back calls), mixed as Transformer Engine runs a layer's GEMMs: fprop with cuBLASLt's fast fp8 accumulation,
dgrad and wgrad with the split accumulator (one of each per linear; the time-weighted mix is the harmonic mean
3 / (1/fast + 2/split)). The constant is the one for which costs.compute.fp8_gemm_time reproduces the geometric
mean of those speed-ups over the shapes with the H100 bf16 curve; benchmarks/make_h100_profile.py writes it into the
H100 profile (and so the H200 one, derived from it).

    python benchmarks/fp8_gemm_ratio.py [--data FILE] [--burst]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "benchmarks", "data", "h200", "bias_probe", "gemm_warm.json")


def measured_speedups(rows: list[dict], key: str = "warm_s") -> dict[str, float]:
    """Shape name -> TE-mix fp8 speed-up over bf16."""
    by: dict[str, dict] = {}
    for r in rows:
        if key in r:
            by.setdefault(r["name"], {})[r["dtype"]] = r[key]
    out = {}
    for name, d in by.items():
        if {"bf16", "fp8", "fp8_fast"} <= d.keys():
            out[name] = 3.0 / (d["fp8_fast"] / d["bf16"] + 2.0 * d["fp8"] / d["bf16"])
    return out


def fitted_relative_efficiency(rows: list[dict], key: str = "warm_s", curve=None) -> tuple[float, dict[str, float]]:
    """(the constant, the measured speed-ups) by bisection on the mean log error over the shapes; `curve`: the
    ComputeModel whose bf16 GEMM curve is used (default: the shipped H100 profile's)."""
    if curve is None:
        from planner.costs import shipped_compute_profile
        from planner.costs.compute import load_profile
        curve = load_profile(shipped_compute_profile("H100"))
    cm = curve
    peak, peak8 = 989e12, 1979e12
    sp = measured_speedups(rows, key)
    flops = {r["name"]: 2.0 * r["m"] * r["k"] * r["n"] for r in rows}
    target = statistics.mean(math.log(v) for v in sp.values())

    def model(rel):
        return statistics.mean(math.log(cm._gemm_time(flops[n], peak)
                                        / ((flops[n] / (peak8 * rel) + cm.half_size / peak) / cm.max_efficiency))
                               for n in sp)
    lo, hi = 0.5, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model(mid) < target else (lo, mid)
    return (lo + hi) / 2, sp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--burst", action="store_true", help="the burst timings instead of the warm ones")
    a = ap.parse_args(argv)
    rows = json.load(open(a.data))
    rel, sp = fitted_relative_efficiency(rows, "burst_s" if a.burst else "warm_s")
    for n, v in sp.items():
        print(f"{n:30s} TE-mix fp8 speed-up {v:.3f}")
    print(f"geometric mean {math.exp(statistics.mean(math.log(v) for v in sp.values())):.3f}; "
          f"fp8_relative_efficiency {rel:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
