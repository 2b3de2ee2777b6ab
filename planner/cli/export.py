"""planner export SOLUTION --format megatron|torchrun|hostfile."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("export", help="launch arguments and rank order that realise a solution")
    p.add_argument("solution")
    p.add_argument("--format", choices=("megatron", "torchrun", "hostfile"), default="torchrun")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from planner.errors import SpecError
    from planner.export import hostfile, megatron_args, rank_layout, torchrun_commands
    from planner.io import print_json
    from planner.solution import load_solution

    sol = load_solution(args.solution)
    if not isinstance(sol.get("mapping"), list) or not sol["mapping"]:
        raise SpecError(args.solution, "mapping", "is required: a list of {stage, tp_rank, dp_rank, node, gpu}")
    if args.json:
        print_json({"megatron_args": megatron_args(sol), "torchrun": torchrun_commands(sol),
                    "ranks": rank_layout(sol)})
    elif args.format == "megatron":
        print(" \\\n  ".join(megatron_args(sol)))
    elif args.format == "hostfile":
        print(hostfile(sol), end="")
    else:
        print("\n".join(torchrun_commands(sol)))
    return 0
