"""Megatron-Core 1F1B's waited p2p with one stage a node: three ways of charging a column's mapped hops, each against
the lock step walked on those hops (lockstep.lock_step_time, exact against the replay):

  closed   pipeline.lock_step_p2p_s, what the mapping objective charges today (iteration.lock_step_problem_parts);
  walked   each boundary's walked curve with the others at a typical hop, levelled (walked_problem_parts, the form
           two or more stages a node get: iteration.lock_step_walk_parts);
  planes   walked, plus each interior stage's two boundaries as planes under their joint curve (pair_planes, the
           form interleaved gets with one stage a node), on the row's two hops.

Random draws (seeded): pp 3-16 (`--pp`), m pp..4 pp, uniform stages with a heavier first (half the draws, up to 1.4x) and last
(70%, up to 1.6x) stage, backward 2x forward; hops a ratio of a stage's F + B, each x U(0.75, 1.25), one boundary
x 1.5-3 in half the draws, two adjacent ones x 2 in 30%. `--typ`: the typical hop the walked forms take, as a
quantile of the column's own hops (0: its fastest; 0.5: its median), times `--typ-scale` (below 1: a typical hop
under every mapped one, as the fastest of all candidate links can be). Prints the error of (compute + p2p) per ratio.
Nothing is fitted. docs/notes/simulator.md, "One stage a node: the lock step's closed form against walked forms"."""
import argparse

import numpy as np

from planner.costs.iteration import walked_problem_parts
from planner.costs.lockstep import lock_step_time
from planner.costs.pipeline import lock_step_p2p_s
from planner.mapping.problem import Layout

RATIOS = (1 / 150, 1 / 30, 1 / 10, 1 / 3)


def walked(f, b, m: int, c, typ: float, planes: bool) -> float:
    """The walked form's exposed p2p on the path 0 -> 1 -> ... -> pp - 1 with hops c (one column, one stage a row),
    built as build_problem builds it (walked_problem_parts, with or without the interior rows' planes)."""
    p = len(f)
    C = np.full((p, p), typ)
    np.fill_diagonal(C, 0.0)
    for j in range(p - 1):
        C[j, j + 1] = C[j + 1, j] = c[j]
    hop, _, pace, const = walked_problem_parts(lambda h: lock_step_time(tuple(f), tuple(b), m, h), p,
                                               Layout(1, 1, p, 1), C, typ, 0.0, False, 2.0 * m, level=True,
                                               drop_flat=True, planes=planes)
    val = const + sum(hop[j, j + 1] for j in range(p - 1))
    return val + (float(pace.costs(np.arange(p).reshape(p, 1))[0]) if pace is not None else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=120)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--typ", type=float, default=0.5, help="quantile of the column's hops (0: fastest, 0.5: median)")
    ap.add_argument("--typ-scale", type=float, default=1.0)
    ap.add_argument("--pp", type=int, nargs=2, default=(3, 16), metavar=("LO", "HI"),
                    help="pipeline depths drawn, inclusive")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"# {args.draws} draws a ratio, seed {args.seed}, pp {args.pp[0]}-{args.pp[1]}, typical hop = "
          f"{args.typ_scale:g} x quantile {args.typ:g} of the column's hops; error of compute + p2p against the walk")
    for ratio in RATIOS:
        err = {"closed": [], "walked": [], "planes": []}
        for _ in range(args.draws):
            p, = rng.integers(args.pp[0], args.pp[1] + 1, 1)
            p = int(p)
            m = int(rng.integers(p, 4 * p + 1))
            f = np.full(p, 1.0)
            if rng.random() < 0.5:
                f[0] *= rng.uniform(1.0, 1.4)
            if rng.random() < 0.7:
                f[-1] *= rng.uniform(1.0, 1.6)
            b = 2.0 * f
            c = ratio * 3.0 * rng.uniform(0.75, 1.25, p - 1)
            if rng.random() < 0.5:
                c[rng.integers(p - 1)] *= rng.uniform(1.5, 3.0)
            if rng.random() < 0.3:
                j = rng.integers(p - 2)
                c[j:j + 2] *= 2.0
            typ = float(np.quantile(c, args.typ)) * args.typ_scale
            zero = lock_step_time(tuple(f), tuple(b), m, 0.0)
            exact = lock_step_time(tuple(f), tuple(b), m, tuple(c))
            err["closed"].append((zero + lock_step_p2p_s(list(f + b), list(c), m)) / exact - 1)
            err["walked"].append((zero + walked(f, b, m, c, typ, False)) / exact - 1)
            err["planes"].append((zero + walked(f, b, m, c, typ, True)) / exact - 1)
        for k, e in err.items():
            q = np.percentile(e, [0, 5, 50, 95, 100])
            print(f"hop {ratio:.4f} of F+B  {k:<7} min {q[0]:+.2%} p5 {q[1]:+.2%} median {q[2]:+.2%} "
                  f"p95 {q[3]:+.2%} max {q[4]:+.2%}")


if __name__ == "__main__":
    main()
