"""The planner's per-layer attention work under PyTorch's context parallel (`cp_comm: allgather`) against one rank's
loop measured on one GPU (benchmarks/gpu_cp_loop.py; benchmarks/data/h100/cp_loop/cp_loop.json).

Per case (Llama 3 8B at tp 1, Llama 3.1 405B at tp 8: a 32768-token shard, the torchtitan CP rows' shape) and cp:
the planner's forward (the shard's causal step, cp - 1 unmasked steps, the merges) and backward (cp SDPA backward
steps and the fp32 accumulations), exchange left out as in the measurement, with `kernels: eager` (the loop's merges
ran op by op) on the shipped dgx-h100 cluster, against rank 0's measured times. Both the planner's in-step kernel
rate (sdpa_flash, what the rows are charged) and the measurement are printed with the SDPA part apart.

    python benchmarks/cp_loop_compare.py [--data benchmarks/data/h100/cp_loop/cp_loop.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "benchmarks", "data", "h100", "cp_loop", "cp_loop.json")
MODELS = {"llama3-8b-tp1": ("llama3-8b.yaml", 1), "llama31-405b-tp8": ("llama3-405b.yaml", 8)}


def predicted(case: str, shard: int, cp: int) -> dict:
    """The planner's attention work of one layer and micro-batch for one cp rank, exchange excluded: SDPA steps and
    merges / accumulations apart (seconds)."""
    from planner.config import ParallelConfig
    from planner.costs import default_costs
    from planner.costs.context_parallel import allgather_layer_times, shard_view
    from planner.spec import parse_spec
    model, tp = MODELS[case]
    spec = parse_spec({"name": "cp-loop", "model": os.path.join(ROOT, "models", model),
                       "cluster": os.path.join(ROOT, "clusters", "dgx-h100.yaml"),
                       "training": {"global_batch_size": 8, "seq_length": shard * cp, "kernels": "eager",
                                    "cp_comm": "allgather"},
                       "search": {"context_parallel": [cp], "zero": [3]}}, os.path.join(ROOT, "cp-loop.yaml"))
    cfg = ParallelConfig(tp, 1, 1, 1, 8, "1f1b", 1, "none", 3, tp > 1, cp=cp)
    costs = default_costs(spec.cluster)
    tr, c1 = shard_view(spec.training, cfg)
    p = costs.compute.layer_parts(spec.model, spec.cluster, tr, c1)
    a_f, a_b = p["attn"], p["attn_backward"]
    if cp == 1:
        return {"fwd": a_f, "bwd": a_b, "fwd_sdpa": a_f, "bwd_sdpa": a_b}
    t = allgather_layer_times(spec, cfg, costs, a_f, a_b)
    zero = allgather_layer_times(spec, cfg, costs, 0.0, 0.0)      # the merges and exchange alone
    step_f = (t.forward - zero.forward + zero.exposed_forward - t.exposed_forward) / (cp - 1)
    step_b = (t.backward - zero.backward + zero.exposed_backward - t.exposed_backward) / (cp - 1)
    fwd = a_f + t.forward - t.exposed_forward
    bwd = a_b + t.backward - t.exposed_backward
    return {"fwd": fwd, "bwd": bwd, "fwd_sdpa": a_f + (cp - 1) * step_f, "bwd_sdpa": a_b + (cp - 1) * step_b}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    a = ap.parse_args(argv)
    d = json.load(open(a.data))
    print(f"measured on {d.get('gpu')} (torch {d.get('torch')}), rank 0; planner on dgx-h100, kernels eager")
    print(f"{'case':18s} {'cp':>3s} {'meas fwd':>9s} {'plan fwd':>9s} {'meas bwd':>9s} {'plan bwd':>9s} "
          f"{'f+b err':>8s} {'sdpa err':>8s} {'meas rest':>9s} {'plan rest':>9s}")
    for r in d["loop"]:
        if r["rank"] != 0:
            continue
        p = predicted(r["case"], r["shard"], r["cp"])
        m_tot, p_tot = r["fwd_s"] + r["bwd_s"], p["fwd"] + p["bwd"]
        m_sdpa, p_sdpa = r["fwd_sdpa_s"] + r["bwd_sdpa_s"], p["fwd_sdpa"] + p["bwd_sdpa"]
        print(f"{r['case']:18s} {r['cp']:3d} {r['fwd_s'] * 1e3:8.1f}m {p['fwd'] * 1e3:8.1f}m {r['bwd_s'] * 1e3:8.1f}m "
              f"{p['bwd'] * 1e3:8.1f}m {p_tot / m_tot - 1:+8.1%} {p_sdpa / m_sdpa - 1:+8.1%} "
              f"{(m_tot - m_sdpa) * 1e3:8.1f}m {(p_tot - p_sdpa) * 1e3:8.1f}m")
    return 0


if __name__ == "__main__":
    sys.exit(main())
