"""The planner's forward + backward of one Llama layer against the kernels measured on a lent GPU (an H200:
benchmarks/data/h200/layer_profile/; an H100: benchmarks/data/h100/layer_profile/ and repeat/; gpu_layer_profile.py):
GEMMs, fused attention and the rest, per SDPA back end.

    python benchmarks/gpu_layer_compare.py [--dir benchmarks/data/h200/layer_profile]
    python benchmarks/gpu_layer_compare.py --dir benchmarks/data/h100/layer_profile --cluster dgx-h100.yaml

The measured layer is plain PyTorch (eager element-wise kernels, no Transformer Engine); the planner is asked with
training.kernels eager for that reason, and with the attention_backend of the profiled back end. Parts are compared
with the profiled kernels at sustained_slowdown 1 (the kernels were timed as the profile's samples were, in short
runs); the whole step, with the profile's sustained_slowdown, with the CUDA-graph replay (layer_graphed/).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DIR = os.path.join(ROOT, "benchmarks", "data", "h200", "layer_profile")
BACKEND = {"flash": "flash2", "cudnn": "cudnn"}


def kernel_category(name: str) -> str | None:
    """gemm, attn or elem for a CUDA kernel's name; None for the host-side op rows (aten::, autograd)."""
    if name.startswith(("aten::", "autograd::", "Activity Buffer")) or "Backward" in name:
        return None
    if "flash" in name or "sdpa" in name or "cudnn" in name or "fmha" in name:
        return "attn"
    if "nvjet" in name or "gemm" in name.lower() or "cutlass" in name.lower():
        return "gemm"
    return "elem"


def measured(case: dict) -> dict:
    out = {"gemm": 0.0, "attn": 0.0, "elem": 0.0}
    for o in case["ops"]:
        c = kernel_category(o["op"])
        if c:
            out[c] += o["self_device_us"] / case["steps"] / 1e6
    return out


def predicted(case: dict, backend: str, kernels: str, cluster_file: str = "dgx-h200.yaml") -> dict:
    from planner.config import ParallelConfig
    from planner.costs import default_costs
    from planner.costs.compute import ELEM_BACKWARD
    from planner.io import load_yaml
    from planner.spec import parse_spec
    name = cluster_file if cluster_file.endswith(".yaml") else cluster_file + ".yaml"
    cluster = load_yaml(os.path.join(ROOT, "clusters", name))
    model = {"name": "probe", "family": "llama", "num_layers": 1, "hidden_size": case["hidden"],
             "num_attention_heads": case["heads"], "ffn_hidden_size": case["ffn"], "vocab_size": 32000}
    spec = parse_spec({"name": "probe", "model": model, "cluster": cluster,
                       "training": {"global_batch_size": case["b"], "seq_length": case["seq"], "kernels": kernels,
                                    "attention_backend": BACKEND[backend]}}, "probe.yaml")
    from dataclasses import replace
    steady = default_costs(spec.cluster).compute
    cm = replace(steady, sustained_slowdown=1.0)     # the parts as the kernels were timed (short runs)
    cfg = ParallelConfig(1, 1, 1, case["b"], 1, "1f1b", 1, "none", 0, False)
    p = cm.layer_parts(spec.model, spec.cluster, spec.training, cfg)
    elem_b = p.get("elem_backward", ELEM_BACKWARD * p["elem"])
    return {"gemm": p["gemm"] * (1 + cm.backward_ratio), "attn": p["attn"] + p["attn_backward"],
            "elem": p["elem"] + elem_b, "total": sum(cm.pass_times(p)),
            "steady": sum(steady.pass_times(steady.layer_parts(spec.model, spec.cluster, spec.training, cfg)))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=DIR)
    ap.add_argument("--cluster", default="dgx-h200.yaml",
                    help="shipped cluster whose compute profile is compared (dgx-h100.yaml for benchmarks/data/h100)")
    a = ap.parse_args(argv)
    gfile = os.path.join(os.path.dirname(os.path.abspath(a.dir)), "layer_graphed", "layer_graphed.json")
    graphed = ({(r["case"], r["backend"]): r["graphed_s"] for r in json.load(open(gfile)) if "graphed_s" in r}
               if os.path.exists(gfile) else {})
    print(f"{'back end':8s} {'case':22s} {'part':5s} {'measured ms':>11s} {'planner ms':>10s} {'error':>7s}")
    for backend in ("flash", "cudnn"):
        for case in json.load(open(os.path.join(a.dir, f"layer_profile_{backend}.json"))):
            if "ops" not in case:
                continue
            m, p = measured(case), predicted(case, backend, "eager", a.cluster)
            for part in ("gemm", "attn", "elem"):
                print(f"{backend:8s} {case['case']:22s} {part:5s} {m[part] * 1e3:11.2f} {p[part] * 1e3:10.2f} "
                      f"{p[part] / m[part] - 1:+7.1%}")
            ks = sum(m.values())
            print(f"{backend:8s} {case['case']:22s} {'sum':5s} {ks * 1e3:11.2f} {p['total'] * 1e3:10.2f} "
                  f"{p['total'] / ks - 1:+7.1%}   (kernels; eager wall {case['wall_step_s'] * 1e3:.2f} ms, "
                  f"{case.get('sm_MHz')} MHz, {case.get('power_W')} W)")
            g = graphed.get((case["case"], backend))
            if g:
                print(f"{backend:8s} {case['case']:22s} {'step':5s} {g * 1e3:11.2f} {p['steady'] * 1e3:10.2f} "
                      f"{p['steady'] / g - 1:+7.1%}   (CUDA-graph wall; planner with the profile's sustained_slowdown)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
