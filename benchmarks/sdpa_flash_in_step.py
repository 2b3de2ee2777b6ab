"""PyTorch's flash SDPA kernel as it runs inside a training step: the `sdpa_flash` rows of costs.compute (issue #9).

Sources (one H200 SXM, 700 W, torch 2.11; benchmarks/data/h200/README.md):
- bias_probe/attention.json: the flash back end alone, 20 calls after 3 warm-ups (burst), causal and unmasked,
  512-32768 tokens, 32 heads of 128;
- torchtitan_step/steps*.json: a torchtitan-style Llama 3 8B step (gpu_torchtitan_step.py), kernel time per step by
  class from torch.profiler, at two layer counts; the difference is one layer's flash kernels (forward and backward;
  op-level selective checkpointing saves the SDPA output, so no recompute), at 2048 x 8, 8192 x 2 (two runs) and
  32768 x 1 tokens, compiled and eager. The compiled steps' flash time is 3-8% above the eager ones' at every length
  (hotter clocks, or Inductor kernels whose names carry the SDPA op counted with it: the class is matched by name);
  both are kept.

In-step TFLOP/s = one layer's attention FLOPs (costs.compute's count: 4 b s^2 h / 2 forward, x 3.5 with the
backward) / its measured flash time, the mean over the runs at that length. Its ratio to the burst rate at the
same length is interpolated in log2(s) (flat past the measured lengths) and scales the burst curve, causal and
unmasked: the `sdpa_flash` table, which already holds the steady state (the profile's sustained_slowdown is not
applied to it again). The same ratios on the burst rates measured on one H100 80GB HBM3
(benchmarks/data/h100/bias_probe/attention.json; no torchtitan step was run there) are printed for comparison:
1.6-4.4% below from 2k tokens (causal; 5-12% at 512-1k, 2.6-7.8% unmasked), within that machine's burst-to-burst
spread at the lengths the recipes use, so costs.compute keeps one row for both types.

    python benchmarks/sdpa_flash_in_step.py            # prints the rows and the constants in costs.compute
"""
from __future__ import annotations

import glob
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
DATA = os.path.join(HERE, "data", "h200")
DATA_H100 = os.path.join(HERE, "data", "h100")
HIDDEN = 4096                        # Llama 3 8B: 32 heads x 128
PEAK = 989.0                         # H100 / H200 dense bf16, TFLOP/s


def in_step_rates(data: str = DATA) -> dict[int, float]:
    """{sequence length: in-step TFLOP/s of the flash kernels}: the mean over every measured pair of layer counts at
    that length, compiled and eager (8192 tokens: two runs of each)."""
    out: dict[int, list[float]] = {}
    for path in sorted(glob.glob(os.path.join(data, "torchtitan_step", "steps*.json"))):
        with open(path) as fh:
            rows = [r for r in json.load(fh)["rows"] if "kernels_ms_per_step" in r]
        for compiled in (True, False):
            got = sorted((r for r in rows if r["compile"] == compiled), key=lambda r: r["layers"])
            if len(got) < 2:
                continue
            r0, r1 = got[0], got[-1]
            n0, n1 = r0["layers"], r1["layers"]
            ms = (r1["kernels_ms_per_step"]["attention"] - r0["kernels_ms_per_step"]["attention"]) / (n1 - n0)
            b, s = r0["batch"], r0["seq"]
            flops = 3.5 * 4.0 * b * s * s * HIDDEN / 2
            out.setdefault(s, []).append(flops / (ms / 1e3) / 1e12)
    return {s: statistics.mean(v) for s, v in sorted(out.items())}


def burst_rates(data: str = DATA, causal: bool = True) -> dict[int, float]:
    """{sequence length: burst TFLOP/s of the flash back end} (square shapes, 32 heads of 128)."""
    with open(os.path.join(data, "bias_probe", "attention.json")) as fh:
        rows = json.load(fh)
    return {r["seq"]: r["fwd_bwd_tflops"] for r in rows
            if r.get("backend") == "flash" and "fwd_bwd_tflops" in r and r["causal"] == causal
            and r["heads"] == 32 and r["seq"] == r["kv_seq"]}


def ratio_at(s: int, ratios: dict[int, float]) -> float:
    """In-step / burst at length s: linear in log2(s) between measured lengths, flat past them."""
    xs = sorted(ratios)
    if s <= xs[0]:
        return ratios[xs[0]]
    if s >= xs[-1]:
        return ratios[xs[-1]]
    for a, b in zip(xs, xs[1:]):
        if a <= s <= b:
            w = (math.log2(s) - math.log2(a)) / (math.log2(b) - math.log2(a))
            return ratios[a] + w * (ratios[b] - ratios[a])
    raise AssertionError(s)


def table(data: str = DATA, burst_data: str | None = None) -> dict:
    """The sdpa_flash rows: {"causal": {s: TFLOP/s}, "unmasked": {s: TFLOP/s}, "ratios": {s: in-step / burst}}:
    the in-step / burst ratios of `data`, applied to the burst rates of `burst_data` (default: the same machine)."""
    step, causal = in_step_rates(data), burst_rates(data, True)
    ratios = {s: step[s] / causal[s] for s in step}
    bd = burst_data or data
    return {"in_step": step, "ratios": ratios,
            "causal": {s: v * ratio_at(s, ratios) for s, v in sorted(burst_rates(bd, True).items())},
            "unmasked": {s: v * ratio_at(s, ratios) for s, v in sorted(burst_rates(bd, False).items())}}


def main() -> int:
    from planner.costs import compute as c
    t = table()
    print("in-step flash TFLOP/s (mean of the compiled and eager runs): "
          + ", ".join(f"{s}: {v:.1f} (x{t['ratios'][s]:.3f} the burst rate)" for s, v in t["in_step"].items()))
    for name, rows, shipped in (("causal", t["causal"], c.SDPA_FLASH_CAUSAL),
                                ("unmasked", t["unmasked"], c.SDPA_FLASH_UNMASKED)):
        print(f"{name}: " + ", ".join(f"{s}: {v:.1f}" for s, v in rows.items()))
        print("  costs.compute: " + ", ".join(f"{s}: {v:.1f}" for s, v in zip(*shipped)))
        h100 = table(burst_data=DATA_H100)[name]
        print("  H100 bursts x the same ratios (not used): "
              + ", ".join(f"{s}: {v:.1f} ({v / rows[s] - 1:+.1%})" for s, v in h100.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
