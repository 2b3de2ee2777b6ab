"""Issue 4 target: the published Megatron-LM 22B-1T runs of Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models"), estimated with the planner's model.

Configurations: the paper's Table 3 (planner.costs.published.KORTHIKANTI: s = 2048, vocabulary 51200,
micro-batch 1, t = 8, p = 1 / 8 / 35 / 64 on 8 / 64 / 280 / 512 A100 80 GB GPUs, global batch 4 / 64 /
280 / 512, so no data parallelism). Measured end-to-end iteration times, the paper's Table 5 (arXiv 2205.05198),
checked against an independent transcription: Calculon's validation table (calculon-ai/calculon @
09bbcb7e8833edc169fbe2f2bf69fca04b894202, calculon/megatron/validation.py `kProfile`, citing the same paper) holds
the same eight figures:

    model   full recompute   sequence parallel + selective recompute
    22B     1.42 s           1.10 s
    175B    18.13 s          13.75 s
    530B    49.05 s          37.83 s
    1T      94.42 s          71.49 s

Consistency check done here instead (printed): the model-FLOPs utilisation these times imply with the
paper's FLOP count, 72 B s l h^2 (1 + s / 6h + V / 12 l h) / (time * GPUs * 312 TFLOP/s), is 41.7 /
51.4 / 56.0 / 56.2% for the second column, against the paper's quoted MFU of 41.5 / 51.4 / 56.0 / 56.3%.

Assumptions where the tables are silent (stated, not fitted): fp16 peak (312 TFLOP/s; bf16 is the
same), Megatron rank order on DGX A100 nodes with 8 x 200 Gb/s HDR, no ZeRO, and one of three schedule policies
(all printed): interleaved (v = 2) where it divides; 1F1B everywhere; or the execution settings Calculon validated
with (calculon-ai/calculon @ 0efb74e8d1648e5a8209324369a50c353bc8a81b / 09bbcb7e..., validation/{22B,175B,530B,1T}_
{full,seqsel}.json: micro-batch 4 for 22B (one micro-batch), 1 elsewhere; pipeline_interleaving 3 for 175B and 530B,
1 for 1T) -- Calculon's reading of the setup, not a statement of the paper.
Run:  python benchmarks/megatron_selective.py [--gpu-variability longhorn-v100-sgemm]
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from megatron_sc21 import print_errors, schedule_for, spec_for, variability_arg

from planner.config import ParallelConfig
from planner.costs.published import KORTHIKANTI, SEQ, VOCAB
from planner.search.solve import estimate_plan

# (full recompute, sequence parallel + selective recompute), seconds per iteration: Table 5
MEASURED = {"22B": (1.42, 1.10), "175B": (18.13, 13.75), "530B": (49.05, 37.83), "1T": (94.42, 71.49)}
QUOTED_MFU = {"22B": 0.415, "175B": 0.514, "530B": 0.560, "1T": 0.563}
# (micro-batch, virtual stages per rank) in Calculon's validation execution files (module docstring)
CALCULON = {"22B": (4, 1), "175B": (1, 3), "530B": (1, 3), "1T": (1, 1)}


def model_flops(run) -> float:
    B, s, l, h = run.batch, SEQ, run.layers, run.hidden
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + VOCAB / (12 * l * h))


def rows(policy: str, variability: str | None = None):
    out = []
    for run in KORTHIKANTI:
        spec = spec_for(run, tp_backward=True, variability=variability)
        mb = CALCULON[run.name][0] if policy.startswith("calculon") else 1
        m = run.batch // mb
        if policy.startswith("calculon"):
            v = CALCULON[run.name][1]
            sched = "interleaved" if v > 1 else "1f1b"
        else:
            sched, v = schedule_for(policy, run, m)
        for mode, (recompute, sp), meas in zip(("full", "sp+selective"), (("full", False), ("selective", True)),
                                              MEASURED[run.name]):
            cfg = ParallelConfig(run.tp, run.pp, 1, mb, m, sched, v, recompute, 0, sp)
            est = estimate_plan(spec, cfg)[0]
            out.append((run, mode, sched, meas, est.iteration_s))
    return out


def main() -> None:
    var = variability_arg(__doc__)
    print("consistency of the transcribed times with the quoted MFU (sp+selective):")
    for run in KORTHIKANTI:
        mfu = model_flops(run) / (MEASURED[run.name][1] * run.gpus * 312e12)
        print(f"  {run.name:>5}: implied {mfu:.1%}, quoted {QUOTED_MFU[run.name]:.1%}")
    for policy in ("interleaved where it divides", "1f1b everywhere", "calculon's execution settings"):
        print(f"\n# schedule assumption: {policy}")
        print(f"{'model':>6} {'GPUs':>5} {'p':>3} {'mode':>13} {'sched':>11} {'measured s':>10} {'estimate s':>10} "
              f"{'error':>7}")
        errs = []
        for run, mode, sched, meas, est in rows(policy, var):
            e = est / meas - 1
            errs.append(e)
            print(f"{run.name:>6} {run.gpus:>5} {run.pp:>3} {mode:>13} {sched:>11} {meas:>10.2f} {est:>10.2f} "
                  f"{e:>+7.1%}", flush=True)
        print_errors(errs)


if __name__ == "__main__":
    main()
