"""planner export SOLUTION --format megatron|torchrun|hostfile|torchtitan|deepspeed."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("export", help="launch arguments and rank order that realise a solution")
    p.add_argument("solution")
    p.add_argument("--format", choices=("megatron", "torchrun", "hostfile", "torchtitan", "deepspeed"),
                   default="torchrun", help="default: torchrun (one torchrun line per node); torchtitan: a job "
                                            "config TOML (ZeRO-3 / FSDP / HSDP plans, and ZeRO-0 DDP plans without "
                                            "tp, pp or cp); deepspeed: a ZeRO-2 / ZeRO-3 config JSON (tp = 1, pp = "
                                            "1, cp = 1; ZeRO-2 plans export only here)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from planner.export import (
        deepspeed_config,
        deepspeed_recompute_note,
        deepspeed_zero2_note,
        deepspeed_zero3_note,
        hostfile,
        megatron_args,
        rank_layout,
        shell_words,
        solution_gpu_type,
        split_megatron_args,
        torchrun_commands,
        torchtitan_toml,
    )
    from planner.io import print_json
    from planner.solution import load_solution

    file = args.solution
    sol = load_solution(file)
    # the cluster's GPU type, from the spec the solution names, for Megatron-LM's launch environment (launch_env)
    gpu = solution_gpu_type(sol, file) if args.format not in ("torchtitan", "deepspeed") else None
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
        flags, notes = split_megatron_args(megatron_args(sol, file, gpu))
        print_json({"megatron_args": flags, "notes": notes, "torchrun": torchrun_commands(sol, file=file, gpu_type=gpu),
                    "ranks": rank_layout(sol, file)})
    elif args.format == "megatron":
        # the flags as one shell command line, then the comments: a '#' line inside a backslash-continued command
        # would end it there and drop every flag after it
        flags, notes = split_megatron_args(megatron_args(sol, file, gpu))
        print(" \\\n  ".join(shell_words(a) for a in flags))
        for n in notes:
            print(n)
    elif args.format == "hostfile":
        print(hostfile(sol, file), end="")
    else:
        print("\n".join(torchrun_commands(sol, file=file, gpu_type=gpu)))
    return 0
