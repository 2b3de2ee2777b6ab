"""planner simulate SPEC|SOLUTION: replay one plan's pipeline schedule op by op.

    planner simulate specs/x.yaml --tp 8 --pp 4 --dp 4 --mbs 1 --schedule 1f1b [--plot t.png] [--trace t.json]
    planner simulate solutions/x.yaml            # the config and mapping the solver wrote
"""
from __future__ import annotations

import os
import sys

from planner.cli.common import add_config_args, config_from_args, spec_arg, with_engine
from planner.config import ParallelConfig, interleaved_p2p_problem
from planner.errors import SpecError
from planner.io import load_yaml


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate one plan op by op (iteration time, bubbles, memory per GPU)")
    p.add_argument("path", metavar="SPEC|SOLUTION", help="plan spec YAML (with config flags) or a solution YAML")
    add_config_args(p, required=False)
    p.add_argument("--recompute-in-bubbles", action="store_true",
                   help="run recomputation early, in pipeline bubbles (Mario), instead of when the gradient arrives")
    p.add_argument("--overlap-dp", action="store_true",
                   help="all-reduce each chunk's gradients as soon as they are done")
    p2p = p.add_mutually_exclusive_group()
    p2p.add_argument("--blocking-p2p", action="store_true",
                     help="hold the sending GPU for each p2p transfer (the default for interleaved without "
                          "overlap_p2p_comm; 1F1B runs Megatron-Core's waited send/receive calls by default)")
    p2p.add_argument("--async-p2p", action="store_true",
                     help="let every p2p send overlap the sender's next op (no waiting on sends)")
    p2p.add_argument("--rendezvous-p2p", action="store_true",
                     help="hold both the sending and the receiving GPU for each p2p transfer "
                          "(separate blocking send/recv)")
    p.add_argument("--plot", metavar="PNG", default=None, help="write the timeline + memory picture")
    p.add_argument("--trace", metavar="JSON", default=None, help="write a Chrome / Perfetto trace")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def _config_from_flags(args, spec) -> ParallelConfig:
    """The flags' config, checked against the spec as `estimate` checks it (GPU count, heads, layers, batch, cp,
    tiling). A solution file's own config is not: a replanned one leaves excluded nodes out."""
    from planner.search.solve import check_config
    cfg = config_from_args(args, spec)
    check_config(spec, cfg)
    return cfg


def load_target(args):
    """(spec, config, mapping or None) from a spec + flags or from a solution file."""
    path = args.path
    if not os.path.exists(path):
        raise SpecError(path, None, "file does not exist")
    raw = load_yaml(path, finite=False)    # a spec is loaded again, strictly, by spec_arg
    given = [f for f in ("tp", "pp", "dp", "mbs") if getattr(args, f) is not None]
    flags = bool(given)
    if flags and len(given) < 4:
        missing = [f"--{f}" for f in ("tp", "pp", "dp", "mbs") if f not in given]
        raise SpecError(None, ", ".join(missing), "a configuration from flags needs all of --tp --pp --dp --mbs "
                                                  "(without them a solution file's own configuration is simulated)")
    if isinstance(raw, dict) and "config" in raw and "spec" in raw:       # a solution
        from planner.solution import solution_spec_path
        spec = spec_arg(solution_spec_path(raw, path))
        if flags:
            return spec, _config_from_flags(args, spec), None
        mapping = raw.get("mapping")
        if mapping is not None and not (isinstance(mapping, list) and all(isinstance(w, dict) for w in mapping)):
            raise SpecError(path, "mapping", "must be a list of {stage, tp_rank, dp_rank, node, gpu}")
        cfg = ParallelConfig.from_dict(raw.get("config"), path)
        # the search's rule (a hand-edited file may break it); check_config's others are not applied: a re-plan's
        # config leaves excluded nodes out
        why = interleaved_p2p_problem(spec.training, cfg.schedule, cfg.pp)
        if why:
            raise SpecError(path, "config.pp", why + f" ({spec.source} sets training.overlap.p2p false)")
        return spec, cfg, mapping
    spec = spec_arg(path)
    if not flags:
        raise SpecError(path, None, "a plan spec needs a configuration to simulate: give --tp --pp --dp --mbs "
                                    "(and --schedule ...), or pass a solution file")
    return spec, _config_from_flags(args, spec), None


def run(args) -> int:
    from planner.io import print_json
    from planner.simulator import agreement, simulate

    spec, cfg, mapping = load_target(args)
    if args.plot or args.trace:     # before the simulation: neither may overwrite a file it reads, nor each other
        from planner.inputs import plan_inputs
        from planner.io import check_outs
        check_outs({"--plot": args.plot, "--trace": args.trace}, plan_inputs(args.path))
    spec = with_engine(args, spec, cfg)
    try:
        sim = simulate(spec, cfg, mapping, recompute_in_bubbles=args.recompute_in_bubbles,
                       overlap_dp=args.overlap_dp, blocking_p2p=args.blocking_p2p,
                       rendezvous_p2p=args.rendezvous_p2p, async_p2p=args.async_p2p)
    except (ValueError, KeyError) as e:
        raise SpecError(args.path, "config" if mapping is None else "mapping", str(e)) from None
    est = _estimate(spec, cfg, mapping)
    out = sim.as_dict()
    if est is not None:
        out["estimate_iteration_s"] = est
        out["agreement"] = agreement(sim, est)
    if args.plot:
        from planner.simulator.plot import plot_timeline
        plot_timeline(sim, args.plot)
        out["plot"] = args.plot
    if args.trace:
        from planner.simulator.trace import write_trace
        write_trace(sim, args.trace)
        out["trace"] = args.trace
    if args.json:
        print_json(out)
    else:
        _print_human(sim, cfg, est)
    return 0


def _estimate(spec, cfg, mapping=None):
    """The closed-form estimate of the same plan (same mapping), for the agreement line (None if unavailable)."""
    try:
        if mapping is not None:
            from planner.search.solve import estimate_plan
            return float(estimate_plan(spec, cfg, mapping)[0].iteration_s)
        from planner.costs.iteration import build_problem, default_layout, evaluate
        layout = default_layout(cfg, spec.cluster.gpus_per_node)
        prob = build_problem(spec, cfg, layout)
        return float(evaluate(spec, cfg, prob, prob.rank_order()).iteration_s)
    except Exception:   # the estimate is a courtesy here; the simulation stands on its own
        return None


def _print_human(sim, cfg, est) -> None:
    w = sys.stderr.write
    w(f"{cfg.label()}\n")
    # ZeRO-3: FSDP2's exposed collectives and copies lengthen each micro-batch's F and B ops (pp = 1), so they are
    # inside the pipeline time; only the once-per-iteration part (pp > 1) comes after it
    from planner.simulator.ops import dp_sync_name
    dp = ("FSDP after the pipeline (per-micro-batch FSDP time is inside it)" if cfg.zero == 3
          else f"DP {dp_sync_name(cfg.zero)}")
    # the transfer time, not the span of its trace events (overlapped buckets wait for their gradients) nor the
    # part past the pipeline, which is what the iteration pays (with the optimizer step)
    past = max(0.0, sim.iteration_s - sim.compute_s)
    w(f"  iteration    {sim.iteration_s * 1e3:10.2f} ms  (pipeline {sim.compute_s * 1e3:.2f} ms, "
      f"{dp} {sim.dp_comm_s * 1e3:.2f} ms of transfers; {past * 1e3:.2f} ms after the pipeline ends, "
      "optimizer step included)\n")
    w(f"  bubble       {sim.bubble_fraction:10.1%}\n")
    if est is not None:
        rel = 100 * (est - sim.iteration_s) / sim.iteration_s
        w(f"  estimate     {est * 1e3:10.2f} ms  (closed form, {rel:+.1f}%)\n")
    w(f"  ops          {sim.num_ops:10d}  over {sim.pipelines} distinct pipeline(s)\n")
    w("  rank  peak GiB  static  activations  in-flight  busy %\n")
    for d in range(sim.schedule.p):
        w(f"  {d:4d}  {sim.peak_memory_GiB[d]:8.2f}  {sim.static_memory_GiB[d]:6.2f}  "
          f"{sim.activation_peak_GiB[d]:11.2f}  {sim.inflight[d]:9.2f}  {100 * sim.busy_s[d] / sim.iteration_s:6.1f}\n")
