"""Benchmark: 100 GPT sizes (1B-100B) on one 128-GPU A100 cluster (sweeps/gpt-sizes-a100-128.yaml).

Target: <= 60 s on two cores with local workers. Also the Ray speed-up: wall time with 1 and 2 workers
on a local Ray instance (each run starts its own instance with num_cpus = workers; start-up included).
Every run starts from an empty output folder (no resume).

    python benchmarks/batch_100_sizes.py [--sweep sweeps/gpt-sizes-a100-128.yaml] [--no-ray] [--json out.json]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from planner.batch.run import run_batch
from planner.batch.sweep import load_sweep


def _spin(_=None) -> float:
    t = time.perf_counter()
    s = 0
    for i in range(10_000_000):
        s += i
    return time.perf_counter() - t


def cpu_parallelism() -> float:
    """How many pure-Python processes really run at once here: 2 x (time of one) / (time of two at once)."""
    import multiprocessing as mp
    one_s = _spin()
    with mp.get_context("forkserver").Pool(2) as pool:
        t0 = time.perf_counter()
        pool.map(_spin, [0, 1])
        two_s = time.perf_counter() - t0
    return 2 * one_s / two_s


def one(sweep, executor: str, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        res = run_batch(sweep, d, executor=executor, workers=workers, progress=False, resume=False)
        wall = time.perf_counter() - t0
    statuses = collections.Counter(r["status"] for r in res.rows)
    solver = sorted(float(r["solver_wall_s"]) for r in res.rows if r.get("solver_wall_s") is not None)
    return {"executor": executor, "workers": workers, "cases": len(res.rows), "wall_s": round(wall, 2),
            "statuses": dict(statuses), "solver_s_sum": round(sum(solver), 2),
            "solver_s_median": round(solver[len(solver) // 2], 3), "solver_s_max": round(solver[-1], 3),
            "rows": res.rows}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", default="sweeps/gpt-sizes-a100-128.yaml")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--json", default=None, help="write the timings here")
    args = ap.parse_args()
    sweep = load_sweep(args.sweep)
    par = cpu_parallelism()
    print(f"{sweep.name}: {len(sweep.cases)} cases, {os.cpu_count()} cores; measured CPU parallelism of two "
          f"busy processes: {par:.2f}x (2.0 = two full cores); load average {os.getloadavg()[0]:.1f} "
          "(other work on this machine competes for the cores)", flush=True)
    runs = []
    plan = [("local", 2), ("local", 1)] + ([] if args.no_ray else [("ray", 1), ("ray", 2)])
    for ex, w in plan:
        r = one(sweep, ex, w)
        runs.append(r)
        print(f"{ex:>5} workers={w}: {r['wall_s']:6.1f} s wall, statuses {r['statuses']}, solver time per case "
              f"median {r['solver_s_median']:.2f} s, max {r['solver_s_max']:.2f} s, sum {r['solver_s_sum']:.1f} s",
              flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    local2 = runs[0]["wall_s"]
    print(f"target 100 sizes <= 60 s with local workers on two cores: {local2:.1f} s -> "
          f"{'met' if local2 <= 60 else 'NOT met'}")
    print(f"local speed-up 1 -> 2 workers: {runs[1]['wall_s'] / runs[0]['wall_s']:.2f}x")
    if not args.no_ray:
        print(f"ray speed-up 1 -> 2 workers: {runs[2]['wall_s'] / runs[3]['wall_s']:.2f}x "
              f"({runs[2]['wall_s']:.1f} s -> {runs[3]['wall_s']:.1f} s)")
    # the plans must not depend on the executor: compare the chosen configs of proven-optimal rows
    base = {r["case_id"]: r for r in runs[0]["rows"]}
    differ = 0
    for run in runs[1:]:
        for r in run["rows"]:
            b = base[r["case_id"]]
            if r["status"] == b["status"] == "OPTIMAL" and abs(r["iteration_s"] / b["iteration_s"] - 1) > 1e-9:
                differ += 1
    print(f"optimal rows whose iteration time differs between runs: {differ}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu_parallelism": par, "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs]},
                      fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
