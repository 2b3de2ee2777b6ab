"""One parallel configuration: what the search chooses (the mapping is separate)."""
from __future__ import annotations

from dataclasses import asdict, astuple, dataclass

from planner.memo import memo

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "v-min", "v-half", "v-zb")
# Megatron-Core's --recompute-granularity selective with --recompute-modules core_attn ("selective", its default) or
# mlp ("mlp": the dense MLP checkpointed from its input); "block": --recompute-granularity full --recompute-method
# block --recompute-num-layers N, the first N layers of each model chunk checkpointed (ParallelConfig.recompute_layers),
# the rest storing everything; "full" every layer (uniform, 1). Least memory saved first (block's N decides where).
# On a ZeRO-3 plan (torchtitan's) "block" is torchtitan's per-layer selective checkpointing instead, selective_ac_option
# = N: every N-th transformer block of the rank checkpointed whole (ParallelConfig.layer_sac).
RECOMPUTE = ("none", "selective", "mlp", "block", "full")
ZERO_STAGES = (0, 1, 2, 3)
# torchtitan's pipeline schedule (torch.distributed.pipelining) of each of ours that it runs (pytorch/torchtitan @
# 238fa9953e4aec2a62582121564273d7cbb1e9f1, torchtitan/config/job_config.py pipeline_parallel_schedule): ZeRO-3 /
# FSDP plans target torchtitan's FSDP2 (docs/notes/fsdp.md), so they are searched on these schedules only
TORCHTITAN_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B", "v-zb": "ZBVZeroBubble"}
V_SHAPES = ("v-min", "v-half", "v-zb")
# schedules whose backward is split into B (input grad) and W (weight grad): zero-bubble H1 and the V-shapes
SPLIT_SCHEDULES = ("zb-h1",) + V_SHAPES
# schedules stock Megatron-LM and NeMo do not ship: ZB-H1 and the V-shapes run on a zero-bubble fork of Megatron-LM
# (sail-sg's zero-bubble pipeline parallelism); torchtitan runs v-zb itself (TORCHTITAN_SCHEDULES). The one home of
# this list: export's comment line, the plan table and the solution's note read it
FORK_SCHEDULES = SPLIT_SCHEDULES        # the split-backward schedules are exactly the fork's
FORK_NEEDED = "needs a zero-bubble-capable Megatron fork (e.g. sail-sg zero-bubble)"


def fork_note(cfg) -> str:
    """'' or why a plan's schedule does not run on stock Megatron-LM / NeMo: ZB-H1 and the V-shapes of a Megatron
    plan (ZeRO 0-2). A ZeRO-3 plan is torchtitan's, which runs its V-shape (v-zb, ZBVZeroBubble)."""
    if cfg.schedule not in FORK_SCHEDULES or cfg.zero == 3 and cfg.schedule in TORCHTITAN_SCHEDULES:
        return ""
    return (f"schedule {cfg.schedule} {FORK_NEEDED}: stock Megatron-LM and NeMo do not ship it (leave it out of "
            "search.schedules to plan for them)")
# the software that runs the pipeline: Megatron-LM's schedules (batched send/recv pairs) or DeepSpeed's
# PipelineEngine (Megatron-DeepSpeed's GPTModelPipe: its own 1F1B, separate blocking sends and receives)
PIPELINE_ENGINES = ("megatron", "deepspeed")


def chunks_per_device(schedule: str, vpp: int) -> int:
    """Model chunks each pipeline device holds: the interleaved schedule's v, a V-shape's 2, otherwise 1 (the one
    rule; ParallelConfig.chunks applies it to a configuration)."""
    if schedule == "interleaved":
        return vpp
    return 2 if schedule in V_SHAPES else 1


@dataclass(frozen=True)
class ParallelConfig:
    """How one training step is split over the GPUs (the mapping onto nodes is separate).

    Unlike the spec dataclasses it stays positional: the search space and many tests build it compactly, and
    it sorts in field order (an even split, None, before any explicit count). `from_dict` is the one parser of its
    serialised forms."""

    tp: int
    """Tensor-parallel degree (inside a node)."""
    pp: int
    """Pipeline stages."""
    dp: int
    """Data-parallel replicas."""
    micro_batch_size: int
    """Sequences per micro-batch."""
    num_microbatches: int
    """Micro-batches per step per replica (global batch = micro_batch_size * num_microbatches * dp)."""
    schedule: str = "1f1b"
    """Pipeline schedule, one of SCHEDULES."""
    vpp: int = 1
    """Model chunks per device (interleaved: v; V-shapes: 2; otherwise 1)."""
    recompute: str = "none"
    """Activation recomputation, one of RECOMPUTE: none; selective (Megatron-Core's core_attn module); mlp (its mlp
    module: the dense MLP rebuilt from its input in backward); block (some whole layers, recompute_layers); full
    (every layer from its input)."""
    zero: int = 0
    """ZeRO stage (ZERO_STAGES): 1 shards optimizer state, 2 also gradients, over dp; 3 also the parameters (FSDP /
    ZeRO-3: torchtitan's FSDP2, gathered per transformer block; costs/fsdp.py)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (norms and dropout split over tp)."""
    first_stage_layers: int | None = None
    """Transformer layers on pipeline rank 0 (Megatron-Core --decoder-first-pipeline-num-layers); None: the even
    split. The middle ranks share the rest evenly (stage_layers)."""
    last_stage_layers: int | None = None
    """Transformer layers on the last pipeline rank (--decoder-last-pipeline-num-layers); None: the even split."""
    account_embedding: bool = False
    """The embedding counts as one layer in the even split (--account-for-embedding-in-pipeline-split): the first
    chunk of rank 0 builds one transformer layer fewer. Exclusive with the explicit counts (Megatron-Core)."""
    account_loss: bool = False
    """The loss (output layer) counts as one layer (--account-for-loss-in-pipeline-split): the last chunk of the
    last rank builds one layer fewer."""
    cp: int = 1
    """Context-parallel degree (Megatron-Core --context-parallel-size): each sequence is split over cp GPUs (2 * cp
    chunks, causal load balancing); the tp * cp group stays inside a node. Rank order tp-cp-dp-pp."""
    dp_shard: int = 0
    """ZeRO-3 only: GPUs of the data-parallel group one parameter is sharded over. 0: all dp (FSDP); 1 < dp_shard < dp
    with dp % dp_shard == 0: HSDP, dp_shard-way sharded and dp / dp_shard-way replicated (torchtitan's
    data_parallel_shard_degree / data_parallel_replicate_degree)."""
    recompute_layers: int | None = None
    """recompute "block" only: N of Megatron-Core's --recompute-method block --recompute-num-layers N, the layers of
    each model chunk (the first N; all of a smaller chunk) checkpointed from their input; on a ZeRO-3 plan the
    frequency n of torchtitan's per-layer selective checkpointing (selective_ac_option = "n": every n-th block of the
    rank, layer_sac). None for the other modes; a configuration the search enumerates has None until screening picks
    the fewest recomputed layers that fit (search.screen.block_layers)."""

    def _key(self) -> tuple:
        # None (even) sorts before any count, so configs of even splits keep their old order
        return tuple(-1 if x is None else x for x in astuple(self))

    def __lt__(self, other):
        return self._key() < other._key()

    def __le__(self, other):
        return self._key() <= other._key()

    def __gt__(self, other):
        return self._key() > other._key()

    def __ge__(self, other):
        return self._key() >= other._key()

    @property
    def uneven(self) -> bool:
        return (self.first_stage_layers is not None or self.last_stage_layers is not None or self.account_embedding
                or self.account_loss)

    @property
    def op_sac(self) -> bool:
        """ZeRO-3 plans are torchtitan's, and their selective recompute is torchtitan's per-op policy
        (selective_ac_option 'op'), not Megatron-Core's core-attention recompute (costs/memory.py op_sac_bytes)."""
        return self.zero == 3 and self.recompute == "selective"

    @property
    def layer_sac(self) -> bool:
        """`recompute: block` on a ZeRO-3 plan: torchtitan's per-layer selective checkpointing (selective_ac_option
        = str(recompute_layers)), not Megatron-Core's block method. One mode, two frameworks' forms of "checkpoint
        some whole blocks, store the rest", so that the search's machinery for block (N unset in the enumeration,
        screening's fewest recomputed layers that fit, export, the simulator's per-chunk layers) serves both; only
        which blocks are checkpointed differs (checkpointed_chunk_layers)."""
        return self.zero == 3 and self.recompute == "block"

    def checkpointed_chunk_layers(self, num_layers: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """Positions (0-based, in build order) of the layers of each model chunk of each pipeline rank rebuilt whole
        from their input in backward: all with full recompute; block: the first min(N, chunk) of each chunk
        (Megatron-Core recompute.py: per TransformerBlock, i.e. per virtual stage, layers 0 .. N-1 checkpointed),
        on a ZeRO-3 plan (layer_sac) every n-th block of the rank counted across its chunks in build order
        (pytorch/torchtitan @ 238fa9953e4aec2a62582121564273d7cbb1e9f1 distributed/activation_checkpoint.py
        _apply_layer_sac: a process-wide counter, incremented before the test, checkpoints a block when counter %
        n == 0; pipeline_parallel.py builds and parallelizes a rank's stages in ascending order, rank + s * pp, or
        (rank, 2pp - 1 - rank) for V-shapes: our chunk order); none otherwise."""
        return _checkpointed_chunk_layers(self, num_layers)

    def recomputed_chunk_layers(self, num_layers: int) -> tuple[tuple[int, ...], ...]:
        """How many layers of each model chunk of each pipeline rank are rebuilt whole from their input in backward
        (checkpointed_chunk_layers): all with full recompute, min(N, chunk) with block, every n-th of the rank with
        torchtitan's layer SAC (a ZeRO-3 plan's block: the multiples of n among the chunk's counter values), none
        otherwise. Counted without listing positions: the estimator calls it per stage."""
        return _recomputed_chunk_layers(self, num_layers)

    @property
    def shard_size(self) -> int:
        """GPUs a ZeRO-3 parameter is sharded over (dp_shard, or all of dp)."""
        return self.dp_shard or self.dp

    @property
    def replicas(self) -> int:
        """HSDP replicate degree (1 without HSDP)."""
        return self.dp // self.shard_size

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.num_microbatches * self.dp

    def layers_per_stage(self, num_layers: int) -> int:
        """Layers of a middle stage (every stage on an even split)."""
        return max(self.stage_layers(num_layers))

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Transformer layers of each pipeline rank (all its model chunks), Megatron-Core's rule (split_layers)."""
        return split_layers(num_layers, self.pp, self.chunks, self.first_stage_layers, self.last_stage_layers,
                            self.account_embedding, self.account_loss)

    def chunk_layers(self, num_layers: int) -> tuple[tuple[int, ...], ...]:
        """Layers of each model chunk of each pipeline rank: a rank's layers split evenly over its chunks, except
        that an accounted embedding (loss) takes one layer's place in rank 0's first (the last rank's last) chunk
        (get_num_layers_to_build)."""
        return _chunk_layers(self, num_layers)

    @property
    def chunks(self) -> int:
        """Model chunks per device (interleaved: v; V-shapes: 2; otherwise 1)."""
        return chunks_per_device(self.schedule, self.vpp)

    @classmethod
    def from_dict(cls, d, file: str | None = None, field: str = "config") -> ParallelConfig:
        """The one parser of a configuration: a solution's `config:`, a CSV row (strings), a dict.

        Bad input raises SpecError naming `file` and `field.<key>`."""
        from planner.errors import SpecError
        if not isinstance(d, dict):
            raise SpecError(file, field, "must be a mapping")
        def get(key, parse, *default):
            # each key parsed on its own, so that a bad value names its field
            try:
                return parse(d[key] if not default else d.get(key, default[0]))
            except KeyError:
                raise SpecError(file, f"{field}.{key}", "is missing") from None
            except (TypeError, ValueError, OverflowError) as e:
                raise SpecError(file, f"{field}.{key}", f"has a bad value ({e})") from None

        cfg = cls(get("tp", _whole), get("pp", _whole), get("dp", _whole), get("micro_batch_size", _whole),
                  get("num_microbatches", _whole), get("schedule", str, "1f1b"), get("vpp", _whole, 1),
                  get("recompute", str, "none"), get("zero", _whole, 0),
                  get("sequence_parallel", _flag, False),
                  get("first_stage_layers", _layers, None), get("last_stage_layers", _layers, None),
                  get("account_embedding", _flag, False), get("account_loss", _flag, False),
                  get("cp", lambda v: _count(v, 1), 1), dp_shard=get("dp_shard", _count, 0),
                  recompute_layers=get("recompute_layers", _layers, None))
        if cfg.cp < 1:
            raise SpecError(file, f"{field}.cp", f"must be a positive context-parallel degree, got {cfg.cp}")
        if cfg.schedule not in SCHEDULES:
            raise SpecError(file, f"{field}.schedule", f"must be one of {list(SCHEDULES)}")
        if cfg.recompute not in RECOMPUTE:
            raise SpecError(file, f"{field}.recompute", f"must be one of {list(RECOMPUTE)}")
        why = recompute_layers_problem(cfg)
        if why:
            raise SpecError(file, f"{field}.recompute_layers", why)
        for k in ("first_stage_layers", "last_stage_layers"):
            n = getattr(cfg, k)
            if n is None:
                continue
            if n <= 0:
                raise SpecError(file, f"{field}.{k}", f"must be a positive layer count (Megatron-Core), got {n}")
            if cfg.schedule in V_SHAPES:
                raise SpecError(file, f"{field}.{k}", f"uneven stages are Megatron-Core's; {cfg.schedule} is not")
            if n % cfg.chunks:
                raise SpecError(file, f"{field}.{k}", f"{n} layers must be divisible by the {cfg.chunks} virtual "
                                                      "stages (Megatron-Core)")
            if cfg.account_embedding or cfg.account_loss:
                raise SpecError(file, f"{field}.{k}", "cannot be set with account_embedding / account_loss "
                                                      "(Megatron-Core refuses both)")
        if (cfg.account_embedding or cfg.account_loss) and cfg.schedule in V_SHAPES:
            raise SpecError(file, f"{field}.account_embedding", f"uneven stages are Megatron-Core's; {cfg.schedule} "
                                                                "is not")
        if cfg.zero not in ZERO_STAGES:
            raise SpecError(file, f"{field}.zero", f"must be one of {list(ZERO_STAGES)}")
        why = dp_shard_problem(cfg)
        if why:
            raise SpecError(file, f"{field}.dp_shard", why)
        return cfg

    def as_dict(self) -> dict:
        """The fields, without the uneven-split ones when the split is even and without cp when it is 1 (old files
        and tools see no change)."""
        d = asdict(self)
        for k in ("first_stage_layers", "last_stage_layers", "account_embedding", "account_loss"):
            if d[k] is None or d[k] is False:
                del d[k]
        if d["cp"] == 1:
            del d["cp"]
        if not d["dp_shard"]:
            del d["dp_shard"]
        if d["recompute_layers"] is None:
            del d["recompute_layers"]
        return d

    def label(self) -> str:
        v = f" v{self.vpp}" if self.vpp > 1 else ""
        sp = " sp" if self.sequence_parallel else ""
        split = ""
        if self.first_stage_layers is not None or self.last_stage_layers is not None:
            # only when set: labels of even splits stay as they were
            split = f" L{_show(self.first_stage_layers)}/{_show(self.last_stage_layers)}"
        elif self.uneven:
            split = f" L{'E' if self.account_embedding else '-'}/{'L' if self.account_loss else '-'}"
        cp = f" cp{self.cp}" if self.cp > 1 else ""       # only when set: labels without cp stay as they were
        hsdp = f" hsdp{self.dp_shard}" if self.dp_shard else ""
        n = f"{self.recompute_layers}" if self.recompute_layers is not None else ""    # only when set: rc=block3
        return (f"tp{self.tp}{cp} pp{self.pp} dp{self.dp} mbs{self.micro_batch_size} m{self.num_microbatches} "
                f"{self.schedule}{v} rc={self.recompute}{n} z{self.zero}{sp}{split}{hsdp}")


def recompute_layers_problem(cfg: ParallelConfig) -> str | None:
    """Why cfg's recompute_layers does not go with its recompute mode, or None: block needs N >= 1 (Megatron-Core's
    transformer_config.py asks recompute_num_layers of full granularity; a ZeRO-3 plan's block is torchtitan's
    selective_ac_option = "n", n >= 1: its 0 would mean every block, which is full), the other modes take none."""
    n = cfg.recompute_layers
    if cfg.recompute == "block":
        if n is None:
            return "is required with recompute: block (Megatron-Core's --recompute-num-layers N)"
        if n < 1:
            return f"must be a positive layer count, got {n}"
        return None
    if n is not None:
        return f"is block recompute's layer count; recompute: {cfg.recompute} takes none"
    return None


def _flag(v) -> bool:
    # CSV cells arrive as the strings "True" / "False"; YAML and JSON give real booleans
    return v == "True" if isinstance(v, str) else bool(v)


def _layers(v) -> int | None:
    # None, absent or an empty CSV cell: the even split (block recompute: no N)
    if v is None or v == "" or v == "None":
        return None
    return _whole(v, "a layer count")


def _whole(v, what: str = "a whole number") -> int:
    # int() would read 2.5 as 2 and True as 1; .inf raises OverflowError (from_dict names the field either way)
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"{what}, not {v!r}")
    return int(v)


def current_scaling(training, cfg: ParallelConfig) -> bool:
    """The plan's fp8 casts scale by the tensor's own amax: Transformer Engine with training.fp8_recipe tensorwise,
    or a ZeRO-3 plan (torchao's Float8, tensor-wise dynamic, whatever fp8_recipe says); costs.compute.fp8_cast_bytes
    and costs.memory.fp8_weight_copy_bytes read it."""
    return cfg.zero == 3 or getattr(training, "fp8_recipe", "delayed") == "tensorwise"


def engine_recompute_problem(engine: str, recompute: str) -> str | None:
    """Why a pipeline engine cannot run a recompute mode, or None. DeepSpeed's engine is Megatron-DeepSpeed's
    GPTModelPipe (microsoft/Megatron-DeepSpeed @ f4157bea): its checkpointing is DeepSpeed's PipelineModule
    activation_checkpoint_interval, set from --recompute-method uniform only, 0 (none) for block ('deepspeed's
    pipeline doesn't support the block recompute method', megatron/model/gpt_model.py), and megatron/arguments.py has
    no --recompute-modules (its selective is the core attention)."""
    if engine == "deepspeed" and recompute in ("mlp", "block"):
        what = "--recompute-modules mlp (it has no such flag)" if recompute == "mlp" else \
            "--recompute-method block (GPTModelPipe then checkpoints nothing)"
        return (f"{recompute} recompute is Megatron-Core's {what}; the deepspeed pipeline engine (Megatron-DeepSpeed's "
                "GPTModelPipe) checkpoints every layer (full) or the core attention (selective)")
    return None


def torchtitan_problem(cfg: ParallelConfig) -> tuple[str, str] | None:
    """Why torchtitan cannot run `cfg`'s split, as (config field, reason), or None. ZeRO-3 plans are costed as
    torchtitan's FSDP2 (docs/notes/fsdp.md), so the command line checks these for them and the torchtitan export for
    every plan; the search enumerates only configurations that pass them (search.space)."""
    if cfg.schedule not in TORCHTITAN_SCHEDULES:
        return "schedule", f"{cfg.schedule} has no torchtitan schedule (it runs {sorted(TORCHTITAN_SCHEDULES)})"
    if cfg.account_embedding or cfg.account_loss:
        return "account_embedding", "an accounted embedding / loss split is Megatron-Core's; torchtitan has none"
    if cfg.tp > 1 and not cfg.sequence_parallel:
        return "sequence_parallel", "torchtitan's tensor parallelism always shards the norms (sequence parallel)"
    if cfg.recompute == "mlp" or (cfg.recompute == "block" and cfg.zero != 3):
        # torchtitan's activation_checkpoint modes: none, full (per block) and selective (per op, or every n-th block).
        # A ZeRO-3 plan's block IS the every-n-th-block form (ParallelConfig.layer_sac); Megatron-Core's first N of
        # each chunk (a ZeRO 0-2 plan's block) has no torchtitan form
        what = "--recompute-modules mlp" if cfg.recompute == "mlp" else "--recompute-method block"
        return "recompute", (f"{cfg.recompute} recompute is Megatron-Core's {what}; torchtitan checkpoints whole "
                             "blocks (full), every n-th block or ops (selective)")
    # PyTorch's schedule constructors (torch 2.13.0 torch/distributed/pipelining/schedules.py, which torchtitan builds
    # with n_microbatches = local_batch_size / pipeline_parallel_microbatch_size): Schedule1F1B raises 'Number of
    # microbatches (m) must be greater than or equal to the number of stages (pp)', ScheduleInterleaved1F1B
    # 'requires the number of microbatches to be a multiple of the number of rounds' (max(1, m // pp))
    m = cfg.num_microbatches
    if cfg.pp > 1 and cfg.schedule == "1f1b" and m < cfg.pp:
        # the value is m, not the micro-batch size the command line's flag sets: say which
        return "num_microbatches", (f"{m} micro-batches (global batch / (dp x micro-batch size)): torchtitan's 1F1B "
                                    f"(PyTorch's Schedule1F1B) needs at least as many as stages ({cfg.pp})")
    if cfg.pp > 1 and cfg.schedule == "interleaved" and m % max(1, m // cfg.pp):
        return "num_microbatches", (f"{m} micro-batches (global batch / (dp x micro-batch size)): torchtitan's "
                                    "Interleaved1F1B (PyTorch's ScheduleInterleaved1F1B) needs a multiple of its "
                                    f"{max(1, m // cfg.pp)} rounds (max(1, m // pp))")
    return None


# the flag that sets each field torchtitan_problem may name
TORCHTITAN_FLAGS = {"schedule": "--schedule", "account_embedding": "--account-embedding", "sequence_parallel": "--sp",
                    "num_microbatches": "--mbs", "recompute": "--recompute"}     # m = global batch / (dp x mbs)


def zero3_problem(cfg: ParallelConfig) -> tuple[str, str] | None:
    """Why a ZeRO-3 plan (costed as torchtitan's FSDP2, docs/notes/fsdp.md) cannot run, as (flag, reason), or None:
    torchtitan_problem, and HSDP with context parallelism. search.solve.check_config applies it to every plan given as
    a configuration (flags, solutions, the library); the search enumerates none of these."""
    if cfg.zero != 3:
        return None
    why = torchtitan_problem(cfg)
    if why:
        return TORCHTITAN_FLAGS[why[0]], f"ZeRO-3 plans are torchtitan's: {why[1]}"
    if cfg.cp > 1 and cfg.dp_shard:
        return "--dp-shard", ("HSDP with context parallelism (torchtitan's dp_replicate x (dp_shard x cp)) is not "
                              "modelled; FSDP + CP shards over dp x cp")
    return None


def sequence_parallel_problem(training, cfg: ParallelConfig) -> str | None:
    """Why sequence parallelism cannot split this configuration's sequence, or None. Megatron-Core lays a
    micro-batch out as [s / cp, b, h] (context parallelism keeps s / cp tokens per rank) and sequence parallelism
    scatters that first dimension over tp: NVIDIA/Megatron-LM megatron/core/tensor_parallel/mappings.py
    _split_along_first_dim / _reduce_scatter_along_first_dim assert 'First dimension of the tensor should be
    divisible by tensor parallel size'. torchtitan's SequenceParallel shards the same tokens; it is held to the same
    rule."""
    if not cfg.sequence_parallel or cfg.tp == 1:
        return None
    s = training.seq_length // cfg.cp
    if s % cfg.tp:
        cp = f" / cp {cfg.cp}" if cfg.cp > 1 else ""
        return (f"sequence parallelism splits the {s} tokens of a sequence (seq_length {training.seq_length}{cp}) "
                f"over tp={cfg.tp}, which does not divide them (Megatron-Core tensor_parallel/mappings.py: 'First "
                "dimension of the tensor should be divisible by tensor parallel size')")
    return None


def interleaved_p2p_problem(training, schedule: str, pp: int) -> str | None:
    """Why Megatron-LM refuses the interleaved schedule on `pp` stages with training.overlap.p2p off, or None.
    NVIDIA/Megatron-LM @ d98e8a64 megatron/training/arguments.py (validate_args), with virtual pipeline stages and
    overlap_p2p_comm off: 'When interleaved schedule is used and p2p communication overlap is disabled,
    pipeline-model-parallel size should be greater than 2 to avoid having multiple p2p sends and recvs between same 2
    ranks per communication batch'. The search skips these configurations (search.space), estimate and simulate
    refuse them (search.solve.check_config)."""
    if schedule != "interleaved" or pp > 2 or training.overlap.p2p:
        return None
    return (f"the interleaved schedule on pp={pp} stages needs training.overlap.p2p: with p2p overlap off Megatron-LM "
            "asserts pipeline-model-parallel size > 2 (megatron/training/arguments.py: 'When interleaved schedule is "
            "used and p2p communication overlap is disabled, pipeline-model-parallel size should be greater than 2 "
            "to avoid having multiple p2p sends and recvs between same 2 ranks per communication batch'): use pp > 2, "
            "another schedule, or training.overlap.p2p true")


# FP8 GEMM shapes. Transformer Engine (NVIDIA/TransformerEngine @ d0067d0da6cb01811b8072a7d304f0e00344ce2b), for the
# per-tensor recipes the planner models (delayed and tensorwise current scaling; MXFP8 is not modelled):
# - on every GPU, transformer_engine/pytorch/utils.py assert_dim_for_fp8_exec, called on each Linear's local input and
#   weight by module/linear.py, layernorm_linear.py, layernorm_mlp.py: "FP8 execution requires the product of all
#   dimensions except the last to be divisible by 8 and the last dimension to be divisible by 16" (older TE: "FP8
#   execution requires 2D input matrices with height divisible by 8 and width divisible by 16"); and
#   common/gemm/cublaslt_gemm.cu CanonicalizeGemmInput's "Leading dimension requirement on A / B for FP8 GEMM. Caller
#   must pad.", lda % 16 and ldb % 16: the input-gradient GEMM's output-gradient operand (layout NN) has the weight's
#   output width as its leading dimension on every GPU, so every GEMM width is a multiple of 16;
# - on GPUs whose fp8 GEMM is TN only (Hopper, Ada, RTX Blackwell: spec.cluster.fp8_gemm_tn_only), the same function
#   swaps a non-transposed operand for its stored transpose ("Hopper only supports TN GEMMs for FP8"), so the
#   weight-gradient GEMM (layout NT) reads both operands with the micro-batch's tokens (gathered over sequence
#   parallelism) as the leading dimension: tokens a multiple of 16. On data-centre Blackwell
#   (nvte_is_non_tn_fp8_gemm_supported, compute capability 10.x) the tensors keep only row-wise data
#   (pytorch/csrc/quantizer.cpp Float8Quantizer / Float8CurrentScalingQuantizer::create_tensor: with_transpose is
#   false) and that GEMM's leading dimensions are the two widths: the tokens need only assert_dim_for_fp8_exec's 8.
# torchao's Float8Linear (ZeRO-3 plans, torchtitan) calls torch._scaled_mm, whose checks (torch/_meta_registrations.py,
# on every GPU) ask "self.size(1) to be divisible by 16" and "both dimensions of mat2 to be divisble by 16": tokens and
# widths multiples of 16 in its three GEMMs (torchtitan's float8 converter, _module_filter_fn, leaves a Linear whose
# unsharded dims are not multiples of 16 in bf16, which the plan would cost as fp8; a tensor-parallel shard that is
# not fails _scaled_mm).
FP8_TOKENS = 16            # tokens of a GEMM: TE's TN-only weight-gradient GEMM's leading dimension, and torchao's
FP8_TOKENS_TE_LOCAL = 8    # TE's assertion on a Linear's local input rows (sequence parallel: column-parallel layers)
FP8_WIDTH = 16             # every GEMM width (input features, and output features read transposed in backward)


def fp8_token_multiple(zero: int, tn_only: bool) -> int:
    """The multiple an fp8 micro-batch's tokens must be: 16 for torchao's Float8 (ZeRO-3 plans) on every GPU and for
    Transformer Engine where the fp8 GEMM is TN only; 8 for TE where it takes any layout (data-centre Blackwell)."""
    return FP8_TOKENS if zero == 3 or tn_only else FP8_TOKENS_TE_LOCAL


def fp8_shape_problem(model, training, cfg: ParallelConfig, gpu) -> tuple[str, str] | None:
    """Why the fp8 GEMMs of this configuration have a shape Transformer Engine (ZeRO 0-2 plans) or torchao's Float8
    (ZeRO-3 plans) refuses on `gpu` (the cluster's GPUSpec), as (config field, reason), or None (also for other
    precisions). Per micro-batch a GEMM sees mbs * seq_length / cp tokens (sequence parallel: TE's column-parallel
    layers assert on their local 1 / tp of them); its widths are the hidden size and the tensor-parallel shards of the
    QKV, projection, fc1 and fc2 weights (torchtitan: wq, wk, wv, w1, w3 separately). The widths' rule is the same on
    every GPU; the tokens' depends on whether its fp8 GEMM is TN only (spec.cluster.fp8_gemm_tn_only)."""
    if training.precision != "fp8":
        return None
    from planner.spec.cluster import fp8_gemm_tn_only
    tn_only = fp8_gemm_tn_only(gpu)
    h, t = model.hidden_size, cfg.tp
    q, kv, f = model.num_attention_heads * model.head_dim, model.kv_channels, model.ffn_hidden_size
    if cfg.zero == 3:
        who = "torchao's Float8 (torch._scaled_mm: every GEMM dimension a multiple of 16)"
        widths = {"hidden_size": h, "query width / tp": q // t, "kv width / tp": kv // t,
                  "ffn_hidden_size / tp": f // t}
    else:
        who = "Transformer Engine (assert_dim_for_fp8_exec and cuBLASLt's fp8 leading dimensions, multiples of 16)"
        widths = {"hidden_size": h, "QKV width / tp": (q + 2 * kv) // t, "attention width / tp": q // t,
                  "fc1 width / tp": f * (2 if model.gated_mlp else 1) // t, "ffn_hidden_size / tp": f // t}
    bad = [f"{k} {v}" for k, v in widths.items() if v % FP8_WIDTH]
    if bad:
        return "tp", (f"fp8 GEMM widths must be multiples of {FP8_WIDTH} for {who}; tp={t} gives "
                      f"{', '.join(bad)}")
    tokens = cfg.micro_batch_size * training.seq_length // cfg.cp
    shown = f"mbs {cfg.micro_batch_size} x seq_length {training.seq_length}" + (f" / cp {cfg.cp}" if cfg.cp > 1 else "")
    step = fp8_token_multiple(cfg.zero, tn_only)
    if tokens % step:
        why = (who if cfg.zero == 3 else
               f"Transformer Engine on {gpu.type}, whose fp8 GEMM is TN only (the weight-gradient GEMM's leading "
               "dimension)" if tn_only else "Transformer Engine (assert_dim_for_fp8_exec)")
        return "micro_batch_size", (f"an fp8 GEMM's tokens per micro-batch ({shown} = {tokens}) must be a multiple of "
                                    f"{step} for {why}")
    if cfg.zero != 3 and cfg.sequence_parallel and t > 1 and (tokens % t or (tokens // t) % FP8_TOKENS_TE_LOCAL):
        return "sequence_parallel", (f"with sequence parallelism a column-parallel layer's fp8 input holds "
                                     f"{tokens / t:g} tokens ({shown} / tp {t}), not a multiple of "
                                     f"{FP8_TOKENS_TE_LOCAL} (Transformer Engine assert_dim_for_fp8_exec)")
    return None


def dp_shard_problem(cfg: ParallelConfig) -> str | None:
    """Why cfg.dp_shard is illegal (None if it is fine): HSDP needs ZeRO-3 and a shard group that divides dp and lies
    strictly between 1 and dp (dp_shard = dp is plain FSDP, written 0)."""
    k = cfg.dp_shard
    if not k:
        return None
    if k < 0:
        return f"must be 0 (shard over all dp) or a shard-group size, got {k}"
    if cfg.zero != 3:
        return f"{k} is HSDP's shard-group size; it needs ZeRO stage 3"
    if not 1 < k < cfg.dp or cfg.dp % k:
        return f"{k} must divide dp={cfg.dp} and lie strictly between 1 and dp (0 means: shard over all dp)"
    return None


def _count(v, default: int = 0) -> int:
    # absent, None or an empty CSV cell: the default; a degree is an integer, never a boolean or a fraction
    if v is None or v == "" or v == "None":
        return default
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"a count, not {v!r}")
    return int(v)


def _show(n: int | None) -> str:
    return "-" if n is None else str(n)


@memo(4096)      # pure, and called per stage of every configuration the memory screen sees
def split_layers(num_layers: int, pp: int, chunks: int = 1, first: int | None = None, last: int | None = None,
                 account_embedding: bool = False, account_loss: bool = False) -> tuple[int, ...]:
    """Transformer layers of each pipeline rank, as Megatron-Core builds them; ValueError when it would refuse.

    Mirrors NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553: TransformerConfig.__post_init__ ("Uneven
    PP", megatron/core/transformer/transformer_config.py) and get_num_layers_to_build
    (megatron/core/transformer/transformer_block.py):
    - even (first = last = None): pp * chunks divides the layers;
    - --decoder-first/last-pipeline-num-layers: each given count > 0 and divisible by the virtual pipeline size;
      the middle ranks share the rest evenly ("must be divisible by the middle pipeline model parallel size"), a
      multiple of the virtual pipeline size each; middle layers exist iff middle ranks do (pp <= 2 has none);
      every chunk of a rank holds rank_layers / chunks;
    - --account-for-embedding/loss-in-pipeline-split (exclusive with the counts): the embedding and the loss count
      as one layer each; layers + those divide evenly over pp (and chunks); the first (last) rank builds one
      layer fewer, in its first (last) chunk.
    `chunks` is Megatron's virtual pipeline size (1 without interleaving)."""
    if pp < 1 or chunks < 1:
        raise ValueError(f"pp={pp} and chunks={chunks} must be positive")
    if (first is not None or last is not None) and (account_embedding or account_loss):
        raise ValueError("first/last stage layer counts cannot be set with the embedding or loss accounted in the "
                         "pipeline split (Megatron-Core refuses both)")
    if first is None and last is None:
        n = num_layers + int(account_embedding) + int(account_loss)
        if n % pp:
            raise ValueError(f"{n} layers do not split evenly over pp={pp}")
        if (n // pp) % chunks:
            raise ValueError(f"{n // pp} layers per stage do not split into {chunks} chunks")
        out = [n // pp] * pp
        out[0] -= int(account_embedding)
        out[-1] -= int(account_loss)
        if min(out) < 0 or (pp == 1 and out[0] < 0):
            raise ValueError("not enough layers in the first or last stage")
        return tuple(out)
    rest, middle = num_layers, pp
    for name, k in (("first", first), ("last", last)):
        if k is None:
            continue
        if k <= 0:
            raise ValueError(f"the {name} stage's layer count must be larger than 0, got {k}")
        if k % chunks:
            raise ValueError(f"the {name} stage's {k} layers must be divisible by the {chunks} virtual stages")
        rest -= k
        middle -= 1
    if middle < 0:
        raise ValueError(f"pp={pp} has no separate first and last stage")
    if rest < 0 or bool(rest) != bool(middle):
        raise ValueError(f"{rest} middle layers remain for {middle} middle stages")
    per = rest // middle if middle else 0
    if middle and rest % middle:
        raise ValueError(f"the {rest} middle layers must split evenly over the {middle} middle stages")
    if middle and per % chunks:
        raise ValueError(f"the {per} layers of each middle stage must be divisible by the {chunks} virtual stages")
    out = [per] * pp
    if first is not None:
        out[0] = first
    if last is not None:
        out[-1] = last
    return tuple(out)


@memo(4096)      # pure (frozen config); the memory screen asks per stage
def _checkpointed_chunk_layers(cfg: ParallelConfig, num_layers: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    chunks = cfg.chunk_layers(num_layers)
    if cfg.recompute == "full":
        return tuple(tuple(tuple(range(n)) for n in c) for c in chunks)
    if cfg.recompute == "block" and cfg.recompute_layers:
        N = cfg.recompute_layers
        if not cfg.layer_sac:
            return tuple(tuple(tuple(range(min(N, n))) for n in c) for c in chunks)
        out = []
        for c in chunks:
            o, rank = 0, []
            for n in c:
                rank.append(tuple(j for j in range(n) if (o + j + 1) % N == 0))
                o += n
            out.append(tuple(rank))
        return tuple(out)
    return tuple(tuple(() for _ in c) for c in chunks)


@memo(4096)      # pure (frozen config); the memory screen asks per stage
def _recomputed_chunk_layers(cfg: ParallelConfig, num_layers: int) -> tuple[tuple[int, ...], ...]:
    chunks = cfg.chunk_layers(num_layers)
    if cfg.recompute == "full":
        return chunks
    if cfg.recompute == "block" and cfg.recompute_layers:
        N = cfg.recompute_layers
        if not cfg.layer_sac:
            return tuple(tuple(min(N, n) for n in c) for c in chunks)
        ends = [[sum(c[:i + 1]) for i in range(len(c))] for c in chunks]
        return tuple(tuple(e // N - (e - n) // N for n, e in zip(c, ee)) for c, ee in zip(chunks, ends))
    return tuple(tuple(0 for _ in c) for c in chunks)


@memo(4096)      # pure (frozen config); the memory screen asks per stage
def _chunk_layers(cfg: ParallelConfig, num_layers: int) -> tuple[tuple[int, ...], ...]:
    v = cfg.chunks
    per = cfg.stage_layers(num_layers)
    out = [[(n + int(cfg.account_embedding and i == 0) + int(cfg.account_loss and i == cfg.pp - 1)) // v] * v
           for i, n in enumerate(per)]
    if cfg.account_embedding:
        out[0][0] -= 1
    if cfg.account_loss:
        out[-1][-1] -= 1
    return tuple(tuple(c) for c in out)
