"""How Megatron-Core interleaved's exposed p2p time depends on heterogeneous hops: pieces and candidate forms.

    python benchmarks/interleaved_hops_probe.py [--c0 0.2] [--draws 300] [--seed 0]

The exposed p2p time is the walk's (pipeline.interleaved_time, equal to the replay's pipeline makespan) with hops c
(one per boundary, c[p-1] the wrap p-1 -> 0) less the walk without hops, in units of one chunk forward (F : B = 1 : 2).

Table 1 (one slow boundary j, every other at the typical c0): the curve in c_j on a grid (step 0.05 up to 8), split
into its affine pieces (slope, intercept; pieces seen on a single grid step are kinks and dropped), `max_err` the
largest gap of the max of the pieces to the walk over the grid (exactness of the pieces), `convex` whether no slope
falls. Slopes are per unit of c_j over the whole iteration (m micro-batches).

Table 2 (two slow boundaries, random draws): each candidate form's error against the walk, in % of the exposed time:
  shipped   the mapping's charge today: traversals at the typical hop (iteration.typical_hop_traversals, per
            boundary + wrap) x the sum of the hops: ex(c0 everywhere) * sum(c) / (p c0)
  sum+max   base + sum_j L_j (c_j - c0) + max_j b_j(c_j): L_j the first piece's slope of j's curve, b_j(x) =
            f_j(x) - f_j(c0) - L_j (x - c0) >= 0 its bottleneck part (exact for one slow boundary by construction)
  max       base + max_j (f_j(c_j) - base)  (the slow boundaries never add)
split by whether the two slow boundaries share a device (adjacent, the wrap and boundary 0 included) or not.

Table 3: the same two forms in the drift spec's regime (table3's docstring). docs/notes/simulator.md, "Interleaved on
heterogeneous links (branch `ipace`)".
"""
import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.costs.pipeline import interleaved_time

GRID = np.round(np.arange(0.0, 8.0 + 1e-9, 0.05), 10)


def exposed(fc, bc, m, cs, blocking):
    return interleaved_time(fc, bc, m, cs, blocking) - interleaved_time(fc, bc, m, 0.0, blocking)


def stages(p, v, kind):
    """Chunk forward / backward times (p, v): uniform, or a heavier first device (embedding, 1.15x) and last (loss
    head, 1.3x)."""
    scale = [1.0] * p
    if kind == "uneven":
        scale[0], scale[-1] = 1.15, 1.3
    return [[s] * v for s in scale], [[2.0 * s] * v for s in scale]


def curve(fc, bc, m, blocking, j, c0, xs=GRID):
    p = len(fc)
    out = []
    for x in xs:
        cs = [c0] * p
        cs[j] = float(x)
        out.append(exposed(fc, bc, m, cs, blocking))
    return np.array(out)


def pieces(xs, ys, tol=1e-6):
    """The affine pieces of a sampled piecewise-linear curve: runs of >= 2 grid steps of one slope."""
    s = np.diff(ys) / np.diff(xs)
    out, start = [], 0
    for k in range(1, len(s) + 1):
        if k == len(s) or abs(s[k] - s[start]) > tol * max(1.0, abs(s[start])):
            if k - start >= 2:
                out.append((float(s[start]), float(ys[start] - s[start] * xs[start])))
            start = k
    return out, bool(np.all(np.diff(s) >= -1e-6 * np.maximum(1.0, np.abs(s[:-1]))))


def table1(c0):
    print(f"# Table 1: one slow boundary (others c0 = {c0}); pieces (slope, intercept), first = its linear part L_j")
    print("| blk | stages | p | v | m | j | pieces (slope @ intercept) | knee c_j | max_err | convex |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fits = {}
    for blocking, kind, p, v in itertools.product((False, True), ("uniform", "uneven"), (2, 4, 8), (2, 4)):
        fc, bc = stages(p, v, kind)
        for m in (p, 2 * p, 4 * p):
            for j in range(p):
                ys = curve(fc, bc, m, blocking, j, c0)
                pc, convex = pieces(GRID, ys)
                fit = np.max([[a * x + b for a, b in pc] for x in GRID], axis=1)
                err = float(np.max(np.abs(fit - ys)))
                knee = (pc[1][1] - pc[0][1]) / (pc[0][0] - pc[1][0]) if len(pc) > 1 else float("nan")
                fits[(blocking, kind, p, v, m, j)] = ys
                name = "wrap" if j == p - 1 else str(j)
                txt = ", ".join(f"{a:.2f} @ {b:+.2f}" for a, b in pc)
                print(f"| {'B' if blocking else 'N'} | {kind} | {p} | {v} | {m} | {name} | {txt} | {knee:.2f} | "
                      f"{err:.3g} | {convex} |")
    return fits


def interp(ys, x):
    return float(np.interp(x, GRID, ys))


def table2(fits, c0, draws, seed):
    rng = np.random.default_rng(seed)
    rows, worst = {}, {}
    for _ in range(draws):
        blocking = bool(rng.integers(2))
        kind = ("uniform", "uneven")[rng.integers(2)]
        p = int(rng.choice([4, 8]))
        v = int(rng.choice([2, 4]))
        m = p * int(rng.choice([1, 2, 4]))
        i, j = sorted(rng.choice(p, 2, replace=False).tolist())
        adjacent = j - i == 1 or (i == 0 and j == p - 1)
        fc, bc = stages(p, v, kind)
        cs = [c0] * p
        cs[i], cs[j] = (float(np.exp(rng.uniform(np.log(c0), np.log(8.0)))) for _ in range(2))
        walk = exposed(fc, bc, m, cs, blocking)
        yi, yj = fits[(blocking, kind, p, v, m, i)], fits[(blocking, kind, p, v, m, j)]
        base = interp(yi, c0)
        shipped = base * sum(cs) / (p * c0)
        lin = []
        for y, x in ((yi, cs[i]), (yj, cs[j])):
            L = (interp(y, c0 + 0.05) - interp(y, c0)) / 0.05
            lin.append((L * (x - c0), interp(y, x) - base - L * (x - c0)))
        summax = base + lin[0][0] + lin[1][0] + max(lin[0][1], lin[1][1])
        pure = base + max(interp(yi, cs[i]), interp(yj, cs[j])) - base
        key = ("B" if blocking else "N", "adjacent" if adjacent else "apart")
        rows.setdefault(key, []).append([100 * (f / walk - 1) for f in (shipped, summax, pure)])
        case = f"p{p} v{v} m{m} {kind} c[{i}]={cs[i]:.2f} c[{j}]={cs[j]:.2f}: walk {walk:.1f}"
        if rows[key][-1][1] <= min(r[1] for r in rows[key]):
            worst[key] = case
    print(f"\n# Table 2: two slow boundaries ({draws} draws, seed {seed}; hops log-uniform c0..8, p 4/8, v 2/4, "
          "m p/2p/4p, uniform/uneven): error vs the walk, % (min / median / max)")
    print("| blk | pair | n | shipped | sum+max | max | sum+max's lowest |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(rows):
        a = np.array(rows[key])
        cells = [f"{a[:, k].min():+.1f} / {np.median(a[:, k]):+.1f} / {a[:, k].max():+.1f}" for k in range(3)]
        print(f"| {key[0]} | {key[1]} | {len(a)} | " + " | ".join(cells) + f" | {worst[key]} |")


def table3(draws=40, seed=1):
    """The drift spec's plan (tp4 pp8 dp4 m64 v4, overlap_p2p_comm, specs/llama2-7b-v100-het-drift-128.yaml): chunk
    F : B = 8.08 : 13.78 ms, one-way hop / F: NVLink 0.009, network median 1.13 (p90 ~1.9, slowest 4.6-14 across the
    5 snapshots); two stages a node: network at boundaries 1, 3, 5 and the wrap. Draws: network hops log-normal
    around 1.13 (sigma 0.25), every second draw one of them 4-14."""
    p, v, m, c_typ = 8, 4, 64, 1.13
    fc, bc = [[1.0] * v for _ in range(p)], [[13.78 / 8.08] * v for _ in range(p)]
    net = [1, 3, 5, 7]
    typ = [c_typ if j in net else 0.009 for j in range(p)]
    xs = np.round(np.arange(0.0, 15.0 + 1e-9, 0.05), 10)
    cur = {}
    for j in net:
        ys = []
        for x in xs:
            cs = list(typ)
            cs[j] = float(x)
            ys.append(exposed(fc, bc, m, cs, False))
        cur[j] = np.array(ys)
    print("\n# Table 3: the drift plan's regime (p8 v4 m64, F:B 1:1.71, network hops at 1, 3, 5, wrap; typical 1.13 F)")
    for j in net:
        print(f"boundary {'wrap' if j == p - 1 else j}: pieces " +
              ", ".join(f"{a:.1f} @ {b:+.1f}" for a, b in pieces(xs, cur[j])[0]))
    base = exposed(fc, bc, m, typ, False)
    rng = np.random.default_rng(seed)
    errs = []
    for d in range(draws):
        cs = list(typ)
        for j in net:
            cs[j] = float(np.exp(rng.normal(np.log(c_typ), 0.25)))
        if d % 2:
            cs[net[rng.integers(len(net))]] = float(rng.uniform(4.0, 14.0))
        walk = exposed(fc, bc, m, cs, False)
        shipped = base * sum(cs) / sum(typ)
        L = {j: (np.interp(c_typ + 0.05, xs, cur[j]) - np.interp(c_typ, xs, cur[j])) / 0.05 for j in net}
        lin = {j: L[j] * (cs[j] - c_typ) for j in net}
        bot = {j: float(np.interp(cs[j], xs, cur[j])) - base - lin[j] for j in net}
        summax = base + sum(lin.values()) + max(bot.values())
        errs.append((100 * (shipped / walk - 1), 100 * (summax / walk - 1)))
    e = np.array(errs)
    print(f"{draws} draws (seed {seed}), error of the exposed p2p time vs the walk, % min / median / max: "
          f"shipped {e[:, 0].min():+.1f} / {np.median(e[:, 0]):+.1f} / {e[:, 0].max():+.1f}, "
          f"sum+max {e[:, 1].min():+.1f} / {np.median(e[:, 1]):+.1f} / {e[:, 1].max():+.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--c0", type=float, default=0.2, help="typical hop, in chunk forwards")
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    fits = table1(a.c0)
    table2(fits, a.c0, a.draws, a.seed)
    table3()


if __name__ == "__main__":
    main()
