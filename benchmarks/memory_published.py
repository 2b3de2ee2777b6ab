"""Agreement of the memory model with published Megatron-LM figures; prints a table, writes JSON.

Run: python benchmarks/memory_published.py [-o docs/notes/memory_published.json]
"""
from __future__ import annotations

import argparse
import json
import sys

from planner.config import ParallelConfig
from planner.costs.learned import load_default
from planner.costs.memory import GiB, AnalyticalMemory, layer_activation_bytes, stage_params
from planner.costs.published import KORTHIKANTI, MEGATRON_BYTES_PER_PARAM, SC21, SEQ, korthikanti_layer_bytes
from planner.spec.plan import TrainingSpec

TECHNIQUES = {"none": ("none", False), "sp": ("none", True), "selective": ("selective", False),
              "sp+selective": ("selective", True), "full": ("full", False)}


def korthikanti_rows() -> list[dict]:
    rows = []
    an = AnalyticalMemory()
    tr = TrainingSpec(512, SEQ)
    for p in KORTHIKANTI:
        model = p.model()
        for tech, (rc, sp) in TECHNIQUES.items():
            cfg = ParallelConfig(p.tp, p.pp, p.gpus // (p.tp * p.pp), 1, max(p.pp, 1) * 4, "1f1b", 1, rc, 0, sp)
            ours = layer_activation_bytes(model, tr, cfg) * model.num_layers      # first stage: L layers' worth
            pub = korthikanti_layer_bytes(SEQ, 1, p.hidden, p.heads, p.tp, tech) * p.layers
            rows.append({"model": p.name, "technique": tech, "ours_GiB": ours / GiB, "published_GiB": pub / GiB,
                         "err_pct": 100 * (ours - pub) / pub})
        cfg = ParallelConfig(p.tp, p.pp, 1, 1, 4 * p.pp)
        m = an.stage_memory(model, None, tr, cfg, p.pp // 2 if p.pp > 1 else 0)
        P = stage_params(model, cfg, p.pp // 2 if p.pp > 1 else 0)
        ours = m.weights + m.gradients + m.optimizer
        pub = P * MEGATRON_BYTES_PER_PARAM
        rows.append({"model": p.name, "technique": "weights+grads+optimizer (middle stage)", "ours_GiB": ours / GiB,
                     "published_GiB": pub / GiB, "err_pct": 100 * (ours - pub) / pub})
    return rows


def korthikanti_profiled_rows(models=KORTHIKANTI) -> list[dict]:
    """Activations per layer measured by the fake-tensor profiler at the published shapes (t = 8, s = 2048,
    b = 1; two profiles differing by one layer per stage), against Table 2."""
    from planner.profile.memory import measure_stage
    tr = TrainingSpec(512, SEQ)
    rows = []
    for p in models:
        for tech, (rc, sp) in TECHNIQUES.items():
            cfg = ParallelConfig(p.tp, 2, 1, 1, 4, "1f1b", 1, rc, 0, sp)
            runs = []
            for L in (1, 2):
                model = p.model()
                model = type(model)(**{**model.__dict__, "num_layers": 2 * L})
                runs.append(measure_stage(model, tr, cfg, 1, L))
            d = (runs[1].after_forward - runs[1].static) - (runs[0].after_forward - runs[0].static)
            ours = d / runs[0].held_forwards * p.layers
            pub = korthikanti_layer_bytes(SEQ, 1, p.hidden, p.heads, p.tp, tech) * p.layers
            rows.append({"model": p.name, "technique": tech, "profiled_GiB": ours / GiB, "published_GiB": pub / GiB,
                         "err_pct": 100 * (ours - pub) / pub})
    return rows


def sc21_rows(estimator=None, limit_GiB: float = 80.0) -> list[dict]:
    """The SC21 weak-scaling runs: 1F1B, micro-batch 1, full recompute (as the paper's runs), no ZeRO / SP."""
    est = estimator or load_default()
    tr = TrainingSpec(512, SEQ)
    rows = []
    for p in SC21:
        model = p.model()
        dp = p.gpus // (p.tp * p.pp)
        m = max(1, p.batch // dp)
        cfg = ParallelConfig(p.tp, p.pp, dp, 1, m, "1f1b", 1, "full", 0, False)
        per_stage = [est.stage_memory(model, None, tr, cfg, s).total / GiB for s in range(p.pp)]
        peak = max(per_stage)
        rows.append({"model": p.name, "tp": p.tp, "pp": p.pp, "dp": dp, "peak_GiB": peak, "limit_GiB": limit_GiB,
                     "feasible": peak <= limit_GiB, "headroom_GiB": limit_GiB - peak})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    k = korthikanti_rows()
    kp = korthikanti_profiled_rows()
    s = sc21_rows()
    for r in k:
        print(f"{r['model']:6s} {r['technique']:40s} ours {r['ours_GiB']:9.2f} GiB  published {r['published_GiB']:9.2f}"
              f"  err {r['err_pct']:+.2f}%")
    for r in kp:
        print(f"{r['model']:6s} {r['technique']:14s} profiled (fake tensors) {r['profiled_GiB']:9.2f} GiB  "
              f"published {r['published_GiB']:9.2f}  err {r['err_pct']:+.2f}%")
    for r in s:
        print(f"SC21 {r['model']:8s} tp{r['tp']} pp{r['pp']:<3d} dp{r['dp']:<4d} peak {r['peak_GiB']:6.2f} GiB "
              f"of {r['limit_GiB']:.0f}: {'feasible' if r['feasible'] else 'OOM'}")
    if args.output:
        from planner.io import atomic_write_text
        atomic_write_text(args.output, json.dumps({"korthikanti": k, "korthikanti_profiled": kp, "sc21": s}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
