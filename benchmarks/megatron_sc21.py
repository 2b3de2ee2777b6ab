"""Issue 4 target: the published Megatron-LM SC21 weak-scaling runs, estimated with the planner's model.

Narayanan et al. 2021 (SC21), Table 1 reports achieved TFLOP/s per GPU for ten GPT models on 80 GB A100s
(DGX A100, 8 x 200 Gb/s HDR per node), counted with the paper's formula, which includes the
recomputation forward pass: F = 96 B s l h^2 (1 + s / 6h + V / 16 l h) per iteration. The measured
iteration time is therefore F / (GPUs * TFLOP/s). The throughput column below was transcribed from
the paper's Table 1 (137, 138, 142, 135, 138, 140, 148, 155, 163, 163 TFLOP/s); check it against the PDF.

Assumptions where the table is silent (stated, not fitted): full activation recompute (as the paper),
fp16, micro-batch 1, the 1F1B schedule except where interleaving applies (layers divisible by 2p),
no ZeRO, no sequence parallel (2021), Megatron rank order, a uniform 200 Gb/s x 8 network, no communication
overlap (training.overlap all off: Megatron-LM 2021 waited on every p2p batch and every tensor-parallel
collective, and reduced gradients after the backward).
Run:  python benchmarks/megatron_sc21.py
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from planner.config import ParallelConfig
from planner.costs.published import SC21, SEQ, VOCAB
from planner.search.solve import estimate_plan
from planner.spec import parse_spec

TFLOPS = (137, 138, 142, 135, 138, 140, 148, 155, 163, 163)   # SC21 Table 1, per GPU


def spec_for(run, tp_backward: bool = False, variability: str | None = None):
    """The run's spec. tp_backward: Megatron's asynchronous column-parallel backward (training.overlap.tp_backward),
    merged into Megatron-LM in Aug 2021 (NVIDIA/Megatron-LM cf7efd4f): after the SC21 runs, before Korthikanti's.
    variability: the cluster's gpu.variability (a sensitivity, --gpu-variability; default none)."""
    nodes = run.gpus // 8
    d = {"name": f"sc21-{run.name}",
         "model": {"name": run.name, "family": "gpt", "num_layers": run.layers, "hidden_size": run.hidden,
                   "num_attention_heads": run.heads, "vocab_size": VOCAB, "tied_embeddings": True,
                   "max_position_embeddings": SEQ},
         "cluster": {"name": "selene-like", "gpu": {"type": "A100-SXM4-80GB", "memory_GiB": 80,
                                                    "peak_tflops": {"fp16": 312, "bf16": 312},
                                                    "variability": variability},
                     "nodes": nodes, "gpus_per_node": 8,
                     "network": {"intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
                                 "inter_node": {"bandwidth_Gbps": 200, "nics_per_node": 8, "latency_us": 5}}},
         # 2021 Megatron-LM: gradients all-reduced after the backward, blocking p2p, no TP overlap, its
         # unfused softmax path (no fused attention kernel yet) and pipeline sends split over the tensor group
         # (--scatter-gather-tensors-in-pipeline, on by default since Feb 2021: NVIDIA/Megatron-LM@72e4230b; SC21
         # section 4.1). Korthikanti et al. 2022 (megatron_selective) ran the same p2p code (megatron/
         # p2p_communication.py until 3c92fa93 of Mar 2023), which skipped the split with sequence parallelism
         "training": {"global_batch_size": run.batch, "seq_length": SEQ, "precision": "fp16", "attention": "unfused",
                      "p2p_scatter_gather": True,
                      "overlap": {"grad_reduce": False, "param_gather": False, "p2p": False, "tp_comm": False,
                                      "tp_backward": tp_backward}}}
    return parse_spec(d, os.path.join(os.path.dirname(__file__), "_sc21.yaml"))


def schedule_for(policy: str, run, m: int) -> tuple[str, int]:
    """Interleaved (v = 2) where the policy asks for it and it divides (layers by 2p, m by p), else 1F1B."""
    interleave = policy.startswith("interleaved") and run.pp > 1 and run.layers % (2 * run.pp) == 0 \
        and m % run.pp == 0
    return ("interleaved", 2) if interleave else ("1f1b", 1)


def print_errors(errs) -> None:
    a = np.abs(errs)
    print(f"median |error| {np.median(a):.1%}, mean {a.mean():.1%}, max {a.max():.1%} (target: median <= 10%)")


def variability_arg(doc: str) -> str | None:
    """--gpu-variability NAME|CSV: the clusters' gpu.variability, a sensitivity (default none, as shipped)."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    from planner.spec.variability import variability_flag
    ap.add_argument("--gpu-variability", default=None, type=variability_flag,
                    help="the cluster's gpu.variability (e.g. longhorn-v100-sgemm): the slowest-GPU factor")
    return ap.parse_args().gpu_variability


def main() -> None:
    var = variability_arg(__doc__)
    for policy in ("interleaved where it divides", "1f1b everywhere"):
        run_policy(policy, var)


def run_policy(policy: str, variability: str | None = None) -> None:
    print(f"# schedule assumption: {policy}")
    print(f"{'model':>8} {'GPUs':>5} {'t':>2} {'p':>3} {'sched':>11} {'measured s':>10} {'estimate s':>10} {'error':>7}")
    errs = []
    for run, tf in zip(SC21, TFLOPS):
        B, s, l, h = run.batch, SEQ, run.layers, run.hidden
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + VOCAB / (16 * l * h))
        measured = flops / (run.gpus * tf * 1e12)
        spec = spec_for(run, variability=variability)
        dp = run.gpus // (run.tp * run.pp)
        m = run.batch // dp
        sched, v = schedule_for(policy, run, m)
        cfg = ParallelConfig(run.tp, run.pp, dp, 1, m, sched, v, "full", 0, False)
        # the 2021 stack's rules, not today's: Megatron-LM has since refused interleaved on pp 2 with blocking p2p
        est = estimate_plan(spec, cfg, check=False)[0]
        e = est.iteration_s / measured - 1
        errs.append(e)
        print(f"{run.name:>8} {run.gpus:>5} {run.tp:>2} {run.pp:>3} {sched:>11} {measured:>10.2f} "
              f"{est.iteration_s:>10.2f} {e:>+7.1%}", flush=True)
    print_errors(errs)
    print()


if __name__ == "__main__":
    main()
