"""Build planner/data/h100_compute_profile.json from the H100 layer profile (benchmarks/data/h100/compute.csv).

What is taken from the measurement, and what is not (docs/notes/compute.md, "H100, measured"):
- fitted on the H100 samples (`fit_layer_profile`, all five layer parameters jointly), kept: the GEMM curve
  (max_efficiency, half_size) and the host launch floor (layer_overhead_s);
- fitted but not kept: the element-wise bandwidth and attention efficiency, which describe the eager block's
  unfused kernels; the file keeps them as `eager_stack_fit`. In their place go the A100 Megatron fit's values:
  attention efficiency as fitted, element-wise bandwidth at the same fraction of the HBM datasheet bandwidth
  (the A100 fit sits on its 40 GB model's 1555 GB/s datasheet bound, i.e. at fraction 1.0; H100 SXM5: 3350 GB/s);
- not measurable on one GPU, carried from the A100 fit: tp_sync_s, iteration_overhead_s;
- fp8_relative_efficiency: the fp8 GEMMs measured on an H200 SXM at the same 700 W limit
  (benchmarks/data/h200/bias_probe/gemm_warm.json, benchmarks/fp8_gemm_ratio.py), through this file's GEMM curve;
- sustained_slowdown: a Llama layer's steady-state step (CUDA graph replay) over its kernels as the profiler timed
  them, the mean over two leases of an H100 80GB HBM3 (benchmarks/sustained_factor.py): the samples above are short
  runs.

Run: python benchmarks/make_h100_profile.py [-o planner/data/h100_compute_profile.json]
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]

from derived_profile import write_main  # noqa: E402
from fp8_gemm_ratio import DATA as FP8_GEMMS  # noqa: E402
from fp8_gemm_ratio import fitted_relative_efficiency  # noqa: E402
from sustained_factor import sustained_slowdown  # noqa: E402

from planner.costs.comm import CommModel  # noqa: E402
from planner.costs.compute import ComputeModel  # noqa: E402
from planner.costs.compute_fit import LayerTimeFit  # noqa: E402
from planner.costs.metrics import mape, percent_errors  # noqa: E402
from planner.profile.compute import read_profile_csv  # noqa: E402

SAMPLES = os.path.join(ROOT, "benchmarks", "data", "h100", "compute.csv")
A100 = os.path.join(ROOT, "planner", "data", "a100_compute_profile.json")
OUT = os.path.join(ROOT, "planner", "data", "h100_compute_profile.json")
PEAK_TFLOPS = 989.0            # H100 SXM5 dense bf16 (clusters/dgx-h100.yaml)
HBM_GBPS = {"A100-40GB": 1555.0, "H100-SXM5": 3350.0}     # NVIDIA datasheets
MEASURED = ("max_efficiency", "half_size", "layer_overhead_s")


def build() -> dict:
    samples = read_profile_csv(SAMPLES)
    base = ComputeModel(comm=CommModel(grad_bytes=2))
    est = LayerTimeFit(PEAK_TFLOPS * 1e12, base).fit(samples)
    m, pred = est.model_, est.predict(samples)                       # (n, 2) s: forward, backward
    meas = np.array([[s.forward_ms * 1e-3, s.backward_ms * 1e-3] for s in samples])
    a100 = json.load(open(A100))["compute"]
    compute = dict(a100)
    compute.pop("reference_gpus", None)        # the A100 fit's runs had up to 8 GPUs; these samples ran on one
    compute.update({k: getattr(m, k) for k in MEASURED})
    compute["hbm_GBps"] = round(a100["hbm_GBps"] / HBM_GBPS["A100-40GB"] * HBM_GBPS["H100-SXM5"], 1)
    compute["backward_ratio"] = 2.0
    # measured at the 700 W limit on an H200 SXM, the H100 SXM5's compute die and limit (benchmarks/fp8_gemm_ratio.py)
    fp8_rel, _ = fitted_relative_efficiency(json.load(open(FP8_GEMMS)), curve=m)
    compute["fp8_relative_efficiency"] = round(fp8_rel, 2)
    # steady-state step over its profiled kernels, a Llama layer on two H100 leases (benchmarks/sustained_factor.py):
    # the samples above were timed in short runs, as those kernels were
    compute["sustained_slowdown"] = round(sustained_slowdown("H100"), 2)
    big = [i for i, s in enumerate(samples) if s.forward_ms > 3.0]
    fit = {"kind": "layer", "source": "benchmarks/data/h100/compute.csv", "samples": len(samples),
           "peak_tflops": PEAK_TFLOPS, "mape_pct": round(mape(pred, meas), 3),
           "max_abs_pct_error": round(float(abs(percent_errors(pred, meas)).max()), 3),
           "compute_bound_mape_pct": round(mape(pred[big], meas[big]), 3),
           "measured": list(MEASURED),
           "eager_stack_fit": {"attn_efficiency": m.attn_efficiency, "hbm_GBps": m.hbm_GBps},
           "note": ("GEMM curve and host launch floor fitted on `planner profile compute` samples measured on one "
                    "NVIDIA H100 80GB HBM3 (driver 580.159.04, torch 2.11.0+cu130, bf16; 120 shapes, hidden 2048-12288 "
                    "with 128-wide heads, seq 1024/2048, micro-batch 1/2/4, tp shards 1-8 of one rank). Attention "
                    "efficiency and element-wise bandwidth from the A100 Megatron fit (bandwidth at the same fraction "
                    "of the HBM datasheet); the eager block's own values are in eager_stack_fit. tp_sync_s and "
                    "iteration_overhead_s from the A100 fit. fp8_relative_efficiency from fp8 and bf16 GEMMs timed at the 700 W "
                    "limit on an H200 SXM (benchmarks/fp8_gemm_ratio.py); sustained_slowdown: a Llama layer's steady-state step "
                    "over its profiled kernels, the mean over two H100 leases (benchmarks/sustained_factor.py). "
                    "The A100 fit left attn_efficiency (1.0) and hbm_GBps (1555, the A100-40GB datasheet) on their "
                    "bounds, so both are assumptions, not fitted values (listed in bound_limited): element-wise work at "
                    "100% of the H100 datasheet's 3350 GB/s (eager element-wise kernels measured on one H100 ran 20-24% "
                    "faster than this, activations partly L2-resident: docs/notes/gpu_h200.md) and attention's batched "
                    "GEMMs at the GEMM curve's rate. "
                    "Built by benchmarks/make_h100_profile.py."),
           "bound_limited": ["attn_efficiency", "hbm_GBps"]}
    return {"comm": {"intra_efficiency": base.comm.intra_efficiency, "inter_efficiency": base.comm.inter_efficiency,
                     "grad_bytes": 2},
            "compute": compute, "fit": fit}


def main(argv=None) -> int:
    return write_main(build, OUT, argv, summary_keys=("mape_pct", "max_abs_pct_error", "compute_bound_mape_pct"))


if __name__ == "__main__":
    sys.exit(main())
