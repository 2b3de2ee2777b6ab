"""The fuzz of valid plans' interleaved cases on heterogeneous links: replay, estimate and the walk on the true hops.

    python benchmarks/interleaved_het_cases.py [--cases 8/521 8/471 10/380]

Per case (seed/i of benchmarks/fuzz_plans.py) and its slowest column: the replay (simulate on the estimate's
placement), the estimate, and interleaved_time on the column's mapped per-boundary hops (the mean of both directions,
as the objective takes them; and each direction its own, a walk of the same order with one hop slot per direction).
Then the column's exposed hops split: the walk and the objective's form (const + linear part + the levelled steep
max, iteration.walked_problem_parts) with every boundary at the typical hop, one boundary at its true hop, the two
slowest together, and all true: where the form leaves the walk (docs/notes/simulator.md, "Interleaved under one slow
boundary")."""
from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import fuzz_plans as fz  # noqa: E402

from planner.config import ParallelConfig  # noqa: E402
from planner.costs import default_costs  # noqa: E402
from planner.costs import iteration as it  # noqa: E402
from planner.costs import pipeline as pl  # noqa: E402
from planner.mapping.problem import Layout  # noqa: E402
from planner.search.solve import estimate_plan  # noqa: E402
from planner.simulator import simulate  # noqa: E402


def directed_walk(fc, bc, m: int, cf, cb, blocking: bool) -> float:
    """pipeline._interleaved_ends with a forward hop cf[j] and a backward hop cb[j] per boundary (j = p - 1: the wrap)."""
    p, v = len(fc), len(fc[0])
    prev, dep, lat, dur, out, _, _ = pl._interleaved_dag(p, m, v)
    kind = (np.asarray(dur) >= p * v).astype(int)         # backward ops' time slots follow the forwards'
    hops = np.array(list(cf) + [0.0] + list(cb) + [0.0])
    lat, out = np.asarray(lat), np.asarray(out)
    lat2 = np.where(lat == p, p, lat + kind * (p + 1))     # a forward's data came forward, a backward's backward
    out2 = np.where(out == p, p, out + kind * (p + 1))
    times = np.concatenate([np.ravel(fc), np.ravel(bc)])[dur]
    waits = np.zeros(len(prev)) if blocking else hops[lat2]
    if blocking:
        times = times + hops[out2]
    e = [0.0]
    for a, b, w, t in zip(prev, dep, waits.tolist(), times.tolist(), strict=True):
        e.append(max(e[a], e[b] + w) + t)
    return max(e)


def draw_chunks(rng: np.random.Generator, ps) -> tuple:
    """One random interleaved column for the probes (interleaved_pairs_probe, interleaved_planes_probe): p from ps,
    v 2 / 4, m = p, 2p or 4p, blocking p2p or not, chunk forwards ~1 (backward 2x), a typical hop c0 of 0.2 / 1 / 3
    forwards and every boundary (the wrap included) c0 x lognormal(0, 0.25). Returns (p, v, m, blocking, fc, bc, c0,
    h); each probe then slows its own boundaries."""
    p, v = int(rng.choice(ps)), int(rng.choice([2, 4]))
    m = p * int(rng.choice([1, 2, 4]))
    blocking = bool(rng.integers(2))
    fc = rng.uniform(0.9, 1.1, (p, v))
    c0 = float(rng.choice([0.2, 1.0, 3.0]))
    return p, v, m, blocking, fc, 2 * fc, c0, c0 * np.exp(rng.normal(0, 0.25, p))


def fuzz_case(seed: int, i: int) -> SimpleNamespace:
    """Fuzz case seed/i (benchmarks/fuzz_plans.py) as these scripts read it: the spec and plan, the estimate (est, lay,
    assign, prob) and the replay on its placement (sim), the chunk times (fc, bc), m, p, blocking, the one-way
    inter-node hops between the plan's nodes (ow) and NVLink's (intra), and the typical hop (typ)."""
    c = fz.draw(seed, i)
    spec = fz._spec(c["data"], c["spec"])
    cfg = ParallelConfig.from_dict(c["cfg"], None, "config")
    costs = default_costs(spec.cluster)
    est, lay, assign, prob = estimate_plan(spec, cfg, costs=costs)
    sim = simulate(spec, cfg, costs=costs, layout=lay, assign=assign, nodes=prob.nodes)
    fc, bc = it.interleaved_chunk_times(spec, cfg, it.stage_times(spec, cfg, costs))
    B = spec.cluster.bandwidth[np.ix_(prob.nodes, prob.nodes)]
    with np.errstate(divide="ignore"):
        ow = it.p2p_inter_s(spec, it.p2p_message_bytes(spec, cfg), np.where(B > 0, B, np.inf), costs,
                            it.p2p_share(spec, cfg, lay.b))
    intra = it.p2p_intra_s(spec, it.p2p_message_bytes(spec, cfg), costs)
    return SimpleNamespace(spec=spec, cfg=cfg, est=est, lay=lay, assign=assign, prob=prob, sim=sim, fc=fc, bc=bc,
                           m=cfg.num_microbatches, p=cfg.pp, blocking=it.p2p_blocking(spec, cfg), ow=ow, intra=intra,
                           typ=it.typical_inter_hop(ow, intra))


def one(seed: int, i: int) -> None:
    k = fuzz_case(seed, i)
    cfg, est, lay, assign, prob, sim = k.cfg, k.est, k.lay, k.assign, k.prob, k.sim
    fc, bc, m, p, blocking, ow, intra, typ = k.fc, k.bc, k.m, k.p, k.blocking, k.ow, k.intra, k.typ
    col = int(np.argmax(prob.path_costs(assign)))
    nodes = assign[:, col]
    cf, cb = [], []
    for j in range(p):
        r0, r1 = j // lay.a, ((j + 1) % p) // lay.a
        cf.append(intra if r0 == r1 else ow[nodes[r0], nodes[r1]])
        cb.append(intra if r0 == r1 else ow[nodes[r1], nodes[r0]])
    h = [(x + y) / 2 for x, y in zip(cf, cb, strict=True)]

    def walk(hh):
        return pl.interleaved_time(fc, bc, m, hh, blocking)
    zero = walk(0.0)
    print(f"== seed {seed} case {i}: {cfg.label()} blocking p2p {blocking}, layout {lay.label()} x {lay.rows} rows, "
          f"typical hop {typ:.4f} s, chunk forward {float(np.min(fc)):.4f}-{float(np.max(fc)):.4f} s")
    print(f"   estimate {est.iteration_s:.4f} s, replay {sim.iteration_s:.4f} s ({est.iteration_s / sim.iteration_s - 1:+.2%});"
          f" column {col}'s exposed hops: walk (mean of directions) {walk(h) - zero:.4f} s, walk (each direction) "
          f"{directed_walk(fc, bc, m, cf, cb, blocking) - zero:.4f} s")
    # the form on a column of virtual nodes (row r on node r), so any hop vector can be scored
    if lay.a != 1:
        print("   (a > 1: the split below is for one stage a node)")
        return
    cc = np.full((p, p), typ)
    np.fill_diagonal(cc, 0.0)
    cc[0, 1] = cc[1, 0] = float(np.max(np.where(np.isfinite(ow), ow, 0.0)))
    hop, wrap, pace, const = it.walked_problem_parts(walk, p, Layout(1, 1, p, 1), cc, typ, intra, True,
                                                     4.0 * m * len(fc[0]), True, level=True)
    lrow, lw = hop[0, 1] / cc[0, 1], wrap[0, 1] / cc[0, 1]

    def form(hh):
        return const + lrow * sum(hh[:p - 1]) + lw * hh[p - 1] + max(
            float(np.max(pc[:, 0] * hh[r] + pc[:, 1])) for r, pc in enumerate(pace.steep))

    def show(name, hh):
        w, f = walk(hh) - zero, form(hh)
        print(f"   {name:30s} walk {w:9.4f}  form {f:9.4f} ({f - w:+.4f} s)")
    T = [typ] * p
    top = [int(j) for j in np.argsort(h)[::-1][:2]]
    show("all typical", T)
    for j in top:
        show(f"boundary {j} alone ({h[j] / typ:.2f} typical)", [h[j] if k == j else typ for k in range(p)])
    show(f"boundaries {top[0]} and {top[1]}", [h[k] if k in top else typ for k in range(p)])
    show("all true", h)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=["8/521", "8/471", "10/380"])
    for c in ap.parse_args().cases:
        s, i = c.split("/")
        one(int(s), int(i))
    return 0


if __name__ == "__main__":
    sys.exit(main())
