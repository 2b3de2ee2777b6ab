"""Simulation vs closed-form estimate vs measurement on vTrain's multi-node A100 runs (1F1B, fp16,
full recompute, Megatron-DeepSpeed). Both models share the (unfitted, default) compute model, so this
isolates what the op-level schedule changes; absolute errors mostly reflect the compute model.

    python benchmarks/sim_vs_vtrain.py [path/to/measured_multi_node.csv]
"""
from __future__ import annotations

import csv
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from planner.config import ParallelConfig  # noqa: E402
from planner.latency import build_problem, default_layout, evaluate  # noqa: E402
from planner.simulate import simulate  # noqa: E402
from planner.spec import parse_spec  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "vtrain-a100", "measured_multi_node.csv")


def spec_for(row) -> object:
    h, heads, layers, seq = (int(row[k]) for k in ("hidden size", "attention heads", "# layers", "sequence length"))
    gpus = int(row["# GPUs"])
    return parse_spec({
        "name": f"vtrain-{row['Parameters (billion)']}b",
        "model": {"name": "gpt", "family": "gpt", "num_layers": layers, "hidden_size": h,
                  "num_attention_heads": heads, "vocab_size": 50257, "tied_embeddings": True},
        "cluster": {"name": "vtrain-a100", "gpu": {"type": "A100-SXM4-40GB", "memory_GiB": 40,
                                                   "peak_tflops": {"fp16": 312, "bf16": 312}},
                    "nodes": gpus // 8, "gpus_per_node": 8,
                    "network": {"intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
                                "inter_node": {"bandwidth_Gbps": 200, "nics_per_node": 4, "latency_us": 5}}},
        "training": {"global_batch_size": int(row["global batch"]), "seq_length": seq, "precision": "fp16",
                     "optimizer": "adam"},
    })


def compare(path: str = DATA) -> list[tuple]:
    """(model, config label, measured s, simulated s, estimated s) for every row both models can express."""
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for r in rows:
        spec = spec_for(r)
        tp, dp, pp, mbs = (int(r[k]) for k in ("tensor parallelism", "data parallelism", "pipeline parallelism",
                                               "micro batch"))
        m = int(r["global batch"]) // (dp * mbs)
        cfg = ParallelConfig(tp, pp, dp, mbs, m, "1f1b", 1, "full", 0, False)
        try:
            sim = simulate(spec, cfg)
            layout = default_layout(cfg, 8)
            prob = build_problem(spec, cfg, layout)
            est = evaluate(spec, cfg, prob, prob.rank_order())
        except Exception as e:      # a row the models cannot express (layers not divisible, ...)
            print(f"skip {cfg.label()}: {e}", file=sys.stderr)
            continue
        meas = float(r["iteration time (ms)"]) / 1e3
        out.append((r["Parameters (billion)"], cfg.label(), meas, sim.iteration_s, est.iteration_s))
    return out


def main(path: str = DATA) -> None:
    out = compare(path)
    print(f"{'model':>6s} {'config':45s} {'meas s':>8s} {'sim s':>8s} {'est s':>8s} {'sim err':>8s} {'est err':>8s}")
    for name, lab, meas, s, e in out:
        print(f"{name:>6s} {lab:45s} {meas:8.2f} {s:8.2f} {e:8.2f} {100 * (s - meas) / meas:+7.1f}% "
              f"{100 * (e - meas) / meas:+7.1f}%")
    a = np.array([(m_, s, e) for _, _, m_, s, e in out])
    se, ee = np.abs(a[:, 1] - a[:, 0]) / a[:, 0], np.abs(a[:, 2] - a[:, 0]) / a[:, 0]
    print(f"\n{len(out)} rows: MAPE simulation {100 * se.mean():.1f}%, closed form {100 * ee.mean():.1f}%; "
          f"simulation closer on {int(np.sum(se < ee))} rows, estimate closer on {int(np.sum(ee < se))}")
    # the planner's real question: does the model rank configurations of one group like the measurements?
    from scipy.stats import spearmanr
    for name in sorted({o[0] for o in out}, key=float):
        g = np.array([(m_, s, e) for n, _, m_, s, e in out if n == name])
        if len(g) >= 3:
            print(f"{name}B ({len(g)} configs): Spearman vs measured: simulation "
                  f"{spearmanr(g[:, 0], g[:, 1])[0]:+.2f}, estimate {spearmanr(g[:, 0], g[:, 2])[0]:+.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
