"""Launch arguments that realise a solution: Megatron-LM flags, torchrun per node, and the rank order.

What is printed goes into a shell, so nothing from the solution file is printed as it was read: the
configuration is parsed to integers and known words (ParallelConfig.from_dict), every mapping entry's
node, GPU and ranks to integers, host names must be RFC 1123 names, and each word is shell-quoted.
"""
from __future__ import annotations

import json
import shlex

from planner.config import (
    FORK_NEEDED,
    FORK_SCHEDULES,
    TORCHTITAN_SCHEDULES,
    V_SHAPES,
    ParallelConfig,
    torchtitan_problem,
)
from planner.errors import SpecError
from planner.spec.cluster import before_blackwell
from planner.spec.hosts import check_hostname
from planner.spec.plan import FP8_RECIPES, PRECISIONS

_WORKER_INTS = ("stage", "tp_rank", "dp_rank", "node", "gpu")

# The Megatron-LM flag of each plan setting, the one table `megatron_args` writes and `planner import megatron`
# (planner/megatron_import.py) reads; every name is an option of Megatron-LM's parser at d98e8a64
# (planner/data/megatron_flags.json, tests/test_import_megatron.py)
MEGATRON_FLAG = {
    "tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size", "cp": "--context-parallel-size",
    "cp_comm": "--cp-comm-type", "micro_batch_size": "--micro-batch-size", "global_batch_size": "--global-batch-size",
    "vpp": "--num-virtual-stages-per-pipeline-rank", "sequence_parallel": "--sequence-parallel",
    "first_stage_layers": "--decoder-first-pipeline-num-layers",
    "last_stage_layers": "--decoder-last-pipeline-num-layers",
    "account_embedding": "--account-for-embedding-in-pipeline-split",
    "account_loss": "--account-for-loss-in-pipeline-split",
    "selective": "--recompute-activations", "recompute_granularity": "--recompute-granularity",
    "recompute_method": "--recompute-method", "recompute_num_layers": "--recompute-num-layers",
    "recompute_modules": "--recompute-modules",
    "zero": "--use-distributed-optimizer", "bf16": "--bf16", "fp16": "--fp16", "fp8_format": "--fp8-format",
    "fp8_recipe": "--fp8-recipe", "fp8_param_gather": "--fp8-param-gather",
    "fp8_amax_history_len": "--fp8-amax-history-len", "fp8_amax_compute_algo": "--fp8-amax-compute-algo",
    "grad_reduce_in_fp32": "--accumulate-allreduce-grads-in-fp32", "grad_reduce_in_bf16": "--grad-reduce-in-bf16",
    "attention_backend": "--attention-backend", "transformer_impl": "--transformer-impl",
    "overlap.grad_reduce": "--overlap-grad-reduce", "overlap.bucket_size": "--ddp-bucket-size",
    "overlap.param_gather": "--overlap-param-gather", "overlap.tp_comm": "--tp-comm-overlap",
    "overlap.no_p2p": "--no-overlap-p2p-communication"}
F = MEGATRON_FLAG


def _workers(solution: dict, file: str | None) -> list[dict]:
    mapping = solution.get("mapping")
    if not isinstance(mapping, list) or not mapping:
        raise SpecError(file, "mapping", "is required: a list of {stage, tp_rank, dp_rank, node, gpu}")
    out = []
    for i, w in enumerate(mapping):
        if not isinstance(w, dict):
            raise SpecError(file, f"mapping[{i}]", "must be a mapping {stage, tp_rank, dp_rank, node, gpu}")
        row = {}
        for k in _WORKER_INTS:
            v = w.get(k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecError(file, f"mapping[{i}].{k}", f"must be a non-negative integer, got {v!r}")
            row[k] = v
        c = w.get("cp_rank", 0)
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise SpecError(file, f"mapping[{i}].cp_rank", f"must be a non-negative integer, got {c!r}")
        row["cp_rank"] = c
        row["host"] = check_hostname(w.get("host", f"node{row['node']}"), file, f"mapping[{i}].host")
        out.append(row)
    return out


def _config(solution: dict, file: str | None) -> dict:
    return ParallelConfig.from_dict(solution.get("config"), file).as_dict()


def rank_layout(solution: dict, file: str | None = None) -> list[dict]:
    """Global rank (Megatron-Core order tp-cp-dp-pp: tp fastest, then cp, then dp, then pp) -> node and local GPU."""
    cfg = _config(solution, file)
    tp, dp, cp = cfg["tp"], cfg["dp"], cfg.get("cp", 1)
    out = []
    for w in _workers(solution, file):
        rank = w["tp_rank"] + tp * (w["cp_rank"] + cp * (w["dp_rank"] + dp * w["stage"]))
        out.append({"rank": rank, "node": w["node"], "gpu": w["gpu"], "host": w["host"]})
    out.sort(key=lambda r: r["rank"])
    return out


# training.attention_backend -> Megatron-Core's --attention-backend (AttnBackend in megatron/core/transformer/enums.py,
# NVIDIA/Megatron-LM @ 01b9cb23: flash, fused, unfused, local, auto); fused is TE's cuDNN FusedAttention
MEGATRON_ATTENTION_BACKEND = {"cudnn": "fused", "flash2": "flash"}


def _attention_backend(solution: dict, file: str | None) -> str | None:
    """The solution's fused kernel (absent: None), one of the known names: a value printed into a launch file."""
    b = solution.get("attention_backend")
    if b is not None and not (isinstance(b, str) and b in MEGATRON_ATTENTION_BACKEND):
        raise SpecError(file, "attention_backend", f"has {b!r}, expected one of {list(MEGATRON_ATTENTION_BACKEND)}")
    return b


def attention_backend_args(solution: dict, file: str | None = None, gpu_type: str | None = None) -> list[str]:
    """The attention flags: for an unfused plan the unfused path the plan was costed as (Megatron-Core's
    --attention-backend unfused, Transformer Engine's UnfusedDotProductAttention; before Ampere, where Transformer
    Engine does not run, --transformer-impl local, Megatron-Core's own DotProductAttention: spec.cluster.
    fused_attention_refusal); for a fused plan --attention-backend where its spec named the kernel. None for auto: the
    plan charged FlashAttention-2's speed, and Megatron-Core's own auto (cuDNN on Hopper) can only be faster; pinning
    `flash` would slow today's stacks to match the estimate (docs/notes/gpu_h200.md, section 4)."""
    attention = solution.get("attention", "fused")
    if attention not in ("fused", "unfused"):
        raise SpecError(file, "attention", f"has {attention!r}, expected fused or unfused")
    if attention == "unfused":
        from planner.spec.cluster import AMPERE_CC, compute_capability
        cc = compute_capability(gpu_type)
        return [f"{F['transformer_impl']} local"] if cc is not None and cc < AMPERE_CC else [
            f"{F['attention_backend']} unfused"]
    b = _attention_backend(solution, file)
    if b is None:
        return []
    return [f"{F['attention_backend']} {MEGATRON_ATTENTION_BACKEND[b]}"]


# NVIDIA/Megatron-LM @ 50b073cc docs/source/api-guide/dist_optimizer.md: bytes per parameter with the distributed
# optimizer, bf16 parameters and fp32 gradients "6 + 12/d": the 2-byte parameter and the 4-byte gradient buffer stay
# whole
ZERO2_NOT_MEGATRON = ("2 shards the gradients as well as the optimizer state, which Megatron-Core's distributed "
                      "optimizer (--use-distributed-optimizer) does not: it keeps the whole gradient buffer and "
                      "reduce-scatters in place (Megatron-LM's dist_optimizer.md: 6 + 12/d bytes per parameter with "
                      "bf16 parameters and fp32 gradients), so Megatron-LM would run this plan as ZeRO-1, with the "
                      "gradient memory the plan does not charge")


def megatron_model_args(model, seq_length: int, tp: int = 1) -> list[str]:
    """The model's Megatron-LM flags (megatron/training/arguments.py @ d98e8a64), as `planner import megatron` reads
    them back: the shape, the sequence, the embedding's rows as the plan counts them (--padded-vocab-size: the
    vocabulary padded to a multiple of 128 x tp, costs.memory.padded_vocab, as Megatron-LM pads the tokenizer's;
    the unpadded size would not divide over tp ranks for e.g. GPT-2's 50257, which Megatron-Core's
    VocabUtility.vocab_range_from_global_vocab_size asserts), and the family's switches (gpt = Megatron-LM's
    defaults: GeLU, LayerNorm, learned positions, biases; llama = SwiGLU, RMSNorm, RoPE, no biases)."""
    from planner.costs.memory import padded_vocab
    out = [f"--num-layers {model.num_layers}", f"--hidden-size {model.hidden_size}",
           f"--num-attention-heads {model.num_attention_heads}", f"--ffn-hidden-size {model.ffn_hidden_size}",
           f"--seq-length {seq_length}", f"--max-position-embeddings {max(seq_length, model.max_position_embeddings)}",
           f"--padded-vocab-size {padded_vocab(model, tp)}"]
    if model.num_kv_heads != model.num_attention_heads:
        out += ["--group-query-attention", f"--num-query-groups {model.num_kv_heads}"]
    if model.family == "llama":
        out += ["--swiglu", "--normalization RMSNorm", "--position-embedding-type rope", "--disable-bias-linear"]
    if not model.tied_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    return out


MODEL_FLAGS_MISSING = ("# the model's flags (--num-layers, --hidden-size, --num-attention-heads, --ffn-hidden-size, "
                       "--seq-length, --max-position-embeddings, the vocabulary and the family's switches) are not "
                       "written: the spec this solution names could not be read; add them before running")


def megatron_args(solution: dict, file: str | None = None, gpu_type: str | None = None, model=None,
                  seq_length: int | None = None) -> list[str]:
    """Megatron-LM's flags for the plan, then its comment lines ('#'); gpu_type: the cluster's GPU type (None:
    unknown), for the launch environment (launch_env); model and seq_length (the spec's): the model's flags first
    (megatron_model_args), so that the line runs as written; None: the parallelism alone."""
    c = _config(solution, file)
    zero = int(c.get("zero", 0))
    if zero == 3:
        ds = deepspeed_refusal(solution, file) is None
        raise SpecError(file, "config.zero", "3 is planned as torchtitan's FSDP2 runs it (per-block all-gathers, "
                        "fp32 reduce-scatters); export it with --format torchtitan"
                        + (" or --format deepspeed (ZeRO stage 3)" if ds else ""))
    if zero == 2:
        why = deepspeed_refusal(solution, file)
        raise SpecError(file, "config.zero", ZERO2_NOT_MEGATRON + "; " + (
            "export it with --format deepspeed (DeepSpeed's ZeRO stage 2 shards both)" if why is None else
            f"DeepSpeed's ZeRO stage 2 cannot run it either ({why[0]}: {why[1]}); solve again with "
            "search.zero [1] (Megatron's distributed optimizer) or [3] (torchtitan's FSDP)"))
    args = megatron_model_args(model, seq_length, int(c['tp'])) if model is not None else []
    args += [f"{F['tp']} {c['tp']}", f"{F['pp']} {c['pp']}", f"{F['micro_batch_size']} {c['micro_batch_size']}",
             f"{F['global_batch_size']} {global_batch(c)}"]
    args += context_parallel_args(solution, c, file)
    if virtual_stages(c):
        # Megatron-LM's flag (megatron/training/arguments.py @ d98e8a64; it also asserts it, not layers per
        # virtual stage, with an uneven split); --virtual-pipeline-model-parallel-size is not an argparse flag
        args.append(f"{F['vpp']} {virtual_stages(c)}")
    args += uneven_stage_args(c)
    if c.get("sequence_parallel"):
        args.append(F["sequence_parallel"])
    rc = c.get("recompute", "none")
    if rc == "selective":
        args.append(F["selective"])
    elif rc == "mlp":
        args += [f"{F['recompute_granularity']} selective", f"{F['recompute_modules']} mlp"]
    elif rc == "full":
        args += [f"{F['recompute_granularity']} full", f"{F['recompute_method']} uniform",
                 f"{F['recompute_num_layers']} 1"]
    elif rc == "block":        # the first N layers of each model chunk (Megatron-Core recompute.py)
        args += [f"{F['recompute_granularity']} full", f"{F['recompute_method']} block",
                 f"{F['recompute_num_layers']} {int(c['recompute_layers'])}"]
    if int(c.get("zero", 0)) >= 1:
        args.append(F["zero"])
    recorded = solution.get("precision")
    precision = recorded or "bf16"
    if precision not in PRECISIONS:
        raise SpecError(file, "precision", f"has {precision!r}, expected one of {list(PRECISIONS)}")
    if precision == "fp8":
        recipe = solution.get("fp8_recipe", "delayed")
        if recipe not in FP8_RECIPES:
            raise SpecError(file, "fp8_recipe", f"has {recipe!r}, expected one of {list(FP8_RECIPES)}")
        args += fp8_args(bool(solution.get("fp8_param_gather")), recipe)
    else:
        recipe = None
    if precision in ("bf16", "fp16"):
        args.append(F[precision])          # Megatron-LM trains in fp32 without one of them
    if recorded is None:
        args.append("# precision: not in this solution (written before planner recorded 16-bit precisions); --bf16 "
                    "assumed: for an fp16 spec write --fp16 and drop --grad-reduce-in-bf16")
    args += attention_backend_args(solution, file, gpu_type)
    if solution.get("pipeline_engine", "megatron") == "megatron" and int(c.get("zero", 0)) < 3:
        # the plan's gradient buffer dtype (costs/memory.py grad_buffer_bytes): Megatron-LM @ d98e8a64
        # megatron/training/arguments.py turns fp32 accumulation on with --bf16 unless --grad-reduce-in-bf16; with
        # --fp16 the buffer is fp16 by default
        if solution.get("grad_reduce_in_fp32"):
            args.append(F["grad_reduce_in_fp32"])
        elif precision in ("bf16", "fp8"):
            args.append(F["grad_reduce_in_bf16"])
    args += overlap_args(solution.get("overlap"), c, solution.get("pipeline_engine", "megatron"))
    if solution.get("pipeline_engine", "megatron") == "megatron":
        args += nemo_recipe(solution, c, precision, recipe, file)
    args.append(environment_note(c, solution.get("pipeline_engine", "megatron"), gpu_type))
    if solution.get("pipeline_engine") == "deepspeed":
        args.append("# pipeline_engine deepspeed: planned for Megatron-DeepSpeed's GPTModelPipe on DeepSpeed's "
                    "pipeline "
                    "engine; add --deepspeed and a ds_config (the flags above are the ones it shares with Megatron-LM"
                    + ("; ZeRO 1 there is zero_optimization.stage 1, not --use-distributed-optimizer)"
                       if int(c.get("zero", 0)) >= 1 else ")"))
    if c.get("schedule") in FORK_SCHEDULES:
        args.append(f"# schedule {c['schedule']}: {FORK_NEEDED}")
    if scatter_gather_unmet(solution, c):
        args.append("# p2p: this plan was costed with training.p2p_scatter_gather (Megatron-LM before 2023 split "
                    "each pipeline message over the tensor group); Megatron-Core sends the whole [s, b, h] tensor "
                    "without --sequence-parallel, so its p2p time runs longer than planned (tp x the bytes)")
    return args


def scatter_gather_unmet(solution: dict, c: dict) -> bool:
    """A megatron-engine plan costed with 1/tp p2p messages that today's Megatron-Core does not send (no sequence
    parallelism to split them): solution.p2p_scatter_gather true, pp > 1, tp > 1, no SP."""
    return (solution.get("pipeline_engine", "megatron") == "megatron" and bool(solution.get("p2p_scatter_gather"))
            and int(c.get("pp", 1)) > 1 and int(c.get("tp", 1)) > 1 and not c.get("sequence_parallel"))


def global_batch(c: dict) -> int:
    """Sequences per iteration of a config dict: micro-batch x micro-batches x data-parallel replicas."""
    return c["micro_batch_size"] * c["num_microbatches"] * c["dp"]


def virtual_stages(c: dict) -> int | None:
    """Model chunks per pipeline rank of Megatron-Core's interleaved schedule; None for any other schedule."""
    return int(c["vpp"]) if c.get("schedule") == "interleaved" and int(c.get("vpp", 1)) > 1 else None


def context_parallel_args(solution: dict, c: dict, file: str | None) -> list[str]:
    """Megatron-LM @ d98e8a64 (megatron/training/arguments.py): --context-parallel-size and --cp-comm-type (p2p: the
    ring, a2a: all-to-all); the plan's exchange is the solution's `cp_comm`. Nothing for cp = 1."""
    cp = int(c.get("cp", 1))
    if cp == 1:
        return []
    return [f"{F['cp']} {cp}", f"{F['cp_comm']} {megatron_cp_comm(solution, file)}"]


def megatron_cp_comm(solution: dict, file: str | None) -> str:
    """Megatron-Core's cp_comm_type for the solution's `cp_comm` (context parallel plans)."""
    from planner.costs.context_parallel import MEGATRON_CP_COMM
    mode = solution.get("cp_comm", "ring")
    if not (isinstance(mode, str) and mode in MEGATRON_CP_COMM):     # a list in the file: not hashable
        raise SpecError(file, "cp_comm", f"has {mode!r}, expected one of {list(MEGATRON_CP_COMM)}")
    return MEGATRON_CP_COMM[mode]


def uneven_stage_args(c: dict) -> list[str]:
    """Megatron-Core's uneven pipeline split (Megatron-LM @ d98e8a64, megatron/training/arguments.py:
    --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers; the middle ranks share the rest;
    --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split). Nothing for an even split."""
    out = []
    if c.get("first_stage_layers") is not None:
        out.append(f"{F['first_stage_layers']} {int(c['first_stage_layers'])}")
    if c.get("last_stage_layers") is not None:
        out.append(f"{F['last_stage_layers']} {int(c['last_stage_layers'])}")
    if c.get("account_embedding"):
        out.append(F["account_embedding"])
    if c.get("account_loss"):
        out.append(F["account_loss"])
    return out


def fp8_args(param_gather: bool = False, recipe: str = "delayed") -> list[str]:
    """Transformer Engine FP8 as planned (docs/notes/compute.md, "FP8"): bf16 weights and activations, the layers'
    GEMMs in fp8, E4M3 forward / E5M2 gradients ('hybrid'), delayed scaling over a 1024-step amax history. Flag
    names: Megatron-LM @ d98e8a6, megatron/core/transformer/transformer_config.py (fp8 -> --fp8-format, fp8_recipe,
    fp8_amax_history_len, fp8_amax_compute_algo; megatron/training/argument_utils.py turns fields into flags);
    values: NeMo's bf16_with_fp8_mixed (NVIDIA/NeMo @ 0a07447, nemo/collections/llm/recipes/precision/
    mixed_precision.py), which also turns on fp8_param_gather: the plan does not (its memory keeps the bf16 weights
    beside TE's cached fp8 copies), so the NeMo lines turn it off -- unless the plan's training.fp8_param_gather
    says otherwise (then --fp8-param-gather and True; nemo_precision).
    recipe tensorwise (training.fp8_recipe): per-tensor current scaling, --fp8-recipe tensorwise (Megatron-LM @
    d98e8a6 transformer_config.py fp8_recipe) with no amax history; NeMo's bf16_with_fp8_current_scaling_mixed
    (NVIDIA/NeMo @ 8cfedd72, same file) keeps the first and the last transformer layer in bf16 unless told
    otherwise, which the plan does not (every layer's GEMMs in fp8, as Megatron-Bridge's performance recipes run it:
    first_last_layers_bf16 = False), and turns on fp8_param_gather."""
    pg = [F["fp8_param_gather"]] if param_gather else []
    if recipe == "tensorwise":
        return [F["bf16"], f"{F['fp8_format']} hybrid", f"{F['fp8_recipe']} tensorwise", *pg]
    return [F["bf16"], f"{F['fp8_format']} hybrid", f"{F['fp8_recipe']} delayed", f"{F['fp8_amax_history_len']} 1024",
            f"{F['fp8_amax_compute_algo']} max", *pg]


def overlap_args(overlap: dict | None, c: dict, engine: str) -> list[str]:
    """Megatron-LM flags for the plan's training.overlap (Megatron-LM@d98e8a64, megatron/training/arguments.py and
    README.md: --overlap-grad-reduce, --overlap-param-gather (distributed optimizer only), --ddp-bucket-size,
    --tp-comm-overlap (needs --sequence-parallel), and p2p overlap on by default with the interleaved schedule,
    --no-overlap-p2p-communication to turn it off). Only flags that take effect for this config; none for the
    deepspeed engine or a solution written before the key existed (no `overlap`)."""
    if not overlap or engine == "deepspeed":
        return []
    out = []
    if overlap.get("grad_reduce"):
        out.append(F["overlap.grad_reduce"])
        if overlap.get("bucket_size"):
            out.append(f"{F['overlap.bucket_size']} {int(overlap['bucket_size'])}")
    if overlap.get("param_gather") and overlap.get("grad_reduce") and int(c.get("zero", 0)) >= 1:
        out.append(F["overlap.param_gather"])
    if overlap.get("tp_comm") and c.get("sequence_parallel") and c["tp"] > 1:
        out.append(F["overlap.tp_comm"])
    if c.get("schedule") == "interleaved" and c["pp"] > 1 and not overlap.get("p2p", True):
        out.append(F["overlap.no_p2p"])
    return out


# --- NeMo 2.0: the same plan as settings of a NeMo pretrain recipe (NVIDIA/NeMo @ 8cfedd72) -------------------------
# NVIDIA/NeMo @ 8cfedd7203462cb251a914e700e5605444277561: recipes (nemo/collections/llm/recipes/llama3_70b.py, ...)
# build a run.Partial whose trainer.strategy is a MegatronStrategy (nemo/lightning/pytorch/strategies/
# megatron_strategy.py __init__), data a MockDataModule / PreTrainingDataModule (micro_batch_size, global_batch_size,
# seq_length), trainer.plugins a MegatronMixedPrecision (nemo/lightning/pytorch/plugins/mixed_precision.py) and
# optim.config a Megatron-Core OptimizerConfig. Each recipe sets its own layout (llama3_70b: tp 4, pp 4, vpp 5, cp 2,
# mbs 1, gbs 512), so every setting the plan depends on is written, with its value.
NEMO = "# NeMo 2.0 recipe: "
NEMO_HEADER = ("# NeMo 2.0 recipe (NVIDIA/NeMo @ 8cfedd72): the plan's settings, after the recipe's own (run: "
               "nemo_run; the plugins: nemo.collections.llm.recipes.precision.mixed_precision and "
               "nemo.lightning.pytorch.plugins; MegatronCommOverlapCallback: "
               "nemo.lightning.pytorch.callbacks.megatron_comm_overlap)")
# the plan's precision -> the recipe's precision plugin: mixed_precision.py's factories (fp8: the recipe's own
# factory, training.fp8_recipe delayed or tensorwise); fp32: the plugin's own "32" (its Literal precision)
NEMO_PLUGINS = {"bf16": "bf16_mixed()", "fp16": "fp16_mixed()",
                "fp32": 'run.Config(MegatronMixedPrecision, precision="32")',
                "delayed": "bf16_with_fp8_mixed()", "tensorwise": "bf16_with_fp8_current_scaling_mixed()"}


def _literal(v) -> str:
    """A Python literal for a value the NeMo lines assign (strings in double quotes, as NeMo's recipes write them)."""
    if isinstance(v, list):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    return f'"{v}"' if isinstance(v, str) else repr(v)


def _assign(prefix: str, values: dict) -> str:
    return "; ".join(f"{prefix}.{k} = {_literal(v)}" for k, v in values.items())


def nemo_strategy(c: dict) -> dict:
    """MegatronStrategy's layout arguments for the plan (nemo/lightning/pytorch/strategies/megatron_strategy.py
    __init__): Megatron-LM's --num-virtual-stages-per-pipeline-rank is virtual_pipeline_model_parallel_size (None
    without the interleaved schedule)."""
    return {"tensor_model_parallel_size": c["tp"], "pipeline_model_parallel_size": c["pp"],
            "virtual_pipeline_model_parallel_size": virtual_stages(c),
            "context_parallel_size": int(c.get("cp", 1)), "sequence_parallel": bool(c.get("sequence_parallel"))}


def nemo_pipeline_split(c: dict) -> dict:
    """MegatronStrategy's pipeline split for pp > 1 (empty for pp = 1), all four, as recipes set them too
    (llama31_405b.py account_for_embedding_in_pipeline_split, deepseek_v3.py num_layers_in_first_pipeline_stage):
    Megatron-LM's --decoder-first/last-pipeline-num-layers are num_layers_in_first/last_pipeline_stage."""
    if c["pp"] == 1:
        return {}
    first, last = c.get("first_stage_layers"), c.get("last_stage_layers")
    return {"num_layers_in_first_pipeline_stage": None if first is None else int(first),
            "num_layers_in_last_pipeline_stage": None if last is None else int(last),
            "account_for_embedding_in_pipeline_split": bool(c.get("account_embedding")),
            "account_for_loss_in_pipeline_split": bool(c.get("account_loss"))}


def nemo_data(c: dict, solution: dict) -> str:
    """The batch (Megatron-LM's --micro-batch-size / --global-batch-size) and the sequence length, which NeMo sets on
    the data module and the model config (recipes/llama3_8b_128k.py)."""
    out = _assign("recipe.data", {"micro_batch_size": c["micro_batch_size"], "global_batch_size": global_batch(c)})
    seq = solution.get("seq_length")
    if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0:
        out += f"; recipe.data.seq_length = recipe.model.config.seq_length = {seq}"
    return out


def grads_in_fp32(solution: dict, precision: str) -> bool:
    """Whether the plan's gradient buffer and reduction are fp32 (training.grad_reduce_in_fp32, or an fp32 plan);
    else 16-bit, as its memory and data-parallel time charge them (costs/memory.py grad_buffer_bytes)."""
    return bool(solution.get("grad_reduce_in_fp32")) or precision == "fp32"


def nemo_precision(solution: dict, precision: str, recipe: str | None) -> str:
    """The precision plugin and its gradient dtype. bf16_mixed() (and the fp8 factories built on it) set
    grad_reduce_in_fp32=True (recipes/precision/mixed_precision.py), and MegatronStrategy copies the plugin's dtype
    config over recipe.trainer.strategy.ddp (megatron_strategy.py: update_config_with_dtype_overrides), so the
    plugin's value is the one that runs: set after the assignment, as the performance recipes do (llama3_70b.py
    pretrain_performance_optimizations). fp8: fp8_param_gather as planned (the factories turn it on), and the
    current-scaling factory's first and last bf16 layers off (the plan runs every layer in fp8)."""
    plugin = NEMO_PLUGINS[recipe if precision == "fp8" else precision]
    out = f"recipe.trainer.plugins = {plugin}; " + _assign("recipe.trainer.plugins", {
        "grad_reduce_in_fp32": grads_in_fp32(solution, precision)})
    if precision == "fp8":
        extra = {"first_last_layers_bf16": False} if recipe == "tensorwise" else {}
        out += "; " + _assign("recipe.trainer.plugins", {**extra,
                                                         "fp8_param_gather": bool(solution.get("fp8_param_gather"))})
    return out


def nemo_model(solution: dict, c: dict, file: str | None) -> str:
    """Recompute (TransformerConfig recompute_granularity / method / num_layers / modules: None where the plan
    recomputes nothing, as recipes may set it), the distributed optimizer, and the context-parallel exchange and the
    attention kernel where the plan names them (same enums as Megatron-LM's flags; an unfused plan:
    AttnBackend.unfused)."""
    rc = c.get("recompute", "none")
    model = {"recompute_granularity": None if rc == "none" else "selective" if rc == "mlp" else
             "full" if rc == "block" else rc}
    if rc == "full":
        model.update(recompute_method="uniform", recompute_num_layers=1)
    elif rc == "block":
        model.update(recompute_method="block", recompute_num_layers=int(c["recompute_layers"]))
    elif rc in ("selective", "mlp"):
        # named, not left to TransformerConfig's default (core_attn): a recipe may set its own list; and a recipe's
        # full-recompute method / layer count cleared (e.g. NeMo @ 8cfedd72 qwen3_32b.py sets uniform 1), which
        # TransformerConfig refuses with selective ('recompute_num_layers must be None', Megatron-LM d98e8a64)
        model.update(recompute_method=None, recompute_num_layers=None,
                     recompute_modules=["mlp"] if rc == "mlp" else ["core_attn"])
    if int(c.get("cp", 1)) > 1:
        model["cp_comm_type"] = megatron_cp_comm(solution, file)
    out = _assign("recipe.model.config", model)
    backend = "unfused" if solution.get("attention") == "unfused" else _attention_backend(solution, file)
    if backend:
        enum = MEGATRON_ATTENTION_BACKEND.get(backend, backend)
        out += f"; recipe.model.config.attention_backend = AttnBackend.{enum}"
    return out + "; " + _assign("recipe.optim.config", {"use_distributed_optimizer": int(c.get("zero", 0)) >= 1})


def nemo_overlap(overlap: dict | None, c: dict) -> str | None:
    """training.overlap in NeMo: MegatronCommOverlapCallback (nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py)
    sets tp_comm_overlap and overlap_p2p_comm on the model config and, with the distributed optimizer, overwrites the
    DDP config's overlap_grad_reduce, overlap_param_gather and bucket_size with its own defaults (setup ->
    _get_optimizer_overlap_cfgs: all on and 128M-parameter buckets when dp > 1) unless given to its constructor
    (_override_user_cfgs). So with ZeRO >= 1 they are the callback's arguments, the bucket as Megatron-Core sizes it
    (costs.iteration.megatron_bucket_size, which the plan's bucket count assumes); with ZeRO-0 the callback leaves the
    DDP config alone and they go on recipe.trainer.strategy.ddp. None for a solution without `overlap`."""
    if not overlap:
        return None
    from planner.costs.iteration import megatron_bucket_size
    zero = int(c.get("zero", 0))
    grad = bool(overlap.get("grad_reduce"))
    # --overlap-param-gather's condition (overlap_args): Megatron-LM asserts it needs the distributed optimizer
    dp = {"overlap_grad_reduce": grad, "overlap_param_gather": bool(overlap.get("param_gather") and grad and zero >= 1)}
    if grad:
        dp["bucket_size"] = int(megatron_bucket_size(overlap.get("bucket_size"), c["dp"] * int(c.get("cp", 1))))
    cb = {"tp_comm_overlap": bool(overlap.get("tp_comm") and c.get("sequence_parallel") and c["tp"] > 1)}
    if c.get("schedule") == "interleaved" and c["pp"] > 1:
        cb["overlap_p2p_comm"] = bool(overlap.get("p2p", True))
    ddp = "" if zero >= 1 else _assign("recipe.trainer.strategy.ddp", dp) + "; "
    args = ", ".join(f"{k}={v!r}" for k, v in (cb | dp if zero >= 1 else cb).items())
    why = ("; with the distributed optimizer its arguments replace recipe.trainer.strategy.ddp's overlap and bucket "
           "settings") if zero >= 1 else ""
    return (f"{ddp}recipe.trainer.callbacks.append(run.Config(MegatronCommOverlapCallback, {args}))  # in place of "
            f"any MegatronCommOverlapCallback the recipe has{why}")


def nemo_recipe(solution: dict, c: dict, precision: str, recipe: str | None, file: str | None) -> list[str]:
    """Comment lines: the plan as NeMo 2.0 recipe settings (the Megatron-Core flags above under NeMo's names), one
    line per part: layout, pipeline split, batch, precision, model and optimizer, communication overlap."""
    strategy = "recipe.trainer.strategy"
    parts = [_assign(strategy, nemo_strategy(c)), _assign(strategy, nemo_pipeline_split(c)), nemo_data(c, solution),
             nemo_precision(solution, precision, recipe), nemo_model(solution, c, file),
             nemo_overlap(solution.get("overlap"), c)]
    return [NEMO_HEADER] + [NEMO + p for p in parts if p]


# The memory estimate's fragmentation term was measured with expandable segments (2% of the allocated peak);
# PyTorch's default allocator needed up to 20% more on an H100 (docs/notes/memory.md), so launch with it on.
ALLOC_ENV = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"

# Megatron-LM @ d98e8a64, megatron/training/arguments.py validate_args: with tp > 1 or cp > 1 and
# get_device_arch_version() < 10 (compute capability before Blackwell) it asserts CUDA_DEVICE_MAX_CONNECTIONS == "1"
# (one hardware queue: the communication kernels start in issue order, ahead of the GEMMs they overlap), except with
# Torch-FSDP2 / Megatron-FSDP or --overlap-moe-expert-parallel-comm, where it only warns: the export sets neither
MAX_CONNECTIONS_ENV = "CUDA_DEVICE_MAX_CONNECTIONS=1"


def max_connections_needed(c: dict, engine: str, gpu_type: str | None) -> bool:
    """Whether Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for this config (MAX_CONNECTIONS_ENV). Not for
    DeepSpeed's pipeline engine (Megatron-DeepSpeed's own arguments) nor torchtitan (ZeRO-3 plans)."""
    return (engine == "megatron" and int(c.get("zero", 0)) < 3 and (c["tp"] > 1 or int(c.get("cp", 1)) > 1)
            and before_blackwell(gpu_type))


def launch_env(c: dict, engine: str, gpu_type: str | None) -> list[str]:
    """The environment assignments a Megatron-LM launch of the plan needs."""
    return [ALLOC_ENV] + ([MAX_CONNECTIONS_ENV] if max_connections_needed(c, engine, gpu_type) else [])


def environment_note(c: dict, engine: str, gpu_type: str | None) -> str:
    """`# environment:` comment of --format megatron: launch_env's variables, each with its reason."""
    out = f"# environment: {ALLOC_ENV} (the memory estimate assumes it)"
    if max_connections_needed(c, engine, gpu_type):
        gpu = gpu_type or "the GPU type is unknown (the solution's spec was not read): not needed from Blackwell on"
        out += f"; {MAX_CONNECTIONS_ENV} (Megatron-LM asserts it with tp > 1 or cp > 1 on GPUs before Blackwell: {gpu})"
    return out


def solution_spec(solution: dict, file: str | None):
    """The spec the solution names (solution_spec_path); None where it cannot be read."""
    if not file:
        return None
    from planner.solution import solution_spec_path
    from planner.spec import load_spec
    try:
        return load_spec(solution_spec_path(solution, file))
    except (SpecError, OSError):
        return None


def solution_gpu_type(solution: dict, file: str | None) -> str | None:
    """The cluster's GPU type from the spec the solution names; None where it cannot be read."""
    spec = solution_spec(solution, file)
    return None if spec is None else spec.cluster.gpu.type


def split_megatron_args(args: list[str]) -> tuple[list[str], list[str]]:
    """(flags, comment lines) of megatron_args, in order."""
    return [a for a in args if not a.startswith("#")], [a for a in args if a.startswith("#")]


def shell_words(flag: str) -> str:
    """One flag with its value, each word shell-quoted."""
    return " ".join(shlex.quote(w) for w in flag.split())


def torchrun_commands(solution: dict, master_port: int = 29500, file: str | None = None,
                      framework: str | None = None, gpu_type: str | None = None, model=None,
                      seq_length: int | None = None) -> list[str]:
    """One torchrun line per node, with CUDA_VISIBLE_DEVICES ordered so local rank k gets the planned GPU. ZeRO-3
    plans, and any plan with framework "torchtitan" (export --format torchtitan), run torchtitan's trainer on the job
    config of `torchtitan_toml` (saved as job.toml): its device mesh orders ranks tp fastest, then dp_shard,
    dp_replicate, pp, which is the rank order below. gpu_type: the cluster's GPU type (None: unknown), for the
    environment (launch_env); model, seq_length: the model's flags for pretrain_gpt.py (megatron_args)."""
    ranks = rank_layout(solution, file)
    q = shlex.quote
    nodes = sorted({r["node"] for r in ranks}, key=lambda n: min(r["rank"] for r in ranks if r["node"] == n))
    per_node = {n: [r for r in ranks if r["node"] == n] for n in nodes}
    master = per_node[nodes[0]][0]["host"]
    c = _config(solution, file)
    if framework == "torchtitan" or int(c.get("zero", 0)) == 3:
        script, flags = "-m", "torchtitan.train --job.config_file job.toml"
        env = ALLOC_ENV
    else:
        script = "pretrain_gpt.py"
        flags = " ".join(shell_words(a) for a in split_megatron_args(
            megatron_args(solution, file, gpu_type, model, seq_length))[0])
        env = " ".join(launch_env(c, solution.get("pipeline_engine", "megatron"), gpu_type))
    lines = []
    for idx, n in enumerate(nodes):
        rs = per_node[n]
        gpus = ",".join(str(r["gpu"]) for r in rs)
        lines.append(f"# {rs[0]['host']}: ranks {rs[0]['rank']}..{rs[-1]['rank']}\n"
                     f"{env} CUDA_VISIBLE_DEVICES={q(gpus)} torchrun --nnodes {len(nodes)} "
                     f"--node-rank {idx} --nproc-per-node {len(rs)} --master-addr {q(master)} "
                     f"--master-port {int(master_port)} {script} {flags}")
    return lines


def hostfile(solution: dict, file: str | None = None) -> str:
    """Hosts in the order the node ranks must follow (slots = GPUs used per host)."""
    ranks = rank_layout(solution, file)
    seen, out = [], []
    for r in ranks:
        if r["node"] not in seen:
            seen.append(r["node"])
            out.append(f"{r['host']} slots={sum(1 for q in ranks if q['node'] == r['node'])}")
    return "\n".join(out) + "\n"


# --- torchtitan and DeepSpeed (ZeRO-3 plans; docs/notes/fsdp.md) -----------------------------------------------------
# Key names: pytorch/torchtitan @ 238fa9953e4aec2a62582121564273d7cbb1e9f1 (the last commit with TOML job configs),
# torchtitan/config/job_config.py: [training] local_batch_size, global_batch_size, seq_len, mixed_precision_param,
# mixed_precision_reduce; [parallelism] data_parallel_replicate_degree, data_parallel_shard_degree,
# fsdp_reshard_after_forward, tensor_parallel_degree, pipeline_parallel_degree, pipeline_parallel_schedule,
# pipeline_parallel_microbatch_size, pipeline_parallel_first/last_stage_less_layers, context_parallel_degree,
# context_parallel_rotate_method;
# [activation_checkpoint] mode.
TORCHTITAN_COMMIT = "238fa9953e4aec2a62582121564273d7cbb1e9f1"
# its child, pytorch/torchtitan 9810191bb "[BC Breaking] Config System Refactor: TOML to Python Dataclass Registry
# (#2386)", removed TOML loading (torchtitan/config/manager.py: no config_file, no tomllib); runs are Python functions
# picked with --module / --config (torchtitan/config/README.md at b5bcd76)
TORCHTITAN_TOML_LIMIT = ("# torchtitan up to 238fa99 only: 9810191bb (Feb 23 2026) replaced TOML job configs "
                         "(--job.config_file) with Python config functions (--module / --config), which do not read "
                         "this file")


# pytorch/torchtitan @ 238fa99 turns on torchao's Float8 tensor parallelism only when `"float8" in
# job_config.model.converters` (torchtitan/models/llama3/infra/parallelize.py:77), a name no converter is registered
# under (components/quantization/float8.py:238 registers "quantize.linear.float8", the one the export must write;
# protocols/model_converter.py looks each name up in that registry, so "float8" itself would not load). So the tp
# all-gathers of an fp8 plan stay bf16 there, where the plan charged the 1-byte float8 gathers torchao's Float8 TP
# makes (costs/compute.py tp_gather_bytes)
TORCHTITAN_FLOAT8_TP_NOTE = ("# fp8 with tp > 1: the plan charged float8 (1-byte) tensor-parallel all-gathers "
                             "(torchao's Float8 TP); torchtitan up to 238fa99 enables it only for a converter "
                             "named \"float8\" (models/llama3/infra/parallelize.py), which no converter is registered "
                             "as, so its TP all-gathers stay bf16 and the plan's TP time is a lower bound there")


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=True)      # a TOML basic string: quotes and controls escaped


def _toml_entry(v) -> str:
    # a list of lists (module_fqns_per_model_part): one inner list a line, so a long split stays readable
    if isinstance(v, list) and v and all(isinstance(x, list) for x in v):
        return "[\n" + "".join(f"    {_toml_value(x)},\n" for x in v) + "]"
    return _toml_value(v)


# the plan's precision -> torchtitan's [training] mixed_precision_param, typed Literal["bfloat16", "float32"] at
# 238fa99 (torchtitan/config/job_config.py:282); fp8 is torchao's Float8 GEMMs under bf16 FSDP2 parameters
TORCHTITAN_PARAM_DTYPE = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}


def _positive_int(solution: dict, key: str, file: str | None, why: str) -> int:
    """A model or training figure the export needs from the solution; SpecError naming the key when absent or bad."""
    v = solution.get(key)
    if v is None:
        raise SpecError(file, key, f"is not in this solution (planners before Nov 26 2026 recorded it for ZeRO-3 plans "
                                   f"only) and {why}: solve the spec again, or add `{key}: N` to the file")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise SpecError(file, key, f"must be a positive integer, got {v!r}")
    return v


def _torchtitan_precision(solution: dict, cfg: ParallelConfig, file: str | None) -> tuple[str, list[str]]:
    """The plan's precision if torchtitan can train in it, and comment lines; SpecError naming `precision` if not."""
    recorded = solution.get("precision")
    precision = "bf16" if recorded is None else recorded
    if not (isinstance(precision, str) and precision in PRECISIONS):
        raise SpecError(file, "precision", f"has {precision!r}, expected one of {list(PRECISIONS)}")
    if precision == "fp16":
        # no float16 in the Literal, and no gradient scaler anywhere in torchtitan's trainer at 238fa99
        raise SpecError(file, "precision", "fp16: torchtitan trains in bfloat16 or float32 only (mixed_precision_param "
                        "in torchtitan/config/job_config.py, and no fp16 loss scaling); solve again with "
                        "training.precision bf16 (on a GPU with bf16 tensor cores) or fp32"
                        + (", or export this plan with --format deepspeed" if _deepspeed_limits(cfg, precision) is None
                           else ", or export this plan with --format megatron" if cfg.zero < 2 else ""))
    if precision == "fp8" and cfg.zero != 3:
        raise SpecError(file, "precision", "fp8 plans without ZeRO-3 are Transformer Engine's (Megatron-Core); "
                                           "torchtitan's Float8 (torchao) is planned with FSDP (zero 3) only")
    notes = [] if recorded is not None else [
        "# precision: not in this solution (written before planner recorded 16-bit precisions); bfloat16 assumed"]
    return precision, notes


def _torchtitan_data_parallel(cfg: ParallelConfig, precision: str, file: str | None) -> tuple[int, int]:
    """(data_parallel_shard_degree, data_parallel_replicate_degree) that run the plan's ZeRO level in torchtitan @
    238fa99, or SpecError naming config.zero. torchtitan has two data-parallel forms: FSDP / HSDP (ZeRO-3, whenever
    dp_shard > 1 or cp > 1: distributed/parallel_dims.py fsdp_enabled) and DDP (ZeRO-0, dp_replicate alone)."""
    what = f"zero {cfg.zero}, tp {cfg.tp}, pp {cfg.pp}, cp {cfg.cp}, dp {cfg.dp}"
    if cfg.zero in (1, 2):
        sharded = "optimizer state" if cfg.zero == 1 else "optimizer state and gradients"
        raise SpecError(file, "config.zero", f"{what}: ZeRO-{cfg.zero} ({sharded} sharded, parameters replicated) is "
                        "not a torchtitan data-parallel form: torchtitan replicates everything (DDP, "
                        "data_parallel_replicate_degree) or shards the parameters too (FSDP / HSDP, "
                        "data_parallel_shard_degree); solve again with search.zero [3] for torchtitan"
                        + (", or export this plan with --format megatron" if cfg.zero == 1 else
                           ", or export this plan with --format deepspeed (ZeRO stage 2)"
                           if _deepspeed_limits(cfg, precision) is None else
                           " or [1] for Megatron-LM (no export runs this ZeRO-2 plan: Megatron-LM's distributed "
                           "optimizer keeps the gradients whole, DeepSpeed's ZeRO-2 runs without tp, pp and cp)"))
    fsdp = cfg.cp > 1 or (cfg.zero == 3 and cfg.shard_size > 1)
    if (cfg.tp > 1 or cfg.pp > 1) and not fsdp and (cfg.zero == 3 or cfg.dp == 1) and precision != "fp32":
        raise SpecError(file, "config.zero", f"{what}: without FSDP torchtitan turns mixed precision off under TP or "
                        "PP (torchtitan/distributed/utils.py maybe_enable_amp), so it would train in float32, not the "
                        f"plan's {precision}; a plan with dp > 1 and zero 3 (FSDP) keeps it")
    if cfg.zero == 3:
        return cfg.shard_size, cfg.replicas
    fix = "solve again with search.zero [3]: torchtitan runs FSDP (ZeRO-3) with TP, PP and CP"
    if cfg.cp > 1:
        raise SpecError(file, "config.zero", f"{what}: torchtitan shards the parameters over the context-parallel "
                        "group whenever cp > 1 (FSDP; torchtitan/distributed/parallel_dims.py fsdp_enabled), which "
                        f"a ZeRO-0 plan does not charge; {fix}")
    if (cfg.tp > 1 or cfg.pp > 1) and cfg.dp > 1:
        raise SpecError(file, "config.zero", f"{what}: torchtitan's DDP runs only alone (\"DDP has not supported > "
                        "1D parallelism\", torchtitan/models/llama3/infra/parallelize.py); " + fix)
    return 1, cfg.dp


def torchtitan_stage_layers(num_layers: int, pp: int, schedule: str, layers_per_stage: int | None,
                            first_less: int, last_less: int) -> tuple[int, ...]:
    """Transformer layers of each virtual stage (in stage order) that torchtitan @ 238fa99 builds from
    pipeline_parallel_layers_per_stage / first_stage_less_layers / last_stage_less_layers; ValueError with its
    reason where it refuses. Restates torchtitan/distributed/pipeline_parallel.py pipeline_llm (the stage count)
    and generate_llm_fqn_per_model_part (the split: the first and last *virtual* stage give up first_less /
    last_less layers, the remainder goes to the lowest stages) so the export can check its keys."""
    single = schedule in ("GPipe", "1F1B")           # PipelineScheduleSingle: one stage per rank
    if layers_per_stage is None:
        n = pp * (1 if single else 2)
    else:
        n = -(-(num_layers + first_less + last_less) // layers_per_stage)
        if n % pp:
            raise ValueError(f"Number of virtual stages ({n}) must be divisible by pipeline parallel size ({pp})")
        if single != (n // pp == 1):        # single-stage schedules: exactly 1; looped ones: at least 2
            raise ValueError(f"{n // pp} stages per rank for {schedule}")
    if schedule == "ZBVZeroBubble" and n != 2 * pp:
        raise ValueError(f"v schedules assume 2 stages per rank, got {n // pp}")
    effective = num_layers + first_less + last_less
    base, extra = divmod(effective, n)
    if base == 0 or first_less > base or last_less > base:
        raise ValueError(f"{n} stages over {effective} effective layers (first_less {first_less}, last_less "
                         f"{last_less})")
    out, left = [], num_layers
    for i in range(n):
        want = base + int(i < extra) - (first_less if i == 0 else last_less if i == n - 1 else 0)
        out.append(min(max(want, 0), left))
        left -= out[-1]
    if left:        # torchtitan would silently build no stage for them
        raise ValueError(f"{left} of {num_layers} layers fall in no stage")
    return tuple(out)


def planned_stage_layers(cfg: ParallelConfig, num_layers: int) -> tuple[int, ...]:
    """The plan's transformer layers of each virtual stage, in torchtitan's stage order: rank r holds stages
    r, r + pp, ... (looped schedules) or r and 2 pp - 1 - r (V schedules); ValueError if the split is illegal."""
    chunks = cfg.chunk_layers(num_layers)
    out = [0] * (cfg.pp * cfg.chunks)
    for r, per_rank in enumerate(chunks):
        for k, n in enumerate(per_rank):
            v_shape = cfg.schedule in V_SHAPES
            out[(r if k == 0 else 2 * cfg.pp - 1 - r) if v_shape else r + k * cfg.pp] = n
    return tuple(out)


def _fqns_per_model_part(per_stage: tuple[int, ...]) -> list[list[str]]:
    """torchtitan's llama3 module names for each virtual stage: the embedding first, the norm and output last."""
    out, at = [], 0
    for i, n in enumerate(per_stage):
        part = (["tok_embeddings"] if i == 0 else []) + [f"layers.{j}" for j in range(at, at + n)]
        at += n
        out.append(part + (["norm", "output"] if i == len(per_stage) - 1 else []))
    return out


def _torchtitan_pipeline_split(cfg: ParallelConfig, solution: dict, file: str | None) -> tuple[dict, list[str]]:
    """[parallelism] keys that build the plan's split, and comment lines: torchtitan's own layers_per_stage /
    first / last_stage_less_layers where its rule reproduces the plan's layers per virtual stage, else the
    explicit module_fqns_per_model_part (job_config.py:367 @ 238fa99). The planner shortens every chunk of the
    first and last rank (Megatron-Core); torchtitan's rule shortens only the first and last virtual stage."""
    less = ("pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers")
    if not cfg.uneven and cfg.chunks == 1:
        # one stage per rank, even (pp divides the layers): torchtitan's rule with nothing taken off the ends
        # builds it, so a file without num_layers still exports
        return dict.fromkeys(less, 0), []
    layers = _positive_int(solution, "num_layers", file, "the pipeline split needs the model's layer count")
    try:
        planned = planned_stage_layers(cfg, layers)
    except ValueError as e:
        raise SpecError(file, "num_layers", f"{layers} does not fit the config's split: {e}") from None
    per = cfg.stage_layers(layers)
    mid = max(per)
    keys = {"pipeline_parallel_layers_per_stage": mid // cfg.chunks,
            less[0]: (mid - per[0]) // cfg.chunks, less[1]: (mid - per[-1]) // cfg.chunks}
    try:
        theirs = torchtitan_stage_layers(layers, cfg.pp, TORCHTITAN_SCHEDULES[cfg.schedule], *keys.values())
        differs = f"would build {list(theirs)}" if theirs != planned else ""
    except ValueError as e:
        differs = f"would refuse it ({e})"
    if not differs:
        return keys, []
    note = (f"# pipeline split: the plan's layers per virtual stage are {list(planned)}; torchtitan's "
            f"layers_per_stage / first / last_stage_less_layers rule {differs}, so module_fqns_per_model_part "
            "lists each stage's modules (set no pipeline_parallel_layers_per_stage beside it)")
    return {"module_fqns_per_model_part": _fqns_per_model_part(planned)}, [note]


def torchtitan_toml(solution: dict, file: str | None = None, model=None) -> str:
    """The tables of a torchtitan job config that runs the plan: [training], [parallelism], [activation_checkpoint],
    [compile] (the plan's fused kernels; absent for training.kernels eager), enable_async_tensor_parallel where the
    plan credits TP-communication overlap (training.overlap.tp_comm with tp > 1) and, for fp8 (ZeRO-3 only), [model]
    converters and [quantize.linear.float8] (torchao's tensorwise Float8). Merge them into torchtitan's own llama3
    preset, which adds the model name and flavor, [optimizer], the dataset and the rest."""
    c = _config(solution, file)
    cfg = ParallelConfig.from_dict(c, file)
    precision, notes = _torchtitan_precision(solution, cfg, file)
    shard, replicate = _torchtitan_data_parallel(cfg, precision, file)
    why = torchtitan_problem(cfg)
    if why:
        raise SpecError(file, f"config.{why[0]}", why[1])
    training = {"local_batch_size": cfg.micro_batch_size * cfg.num_microbatches if cfg.pp > 1 else
                cfg.micro_batch_size, "global_batch_size": cfg.global_batch_size,
                "seq_len": _positive_int(solution, "seq_length", file,
                                         "torchtitan would train at its preset's seq_len (8192 for llama3)"),
                "mixed_precision_param": TORCHTITAN_PARAM_DTYPE[precision], "mixed_precision_reduce": "float32"}
    par = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
           "fsdp_reshard_after_forward": "default", "tensor_parallel_degree": cfg.tp,
           "pipeline_parallel_degree": cfg.pp, "context_parallel_degree": int(getattr(cfg, "cp", 1))}
    if cfg.cp > 1:      # the plan's exchange (solution cp_comm): allgather, or the ring as PyTorch's alltoall rotation
        from planner.costs.context_parallel import TORCHTITAN_ROTATE
        mode = solution.get("cp_comm", "allgather")
        if not (isinstance(mode, str) and mode in TORCHTITAN_ROTATE):
            raise SpecError(file, "cp_comm", f"has {mode!r}; torchtitan's context parallel runs "
                            f"{sorted(TORCHTITAN_ROTATE)}")
        par["context_parallel_rotate_method"] = TORCHTITAN_ROTATE[mode]
    if cfg.pp > 1:
        par["pipeline_parallel_schedule"] = TORCHTITAN_SCHEDULES[cfg.schedule]
        par["pipeline_parallel_microbatch_size"] = cfg.micro_batch_size
        split, split_notes = _torchtitan_pipeline_split(cfg, solution, file)
        par.update(split)
        notes += split_notes
    # the plan credits tensor-parallel communication hidden behind GEMMs (training.overlap.tp_comm, costs/iteration.py
    # tp_overlap_saving); torchtitan's counterpart is its async TP (Inductor's micro-pipelined TP, compile only)
    tp_overlap = cfg.tp > 1 and cfg.sequence_parallel and bool((solution.get("overlap") or {}).get("tp_comm"))
    eager = solution.get("kernels") == "eager"
    if tp_overlap and not eager:     # eager: the plan credits none (iteration.tp_overlap_saving), torchtitan refuses it
        par["enable_async_tensor_parallel"] = True
    # block reaches here on ZeRO-3 plans only (torchtitan_problem): torchtitan's per-layer selective checkpointing
    ac = {"mode": {"none": "none", "selective": "selective", "full": "full", "block": "selective"}[cfg.recompute]}
    tables = [("training", training), ("parallelism", par), ("activation_checkpoint", ac)]
    if cfg.recompute == "selective" and cfg.zero == 3:
        ac["selective_ac_option"] = "op"            # the per-op policy the ZeRO-3 plan's memory and time assume
    if cfg.layer_sac:
        # every n-th transformer block of a rank, counted across its pipeline stages in build order (torchtitan
        # distributed/activation_checkpoint.py _apply_layer_sac; ParallelConfig.checkpointed_chunk_layers)
        ac["selective_ac_option"] = str(cfg.recompute_layers)
    if not eager:        # the plan's fused element-wise kernels: torch.compile of each block, and of the loss
        # unless the spec says torchtitan's loss runs eager (training.compile_loss false; the plan's memory counts the
        # compiled loss for tp 1 only, loss_parallel's DTensor kernels under tp > 1 are counted eager either way)
        compile_loss = solution.get("compile_loss", True)
        if not isinstance(compile_loss, bool):
            raise SpecError(file, "compile_loss", f"has {compile_loss!r}, expected true or false")
        components = ["model", "loss"] if compile_loss else ["model"]
        tables.append(("compile", {"enable": True, "components": components}))
    if precision == "fp8":
        # torchao Float8Linear, tensorwise dynamic scaling (no recipe_name: torchtitan asserts it is not set with the
        # fp8 all-gather); the output layer stays bf16 as the plan's compute model has it
        f8 = bool(solution.get("fsdp_float8_all_gather"))
        tables.insert(0, ("model", {"converters": ["quantize.linear.float8"]}))
        tables.append(("quantize.linear.float8", {"enable_fsdp_float8_all_gather": f8,
                                                  "precompute_float8_dynamic_scale_for_fsdp": f8,
                                                  "filter_fqns": ["output"]}))
    lines = [f"# planner export: {cfg.label()}; torchtitan job config keys as of "
             f"pytorch/torchtitan@{TORCHTITAN_COMMIT}",
             TORCHTITAN_TOML_LIMIT,
             "# (merge into torchtitan's llama3 preset, torchtitan/models/llama3/train_configs/*.toml: it adds the "
             "model name and flavor, [optimizer], [lr_scheduler] and the dataset)",
             f"# environment: {ALLOC_ENV} (the memory estimate assumes it)"] + notes
    if cfg.zero == 0 and cfg.dp > 1 and precision != "fp32" and not solution.get("grad_reduce_in_fp32"):
        # autocast keeps fp32 parameters, so DDP's gradients are fp32 (distributed/utils.py maybe_enable_amp)
        lines.append("# zero 0 (DDP): torchtitan keeps float32 parameters under autocast and all-reduces float32 "
                     "gradients, twice the bytes the plan charged (its 16-bit gradient reduction)")
    if precision == "fp8" and cfg.tp > 1 and cfg.sequence_parallel:
        lines.append(TORCHTITAN_FLOAT8_TP_NOTE)
    if cfg.recompute == "selective" and cfg.zero != 3:
        lines.append("# selective: the plan's memory assumes Megatron-Core's core-attention recompute; torchtitan's "
                     "selective_ac_option differs (docs/notes/fsdp.md)")
    if eager:
        lines.append("# kernels eager: the plan assumes torchtitan without torch.compile ([compile] enable = false)")
        if tp_overlap:
            lines.append("# training.overlap.tp_comm is not credited: torchtitan's async TP runs only under "
                         "torch.compile, so enable_async_tensor_parallel is left out")
    backend = _attention_backend(solution, file)
    if backend:
        # torchtitan's job config has no SDPA back-end key: PyTorch's priority order decides
        # a ZeRO-3 plan naming flash2 was charged PyTorch's own flash copy (compute.attention_backend: sdpa_flash)
        charged = ("PyTorch's flash kernel as measured in training steps (sdpa_flash; FlashAttention-2's row "
                   "where the GPU type has none)" if backend == "flash2" and cfg.zero == 3
                   else "that kernel's speed")
        lines.append(f"# attention_backend {backend}: the plan charged {charged}; "
                     "torchtitan has no key for it, PyTorch's SDPA priority picks (cuDNN first on Hopper in torch "
                     "2.11, flash first in late 2024; torch.nn.attention.sdpa_kernel pins one)")
    for name, table in tables:
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_entry(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def deepspeed_recompute_note(solution: dict) -> str | None:
    """What the DeepSpeed config cannot say about the plan's recompute: its activation_checkpointing block only sets up
    deepspeed.checkpointing; the model code chooses what to checkpoint (a JSON file has no comments)."""
    c = solution.get("config") or {}
    rc = c.get("recompute", "none")
    if rc == "none":
        return None
    what = ("every transformer layer (full)" if rc == "full" else
            f"every {c.get('recompute_layers')}-th transformer layer (block on a ZeRO-3 plan: torchtitan's layer "
            "SAC, the counter's multiples), storing everything of the others" if rc == "block" and c.get("zero") == 3
            else
            f"the first {c.get('recompute_layers')} transformer layers of each pipeline stage's model chunk (block), "
            "storing everything of the others" if rc == "block" else
            "the MLP of every layer from its input (mlp): DeepSpeed has no such mode, the model code must wrap just "
            "that part" if rc == "mlp" else
            "the attention core only (selective): DeepSpeed has no such mode, the model code must wrap just that part")
    return (f"the plan recomputes {what}; DeepSpeed's activation_checkpointing block configures "
            "deepspeed.checkpointing.checkpoint, which the model code must call on those modules")


def deepspeed_zero2_note(solution: dict) -> str | None:
    """What DeepSpeed's ZeRO-2 does beyond the plan: it reduce-scatters the gradients after every micro-batch
    (deepspeed/runtime/engine.py allreduce_gradients: "ZeRO stage >= 2 communicates during non gradient accumulation
    boundaries as well"), where the plan, as Megatron-Core, reduces once per iteration. None for one micro-batch."""
    c = solution.get("config") or {}
    m = c.get("num_microbatches", 1)
    if c.get("zero") != 2 or not isinstance(m, int) or m <= 1:
        return None
    return (f"DeepSpeed's ZeRO-2 reduce-scatters the gradients after each of the {m} micro-batches (overlapped with "
            "their backward with overlap_comm); the plan charges one reduce-scatter per iteration, so its "
            "data-parallel time is a lower bound here (exact with 1 micro-batch)")


def _deepspeed_limits(cfg: ParallelConfig, precision) -> tuple[str, str] | None:
    """(field, reason) of the first thing DeepSpeed's own config cannot run as planned, None when it can: ZeRO-2 or
    ZeRO-3 over plain data parallelism in 16 or 32 bits."""
    if cfg.zero not in (2, 3):
        return "config.zero", (f"{cfg.zero}: --format deepspeed writes ZeRO-2 and ZeRO-3 configs; ZeRO-{cfg.zero} "
                               "plans are Megatron-LM's (export with --format megatron)")
    if cfg.pp > 1:     # microsoft/DeepSpeed deepspeed/runtime/pipe/engine.py: assert zero_optimization_stage() < 2
        return "config.pp", (f"{cfg.pp}: DeepSpeed's ZeRO-{cfg.zero} is incompatible with its pipeline parallelism "
                             "(\"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\")")
    if cfg.dp_shard:
        return "config.dp_shard", "HSDP is exported for torchtitan only (--format torchtitan)"
    if cfg.tp > 1:      # DeepSpeed alone has no tensor parallelism: the tp ranks would be read as data-parallel ones
        return "config.tp", (f"{cfg.tp}: DeepSpeed's config has no tensor parallelism (it comes from the model code, "
                             "e.g. Megatron-DeepSpeed)")
    if cfg.cp > 1:      # the config has no such key: the plan's cp ranks would be read as data-parallel ones
        return "config.cp", (f"{cfg.cp}: DeepSpeed's config has no context parallelism (the plan's is torchtitan's "
                             "or Megatron-Core's)")
    if not (isinstance(precision, str) and precision in PRECISIONS) or precision == "fp8":
        return "precision", f"{precision!r}: DeepSpeed configs are written for bf16, fp16 or fp32"
    return None


# The gradient reduction's dtype as planned: ZeRO-3 reduce-scatters in fp32 (costs/fsdp.py REDUCE_BYTES, FSDP2's
# reduce_dtype), ZeRO-2 in fp32 only with training.grad_reduce_in_fp32 (grad_reduce_bytes). DeepSpeed reduces in the
# model's 16-bit dtype unless told (deepspeedai/DeepSpeed @ edaa7221267243c7be7fb49c5d5f5c4fb97b4641
# deepspeed/runtime/engine.py communication_data_type: the config's value, else float16 / bfloat16 with fp16 / bf16;
# the same at 38327e07), read from the top-level key communication_data_type (runtime/config.py
# get_communication_data_type: "fp32", "fp16" or "bf16"), which ZeRO-2 and ZeRO-3 both reduce in
# (zero/stage_1_and_2.py, zero/stage3.py: fp16, bf16 or fp32 with reduce_scatter)
DEEPSPEED_FP32_REDUCE = "fp32"


def deepspeed_zero3_unit(solution: dict, file: str | None = None, model=None) -> int | None:
    """Parameters of the plan's largest FSDP unit (a transformer block, the embedding or [norm, output]; tp = pp = 1
    for DeepSpeed), or None when the model cannot be read (no spec at hand)."""
    from planner.costs.memory import fsdp_units
    cfg = ParallelConfig.from_dict(_config(solution, file), file)
    if model is None and file:
        from planner.solution import solution_spec_path
        from planner.spec import load_spec
        try:
            model = load_spec(solution_spec_path(solution, file)).model
        except (SpecError, OSError):
            model = None
    if model is None:
        return None
    return int(max(fsdp_units(model, cfg, 0)))


def deepspeed_zero3_note(solution: dict, file: str | None = None) -> str | None:
    """Why a ZeRO-3 DeepSpeed config keeps DeepSpeed's own bucket sizes (the model was not readable), else None."""
    if (solution.get("config") or {}).get("zero") != 3 or deepspeed_zero3_unit(solution, file):
        return None
    return ("the spec this solution names could not be read, so reduce_bucket_size and the stage3_* sizes stay at "
            "DeepSpeed's defaults (a 5e8-element gradient bucket, up to 1e9 parameters live), which the plan's memory "
            "does not count; set them to the largest FSDP unit's parameter count")


def deepspeed_refusal(solution: dict, file: str | None = None) -> tuple[str, str] | None:
    """(field, reason) why `--format deepspeed` cannot write this plan, None when it can: the one rule behind
    deepspeed_config and the other exports' hints, so that they name DeepSpeed only for plans it takes."""
    cfg = ParallelConfig.from_dict(_config(solution, file), file)
    return _deepspeed_limits(cfg, solution.get("precision", "bf16"))


def deepspeed_config(solution: dict, file: str | None = None, model=None) -> dict:
    """A DeepSpeed config (JSON) for a ZeRO-2 or ZeRO-3 plan over data parallelism alone. DeepSpeed's ZeRO-2 and -3
    run without pipeline parallelism (microsoft/DeepSpeed @ 38327e07f6cd39b63418f60cedd1651b0be3e7c3
    deepspeed/runtime/pipe/engine.py refuses ZeRO >= 2 in its PipelineEngine; keys from
    deepspeed/runtime/zero/config.py), its config has no tensor or context parallelism, and it shards over all of dp
    (its MiCS / hpZ partial sharding are not HSDP as planned here).

    ZeRO-2 (optimizer state and gradients sharded, parameters whole: the plan's memory, costs/memory.py) is the one
    export of such a plan: Megatron-Core's distributed optimizer keeps the whole gradient buffer (megatron_args
    refuses it). Its reduce and all-gather buckets are the plan's (training.overlap.bucket_size, else Megatron-Core's
    max(40M, 1M x dp) parameters): DeepSpeed's default 5e8 elements would hold gigabytes of bucket buffers with
    overlap_comm that the memory estimate does not charge. The gradients are reduced in the plan's dtype
    (communication_data_type: DEEPSPEED_FP32_REDUCE).

    ZeRO-3: the buffers the plan's memory counts are FSDP2's (costs/memory.py fsdp_buffer_bytes: the unit computing
    and the next one gathered, one unit's gradient and its reduce-scatter input, sized by the largest unit). DeepSpeed
    sizes its own by parameter counts (deepspeedai/DeepSpeed @ edaa7221 deepspeed/runtime/zero/config.py, stage3.py:
    the gradient bucket `torch.empty(reduce_bucket_size)` in the model's dtype, default 5e8 elements;
    stage3_max_live_parameters 1e9, stage3_prefetch_bucket_size 5e7, stage3_max_reuse_distance 1e9), so they are set
    from the plan's largest unit (model: the spec's, else read from the spec the solution names; left at DeepSpeed's
    defaults, with deepspeed_zero3_note saying so, when neither is at hand)."""
    c = _config(solution, file)
    cfg = ParallelConfig.from_dict(c, file)
    why = _deepspeed_limits(cfg, solution.get("precision", "bf16"))
    if why:
        field, reason = why
        other = ("export with --format torchtitan" if cfg.zero == 3 else
                 "solve again with search.zero [1] for Megatron-LM's distributed optimizer" if cfg.zero == 2 else "")
        raise SpecError(file, field, reason + (f"; {other}" if other and field != "config.dp_shard" else ""))
    precision = solution.get("precision", "bf16")
    out = {"train_batch_size": cfg.global_batch_size, "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
           "gradient_accumulation_steps": cfg.num_microbatches,
           "zero_optimization": {"stage": cfg.zero, "overlap_comm": True, "contiguous_gradients": True,
                                 "reduce_scatter": True}}
    if cfg.zero == 2:
        from planner.costs.iteration import megatron_bucket_size
        bucket = megatron_bucket_size((solution.get("overlap") or {}).get("bucket_size"), cfg.dp * cfg.cp)
        out["zero_optimization"].update(reduce_bucket_size=bucket, allgather_bucket_size=bucket)
    unit = deepspeed_zero3_unit(solution, file, model) if cfg.zero == 3 else None
    if unit:
        # one unit's gradient bucket, the next unit prefetched, two units live, and a unit used again within one
        # unit's parameters (the last block and [norm, output], as FSDP2 keeps them) not released
        out["zero_optimization"].update(reduce_bucket_size=unit, stage3_prefetch_bucket_size=unit,
                                        stage3_max_live_parameters=2 * unit, stage3_max_reuse_distance=unit)
    if precision == "bf16":
        out["bf16"] = {"enabled": True}
    elif precision == "fp16":
        out["fp16"] = {"enabled": True}
    if precision != "fp32" and (cfg.zero == 3 or grads_in_fp32(solution, precision)):
        out["communication_data_type"] = DEEPSPEED_FP32_REDUCE
    if cfg.recompute != "none":
        out["activation_checkpointing"] = {"partition_activations": False, "contiguous_memory_optimization": False}
    return out
