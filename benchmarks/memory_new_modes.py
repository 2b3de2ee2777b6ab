"""The shipped memory estimator on recompute modes it was never fitted on: mlp and block (Megatron-Core's
--recompute-modules mlp and --recompute-method block), profiled with the fake-tensor profiler.

    python benchmarks/memory_new_modes.py [--cases 120] [--seed 11]

Each case is a random valid stage of the profiler's sample space (planner.profile.memory.sample_case, unfused
attention, reduced layer counts) with its recompute mode replaced by mlp or by block with a random N below the chunk's
layers; the profiler runs it (torch.utils.checkpoint over the MLP / the first N layers of each chunk, fake tensors)
and the shipped learned estimator (planner/data/memory_estimator.json, fitted on none / selective / full samples)
predicts it without refitting (learned.score). Prints, per mode: cases, MAPE of the analytical terms and of the
learned estimator, the worst under-estimate with the estimator's safety, and plans it would call feasible that the
profile says are not. Fake tensors: allocated bytes only (no allocator reserve, no CUDA temporaries).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from planner.costs.learned import DEFAULT_PATH, LearnedMemory, score  # noqa: E402
from planner.profile.memory import sample_case, sample_row  # noqa: E402


def cases(n: int, seed: int, mode: str) -> list:
    rng = random.Random(f"{seed}-{mode}")
    out = []
    while len(out) < n:
        model, training, cfg, stage, lpc = sample_case(rng)
        if mode == "block":
            if lpc < 2:
                continue          # one layer per chunk: block of any N is full recompute
            cfg = replace(cfg, recompute="block", recompute_layers=rng.randrange(1, lpc))
        else:
            cfg = replace(cfg, recompute=mode)
        out.append((model, training, cfg, stage, lpc))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=120, help="cases per mode")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    est = LearnedMemory.load(DEFAULT_PATH)
    for mode in ("mlp", "block"):
        t0 = time.perf_counter()
        rows = [{k: str(v) for k, v in sample_row(*c).items()} for c in cases(args.cases, args.seed, mode)]
        s = score(rows, est)
        print(f"{mode:6s} n={s['n']:4d}  MAPE analytical {s['mape_analytical']:.3f}%  learned {s['mape_learned']:.3f}%  "
              f"worst under-estimate with safety {s['worst_underestimate_pct_with_safety']:+.2f}%  "
              f"OOM called feasible {s['oom_called_feasible']}  ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
