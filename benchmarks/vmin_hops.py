"""V-Min's exposed hops on uniform stages: the estimate (compute_time plus the hop charge) against the replay.

    python benchmarks/vmin_hops.py

Grid: p 4, 5, 6, 8, 9, 12, 16; per-device f : b : w 1 : 1.3 : 0.13, 1 : 2 : 0.66, 1 : 2.6 : 0.5, 1 : 3 : 0.3,
1 : 1.6 : 0.5, 1 : 2 : 1, 1 : 3 : 1 (b holds w); a hop of 0.1 .. 4 chunk forwards; m = p, 2p, 4p, 8p. "old" charges the
constant 3 traversals a micro-batch (6 (p - 1) m c / p, pipeline.p2p_hops before branch vmin), "walked" what the
estimate charges since branch vwalk: the order walked with and without the hops (costs/vwalk.py v_walk_p2p_s) on the
walked compute (v_walk), exact at every m (v_min_p2p_s, the closed form of branch vmin, is gone).
Prints p5 / median / p95 and the extremes of estimate / replay - 1 for m >= 2p and m = p (docs/notes/simulator.md,
"V-Min's hops").
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pytorch_zbv_hops import spread_line

from planner.costs.pipeline import compute_time
from planner.costs.vwalk import v_walk, v_walk_p2p_s
from planner.simulator import simulate_uniform

RATIOS = [(1, 1.3, 0.13), (1, 2, 0.66), (1, 2.6, 0.5), (1, 3, 0.3), (1, 1.6, 0.5), (1, 2, 1), (1, 3, 1)]


def main() -> int:
    gaps = {(k, r): [] for k in ("old", "walked") for r in ("m >= 2p", "m = p")}
    for p in (4, 5, 6, 8, 9, 12, 16):
        for f, b, w in RATIOS:
            for hop in (0.1, 0.25, 0.5, 1, 2, 4):
                c = hop * f / 2
                for m in (p, 2 * p, 4 * p, 8 * p):
                    sim = simulate_uniform("v-min", p, m, 2, f=f, b=b, w=w, comm=c).compute_s
                    ct = compute_time("v-min", p, m, 2, f, b, w)
                    r = "m = p" if m == p else "m >= 2p"
                    gaps["old", r].append((ct + 6 * (p - 1) * m / p * c) / sim - 1)
                    walked = v_walk_p2p_s("v-min", [f] * p, [b] * p, [w] * p, m, c)
                    tl = v_walk("v-min", [f] * p, [b] * p, [w] * p, m)
                    gaps["walked", r].append((tl.makespan + walked) / sim - 1)
    for (k, r), g in gaps.items():
        print(spread_line(f"{k} {r:8s}", g, digits=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
