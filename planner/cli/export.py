"""planner export SOLUTION --format megatron|torchrun|hostfile|torchtitan|deepspeed."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("export", help="launch arguments and rank order that realise a solution")
    p.add_argument("solution", help="solution YAML written by `planner solve` (solutions/...)")
    p.add_argument("--format", choices=("megatron", "torchrun", "hostfile", "torchtitan", "deepspeed"),
                   default="torchrun", help="default: torchrun (one torchrun line per node); torchtitan: a job "
                                            "config TOML (ZeRO-3 / FSDP / HSDP plans, and ZeRO-0 DDP plans without "
                                            "tp, pp or cp); deepspeed: a ZeRO-2 / ZeRO-3 config JSON (tp = 1, pp = "
                                            "1, cp = 1; ZeRO-2 plans export only here)")
    p.add_argument("--json", action="store_true",
                   help="megatron_args, notes, torchrun and ranks as JSON on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from planner.export import (
        MODEL_FLAGS_MISSING,
        deepspeed_config,
        deepspeed_recompute_note,
        deepspeed_zero2_note,
        deepspeed_zero3_note,
        hostfile,
        megatron_args,
        rank_layout,
        shell_words,
        solution_spec,
        split_megatron_args,
        torchrun_commands,
        torchtitan_toml,
    )
    from planner.io import print_json
    from planner.solution import load_solution

    file = args.solution
    sol = load_solution(file)
    # the spec the solution names: the cluster's GPU type for Megatron-LM's launch environment (launch_env), and
    # the model's flags, so that the pretrain_gpt.py line runs as written
    spec = solution_spec(sol, file) if args.format not in ("torchtitan", "deepspeed") else None
    gpu = None if spec is None else spec.cluster.gpu.type
    model = {"model": spec.model, "seq_length": spec.training.seq_length} if spec is not None else {}

    def megatron():
        flags, notes = split_megatron_args(megatron_args(sol, file, gpu, **model))
        return flags, notes if spec is not None else [MODEL_FLAGS_MISSING, *notes]

    if args.format == "torchtitan":
        text = torchtitan_toml(sol, file)
        if args.json:
            print_json({"torchtitan_toml": text, "torchrun": torchrun_commands(sol, file=file, framework="torchtitan"),
                        "ranks": rank_layout(sol, file)})
        else:
            print(text, end="")
    elif args.format == "deepspeed":
        print_json(deepspeed_config(sol, file))
        for why in (deepspeed_recompute_note(sol), deepspeed_zero2_note(sol), deepspeed_zero3_note(sol, file)):
            if why:
                print(f"planner: note: {file}: {why}", file=sys.stderr)
    elif args.json:
        flags, notes = megatron()
        print_json({"megatron_args": flags, "notes": notes,
                    "torchrun": torchrun_commands(sol, file=file, gpu_type=gpu, **model),
                    "ranks": rank_layout(sol, file)})
    elif args.format == "megatron":
        # the flags as one shell command line, then the comments: a '#' line inside a backslash-continued command
        # would end it there and drop every flag after it
        flags, notes = megatron()
        print(" \\\n  ".join(shell_words(a) for a in flags))
        for n in notes:
            print(n)
    elif args.format == "hostfile":
        print(hostfile(sol, file), end="")
    else:
        print("\n".join(torchrun_commands(sol, file=file, gpu_type=gpu, **model)))
        if spec is None:
            print(MODEL_FLAGS_MISSING)
    return 0
