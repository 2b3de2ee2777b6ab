"""Helpers shared by several commands: loading a spec, the configuration flags."""
from __future__ import annotations

import dataclasses

from planner.config import (
    PIPELINE_ENGINES,
    RECOMPUTE,
    SCHEDULES,
    V_SHAPES,
    ZERO_STAGES,
    ParallelConfig,
    dp_shard_problem,
    engine_recompute_problem,
    recompute_layers_problem,
)
from planner.errors import SpecError


def finite_float(text: str) -> float:
    """argparse type for every float flag: NaN and infinity are bad input (exit 2 naming the flag)."""
    import argparse
    import math
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return v


def seed_int(text: str) -> int:
    """argparse type for --seed: a non-negative integer (numpy's generators refuse negative seeds, and a spec's
    solver.seed is refused below 0 too), exit 2 naming the flag."""
    import argparse
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {v}")
    return v


def spec_arg(path: str):
    """Load a spec for a command; SpecError propagates to main(). A GPU type with no shipped compute profile and
    none named is legal (a new GPU), but its times rest on generic efficiencies: say so on stderr."""
    import sys

    from planner.costs import SHIPPED_COMPUTE, shipped_compute_profile
    from planner.spec import load_spec
    spec = load_spec(path)
    gpu = spec.cluster.gpu.type
    if not (getattr(spec.cluster, "profiles", None) or {}).get("compute") and not shipped_compute_profile(gpu):
        print(f"planner: warning: {path}: cluster.gpu.type {gpu!r} matches no shipped compute profile "
              f"({', '.join(SHIPPED_COMPUTE)}): its GEMM, attention and memory-bandwidth efficiencies are generic "
              "defaults; set cluster.profiles.compute to a fitted profile (planner fit compute) for measured ones",
              file=sys.stderr)
    return spec


def add_config_args(p, required: bool = True) -> None:
    g = p.add_argument_group("configuration")
    g.add_argument("--tp", type=int, required=required, help="tensor parallel degree")
    g.add_argument("--pp", type=int, required=required, help="pipeline parallel degree")
    g.add_argument("--dp", type=int, required=required, help="data parallel degree")
    g.add_argument("--cp", type=int, default=1,
                   help="context parallel degree (Megatron-Core --context-parallel-size; default 1)")
    g.add_argument("--mbs", type=int, required=required, help="micro-batch size")
    g.add_argument("--schedule", default=None, choices=SCHEDULES,
                   help="pipeline schedule (default: 1f1b, or interleaved when --vpp > 1 is given)")
    g.add_argument("--vpp", type=int, default=None,
                   help="virtual stages per device: > 1 means interleaved (default 2 there); V-shapes use 2")
    g.add_argument("--recompute", default="none", choices=RECOMPUTE, help="activation recomputation (default none)")
    g.add_argument("--recompute-layers", type=int, default=None,
                   help="--recompute block: layers of each model chunk recomputed (Megatron-Core "
                        "--recompute-num-layers N with --recompute-method block); with --zero 3, torchtitan's "
                        "selective_ac_option N: every N-th block of a rank")
    g.add_argument("--zero", type=int, default=0, choices=ZERO_STAGES,
                   help="ZeRO stage; 3 = FSDP / ZeRO-3 as torchtitan's FSDP2 runs it")
    g.add_argument("--dp-shard", type=int, default=0,
                   help="ZeRO-3: HSDP shard-group size (1 < N < dp, dividing dp; default 0 = shard over all dp)")
    g.add_argument("--sp", action="store_true", help="sequence parallel")
    g.add_argument("--first-stage-layers", type=int, default=None,
                   help="transformer layers on the first pipeline stage (Megatron-Core "
                        "--decoder-first-pipeline-num-layers; default: the even split)")
    g.add_argument("--last-stage-layers", type=int, default=None,
                   help="transformer layers on the last pipeline stage (--decoder-last-pipeline-num-layers)")
    g.add_argument("--account-embedding", action="store_true",
                   help="count the embedding as a layer in the split (--account-for-embedding-in-pipeline-split)")
    g.add_argument("--account-loss", action="store_true",
                   help="count the loss as a layer in the split (--account-for-loss-in-pipeline-split)")
    g.add_argument("--pipeline-engine", default=None, choices=PIPELINE_ENGINES,
                   help="override the spec's training.pipeline_engine (how pipeline p2p is issued)")


def with_engine(args, spec, cfg: ParallelConfig | None = None):
    """The spec with --pipeline-engine applied; a DeepSpeed plan must be 1F1B (its only schedule)."""
    engine = getattr(args, "pipeline_engine", None)
    if engine and engine != spec.training.pipeline_engine:
        spec = dataclasses.replace(spec, training=dataclasses.replace(spec.training, pipeline_engine=engine))
    if cfg is not None and spec.training.pipeline_engine == "deepspeed" and cfg.schedule != "1f1b":
        raise SpecError(None, "--schedule", f"{cfg.schedule}: the deepspeed pipeline engine runs only 1f1b")
    if cfg is not None and spec.training.pipeline_engine == "deepspeed" and cfg.cp > 1:
        raise SpecError(None, "--cp", "context parallelism is modelled for Megatron-Core, not the deepspeed engine")
    why = engine_recompute_problem(spec.training.pipeline_engine, cfg.recompute) if cfg is not None else None
    if why:
        raise SpecError(None, "--recompute", why)
    if cfg is not None and spec.training.pipeline_engine == "deepspeed" and cfg.zero == 3:
        raise SpecError(None, "--zero", "3: DeepSpeed's ZeRO-3 is incompatible with its pipeline engine")
    return spec


def config_from_args(args, spec) -> ParallelConfig:
    for flag in ("tp", "pp", "dp", "mbs", "cp"):
        v = getattr(args, flag, 1)
        if v is None or v < 1:
            raise SpecError(None, f"--{flag}", f"must be a positive integer, got {v}")
    gbs = spec.training.global_batch_size
    if gbs % (args.dp * args.mbs):
        raise SpecError(None, "--mbs", f"dp*mbs = {args.dp * args.mbs} does not divide the global batch {gbs}")
    m = gbs // (args.dp * args.mbs)
    schedule, vpp = schedule_and_vpp(args.schedule, args.vpp, args.pp)
    if args.sp and args.tp == 1:
        raise SpecError(None, "--sp", "sequence parallel needs --tp > 1 (it splits the tensor-parallel group's work)")
    cfg = ParallelConfig(args.tp, args.pp, args.dp, args.mbs, m, schedule, vpp, args.recompute, args.zero,
                         bool(args.sp), getattr(args, "first_stage_layers", None),
                         getattr(args, "last_stage_layers", None), bool(getattr(args, "account_embedding", False)),
                         bool(getattr(args, "account_loss", False)), getattr(args, "cp", 1),
                         dp_shard=getattr(args, "dp_shard", 0) or 0,
                         recompute_layers=getattr(args, "recompute_layers", None))
    why = recompute_layers_problem(cfg)
    if why:
        raise SpecError(None, "--recompute-layers", why)
    why = dp_shard_problem(cfg)
    if why:
        raise SpecError(None, "--dp-shard", why)
    return cfg        # the framework rules (ZeRO-3's torchtitan ones among them): search.solve.check_config


def schedule_and_vpp(schedule: str | None, vpp: int | None, pp: int | None = None) -> tuple[str, int]:
    """--schedule and --vpp together (and --pp when given): a flag is implied or refused, never dropped. --vpp N > 1
    alone means interleaved; interleaved alone means v = 2, and needs pp > 1; V-shapes run exactly 2 chunks; the
    others one."""
    if vpp is not None and vpp < 1:
        raise SpecError(None, "--vpp", f"must be a positive integer, got {vpp}")
    given = schedule
    if schedule is None:
        schedule = "interleaved" if vpp is not None and vpp > 1 else "1f1b"
    if schedule == "interleaved":
        if vpp == 1:
            raise SpecError(None, "--vpp", "interleaved needs at least 2 virtual stages (--vpp 1 is --schedule 1f1b)")
        if pp == 1:
            # Megatron-Core parallel_state.initialize_model_parallel raises it for any virtual pipeline size
            flag = "--schedule" if given == "interleaved" else "--vpp"
            raise SpecError(None, flag, f"{'interleaved' if flag == '--schedule' else f'--vpp {vpp}'} with --pp 1: "
                            "model chunks interleave over pipeline stages (Megatron-Core: 'pipeline-model-parallel "
                            "size should be greater than 1 with interleaved schedule'); use --pp > 1 or drop it")
        return schedule, vpp or 2
    if schedule in V_SHAPES:
        if vpp not in (None, 2):
            raise SpecError(None, "--vpp", f"{schedule} runs exactly 2 chunks per device, got --vpp {vpp}")
        if pp == 1:        # the V folds the model's two halves over the pipeline stages: none to fold over
            raise SpecError(None, "--schedule", f"{schedule} with --pp 1: a V-shape places two model chunks per "
                            "device along the pipeline; use --pp > 1 or --schedule 1f1b")
        return schedule, 2
    if vpp not in (None, 1):
        raise SpecError(None, "--vpp", f"--vpp {vpp} needs --schedule interleaved ({schedule} runs one chunk "
                                       "per device)")
    return schedule, 1
