"""planner estimate SPEC --tp --pp --dp --mbs ...: latency and memory of one given plan, no search."""
from __future__ import annotations

from planner.cli.common import add_config_args, config_from_args, spec_arg, with_engine
from planner.io import plain, print_json


def register(sub) -> None:
    p = sub.add_parser("estimate", help="estimate one given plan (iteration time, memory), no search")
    p.add_argument("spec", help="plan spec YAML (specs/...)")
    add_config_args(p)
    p.add_argument("--mapping", default=None, help="solution YAML whose `mapping` to use (default: rank order)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from planner.report import console, mfu_text, train_text
    from planner.search.solve import estimate_plan
    from planner.solution import estimate_dict, load_solution

    spec = spec_arg(args.spec)
    cfg = config_from_args(args, spec)
    spec = with_engine(args, spec, cfg)
    sol = load_solution(args.mapping) if args.mapping else {}
    mapping = sol.get("mapping")
    est, lay, assign, prob = estimate_plan(spec, cfg, mapping, file=args.mapping)
    # the solution's figures for this plan were on the typical hop's model (its search could not afford the walks):
    # this estimate, which has no limit, walks them
    walked = bool((sol.get("solver") or {}).get("walks_dropped")) and sol.get("config") == cfg.as_dict()
    d = {"config": cfg.as_dict(), "pipeline_engine": spec.training.pipeline_engine,
         # as a solution writes it: physical nodes (a block wider than a node: its first node, and its span)
         "layout": {"stages_per_node": lay.a, "replicas_per_node": lay.b,
                    **({"nodes_per_block": lay.span} if lay.span > 1 else {}),
                    "node_grid": [[int(prob.nodes[k]) for k in row] for row in assign]},
         "estimate": estimate_dict(spec, est), "fits": est.fits,
         "placement": "rank order" if mapping is None else "solution",
         **({"solution_walks_dropped": True} if walked else {})}
    if spec.cluster.gpu.variability is not None:         # gpu.variability: the slowest GPU's factor on GPU work
        from planner.costs import default_costs
        d["slowest_gpu_factor"] = default_costs(spec.cluster).compute.straggler(spec.cluster, cfg)
    if args.json:
        print_json(plain(d))
    else:
        con = console()
        md = est.memory_dict()
        engine = "" if spec.training.pipeline_engine == "megatron" else f" ({spec.training.pipeline_engine} engine)"
        con.print(f"[bold]{cfg.label()}[/bold]{engine}")
        if cfg.num_gpus < spec.cluster.num_gpus:     # with --mapping: the nodes outside it idle
            used = {int(k) * lay.span + r for k in assign.ravel() for r in range(lay.span)}
            con.print(f"on {cfg.num_gpus} of {spec.cluster.num_gpus} GPUs (the mapping's nodes); idle nodes "
                      f"{[n for n in range(spec.cluster.nodes) if n not in used]}")
        con.print(f"iteration {est.iteration_s:.3f} s, {est.tokens_per_s:,.0f} tokens/s "
                  f"(compute {est.compute_s:.3f}, p2p {est.pp_comm_s:.4f}, "
                  # ZeRO-3: the exposed collectives and FSDP2's copies on the compute stream (costs/fsdp.py)
                  f"{'dp + FSDP copies' if cfg.zero == 3 else 'dp'} {est.dp_comm_s:.4f}, "
                  f"tied-embedding {est.emb_comm_s:.4f} s)")
        if walked:
            con.print("the solution's estimate charged these pipeline hops at the typical hop (walks_dropped: its "
                      "search could not afford their walks); this estimate walks them per boundary, so it differs")
        if mapping is None and assign.size > 1 and _unequal_links(spec.cluster.bandwidth):
            con.print("placement: rank order (Megatron's default); this cluster's node links are unequal, so another "
                      "placement may be faster: `planner solve` searches them, `--mapping SOLUTION` uses one")
        con.print("MFU " + mfu_text(spec, est.mfu))
        train = train_text(spec, est.tokens_per_s, cfg.num_gpus)
        if train:
            con.print(train)
        con.print(costs_note(spec, cfg))
        con.print(f"memory peak {md['peak']:.2f} GiB / {md['limit']:.2f} usable: " +
                  ", ".join(f"{k} {md[k]:.2f}" for k in ("weights", "gradients", "optimizer", "activations",
                                                          "logits", "overhead")))
        con.print("per stage: " + " ".join(f"{v:.1f}" for v in md["per_stage"]) +
                  ("" if est.fits else "  [red]DOES NOT FIT[/red]"))
    return 0 if est.fits else 1


def _unequal_links(bw) -> bool:
    """Measured node-to-node bandwidths that differ (a heterogeneous cluster): the placement matters."""
    import numpy as np
    off = bw[~np.eye(len(bw), dtype=bool)]
    return off.size > 0 and float(off.max()) > float(off.min())


def costs_note(spec, cfg=None) -> str:
    """One line of provenance: the compute profile behind the times, its measured factors where they are not the
    defaults, and the fused-attention kernel charged to the plan `cfg` (docs/notes/gpu_h200.md; ZeRO-3 plans:
    docs/notes/fsdp.md)."""
    import os

    from planner.costs import default_costs
    from planner.costs.compute import charged_backend
    cm = default_costs(spec.cluster).compute
    bits = [f"compute profile {os.path.basename(cm.source) if cm.source else 'built-in defaults'}"]
    if cm.sustained_slowdown != 1.0:
        bits.append(f"kernels x{cm.sustained_slowdown:g} for steady state")
    var = spec.cluster.gpu.variability
    if var is not None and cfg is not None:
        bits.append(f"slowest of {cfg.num_gpus} GPUs x{cm.straggler(spec.cluster, cfg):.4f} "
                    f"(gpu.variability {var.label})")
    if spec.training.precision == "fp8":
        bits.append(f"fp8 GEMMs at {2 * cm.fp8_relative_efficiency:.2f}x bf16's throughput")
    if spec.training.attention == "fused":
        kernel = charged_backend(spec.cluster.gpu.type, spec.training, cfg)
        bits.append(f"fused attention {kernel}" + (" (measured in training steps)" if kernel == "sdpa_flash" else ""))
    else:
        from planner.spec.cluster import fused_attention_refusal
        bits.append("unfused attention" + (f" ({spec.cluster.gpu.type} has no fused kernel)"
                                           if fused_attention_refusal(spec.cluster.gpu) else ""))
    return "costs: " + ", ".join(bits)
