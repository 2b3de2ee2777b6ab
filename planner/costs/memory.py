"""Analytical per-GPU memory breakdown of one pipeline stage (Korthikanti et al. 2022; seed 003)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from planner.config import ParallelConfig
from planner.schedules import inflight_microbatches

GiB = 1024 ** 3


@dataclass(frozen=True)
class MemoryBreakdown:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    overhead: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.overhead

    def as_GiB(self) -> dict:
        d = {k: v / GiB for k, v in asdict(self).items()}
        d["total"] = self.total / GiB
        return d


def stage_params(model, cfg: ParallelConfig, stage: int) -> float:
    """Parameters held by one GPU of `stage` (tensor-parallel shard)."""
    L = model.num_layers // cfg.pp
    p = L * model.layer_params() / cfg.tp
    if stage == 0:
        p += model.embedding_params() / cfg.tp
    if stage == cfg.pp - 1:
        p += model.output_params() / cfg.tp
        if model.tied_embeddings and cfg.pp > 1:   # Megatron keeps a copy of the word embedding on the last stage
            p += model.vocab_size * model.hidden_size / cfg.tp
    return p


def layer_activation_bytes(model, training, cfg: ParallelConfig) -> float:
    """Activations one layer stores for backward, one micro-batch (bytes), 16-bit activations."""
    s, b, h, a, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, model.num_attention_heads, cfg.tp
    if cfg.recompute == "full":
        return 2 * s * b * h / (t if cfg.sequence_parallel else 1)
    attn_core = 5 * a * s / h if cfg.recompute == "none" else 0.0
    if cfg.sequence_parallel:
        return s * b * h * (34 + attn_core) / t
    return s * b * h * (10 + 24 / t + attn_core / t)


@dataclass(frozen=True)
class AnalyticalMemory:
    """The memory estimator interface: stage_memory(model, cluster, training, cfg, stage) -> MemoryBreakdown."""
    overhead_GiB: float = 2.0          # CUDA context, NCCL buffers, allocator fragmentation
    master_weights: bool = True        # fp32 master copy with 16-bit training

    def stage_memory(self, model, cluster, training, cfg: ParallelConfig, stage: int) -> MemoryBreakdown:
        P = stage_params(model, cfg, stage)
        half = training.precision in ("bf16", "fp16")
        w_bytes = 2 if half else 4
        g_bytes = 4                                    # fp32 gradient accumulation
        o_bytes = (12 if half and self.master_weights else 8) if training.optimizer != "sgd" else (4 if half else 0)
        dp = cfg.dp
        weights = P * w_bytes
        grads = P * g_bytes / (dp if cfg.zero >= 2 else 1)
        optim = P * o_bytes / (dp if cfg.zero >= 1 else 1)
        L = model.num_layers // cfg.pp
        inflight = inflight_microbatches(cfg.schedule, cfg.pp, cfg.num_microbatches, cfg.vpp, stage)
        acts = L * layer_activation_bytes(model, training, cfg) * inflight
        logits = 0.0
        if stage == cfg.pp - 1:
            s, b = training.seq_length, cfg.micro_batch_size
            logits = s * b * model.vocab_size / cfg.tp * (2 + 4)   # 16-bit logits + fp32 softmax for the loss
        return MemoryBreakdown(weights, grads, optim, acts, logits, self.overhead_GiB * GiB)
