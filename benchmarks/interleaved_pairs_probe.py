"""Interleaved, one stage a node: the mapping objective's per-boundary form against the walk on random hops.

    python benchmarks/interleaved_pairs_probe.py [--draws 500] [--seed 1]

Each draw: p 4 / 8, v 2 / 4, m = p, 2p or 4p, chunk forwards ~1 (backward 2x), blocking p2p or not, a typical hop c0 of
0.2 / 1 / 3 forwards and every boundary (the wrap included) c0 x lognormal(0, 0.25), half the draws one boundary 1.5-3x
more. "max": iteration.walked_problem_parts as interleaved_problem_parts calls it (levelled), scored by Pace.costs on
the column. "with pairs": the same plus, where m >= 2p, each device's two boundaries' steep parts added less their
common value at the typical hop (U_(d-1) + U_d - max S(typical)), the form tried on commit 0df787d and reverted (the fuzz
of valid plans failed two cases with it). Prints, per p2p mode and m / p, the error percentiles (min / p5 / median /
p95 / max) against interleaved_time, of the makespan and of the exposed p2p (docs/notes/simulator.md, "Interleaved
under one slow boundary")."""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from interleaved_het_cases import draw_chunks  # noqa: E402

from planner.costs import iteration as it  # noqa: E402
from planner.costs import pipeline as pl  # noqa: E402
from planner.mapping.problem import Layout  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    rows: dict = {}
    for _ in range(args.draws):
        p, v, m, blocking, fc, bc, c0, h = draw_chunks(rng, [4, 8])
        if rng.random() < 0.5:
            h[rng.integers(p)] *= rng.uniform(1.5, 3)

        def walk(hh, fc=fc, bc=bc, m=m, blocking=blocking):
            return pl.interleaved_time(fc, bc, m, hh, blocking)
        zero = walk(0.0)
        c = np.full((p, p), c0)         # node j on row j: boundary j is the pair (j, j + 1), the wrap (p - 1, 0)
        np.fill_diagonal(c, 0.0)
        for j in range(p):
            c[j, (j + 1) % p] = c[(j + 1) % p, j] = h[j]
        hop, wrap, pace, const = it.walked_problem_parts(walk, p, Layout(1, 1, p, 1), c, c0, 0.0, True, 4.0 * m * v,
                                                         True, level=True)
        a = np.arange(p)[:, None]
        lin = hop[a[:-1, 0], a[1:, 0]].sum() + wrap[p - 1, 0]
        nop = const + lin + float(pace.costs(a)[0])
        u = [float(np.max(pc[:, 0] * h[r] + pc[:, 1])) for r, pc in enumerate(pace.steep)]
        at = max(float(np.max(pc[:, 0] * c0 + pc[:, 1])) for pc in pace.steep)     # levelled: every U_r's
        form = nop if m < 2 * p else const + lin + max(max(u), max(u[d - 1] + u[d] - at for d in range(p)))
        w = walk(list(h)) - zero
        tot = zero + w
        key = f"{'blocking' if blocking else 'overlap'} m/p={m // p}"
        rows.setdefault(key, []).append(((nop - w) / tot, (form - w) / tot, (nop - w) / w, (form - w) / w))
    for k, r in sorted(rows.items()):
        r = np.array(r) * 100

        def q(x):
            return " / ".join(f"{v:+.2f}" for v in np.percentile(x, [0, 5, 50, 95, 100]))
        print(f"{k} n={len(r)}: % of the makespan: max {q(r[:, 0])} | with pairs {q(r[:, 1])}")
        print(f"{'':{len(k)}}        % of the exposed p2p: max {q(r[:, 2])} | with pairs {q(r[:, 3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
