"""Megatron-Core's 1F1B lock step: the closed form (pipeline.lock_step_p2p_s) against the walk
(lockstep.lock_step_time) and the waited-call replay (simulator/mcore.py), and the walk's exposed p2p as a function
of one boundary's hop (docs/notes/simulator.md, "1F1B's lock step walked").

    python benchmarks/lock_step_walk.py [--draws 100] [--seed 0]

Case 81 of the fuzz's seed 2 (benchmarks/fuzz_plans.py --seed 2 --only 81): its stage times and mapped hops as the
simulator runs them (the replay's inputs, captured), then a sweep of boundary 1's hop. Random draws: pp 2-16,
m 1 .. 4 pp, plan-like stages (a heavier last stage, now and then a heavier first one), heterogeneous hops
(log-normal around c0) with one slow boundary (2-4x); for each, the total (compute + exposed p2p) of the closed form
and of the walk against the replay, and the walk's exposed p2p on a grid of one random boundary's hop (convexity:
second differences >= -1e-9 of the range).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from planner.costs.lockstep import _lock_step_dag, lock_step_time  # noqa: E402
from planner.costs.pipeline import convex_pieces, lock_step_p2p_s, stage_compute_time  # noqa: E402
from planner.simulator import engine, mcore  # noqa: E402
from planner.simulator.orders import build  # noqa: E402


def replay(f, b, m, cf, cb) -> float:
    """The waited-call replay (mcore.timeline) of per-stage f, b with hops cf (activations), cb (gradients)."""
    p = len(f)
    g = engine.build_graph(build("1f1b", p, m))
    dur = np.where(g.kind == 0, np.asarray(f)[g.dev], np.asarray(b)[g.dev]).tolist()
    _, end = mcore.timeline(g, p, m, dur, np.r_[0.0, cf], np.r_[cb, 0.0])
    return max(end)


def closed(f, b, m, cf, cb) -> float:
    """The estimate's form: stage_compute_time + lock_step_p2p_s on each boundary's slower direction (the mapping's
    hop, iteration.lock_step_problem_parts)."""
    p = len(f)
    t = [x + y for x, y in zip(f, b)]
    return (stage_compute_time("1f1b", p, m, 1, list(f), list(b), [0.0] * p)
            + lock_step_p2p_s(t, np.maximum(cf, cb), m))


def case81():
    """(f, b, m, cf, cb, the simulator's compute_s) of fuzz seed 2 case 81 as the replay runs it."""
    import fuzz_plans

    from planner.config import ParallelConfig
    from planner.costs import default_costs
    from planner.search.solve import estimate_plan
    from planner.simulator import replay as rp
    from planner.simulator import simulate
    from planner.simulator.ops import B, F, R

    case = fuzz_plans.draw(2, 81)
    spec = fuzz_plans._spec(case["data"], case["spec"])
    cfg = ParallelConfig.from_dict(case["cfg"], None, "config")
    costs = default_costs(spec.cluster)
    est, lay, assign, prob = estimate_plan(spec, cfg, costs=costs)
    seen = {}
    core = rp._simulate_core

    def capture(sched, dur, lat_f, lat_b, *a, **k):
        seen.update(dur=dur, lat_f=lat_f, lat_b=lat_b, mc=a[-1] if len(a) >= 11 else k.get("mcore_1f1b"))
        res = core(sched, dur, lat_f, lat_b, *a, **k)
        seen["compute_s"] = res.compute_s
        return res
    rp._simulate_core = capture
    try:
        sim = simulate(spec, cfg, costs=costs, layout=lay, assign=assign, nodes=prob.nodes)
    finally:
        rp._simulate_core = core
    assert seen["mc"], "case 81 is not timed by the waited calls"
    d = seen["dur"]
    f, b = d[:, 0, F], d[:, 0, B] + d[:, 0, R]
    return (f, b, cfg.num_microbatches, seen["lat_f"][0, 1:], seen["lat_b"][0, :-1], seen["compute_s"],
            est.iteration_s, sim.iteration_s)


def convex_on_grid(fn, hi, n=41) -> float:
    """The most negative second difference of fn on n points of [0, hi], relative to its range."""
    xs = np.linspace(0.0, hi, n)
    ys = np.array([fn(x) for x in xs])
    d2 = ys[2:] - 2 * ys[1:-1] + ys[:-2]
    return float(d2.min() / max(ys.max() - ys.min(), 1e-12))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    # ---- case 81
    f, b, m, cf, cb, comp, est_s, sim_s = case81()
    p = len(f)
    r, w, cl = replay(f, b, m, cf, cb), lock_step_time(f, b, m, cf, cb), closed(f, b, m, cf, cb)
    z = lock_step_time(f, b, m)
    print(f"case 81: pp {p} m {m}; estimate {est_s:.4f} s, simulated {sim_s:.4f} s; pipeline makespan: replay in "
          f"simulate {comp:.4f}, replay {r:.4f}, walk {w:.4f} (diff {abs(w - r) / r:.1e}), closed form {cl:.4f} "
          f"({cl / r - 1:+.2%}); exposed p2p: walk {w - z:.4f}, closed {cl - z:.4f} s")
    print(f"  hops (one-way, activation / gradient): boundary 1 {cf[1]:.4f} / {cb[1]:.4f}, the others "
          f"{np.delete(cf, 1).min():.4f} .. {np.delete(cf, 1).max():.4f}; f {np.median(f):.4f} b {np.median(b):.4f}"
          f" (middle), last stage f + b {f[-1] + b[-1]:.4f}")
    for j in (1, 15, 29):
        def walk_j(x, j=j):
            c1, c2 = cf.copy(), cb.copy()
            c1[j] = c2[j] = x
            return lock_step_time(f, b, m, c1, c2) - z

        def closed_j(x, j=j):
            c1, c2 = cf.copy(), cb.copy()
            c1[j] = c2[j] = x
            return closed(f, b, m, c1, c2) - z
        t0 = time.perf_counter()
        pw = convex_pieces(walk_j, 0.5)
        dt = time.perf_counter() - t0
        pc = convex_pieces(closed_j, 0.5)
        print(f"  boundary {j}, hop 0..0.5 s: walk slopes {[round(s, 2) for s, _ in pw]} (knees "
              f"{[round((c1 - c0) / (s0 - s1), 4) for (s0, c0), (s1, c1) in zip(pw, pw[1:])]}; "
              f"convex_pieces {dt:.2f} s); closed form slopes {[round(s, 2) for s, _ in pc]}; "
              f"grid convexity {convex_on_grid(walk_j, 0.5):+.1e}")

    # ---- random draws
    rng = np.random.default_rng(args.seed)
    rows = []
    t_walk = t_rep = t_dag = 0.0
    for _ in range(args.draws):
        p = int(rng.integers(2, 17))
        m = int(rng.integers(1, 4 * p + 1))
        fm = rng.uniform(0.5, 1.5)
        f = fm * rng.uniform(0.97, 1.03, p)
        b = f * rng.uniform(2.0, 3.0)
        f[-1] += rng.uniform(0.0, 0.6) * fm
        b[-1] += rng.uniform(0.0, 1.2) * fm
        if rng.random() < 0.3:
            f[0] *= 1.1
            b[0] *= 1.1
        c0 = fm * rng.uniform(0.05, 1.0)
        cf = c0 * rng.lognormal(0.0, 0.25, p - 1)
        cf[rng.integers(p - 1)] *= rng.uniform(2.0, 4.0)
        cb = cf * rng.uniform(0.9, 1.1, p - 1)
        t0 = time.perf_counter()
        rr = replay(f, b, m, cf, cb)
        t1 = time.perf_counter()
        _lock_step_dag(p, m)                      # built once per (p, m): timed apart
        t2 = time.perf_counter()
        ww = lock_step_time(f, b, m, cf, cb)
        t_walk += time.perf_counter() - t2
        t_dag += t2 - t1
        t_rep += t1 - t0
        zz = lock_step_time(f, b, m)
        cc = closed(f, b, m, cf, cb)
        j = int(rng.integers(p - 1))

        def walk_j(x, j=j, f=f, b=b, m=m, cf=cf, cb=cb):
            c1, c2 = cf.copy(), cb.copy()
            c1[j] = c2[j] = x
            return lock_step_time(f, b, m, c1, c2)
        conv = convex_on_grid(walk_j, 4 * cf.max())
        rows.append((p, m, abs(ww - rr) / rr, cc / rr - 1, (cc - zz) / max(rr - zz, 1e-12) - 1, conv))
    a = np.array(rows)

    def dist(x):
        return (f"min {x.min():+.2%} p5 {np.percentile(x, 5):+.2%} median {np.median(x):+.2%} "
                f"p95 {np.percentile(x, 95):+.2%} max {x.max():+.2%}")
    print(f"{args.draws} random draws (seed {args.seed}): walk vs replay worst {a[:, 2].max():.1e} relative; "
          f"walk {t_walk / args.draws * 1e3:.2f} ms a plan (+ its DAG once per shape "
          f"{t_dag / args.draws * 1e3:.1f} ms), replay {t_rep / args.draws * 1e3:.2f} ms")
    print(f"  closed form vs replay, compute + p2p: {dist(a[:, 3])}")
    print(f"  closed form vs replay, exposed p2p:   {dist(a[:, 4])}")
    early = a[:, 1] < 2 * a[:, 0]
    print(f"  the same, m < 2 pp ({early.sum()}): {dist(a[early, 3])}; m >= 2 pp ({(~early).sum()}): "
          f"{dist(a[~early, 3])}")
    print(f"  one boundary's hop swept (41 points, 0 .. 4 x the slowest hop): most negative second difference "
          f"{a[:, 5].min():+.1e} of the range; non-convex draws (< -1e-9): {(a[:, 5] < -1e-9).sum()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
