"""Benchmark: profile N local gloo processes on loopback (issue 6 target: 4 processes in <= 30 s, full 4x4).

    /work/venv/bin/python benchmarks/network_profile.py [--procs 4] [--sizes 64K,1M,16M] [--repeats 5]

Prints the wall time (process start to matrix), the measuring time inside the job, and the matrices.
Loopback numbers measure memory copies through the kernel's TCP stack, not a network: they show the
profiler works end to end, not what a cluster's links do.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from planner.profile import network as net


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--sizes", default="64K,1M,16M")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--max-pairs", type=int, default=0, help="pairs at once (1: one at a time)")
    ap.add_argument("--target-s", type=float, default=30.0)
    ap.add_argument("--json", default=None, help="write the figures here")
    a = ap.parse_args()
    opts = net.ProfileOptions(sizes_bytes=net.parse_sizes(a.sizes), repeats=a.repeats, warmup=a.warmup, node_key="rank",
                              max_pairs=a.max_pairs)
    t0 = time.perf_counter()
    prof = net.profile_spawn(a.procs, opts, deadline_s=max(120.0, 4 * a.target_s))
    wall = time.perf_counter() - t0
    off = ~np.eye(prof.nodes, dtype=bool)
    full = bool(np.all(prof.bandwidth_GBps[off] > 0))
    print(f"procs={a.procs} sizes={list(prof.sizes_bytes)} repeats={a.repeats} warmup={a.warmup} "
          f"max_pairs={a.max_pairs} rounds={prof.rounds} cores={os.cpu_count()}")
    print(f"wall {wall:.2f} s (target <= {a.target_s:.0f} s), measuring inside the job {prof.wall_s:.2f} s, "
          f"full {prof.nodes}x{prof.nodes} matrix: {full}")
    for s, m in zip(prof.sizes_bytes, prof.bandwidth_by_size_GBps):
        print(f"GB/s at {s} B: median {np.median(m[off]):.3f}, min {m[off].min():.3f}, max {m[off].max():.3f}")
    print("bandwidth GB/s (largest size):")
    for row in prof.bandwidth_GBps:
        print("  " + " ".join(f"{v:8.3f}" for v in row))
    print("latency us:")
    for row in prof.latency_us:
        print("  " + " ".join(f"{v:8.1f}" for v in row))
    ok = full and wall <= a.target_s
    if a.json:
        from planner.io import write_json
        write_json(a.json, {"wall_s": wall, "job_s": prof.wall_s, "full_matrix": full, "target_s": a.target_s,
                            "ok": ok, **prof.sidecar()})
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
