"""What each recompute mode stores and costs on a shipped spec's plan: none, selective (Megatron-Core's core_attn),
mlp (its mlp module), block (--recompute-method block, at the N the search would choose: the fewest that fits,
screen.block_layers) and full, the rest of the plan held.

    python benchmarks/recompute_modes.py [--solutions solutions/a.yaml ...]

For each solution: per mode, one layer's stored activations (MiB, one micro-batch; block: the mean over the busiest
stage's layers), the peak stage memory (GiB), the
recompute share of the busiest stage's backward and the estimated iteration time on Megatron's rank-order placement
(not the solution's mapping), and whether the mode fits. The
plan's own mode is marked *. Model figures, not measurements: the memory counts are the ones the fake-tensor profiler
checks (tests/test_mlp_recompute.py), the times the compute model's.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from planner.config import RECOMPUTE, ParallelConfig  # noqa: E402
from planner.costs import default_costs  # noqa: E402
from planner.costs.context_parallel import shard_view  # noqa: E402
from planner.costs.iteration import build_problem, default_layout, evaluate, stage_times  # noqa: E402
from planner.costs.memory import stage_layer_count, stage_stored_bytes  # noqa: E402
from planner.errors import SpecError  # noqa: E402
from planner.search.screen import block_layers  # noqa: E402
from planner.search.solve import check_config  # noqa: E402
from planner.solution import load_solution, solution_spec_path  # noqa: E402
from planner.spec.plan import load_spec  # noqa: E402


def rows(path: str) -> list[str]:
    sol = load_solution(path)
    spec = load_spec(solution_spec_path(sol, path))
    base = ParallelConfig.from_dict(sol["config"], path)
    costs = default_costs(spec.cluster)
    out = [f"{os.path.basename(path)[:-5]}: {base.label()}"]
    for rc in RECOMPUTE:
        cfg = replace(base, recompute=rc, recompute_layers=None)
        try:
            check_config(spec, cfg, idle_ok=True)
        except SpecError as e:
            out.append(f"  {rc:10s} refused: {e}")
            continue
        name = rc
        if rc == "block":
            if base.recompute == "block":
                cfg = base
            else:
                # as screening: the spec's modes decide whether no recompute fitting drops block
                cfg = block_layers(replace(spec, search=replace(spec.search, recompute=("none", "block"))), cfg,
                                   costs)
            if cfg is None:
                out.append(f"  {rc:10s}  not searched: the plan fits without recompute (block would only add "
                           "time), or its chunks hold one layer")
                continue
            name = f"block N={cfg.recompute_layers}"
        prob = build_problem(spec, cfg, default_layout(cfg, spec.cluster.gpus_per_node), costs)
        est = evaluate(spec, cfg, prob, prob.rank_order(), costs)
        st = stage_times(spec, cfg, costs)
        k = max(range(len(st)), key=lambda i: st[i].forward + st[i].backward)
        tr_s, cfg_s = shard_view(spec.training, cfg)
        layer = stage_stored_bytes(spec.model, tr_s, cfg_s, k) / stage_layer_count(spec.model, cfg, k) / 2**20
        peak = max(m.total for m in est.memory) / 2**30
        fits = "fits" if peak <= est.memory_limit_GiB else "OVER"
        out.append(f"  {name:10s}{'*' if rc == base.recompute else ' '} layer {layer:9.1f} MiB  peak {peak:6.1f} GiB "
                   f"({fits})  recompute {st[k].recompute / max(st[k].backward, 1e-12):5.1%} of backward  "
                   f"iteration {est.iteration_s:9.3f} s")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solutions", nargs="*", default=None)
    args = ap.parse_args()
    paths = args.solutions or sorted(glob.glob(os.path.join(ROOT, "solutions", "*.yaml")))
    for p in paths:
        print("\n".join(rows(p)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
