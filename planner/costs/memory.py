"""Analytical per-GPU memory breakdown of one pipeline stage (Korthikanti et al. 2022; seed 003).

Activations follow the tensor-by-tensor count of Korthikanti et al. (sbh(34 + 5as/h) per GPT layer before
tensor / sequence parallel and recompute), generalised to the Llama family (no dropout, RMSNorm, RoPE,
SwiGLU, grouped-query attention) by counting what each op of a Megatron-style layer saves for backward.
planner/profile/memory.py runs that layer in PyTorch and measures these counts exactly (tests check it).

That count is `training.attention: unfused`. With `fused` (the default: FlashAttention-2/3, cuDNN fused attention
through Transformer Engine) the kernel keeps Q, K, V, its output and an fp32 log-sum-exp per row and head, and no
s x s tensor: no scores, probabilities, dropout mask (the kernel regenerates it from the RNG state) or causal mask.
Its backward working set is FlashAttention-2's mha_bwd (Dao-AILab/flash-attention csrc/flash_attn/flash_api.cpp,
commit 0251105a2fb19d2957484b7f023cd8c115286ced): dQ, dK, dV, an fp32 dQ accumulator [b, s, heads, d], an fp32
softmax_d [b, heads, s], and with GQA dK and dV expanded to all heads before they are summed per group.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from planner.config import V_SHAPES, ParallelConfig, current_scaling
from planner.costs.pipeline import chunks_per_device, inflight_microbatches
from planner.memo import memo

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
    fragmentation: float = 0.0   # learned estimator: caching-allocator reserve beyond the allocated peak that it
    #                              cannot give back (measured on a GPU with capped runs)
    fsdp: float = 0.0            # ZeRO-3: gathered parameter / gradient buffers of the units in flight
    #                              (fsdp_buffer_bytes)

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.overhead
                + self.transient + self.correction + self.safety + self.fragmentation + self.fsdp)

    def as_GiB(self) -> dict:
        d = {k: v / GiB for k, v in asdict(self).items()}
        if not self.fsdp:        # only ZeRO-3 has it: other plans' records stay as they were
            del d["fsdp"]
        d["total"] = self.total / GiB
        return d


def holds_output(cfg: ParallelConfig, stage: int) -> bool:
    """The stage with the output layer and loss: the last one, or stage 0 for V-shapes (the V comes back)."""
    return stage == (0 if cfg.schedule in V_SHAPES else cfg.pp - 1)


def stage_params(model, cfg: ParallelConfig, stage: int) -> float:
    """Parameters held by one GPU of `stage` (tensor-parallel shard)."""
    L = stage_layer_count(model, cfg, stage)
    p = L * model.layer_params() / cfg.tp
    if stage == 0:
        p += model.embedding_params() / cfg.tp
    if holds_output(cfg, stage):
        p += model.output_params() / cfg.tp
        if model.tied_embeddings and stage != 0:   # Megatron keeps a copy of the word embedding on the last stage
            p += model.vocab_size * model.hidden_size / cfg.tp
    return p


def stage_layer_count(model, cfg: ParallelConfig, stage: int) -> int:
    """Transformer layers on pipeline rank `stage`: the even split, or Megatron-Core's uneven first / last stage
    (ParallelConfig.stage_layers)."""
    if not cfg.uneven:
        return model.num_layers // cfg.pp
    return cfg.stage_layers(model.num_layers)[stage]


def padded_vocab(model, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of 128 * tp (make-vocab-size-divisible-by 128)."""
    m = 128 * tp
    return -(-model.vocab_size // m) * m


def replicated_params(model, cfg: ParallelConfig, stage: int) -> float:
    """Parameters a stage holds beyond stage_params' even split over tensor parallel (memory only): what Megatron
    does not shard (learned position embedding, LayerNorm / RMSNorm weights, row-parallel biases), counted there
    as 1/tp, and the vocabulary padding of the embedding and output layer."""
    h, t = model.hidden_size, cfg.tp
    per_layer = 6 * h if model.family == "gpt" else 2 * h          # norms (w, b) + proj and fc2 biases | norms
    extra = stage_layer_count(model, cfg, stage) * per_layer * (1 - 1 / t)
    pad = (padded_vocab(model, t) - model.vocab_size) * h / t
    if stage == 0:
        extra += pad
        if model.family == "gpt":
            extra += model.max_position_embeddings * h * (1 - 1 / t)
    if holds_output(cfg, stage):
        extra += (2 if model.family == "gpt" else 1) * h * (1 - 1 / t)
        if not model.tied_embeddings or stage != 0:
            extra += pad
    return extra


def has_dropout(model) -> bool:
    """GPT (GPT-3, Megatron GPT) trains with dropout 0.1; Llama-style models without."""
    return model.family == "gpt"


def _qkv_saved_per_token(model, t: int) -> float:
    """Bytes per token of Q, K, V saved for the attention GEMMs (one TP shard).

    GPT: q, k, v are views of the QKV output, saved whole: 2(h + 2kv) (GQA: 6h, copies). Llama: RoPE makes new
    q, k (2h, 2kv);
    with MHA v stays a view of the QKV output, so that is kept whole; with GQA k and v are expanded to all
    heads (new 2h each) and the QKV output is freed."""
    h, kv = model.hidden_size, model.kv_channels
    gqa = model.num_kv_heads != model.num_attention_heads
    if model.family == "gpt":
        b = 6 * h if gqa else 2 * (h + 2 * kv)   # GQA: q is copied, k and v expanded; the QKV output freed
    else:
        b = 6 * h if gqa else 4 * h + 2 * (h + 2 * kv)
    return b / t


def fused_attention(training) -> bool:
    """The spec runs a fused attention kernel (training.attention, default fused)."""
    return getattr(training, "attention", "fused") == "fused"


def _qkv_saved_fused(model, t: int) -> float:
    """Bytes per token of Q, K, V a fused attention kernel keeps (one TP shard). The kernels take GQA's K and V
    as they are (no expansion). GPT: q, k, v are views of the QKV output, kept whole: 2(h + 2kv). Llama: RoPE
    makes new q and k (2h + 2kv) while v stays a view that keeps the QKV output alive (2(h + 2kv))."""
    h, kv = model.hidden_size, model.kv_channels
    b = 2 * (h + 2 * kv) if model.family == "gpt" else 2 * (h + 2 * kv) + 2 * (h + kv)
    return b / t


def lse_bytes(model, training, cfg: ParallelConfig) -> float:
    """The fp32 log-sum-exp a fused kernel keeps per query row and local head, one layer, one micro-batch."""
    return 4.0 * training.seq_length * cfg.micro_batch_size * model.num_attention_heads / cfg.tp


def mlp_recompute_dropped_bytes(model, training, cfg: ParallelConfig) -> float:
    """What Megatron-Core's `--recompute-modules mlp` does not store of one layer, one micro-batch (bytes), rebuilt in
    its backward. transformer_layer.py (NVIDIA/Megatron-LM d98e8a64, _forward_mlp) runs
    tensor_parallel.checkpoint(self.mlp, False, pre_mlp_layernorm_output): the checkpoint keeps the MLP's input only.
    With Transformer Engine the pre-MLP norm is fused into fc1 (TELayerNormColumnParallelLinear; pre_mlp_layernorm is
    an IdentityOp), so that input is the residual stream the norm reads, which is stored anyway; dropped are the norm's
    output (fc1's input, h/sp wide), the activation's input(s) and fc2's input (GeLU: 4f/t; SwiGLU: 6f/t). The
    hidden dropout after the MLP (GPT) is outside the module (mlp_bda): its mask stays."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    f = model.ffn_hidden_size
    sp = t if cfg.sequence_parallel else 1
    return s * b * (2 * h / sp + (4 * f if model.family == "gpt" else 6 * f) / t)


def _fused_activation_parts(model, training, cfg: ParallelConfig) -> tuple[float, float]:
    """layer_activation_parts with a fused kernel. Selective recompute is Megatron-Core's default module,
    `--recompute-modules core_attn`: the checkpoint keeps the core's inputs Q, K, V, and its output stays saved
    as the projection's input, so only the log-sum-exp is dropped (Megatron-Core warns that with fused attention
    core_attn recompute is not needed; transformer_config.py, NVIDIA/Megatron-LM d98e8a64)."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    f = model.ffn_hidden_size
    sp = t if cfg.sequence_parallel else 1
    if cfg.recompute == "full":
        return 2 * s * b * h / sp, 0.0
    replicated = (8 * h + (2 * h if has_dropout(model) else 0)) / sp
    mlp = (4 * f if model.family == "gpt" else 6 * f) / t
    sharded = _qkv_saved_fused(model, t) + 2 * h / t + mlp      # 2h/t: the kernel's output = the projection input
    core = 0.0 if cfg.recompute == "selective" else lse_bytes(model, training, cfg)
    lin = s * b * (replicated + sharded)
    if cfg.recompute == "mlp":
        lin -= mlp_recompute_dropped_bytes(model, training, cfg)
    return lin, core


def op_sac_bytes(model, training, cfg: ParallelConfig) -> tuple[float, float]:
    """(linear, core) bytes one layer keeps under torchtitan's per-op selective checkpointing, one micro-batch.

    pytorch/torchtitan @ 9dec370ad26b5f8e9a7333a0e36165018262644b torchtitan/parallelisms/parallelize_llama.py
    (_save_list, _custom_policy; the same policy at 238fa995): the outputs of mm, SDPA and reduce_scatter are saved,
    except every second mm of a layer, and everything else is recomputed in backward from the layer's input. A Llama
    block runs wq, wk, wv, wo, w1, w3, w2 in that order, so wq, wv, w1 and w2's outputs are kept (wk, wo, w3
    recomputed), with SDPA's output and log-sum-exp and the block's input; with tensor parallelism w2's partial
    output and its reduce-scattered sequence shard both."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    kv, f = model.kv_channels, model.ffn_hidden_size
    sp = t if cfg.sequence_parallel else 1
    w2 = 2 * h + (2 * h / sp if t > 1 else 0.0)
    lin = s * b * (2 * h / sp + 2 * h / t + 2 * kv / t + 2 * h / t + 2 * f / t + w2)
    return lin, lse_bytes(model, training, cfg)


def layer_activation_parts(model, training, cfg: ParallelConfig) -> tuple[float, float]:
    """(linear-in-s part, attention-core part) of one layer's stored activations, one micro-batch, bytes. Block
    recompute stores two kinds of layer (chunk_stored_bytes); asked for one, this answers the recomputed kind's."""
    if cfg.recompute == "block":
        cfg = with_recompute(cfg, "full")
    if cfg.op_sac:
        return op_sac_bytes(model, training, cfg)
    if fused_attention(training):
        return _fused_activation_parts(model, training, cfg)
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
    lin = s * b * (replicated + sharded)
    if cfg.recompute == "mlp":
        lin -= mlp_recompute_dropped_bytes(model, training, cfg)
    return lin, s * b * core


def layer_activation_bytes(model, training, cfg: ParallelConfig) -> float:
    """Activations one layer stores for backward, one micro-batch (bytes), 16-bit activations.
    GPT: sbh(10 + 24/t + 5as/(ht)) with TP; sbh(34 + 5as/h)/t with TP+SP; 34sbh/t selective; 2sbh/t full."""
    lin, core = layer_activation_parts(model, training, cfg)
    return lin + core


def layer_saved_pieces(model, training, cfg: ParallelConfig) -> dict:
    """What one layer saves for backward without recompute, one micro-batch (bytes), split by where it is used:
    `attn_pre` (norm1 and QKV inputs, Q/K/V), `probs` (the softmax), `drop` (GPT: attention-dropout mask and the
    dropped probabilities), `attn_post` (projection input, hidden-dropout mask), `mlp` (norm2 and fc1 inputs, the
    activation's input(s), fc2 input, hidden-dropout mask). attn_pre + attn_post + mlp = the linear part and
    probs + drop = the attention core of layer_activation_parts. Fused attention: `probs` is the log-sum-exp,
    `drop` and `score` are 0 (no s x s tensor exists)."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    a, f = model.num_attention_heads, model.ffn_hidden_size
    sp = t if cfg.sequence_parallel else 1
    drop = has_dropout(model)
    sb = s * b
    if fused_attention(training):
        return {"attn_pre": sb * (4 * h / sp + _qkv_saved_fused(model, t)),
                "attn_post": sb * (2 * h / t + (h / sp if drop else 0)),
                "mlp": sb * ((4 * h + (h if drop else 0)) / sp + (4 * f if model.family == "gpt" else 6 * f) / t),
                "probs": lse_bytes(model, training, cfg), "drop": 0.0, "score": 0.0}
    score = 2 * sb * a * s / t
    return {"attn_pre": sb * (4 * h / sp + _qkv_saved_per_token(model, t)),
            "attn_post": sb * (2 * h / t + (h / sp if drop else 0)),
            "mlp": sb * ((4 * h + (h if drop else 0)) / sp + (4 * f if model.family == "gpt" else 6 * f) / t),
            "probs": score, "drop": 1.5 * score if drop else 0.0, "score": score}


@memo(4096)      # pure (frozen arguments); asked per stage
def layer_transient_bytes(model, training, cfg: ParallelConfig) -> float:
    """Backward working set of one layer, one micro-batch (bytes above the stored activations): the largest of
    its backward phases, each counted from what is live at that moment (checked op by op against the profiler).

    - attention core, at the backward of probs @ V (a new score-sized gradient) and at the softmax backward (the
      gradients of the probabilities and of the scores, and a score-sized temporary that the CUDA kernel holds
      while it runs -- measured on an H100, not visible to fake tensors -- while the probabilities are still
      held; GPT has freed its dropout mask and dropped probabilities by then). With selective recompute the
      core is rebuilt first; with full recompute the layer's attention half too. The MLP half and the projection
      input of this layer have been consumed and freed by then (without full recompute they are stored).
    - MLP: gradients of the f/t-wide activation (GeLU: in and out; fused SwiGLU: its five f/t-wide temporaries)
      less its freed output, on top of the whole rebuilt layer with full recompute.
    - weight gradient: the largest GEMM's 16-bit weight gradient before it is added to the fp32 main_grad.
    Plus the h-wide gradient buffers of each phase (received and residual-stream gradients, the re-gathered SP
    input); the small constants (how many h-wide buffers) are matched op by op to the profiler."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    f, kv = model.ffn_hidden_size, model.kv_channels
    if cfg.op_sac:       # the block is rebuilt (what was not saved) before its backward, as with full recompute
        return layer_transient_bytes(model, training, with_recompute(cfg, "full"))
    if cfg.recompute == "block":
        # not knowing the stage: the larger of the two kinds' (block_transient_bytes is the stage's, at most this)
        return max(layer_transient_bytes(model, training, with_recompute(cfg, "full")),
                   layer_transient_bytes(model, training, with_recompute(cfg, "none")))
    if cfg.recompute == "mlp":
        # as without recompute, plus what the checkpoint dropped: rebuilt before the MLP's backward, and by the
        # attention phase the layer's stored MLP half (less those bytes) is what has been freed
        return (layer_transient_bytes(model, training, with_recompute(cfg, "none"))
                + mlp_recompute_dropped_bytes(model, training, cfg))
    P = layer_saved_pieces(model, training, cfg)
    rc = cfg.recompute
    if fused_attention(training):
        return _fused_transient_bytes(model, training, cfg, P)
    core = P["probs"] + P["drop"]
    rebuilt_core = core if rc in ("selective", "full") else 0.0
    if rc == "full":     # the layer is rebuilt; by the attention core its MLP half is freed again
        attn_base = P["attn_pre"] + rebuilt_core
    else:                # stored: this layer's MLP half and projection input are freed before the core's backward
        attn_base = rebuilt_core - P["mlp"] - P["attn_post"]
    sp = t if cfg.sequence_parallel else 1
    hb_sp, hb_tp = 2 * s * b * h / sp, 2 * s * b * h / t      # residual-stream and TP-sharded h-wide buffers
    resid = 2 * (hb_sp - hb_tp)       # the residual-stream gradients are h/sp wide, those inside attention h/t
    attn = attn_base + resid + max(P["score"] + 4 * hb_tp,           # probs @ V backward: dP, dV, dctx, ...
                                   3 * P["score"] - P["drop"]       # softmax backward: dP, dS, CUDA temporary
                                   + (3 * hb_tp if rc == "selective" else 0.0))   # + recomputed Q, K, V copies
    # GeLU backward: d(out) and d(in) live, its output (fc2 input) freed: net one f/t buffer; fused SwiGLU: five f/t
    # temporaries (g, sigmoid, d(gate), and d(fc1 out) twice as wide) less the freed fc2 input
    mlp_work = s * b * (2 * 1 * f if model.family == "gpt" else 2 * 4 * f) / t
    wgrad = 2 * max(h * (h + 2 * kv), h * f * (2 if model.gated_mlp else 1)) / t
    # the MLP half runs first: with full recompute on top of the whole rebuilt layer
    recomputed = P["attn_pre"] + P["attn_post"] + P["mlp"] + core if rc == "full" else 0.0
    mlp = max(mlp_work, wgrad) + 2 * 2 * s * b * h + recomputed
    return max(attn, mlp)


def fused_backward_bytes(model, training, cfg: ParallelConfig) -> float:
    """What FlashAttention-2's backward allocates for one layer, one micro-batch (flash_api.cpp mha_bwd, commit
    0251105a): dQ, dK, dV (16-bit, K and V at their kv width), the fp32 dq_accum [b, s, heads, d] and softmax_d
    [b, heads, s], and with GQA dk_expanded and dv_expanded [b, s, heads, d] (16-bit). The 128-row and 32-column
    roundings of the fp32 buffers are left out (exact for s a multiple of 128 and head_dim 128)."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    kv = model.kv_channels
    sb = s * b
    out = sb * 2 * (h + 2 * kv) / t + sb * 4 * h / t + lse_bytes(model, training, cfg)
    if model.num_kv_heads != model.num_attention_heads:
        out += sb * 2 * 2 * h / t
    return out


def _fused_transient_bytes(model, training, cfg: ParallelConfig, P: dict) -> float:
    """layer_transient_bytes with a fused attention kernel: the attention phase is the kernel's backward on top of
    what is live then; the MLP and weight-gradient phases are the unfused ones.

    - no recompute / selective: this layer's MLP half and its hidden-dropout mask are freed by then, but not the
      kernel's output (the projection input, which the kernel's backward reads); the gradient of that output is
      live (h/t), and with selective the rebuilt output and log-sum-exp too (core_attn recompute);
    - full: the attention half of the layer is rebuilt (its inputs, Q/K/V, the output and the log-sum-exp)."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    f, kv = model.ffn_hidden_size, model.kv_channels
    rc = cfg.recompute
    sp = t if cfg.sequence_parallel else 1
    hb_sp, hb_tp = 2 * s * b * h / sp, 2 * s * b * h / t
    resid = 2 * (hb_sp - hb_tp)
    out_bytes = hb_tp                                        # the kernel's output [s, b, h/t], 16-bit
    if rc == "full":
        attn_base = P["attn_pre"] + out_bytes + P["probs"]
    elif rc == "selective":
        attn_base = out_bytes + P["probs"] - P["mlp"] - (P["attn_post"] - out_bytes)
    else:
        attn_base = -P["mlp"] - (P["attn_post"] - out_bytes)
    attn = attn_base + resid + hb_tp + fused_backward_bytes(model, training, cfg)     # + dO
    mlp_work = s * b * (2 * 1 * f if model.family == "gpt" else 2 * 4 * f) / t
    wgrad = 2 * max(h * (h + 2 * kv), h * f * (2 if model.gated_mlp else 1)) / t
    recomputed = P["attn_pre"] + P["attn_post"] + P["mlp"] + P["probs"] if rc == "full" else 0.0
    mlp = max(mlp_work, wgrad) + 2 * 2 * s * b * h + recomputed
    return max(attn, mlp)


def block_transient_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """Block recompute's backward working set on a pipeline rank (bytes above the stored activations): the largest
    over its chunks. A chunk's backward runs its layers last to first, each freeing what it stored: a stored layer's
    working set is no recompute's, a checkpointed one's full recompute's (the rebuilt layer on top) less the stored
    layers after it in the chunk, already freed. The largest of the checkpointed ones is the last checkpointed
    layer's: Megatron-Core's block (the first N) at layer N - 1, with the Lc - N stored layers behind it; torchtitan's
    layer SAC (a ZeRO-3 plan's block, every n-th block) at the chunk's last checkpointed block, with the stored
    blocks after it (none when the chunk's last block is checkpointed: full's). A chunk of only checkpointed layers
    holds full's. The fake-tensor profiler checks Megatron-Core's form (tests/test_block_recompute.py)."""
    full = layer_transient_bytes(model, training, with_recompute(cfg, "full"))
    none = layer_transient_bytes(model, training, with_recompute(cfg, "none"))
    layer = stored_layer_bytes(model, training, with_recompute(cfg, "none"))
    out = 0.0
    for n, pos in zip(cfg.chunk_layers(model.num_layers)[stage],
                      cfg.checkpointed_chunk_layers(model.num_layers)[stage]):
        if not pos:
            out = max(out, none)
        elif len(pos) == n:
            out = max(out, full)
        else:
            out = max(out, none, full - (n - 1 - pos[-1]) * layer)
    return out


def stage_transient_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """The layers' backward working set on a pipeline rank: one layer's (layer_transient_bytes), block recompute's
    by its chunks (block_transient_bytes)."""
    if cfg.recompute == "block":
        return block_transient_bytes(model, training, cfg, stage)
    return layer_transient_bytes(model, training, cfg)


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
    """Output stage: each held micro-batch keeps what its loss saves for backward (Megatron's vocab-parallel cross
    entropy and torchtitan's eager loss: the fp32 softmax of its vocab shard; torchtitan's compiled loss: the bf16
    logits), plus what is live while it is made or differentiated."""
    held = held_at_output(cfg, stage)
    if not held:
        return 0.0
    s, b = training.seq_length, cfg.micro_batch_size
    # ZeRO-3 plans are torchtitan's: its loss is F.cross_entropy(pred.float()) (pytorch/torchtitan @ 9dec370a
    # train.py loss_fn): log_softmax keeps its fp32 output per held micro-batch, and its backward has the dense fp32
    # gradient of that output and its own fp32 result live together (8 bytes per logit instead of one 16-bit buffer)
    live = 8 if cfg.zero == 3 else 2
    per_held = 4
    compiled_loss = (cfg.zero == 3 and cfg.tp == 1 and getattr(training, "compile_loss", True)
                     and getattr(training, "kernels", "fused") == "fused")
    if compiled_loss:
        # torchtitan's compiled loss (training.compile_loss; pytorch/torchtitan components/loss.py since d1f62be7):
        # Inductor fuses the upcast, log-softmax and NLL; it keeps the bf16 logits (and a per-row log-sum-exp) and
        # its backward writes their bf16 gradient in one pass. One H200 measured 47.7 GiB reserved where the eager
        # count gave 65.9 (benchmarks/data/h200/torchtitan_step, docs/notes/fsdp.md)
        per_held, live = 2, 2
    if cfg.zero == 3 and cfg.tp > 1:
        # torchtitan's loss_parallel (on whenever tp > 1: parallel_dims.loss_parallel_enabled) runs DTensor's own
        # kernels, torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward:
        # (zeros_like(x) + exp(x)) * grad_output with the saved fp32 output x: three fp32 tensors live beside it
        live = 12
    kept = 0
    if cfg.zero == 3 and cfg.pp > 1:
        # PyTorch pipelining's last stage keeps every micro-batch's output (the bf16 logits) in
        # stage.output_chunks for the schedule's final merge (torch/distributed/pipelining/stage.py forward_one_chunk)
        kept = 2 * cfg.num_microbatches
        if compiled_loss:
            per_held = 0      # the compiled loss's saved input is that same bf16 output, already in `kept`
    return s * b * padded_vocab(model, cfg.tp) / cfg.tp * (per_held * held + live + kept)


def edge_activation_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """Activations outside the transformer layers (Korthikanti et al. Sec. 4.3): the embedding dropout mask
    (GPT) per held micro-batch on the first stage, and the final norm's and output layer's inputs (4sbh, /t with
    SP) per micro-batch held at the output layer; and the s x s causal mask every stage keeps (unfused only)."""
    s, b, h = training.seq_length, cfg.micro_batch_size, model.hidden_size
    sp = cfg.tp if cfg.sequence_parallel else 1
    out = 0.0
    if stage == 0 and has_dropout(model):
        out += s * b * h / sp * stage_inflight(cfg, stage)
    if not fused_attention(training):   # fused kernels apply the causal mask by index
        out += s * s     # the causal attention mask, an s x s bool tensor (Megatron's local attention path)
    return out + output_edge_bytes(model, training, cfg) * held_at_output(cfg, stage)


def output_edge_bytes(model, training, cfg: ParallelConfig) -> float:
    """What the final norm and the output layer save for backward, one micro-batch held at the output (bytes).

    Megatron: the norm's and the output layer's 16-bit inputs, each a sequence shard with SP: 4sbh / sp.
    ZeRO-3 plans are torchtitan's (pytorch/torchtitan @ 9dec370ad26b5f8e9a7333a0e36165018262644b):
    - the final norm is `RMSNorm` of torchtitan/models/norms.py (norm_type "rmsnorm" in every train_configs toml),
      outside the compiled blocks (apply_compile compiles each TransformerBlock), so it runs eager:
      `_norm(x.float()).type_as(x) * weight` keeps x.float() (fp32, saved by pow and mul) and the bf16 normalised
      output (saved by the weight product): 6 bytes per element of its sequence shard (SequenceParallel);
    - the output Linear is ColwiseParallel(input_layouts=Shard(1)) (parallelize_llama.py apply_tp): its input is
      all-gathered over the sequence before the GEMM, and the Linear saves that replicated bf16 tensor for its weight
      gradient: 2 bytes per element of the whole s x b x h (with tp = 1 the norm's output itself)."""
    s, b, h = training.seq_length, cfg.micro_batch_size, model.hidden_size
    sp = cfg.tp if cfg.sequence_parallel else 1
    if cfg.zero == 3:
        return s * b * h * (6.0 / sp + 2.0)
    return 4.0 * s * b * h / sp


def embedding_grad_bytes(model, cfg: ParallelConfig, stage: int) -> float:
    """First stage: the embedding backward makes a dense 16-bit gradient of the vocab shard before it is added
    to main_grad."""
    return 2.0 * padded_vocab(model, cfg.tp) * model.hidden_size / cfg.tp if stage == 0 else 0.0


def output_backward_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """Output stage, beyond the logits term: the output layer's backward makes its 16-bit weight gradient (vocab
    shard x h) before adding it to main_grad, with the h-wide input gradient and the re-gathered input live; by
    then the loss backward has freed the fp32 softmax of that micro-batch (4 bytes per logit)."""
    if not holds_output(cfg, stage):
        return 0.0
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    v = padded_vocab(model, t) / t
    return max(0.0, 2 * v * h + 2 * 2 * s * b * h - 4 * s * b * v)


# --- FP8 training (Transformer Engine, Hopper; docs/notes/memory.md "FP8") -----------------------------------------
# TE source read: NVIDIA/TransformerEngine @ d0067d0da6cb01811b8072a7d304f0e00344ce2b
# (transformer_engine/pytorch/module/linear.py, layernorm_linear.py, module/base.py, quantization.py);
# Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553 (megatron/core/extensions/transformer_engine.py).
FP8_AMAX_HISTORY_LEN = 1024      # what `planner export` asks for (NeMo's bf16_with_fp8_mixed recipe)
FP8_TENSORS_PER_GEMM = 5         # TE module/base.py: 3 forward (input, weight, output), 2 backward (dY, dX)


def fp8_gemm_weights(model, cfg: ParallelConfig, stage: int = 0) -> float:
    """Weights of the fp8 GEMMs one GPU of a stage holds: the transformer layers' QKV, projection, fc1 and fc2 (the
    TP shard; embedding and output layer are not TE modules and stay bf16)."""
    h, kv, f = model.hidden_size, model.kv_channels, model.ffn_hidden_size
    per_layer = h * (h + 2 * kv) + h * h + h * f * (2 if model.gated_mlp else 1) + f * h
    return stage_layer_count(model, cfg, stage) * per_layer / cfg.tp


def fp8_weight_copy_bytes(model, training, cfg: ParallelConfig, stage: int = 0) -> float:
    """What fp8 training keeps beyond bf16's weights, per GPU of a stage (0 for other precisions):
    - the fp8 cast of every TE GEMM weight, row-wise (forward) and column-wise (the transpose the dgrad GEMM reads on
      Hopper), 1 byte each: linear.py quantizes the weight with columnwise usage while training and keeps it in
      `_fp8_workspaces["weight"]` across micro-batches when is_first_microbatch is not None, which Megatron-Core's
      TE wrappers pass unless --disable-parameter-transpose-cache. Kept per model replica: ZeRO does not shard it.
    - the delayed-scaling state: per GEMM 5 fp8 tensors x (amax history + scale) fp32 (quantization.py); none under
      current scaling (training.fp8_recipe tensorwise, ZeRO-3 plans: config.current_scaling).
    With training.fp8_param_gather (--fp8-param-gather, fp8 primary weights) the GEMM weights are TE fp8 tensors: the
    distributed optimizer's param buffer holds them as 1-byte storage (Megatron-LM @ d98e8a64
    megatron/core/distributed/param_and_grad_buffer.py group_params_for_buffers: "torch.uint8 for FP8/NVFP4
    parameters") and base.py quantize_weight takes an "already-quantized weight (primary FP8 parameters)" as it is,
    only adding its column-wise (transpose) data: 1 + 1 bytes, in place of the bf16 weight's 2 that `weights` counts,
    so nothing beyond it. Their gradients keep the bf16 nominal dtype (param.dtype) and the fp32 main weights stay."""
    if training.precision != "fp8":
        return 0.0
    gemms = stage_layer_count(model, cfg, stage) * 4
    state = 0.0 if current_scaling(training, cfg) else gemms * FP8_TENSORS_PER_GEMM * (FP8_AMAX_HISTORY_LEN + 1) * 4.0
    if getattr(training, "fp8_param_gather", False):
        return state
    return 2.0 * fp8_gemm_weights(model, cfg, stage) + state


def fp8_saved_input_delta(model, training, cfg: ParallelConfig) -> float:
    """Change in one layer's stored activations, one micro-batch (bytes), when TE saves fp8 GEMM inputs (0 for other
    precisions and for full recompute, which stores only the bf16 layer input). TE saves the fp8 input of each GEMM
    for its wgrad (linear.py: column-wise data only, or row-wise when sequence parallel re-gathers it; 1 byte):
    - QKV and fc1 inputs (TE LayerNormLinear's norm output, made in fp8 by the fused norm): 2 -> 1 byte, h/sp wide;
    - fc2 input (the activation's output; the activation keeps its own bf16 input): 2 -> 1 byte, f/t wide;
    - projection input: unfused attention, only the projection held it: 2 -> 1 byte; fused attention keeps its bf16
      output for its own backward anyway, so TE's fp8 copy is one more byte, h/t wide.
    The norms' inputs (residual stream), Q, K, V and the activation's input stay bf16. mlp recompute stores neither
    fc1's nor fc2's input (mlp_recompute_dropped_bytes): only QKV's and the projection's terms remain."""
    if training.precision != "fp8" or cfg.recompute in ("full", "block") or cfg.op_sac:
        return 0.0              # block: its recomputed kind of layer's, as layer_activation_parts answers
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    sp = t if cfg.sequence_parallel else 1
    proj = 1.0 if getattr(training, "attention", "unfused") == "fused" else -1.0
    if cfg.recompute == "mlp":
        return s * b * (-h / sp + proj * h / t)
    return s * b * (-2 * h / sp - model.ffn_hidden_size / t + proj * h / t)


@memo(4096)      # pure (frozen arguments); asked per stage
def stored_layer_bytes(model, training, cfg: ParallelConfig) -> float:
    """What one layer stores for its backward, one micro-batch (bytes): the activations as counted for bf16, with
    TE's fp8 GEMM inputs in place of their bf16 copies under fp8. The estimator's and the simulator's unit. Block
    recompute stores two kinds of layer (chunk_stored_bytes); asked for one, it answers the recomputed kind's."""
    return layer_activation_bytes(model, training, cfg) + fp8_saved_input_delta(model, training, cfg)


@memo(4096)      # dataclasses.replace is slow, and the memory screen asks per stage
def with_recompute(cfg: ParallelConfig, mode: str) -> ParallelConfig:
    """cfg under another recompute mode (block's two kinds of layer: full and none)."""
    return replace(cfg, recompute=mode, recompute_layers=None)


@memo(1024)      # pure (frozen arguments); every stage of a configuration reads it
def chunk_stored_bytes(model, training, cfg: ParallelConfig) -> tuple[tuple[float, ...], ...]:
    """What each model chunk of each pipeline rank stores for one micro-batch's backward (bytes): its layers times
    stored_layer_bytes; block recompute: its checkpointed layers (Megatron-Core's first min(N, layers), or on a
    ZeRO-3 plan torchtitan's every n-th block of the rank) as full recompute's, the rest as no recompute's
    (ParallelConfig.recomputed_chunk_layers). The simulator's per-chunk activations."""
    chunks = cfg.chunk_layers(model.num_layers)
    if cfg.recompute != "block":
        one = stored_layer_bytes(model, training, cfg)
        return tuple(tuple(n * one for n in c) for c in chunks)
    full = stored_layer_bytes(model, training, with_recompute(cfg, "full"))
    none = stored_layer_bytes(model, training, with_recompute(cfg, "none"))
    rc = cfg.recomputed_chunk_layers(model.num_layers)
    return tuple(tuple(r * full + (n - r) * none for n, r in zip(c, rr)) for c, rr in zip(chunks, rc))


def stage_activation_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """The layers' activations a pipeline rank holds at its peak (bytes): each held chunk forward (chunk_order over
    held_forwards: Megatron-Core's warm-up order) at its own chunk's bytes. Chunks of one rank differ with an accounted
    embedding / loss (the first / last chunk builds one layer fewer) or block recompute at chunks of other sizes; the
    interleaved warm-up holds the first chunk most, so the rank's mean chunk misjudged them (the 405B plan's last rank,
    chunks of 2 and 1 layers holding 32 and 1 forwards: 8.7 GiB under the replay). Equal chunks: the product
    stage_stored_bytes x stage_inflight, as before."""
    chunks = chunk_stored_bytes(model, training, cfg)[stage]
    if len(set(chunks)) <= 1:
        return stage_stored_bytes(model, training, cfg, stage) * stage_inflight(cfg, stage)
    return float(sum(chunks[c] for c in chunk_order(cfg, held_forwards(cfg, stage))))


def stage_stored_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """What a pipeline rank's layers (all its chunks) store for one micro-batch's backward (bytes): the estimator's
    activations per in-flight micro-batch (chunk_stored_bytes summed; the same product for the uniform modes)."""
    if cfg.recompute != "block":
        return stage_layer_count(model, cfg, stage) * stored_layer_bytes(model, training, cfg)
    return sum(chunk_stored_bytes(model, training, cfg)[stage])


# --- ZeRO-3 / FSDP (torchtitan's FSDP2; docs/notes/fsdp.md) ---------------------------------------------------------
# torchtitan @ 238fa9953e4aec2a62582121564273d7cbb1e9f1, torchtitan/models/llama3/infra/parallelize.py apply_fsdp: one
# FSDP unit per transformer block, one for the embedding, one for [final norm, output]; MixedPrecisionPolicy(param
# bfloat16, reduce float32) (job_config.py mixed_precision_param / _reduce); the parameters themselves fp32
# (training.dtype float32); reshard_after_forward "default" = not pp_enabled, the [norm, output] unit never.

def fsdp_units(model, cfg: ParallelConfig, stage: int) -> list[float]:
    """Parameters per GPU (tensor shard, unsharded over dp) of each FSDP unit of a stage: its transformer blocks, the
    embedding on stage 0, [norm, output] on the output stage."""
    units = [model.layer_params() / cfg.tp] * stage_layer_count(model, cfg, stage)
    if stage == 0:
        units.append(model.embedding_params() / cfg.tp)
    if holds_output(cfg, stage):
        units.append(model.output_params() / cfg.tp)
    return units


def fsdp_gather_bytes(model, training, cfg: ParallelConfig, stage: int) -> list[float] | None:
    """Bytes per GPU of each FSDP unit of a stage once gathered, where they differ from bf16's 2 per parameter: with
    training.fsdp_float8_all_gather (torchao's Float8Linear weights all-gathered in fp8, pytorch/torchtitan @ 9dec370a
    torchtitan/float8.py: every nn.Linear but `output`) a transformer block's Linear weights take 1 byte, its norms 2;
    the embedding and [norm, output] stay bf16. None otherwise (every unit 2 bytes per parameter)."""
    if not (training is not None and getattr(training, "fsdp_float8_all_gather", False)
            and training.precision == "fp8" and cfg.zero == 3):
        return None
    L = stage_layer_count(model, cfg, stage)
    linear = fp8_gemm_weights(model, cfg, stage) / L if L else 0.0
    return [2.0 * u - (linear if i < L else 0.0) for i, u in enumerate(fsdp_units(model, cfg, stage))]


def fsdp_buffer_bytes(model, cfg: ParallelConfig, stage: int, training=None) -> float:
    """What FSDP2 holds beyond the sharded state, per GPU of a stage (0 unless ZeRO-3):
    - resharded after forward (pp = 1): the bf16 all-gather output of the unit computing and of the next one, prefetched
      (2 x 2 bytes per parameter of the largest unit), and in backward that unit's bf16 gradient and its fp32
      reduce-scatter input (2 + 4 bytes); the [norm, output] unit is not resharded after forward, so it counts among
      the units in flight;
    - not resharded (pp > 1, torchtitan's default): the whole stage stays gathered in bf16 from the first forward to the
      last backward (2 bytes per parameter). PyTorch pipelining (stage.py backward_maybe_with_nosync) runs every
      backward with set_requires_gradient_sync(False) and set_reshard_after_backward(False), then calls each group's
      post_backward once after the last one; without gradient sync FSDP2's post_backward moves each unsharded gradient
      into `unsharded_accumulated_grad` in the reduce dtype (FSDPParam.to_accumulated_grad_if_needed: fp32, torchtitan's
      mixed_precision_reduce), so the whole stage's unsharded gradients accumulate in fp32 (4 more), plus one unit's
      fp32 reduce-scatter input (4); plus the pipelining stage's receive buffers (pipelining_buffer_bytes)."""
    if cfg.zero != 3:
        return 0.0
    units = fsdp_units(model, cfg, stage)
    big = max(units)
    gathered = fsdp_gather_bytes(model, training, cfg, stage)
    if gathered is not None:         # fp8-gathered Linear weights (their gradients accumulate as the others)
        if cfg.pp == 1:
            return 2 * max(gathered) + (2 + 4) * big
        return sum(gathered) + 4.0 * sum(units) + 4.0 * big + pipelining_buffer_bytes(model, training, cfg, stage)
    if cfg.pp == 1:
        return 2 * 2.0 * big + (2 + 4) * big
    return (2.0 + 4.0) * sum(units) + 4.0 * big + pipelining_buffer_bytes(model, training, cfg, stage)


def pipelining_buffer_bytes(model, training, cfg: ParallelConfig, stage: int) -> float:
    """PyTorch pipelining's stage buffers beyond the saved activations, per GPU of a pipeline rank (ZeRO-3, pp > 1).

    torch/distributed/pipelining/stage.py (PipelineStage, the torch 2.5/2.6 code torchtitan 9dec370a ran on): the stage
    allocates a receive buffer per micro-batch up front, for its input (`args_recv_info[chunk_id]`, every stage but the
    first) and for the gradient of its output (`grad_recv_info[mb_index]`, every stage but the last), and keeps them
    for the whole step. Each is one stage boundary tensor: torchtitan's blocks end in a sequence-parallel layout, so
    s x mbs x h / tp bf16 values (the shard view's s under cp). The input buffers of the micro-batches in flight are
    the saved block inputs already counted, while `fwd_cache` keeps each in-flight micro-batch's output (the same
    size, not otherwise held): counted as cancelling, so m buffers per direction and chunk of the device."""
    if training is None or cfg.pp == 1:
        return 0.0
    boundary = 2.0 * training.seq_length * cfg.micro_batch_size * model.hidden_size / cfg.tp
    v = chunks_per_device(cfg.schedule, cfg.vpp)
    if cfg.schedule in V_SHAPES:
        virtual = [stage, 2 * cfg.pp - 1 - stage]
    else:
        virtual = [c * cfg.pp + stage for c in range(v)]
    last = cfg.pp * v - 1
    directions = sum((vs != 0) + (vs != last) for vs in virtual)
    return boundary * (cfg.num_microbatches * directions + pipelining_kept_boundaries(cfg, stage))


def pipelining_kept_boundaries(cfg: ParallelConfig, stage: int) -> int:
    """Stage-boundary tensors the PyTorch of torchtitan's runs (torch 1963fc83, 2024-12-23, the Dec 2024 page's)
    keeps at a device's activation peak beyond its receive buffers and saved activations:
    - every stage's output, appended to `output_chunks` in forward_one_chunk and kept to the end of the step: only
      the last stage keeps it since pytorch/pytorch#153383 (May 2025, "output_chunks is only used for last stage");
    - every input's gradient, left on the receive buffer as `.grad` by stage_backward until the next step's
      clear_runtime_states: released early only since pytorch/pytorch#164329 (Oct 2025).
    1F1B (one chunk, h held forwards): the activations stay at h micro-batches until the last steady-state backward,
    by which all m outputs exist and m - h input gradients were made. The first stage's held outputs are not
    cancelled by receive buffers (it has none; for the other stages they are, pipelining_buffer_bytes), so it keeps
    m; the last stage's outputs are its logits (logits_bytes). Multi-chunk schedules: only virtual stage 0's held
    outputs are counted (their peak comes at the end of the warm-up, before any backward); the later outputs and
    gradients of their other chunks are not (a weak point)."""
    m = cfg.num_microbatches
    if chunks_per_device(cfg.schedule, cfg.vpp) > 1:
        return chunk_order(cfg, held_forwards(cfg, stage)).count(0) if stage == 0 else 0
    held = int(round(stage_inflight(cfg, stage)))
    first, last = stage == 0, stage == cfg.pp - 1
    outputs = 0 if last else (m if first else m - held)
    grads = 0 if first else m - held
    return outputs + grads


def weight_bytes(training) -> float:
    """Bytes per parameter of the weights the model computes with: 2 with 16-bit training (fp8 plans too: Transformer
    Engine keeps bf16 weights, its fp8 copies are fp8_weight_copy_bytes), 4 in fp32. The one rule behind the weights'
    memory, the gradients' dtype (grad_reduce_bytes) and the parameter all-gather (iteration.param_gather_ratio)."""
    return 2.0 if training.precision in ("bf16", "fp16", "fp8") else 4.0


def grad_reduce_bytes(training) -> float:
    """Bytes per gradient element the data-parallel reduction of a ZeRO 0-2 plan (and the tied-embedding all-reduce)
    moves: the dtype of the gradients as reduced, 4 for fp32 weights or with training.grad_reduce_in_fp32, else 2.

    Megatron-Core reduces its gradient buffer in place (grad_buffer_bytes: `grad_dtype = torch.float if
    grad_reduce_in_fp32 else param.dtype`; fp8 plans keep bf16 weights). DeepSpeed's engine casts each bucket to its
    communication_data_type before the all-reduce, which is the model's dtype unless configured (microsoft/DeepSpeed
    @38327e07 deepspeed/runtime/engine.py communication_data_type: float16 with fp16, bfloat16 with bf16, else float32;
    allreduce_bucket: `tensor.to(self.communication_data_type)`); grad_reduce_in_fp32 stands for its
    `communication_data_type: fp32` there. ZeRO-3 plans (FSDP2) reduce in fp32 whatever the precision
    (costs/fsdp.py REDUCE_BYTES, torchtitan's reduce_dtype)."""
    if weight_bytes(training) == 4.0:
        return 4.0
    return 4.0 if getattr(training, "grad_reduce_in_fp32", False) else 2.0


def grad_buffer_bytes(training) -> float:
    """Bytes per parameter of the gradient buffer Megatron-Core's DDP accumulates into (param.main_grad, a view of it).

    NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/distributed/param_and_grad_buffer.py
    group_params_for_buffers: `grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype`, and the buffer's
    grad_data is allocated in that dtype (the same line at core_r0.8.0, distributed_data_parallel.py:108). So with
    16-bit weights the buffer is 16-bit unless training.grad_reduce_in_fp32; fp32 weights give fp32 gradients: the
    bytes it reduces (grad_reduce_bytes, the one rule). The DeepSpeed engine keeps its own fp32 gradient accumulation
    (unchanged: 4 bytes)."""
    if getattr(training, "pipeline_engine", "megatron") != "megatron":
        return 4.0
    return grad_reduce_bytes(training)


@dataclass(frozen=True)
class AnalyticalMemory:
    """The memory estimator interface: stage_memory(model, cluster, training, cfg, stage) -> MemoryBreakdown.

    overhead_GiB: CUDA context + cuBLAS workspaces + NCCL buffers + the allocator's constant reserve. Measured on
    an H100 (torch 2.11, CUDA 13): context and kernel images 0.73 GiB, two 32 MiB cuBLAS workspaces (forward
    and autograd threads), allocator reserve <= 0.29 GiB beyond 2% of the peak with expandable segments; NCCL
    (not measurable on one GPU) gets the rest of 2 GiB. The learned estimator adds the proportional 2%
    (`fragmentation`); see docs/notes/memory.md.
    """
    overhead_GiB: float = 2.0
    master_weights: bool = True        # fp32 master copy with 16-bit training

    def stage_memory(self, model, cluster, training, cfg: ParallelConfig, stage: int) -> MemoryBreakdown:
        P = stage_params(model, cfg, stage) + replicated_params(model, cfg, stage)
        w_bytes = weight_bytes(training)
        half = w_bytes == 2.0                          # fp8 (TE): bf16 weights, fp32 master as for bf16
        g_bytes = grad_buffer_bytes(training)          # the main_grad buffer: fp32, or 16-bit (grad_reduce_in_fp32)
        if training.optimizer == "sgd":                # momentum (+ fp32 master with 16-bit weights)
            o_bytes = 4 + (4 if half and self.master_weights else 0)
        else:                                          # Adam: m, v (+ fp32 master)
            o_bytes = 8 + (4 if half and self.master_weights else 0)
        dp = cfg.dp
        weights = P * w_bytes + fp8_weight_copy_bytes(model, training, cfg, stage)
        grads = P * g_bytes / (dp if cfg.zero >= 2 else 1)
        optim = P * o_bytes / (dp if cfg.zero >= 1 else 1)
        if cfg.zero == 3:
            # FSDP2 keeps fp32 parameters (they are the master copy) and fp32 gradients, sharded over the shard
            # group, and the optimizer state of its shard; the bf16 copies exist only while gathered (fsdp_buffer_bytes)
            S = cfg.shard_size
            weights = P * 4.0 / S
            grads = P * 4.0 / S                        # fp32 parameters, so fp32 gradients (reduce_dtype float32)
            optim = P * (o_bytes - (4 if half and self.master_weights else 0)) / S
        acts = stage_activation_bytes(model, training, cfg, stage)
        acts += edge_activation_bytes(model, training, cfg, stage)
        logits = logits_bytes(model, training, cfg, stage)
        # the backward working set (one layer's, or the embedding's dense gradient) and the logits of the
        # micro-batch being back-propagated are not live at the same time: its loss backward frees them first
        emb = embedding_grad_bytes(model, cfg, stage)
        if emb:      # with the gradient of the embedding's output, [s, b, h] (gathered over SP), live beside it
            emb += 2.0 * training.seq_length * cfg.micro_batch_size * model.hidden_size
        work = max(stage_transient_bytes(model, training, cfg, stage), emb)
        freed = (6.0 * training.seq_length * cfg.micro_batch_size * padded_vocab(model, cfg.tp) / cfg.tp
                 if logits else 0.0)
        transient = max(0.0, work - freed, output_backward_bytes(model, training, cfg, stage))
        return MemoryBreakdown(weights, grads, optim, acts, logits, self.overhead_GiB * GiB, transient,
                               fsdp=fsdp_buffer_bytes(model, cfg, stage, training))
