"""`planner validate-memory SAMPLES.csv`: held-out and extrapolation error of the learned memory estimator
against the analytical terms alone and a Pipette-style MLP on configuration integers."""
from __future__ import annotations

import json
import sys

from planner.cli.common import finite_float, seed_int


def register(subparsers) -> None:
    p = subparsers.add_parser("validate-memory", help="MAPE of the memory estimator: held-out and extrapolation")
    p.add_argument("samples", help="CSV written by `planner profile memory`")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the held-out split (default 0)")
    p.add_argument("--holdout", type=finite_float, default=0.2, help="fraction of small configs held out")
    p.add_argument("--small-gpus", type=int, default=32, help="extrapolation: fit on configs with <= this many GPUs")
    p.add_argument("--large-gpus", type=int, default=64, help="extrapolation: test on configs with >= this many GPUs")
    p.add_argument("--margin", type=finite_float, default=0.01,
                   help="when refitting: extra relative safety on top of the worst (out-of-fold) under-estimate "
                        "(default 0.01)")
    p.add_argument("--estimator", metavar="JSON|shipped", default=None,
                   help="instead of refitting: score this fitted estimator ('shipped': the one the planner uses) "
                        "on the "
                        "samples as they are, e.g. CUDA samples from `planner profile memory --device cuda`")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from planner.costs.learned import check_sample_count, read_samples, validate
    from planner.errors import SpecError
    if not 0 < args.holdout < 1:
        raise SpecError(None, "--holdout", "must be between 0 and 1")
    if args.estimator:
        return _score(args)
    rows = read_samples(args.samples)
    check_sample_count(rows, args.samples)
    rep = validate(rows, args.seed, args.holdout, args.small_gpus, args.large_gpus, args.margin)
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"{rep['samples']} samples: {rep['small_configs']} with <= {args.small_gpus} GPUs, "
          f"{rep['large_configs']} with >= {args.large_gpus}", file=sys.stderr)
    for split in ("heldout", "extrapolation"):
        if split in rep:
            r = rep[split]
            print(f"{split:14s} n={r['n']:4d}  MAPE learned {r['mape_learned']:.2f}%  analytical "
                  f"{r['mape_analytical']:.2f}%  MLP(raw ints) {r['mape_mlp_raw_integers']:.2f}%  "
                  f"worst under (safe) {r['worst_underestimate_pct_with_safety']:.2f}%  "
                  f"OOM called feasible {r['oom_called_feasible']}  feasible rejected at 2/5/10% headroom "
                  f"{'/'.join(str(v) for v in r['feasible_rejected'].values())}  safety x{r['safety']:.3f}",
                  file=sys.stderr)
    return 0


def _score(args) -> int:
    from planner.costs.learned import DEFAULT_PATH, LearnedMemory, read_samples, score
    path = DEFAULT_PATH if args.estimator == "shipped" else args.estimator
    rep = score(read_samples(args.samples), LearnedMemory.load(path))
    rep["estimator"] = path
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"{rep['n']} samples, estimator {path}: MAPE {rep['mape_learned']:.2f}% (analytical "
          f"{rep['mape_analytical']:.2f}%), worst under-estimate with safety "
          f"{rep['worst_underestimate_pct_with_safety']:.2f}%, "
          f"measured above the safe prediction {rep['oom_called_feasible']}, rejected at 5% headroom "
          f"{rep['feasible_rejected']['5pct_headroom']}", file=sys.stderr)
    if "cuda" in rep:
        c = rep["cuda"]
        r = c["reserved_over_allocated"]
        print(f"CUDA samples {c['n']}: reserved/allocated median {r['median']:.3f} p95 {r['p95']:.3f} max "
              f"{r['max']:.3f}; measured peak above all the estimator allots: allocated "
              f"{c['allocated_above_all_allotted']}, "
              f"reserved {c['reserved_above_all_allotted']}", file=sys.stderr)
        print("  (CUDA peaks include the cuBLAS workspaces, which the estimator counts in its constant overhead; the "
              "reserved peak overstates the need, since the allocator frees its cache before it fails: "
              "benchmarks/memory_cuda_capped.py measures what runs)", file=sys.stderr)
    return 0
