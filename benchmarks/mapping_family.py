"""Mapping benchmark on issue #10's instance family: the portfolio (planner.mapping.solve), the project's
annealer and the Pipette-style annealer (anneal(style="pipette")) at equal time, with bounds and gaps.

The family (issue #10, "Why"): node grids R x C (N = R*C nodes, one block per node, no spare); every
directed link is 25 GB/s less U(0, 25%), np.random.default_rng(seed) drawing the N x N matrix first; then
N//5 node pairs chosen from the upper triangle are set to 7.5 GB/s both ways; pipeline hop cost =
0.05 GB / bw[n,q] + 0.05 GB / bw[q,n]; data-parallel ring link cost = 2(C-1)/C * 1 GB / bw; no compute
constant, no tied embedding.

Run:  python benchmarks/mapping_family.py [--grids 2x4 4x4 4x8 8x8 8x16] [--seeds 3 4 5] [--time-limit 10]
          [--pipette-time 10] [--anneal-time 10] [--iters-per-s N] [--portfolio-only] [--clusters a100-64x8-het:8x8 ...]
Figures are mapping objectives in ms (the constant is 0). "bound" is the best proven lower bound of the
three runs (the portfolio's CP-SAT bound, else MappingProblem.lower_bound); gap = (objective - bound) /
objective. Annealer and Pipette are wall-clock runs (their published form: run to the time limit); the
portfolio runs in work units (iterations, CP-SAT deterministic time) and reports which limit ended it, its wall
time (everything: model building, bounds, decomposition, anneal) and wall / limit - 1 ("over"; issue #10 asks
<= +5%). Tuning seeds of the portfolio's constants: 100, 101 and the issue's 0-2 (docs/notes/solver.md); report on
seeds 3-5 (not tuned on). --portfolio-only skips the baselines (the time-limit check alone).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from planner.mapping import MappingProblem, solve, work
from planner.mapping.anneal import anneal
from planner.mapping.problem import Layout

GB = 1e9
LINK_GBPS = 25.0           # every directed link: 25 GB/s less U(0, 25%)
SLOW_GBPS = 7.5            # N//5 pairs of the upper triangle, both directions
P2P_GB = 0.05              # pipeline activation per hop and direction
DP_GB = 1.0                # data-parallel gradient volume


def _costed(bw: np.ndarray, rows: int, cols: int) -> MappingProblem:
    """The mapping problem of an N x N bandwidth matrix (GB/s, row i sends to column j) on an R x C grid, one block per
    node: every family's costs (pipeline hop and data-parallel ring volumes above; no self-links)."""
    n = rows * cols
    bw = bw.astype(float).copy()
    np.fill_diagonal(bw, np.inf)
    bw_bps = bw * GB
    hop = P2P_GB * GB / bw_bps + P2P_GB * GB / bw_bps.T
    ring = 2.0 * (cols - 1) / cols * DP_GB * GB / bw_bps
    dp_link = np.broadcast_to(ring, (rows, n, n)).copy()
    return MappingProblem(Layout(1, 1, rows, cols), np.arange(n), hop, None, np.zeros(rows), dp_link, 0.0)


def family_problem(rows: int, cols: int, seed: int) -> MappingProblem:
    """One instance of the family (see the module docstring), costs in seconds."""
    n = rows * cols
    rng = np.random.default_rng(seed)
    bw = LINK_GBPS * (1.0 - rng.uniform(0.0, 0.25, size=(n, n)))      # the N x N matrix first
    iu = np.triu_indices(n, 1)
    pick = rng.choice(len(iu[0]), size=n // 5, replace=False)
    for k in pick:
        a, b = iu[0][k], iu[1][k]
        bw[a, b] = bw[b, a] = SLOW_GBPS
    return _costed(bw, rows, cols)


def cluster_problem(name: str, rows: int, cols: int) -> MappingProblem:
    """A second family with other link statistics (not tuned on): the shipped cluster's node-level matrix
    clusters/NAME.bandwidth.csv (GB/s, row i sends to column j), its first rows*cols nodes, costed as the family
    above (same hop and ring volumes)."""
    path = os.path.join(os.path.dirname(__file__), "..", "clusters", f"{name}.bandwidth.csv")
    n = rows * cols
    full = np.loadtxt(path, delimiter=",", comments="#")
    if full.shape[0] < n:
        raise SystemExit(f"{path}: {full.shape[0]} nodes, grid {rows}x{cols} needs {n}")
    bw = full[:n, :n].copy()
    return _costed(bw, rows, cols)


RACK = 8                   # nodes per rack (leaf switch)
RACK_GBPS = 50.0           # inside a rack: 50 GB/s less U(0, 10%)
SPINE_GBPS = 12.5          # between racks: 12.5 GB/s (4:1 oversubscribed) less U(0, 25%)
DEGRADED_GBPS = 5.0        # the links of one rack in five (its uplinks) degraded to this, both ways


def rack_problem(rows: int, cols: int, seed: int) -> MappingProblem:
    """A third family, built after the portfolio's constants were set and never tuned on (Nov 27): a two-tier
    network instead of the issue's near-uniform one. Nodes in racks of RACK behind an oversubscribed spine; one rack
    in five has degraded uplinks. np.random.default_rng(seed) draws the N x N factors, then the degraded racks;
    costed as the other families (same hop and ring volumes)."""
    n = rows * cols
    rng = np.random.default_rng(seed)
    u = rng.uniform(0.0, 1.0, size=(n, n))
    rack = np.arange(n) // RACK
    same = rack[:, None] == rack[None, :]
    bw = np.where(same, RACK_GBPS * (1.0 - 0.10 * u), SPINE_GBPS * (1.0 - 0.25 * u))
    racks = int(rack.max()) + 1
    for r in rng.choice(racks, size=max(1, racks // 5), replace=False):
        out = (rack == r)[:, None] & ~same
        bw[out | out.T] = DEGRADED_GBPS
    return _costed(bw, rows, cols)


POD_RACK = 4               # nodes per rack
POD_RACKS = 4              # racks per pod (16 nodes)
POD_GBPS = (50.0, 25.0, 6.25)       # in a rack, across racks in a pod, across pods; each less U(0, 10 / 20 / 25%)
POD_NIC_GBPS = 3.0         # one node in eight has a degraded NIC: every link of it out of its rack, both ways


def pod_problem(rows: int, cols: int, seed: int) -> MappingProblem:
    """A fourth family, three tiers, written after the row-order pass and the coupled bound were designed (on the
    rack family's seeds 0-2) and never tuned on (Nov 27): racks of POD_RACK nodes in pods of POD_RACKS racks, and
    single nodes with degraded NICs instead of a degraded rack. np.random.default_rng(seed) draws the N x N factors,
    then the degraded nodes; costed as the other families."""
    n = rows * cols
    rng = np.random.default_rng(seed)
    u = rng.uniform(0.0, 1.0, size=(n, n))
    rack, pod = np.arange(n) // POD_RACK, np.arange(n) // (POD_RACK * POD_RACKS)
    same_rack = rack[:, None] == rack[None, :]
    same_pod = pod[:, None] == pod[None, :]
    bw = np.where(same_rack, POD_GBPS[0] * (1 - 0.10 * u),
                  np.where(same_pod, POD_GBPS[1] * (1 - 0.20 * u), POD_GBPS[2] * (1 - 0.25 * u)))
    for v in rng.choice(n, size=max(1, n // 8), replace=False):
        out = np.zeros((n, n), dtype=bool)
        out[v] = ~same_rack[v]
        bw[out | out.T] = POD_NIC_GBPS
    return _costed(bw, rows, cols)


def parse_grid(s: str) -> tuple[int, int]:
    r, c = s.lower().split("x")
    return int(r), int(c)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grids", nargs="+", default=["4x4", "4x8", "8x8", "8x16"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 5])
    ap.add_argument("--portfolio-only", action="store_true", help="only the portfolio: objective, bound, wall")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--pipette-time", type=float, default=None, help="Pipette's limit (default: --time-limit)")
    ap.add_argument("--anneal-time", type=float, default=None,
                    help="anneal~'s wall clock (default: --time-limit); 2x the limit stands for a machine twice as "
                         "fast, on which the portfolio's work budget ends the same search in half the time")
    ap.add_argument("--iters-per-s", type=int, default=None,
                    help="calibration study: annealer iterations per second of the limit (work.ANNEAL_ITERS_PER_S "
                         "/ work.WORK_PER_S) for this run")
    ap.add_argument("--family", choices=("issue", "rack", "pod"), default="issue",
                    help="issue: issue #10's family (tuned on seeds 0-2, 100, 101, 30-61); rack: two-tier racks behind "
                         "an oversubscribed spine (rack_problem; the row-order pass and the coupled bound were designed "
                         "on its seeds 0-2); pod: three tiers, degraded NICs (pod_problem; never tuned on)")
    ap.add_argument("--clusters", nargs="+", default=None, metavar="NAME:RxC",
                    help="instead of the random family: shipped cluster matrices, e.g. a100-64x8-het:8x8 "
                         "(the seed column is then 0)")
    args = ap.parse_args()
    if args.iters_per_s:
        work.ANNEAL_ITERS_PER_S = args.iters_per_s / work.WORK_PER_S
    per_s = int(work.ANNEAL_ITERS_PER_S * work.WORK_PER_S)
    T = args.time_limit
    tp = args.pipette_time or T
    ta = args.anneal_time or T
    print(f"# {'issue #10' if args.family == 'issue' else args.family} family, limit {T:g} s (anneal~ {ta:g} s, Pipette {tp:g} s), portfolio at {per_s} "
          "iterations/s; mapping objective in ms; "
          "gap vs the best bound; 'anneal=' the annealer on the portfolio's iteration budget, "
          "'anneal~' the annealer run to the wall clock (cooling='time')")
    if args.portfolio_only:
        print(f"{'grid':>5} {'seed':>4} {'portfolio':>10} {'stop':>5} {'work s':>6} {'wall s':>6} {'over':>6} "
              f"{'bound':>9} {'gap P':>6}")
    else:
        print(f"{'grid':>5} {'seed':>4} {'portfolio':>10} {'stop':>5} {'wall s':>6} {'anneal=':>9} {'anneal~':>9} "
              f"{'pipette':>9} {'bound':>9} {'gap P':>6} {'gap A=':>6} {'gap A~':>6} {'gap pip':>7} {'P vs A~':>8} "
              f"{'P vs pip':>8}")
    if args.clusters:
        cases = [(c.split(":")[1], 0, c.split(":")[0]) for c in args.clusters]
    else:
        cases = [(g, seed, None) for g in args.grids for seed in args.seeds]
    for g, seed, cluster in cases:
        R, C = parse_grid(g)
        t = time.perf_counter()
        # building the instance counts too
        if cluster:
            p = cluster_problem(cluster, R, C)
        else:
            p = {"rack": rack_problem, "pod": pod_problem, "issue": family_problem}[args.family](R, C, seed)
        if cluster:
            g = f"{cluster}:{g}"
        port = solve(p, time_limit_s=T, seed=0)
        wall = time.perf_counter() - t
        if args.portfolio_only:
            bound = max(port.bound, p.lower_bound())
            print(f"{g:>5} {seed:>4} {port.objective * 1e3:>10.3f} {port.stopped_by:>5} {port.work_s:>6.2f} "
                  f"{wall:>6.2f} {wall / T - 1:>+6.1%} {bound * 1e3:>9.3f} "
                  f"{(port.objective - bound) / port.objective:>6.2%}", flush=True)
            continue
        same = solve(p, time_limit_s=T, seed=0, method="anneal")
        timed = anneal(p, seed=0, time_limit_s=ta, init=p.rank_order(), iterations=10 ** 9, cooling="time")
        pip = anneal(p, seed=0, style="pipette", time_limit_s=tp, init=p.rank_order())
        bound = max(port.bound, p.lower_bound())
        v = [port.objective, same.objective, timed.objective, pip.objective]
        gaps = [(x - bound) / x for x in v]
        print(f"{g:>5} {seed:>4} {v[0] * 1e3:>10.3f} {port.stopped_by:>5} {wall:>6.1f} {v[1] * 1e3:>9.3f} "
              f"{v[2] * 1e3:>9.3f} {v[3] * 1e3:>9.3f} {bound * 1e3:>9.3f} {gaps[0]:>6.2%} {gaps[1]:>6.2%} "
              f"{gaps[2]:>6.2%} {gaps[3]:>7.2%} {v[0] / v[2] - 1:>+8.2%} {v[0] / v[3] - 1:>+8.2%}", flush=True)


if __name__ == "__main__":
    main()
