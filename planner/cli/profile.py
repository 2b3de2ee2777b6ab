"""`planner profile KIND ...`: measure the costs the planner's estimators are fitted on (KIND: memory,
compute, network). torch and the profilers are imported only when a profile runs."""
from __future__ import annotations

import sys

from planner.cli.common import finite_float
from planner.errors import SpecError
from planner.profile import network_options as network_text


def register(subparsers) -> None:
    p = subparsers.add_parser("profile", help="measure costs (memory, compute, network) into sample files")
    sub = p.add_subparsers(dest="profile_kind", metavar="KIND")
    for add in (_add_compute, _add_memory, _add_network):      # alphabetical, as `--help` lists them
        add(sub)
    p.set_defaults(func=lambda args: missing_kind(p))


def missing_kind(parser) -> int:
    parser.print_help(sys.stderr)
    return 2


# --- compute ----------------------------------------------------------------------------------------------

def _add_compute(sub) -> None:
    p = sub.add_parser("compute", help="time one transformer layer forward/backward on this device")
    p.add_argument("-o", "--output", default="compute_profile.csv", help="CSV to write (default compute_profile.csv)")
    p.add_argument("--hidden", default="256,512,1024", help="comma-separated hidden sizes (default 256,512,1024)")
    p.add_argument("--heads", default="8", help="comma-separated attention head counts (default 8)")
    p.add_argument("--head-dim", type=int, default=None,
                   help="heads = hidden / HEAD_DIM for each hidden size (e.g. 128), instead of --heads")
    p.add_argument("--seq", default="256,512", help="comma-separated sequence lengths (default 256,512)")
    p.add_argument("--micro-batch", default="1,2", help="comma-separated micro-batch sizes (default 1,2)")
    p.add_argument("--tp", default="1,2",
                   help="comma-separated tensor-parallel degrees: one rank's share of the layer is timed (default 1,2)")
    p.add_argument("--precision", default=None, choices=("fp32", "bf16", "fp16"),
                   help="default: fp16 on CUDA, fp32 on CPU")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions per shape (default 3)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run_compute)


def _ints(text: str) -> list[int]:
    try:
        v = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(None, text, "expected a comma-separated list of integers") from None
    if not v or min(v) < 1:
        raise SpecError(None, text, "expected positive integers")
    return v


def run_compute(args) -> int:
    import json

    from planner.io import check_out
    check_out(args.output, "--output")          # before the profiling, as every output flag
    import torch

    from planner.profile.compute import grid_shapes, profile_grid, write_profile_csv
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SpecError(None, "--device", f"{device} requested but no CUDA device is available")
    if args.precision is None:
        args.precision = "fp16" if device.startswith("cuda") else "fp32"
    if args.head_dim is not None and args.head_dim < 1:
        raise SpecError(None, "--head-dim", "must be a positive integer")
    skipped = []
    grid = (_ints(args.hidden), _ints(args.heads), _ints(args.seq), _ints(args.micro_batch), _ints(args.tp))
    if not args.json:
        n = len(grid_shapes(*grid, args.head_dim))
        print(f"profiling {n} layer shape(s) on {device} ({args.precision}), {args.repeats} repeats each"
              + ("; these are this CPU's timings, not a GPU's: a profile fitted on them plans for this CPU (profile "
                 "on the GPU to plan for it: benchmarks/profile_gpu.sh)" if device == "cpu" else ""),
              file=sys.stderr)
    samples = profile_grid(*grid, args.precision, device, args.repeats, args.head_dim, skipped)
    if not samples:
        raise SpecError(None, "--hidden/--heads/--tp", "no valid shape in the grid (heads must divide hidden, tp heads)"
                        + (f"; {len(skipped)} ran out of device memory" if skipped else ""))
    write_profile_csv(args.output, samples)
    if args.json:
        print(json.dumps({"output": args.output, "samples": len(samples), "device": samples[0].device,
                          "skipped_out_of_memory": len(skipped)}))
    else:
        print(f"wrote {len(samples)} layer samples ({samples[0].device}) to {args.output}"
              + (f"; {len(skipped)} shapes ran out of device memory and were skipped" if skipped else ""),
              file=sys.stderr)
    return 0


# --- memory -----------------------------------------------------------------------------------------------

def _add_memory(sub) -> None:
    p = sub.add_parser("memory", help="measure per-GPU peak memory of pipeline stages (CSV samples)")
    p.add_argument("-o", "--output", required=True, help="CSV file to write")
    p.add_argument("-n", "--samples", type=int, default=None,
                   help="random configurations to profile (default 300; with --replay: all of the file's cases)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random configurations (default 0)")
    p.add_argument("--device", choices=("auto", "fake", "cuda"), default="auto",
                   help="cuda: CUDA caching allocator; fake: FakeTensorMode on CPU (allocates nothing)")
    p.add_argument("--max-gpus", type=int, default=512, help="largest tp*pp*dp a sampled configuration may use")
    p.add_argument("--replay", metavar="SAMPLES.csv",
                   help="measure the cases of an existing sample file again on this device instead of drawing new ones")
    p.add_argument("--fill", type=finite_float, default=0.85,
                   help="cuda: draw again any case whose analytical peak exceeds this fraction of free memory")
    p.add_argument("--time-budget", type=finite_float, default=None,
                   help="stop after this many seconds with the samples taken so far")
    p.add_argument("--min-GiB", dest="min_gib", type=finite_float, default=None,
                   help="draw again any case whose analytical peak is under this many GiB (new draws only): "
                        "samples of the large stages plans run at, where the fragmentation term matters most")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run_memory)


def run_memory(args) -> int:
    import json
    import random
    import time

    import torch

    from planner.costs.memory import GiB
    from planner.io import check_out
    from planner.profile import memory as pm
    check_out(args.output, "--output", {args.replay: "the --replay samples"} if args.replay else None)
    args.samples_given = args.samples is not None
    if not args.samples_given:
        args.samples = 300
    if args.samples < 1:
        raise SpecError(None, "--samples", "must be at least 1")
    if not 0 < args.fill <= 1:
        raise SpecError(None, "--fill", "must be in (0, 1]")
    if args.time_budget is not None and args.time_budget <= 0:
        raise SpecError(None, "--time-budget", "must be a positive number of seconds")
    if args.max_gpus < 1:           # no configuration has fewer than one GPU: the sampler would draw forever
        raise SpecError(None, "--max-gpus", f"must be at least 1, got {args.max_gpus}")
    if args.min_gib is not None and (args.min_gib <= 0 or args.replay):
        raise SpecError(None, "--min-GiB", "must be a positive number of GiB" if args.min_gib <= 0
                        else "draws new cases; --replay measures the file's cases as they are")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "fake"
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecError(None, "--device", "cuda requested but no CUDA device is available")
    rng = random.Random(args.seed)
    rows = []
    skipped = {"too_large": 0, "oom": 0}
    limit = None
    if device == "cuda":
        # a real GPU holds only so much: cases whose analytical peak exceeds the device's free memory
        # (times --fill) are drawn again instead of crashing the run; an OOM that slips through is counted
        limit = args.fill * torch.cuda.mem_get_info()[0]
    floor = None
    if args.min_gib is not None:
        floor = args.min_gib * GiB
        skipped["too_small"] = 0
        if limit is not None and floor >= limit:
            raise SpecError(None, "--min-GiB", f"{args.min_gib:g} GiB is not below what the device holds "
                            f"({args.fill:g} x its free memory, {limit / GiB:.1f} GiB): no case could be drawn")
    replay = None
    if args.replay:
        from planner.costs.learned import read_samples, row_case
        rows_in = read_samples(args.replay)
        if "layers_per_chunk" not in rows_in[0]:
            raise SpecError(args.replay, "layers_per_chunk", "column missing (a `planner profile memory` CSV expected)")
        replay = [(*row_case(r), int(r["layers_per_chunk"])) for r in rows_in]
        args.samples = min(args.samples, len(replay)) if args.samples_given else len(replay)
    t0 = time.perf_counter()
    drawn = 0
    while len(rows) < args.samples:
        if args.time_budget and rows and time.perf_counter() - t0 > args.time_budget:
            break
        if replay is not None:
            if drawn >= len(replay):
                break
            case = replay[drawn]
            drawn += 1
        else:
            case = pm.sample_case(rng, args.max_gpus)
        if limit is not None or floor is not None:
            peak = pm.stage_peak_estimate(*case)
            if limit is not None and peak > limit:
                skipped["too_large"] += 1
                continue
            if floor is not None and peak < floor:
                skipped["too_small"] += 1
                continue
        try:
            rows.append(pm.sample_row(*case, device=device))
        except torch.cuda.OutOfMemoryError:
            skipped["oom"] += 1
            torch.cuda.empty_cache()
            continue
        if not args.json and len(rows) % 25 == 0:
            print(f"  {len(rows)}/{args.samples} samples, {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    if not rows:
        raise SpecError(args.replay, None, f"no case could be measured on this device ({skipped['too_large']} "
                        f"would not fit in {args.fill:g} x its free memory, {skipped['oom']} ran out of memory)")
    pm.write_samples(args.output, rows)
    summary = {"output": args.output, "samples": len(rows), "backend": rows[0]["backend"],
               "seconds": round(time.perf_counter() - t0, 1), "skipped": skipped}
    if device == "cuda":
        summary["device"] = torch.cuda.get_device_name()
        summary["runtime_overhead_GiB"] = round(pm.runtime_overhead_bytes() / GiB, 3)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"wrote {len(rows)} {summary['backend']} samples to {args.output} in {summary['seconds']}s",
              file=sys.stderr)
    return 0


# --- network ----------------------------------------------------------------------------------------------

def _add_network(sub) -> None:
    p = sub.add_parser("network", help="measure the p2p bandwidth/latency matrix with torch.distributed",
                       description=network_text.DESCRIPTION)
    p.add_argument("-o", "--output", default="bandwidth.csv", help="matrix CSV (GB/s); sidecar YAML beside it")
    p.add_argument("--sidecar", default=None, help="sidecar YAML path (default: output with .yaml)")
    p.add_argument("--gpu-matrix", default=None, metavar="CSV",
                   help="also measure every rank pair and write the GPU x GPU matrix here")
    p.add_argument("--spawn", type=int, default=0, metavar="N",
                   help="launch N local gloo processes on 127.0.0.1 (testing, one machine)")
    p.add_argument("--sizes", default="64K,1M,16M", help="message sizes (bytes; K/M/G suffixes)")
    p.add_argument("--repeats", type=int, default=5, help="timed repetitions per pair and size (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed repetitions first (default 2)")
    p.add_argument("--window", type=int, default=1, help="messages in flight per timed repetition")
    p.add_argument("--statistic", choices=network_text.STATISTICS, default="median",
                   help="over the timed repetitions (default median)")
    p.add_argument("--max-pairs", type=int, default=0,
                   help="pairs measured at once (default 0: all disjoint pairs of a round; 1: one at a time)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="torch.distributed back end (default: nccl when CUDA is available, else gloo)")
    p.add_argument("--group-by", choices=("host", "rank"), default=None,
                   help="what a node is: ranks on one host (default) or each rank (default with --spawn)")
    p.add_argument("--spawn-hosts", default=None, metavar="H0,H0,H1,...",
                   help="with --spawn: a host name per process, to emulate several GPUs per node")
    p.add_argument("--shared-nics", action="store_true",
                   help="with --gpu-matrix: allow several inter-node pairs of one node in a round")
    p.add_argument("--timeout", type=finite_float, default=300.0, help="seconds before giving up")
    p.add_argument("--json", action="store_true", help="print the sidecar as JSON on stdout")
    p.set_defaults(func=run_network)


def network_options(args):
    """The profiler's options from the command line."""
    from planner.profile.network import ProfileOptions, parse_sizes
    return ProfileOptions(sizes_bytes=parse_sizes(args.sizes), repeats=args.repeats, warmup=args.warmup,
                          statistic=args.statistic, window=args.window, max_pairs=args.max_pairs,
                          scope="gpu" if args.gpu_matrix else "node", exclusive_nodes=not args.shared_nics,
                          node_key=args.group_by or ("rank" if args.spawn and not args.spawn_hosts else "host"),
                          backend=args.backend, timeout_s=args.timeout).check()


def run_network(args) -> int:
    from planner.io import check_outs
    from planner.profile.network import profile_from_env, profile_spawn, sidecar_path, write_profile
    check_outs({"--output": args.output, "--sidecar": args.sidecar or sidecar_path(args.output),
                "--gpu-matrix": args.gpu_matrix})
    opts = network_options(args)
    if args.spawn:
        hosts = [h.strip() for h in args.spawn_hosts.split(",")] if args.spawn_hosts else None
        prof = profile_spawn(args.spawn, opts, deadline_s=args.timeout, hosts=hosts)
    else:
        prof = profile_from_env(opts)
    if prof is None:             # not rank 0: rank 0 writes
        return 0
    write_profile(prof, args.output, args.sidecar, args.gpu_matrix)
    if args.json:
        from planner.io import print_json
        print_json(prof.sidecar())
    else:
        print(f"{prof.nodes}x{prof.nodes} bandwidth matrix (GB/s at {prof.sizes_bytes[-1]} B, {prof.backend}, "
              f"{prof.rounds} rounds, {prof.wall_s:.1f} s) -> {args.output}", file=sys.stderr)
        for name, row in zip(prof.node_names, prof.bandwidth_GBps, strict=True):
            print(f"  {name:>20} " + " ".join(f"{v:8.2f}" for v in row), file=sys.stderr)
    return 0
