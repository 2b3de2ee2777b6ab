"""Simulation vs closed-form estimate vs measurement on vTrain's multi-node A100 runs (1F1B, fp16,
full recompute, Megatron-DeepSpeed). Both use exactly what `planner validate` uses: the cluster file
clusters/vtrain-a100-64x8-hdr.yaml (measured HDR bandwidth matrix), the shipped A100 compute profile,
Megatron's rank order on the first nodes. So the difference between the two is the schedule model.

    python benchmarks/sim_vs_vtrain.py [path/to/measured_multi_node.csv] [--pipeline-engine deepspeed|megatron]
                                       [--blocking-p2p | --rendezvous-p2p] [--compute-profile P.json]

The runs used Megatron-DeepSpeed's GPTModelPipe, i.e. DeepSpeed's pipeline engine (default here, as in
`planner validate`); `--pipeline-engine megatron` scores both models as if Megatron-LM's schedule had run them,
where `--blocking-p2p` / `--rendezvous-p2p` are the simulator's older variants of Megatron's p2p.

Per group (same model on the same GPUs): Spearman with the measurements and the regret of each
model's pick (measured time of the config it ranks first / the best measured - 1), as `planner validate`.
"""
from __future__ import annotations

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from planner.costs import default_costs  # noqa: E402
from planner.costs.iteration import build_problem, default_layout, evaluate  # noqa: E402
from planner.profile.validate import read_vtrain_csv, row_cluster, row_spec, unsupported_reason  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.spec import load_cluster  # noqa: E402

DATA = os.path.join(ROOT, "..", "shared", "data", "vtrain-a100", "measured_multi_node.csv")
if not os.path.exists(DATA):
    DATA = os.path.join(ROOT, "planner", "data", "vtrain", "measured_multi_node.csv")
CLUSTER = os.path.join(ROOT, "clusters", "vtrain-a100-64x8-hdr.yaml")


def compare(path: str = DATA, blocking_p2p: bool = False, compute_profile: str | None = None,
            rendezvous_p2p: bool = False, pipeline_engine: str = "deepspeed") -> list[tuple]:
    """(model, config label, measured s, simulated s, estimated s) for every row both models can express."""
    cl = load_cluster(CLUSTER)
    if compute_profile:
        from planner.costs import costs_with_compute
        from planner.costs.compute import load_profile
        costs = costs_with_compute(load_profile(compute_profile))
    else:
        costs = default_costs(cl)
    out = []
    for r in read_vtrain_csv(path):
        why = unsupported_reason(r, cl)
        if why:
            print(f"skip {r.label()}: {why}", file=sys.stderr)
            continue
        spec, cfg = row_spec(r, row_cluster(r, cl), {"pipeline_engine": pipeline_engine})
        sim = simulate(spec, cfg, costs=costs, blocking_p2p=blocking_p2p, rendezvous_p2p=rendezvous_p2p)
        prob = build_problem(spec, cfg, default_layout(cfg, spec.cluster.gpus_per_node), costs)
        est = evaluate(spec, cfg, prob, prob.rank_order(), costs)
        out.append((f"{r.params_B:g}", r.label(), r.measured_s, sim.iteration_s, est.iteration_s))
    return out


def main(argv: list[str]) -> None:
    blocking = "--blocking-p2p" in argv
    prof = None
    if "--compute-profile" in argv:
        i = argv.index("--compute-profile")
        prof = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    engine = "deepspeed"
    if "--pipeline-engine" in argv:
        i = argv.index("--pipeline-engine")
        engine = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    args = [a for a in argv if not a.startswith("--")]
    rendezvous = "--rendezvous-p2p" in argv
    out = compare(*(args[:1] or [DATA]), blocking_p2p=blocking, compute_profile=prof, rendezvous_p2p=rendezvous,
                  pipeline_engine=engine)
    print(f"{'model':>6s} {'config':24s} {'meas s':>8s} {'sim s':>8s} {'est s':>8s} {'sim err':>8s} {'est err':>8s}")
    for name, lab, meas, s, e in out:
        print(f"{name:>6s} {lab:24s} {meas:8.2f} {s:8.2f} {e:8.2f} {100 * (s - meas) / meas:+7.1f}% "
              f"{100 * (e - meas) / meas:+7.1f}%")
    a = np.array([(m_, s, e) for _, _, m_, s, e in out])
    se, ee = np.abs(a[:, 1] - a[:, 0]) / a[:, 0], np.abs(a[:, 2] - a[:, 0]) / a[:, 0]
    print(f"\n{len(out)} rows, {engine} engine{' (blocking p2p)' if blocking else ''}{' (rendezvous p2p)' if rendezvous else ''}: MAPE simulation {100 * se.mean():.2f}%, "
          f"closed form {100 * ee.mean():.2f}%; simulation closer on {int(np.sum(se < ee))} rows, "
          f"estimate closer on {int(np.sum(ee < se))}")
    from scipy.stats import spearmanr
    for name in sorted({o[0] for o in out}, key=float):
        g = np.array([(m_, s, e) for n, _, m_, s, e in out if n == name])
        if len(g) >= 3:
            reg = [g[int(np.argmin(g[:, k])), 0] / g[:, 0].min() - 1 for k in (1, 2)]
            print(f"{name}B ({len(g)} configs): Spearman vs measured: simulation "
                  f"{spearmanr(g[:, 0], g[:, 1])[0]:+.3f}, estimate {spearmanr(g[:, 0], g[:, 2])[0]:+.3f}; "
                  f"regret of the pick: simulation {100 * reg[0]:.2f}%, estimate {100 * reg[1]:.2f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
