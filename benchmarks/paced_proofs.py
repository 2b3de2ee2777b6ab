"""Time CP-SAT's proofs on paced mapping problems (MappingProblem.pace): solve_exact without a hint, from a hint,
and with a cutoff at the optimum (must be PRUNED) and just above it (must find it), on the tiny 6-node 1F1B problem
of tests/test_mapping.py and on paced problems built from shipped specs.

    PYTHONPATH=. python benchmarks/paced_proofs.py [--limit 20] [--cases tiny ...]

Prints per call: status, wall seconds and work seconds (CP-SAT's deterministic time plus the pre-solve's charges,
solve_exact's work_s), objective and bound. Problems over brute force's size take their optimum from a long
solve_exact (reported; a cutoff is only posted where it proved OPTIMAL).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from planner.config import ParallelConfig  # noqa: E402
from planner.costs.iteration import build_problem  # noqa: E402
from planner.mapping import cpsat, layouts  # noqa: E402
from planner.mapping.bruteforce import brute_force  # noqa: E402
from planner.mapping.cpsat import solve_exact  # noqa: E402
from planner.mapping.units import UNIT, rounding_slack  # noqa: E402
from planner.spec.plan import load_spec  # noqa: E402


def _tiny(rows_cols):
    from conftest import tiny_spec
    spec = tiny_spec(nodes=6, seed=2, gbs=96)
    cfg = ParallelConfig(4, 6, 2, 1, 48, "1f1b", 1, "selective")
    return next(lay for lay in layouts(4, 6, 2, 8) if (lay.rows, lay.cols) == rows_cols), spec, cfg


def _shipped(path, tp, pp, dp, mbs, rows_cols, sched="1f1b", vpp=1):
    spec = load_spec(os.path.join(ROOT, path))
    gbs = spec.training.global_batch_size
    cfg = ParallelConfig(tp, pp, dp, mbs, gbs // (dp * mbs), sched, vpp, "selective")
    lays = layouts(tp, pp, dp, spec.cluster.gpus_per_node)
    return next(lay for lay in lays if (lay.rows, lay.cols) == rows_cols), spec, cfg


CASES = {
    "tiny-6x1": lambda: _tiny((6, 1)),
    "tiny-3x2": lambda: _tiny((3, 2)),
    "l7het-8x1": lambda: _shipped("specs/llama2-7b-v100-het-128.yaml", 8, 8, 1, 1, (8, 1)),
    "l7het-4x4": lambda: _shipped("specs/llama2-7b-v100-het-128.yaml", 4, 8, 4, 1, (4, 4)),
    "l7het-8x2": lambda: _shipped("specs/llama2-7b-v100-het-128.yaml", 4, 8, 4, 1, (8, 2)),
    "g13het-4x4": lambda: _shipped("specs/gpt3-13b-a100-het-128.yaml", 8, 4, 4, 1, (4, 4)),
    # interleaved: a steep pace (Pace.steep), the drift spec's plan on the static het cluster
    "l7het-il-4x4": lambda: _shipped("specs/llama2-7b-v100-het-128.yaml", 4, 8, 4, 1, (4, 4), "interleaved", 4),
    "l7het-il-8x2": lambda: _shipped("specs/llama2-7b-v100-het-128.yaml", 4, 8, 4, 1, (8, 2), "interleaved", 4),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=20.0, help="seconds (wall and deterministic) per call")
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--no-pace", action="store_true", help="the same problems with their pace taken out (a baseline)")
    ap.add_argument("--with-core", action="store_true",
                    help="keep CP-SAT's core worker in the paced portfolio (cpsat.PACED_IGNORE = (): the old model)")
    args = ap.parse_args()
    if args.with_core:
        cpsat.PACED_IGNORE = ()
    for name in args.cases:
        lay, spec, cfg = CASES[name]()
        if lay.rows * lay.cols > spec.cluster.nodes:
            print(f"{name}: layout {lay} needs more nodes than the spec has")
            continue
        prob = build_problem(spec, cfg, lay)
        if args.no_pace:
            prob = dataclasses.replace(prob, pace=None)
        print(f"== {name}: {lay.rows}x{lay.cols} on {prob.n} nodes, pace {prob.pace is not None}")
        if prob.n <= 8:
            t = time.perf_counter()
            best, _ = brute_force([prob])
            print(f"  brute force {best:.9f} ({time.perf_counter() - t:.2f} s)")
            proved = True
        else:
            r = solve_exact(prob, time_limit_s=args.limit, hint=prob.rank_order())
            best, proved = r.objective, r.status == "OPTIMAL"
        margin = 2 * rounding_slack(lay.rows, True) * UNIT
        calls = [("no hint", {}), ("hint", {"hint": prob.rank_order()})]
        if proved:
            calls += [("cutoff=opt", {"hint": prob.rank_order(), "cutoff": best}),
                      ("cutoff=opt+", {"hint": prob.rank_order(), "cutoff": best + margin})]
        for label, kw in calls:
            r = solve_exact(prob, time_limit_s=args.limit, **kw)
            print(f"  {label:12s} {r.status:10s} wall {r.wall_s:6.2f} work {r.work_s:6.2f} obj {r.objective:.9f} "
                  f"bound {r.bound:.9f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
