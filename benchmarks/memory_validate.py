"""Validation of the memory estimator on profiled samples: held-out and extrapolation MAPE against the two
baselines, worst under-estimate, and a predicted-vs-measured plot.

Run: python benchmarks/memory_validate.py [SAMPLES.csv] [-o docs/notes/memory_validation.json]
                                          [--plot docs/notes/memory_pred_vs_measured.png]
                                          [--fresh planner/data/memory_samples_fake_seed1.csv]

--fresh: samples profiled after the model was fixed (another seed), scored with the shipped estimator (fitted on
SAMPLES) and with the analytical terms alone: a check that has not been looked at while building the model.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from planner.costs.learned import DEFAULT_PATH, LearnedMemory, design, mlp_baseline, read_samples, score, validate

SAMPLES = os.path.join(os.path.dirname(DEFAULT_PATH), "memory_samples_fake.csv")
FRESH = os.path.join(os.path.dirname(DEFAULT_PATH), "memory_samples_fake_seed1.csv")


def fresh_check(rows, estimator=None) -> dict:
    """The shipped estimator (or `estimator`) on samples it was not fitted on and the model was not built from."""
    return score(rows, estimator or LearnedMemory.load(DEFAULT_PATH))


def plot(rows, path: str, small_gpus: int = 32, large_gpus: int = 64) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    X, y, raw = design(rows)
    gpus = np.array([int(r["tp"]) * int(r["pp"]) * int(r["dp"]) for r in rows])
    small, large = gpus <= small_gpus, gpus >= large_gpus
    est = LearnedMemory().fit(X[small], y[small], groups={k: v[small] for k, v in LearnedMemory.groups_of(rows).items()})
    mlp = mlp_baseline(raw[small], y[small])
    G = 1024 ** 3
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.scatter(y[large] / G, X[large, :-1].sum(1) / G, s=10, alpha=0.6, label="analytical terms")
    ax.scatter(y[large] / G, mlp(raw[large]) / G, s=10, alpha=0.6, label="MLP on config integers")
    ax.scatter(y[large] / G, est.predict(X[large]) / G, s=10, alpha=0.8, label="learned (with safety)")
    lim = [min(y[large].min() / G, 0.1), y[large].max() / G * 1.2]
    ax.plot(lim, lim, "k--", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured peak (fake-tensor profile), GiB")
    ax.set_ylabel("predicted, GiB")
    ax.set_title(f"extrapolation: fit <= {small_gpus} GPUs, test >= {large_gpus}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples", nargs="?", default=SAMPLES)
    ap.add_argument("-o", "--output")
    ap.add_argument("--plot")
    ap.add_argument("--fresh", nargs="?", const=FRESH, default=None,
                    help="also score the shipped estimator on these samples (default: the seed-1 set)")
    args = ap.parse_args(argv)
    rows = read_samples(args.samples)
    rep = validate(rows)
    if args.fresh:
        rep["fresh"] = {"samples": os.path.basename(args.fresh), **fresh_check(read_samples(args.fresh))}
    print(json.dumps(rep, indent=1))
    if args.output:
        from planner.io import atomic_write_text
        atomic_write_text(args.output, json.dumps(rep, indent=1) + "\n")
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
