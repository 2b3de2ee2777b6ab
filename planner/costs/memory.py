"""Analytical per-GPU memory breakdown of one pipeline stage (Korthikanti et al. 2022; seed 003).

Activations follow the tensor-by-tensor count of Korthikanti et al. (sbh(34 + 5as/h) per GPT layer before
tensor / sequence parallel and recompute), generalised to the Llama family (no dropout, RMSNorm, RoPE,
SwiGLU, grouped-query attention) by counting what each op of a Megatron-style layer saves for backward.
planner/profile/memory.py runs that layer in PyTorch and measures these counts exactly (tests check it).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from planner.config import V_SHAPES, ParallelConfig
from planner.schedules import chunks_per_device, inflight_microbatches

GiB = 1024 ** 3


@dataclass(frozen=True)
class MemoryBreakdown:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    overhead: float
    transient: float = 0.0       # backward working set beyond stored activations (recompute, gradient buffers)
    correction: float = 0.0      # learned estimator: its fitted peak minus the analytical terms (may be < 0)
    safety: float = 0.0          # learned estimator: headroom its safety factor adds (no OOM plan called feasible)

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.overhead
                + self.transient + self.correction + self.safety)

    def as_GiB(self) -> dict:
        d = {k: v / GiB for k, v in asdict(self).items()}
        d["total"] = self.total / GiB
        return d


def holds_output(cfg: ParallelConfig, stage: int) -> bool:
    """The stage with the output layer and loss: the last one, or stage 0 for V-shapes (the V comes back)."""
    return stage == (0 if cfg.schedule in V_SHAPES else cfg.pp - 1)


def stage_params(model, cfg: ParallelConfig, stage: int) -> float:
    """Parameters held by one GPU of `stage` (tensor-parallel shard)."""
    L = model.num_layers // cfg.pp
    p = L * model.layer_params() / cfg.tp
    if stage == 0:
        p += model.embedding_params() / cfg.tp
    if holds_output(cfg, stage):
        p += model.output_params() / cfg.tp
        if model.tied_embeddings and stage != 0:   # Megatron keeps a copy of the word embedding on the last stage
            p += model.vocab_size * model.hidden_size / cfg.tp
    return p


def has_dropout(model) -> bool:
    """GPT (GPT-3, Megatron GPT) trains with dropout 0.1; Llama-style models without."""
    return model.family == "gpt"


def _qkv_saved_per_token(model, t: int) -> float:
    """Bytes per token of Q, K, V saved for the attention GEMMs (one TP shard).

    GPT: q, k, v are views of the QKV output, saved whole: 2(h + 2kv) (GQA: 6h, copies). Llama: RoPE makes new q, k (2h, 2kv);
    with MHA v stays a view of the QKV output, so that is kept whole; with GQA k and v are expanded to all
    heads (new 2h each) and the QKV output is freed."""
    h, kv = model.hidden_size, model.kv_channels
    gqa = model.num_kv_heads != model.num_attention_heads
    if model.family == "gpt":
        b = 6 * h if gqa else 2 * (h + 2 * kv)   # GQA: q is copied, k and v expanded; the QKV output freed
    else:
        b = 6 * h if gqa else 4 * h + 2 * (h + 2 * kv)
    return b / t


def layer_activation_parts(model, training, cfg: ParallelConfig) -> tuple[float, float]:
    """(linear-in-s part, attention-core part) of one layer's stored activations, one micro-batch, bytes."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    a, f = model.num_attention_heads, model.ffn_hidden_size
    sp = t if cfg.sequence_parallel else 1
    drop = has_dropout(model)
    if cfg.recompute == "full":
        return 2 * s * b * h / sp, 0.0               # each layer's input only
    # norms' inputs, QKV and fc1 inputs (2h each) and the two hidden-dropout masks (1 byte each)
    replicated = (8 * h + (2 * h if drop else 0)) / sp
    mlp = (4 * f if model.family == "gpt" else 6 * f) / t   # GeLU in + fc2 in | fused SwiGLU's fc1 out + fc2 in
    sharded = _qkv_saved_per_token(model, t) + 2 * h / t + mlp
    core = 0.0 if cfg.recompute == "selective" else (5 if drop else 2) * a * s / t   # softmax (+mask, +dropout)
    return s * b * (replicated + sharded), s * b * core


def layer_activation_bytes(model, training, cfg: ParallelConfig) -> float:
    """Activations one layer stores for backward, one micro-batch (bytes), 16-bit activations.
    GPT: sbh(10 + 24/t + 5as/(ht)) with TP; sbh(34 + 5as/h)/t with TP+SP; 34sbh/t selective; 2sbh/t full."""
    lin, core = layer_activation_parts(model, training, cfg)
    return lin + core


def layer_transient_bytes(model, training, cfg: ParallelConfig) -> float:
    """Backward working set of one layer, one micro-batch: what recompute rebuilds, the gradient of the widest
    intermediate (the MLP's f/t-wide tensor or the attention scores) and the largest weight gradient."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    a, f = model.num_attention_heads, model.ffn_hidden_size
    rebuilt = 0.0
    if cfg.recompute != "none":
        full = ParallelConfig(cfg.tp, cfg.pp, cfg.dp, cfg.micro_batch_size, cfg.num_microbatches, cfg.schedule,
                              cfg.vpp, "none", cfg.zero, cfg.sequence_parallel)
        lin, core = layer_activation_parts(model, training, full)
        rebuilt = core if cfg.recompute == "selective" else lin + core
    widest = 2 * s * b * max(a * s, 2 * f if model.gated_mlp else f) / t
    # a GEMM's 16-bit weight gradient before it is added to the fp32 main_grad (large for wide, short runs)
    kv = model.kv_channels
    wgrad = 2 * max(h * (h + 2 * kv), h * f * (2 if model.gated_mlp else 1)) / t
    return rebuilt + widest + wgrad


def stage_inflight(cfg: ParallelConfig, stage: int) -> float:
    return inflight_microbatches(cfg.schedule, cfg.pp, cfg.num_microbatches, cfg.vpp, stage)


def chunk_order(cfg: ParallelConfig, count: int) -> list[int]:
    """Model chunk of each forward a device holds at its peak: Megatron's interleaved order ((k // pp) % v),
    V-shapes alternate their down / up chunks, one chunk otherwise."""
    v = chunks_per_device(cfg.schedule, cfg.vpp)
    if v == 1:
        return [0] * count
    if cfg.schedule == "interleaved":
        return [(k // cfg.pp) % v for k in range(count)]
    return [k % v for k in range(count)]


def held_forwards(cfg: ParallelConfig, stage: int) -> int:
    """Chunk-micro-batch forwards whose activations a device holds at its peak."""
    return max(1, int(round(stage_inflight(cfg, stage) * chunks_per_device(cfg.schedule, cfg.vpp))))


def output_chunk(cfg: ParallelConfig, stage: int) -> int | None:
    if not holds_output(cfg, stage):
        return None
    return 1 if cfg.schedule in V_SHAPES else chunks_per_device(cfg.schedule, cfg.vpp) - 1


def held_at_output(cfg: ParallelConfig, stage: int) -> int:
    """Held forwards that went through the output layer (0 if the stage has none)."""
    oc = output_chunk(cfg, stage)
    if oc is None:
        return 0
    return max(1, chunk_order(cfg, held_forwards(cfg, stage)).count(oc))


def logits_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """Output stage: each held micro-batch keeps the fp32 softmax of its vocab shard (Megatron's vocab-parallel
    cross entropy); one 16-bit logits buffer is live while it is made."""
    held = held_at_output(cfg, stage)
    if not held:
        return 0.0
    s, b = training.seq_length, cfg.micro_batch_size
    return s * b * model.vocab_size / cfg.tp * (4 * held + 2)


def edge_activation_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """Activations outside the transformer layers (Korthikanti et al. Sec. 4.3): the embedding dropout mask
    (GPT) per held micro-batch on the first stage, and the final norm's and output layer's inputs (4sbh, /t with
    SP) per micro-batch held at the output layer."""
    s, b, h = training.seq_length, cfg.micro_batch_size, model.hidden_size
    sp = cfg.tp if cfg.sequence_parallel else 1
    out = 0.0
    if stage == 0 and has_dropout(model):
        out += s * b * h / sp * stage_inflight(cfg, stage)
    return out + 4 * s * b * h / sp * held_at_output(cfg, stage)


def embedding_grad_bytes(model, cfg: ParallelConfig, stage: int) -> float:
    """First stage: the embedding backward makes a dense 16-bit gradient of the vocab shard before it is added
    to main_grad."""
    return 2.0 * model.vocab_size * model.hidden_size / cfg.tp if stage == 0 else 0.0


@dataclass(frozen=True)
class AnalyticalMemory:
    """The memory estimator interface: stage_memory(model, cluster, training, cfg, stage) -> MemoryBreakdown.

    overhead_GiB: CUDA context + cuBLAS workspace + NCCL buffers + allocator fragmentation. It cannot be
    measured without a GPU (fake-tensor profiles see only tensor storages); 2 GiB is the value used: the CUDA
    context with PyTorch's kernels is ~0.5-1 GiB on A100/H100, NCCL's default buffers (NCCL_BUFFSIZE 4 MiB per
    channel and peer) a few hundred MiB for TP + DP + PP communicators, and fragmentation the rest; see
    docs/notes/memory.md."""
    overhead_GiB: float = 2.0
    master_weights: bool = True        # fp32 master copy with 16-bit training

    def stage_memory(self, model, cluster, training, cfg: ParallelConfig, stage: int) -> MemoryBreakdown:
        P = stage_params(model, cfg, stage)
        half = training.precision in ("bf16", "fp16")
        w_bytes = 2 if half else 4
        g_bytes = 4                                    # fp32 gradient accumulation (main_grad buffer)
        if training.optimizer == "sgd":                # momentum (+ fp32 master with 16-bit weights)
            o_bytes = 4 + (4 if half and self.master_weights else 0)
        else:                                          # Adam: m, v (+ fp32 master)
            o_bytes = 8 + (4 if half and self.master_weights else 0)
        dp = cfg.dp
        weights = P * w_bytes
        grads = P * g_bytes / (dp if cfg.zero >= 2 else 1)
        optim = P * o_bytes / (dp if cfg.zero >= 1 else 1)
        L = model.num_layers // cfg.pp
        acts = L * layer_activation_bytes(model, training, cfg) * stage_inflight(cfg, stage)
        acts += edge_activation_bytes(model, training, cfg, stage)
        logits = logits_bytes(model, training, cfg, stage)
        # the backward working set (one layer's, or the embedding's dense gradient) and the logits of the
        # micro-batch being back-propagated are not live at the same time: its loss backward frees them first
        work = max(layer_transient_bytes(model, training, cfg), embedding_grad_bytes(model, cfg, stage))
        freed = 6.0 * training.seq_length * cfg.micro_batch_size * model.vocab_size / cfg.tp if logits else 0.0
        transient = max(0.0, work - freed)
        return MemoryBreakdown(weights, grads, optim, acts, logits, self.overhead_GiB * GiB, transient)
