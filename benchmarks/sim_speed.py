"""Simulator speed: 1F1B with pp = 64 and 1,024 micro-batches (target <= 0.5 s on one core), and the
other schedules at the same size, plus a real plan from the shipped spec.

    OMP_NUM_THREADS=1 python benchmarks/sim_speed.py
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from planner.simulator import simulate, simulate_uniform


def best_of(fn, n=3):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = fn()
        out.append(time.perf_counter() - t)
    return min(out), r


def main() -> None:
    rows = []
    for sched, v in [("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("zb-h1", 1), ("v-zb", 2), ("v-min", 2),
                     ("v-half", 2)]:
        dt, r = best_of(lambda s=sched, v=v: simulate_uniform(s, 64, 1024, v, f=1.0, b=2.0, w=0.7, comm=0.01))
        rows.append((f"{sched} pp64 m1024", r.num_ops, dt))
    import planner
    from planner.config import ParallelConfig
    spec = planner.load_spec(os.path.join(os.path.dirname(__file__), "..", "specs", "gpt3-13b-a100-128.yaml"))
    cfg = ParallelConfig(8, 4, 4, 1, 128, "1f1b")
    dt, r = best_of(lambda: simulate(spec, cfg))
    rows.append((f"gpt3-13b {cfg.label()}", r.num_ops, dt))
    print(f"{'case':45s} {'ops':>8s} {'seconds':>8s}")
    for name, ops, dt in rows:
        print(f"{name:45s} {ops:8d} {dt:8.3f}")
    target = rows[0][2]
    print(f"\n1F1B pp=64 m=1024: {target:.3f} s (target 0.5 s): {'OK' if target <= 0.5 else 'SLOW'}")


if __name__ == "__main__":
    main()
