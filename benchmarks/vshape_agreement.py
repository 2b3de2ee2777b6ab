"""Estimate (the closed form `planner estimate` prints) against the op-level simulation on V-shape plans, with 1F1B and
interleaved as the reference (docs/notes/simulator.md, "V-shapes: the data-parallel term and a sweep").

The grid: every shipped spec (specs/*.yaml) x schedule x pp {2, 4, 8} x tp {1, 2, 4, 8} (dp = the rest of the
cluster) x mbs {1, 2, 4} x recompute none / selective / full x ZeRO 0 / 1 x the spec's overlap (--overlap-grad-reduce
and --overlap-param-gather as it states them) or both off; the plans Megatron-Core / the planner refuse are left out,
and a deterministic sample of the rest (random.Random(SEED)) is run, memory fit not required (this is about time).
Prints estimate, simulation and the gap (estimate / simulation - 1) per plan, then the worst cases per schedule.

    python benchmarks/vshape_agreement.py            # a sample of 6000 plans, about 40 s on one core
    python benchmarks/vshape_agreement.py --plans 0  # the whole grid (slow)
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from planner.config import ParallelConfig
from planner.errors import SpecError
from planner.search.solve import check_config, estimate_plan
from planner.simulator.replay import simulate
from planner.spec.plan import load_spec

SCHEDULES = (("1f1b", 1), ("interleaved", 2), ("v-min", 2), ("v-half", 2), ("v-zb", 2))
PPS = (2, 4, 8)
TPS = (1, 2, 4, 8)
MBS = (1, 2, 4)
RECOMPUTE = ("none", "selective", "full")
ZERO = (0, 1)
SEED = 0
MAX_MICROBATCHES = 512        # a plan with more is slow to replay; left out of the grid
ROOT = os.path.join(os.path.dirname(__file__), "..")


@dataclasses.dataclass(frozen=True)
class Row:
    spec: str
    label: str
    overlap: str
    schedule: str
    m_per_pp: float               # micro-batches per stage: the ramps are fitted, m < 4 pp is their weak range
    estimate_s: float
    simulated_s: float

    @property
    def gap(self) -> float:
        return self.estimate_s / self.simulated_s - 1.0


def without_dp_overlap(spec):
    """The spec with --overlap-grad-reduce and --overlap-param-gather off (the other overlaps as it states them)."""
    ov = dataclasses.replace(spec.training.overlap, grad_reduce=False, param_gather=False)
    return dataclasses.replace(spec, training=dataclasses.replace(spec.training, overlap=ov))


def grid(specs: dict) -> list[tuple]:
    """(spec name, overlap variant, ParallelConfig) of every plan the planner accepts, in a fixed order."""
    out = []
    for name, spec in specs.items():
        n = spec.cluster.num_gpus
        gbs = spec.training.global_batch_size
        variants = ["spec"] + (["dp-off"] if spec.training.overlap.grad_reduce else [])
        for sched, vpp in SCHEDULES:
            for pp in PPS:
                for tp in TPS:
                    if n % (tp * pp):
                        continue
                    dp = n // (tp * pp)
                    for mbs in MBS:
                        if gbs % (dp * mbs) or gbs // (dp * mbs) > MAX_MICROBATCHES:
                            continue
                        m = gbs // (dp * mbs)
                        for rc in RECOMPUTE:
                            for z in ZERO:
                                cfg = ParallelConfig(tp, pp, dp, mbs, m, sched, vpp, rc, z, tp > 1)
                                try:
                                    check_config(spec, cfg)
                                except (SpecError, ValueError):
                                    continue
                                if m < pp:       # fewer micro-batches than stages: no schedule runs it
                                    continue
                                out.extend((name, v, cfg) for v in variants)
    return out


def run(plans: int, seed: int = SEED, files: list[str] | None = None) -> list[Row]:
    files = files or sorted(glob.glob(os.path.join(ROOT, "specs", "*.yaml")))
    specs = {os.path.basename(f)[:-5]: load_spec(f) for f in files}
    full = grid(specs)
    pick = full if plans <= 0 or plans >= len(full) else random.Random(seed).sample(full, plans)
    rows = []
    for name, variant, cfg in sorted(pick, key=lambda x: (x[0], x[2].label(), x[1])):
        spec = specs[name] if variant == "spec" else without_dp_overlap(specs[name])
        try:
            est = estimate_plan(spec, cfg)[0]
            sim = simulate(spec, cfg)
        except (SpecError, ValueError):
            continue       # the simulator refuses it (e.g. layers that do not split into the chunks)
        rows.append(Row(name, cfg.label(), variant, cfg.schedule, cfg.num_microbatches / cfg.pp, est.iteration_s,
                        sim.iteration_s))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plans", type=int, default=6000, help="sampled plans (0: the whole grid)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--worst", type=int, default=5, help="worst cases shown per schedule")
    ap.add_argument("--quiet", action="store_true", help="summary only")
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = run(a.plans, a.seed)
    if not a.quiet:
        print(f"{'spec':28s} {'plan':48s} {'dp overlap':10s} {'estimate s':>11s} {'simulated s':>11s} {'gap':>7s}")
        for r in rows:
            print(f"{r.spec:28s} {r.label:48s} {r.overlap:10s} {r.estimate_s:11.4f} {r.simulated_s:11.4f} "
                  f"{100 * r.gap:+6.2f}%")
    print(f"\n{len(rows)} plans in {time.perf_counter() - t0:.0f} s; gap = estimate / simulation - 1")
    for regime, keep in (("m >= 4 pp", lambda r: r.m_per_pp >= 4), ("m < 4 pp", lambda r: r.m_per_pp < 4)):
        print(f"\n{regime}:")
        for sched, _ in SCHEDULES:
            sel = [r for r in rows if r.schedule == sched and keep(r)]
            if not sel:
                continue
            gaps = sorted(abs(r.gap) for r in sel)
            over5 = sum(g > 0.05 for g in gaps)
            print(f"{sched:12s} {len(sel):5d} plans  median |gap| {100 * gaps[len(gaps) // 2]:5.2f}%  "
                  f"min {100 * min(r.gap for r in sel):+6.2f}%  max {100 * max(r.gap for r in sel):+6.2f}%  "
                  f"|gap| > 5%: {over5}")
            for r in sorted(sel, key=lambda r: -abs(r.gap))[:a.worst]:
                print(f"    {100 * r.gap:+6.2f}%  {r.spec} {r.label} ({r.overlap})")

if __name__ == "__main__":
    main()
