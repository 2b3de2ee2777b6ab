"""`planner import mpigraph LOG` and `planner import nccl-tests OUT`: other tools' measurements in our formats;
`planner import megatron ARGS`: a Megatron-LM run as a plan spec."""
from __future__ import annotations

import datetime as _dt
import os
import sys

from planner.profile import importers as imp


def register(subparsers):
    p = subparsers.add_parser("import", help="import mpiGraph matrices, nccl-tests tables or a Megatron-LM run")
    sub = p.add_subparsers(dest="import_kind", metavar="KIND")
    sub.required = True

    m = sub.add_parser("mpigraph", help="mpiGraph log -> node x node bandwidth CSV (GB/s) + sidecar")
    m.add_argument("log", help="mpiGraph's output (its Send and Recv matrices)")
    m.add_argument("-o", "--output", default=None, help="matrix CSV (default: print it on stdout)")
    m.add_argument("--sidecar", default=None, help="sidecar YAML (default: output with .yaml)")
    m.add_argument("--combine", choices=imp.COMBINE, default="min",
                   help="send view, receive view, their minimum (default) or mean per directed pair")
    m.add_argument("--aggregate", choices=imp.AGGREGATE, default="median",
                   help="over the rank pairs of two hosts when several ranks ran per host")
    m.add_argument("--rank-matrix", default=None, metavar="CSV", help="also write the rank x rank matrix")
    m.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    m.set_defaults(func=_mpigraph)

    n = sub.add_parser("nccl-tests", help="nccl-tests output -> size_bytes,time_us,algbw_GBps,busbw_GBps CSV")
    n.add_argument("out", metavar="NCCL_TESTS_OUTPUT",
                   help="what an nccl-tests binary printed (stdout), or its CSV variant (as vTrain's tables)")
    n.add_argument("-o", "--output", default=None, help="table CSV (default: print it on stdout)")
    n.add_argument("--placement", choices=("out-of-place", "in-place"), default=None,
                   help="which columns to keep (default: out-of-place, or the only one a table holds)")
    n.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    n.set_defaults(func=_nccl)

    g = sub.add_parser("megatron", help="a Megatron-LM pretrain command line -> plan spec (model, training, the run's "
                                        "configuration) and the planner estimate command that costs it")
    g.add_argument("args", metavar="ARGS", help="file with the pretrain command line or its arguments (`\\` "
                                                "continuations and `#` comments allowed; a torchrun prefix is skipped)")
    g.add_argument("-o", "--output", required=True, metavar="SPEC", help="plan spec YAML to write")
    g.add_argument("--cluster", required=True, help="cluster YAML the run ran on (referenced from the spec)")
    g.add_argument("--free", action="store_true",
                   help="write the usual open search space (what would you change) instead of the run's alone")
    g.add_argument("--vocab-size", type=int, default=None,
                   help="the tokenizer's vocabulary when the line does not give it (padded as Megatron-LM pads it)")
    g.add_argument("--world-size", type=int, default=None,
                   help="the run's GPU count (default: torchrun's --nnodes x --nproc-per-node, else the cluster's)")
    g.add_argument("--name", default=None, help="spec and model name (default: the output file's name)")
    g.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    g.set_defaults(func=_megatron)


def _mpigraph(args) -> int:
    from planner.io import atomic_write_text, check_outs, print_json, write_yaml
    from planner.profile.network import matrix_csv, sidecar_path
    if args.output:      # the sidecar and the rank matrix are written only beside a matrix file
        check_outs({"--output": args.output, "--sidecar": args.sidecar or sidecar_path(args.output),
                    "--rank-matrix": args.rank_matrix}, {args.log: "the mpiGraph log"})
    log = imp.parse_mpigraph(imp.read_text(args.log), args.log)
    nm = imp.mpigraph_node_matrix(log, args.combine, args.aggregate)
    from planner.spec.hosts import is_hostname
    bad = [n for n in nm.node_names if not is_hostname(n)]
    if bad:           # a cluster spec refuses them in network.node_names later (RFC 1123): say so now
        print(f"planner: warning: {args.log}: host names {bad} are not RFC 1123 names (letters, digits, '-', '.'); "
              "a cluster spec's network.node_names refuses them: rename them there (e.g. '_' -> '-')",
              file=sys.stderr)
    comments = [f"imported from mpiGraph log {os.path.basename(args.log)} "
                f"({log.msg_size_bytes} B messages, {args.combine} of send/recv views, {args.aggregate} per host pair)",
                "GB/s (1e9 B/s) per rail, [i, j] = node i sends to node j; diagonal unused",
                "nodes: " + " ".join(nm.node_names)]
    side = {"kind": "planner network import",
            "imported": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "source_file": os.path.abspath(args.log), **nm.source, "node_names": list(nm.node_names),
            "rank_labels": list(nm.rank_labels), "bandwidth_GBps": nm.bandwidth_GBps,
            "send_MiBps": log.send_MBps, "recv_MiBps": log.recv_MBps}
    if args.output:
        atomic_write_text(args.output, matrix_csv(nm.bandwidth_GBps, comments))
        side["cluster_network"] = {"bandwidth_matrix": os.path.basename(args.output),
                                   "node_names": list(nm.node_names)}
        write_yaml(args.sidecar or sidecar_path(args.output), side)
        if args.rank_matrix:
            atomic_write_text(args.rank_matrix, matrix_csv(nm.rank_matrix_GBps, comments[:2] + [
                "ranks: " + " ".join(nm.rank_labels)]))
        print(f"{len(nm.node_names)}x{len(nm.node_names)} node matrix -> {args.output}", file=sys.stderr)
    if args.json:
        print_json(side)
    elif not args.output:
        sys.stdout.write(matrix_csv(nm.bandwidth_GBps, comments))
    return 0


def _nccl(args) -> int:
    from planner.io import atomic_write_text, check_out, print_json
    if args.output:
        check_out(args.output, "--output", {args.out: "the nccl-tests output"})
    table = imp.parse_nccl_tests(imp.read_text(args.out), args.out, args.placement)
    comments = [f"imported from nccl-tests output {os.path.basename(args.out)} "
                f"({table.placement}, {table.layout} layout"
                + (f", {table.collective}" if table.collective else "")
                + (f", {table.nranks} ranks" if table.nranks else "") + ")"]
    text = imp.nccl_table_csv(table, comments)
    if args.output:
        atomic_write_text(args.output, text)
        print(f"{len(table.rows)} rows -> {args.output}", file=sys.stderr)
    if args.json:
        print_json({"placement": table.placement, "layout": table.layout, "collective": table.collective,
                    "nranks": table.nranks, "avg_busbw_GBps": table.avg_busbw_GBps,
                    "rows": [r.__dict__ for r in table.rows]})
    elif not args.output:
        sys.stdout.write(text)
    return 0


def _megatron(args) -> int:
    from planner import megatron_import as mi
    from planner.errors import SpecError
    from planner.io import check_out, print_json, read_text_file, write_yaml
    from planner.spec.plan import load_cluster
    for flag in ("vocab_size", "world_size"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise SpecError(None, "--" + flag.replace("_", "-"), f"must be a positive integer, got {v}")
    out = check_out(args.output, "--output", {args.args: "the Megatron-LM arguments", args.cluster: "the cluster"})
    cluster = load_cluster(args.cluster)
    line = mi.parse_launch(read_text_file(args.args), args.args)      # bounded: a regular UTF-8 file <= 10 MiB
    run = mi.read_run(line, cluster.num_gpus, args.args, args.vocab_size, args.world_size, cluster.gpus_per_node)
    name = args.name or os.path.splitext(os.path.basename(out))[0]
    ref = os.path.relpath(os.path.abspath(args.cluster), os.path.dirname(out))
    if run.world_size != cluster.num_gpus:          # a run on the cluster's first nodes
        ref = {"path": ref, "gpus": run.world_size}
    data = mi.build_spec(run, name, ref, os.path.basename(args.args), args.free)
    mi.check_spec(data, out, run, args.args, args.free)
    write_yaml(out, data)
    cmd = mi.estimate_command(args.output, run.config)
    ignored = mi.not_read(line, run)
    warn = []
    if line.unknown:
        warn.append(f"not Megatron-LM flags at {mi.megatron_flags()['commit'][:8]} (another version's?), not read: "
                    + " ".join(line.unknown))
    if ignored:
        warn.append("Megatron-LM flags the plan does not read (no counterpart in the planner; check none changes "
                    "the run's speed or memory): " + " ".join(ignored))
    if line.repeated:
        warn.append("given more than once (the last value kept, as argparse does): " + " ".join(line.repeated))
    if args.json:
        print_json({"spec": out, "config": run.config.as_dict(), "world_size": run.world_size, "model": data["model"],
                    "training": run.training, "search": data["search"], "assumed": run.notes, "warnings": warn,
                    "estimate_command": cmd})
    else:
        for n in run.notes:
            print(f"planner: assumed: {n}", file=sys.stderr)
        for w in warn:
            print(f"planner: warning: {args.args}: {w}", file=sys.stderr)
        print(f"{run.config.label()} on {run.world_size} GPUs -> {args.output}"
              + (" (open search space: planner solve answers what to change)" if args.free else ""), file=sys.stderr)
        print(cmd)
    return 0
