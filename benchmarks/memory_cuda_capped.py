"""Does a plan the memory estimator calls feasible run on a real GPU of exactly that size? (run on a GPU)

For every case of a CUDA sample file (`planner profile memory --device cuda`), cap PyTorch's caching
allocator at the estimator's allocated prediction (learned peak x safety) x (1 + f) plus the cuBLAS
workspaces, for f = 0, 0.02, 0.05, 0.10, 0.20 in turn, run the stage (forward of every held micro-batch,
backward, optimizer step) and record the smallest f it ran at. The allocator frees its cached blocks and
retries before it gives up, so what this measures is the fragmentation it cannot undo, which is what the
estimator's fragmentation term must cover. The CUDA context (outside the allocator) and NCCL are the
estimator's constant overhead term and are not part of the cap.

Run: python benchmarks/memory_cuda_capped.py SAMPLES.csv -o capped.csv [--estimator JSON] [--time-budget S]
Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to measure that allocator mode.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

import torch

from planner.costs.learned import DEFAULT_PATH, LearnedMemory, design, read_samples, row_case
from planner.profile.memory import measure_stage

FRACTIONS = (0.0, 0.02, 0.05, 0.10, 0.20)
WORKSPACE = 64 * 1024 ** 2      # two cuBLAS workspaces of 32 MiB (forward and autograd threads), H100


def runs(case, lpc: int, cap_bytes: float) -> bool:
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / total))
    try:
        measure_stage(*case, lpc, "cuda")
        return True
    except torch.cuda.OutOfMemoryError:
        return False
    finally:
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--estimator", default=DEFAULT_PATH)
    ap.add_argument("--time-budget", type=float, default=None)
    args = ap.parse_args(argv)
    rows = read_samples(args.samples)
    est = LearnedMemory.load(args.estimator)
    X, y, _ = design(rows)
    pred = est.predict(X)
    out, t0 = [], time.perf_counter()
    for r, p, meas in zip(rows, pred, y):
        if args.time_budget and time.perf_counter() - t0 > args.time_budget:
            break
        case = row_case(r)
        ran_at = ""
        for f in FRACTIONS:
            if runs(case, int(r["layers_per_chunk"]), p * (1 + f) + WORKSPACE):
                ran_at = f
                break
        out.append({"predicted_allocated": p, "measured_allocated": meas, "ran_at_fraction": ran_at,
                    "allocator": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default")})
    with open(args.output, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(out[0]))
        w.writeheader()
        w.writerows(out)
    counts = {str(f): sum(1 for o in out if o["ran_at_fraction"] == f) for f in FRACTIONS}
    counts["never"] = sum(1 for o in out if o["ran_at_fraction"] == "")
    print(json.dumps({"cases": len(out), "ran_at_fraction": counts, "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
