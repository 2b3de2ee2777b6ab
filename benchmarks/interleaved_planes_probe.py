"""Interleaved, one stage a node: a device's two boundaries' joint curve as supporting planes, measured before any
solver carries it.

    python benchmarks/interleaved_planes_probe.py [--cases 8/521 8/471 10/380 1/79 2/309] [--draws 300] [--seed 1]

The mapping objective's form for interleaved (iteration.walked_problem_parts, levelled) is const + sum_j L_j h_j +
max_j U_j(h_j), one curve per boundary (j = p - 1: the wrap) with the others at the typical hop. With one stage a
node, device d touches boundaries d - 1 and d (device 0: the wrap and boundary 0), and when both are slow their rises
add in part, which the max does not say (docs/notes/simulator.md, "Interleaved under one slow boundary"). The design
measured here: per device its joint curve E_d(x, y) (its two boundaries at x, y, the others typical) is convex (the
walk is a max-plus path length), so a plane through one of its linear pieces, alpha x + beta y + gamma, is under it
everywhere; planes taken at a grid of points (x, y in --grid x the typical hop, iteration.PLANE_GRID by default, and
the slowest hop where past it) enter the pace's max, less the linear part the form already charges: the build's own
iteration.pair_planes (a piece's gradient from forward differences at a point moved off the grid point, 3 walks a
point).

Per fuzz case (seed/i of benchmarks/fuzz_plans.py): the estimate's slowest column, its mapped hops (the mean of both
directions, as the objective), the walk's exposed hops against the levelled form and the form with the planes: the
pair alone at its true hops (the others typical) and all true; and the estimate moved by the planes' change against
the replay. Then random hops (benchmarks/interleaved_pairs_probe.py's draws, p 16 added): the error of both forms
against the walk, % of the makespan, where the other boundaries are not typical, and the planes checked under each
device's joint curve at random points (the others typical)."""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from interleaved_het_cases import draw_chunks, fuzz_case  # noqa: E402

from planner.costs import iteration as it  # noqa: E402
from planner.costs import pipeline as pl  # noqa: E402
from planner.mapping.problem import Layout  # noqa: E402

GRID = it.PLANE_GRID


class Form:
    """The levelled per-boundary form of a column of p boundaries (the wrap last), and optionally each device's
    planes, on a walk of per-boundary hops."""

    def __init__(self, walk, p: int, typ: float, hi: float, grid=GRID, planes: bool = True):
        self.walk, self.p, self.typ, self.hi = walk, p, typ, hi
        cc = np.full((p, p), typ)
        np.fill_diagonal(cc, 0.0)
        cc[0, 1] = cc[1, 0] = hi
        hop, wrap, pace, const = it.walked_problem_parts(walk, p, Layout(1, 1, p, 1), cc, typ, 0.0, True,
                                                         4.0 * 8 * p, True, level=True)
        self.zero = walk(0.0)
        self.L = np.array([hop[0, 1] / hi] * (p - 1) + [wrap[0, 1] / hi])
        self.const = const
        self.steep = pace.steep
        self.walks = 0
        self.planes = [self._planes(d, grid) for d in range(p)] if planes else None

    def E(self, h) -> float:
        self.walks += 1
        return self.walk(list(h)) - self.zero

    def _planes(self, d: int, grid) -> np.ndarray:
        """Device d's planes in the pace's terms: rows (alpha', beta', gamma') on (h_(d-1), h_d), as the build takes
        them (iteration.pair_planes, its PLANE_GRID set to `grid`)."""
        p, typ = self.p, self.typ
        j1, j2 = (d - 1) % p, d

        def exposed2(x, y):
            h = [typ] * p
            h[j1], h[j2] = x, y
            return self.E(h)
        at_cs = self.E([typ] * p)
        at_typ = float(np.max(self.steep[0][:, 0] * typ + self.steep[0][:, 1]))     # levelled: every U_j's
        saved, it.PLANE_GRID = it.PLANE_GRID, tuple(grid)
        try:
            return it.pair_planes(exposed2, typ, self.L[j1], self.L[j2], at_cs, at_typ, self.hi)
        finally:
            it.PLANE_GRID = saved

    def pace_max(self, h) -> float:
        return max(float(np.max(pc[:, 0] * h[r] + pc[:, 1])) for r, pc in enumerate(self.steep))

    def pace_planes(self, h) -> float:
        p = self.p
        return max(float(np.max(pl_[:, 0] * h[(d - 1) % p] + pl_[:, 1] * h[d] + pl_[:, 2]))
                   for d, pl_ in enumerate(self.planes))

    def levelled(self, h) -> float:
        return self.const + float(np.dot(self.L, h)) + self.pace_max(h)

    def with_planes(self, h) -> float:
        return self.const + float(np.dot(self.L, h)) + max(self.pace_max(h), self.pace_planes(h))


def case(seed: int, i: int, grid=GRID) -> None:
    k = fuzz_case(seed, i)
    cfg, est, lay, assign, prob, sim = k.cfg, k.est, k.lay, k.assign, k.prob, k.sim
    fc, bc, m, p, blocking, ow, typ = k.fc, k.bc, k.m, k.p, k.blocking, k.ow, k.typ
    if lay.a != 1:
        print(f"== seed {seed} case {i}: a = {lay.a}, not one stage a node")
        return
    cols = prob.path_costs(assign)
    col = int(np.argmax(cols))
    nodes = assign[:, col]
    h = [(ow[nodes[j], nodes[(j + 1) % p]] + ow[nodes[(j + 1) % p], nodes[j]]) / 2 for j in range(p)]
    fin = ow[np.isfinite(ow)]

    def walk(hh):
        return pl.interleaved_time(fc, bc, m, hh, blocking)
    t0 = time.perf_counter()
    F = Form(walk, p, typ, float(fin.max()), grid)
    dt = time.perf_counter() - t0
    print(f"== seed {seed} case {i}: {cfg.label()} blocking {blocking}, typical hop {typ:.4f} s; planes: "
          f"{F.walks} walks, {dt:.1f} s")
    T = [typ] * p
    top = [int(j) for j in np.argsort(h)[::-1][:2]]
    for name, hh in (("all typical", T), (f"boundaries {top[0]}, {top[1]} at true",
                                          [h[k] if k in top else typ for k in range(p)]), ("all true", h)):
        w = F.E(hh)
        lv, wp = F.levelled(hh), F.with_planes(hh)
        print(f"   {name:28s} walk {w:9.4f}  levelled {lv:9.4f} ({lv - w:+.4f})  planes {wp:9.4f} ({wp - w:+.4f})")
    # the estimate (its build carries the planes) against the replay, and without the planes' rise on this column
    # (the objective's max over columns: the others' paths rise at most as much, so this is what it was at least)
    rise = F.with_planes(h) - F.levelled(h)
    old = est.iteration_s - rise
    print(f"   replay {sim.iteration_s:.4f} s; estimate without the planes {old:.4f} ({old / sim.iteration_s - 1:+.2%}), "
          f"with {est.iteration_s:.4f} ({est.iteration_s / sim.iteration_s - 1:+.2%}; column {col} +{rise:.4f} s)")


def probe(draws: int, seed: int, grid) -> None:
    rng = np.random.default_rng(seed)
    rows: dict = {}
    worst_under_curve = 0.0
    nwalks = []
    for _ in range(draws):
        p, v, m, blocking, fc, bc, c0, h = draw_chunks(rng, [4, 8, 16])
        mode = rng.random()
        if mode < 0.3:
            h[rng.integers(p)] *= rng.uniform(1.5, 3)
        elif mode < 0.6:            # one device's two boundaries both slow
            d = int(rng.integers(p))
            h[(d - 1) % p] *= rng.uniform(1.3, 3)
            h[d] *= rng.uniform(1.3, 3)

        def walk(hh, fc=fc, bc=bc, m=m, blocking=blocking):
            return pl.interleaved_time(fc, bc, m, hh, blocking)
        F = Form(walk, p, c0, float(np.max(h)) * 1.2, grid)
        nwalks.append(F.walks)
        # the planes under each device's joint curve (the others typical), at random points
        for _ in range(3):
            d = int(rng.integers(p))
            x, y = rng.uniform(0, 4 * c0, 2)
            hh = [c0] * p
            hh[(d - 1) % p], hh[d] = x, y
            w = F.E(hh)
            own = F.const + float(np.dot(F.L, hh)) + float(np.max(F.planes[d] @ [hh[(d - 1) % p], hh[d], 1.0]))
            worst_under_curve = max(worst_under_curve, (own - w) / (F.zero + w))
        w = F.E(h)
        tot = F.zero + w
        key = f"{'blocking' if blocking else 'overlap '} m/p={m // p}"
        lv, wp = F.levelled(h), F.with_planes(h)
        rows.setdefault(key, []).append(((lv - w) / tot, (wp - w) / tot, max(0.0, wp - max(w, lv)) / tot))
    for k, r in sorted(rows.items()):
        r = np.array(r) * 100

        def q(x):
            return " / ".join(f"{v:+.2f}" for v in np.percentile(x, [0, 5, 50, 95, 100]))
        print(f"{k} n={len(r):3d}: % of the makespan, min / p5 / median / p95 / max: levelled {q(r[:, 0])} | "
              f"planes {q(r[:, 1])}; planes over both the walk and levelled: p95 {np.percentile(r[:, 2], 95):.2f}, "
              f"max {r[:, 2].max():.2f}")
    print(f"a device's planes over its joint curve (the others typical), worst: {worst_under_curve * 100:+.2e}% of the "
          f"makespan (must be ~0); walks a form: mean {np.mean(nwalks):.0f}, max {max(nwalks)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=["8/521", "8/471", "10/380", "1/79", "2/309"])
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--grid", type=float, nargs="*", default=list(GRID))
    args = ap.parse_args()
    for c in args.cases:
        s, i = c.split("/")
        case(int(s), int(i), tuple(args.grid))
    if args.draws:
        probe(args.draws, args.seed, tuple(args.grid))
    return 0


if __name__ == "__main__":
    sys.exit(main())
