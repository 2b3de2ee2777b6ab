"""`planner import megatron`: a Megatron-LM pretrain command line read into a plan spec (the inverse of export.py).

What is read, what is assumed and what is refused: docs/notes/hardening.md, "`planner import megatron`". Flag names
are export.MEGATRON_FLAG's (one table) and Megatron-LM's parser at d98e8a64 (planner/data/megatron_flags.json, built
by benchmarks/megatron_flags.py: how many values each option takes, so a line is split as argparse splits it).
"""
from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import dataclass, field
from functools import lru_cache

from planner.config import ParallelConfig
from planner.errors import SpecError
from planner.export import MEGATRON_ATTENTION_BACKEND, MEGATRON_FLAG

F = MEGATRON_FLAG
FLAGS_FILE = os.path.join(os.path.dirname(__file__), "data", "megatron_flags.json")
# the tokenizer whose size a launch line implies: GPT-2's BPE (Radford et al. 2019; models/gpt3-175b.yaml: 50257)
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257}
# flags for what the planner does not model: the run is refused rather than planned as something else
REFUSED = {
    "--num-experts": "mixture-of-experts layers are not modelled (dense decoders only)",
    "--multi-latent-attention": "multi-latent attention is not modelled (multi-head / grouped-query only)",
    "--encoder-num-layers": "encoder-decoder models are not modelled (decoder-only)",
    "--decoder-num-layers": "encoder-decoder models are not modelled (decoder-only; give --num-layers)",
    "--fp4-format": "FP4 training is not modelled (bf16, fp16, fp32, fp8)",
    "--use-torch-fsdp2": "the planner's FSDP plans are torchtitan's (planner export --format torchtitan), not "
                         "Megatron-LM's FSDP2 path",
    "--use-megatron-fsdp": "Megatron-FSDP is not modelled (ZeRO-3 plans are torchtitan's FSDP2)",
    "--window-size": "sliding-window attention is not modelled (full causal attention)",
    "--mtp-num-layers": "multi-token prediction layers are not modelled",
    "--first-last-layers-bf16": "the planner's fp8 runs every transformer layer's GEMMs in fp8",
    "--hybrid-override-pattern": "hybrid (Mamba) stacks are not modelled",
    "--add-qkv-bias": "QKV biases without the others are not a family the planner models (gpt: every linear "
                      "bias; llama: none)",
    # settings the planner models in one form only: taking the line without them would plan another run
    "--pipeline-model-parallel-layout": "a free layer layout: the planner's pipeline splits are even or uneven "
                                        "first / last stages (--decoder-first/last-pipeline-num-layers)",
    "--ddp-num-buckets": "the planner's gradient buckets are sized in elements (give --ddp-bucket-size)",
    "--optimizer-cpu-offload": "offloading is not modelled (the optimizer state stays in GPU memory)",
    "--fine-grained-activation-offloading": "offloading is not modelled (activations stay in GPU memory)",
}
# flags with a value the planner models only at Megatron-LM's default (an integer or a word): (default, why another
# value is refused);
# a default of None stands for the pipeline-parallel size (microbatch_group_size_per_vp_stage's default,
# megatron/core/model_parallel_config.py @ d98e8a64)
REFUSED_UNLESS = {
    "--num-distributed-optimizer-instances": (1, "the planner's distributed optimizer shards over the whole "
                                                 "data-parallel group (one instance)"),
    "--microbatch-group-size-per-virtual-pipeline-stage": (None, "the planner's interleaved 1F1B takes micro-batches "
                                                                 "in groups of the pipeline size (Megatron-Core's "
                                                                 "default)"),
    "--cpu-offloading-num-layers": (0, "offloading is not modelled (activations stay in GPU memory)"),
    # the precision-aware optimizer's dtypes (megatron/training/arguments.py @ d98e8a64; --main-grads-dtype bf16 also
    # keeps a bf16 run's gradient buffer in bf16): the planner counts fp32 main gradients, weights and Adam moments
    "--main-grads-dtype": ("fp32", "the planner's main gradients of a bf16 run are fp32 (give --grad-reduce-in-bf16 "
                                   "for a bf16 gradient buffer)"),
    "--main-params-dtype": ("fp32", "the planner's optimizer keeps fp32 main weights"),
    "--exp-avg-dtype": ("fp32", "the planner's Adam moments are fp32"),
    "--exp-avg-sq-dtype": ("fp32", "the planner's Adam moments are fp32"),
}
# estimate's flags (search.solve.check_config names them) -> the Megatron-LM flag the refusal is about
_ESTIMATE_FLAG = {"--tp": F["tp"], "--pp": F["pp"], "--cp": F["cp"], "--mbs": F["micro_batch_size"],
                  "--sp": F["sequence_parallel"], "--zero": F["zero"], "--vpp": F["vpp"], "--schedule": F["vpp"],
                  "--first-stage-layers": F["first_stage_layers"], "--last-stage-layers": F["last_stage_layers"],
                  "--account-embedding": F["account_embedding"], "--account-loss": F["account_loss"],
                  "--tp/--pp/--dp": f"{F['tp']} / {F['pp']} / the world size", "--dp": "the world size"}


@lru_cache(maxsize=1)
def megatron_flags() -> dict:
    """{option: values it takes (0, 1 or argparse's nargs)} of Megatron-LM's pretrain parser, and its commit."""
    with open(FLAGS_FILE) as fh:
        doc = json.load(fh)
    return doc


@dataclass(frozen=True)
class LaunchLine:
    """A launch line split as argparse would: Megatron-LM's flags with their values, the launcher's world size."""

    flags: dict
    """{flag: [values]}; a flag given twice keeps its last values, as argparse does."""
    repeated: tuple = ()
    """Flags given more than once."""
    unknown: tuple = ()
    """Flags Megatron-LM's parser (at the table's commit) does not have."""
    nnodes: int | None = None
    """torchrun's --nnodes, when the line has a literal one."""
    nproc_per_node: int | None = None
    """torchrun's --nproc-per-node (--nproc_per_node), when literal."""


def _tokens(text: str, file: str | None) -> list[str]:
    """Shell words of a launch file: `\\` line continuations joined, `#` comments dropped, quotes removed."""
    try:
        return shlex.split(text.replace("\\\r\n", " ").replace("\\\n", " "), comments=True, posix=True)
    except ValueError as e:        # an unclosed quote
        raise SpecError(file, None, f"is not a shell command line ({e})") from None


def _launcher_int(toks: list[str], names: tuple) -> int | None:
    for i, t in enumerate(toks):
        name, eq, val = t.partition("=")
        if name in names:
            v = val if eq else (toks[i + 1] if i + 1 < len(toks) else "")
            return int(v) if v.isdigit() and int(v) > 0 else None
    return None


def parse_launch(text: str, file: str | None = None) -> LaunchLine:
    """Split a pretrain command line (or its arguments): what precedes the first `*.py` word (torchrun, python -m
    torch.distributed.run, environment assignments) is the launcher; without one, the flags start at the first
    `--` word. Each flag takes as many words as Megatron-LM's parser gives it; a flag it does not know takes the
    words up to the next flag."""
    toks = _tokens(text, file)
    script = next((i for i, t in enumerate(toks) if t.endswith(".py")), None)
    start = script + 1 if script is not None else next((i for i, t in enumerate(toks) if t.startswith("--")), None)
    if start is None:
        raise SpecError(file, None, "holds no Megatron-LM flag (--num-layers ...)")
    launcher, toks = toks[:start], toks[start:]
    table = megatron_flags()["flags"]
    flags, repeated, unknown = {}, [], []
    i = 0
    while i < len(toks):
        t = toks[i]
        if not t.startswith("--"):
            prev = next((toks[j] for j in range(i - 1, -1, -1) if toks[j].startswith("--")), None)
            raise SpecError(file, prev or t, f"the word {t!r} is no flag and no value of one (Megatron-LM's parser "
                            "takes no positional arguments)")
        name, eq, val = t.partition("=")
        arity = table.get(name)
        i += 1
        if eq:
            if arity == 0:
                raise SpecError(file, name, f"is a switch and takes no value, got {val!r}")
            values = [val]
        elif arity == 0:
            values = []
        elif isinstance(arity, int):
            values = toks[i:i + arity]
            if len(values) < arity or any(v.startswith("--") for v in values):
                raise SpecError(file, name, f"takes {arity} value(s)")
            i += arity
        else:                     # '+', '*', '?' or a flag Megatron-LM does not have
            j = i
            while j < len(toks) and not toks[j].startswith("--"):
                j += 1
            values, i = toks[i:j], j
        if name not in table:
            unknown.append(name)
        if name in flags:
            repeated.append(name)
        flags[name] = values
    return LaunchLine(flags, tuple(dict.fromkeys(repeated)), tuple(dict.fromkeys(unknown)),
                      _launcher_int(launcher, ("--nnodes",)),
                      _launcher_int(launcher, ("--nproc-per-node", "--nproc_per_node")))


@dataclass
class ImportedRun:
    """A Megatron-LM run as the planner sees it."""

    model: dict
    training: dict
    config: ParallelConfig
    world_size: int
    read: set = field(default_factory=set)
    """The flags whose values went into the plan."""
    notes: list = field(default_factory=list)
    """What was assumed (values Megatron-LM derives, defaults taken)."""


class _Args:
    """Typed reads of a LaunchLine; every read marks its flag as read (the rest is listed as not read)."""

    def __init__(self, line: LaunchLine, file: str | None):
        self.line, self.file, self.read = line, file, set()

    def given(self, flag: str) -> bool:
        self.read.add(flag)
        return flag in self.line.flags

    def values(self, flag: str) -> list[str]:
        self.read.add(flag)
        vals = self.line.flags.get(flag, [])
        for v in vals:
            if "$" in v or "`" in v:
                raise SpecError(self.file, flag, f"holds the shell expression {v!r}: the importer reads literal "
                                "values; expand the script's variables first (e.g. run it with `bash -x`, or echo "
                                "the command it runs)")
        return vals

    def word(self, flag: str, default: str | None = None) -> str | None:
        vals = self.values(flag)
        if flag not in self.line.flags:
            return default
        if len(vals) != 1:
            raise SpecError(self.file, flag, f"takes one value, got {vals}")
        return vals[0]

    def int(self, flag: str, default: int | None = None, min_value: int = 1) -> int | None:
        v = self.word(flag)
        if v is None:
            return default
        try:
            n = int(v)
        except ValueError:
            try:
                x = float(v)
            except ValueError:
                x = None
            what = ("not a finite number" if x is not None and not math.isfinite(x) else
                    "not an integer")
            raise SpecError(self.file, flag, f"must be an integer >= {min_value}, got {v!r} ({what})") from None
        if n < min_value:
            raise SpecError(self.file, flag, f"must be an integer >= {min_value}, got {n}")
        return n

    def refuse(self, flag: str, why: str):
        return SpecError(self.file, flag, why)


def _model(a: _Args, vocab_override: int | None, tp: int, notes: list) -> dict:
    L = a.int("--num-layers")
    h = a.int("--hidden-size")
    heads = a.int("--num-attention-heads")
    for flag, v in (("--num-layers", L), ("--hidden-size", h), ("--num-attention-heads", heads)):
        if v is None:
            raise a.refuse(flag, "is required (Megatron-LM requires it too)")
    if h % heads:
        raise a.refuse("--num-attention-heads", f"{heads} heads do not divide --hidden-size {h}")
    kv_ch = a.int("--kv-channels")
    if kv_ch is not None and kv_ch != h // heads:
        raise a.refuse("--kv-channels", f"{kv_ch} differs from hidden / heads = {h // heads}; the planner's head "
                       "width is hidden / heads")
    gqa = a.given("--group-query-attention")
    groups = a.int("--num-query-groups", 1)      # Megatron-LM's default 1 applies only with GQA (argument_utils.py)
    if a.given("--num-query-groups") and not gqa:
        notes.append("--num-query-groups without --group-query-attention: Megatron-LM ignores it (multi-head "
                     "attention), so does the plan")
    kv = groups if gqa else heads
    if heads % kv:
        raise a.refuse("--num-query-groups", f"{kv} groups do not divide the {heads} heads")
    swiglu = a.given("--swiglu")
    norm = a.word("--normalization", "LayerNorm")
    pos = a.word("--position-embedding-type", "learned_absolute")
    if a.given("--use-rotary-position-embeddings"):
        pos = "rope"
    bias = not a.given("--disable-bias-linear")
    family = "llama" if swiglu else "gpt"
    # the two families the planner counts (spec.model): gpt = GeLU, LayerNorm, learned positions, biases;
    # llama = SwiGLU, RMSNorm, RoPE, no biases
    want = ({"--normalization": "RMSNorm", "--position-embedding-type": "rope", "--disable-bias-linear": False}
            if swiglu else {"--normalization": "LayerNorm", "--position-embedding-type": "learned_absolute",
                            "--disable-bias-linear": True})
    got = {"--normalization": norm, "--position-embedding-type": pos, "--disable-bias-linear": bias}
    for flag, w in want.items():
        if got[flag] != w:
            shown = ("biases on (no --disable-bias-linear)" if got[flag] is True else "--disable-bias-linear"
                     ) if flag == "--disable-bias-linear" else f"{got[flag]}"
            raise a.refuse(flag, f"{shown} with{'' if swiglu else 'out'} --swiglu: the planner models two families, "
                           "gpt (GeLU, LayerNorm, learned positions, linear biases) and llama (SwiGLU, RMSNorm, "
                           "RoPE, no biases); this mix is neither")
    for flag in ("--squared-relu", "--quick-geglu"):
        if a.given(flag):
            raise a.refuse(flag, "the planner's MLPs are GeLU (gpt) or SwiGLU (llama)")
    ffn = a.int("--ffn-hidden-size")
    if ffn is None:       # Megatron-LM validate_args (arguments.py @ d98e8a64)
        ffn = int((4 * h * 2 / 3) / 64) * 64 if swiglu else 4 * h
        notes.append(f"--ffn-hidden-size not given: {ffn}, Megatron-LM's default "
                     + ("for --swiglu (int(8h/3 / 64) * 64)" if swiglu else "(4h)"))
    seq = a.int("--seq-length")
    if seq is None:
        raise a.refuse("--seq-length", "is required (the planner plans one sequence length)")
    maxpos = a.int("--max-position-embeddings")
    if maxpos is None:
        raise a.refuse("--max-position-embeddings", "is required (Megatron-LM requires it too)")
    if maxpos < seq:
        raise a.refuse("--max-position-embeddings", f"{maxpos} is below --seq-length {seq} (Megatron-LM asserts "
                       "max_position_embeddings >= seq_length)")
    return {"name": None, "family": family, "num_layers": L, "hidden_size": h, "num_attention_heads": heads,
            "num_kv_heads": kv, "ffn_hidden_size": ffn, "vocab_size": _vocab(a, vocab_override, tp, notes),
            "tied_embeddings": not a.given("--untie-embeddings-and-output-weights"),
            "max_position_embeddings": maxpos, "_seq": seq}


def _vocab(a: _Args, override: int | None, tp: int, notes: list) -> int:
    """The embedding's rows as Megatron-LM builds them: --padded-vocab-size, else the tokenizer's size padded up to a
    multiple of --make-vocab-size-divisible-by (128) x tp (megatron/core/tokenizers/utils/build_tokenizer.py
    vocab_size_with_padding) unless --no-pad-vocab-size."""
    padded = a.int("--padded-vocab-size")
    if padded is not None:
        return padded
    tok = a.word("--tokenizer-type")
    size = override or a.int("--vocab-size") or TOKENIZER_VOCAB.get(tok)
    if size is None:
        raise a.refuse("--vocab-size", f"the vocabulary's size is not on the line (tokenizer {tok or 'not given'}): "
                       "give `planner import megatron --vocab-size N` (the tokenizer's size; it is padded as "
                       "Megatron-LM pads it)")
    src = ("--vocab-size of the import" if override else "--vocab-size" if a.given("--vocab-size")
           else f"{tok}'s {size} tokens")
    if a.given("--no-pad-vocab-size") or a.given("--disable-pad-vocab-size"):
        notes.append(f"vocab {size} ({src}), not padded (--no-pad-vocab-size)")
        return size
    mult = a.int("--make-vocab-size-divisible-by", 128) * tp
    out = -(-size // mult) * mult
    notes.append(f"vocab {out}: {size} ({src}) padded to a multiple of {mult} (--make-vocab-size-divisible-by x tp), "
                 "as Megatron-LM builds the embedding")
    return out


def _precision(a: _Args, notes: list) -> dict:
    bf16, fp16 = a.given(F["bf16"]), a.given(F["fp16"])
    if bf16 and fp16:
        raise a.refuse(F["fp16"], "with --bf16: Megatron-LM asserts one of them")
    fmt = a.word(F["fp8_format"])
    out = {}
    if fmt is not None:
        if not bf16:
            raise a.refuse(F["fp8_format"], "without --bf16: the planner's fp8 is Transformer Engine's with bf16 "
                           "weights and activations")
        if fmt != "hybrid":
            notes.append(f"--fp8-format {fmt}: costed as hybrid (the same fp8 GEMM rate)")
        recipe = a.word(F["fp8_recipe"], "delayed")
        if recipe not in ("delayed", "tensorwise"):
            raise a.refuse(F["fp8_recipe"], f"{recipe}: the planner models delayed and tensorwise scaling")
        out = {"precision": "fp8", "fp8_recipe": recipe, "fp8_param_gather": a.given(F["fp8_param_gather"])}
        a.given(F["fp8_amax_history_len"])       # delayed scaling's history: no cost of its own
        a.given(F["fp8_amax_compute_algo"])
    else:
        for flag in (F["fp8_recipe"], F["fp8_param_gather"]):
            if a.given(flag):
                raise a.refuse(flag, "acts only with --fp8-format (fp8 training)")
        out = {"precision": "bf16" if bf16 else "fp16" if fp16 else "fp32"}
    # the gradient buffer (Megatron-LM validate_args): --bf16 reduces in fp32 unless --grad-reduce-in-bf16; --fp16
    # in fp16 unless --accumulate-allreduce-grads-in-fp32
    fp32, in_bf16 = a.given(F["grad_reduce_in_fp32"]), a.given(F["grad_reduce_in_bf16"])
    if fp32 and in_bf16:
        raise a.refuse(F["grad_reduce_in_bf16"], "with --accumulate-allreduce-grads-in-fp32: one reduction dtype")
    if out["precision"] != "fp32":
        out["grad_reduce_in_fp32"] = (not in_bf16) if bf16 else fp32
    return out


def _recompute(a: _Args) -> tuple[str, int | None]:
    """(the plan's recompute mode, block's N or None) of the run's recompute flags."""
    gran = a.word(F["recompute_granularity"])
    if a.given(F["selective"]):
        if gran == "full":
            raise a.refuse(F["selective"], "with --recompute-granularity full: Megatron-LM turns it into selective")
        gran = "selective"
    method, n = a.word(F["recompute_method"]), a.int(F["recompute_num_layers"])
    if gran is None:
        if method is not None or n is not None:
            raise a.refuse(F["recompute_method"] if method else F["recompute_num_layers"],
                           "without --recompute-granularity full recomputes nothing")
        return "none", None
    if gran == "selective":
        mods = a.values(F["recompute_modules"])
        if mods and sorted(set(mods)) not in (["core_attn"], ["mlp"]):
            raise a.refuse(F["recompute_modules"], f"{' '.join(mods)}: the planner models one module at a time, "
                           "core_attn (its `selective`, Megatron-Core's default) or mlp (its `mlp`)")
        if method is not None:
            raise a.refuse(F["recompute_method"], "with selective recompute (Megatron-LM asserts none)")
        if n is not None:
            raise a.refuse(F["recompute_num_layers"], "with selective recompute (Megatron-Core's TransformerConfig: "
                           "'recompute_num_layers must be None')")
        return ("mlp" if mods and mods[0] == "mlp" else "selective"), None
    if gran != "full":
        raise a.refuse(F["recompute_granularity"], f"{gran}: expected full or selective")
    if method == "block":
        if n is None or n < 1:
            raise a.refuse(F["recompute_num_layers"], f"{n}: block recompute needs the layers per model chunk it "
                           "checkpoints, N >= 1 (Megatron-Core transformer_config.py)")
    elif method != "uniform" or n != 1:
        raise a.refuse(F["recompute_method"] if method != "uniform" else F["recompute_num_layers"],
                       f"full recompute with --recompute-method {method} --recompute-num-layers {n}: the planner "
                       "models uniform 1 (its `full`, every layer) and block N (its `block`)")
    if a.given("--distribute-saved-activations"):
        raise a.refuse("--distribute-saved-activations", "the planner keeps each checkpoint whole on every tensor "
                       "rank")
    return ("block", n) if method == "block" else ("full", None)


def _overlap(a: _Args, zero: int) -> dict:
    grad, param = a.given(F["overlap.grad_reduce"]), a.given(F["overlap.param_gather"])
    if param and not grad:
        raise a.refuse(F["overlap.param_gather"], "needs --overlap-grad-reduce (Megatron-LM: 'Must use "
                       "--overlap-param-gather with --overlap-grad-reduce')")
    if param and zero < 1:
        raise a.refuse(F["overlap.param_gather"], "needs --use-distributed-optimizer (Megatron-LM asserts it)")
    out = {"grad_reduce": grad, "param_gather": param, "p2p": not a.given(F["overlap.no_p2p"]),
           "tp_comm": a.given(F["overlap.tp_comm"])}
    bucket = a.int(F["overlap.bucket_size"])
    if bucket is not None:
        out["bucket_size"] = bucket
    return out


def _attention(a: _Args) -> dict:
    impl = a.word(F["transformer_impl"], "transformer_engine")
    backend = a.word(F["attention_backend"], "auto")
    if impl == "local" or backend in ("unfused", "local"):
        return {"attention": "unfused"}
    if backend == "auto":
        return {}
    back = {v: k for k, v in MEGATRON_ATTENTION_BACKEND.items()}.get(backend)
    if back is None:
        raise a.refuse(F["attention_backend"], f"{backend}: expected flash, fused, unfused, local or auto")
    return {"attention_backend": back}


def read_run(line: LaunchLine, gpus: int, file: str | None = None, vocab_size: int | None = None,
             world_size: int | None = None, gpus_per_node: int | None = None) -> ImportedRun:
    """The model, training job and configuration of a launch line on a cluster of `gpus` GPUs. world_size: the run's
    GPU count when given (else torchrun's, else the cluster's); it must be the cluster's, whose every GPU the search
    and estimate use, or (given gpus_per_node) a whole number of its nodes: the spec then takes the first of them
    (`cluster: {path, gpus}`)."""
    from planner.costs.context_parallel import MEGATRON_CP_COMM
    a, notes = _Args(line, file), []
    for flag, why in REFUSED.items():
        if a.given(flag) and not (flag == "--num-experts" and a.line.flags[flag] in (["0"], ["None"])):
            raise a.refuse(flag, why)
    tp, pp, cp = a.int(F["tp"], 1), a.int(F["pp"], 1), a.int(F["cp"], 1)
    for flag, (default, why) in REFUSED_UNLESS.items():
        want = pp if default is None else default
        v = a.word(flag, want) if isinstance(want, str) else a.int(flag, want, min_value=0)
        if v != want:
            raise a.refuse(flag, f"{v}: {why}")
    launched = line.nnodes * line.nproc_per_node if line.nnodes and line.nproc_per_node else None
    world = world_size or launched or gpus
    if world_size is None and launched is None:
        notes.append(f"world size not on the line: the cluster's {gpus} GPUs")
    part = gpus_per_node is not None and world < gpus and world % gpus_per_node == 0
    if world != gpus and not part:
        raise SpecError(None, "--cluster", f"has {gpus} GPUs, the run {world} ("
                        + ("--world-size" if world_size else "torchrun --nnodes x --nproc-per-node")
                        + "): the search and estimate use every GPU they are given, and the run is not a whole "
                        "number of the cluster's nodes within it; give a cluster of the run's size")
    if part:
        notes.append(f"the run's {world} GPUs: the first {world // gpus_per_node} of the cluster's "
                     f"{gpus // gpus_per_node} nodes (cluster: {{path, gpus: {world}}})")
    if world % (tp * pp * cp):
        raise a.refuse(F["tp"], f"tp x pp x cp = {tp * pp * cp} does not divide the world size {world}")
    dp = world // (tp * pp * cp)
    model = _model(a, vocab_size, tp, notes)
    seq = model.pop("_seq")
    mbs = a.int(F["micro_batch_size"], 1)
    gbs = a.int(F["global_batch_size"])
    if gbs is None:
        gbs = mbs * dp
        notes.append(f"--global-batch-size not given: micro-batch x dp = {gbs} (Megatron-LM's default)")
    if gbs % (mbs * dp):
        raise a.refuse(F["global_batch_size"], f"{gbs} is not a multiple of micro-batch x dp = {mbs} x {dp}")
    for flag in ("--rampup-batch-size", "--step-batch-size-schedule"):
        if a.given(flag):
            notes.append(f"{flag}: planned at the final global batch {gbs}")
    vpp = a.int(F["vpp"])
    per_stage = a.int("--num-layers-per-virtual-pipeline-stage")
    if vpp is not None and per_stage is not None:
        raise a.refuse("--num-layers-per-virtual-pipeline-stage", f"with {F['vpp']}: give one of them")
    if per_stage is not None:
        if model["num_layers"] % (pp * per_stage):
            raise a.refuse("--num-layers-per-virtual-pipeline-stage", f"{per_stage} layers per virtual stage do not "
                           f"divide {model['num_layers']} layers over pp={pp}")
        vpp = model["num_layers"] // (pp * per_stage)
    if vpp is not None and pp == 1:
        raise a.refuse(F["vpp"] if a.given(F["vpp"]) else "--num-layers-per-virtual-pipeline-stage",
                       "virtual pipeline stages need --pipeline-model-parallel-size > 1 (Megatron-LM asserts it)")
    interleaved = vpp is not None and vpp > 1
    first, last = a.int(F["first_stage_layers"]), a.int(F["last_stage_layers"])
    emb, loss = a.given(F["account_embedding"]), a.given(F["account_loss"])
    if pp == 1:
        for flag, v in ((F["first_stage_layers"], first), (F["last_stage_layers"], last),
                        (F["account_embedding"], emb), (F["account_loss"], loss)):
            if v:
                raise a.refuse(flag, "splits the pipeline: needs --pipeline-model-parallel-size > 1")
    sp = a.given(F["sequence_parallel"])
    if sp and tp == 1:
        notes.append("--sequence-parallel with tp 1: Megatron-LM turns it off")
        sp = False
    zero = 1 if a.given(F["zero"]) else 0
    rc, rc_n = _recompute(a)
    cfg_d = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "micro_batch_size": mbs, "num_microbatches": gbs // (mbs * dp),
             "schedule": "interleaved" if interleaved else "1f1b", "vpp": vpp if interleaved else 1,
             "recompute": rc, "recompute_layers": rc_n, "zero": zero, "sequence_parallel": sp,
             "first_stage_layers": first, "last_stage_layers": last, "account_embedding": emb, "account_loss": loss}
    cfg = ParallelConfig.from_dict(cfg_d, file, "the run")
    if rc == "block":
        from planner.search.space import block_as_full
        full = block_as_full(cfg, model["num_layers"])
        if full is not cfg:
            notes.append(f"--recompute-method block --recompute-num-layers {rc_n}: every layer of each model chunk "
                         "is checkpointed, i.e. full recompute (the planner's `full`): planned as such")
            cfg = full
        else:
            notes.append(f"--recompute-method block --recompute-num-layers {rc_n}: a pinned search (recompute: "
                         "[block]) chooses its own N, the fewest that fits; `planner estimate ... --recompute-layers "
                         f"{rc_n}` costs the run's")
    training = {"global_batch_size": gbs, "seq_length": seq, **_precision(a, notes)}
    opt = a.word("--optimizer", "adam")
    if opt not in ("adam", "sgd"):
        raise a.refuse("--optimizer", f"{opt}: the planner counts Adam's and SGD's state")
    training["optimizer"] = opt
    iters, samples = a.int("--train-iters"), a.int("--train-samples")
    if samples or iters:
        training["tokens"] = float((samples or iters * gbs) * seq)
    training["pipeline_engine"] = "megatron"
    ov = _overlap(a, zero)
    if ov["tp_comm"] and not sp:
        raise a.refuse(F["overlap.tp_comm"], "needs --sequence-parallel and tp > 1 (Megatron-LM asserts it)")
    training["overlap"] = ov
    training.update(_attention(a))
    if a.given("--cross-entropy-loss-fusion"):
        # the native fused loss (the default impl) takes the same fp32 copy of the logits as the unfused one
        # (megatron/core/fusions/fused_cross_entropy.py calls VocabParallelCrossEntropy.calculate_logits_max, whose
        # .float() both paths share, @ d98e8a64): the memory the plan counts; it batches two all-reduces, not costed
        impl = a.word("--cross-entropy-fusion-impl", "native")
        if impl == "te":
            notes.append("--cross-entropy-fusion-impl te: Transformer Engine's loss kernel works on the bf16 logits; "
                         "the plan counts Megatron's fp32 copy of them (an over-count of the loss's memory)")
    comm = a.values(F["cp_comm"])
    if cp > 1:
        modes = set(comm or ["p2p"])
        back = {v: k for k, v in MEGATRON_CP_COMM.items()}
        if len(modes) != 1 or next(iter(modes)) not in back:
            raise a.refuse(F["cp_comm"], f"{' '.join(comm)}: the planner models one exchange for every layer, p2p "
                           "(ring) or a2a (all-to-all)")
        training["cp_comm"] = back[next(iter(modes))]
    return ImportedRun(model, training, cfg, world, a.read, notes)


def not_read(line: LaunchLine, run: ImportedRun) -> list[str]:
    """Megatron-LM flags of the line that nothing in the plan comes from (learning rate, data, logging, ...)."""
    return [f for f in line.flags if f not in run.read and f not in line.unknown]


def pinned_search(cfg: ParallelConfig) -> dict:
    """The search space of exactly this configuration (search.space enumerates it alone)."""
    s = {"schedules": [cfg.schedule], "recompute": [cfg.recompute], "zero": [cfg.zero],
         "micro_batch_sizes": [cfg.micro_batch_size], "sequence_parallel": [cfg.sequence_parallel],
         "tensor_parallel": [cfg.tp], "pipeline_parallel": [cfg.pp], "context_parallel": [cfg.cp]}
    if cfg.schedule == "interleaved":
        s["virtual_stages"] = [cfg.vpp]
    if cfg.uneven:
        s["pipeline_split"] = {k: v for k, v in (("first_stage_layers", cfg.first_stage_layers),
                                                 ("last_stage_layers", cfg.last_stage_layers),
                                                 ("account_embedding", cfg.account_embedding),
                                                 ("account_loss", cfg.account_loss)) if v}
    else:
        s["uneven_stages"] = "none"
    return s


def free_search(run: ImportedRun) -> dict:
    """The usual open space (stock Megatron-LM's schedules, context parallelism where it applies), holding the run's
    own configuration: its micro-batch size and context-parallel degree are added to the lists."""
    cfg = run.config
    s = {"schedules": ["1f1b", "interleaved"], "micro_batch_sizes": sorted({1, 2, 4, 8, 16, cfg.micro_batch_size})}
    if run.training.get("attention", "fused") == "fused":
        s["context_parallel"] = "auto" if cfg.cp & (cfg.cp - 1) == 0 else sorted({1, cfg.cp})
    if cfg.zero == 1 and run.training.get("fp8_param_gather"):
        s["zero"] = [1]
    return s


def estimate_command(spec_path: str, cfg: ParallelConfig) -> str:
    """`planner estimate SPEC ...` for this configuration (cli.common.add_config_args' flags)."""
    words = ["planner", "estimate", spec_path, "--tp", cfg.tp, "--pp", cfg.pp, "--dp", cfg.dp, "--mbs",
             cfg.micro_batch_size]
    if cfg.cp > 1:
        words += ["--cp", cfg.cp]
    if cfg.schedule == "interleaved":
        words += ["--schedule", "interleaved", "--vpp", cfg.vpp]
    if cfg.recompute != "none":
        words += ["--recompute", cfg.recompute]
    if cfg.recompute_layers is not None:
        words += ["--recompute-layers", cfg.recompute_layers]
    if cfg.zero:
        words += ["--zero", cfg.zero]
    if cfg.sequence_parallel:
        words.append("--sp")
    if cfg.first_stage_layers is not None:
        words += ["--first-stage-layers", cfg.first_stage_layers]
    if cfg.last_stage_layers is not None:
        words += ["--last-stage-layers", cfg.last_stage_layers]
    if cfg.account_embedding:
        words.append("--account-embedding")
    if cfg.account_loss:
        words.append("--account-loss")
    return " ".join(shlex.quote(str(w)) for w in words)


def build_spec(run: ImportedRun, name: str, cluster_ref: str, source: str, free: bool = False) -> dict:
    """The plan spec (planner solve's schema): the model inline, the cluster by reference."""
    model = {**run.model, "name": name}
    return {"name": name,
            "description": f"imported by planner import megatron from {source} (Megatron-LM flags as of "
                           f"{megatron_flags()['commit'][:8]})" + ("; open search space" if free else
                                                                   "; search pinned to the run's configuration"),
            "model": model, "cluster": cluster_ref, "training": run.training,
            "search": free_search(run) if free else pinned_search(run.config)}


def check_spec(data: dict, out: str, run: ImportedRun, file: str | None, free: bool):
    """Load the spec as `planner solve` will, check the run's configuration against the planner's rules (refusals
    name the Megatron-LM flag) and, pinned, that the search enumerates it alone. Returns the Spec."""
    from planner.search.solve import check_config
    from planner.search.space import enumerate_configs, space_key
    from planner.spec.plan import parse_spec
    try:
        spec = parse_spec(data, out)
    except SpecError as e:
        raise SpecError(file, None, f"the spec for this run is refused ({e.field}: {e.reason})") from None
    try:
        check_config(spec, run.config)
    except SpecError as e:
        raise SpecError(file, _ESTIMATE_FLAG.get(e.field, e.field), e.reason) from None
    if not free:
        dropped: dict = {}
        got = list(enumerate_configs(spec, dropped=dropped))
        if [space_key(c) for c in got] != [space_key(run.config)]:     # block: the search chooses N itself
            why = "; ".join(f"{k}: {v[1]}" for k, v in dropped.items()) or "the planner's search rules"
            raise SpecError(file, None, f"the planner does not search this run's configuration "
                            f"({run.config.label()}): {why}")
    return spec
