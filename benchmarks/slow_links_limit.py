"""Deep pipelines on very slow links against the time limit (issue #10: wall <= limit + 5%): stress copies of the
shipped gpt3-175b-a100-het-1024 spec, every link of its 128-node matrix scaled to 2% (0.3-0.4 GB/s, like 3 Gb/s
NICs), each pinned to one schedule and pp (a 128-layer, 232.6B variant of the model where pp 64 needs it), solved by
`planner solve --time-limit T` in a fresh process. Prints per copy the command's wall (import, solve, simulation and
writing included), the solve's work_s and stopped_by, whether its walks were dropped for the typical hop
(walks_dropped: screen.WALK_SHARE) and the simulated iteration. Nothing is tuned on these copies; they are not
shipped. docs/notes/solver.md, "Deep pipelines on slow links break the time limit".

    python benchmarks/slow_links_limit.py [--time-limit 10] [--copies il32 a2_64 ...]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = 0.02

# name: (schedule, tp, pp, 128-layer model, global batch)
COPIES = {
    "il32": ("interleaved", 8, 32, False, 1536),
    "il64": ("interleaved", 8, 64, True, 1536),
    "a1_64": ("1f1b", 8, 64, True, 1536),
    "a2_64": ("1f1b", 4, 64, True, 1536),
    "zb64": ("zb-h1", 4, 64, True, 1536),
    "il32big": ("interleaved", 8, 32, False, 6144),
    "a2big": ("1f1b", 4, 64, True, 6144),
}


def write_copies(d: str, names) -> dict:
    """The copies' spec files in folder d: {name: path}."""
    cl = yaml.safe_load(open(os.path.join(ROOT, "clusters", "a100-128x8-het.yaml")))
    bw = np.loadtxt(os.path.join(ROOT, "clusters", cl["network"]["bandwidth_matrix"]), delimiter=",")
    np.savetxt(os.path.join(d, "slow.bandwidth.csv"), bw * SCALE, delimiter=",", fmt="%.4f")
    cl["network"].pop("generator", None)
    cl.update(name="slow", description="every link of a100-128x8-het at 2%: a stress copy, not a measurement")
    cl["network"]["bandwidth_matrix"] = "slow.bandwidth.csv"
    cl["network"]["inter_node"]["bandwidth_Gbps"] = 200 * SCALE
    yaml.safe_dump(cl, open(os.path.join(d, "slow.yaml"), "w"))
    model = yaml.safe_load(open(os.path.join(ROOT, "models", "gpt3-175b.yaml")))
    yaml.safe_dump(model, open(os.path.join(d, "gpt3-175b.yaml"), "w"))
    yaml.safe_dump({**model, "name": "gpt3-232b", "num_layers": 128, "parameters_B": 232.6},
                   open(os.path.join(d, "gpt3-232b.yaml"), "w"))
    out = {}
    for name in names:
        sched, tp, pp, deep, gbs = COPIES[name]
        spec = {"description": f"stress copy {name}", "model": "gpt3-232b.yaml" if deep else "gpt3-175b.yaml",
                "cluster": "slow.yaml",
                "training": {"global_batch_size": gbs, "seq_length": 2048, "precision": "bf16", "optimizer": "adam",
                             "tokens": 3.0e11},
                "search": {"schedules": [sched], "recompute": ["selective", "mlp", "block", "full"], "zero": [0, 1],
                           "micro_batch_sizes": [1, 2], "tensor_parallel": [tp], "pipeline_parallel": [pp],
                           "memory_margin": 0.05},
                "solver": {"method": "auto", "time_limit_s": 60, "seed": 0}}
        out[name] = os.path.join(d, f"{name}.yaml")
        yaml.safe_dump(spec, open(out[name], "w"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--copies", nargs="+", default=list(COPIES), choices=list(COPIES))
    args = ap.parse_args()
    over = 0
    with tempfile.TemporaryDirectory() as d:
        specs = write_copies(d, args.copies)
        print(f"{'copy':9s} {'wall s':>7s} {'work s':>7s} {'stopped':>8s} {'walks':>8s} {'simulated s':>12s}")
        for name, path in specs.items():
            sol = os.path.join(d, f"{name}.solution.yaml")
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "planner", "solve", path, "--time-limit", str(args.time_limit),
                                "--out", sol], capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - t
            if r.returncode != 0:
                print(f"{name:9s} exit {r.returncode}: {r.stderr.strip().splitlines()[-1] if r.stderr else ''}")
                over += 1
                continue
            s = yaml.safe_load(open(sol))["solver"]
            sim = yaml.safe_load(open(sol)).get("simulated") or {}
            over += wall > 1.05 * args.time_limit
            print(f"{name:9s} {wall:7.1f} {s['work_s']:7.2f} {s['stopped_by']:>8s} "
                  f"{'dropped' if s.get('walks_dropped') else 'walked':>8s} {sim.get('iteration_s', float('nan')):12.2f}")
    print(f"{over} of {len(specs)} over the limit + 5% ({1.05 * args.time_limit:.1f} s)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
