"""planner size: the largest Chinchilla-optimal model trainable within a GPU-day budget (achieved throughput)."""
from __future__ import annotations

import os
import sys

from planner.cli.common import finite_float
from planner.errors import SpecError
from planner.io import print_json

PRECISIONS = ("bf16", "fp16", "fp32", "fp8")     # planner.spec.plan.PRECISIONS (`--help` imports no spec package)


def register(sub) -> None:
    p = sub.add_parser("size", help="largest compute-optimal (Chinchilla) model for a GPU-day budget on a cluster")
    p.add_argument("--cluster", required=True, help="cluster YAML (clusters/...)")
    p.add_argument("--gpus", type=int, default=None, help="GPUs to use (whole nodes; default: the whole cluster)")
    p.add_argument("--budget-gpu-days", type=finite_float, required=True, help="compute budget in GPU-days")
    p.add_argument("--family", choices=("gpt", "llama"), default="gpt", help="model family of the sizes (default gpt)")
    p.add_argument("--vocab-size", type=int, default=50257, help="vocabulary (default 50257, GPT-2's)")
    p.add_argument("--kv-heads", type=int, default=0,
                   help="llama: grouped-query attention's key / value heads (0: as many as query heads; Llama 3: 8)")
    p.add_argument("--ffn-multiplier", type=finite_float, default=1.0,
                   help="llama: MLP width int(m x int(8h/3)) rounded up to --ffn-multiple (Llama 3: 1.3 and 1024)")
    p.add_argument("--ffn-multiple", type=int, default=256, help="llama: the MLP width's rounding (default 256)")
    p.add_argument("--global-batch-size", type=int, default=1024, help="sequences per step (default 1024)")
    p.add_argument("--seq-length", type=int, default=2048, help="tokens per sequence (default 2048)")
    p.add_argument("--precision", choices=PRECISIONS, default="bf16",
                   help="fp8: Transformer Engine FP8 as `solve` plans it (GPUs with FP8 tensor cores: H100, H200, ...)")
    p.add_argument("--schedules", default="1f1b,interleaved", help="comma-separated schedules to search")
    p.add_argument("--time-limit", type=finite_float, default=5.0, help="solver seconds per candidate size")
    p.add_argument("--price", type=finite_float, default=None, help="dollars per GPU-hour (default: the cluster's)")
    p.add_argument("--plot", default=None, metavar="PNG", help="draw GPU-days vs size of the solved sizes here")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from planner.batch.sizing import optimal_size
    from planner.batch.sweep import subset_cluster
    from planner.config import SCHEDULES
    from planner.costs.iteration import precision_mfu_note
    from planner.errors import InfeasibleError
    from planner.spec import load_cluster
    from planner.spec.plan import SearchSpec, SolverSpec, TrainingSpec

    if not os.path.exists(args.cluster):
        raise SpecError(None, "--cluster", f"file {args.cluster} does not exist")
    for flag in ("budget_gpu_days", "time_limit"):
        if getattr(args, flag) <= 0:
            raise SpecError(None, "--" + flag.replace("_", "-"), "must be positive")
    for flag in ("global_batch_size", "seq_length", "vocab_size"):
        if getattr(args, flag) < 1:
            raise SpecError(None, "--" + flag.replace("_", "-"), "must be a positive integer")
    from planner.batch.sweep import FFN_MULTIPLIER_RANGE, ShapeRule
    if args.family == "gpt" and (args.kv_heads or args.ffn_multiplier != 1.0 or args.ffn_multiple != 256):
        raise SpecError(None, "--family", "gpt: --kv-heads / --ffn-multiplier / --ffn-multiple shape llama blocks "
                        "(a gpt block has multi-head attention and a 4h MLP); give --family llama")
    lo, hi = FFN_MULTIPLIER_RANGE
    if not lo <= args.ffn_multiplier <= hi:
        raise SpecError(None, "--ffn-multiplier", f"must be between {lo:g} and {hi:g} (a sweep's shape_rule's range)")
    if args.ffn_multiple < 1:
        raise SpecError(None, "--ffn-multiple", "must be a positive integer")
    try:
        rule = ShapeRule(kv_heads=args.kv_heads, ffn_multiplier=args.ffn_multiplier, ffn_multiple=args.ffn_multiple)
    except ValueError as e:
        raise SpecError(None, "--kv-heads", str(e)) from None
    cl = load_cluster(args.cluster)
    from planner.spec.cluster import bf16_refusal, fp8_refusal
    why = {"fp8": fp8_refusal, "bf16": bf16_refusal}.get(args.precision, lambda gpu: None)(cl.gpu)
    if why:                         # the plan spec's rule (Spec), said before any solve, naming the flag
        raise SpecError(None, "--precision", f"{args.precision}: {why}")
    if args.plot:                   # before the solves: not over the cluster file or the data it names
        from planner.inputs import cluster_inputs
        from planner.io import check_out
        check_out(args.plot, "--plot", cluster_inputs(args.cluster))
    gpus = cl.num_gpus if args.gpus is None else args.gpus      # 0 is a mistake, not "the whole cluster"
    if gpus > cl.num_gpus:
        raise SpecError(None, "--gpus", f"{gpus} is more than {cl.name}'s {cl.num_gpus} GPUs ({cl.nodes} nodes of "
                                        f"{cl.gpus_per_node})")
    if gpus < 1 or gpus % cl.gpus_per_node:
        raise SpecError(None, "--gpus", f"{gpus} is not a whole number of {cl.name}'s nodes "
                                        f"({cl.gpus_per_node} GPUs each, {cl.nodes} nodes)")
    schedules = tuple(s.strip() for s in args.schedules.split(",") if s.strip())
    bad = [s for s in schedules if s not in SCHEDULES]
    if bad or not schedules:
        raise SpecError(None, "--schedules", f"unknown {bad}; choose from {list(SCHEDULES)}")
    if args.price is not None and args.price < 0:
        raise SpecError(None, "--price", f"dollars per GPU-hour must be >= 0, got {args.price:g}")
    price = args.price if args.price is not None else cl.price_per_gpu_hour_usd
    training = TrainingSpec(global_batch_size=args.global_batch_size, seq_length=args.seq_length,
                            precision=args.precision)

    def progress(p):
        if not args.json:
            gd = f"{_days(p.gpu_days)} GPU-days" if p.gpu_days is not None else "no plan fits"
            print(f"  {p.model:>12} ({p.params / 1e9:.2f}B): {p.status:<10} {gd}", file=sys.stderr)

    res = optimal_size(subset_cluster(cl, gpus), gpus, args.budget_gpu_days, training,
                       SearchSpec(schedules=schedules), SolverSpec(time_limit_s=args.time_limit), args.family,
                       args.vocab_size, rule, args.time_limit, price, progress=progress)
    d = res.as_dict()
    if args.plot:
        from planner.batch.plots import plot_sizing
        d["plot"] = plot_sizing(d, args.plot)
    if args.json:
        print_json(d)
    else:
        from rich.table import Table

        from planner.report import console
        con = console()
        t = Table(title=f"sizes solved on {cl.name}, {gpus} GPUs, budget {_days(args.budget_gpu_days)} GPU-days")
        for c in ("model", "params", "layers x hidden", "status", "tokens/s", "MFU", "GPU-days (20 tok/param)", "fits"):
            t.add_column(c)
        if precision_mfu_note(args.precision):
            t.caption = f"MFU{precision_mfu_note(args.precision)} (fp8)"
        for p in d["points"]:
            t.add_row(p["model"], f"{p['params'] / 1e9:.2f}B", f"{p['num_layers']} x {p['hidden_size']}", p["status"],
                      f"{p['tokens_per_s']:,.0f}" if p["tokens_per_s"] else "", f"{p['mfu']:.1%}" if p["mfu"] else "",
                      _days(p["gpu_days"]) if p["gpu_days"] else "", "yes" if p["within_budget"] else "no")
        con.print(t)
        b = d["best"]
        if b:
            cost = f", ${b['cost_usd']:,.0f}" if b["cost_usd"] is not None else ""
            con.print(f"largest compute-optimal model: {b['model']} ({b['params'] / 1e9:.2f}B parameters, "
                      f"{b['num_layers']} layers x {b['hidden_size']} hidden) on {b['tokens'] / 1e9:,.0f}B tokens: "
                      f"{_days(b['gpu_days'])} GPU-days, {b['train_days']:.1f} days on {gpus} GPUs{cost}; "
                      f"plan {b['config']} at {b['tokens_per_s']:,.0f} tokens/s (MFU {b['mfu']:.1%}"
                      f"{precision_mfu_note(args.precision)}); "
                      f"{d['solves']} sizes solved in {d['wall_s']:.1f} s")
            if d["limited_by"] == "memory":
                nxt = min((p for p in d["points"] if p["params"] > b["params"]), key=lambda p: p["params"])
                con.print(f"memory caps the size, not the budget: the next size solved, {nxt['model']}, has no plan "
                          f"that fits {gpus} GPUs of {cl.gpu.memory_GiB:g} GiB; the answer uses "
                          f"{100 * b['gpu_days'] / args.budget_gpu_days:.2g}% of the budget (more GPUs would take a "
                          "larger model)")
            elif d["limited_by"] == "grid":
                con.print("the largest size of the grid (20T parameters) fits the budget")
    if d["best"] is None:
        raise InfeasibleError(f"no model of the size grid (from 0.1B) trains within {args.budget_gpu_days:g} "
                              f"GPU-days on {gpus} GPUs of {cl.name}")
    return 0


def _days(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"
