"""Helpers shared by several commands: loading a spec, the configuration flags."""
from __future__ import annotations

import dataclasses

from planner.config import PIPELINE_ENGINES, RECOMPUTE, SCHEDULES, ParallelConfig
from planner.errors import SpecError


def spec_arg(path: str):
    """Load a spec for a command; SpecError propagates to main()."""
    from planner.spec import load_spec
    return load_spec(path)


def add_config_args(p, required: bool = True) -> None:
    g = p.add_argument_group("configuration")
    g.add_argument("--tp", type=int, required=required, help="tensor parallel degree")
    g.add_argument("--pp", type=int, required=required, help="pipeline parallel degree")
    g.add_argument("--dp", type=int, required=required, help="data parallel degree")
    g.add_argument("--mbs", type=int, required=required, help="micro-batch size")
    g.add_argument("--schedule", default="1f1b", choices=SCHEDULES)
    g.add_argument("--vpp", type=int, default=None, help="virtual stages per device (interleaved); V-shapes use 2")
    g.add_argument("--recompute", default="none", choices=RECOMPUTE)
    g.add_argument("--zero", type=int, default=0, choices=(0, 1, 2))
    g.add_argument("--sp", action="store_true", help="sequence parallel")
    g.add_argument("--pipeline-engine", default=None, choices=PIPELINE_ENGINES,
                   help="override the spec's training.pipeline_engine (how pipeline p2p is issued)")


def with_engine(args, spec, cfg: ParallelConfig | None = None):
    """The spec with --pipeline-engine applied; a DeepSpeed plan must be 1F1B (its only schedule)."""
    engine = getattr(args, "pipeline_engine", None)
    if engine and engine != spec.training.pipeline_engine:
        spec = dataclasses.replace(spec, training=dataclasses.replace(spec.training, pipeline_engine=engine))
    if cfg is not None and spec.training.pipeline_engine == "deepspeed" and cfg.schedule != "1f1b":
        raise SpecError(None, "--schedule", f"{cfg.schedule}: the deepspeed pipeline engine runs only 1f1b")
    return spec


def config_from_args(args, spec) -> ParallelConfig:
    for flag in ("tp", "pp", "dp", "mbs"):
        v = getattr(args, flag)
        if v is None or v < 1:
            raise SpecError(None, f"--{flag}", f"must be a positive integer, got {v}")
    gbs = spec.training.global_batch_size
    if gbs % (args.dp * args.mbs):
        raise SpecError(None, "--mbs", f"dp*mbs = {args.dp * args.mbs} does not divide the global batch {gbs}")
    m = gbs // (args.dp * args.mbs)
    vpp = args.vpp or (2 if args.schedule in ("v-min", "v-half", "v-zb")
                       else (2 if args.schedule == "interleaved" else 1))
    if args.schedule not in ("interleaved", "v-min", "v-half", "v-zb"):
        vpp = 1
    return ParallelConfig(args.tp, args.pp, args.dp, args.mbs, m, args.schedule, vpp, args.recompute, args.zero,
                          bool(args.sp) and args.tp > 1)
