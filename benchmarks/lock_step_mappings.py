"""Waited 1F1B plans with two or more stages a node: the estimate (the mapping objective, iteration.evaluate) against
the op-level replay (simulate) on the rank order and on random mappings, where several row boundaries leave the
typical hop at once (docs/notes/simulator.md, "1F1B's lock step walked in the objective").

    python benchmarks/lock_step_mappings.py [--draws 6] [--seed 1] [--form-draws 150]

Plans: fuzz seed 2 case 81 (tp4 pp32 dp1 m32 on the drift cluster, two stages a node), and tp4 pp8 1F1B at two
stages a node on the drift spec's cluster (dp4 m64, recompute none) and the 175B spec's (dp32 m48, selective).
Then the form alone (lock_step_walk_parts on one column, every row boundary its own hop) against the walk, and the
closed form (stage_compute_time + lock_step_p2p_s) on the same draws: pp 4-16 at two stages a node, m 1 .. 4 pp,
a heavier last stage (30%: a heavier first), log-normal hops around c0 = 0.05-1 forward, one pair 2-4x.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from planner.config import ParallelConfig  # noqa: E402
from planner.costs import default_costs  # noqa: E402
from planner.costs.iteration import build_problem, evaluate, lock_step_walk_parts  # noqa: E402
from planner.costs.lockstep import lock_step_time  # noqa: E402
from planner.costs.pipeline import lock_step_p2p_s, stage_compute_time  # noqa: E402
from planner.mapping.problem import Layout  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.spec import load_spec  # noqa: E402


def errors(spec, cfg, lay, draws, seed) -> list[float]:
    """est / replay - 1: the rank order, then draws - 1 random placements over the cluster's nodes."""
    costs = default_costs(spec.cluster)
    prob = build_problem(spec, cfg, lay, costs)
    rng = np.random.default_rng(seed)
    out = []
    for k in range(draws):
        n = lay.rows * lay.cols
        a = (np.arange(n) if k == 0 else rng.permutation(len(prob.nodes))[:n]).reshape(lay.rows, lay.cols)
        e = evaluate(spec, cfg, prob, a, costs).iteration_s
        s = simulate(spec, cfg, costs=costs, layout=lay, assign=a, nodes=prob.nodes).iteration_s
        out.append(e / s - 1)
    return out


def form_draws(n: int, seed: int) -> list[tuple]:
    """(form, closed form) / walk - 1 of compute + p2p, and the form's error on the exposed p2p alone, per draw."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        R, a = int(rng.integers(2, 9)), 2
        p = R * a
        m = int(rng.integers(1, 4 * p + 1))
        fm = rng.uniform(0.5, 1.5)
        f = fm * rng.uniform(0.97, 1.03, p)
        b = f * rng.uniform(2.0, 3.0)
        f[-1] *= 1.4
        b[-1] *= 1.4
        if rng.random() < 0.3:
            f[0] *= 1.2
            b[0] *= 1.2
        c0 = rng.uniform(0.05, 1.0) * fm
        ow = c0 * np.exp(rng.normal(0, 0.25, (R, R)))
        ow = (ow + ow.T) / 2
        np.fill_diagonal(ow, 0)
        i, j = rng.choice(R, 2, replace=False)
        ow[i, j] = ow[j, i] = ow[i, j] * rng.uniform(2, 4)
        intra = 0.01 * c0
        hop, pace, const = lock_step_walk_parts(f, b, m, Layout(a, 1, R, 1), ow, intra)
        col = np.arange(R)
        form = const + sum(hop[r, r + 1] for r in range(R - 1))
        form += float(pace.costs(col.reshape(R, 1))[0]) if pace is not None else 0.0
        cs = [ow[s // a, s // a + 1] if (s + 1) % a == 0 else intra for s in range(p - 1)]
        zero, tot = lock_step_time(f, b, m), lock_step_time(f, b, m, cs)
        closed = (stage_compute_time("1f1b", p, m, 1, list(f), list(b), [0.0] * p)
                  + lock_step_p2p_s(list(f + b), np.array(cs), m))
        # the form's total: the walk at zero hops (its compute) plus the form's exposed p2p
        out.append(((zero + form) / tot - 1, closed / tot - 1, form / (tot - zero) - 1))
    return out


def spread(x) -> str:
    x = np.asarray(x)
    return (f"min {x.min():+.2%} p5 {np.percentile(x, 5):+.2%} median {np.median(x):+.2%} "
            f"p95 {np.percentile(x, 95):+.2%} max {x.max():+.2%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--form-draws", type=int, default=150)
    args = ap.parse_args()
    import fuzz_plans
    case = fuzz_plans.draw(2, 81)
    plans = [("fuzz seed 2 case 81", fuzz_plans._spec(case["data"], case["spec"]), case["cfg"], Layout(2, 1, 16, 1))]
    tp4pp8 = {"tp": 4, "pp": 8, "micro_batch_size": 1, "schedule": "1f1b", "zero": 1}
    for name, cfg, lay in [
            ("llama2-7b-v100-het-drift-128", {**tp4pp8, "dp": 4, "num_microbatches": 64, "recompute": "none"},
             Layout(2, 1, 4, 4)),
            ("gpt3-175b-a100-het-1024", {**tp4pp8, "dp": 32, "num_microbatches": 48, "recompute": "selective"},
             Layout(2, 1, 4, 32))]:
        plans.append((name, load_spec(os.path.join(ROOT, "specs", f"{name}.yaml")), cfg, lay))
    for name, spec, cfg, lay in plans:
        errs = errors(spec, ParallelConfig.from_dict(cfg, None, "config"), lay, args.draws, args.seed)
        print(f"{name}: {lay}: estimate / replay - 1, rank order then random: "
              + " ".join(f"{x:+.2%}" for x in errs))
    rows = form_draws(args.form_draws, 0)
    print(f"{len(rows)} draws, against the walk: compute + p2p, the form {spread([r[0] for r in rows])}; "
          f"the closed form {spread([r[1] for r in rows])}; the form's exposed p2p {spread([r[2] for r in rows])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
