"""Run what `planner export` writes through the real tools' own parsers and validation (not part of the test run).

    python benchmarks/export_against_parsers.py --megatron /tmp/tools/mlm --torchtitan /tmp/tools/tt \
        --deepspeed /tmp/tools/ds --nemo /tmp/tools/nemo --nemo-mcore /tmp/tools/mcore-nemo --site /tmp/pydeps

Each DIR is a checked-out source tree (git archive of the commit under test; the report says which); --site adds
directories of the tools' pure-Python dependencies (tyro, pydantic, hjson, einops, ...; triton for Megatron's
imports, tokenizers / torchdata for torchtitan's) to sys.path. torch comes from the running interpreter (CPU is
enough). Prints one line per plan and tool: OK, REFUSED (planner refuses to export it, with its reason) or FAIL and
the tool's error. Exit 1 if any FAIL.

What runs, per tool:
- megatron: megatron.training.arguments.parse_args(ignore_unknown_args=False) on the exported flags plus the model
  shape, then validate_args with RANK / WORLD_SIZE and the exported launch environment (CUDA_DEVICE_MAX_CONNECTIONS)
  set and get_device_arch_version() answering the spec GPU's compute capability (the one CUDA query it makes), then
  core_transformer_config_from_args (TransformerConfig.__post_init__'s checks).
- torchtitan: ConfigManager().parse_args(["--job.config_file", toml]) (unknown keys raise), each key's value
  against the JobConfig field's annotation, ParallelDims(...)._validate for the world size, the trainer's batch
  assertion (train.py) and pipeline_parallel.py's split rules and generate_llm_fqn_per_model_part (run from its
  source: the module's imports need tensorboard), torch's get_schedule_class for the schedule name.
- deepspeed: deepspeed.runtime.config.DeepSpeedConfig(json) (pydantic models, extra="forbid"), with
  deepspeed.comm's rank / world size answering rank 0 of the plan's data-parallel world.
- nemo: each `recipe.X.Y = ...` of the exported NeMo lines against the parameters / fields of the class it lands on,
  read from the source (ast): MegatronStrategy.__init__, MegatronMixedPrecision.__init__, the data modules,
  MegatronCommOverlapCallback.__init__, GPTConfig + Megatron-Core's TransformerConfig / OptimizerConfig /
  DistributedDataParallelConfig at the Megatron-LM commit NeMo pins (--nemo-mcore), AttnBackend's members and the
  precision factories' names.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import re
import sys
import tempfile
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.config import ParallelConfig  # noqa: E402
from planner.errors import SpecError  # noqa: E402
from planner.spec import load_spec  # noqa: E402
from planner.spec.cluster import compute_capability  # noqa: E402

LLAMA8B = "specs/llama3-8b-h100-fsdp-128.yaml"     # model shape of the synthetic plans (32 layers, GQA 8)


# --- plans ----------------------------------------------------------------------------------------------------------

def _plan(cfg: ParallelConfig, spec: str = LLAMA8B, **extra) -> dict:
    sol = {"config": cfg.as_dict(), "spec": spec, "precision": "bf16", "seq_length": 8192, "num_layers": 32,
           "pipeline_engine": "megatron",
           "overlap": {"grad_reduce": True, "param_gather": True, "p2p": True, "tp_comm": True, "bucket_size": None}}
    sol.update(extra)
    return sol


def synthetic_plans() -> dict[str, dict]:
    P = ParallelConfig
    return {
        "interleaved-tp2-pp4-v2": _plan(P(2, 4, 4, 1, 8, "interleaved", 2, "selective", 1, True)),
        "interleaved-no-p2p-overlap": _plan(P(2, 4, 4, 1, 8, "interleaved", 2, "none", 1, True),
                                            overlap={"grad_reduce": True, "param_gather": False, "p2p": False,
                                                     "tp_comm": False, "bucket_size": 50_000_000}),
        "interleaved-uneven-first-last": _plan(P(1, 4, 8, 1, 8, "interleaved", 2, "none", 1, False, 6, 6)),
        "1f1b-uneven-first-last": _plan(P(2, 4, 4, 1, 8, "1f1b", 1, "full", 1, True, 7, 7)),
        "1f1b-account-embedding-loss": _plan(P(2, 4, 4, 1, 8, "1f1b", 1, "none", 1, True, None, None, True, True),
                                             num_layers=30),
        "interleaved-account-embedding-loss": _plan(P(8, 4, 4, 1, 8, "interleaved", 2, "full", 1, True, None, None,
                                                      True, True), num_layers=126,
                                                    spec="specs/llama3-405b-h100-fsdp-512.yaml"),
        "v-zb-pp4": _plan(P(1, 4, 8, 1, 8, "v-zb", 2, "none", 1, False)),
        "zb-h1-pp4": _plan(P(1, 4, 8, 1, 8, "zb-h1", 1, "none", 1, False)),
        "cp-ring-tp2-cp4": _plan(P(2, 1, 4, 1, 4, "1f1b", 1, "full", 1, True, cp=4), cp_comm="ring"),
        "cp-a2a-tp2-cp4": _plan(P(2, 1, 4, 1, 4, "1f1b", 1, "selective", 1, True, cp=4), cp_comm="all_to_all"),
        "zero0-ddp-pp2": _plan(P(1, 2, 8, 2, 4, "1f1b", 1, "none", 0, False)),
        "fp8-delayed-tp2": _plan(P(2, 1, 8, 1, 4, "1f1b", 1, "none", 1, True), precision="fp8", fp8_recipe="delayed"),
        "fp8-tensorwise-param-gather": _plan(P(2, 2, 8, 1, 4, "1f1b", 1, "none", 1, True), precision="fp8",
                                             fp8_recipe="tensorwise", fp8_param_gather=True),
        "fp16-tp4-unfused-v100": _plan(P(4, 2, 4, 1, 8, "1f1b", 1, "none", 1, True), precision="fp16",
                                       attention="unfused", spec="specs/llama2-7b-v100-het-128.yaml"),
        "attention-cudnn-grad-fp32": _plan(P(4, 1, 8, 1, 4, "1f1b", 1, "none", 1, True), attention_backend="cudnn",
                                           grad_reduce_in_fp32=True),
        "fsdp-zero3-dp64": _plan(P(1, 1, 64, 2, 2, "1f1b", 1, "selective", 3, False), compile_loss=True),
        "hsdp-zero3-shard8": _plan(P(1, 1, 64, 2, 2, "1f1b", 1, "full", 3, False, dp_shard=8)),
        "fsdp-tp2-sp-async-tp": _plan(P(2, 1, 32, 1, 4, "1f1b", 1, "selective", 3, True)),
        "fsdp-tp2-pp4-interleaved": _plan(P(2, 4, 8, 1, 8, "interleaved", 2, "full", 3, True)),
        "fsdp-pp4-1f1b-m2": _plan(P(1, 4, 16, 1, 2, "1f1b", 1, "full", 3, False)),
        "fsdp-pp4-gpipe-m2": _plan(P(1, 4, 16, 1, 2, "gpipe", 1, "full", 3, False)),
        "fsdp-pp4-v-zb": _plan(P(1, 4, 16, 1, 8, "v-zb", 2, "full", 3, False)),
        "fsdp-cp2-ring": _plan(P(1, 1, 32, 1, 2, "1f1b", 1, "full", 3, False, cp=2), cp_comm="ring"),
        "fsdp-fp8-all-gather": _plan(P(1, 1, 64, 2, 2, "1f1b", 1, "none", 3, False), precision="fp8",
                                     fsdp_float8_all_gather=True),
        "fsdp-fp8-tp2-sp": _plan(P(2, 1, 32, 1, 4, "1f1b", 1, "none", 3, True), precision="fp8"),
        "fsdp-eager-fp32": _plan(P(1, 1, 64, 1, 2, "1f1b", 1, "full", 3, False), precision="fp32", kernels="eager"),
        "ddp-torchtitan-dp8": _plan(P(1, 1, 8, 2, 4, "1f1b", 1, "none", 0, False)),
        "zero2-deepspeed-fp16": _plan(P(1, 1, 16, 2, 4, "1f1b", 1, "full", 2, False), precision="fp16"),
        "zero3-deepspeed-bf16": _plan(P(1, 1, 16, 2, 4, "1f1b", 1, "none", 3, False)),
    }


def all_plans(only: str | None) -> dict[str, tuple[dict, str | None]]:
    from planner.solution import load_solution
    out = {}
    for f in sorted((ROOT / "solutions").glob("*.yaml")):
        out[f.stem] = (load_solution(str(f)), str(f))
    for name, sol in synthetic_plans().items():
        out[name] = (sol, None)
    return {k: v for k, v in out.items() if not only or re.search(only, k)}


def _spec_of(sol: dict, file: str | None):
    from planner.solution import solution_spec_path
    path = solution_spec_path(sol, file) if file else str(ROOT / sol["spec"])
    return load_spec(path)


# --- Megatron-LM ----------------------------------------------------------------------------------------------------

def check_megatron(sol: dict, file: str | None, repo: Path) -> str:
    from planner.export import launch_env, megatron_args, split_megatron_args
    spec = _spec_of(sol, file)
    gpu = spec.cluster.gpu.type
    flags, _ = split_megatron_args(megatron_args(sol, file, gpu))
    m = spec.model
    layers = int(sol.get("num_layers") or m.num_layers)
    seq = int(sol.get("seq_length") or spec.training.seq_length)
    argv = ["pretrain_gpt.py", "--num-layers", str(layers), "--hidden-size", str(m.hidden_size),
            "--num-attention-heads", str(m.num_attention_heads), "--seq-length", str(seq),
            "--max-position-embeddings", str(max(seq, m.max_position_embeddings)), "--train-iters", "10",
            "--lr", "1e-4"]
    if m.ffn_hidden_size:
        argv += ["--ffn-hidden-size", str(m.ffn_hidden_size)]
    if m.num_kv_heads and m.num_kv_heads != m.num_attention_heads:
        argv += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
    for f in flags:
        argv += f.split()
    c = sol["config"]
    world = c["tp"] * c["pp"] * c["dp"] * c.get("cp", 1)
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world)}
    for assign in launch_env(ParallelConfig.from_dict(c).as_dict(), sol.get("pipeline_engine", "megatron"), gpu):
        k, v = assign.split("=", 1)
        env[k] = v
    saved = {k: os.environ.get(k) for k in [*env, "CUDA_DEVICE_MAX_CONNECTIONS"]}
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    os.environ.update(env)
    import megatron.training.arguments as A
    from megatron.training.argument_utils import core_transformer_config_from_args
    cc = compute_capability(gpu)
    A.get_device_arch_version = lambda: cc[0]        # the only CUDA query validate_args makes for these flags
    err, out = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            args = A.parse_args(ignore_unknown_args=False)
            args = A.validate_args(args)
            config = core_transformer_config_from_args(args)
        wrong = _megatron_meaning(sol, args, config, layers, gpu)
        return ("FAIL meaning: " + "; ".join(wrong)) if wrong else "OK " + " ".join(flags)
    except SystemExit:
        return "FAIL parse_args: " + err.getvalue().strip().splitlines()[-1]
    except Exception as e:         # an assert of validate_args / TransformerConfig
        return f"FAIL {type(e).__name__}: {e}"
    finally:
        sys.argv = old
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _megatron_meaning(sol: dict, args, config, layers: int, gpu: str) -> list[str]:
    """What the parsed and validated arguments say against what the plan costed: '' lines where they differ."""
    from planner.export import grads_in_fp32
    cfg = ParallelConfig.from_dict(sol["config"])
    ov = sol.get("overlap") or {}
    precision = sol.get("precision") or "bf16"
    interleaved = cfg.schedule == "interleaved" and cfg.vpp > 1
    want = {
        "tensor_model_parallel_size": cfg.tp, "pipeline_model_parallel_size": cfg.pp,
        "context_parallel_size": cfg.cp, "data_parallel_size": cfg.dp, "micro_batch_size": cfg.micro_batch_size,
        "global_batch_size": cfg.global_batch_size, "sequence_parallel": cfg.sequence_parallel,
        "virtual_pipeline_model_parallel_size": cfg.vpp if interleaved else None,
        "recompute_granularity": None if cfg.recompute == "none" else cfg.recompute,
        "use_distributed_optimizer": cfg.zero >= 1,
        "bf16": precision in ("bf16", "fp8"), "fp16": precision == "fp16",
        "fp8": "hybrid" if precision == "fp8" else None,
        # the plan's gradient buffer (costs/memory.py grad_buffer_bytes): fp32 only where the plan says so
        "accumulate_allreduce_grads_in_fp32": grads_in_fp32(sol, precision),
    }
    if cfg.cp > 1:
        from planner.costs.context_parallel import MEGATRON_CP_COMM
        want["cp_comm_type"] = MEGATRON_CP_COMM[sol.get("cp_comm", "ring")]
    if ov and sol.get("pipeline_engine", "megatron") == "megatron":
        want["overlap_grad_reduce"] = bool(ov.get("grad_reduce"))
        want["overlap_param_gather"] = bool(ov.get("grad_reduce") and ov.get("param_gather") and cfg.zero >= 1)
        want["tp_comm_overlap"] = bool(ov.get("tp_comm") and cfg.sequence_parallel and cfg.tp > 1)
        if interleaved and cfg.pp > 1:
            want["overlap_p2p_comm"] = bool(ov.get("p2p", True))
    out = []
    for k, v in want.items():
        got = getattr(args, k)
        if isinstance(got, list) and k == "cp_comm_type":
            got = got[0] if len(set(got)) == 1 else got
        if got != v and not (v is None and got in (None, False)):
            out.append(f"args.{k} = {got!r}, the plan has {v!r}")
    if cfg.pp > 1 and cfg.schedule not in ("zb-h1", "v-min", "v-half", "v-zb"):     # the fork's splits not checked
        from megatron.core.transformer.transformer_block import get_num_layers_to_build
        chunks = cfg.vpp if interleaved else 1
        built = tuple(tuple(get_num_layers_to_build(config, vp_stage=k if interleaved else None, pp_rank=r)
                            for k in range(chunks)) for r in range(cfg.pp))
        planned = cfg.chunk_layers(layers)
        if built != planned:
            out.append(f"layers per rank and chunk {built}, the plan has {planned}")
    return out


# --- torchtitan -----------------------------------------------------------------------------------------------------

def _type_ok(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if hint is typing.Any:
        return True
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (inner,) = typing.get_args(hint) or (typing.Any,)
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _fqn_generator(repo: Path):
    """torchtitan's generate_llm_fqn_per_model_part, run from its source (the module imports tensorboard)."""
    src = (repo / "torchtitan/distributed/pipeline_parallel.py").read_text()
    fn = next(n for n in ast.parse(src).body
              if isinstance(n, ast.FunctionDef) and n.name == "generate_llm_fqn_per_model_part")
    ns: dict = {}
    exec(compile(ast.Module([fn], []), "pipeline_parallel.py", "exec"), ns)
    return ns["generate_llm_fqn_per_model_part"]


def check_torchtitan(sol: dict, file: str | None, repo: Path) -> str:
    from dataclasses import is_dataclass

    import tomllib

    from planner.export import torchtitan_toml
    text = torchtitan_toml(sol, file)
    from torch.distributed.pipelining.schedules import get_schedule_class
    from torchtitan.config import ConfigManager, JobConfig
    from torchtitan.distributed.parallel_dims import ParallelDims
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            job = ConfigManager().parse_args(["--job.config_file", f.name])
    except (Exception, SystemExit) as e:
        return f"FAIL ConfigManager: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        os.unlink(f.name)
    data = tomllib.loads(text)
    bad = []

    def walk(cls, table, where):
        hints = typing.get_type_hints(cls)
        for k, v in table.items():
            h = hints[k]
            if is_dataclass(h) and isinstance(v, dict):
                walk(h, v, f"{where}.{k}")
            elif not _type_ok(v, h):
                bad.append(f"{where}.{k} = {v!r} is not {h}")
    walk(JobConfig, data, "")
    if bad:
        return "FAIL types: " + "; ".join(bad)
    p, t = job.parallelism, job.training
    c = sol["config"]
    world = c["tp"] * c["pp"] * c["dp"] * c.get("cp", 1)
    try:
        dims = ParallelDims(dp_shard=p.data_parallel_shard_degree, dp_replicate=p.data_parallel_replicate_degree,
                            cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                            ep=1, etp=1, world_size=world)
    except AssertionError as e:
        return f"FAIL ParallelDims: {e}"
    if t.seq_len % dims.seq_len_divisor:                       # models/llama3/infra/parallelize.py
        return f"FAIL parallelize.py: seq_len {t.seq_len} % seq_len_divisor {dims.seq_len_divisor}"
    if p.enable_async_tensor_parallel and not (job.compile.enable and "model" in job.compile.components):
        return "FAIL tensor_parallel.py maybe_enable_async_tp: Async TP requires 'model' in compile.components"
    ac = job.activation_checkpoint                              # distributed/activation_checkpoint.py
    if ac.mode not in ("none", "full", "selective") or (
            ac.mode == "selective" and not (ac.selective_ac_option == "op" or ac.selective_ac_option.isdigit())):
        return f"FAIL activation_checkpoint.py: mode {ac.mode!r}, selective_ac_option {ac.selective_ac_option!r}"
    if dims.cp > 1:
        from torch.distributed.tensor.experimental._attention import set_rotate_method
        try:
            set_rotate_method(p.context_parallel_rotate_method)     # torch's own check of the name
        except Exception as e:
            return f"FAIL set_rotate_method: {e}"
    batch_degree = dims.dp_replicate * dims.dp_shard          # train.py: the "batch" mesh
    if t.global_batch_size % (t.local_batch_size * batch_degree):
        return f"FAIL train.py: global batch {t.global_batch_size} % ({t.local_batch_size} * {batch_degree})"
    if p.pipeline_parallel_degree > 1:
        sched = get_schedule_class(p.pipeline_parallel_schedule)
        from torch.distributed.pipelining.schedules import PipelineScheduleSingle
        single = issubclass(sched, PipelineScheduleSingle)
        if t.local_batch_size % p.pipeline_parallel_microbatch_size:
            return "FAIL pipeline_parallel.py: local_batch_size % pipeline_parallel_microbatch_size"
        # the schedules' own constructor checks (torch/distributed/pipelining/schedules.py of the running torch):
        # Schedule1F1B needs n_microbatches >= stages, ScheduleInterleaved1F1B a multiple of its rounds
        m = t.local_batch_size // p.pipeline_parallel_microbatch_size
        rounds = max(1, m // dims.pp)
        if sched.__name__ == "Schedule1F1B" and m < dims.pp:
            return f"FAIL Schedule1F1B: Number of microbatches ({m}) must be >= the number of stages ({dims.pp})"
        if sched.__name__ == "ScheduleInterleaved1F1B" and m % rounds:
            return f"FAIL ScheduleInterleaved1F1B: {m} microbatches not a multiple of {rounds} rounds"
        layers = int(sol["num_layers"])
        first, last = (p.pipeline_parallel_first_stage_less_layers, p.pipeline_parallel_last_stage_less_layers)
        lps = p.pipeline_parallel_layers_per_stage
        if lps is not None:
            n = -(-(layers + first + last) // lps)
            if n % dims.pp or (single and n // dims.pp != 1) or (not single and n // dims.pp < 2):
                return f"FAIL pipeline_parallel.py: {n} virtual stages for pp {dims.pp} ({sched.__name__})"
        else:
            n = dims.pp * (1 if single else 2)
        parts = p.module_fqns_per_model_part
        if parts is None:
            try:
                parts = _fqn_generator(repo)(n, layers, first, last)
            except ValueError as e:
                return f"FAIL generate_llm_fqn_per_model_part: {e}"
        got = [x for part in parts for x in part if x.startswith("layers.")]
        if got != [f"layers.{i}" for i in range(layers)] or len(parts) % dims.pp:
            return f"FAIL split: {len(parts)} parts, layers {len(got)} of {layers} in order"
    note = ""
    if "quantize.linear.float8" in job.model.converters and dims.tp > 1:
        # models/llama3/infra/parallelize.py:77 tests `"float8" in job_config.model.converters`
        float8_tp = "float8" in job.model.converters
        said = "TP all-gathers stay bf16" in text
        if float8_tp == said:
            return f"FAIL meaning: float8 TP {float8_tp}, the export {'says' if said else 'does not say'} bf16 gathers"
        note = " (float8 TP off in torchtitan: noted)"
    return "OK " + " ".join(f"{k}={v}" for k, v in data["parallelism"].items() if not isinstance(v, list)) + note


# --- DeepSpeed ------------------------------------------------------------------------------------------------------

def _string_constants(path: Path) -> set[str]:
    """The string values of a module's top-level NAME = "..." assignments."""
    return {n.value.value for n in ast.parse(path.read_text()).body if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}


def check_deepspeed(sol: dict, file: str | None, repo: Path) -> str:
    from planner.export import deepspeed_config
    cfg = deepspeed_config(sol, file)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig
    dp = sol["config"]["dp"]
    dist.get_rank = lambda *a, **k: 0
    dist.get_world_size = lambda *a, **k: dp
    # the top level is read key by key (dict.get), not by a model that forbids extras: every key must be one of
    # deepspeed/runtime/constants.py's names; the same for the activation_checkpointing block
    top = _string_constants(repo / "deepspeed/runtime/constants.py") | {"zero_optimization", "activation_checkpointing"}
    acp = _string_constants(repo / "deepspeed/runtime/activation_checkpointing/config.py")
    unknown = [k for k in cfg if k not in top] + [
        f"activation_checkpointing.{k}" for k in cfg.get("activation_checkpointing", {}) if k not in acp]
    if unknown:
        return f"FAIL unknown keys {unknown}"
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ds = DeepSpeedConfig(cfg)
    except Exception as e:
        return f"FAIL DeepSpeedConfig: {type(e).__name__}: {' '.join(str(e).split())}"
    # the gradient reduction's dtype DeepSpeed runs (engine.py communication_data_type: the config's, else the 16-bit
    # model dtype) against the plan's: fp32 for ZeRO-3 (costs/fsdp.py REDUCE_BYTES), else grads_in_fp32
    import torch

    from planner.export import grads_in_fp32
    precision = sol.get("precision", "bf16")
    runs = ds.communication_data_type or (torch.float16 if ds.float16_config.enabled else
                                          torch.bfloat16 if ds.bfloat16_config.enabled else torch.float32)
    planned = torch.float32 if ds.zero_optimization_stage == 3 or grads_in_fp32(sol, precision) else \
        {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    if runs != planned:
        return f"FAIL meaning: DeepSpeed reduces gradients in {runs}, the plan charged {planned}"
    return (f"OK stage {ds.zero_optimization_stage} world {ds.world_size} batch {ds.train_batch_size} = "
            f"{ds.train_micro_batch_size_per_gpu} x {ds.gradient_accumulation_steps} x {ds.world_size}")


# --- NeMo 2.0 -------------------------------------------------------------------------------------------------------

def _class_names(path: Path, cls: str, init: bool) -> set[str]:
    """Parameters of cls.__init__ (init) or its annotated fields, read from the source."""
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    if init:
        fn = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        return {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    return {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def _module_defs(path: Path) -> set[str]:
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def nemo_names(nemo: Path, mcore: Path) -> dict[str, set[str]]:
    mc = mcore / "megatron/core"
    tc = _class_names(mc / "transformer/transformer_config.py", "TransformerConfig", False)
    tc |= _class_names(mc / "model_parallel_config.py", "ModelParallelConfig", False)
    gpt = _class_names(nemo / "nemo/collections/llm/gpt/model/base.py", "GPTConfig", False)
    data = (_class_names(nemo / "nemo/collections/llm/gpt/data/mock.py", "MockDataModule", True)
            & _class_names(nemo / "nemo/collections/llm/gpt/data/pre_training.py", "PreTrainingDataModule", True))
    enums = ast.parse((mc / "transformer/enums.py").read_text())
    attn = next(n for n in ast.walk(enums) if isinstance(n, ast.ClassDef) and n.name == "AttnBackend")
    return {
        "recipe.trainer.strategy": _class_names(
            nemo / "nemo/lightning/pytorch/strategies/megatron_strategy.py", "MegatronStrategy", True),
        "recipe.trainer.strategy.ddp": _class_names(
            mc / "distributed/distributed_data_parallel_config.py", "DistributedDataParallelConfig", False),
        "recipe.trainer.plugins": _class_names(
            nemo / "nemo/lightning/pytorch/plugins/mixed_precision.py", "MegatronMixedPrecision", True),
        # nl.Trainer is lightning.pytorch's Trainer (not in NeMo's tree): its __init__ takes strategy, plugins, callbacks
        "recipe.trainer": {"strategy", "plugins", "callbacks"},
        "recipe.data": data,
        "recipe.model.config": tc | gpt,
        "recipe.optim.config": _class_names(mc / "optimizer/optimizer_config.py", "OptimizerConfig", False),
        "MegatronCommOverlapCallback": _class_names(
            nemo / "nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py", "MegatronCommOverlapCallback", True),
        "AttnBackend": {t.id for n in attn.body if isinstance(n, ast.Assign) for t in n.targets},
        "factories": _module_defs(nemo / "nemo/collections/llm/recipes/precision/mixed_precision.py"),
    }


def check_nemo(sol: dict, file: str | None, names: dict[str, set[str]]) -> str:
    from planner.export import NEMO, megatron_args
    lines = [a[len(NEMO):] for a in megatron_args(sol, file) if a.startswith(NEMO)]
    bad, seen = [], 0
    for line in lines:
        code = line.split("  #")[0]
        for stmt in code.split("; "):
            lhs = stmt.split(" = ")[:-1] if " = " in stmt else []
            for target in lhs:
                obj, _, attr = target.strip().rpartition(".")
                seen += 1
                if attr not in names.get(obj, ()):
                    bad.append(f"{target.strip()}: no such field / parameter")
            for fac in re.findall(r"= (\w+)\(\)", stmt):
                seen += 1
                if fac not in names["factories"]:
                    bad.append(f"{fac}: not in mixed_precision.py")
            for member in re.findall(r"AttnBackend\.(\w+)", stmt):
                seen += 1
                if member not in names["AttnBackend"]:
                    bad.append(f"AttnBackend.{member}: no such member")
            cb = re.search(r"MegatronCommOverlapCallback, (.*)\)\)", stmt)
            if cb:
                for k in re.findall(r"(\w+)=", cb.group(1)):
                    seen += 1
                    if k not in names["MegatronCommOverlapCallback"]:
                        bad.append(f"MegatronCommOverlapCallback({k}=): no such parameter")
    return ("FAIL " + "; ".join(bad)) if bad else f"OK {seen} names"


# --- main -----------------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", type=Path, help="Megatron-LM source tree")
    ap.add_argument("--torchtitan", type=Path, help="torchtitan source tree (a commit with TOML job configs)")
    ap.add_argument("--deepspeed", type=Path, help="DeepSpeed source tree (with accelerator/)")
    ap.add_argument("--nemo", type=Path, help="NeMo source tree")
    ap.add_argument("--nemo-mcore", type=Path, help="Megatron-LM source tree at the commit NeMo pins")
    ap.add_argument("--site", type=Path, action="append", default=[], help="extra dependency directory")
    ap.add_argument("--only", help="regular expression on plan names")
    a = ap.parse_args(argv)
    import typing_extensions
    if not hasattr(typing, "override"):          # Megatron-LM @ d98e8a64 imports typing.override (Python 3.12)
        typing.override = typing_extensions.override
    for p in [*a.site, a.megatron, a.torchtitan, a.deepspeed]:
        if p:
            sys.path.append(str(p))
    names = nemo_names(a.nemo, a.nemo_mcore or a.megatron) if a.nemo else None
    checks = [("megatron", a.megatron, check_megatron), ("torchtitan", a.torchtitan, check_torchtitan),
              ("deepspeed", a.deepspeed, check_deepspeed),
              ("nemo", a.nemo, lambda s, f, _r: check_nemo(s, f, names))]
    failed = 0
    for name, (sol, file) in all_plans(a.only).items():
        for tool, repo, fn in checks:
            if repo is None:
                continue
            try:
                res = fn(sol, file, repo)
            except SpecError as e:
                res = "REFUSED " + " ".join(str(e).split())[:160]
            failed += res.startswith("FAIL")
            print(f"{name:40s} {tool:10s} {res[:400]}", flush=True)
    print(f"{failed} FAIL")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
