"""planner export SOLUTION --format megatron|torchrun|hostfile|torchtitan|deepspeed."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("export", help="launch arguments and rank order that realise a solution")
    p.add_argument("solution")
    p.add_argument("--format", choices=("megatron", "torchrun", "hostfile", "torchtitan", "deepspeed"),
                   default="torchrun", help="torchtitan: a job config TOML (ZeRO-3 / FSDP / HSDP plans); deepspeed: a "
                                            "ZeRO-3 config JSON (pp = 1)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from planner.export import (
        deepspeed_config,
        hostfile,
        megatron_args,
        rank_layout,
        torchrun_commands,
        torchtitan_toml,
    )
    from planner.io import print_json
    from planner.solution import load_solution

    file = args.solution
    sol = load_solution(file)
    if args.format == "torchtitan":
        text = torchtitan_toml(sol, file)
        if args.json:
            print_json({"torchtitan_toml": text, "torchrun": torchrun_commands(sol, file=file),
                        "ranks": rank_layout(sol, file)})
        else:
            print(text, end="")
    elif args.format == "deepspeed":
        print_json(deepspeed_config(sol, file))
    elif args.json:
        print_json({"megatron_args": megatron_args(sol, file), "torchrun": torchrun_commands(sol, file=file),
                    "ranks": rank_layout(sol, file)})
    elif args.format == "megatron":
        print(" \\\n  ".join(megatron_args(sol, file)))
    elif args.format == "hostfile":
        print(hostfile(sol, file), end="")
    else:
        print("\n".join(torchrun_commands(sol, file=file)))
    return 0
