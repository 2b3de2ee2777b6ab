"""The planner beside the one-GPU torchtitan-style steps of gpu_torchtitan_step.py (issue #9).

For each measured row (Llama 3.1 8B dimensions with N layers, micro-batch 2 x 8192 tokens, bf16, op-level selective
checkpointing, FSDP2 on one rank, torch.compile or eager) it builds the same plan for the planner (one GPU of the
row's cluster, ZeRO-3 over one rank, `kernels: fused` for compile and `eager` without) and prints step time and
memory, measured against predicted, and the per-layer cost (the difference between two layer counts) on both sides.

    python benchmarks/torchtitan_step_compare.py [--data benchmarks/data/h200/torchtitan_step/steps.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

DATA = os.path.join(HERE, "data", "h200", "torchtitan_step", "steps.json")


def predict(layers: int, compile_: bool, cluster: str = "dgx-h200", seq: int = 8192, batch: int = 2,
            float8: bool = False) -> dict:
    """The planner's iteration time (s) and peak memory (GiB) for one measured row's plan."""
    import published_recipes as pr

    from planner.search.solve import estimate_plan
    model = dict(pr.model_dict({"model": "llama3-8b"}), num_layers=layers)
    model.pop("parameters_B", None)
    row = {"id": f"one-gpu-L{layers}", "source": "h200", "model": model, "gpus": 1,
           "knobs": {"tp": 1, "pp": 1, "mbs": batch, "gbs": batch, "seq": seq, "precision": "fp8" if float8 else "bf16",
                     "recompute": "selective", "attention": "fused", "fsdp": 1, "compile": compile_,
                     "cluster": cluster}, "measured": {}}
    spec, cfg, missing, _ = pr.build(row)
    est = estimate_plan(spec, cfg)[0]
    return {"step_s": est.iteration_s, "peak_GiB": est.peak_memory_GiB, "config": cfg.label(), "missing": missing,
            "memory": est.memory_dict() if callable(getattr(est, "memory_dict", None)) else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--cluster", default="dgx-h200", help="the shipped cluster of the measured GPU (dgx-h100 for "
                    "benchmarks/data/h100/torchtitan_step)")
    a = ap.parse_args(argv)
    a.cluster = a.cluster.removesuffix(".yaml")          # either form
    with open(a.data) as fh:
        d = json.load(fh)
    print(f"measured: {d['info'].get('gpu', '?')}, torch {d['info'].get('torch')}")
    print(f"planner on one GPU of {a.cluster}")
    print(f"{'variant':8} {'layers':>6} {'meas ms':>8} {'pred ms':>8} {'error':>7} {'alloc GiB':>9} {'resv GiB':>8} "
          f"{'pred GiB':>8} {'mem err':>7}")
    per = {}
    for r in d["rows"]:
        v = ("compile" if r["compile"] else "eager") + ("-fp8" if r.get("float8") else "")
        if "step_s" not in r:
            print(f"{v:8} {r['layers']:>6} failed: {r.get('error')}")
            continue
        p = predict(r["layers"], r["compile"], a.cluster, seq=r["seq"], batch=r["batch"], float8=r.get("float8", False))
        per.setdefault(v, []).append((r["layers"], r["step_s"], p["step_s"]))
        res = r.get("max_reserved_GiB")
        print(f"{v:8} {r['layers']:>6} {r['step_s'] * 1e3:8.1f} {p['step_s'] * 1e3:8.1f} "
              f"{p['step_s'] / r['step_s'] - 1:+7.1%} {r.get('max_allocated_GiB', float('nan')):9.2f} "
              f"{res if res is not None else float('nan'):8.2f} {p['peak_GiB']:8.2f} "
              f"{(p['peak_GiB'] / res - 1) if res else float('nan'):+7.1%}")
    for v, got in per.items():
        if len(got) >= 2:
            got.sort()
            (n0, m0, p0), (n1, m1, p1) = got[0], got[-1]
            ml, pl = (m1 - m0) / (n1 - n0), (p1 - p0) / (n1 - n0)
            print(f"{v}: per layer measured {ml * 1e3:.2f} ms, planner {pl * 1e3:.2f} ms ({pl / ml - 1:+.1%}); "
                  f"the rest of the step (embedding, output, loss, optimizer) measured {(m0 - n0 * ml) * 1e3:.1f} ms, "
                  f"planner {(p0 - n0 * pl) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
