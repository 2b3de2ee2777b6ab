"""Per-stage forward / backward time of one micro-batch (tensor-parallel collectives included).

Physically grounded, with a handful of fitted parameters (planner fit compute):
  GEMM time      = FLOPs / (peak * eff(FLOPs)),  eff(f) = max_efficiency * f / (f + half_size)
                   (small GEMMs cannot fill the GPU; tensor parallelism makes GEMMs smaller)
  attention core = unfused (training.attention): batched QK^T and AV GEMMs at attn_efficiency of the GEMM
                   curve (head_dim-wide batched GEMMs run below plain GEMMs), plus softmax/mask/dropout over
                   s^2 elements. Fused (the default): the causal FLOPs (half of QK^T and AV) at the fused
                   kernel's published or measured efficiency on the GPU type (FUSED_ATTENTION_EFFICIENCY, per kernel:
                   FlashAttention-2, cuDNN, or for ZeRO-3 (torchtitan) plans PyTorch's flash SDPA as measured in
                   training steps; training.attention_backend, attention_backend), backward 2.5x
                   the forward FLOPs (it recomputes QK^T), no element-wise bytes over s^2
  element-wise   = bytes moved by norms, bias/GeLU/dropout/residual kernels at hbm_GBps
  host floor     = layer_overhead_s: the host's time to launch one layer forward (2x for backward).
                   The GPU runs ahead of the host, so a pass takes max(GPU work, host time) (a smooth
                   max): small layers are launch-bound, large ones compute-bound; vTrain's single-node
                   runs show a ~3 ms floor per layer and micro-batch (fwd + recompute + bwd) that does
                   not shrink with the work.
  overheads      =
                   iteration_overhead_s once per iteration (loss/grad-norm syncs, timers, launch gaps)
  optimizer step = parameter bytes touched by mixed-precision Adam at hbm_GBps, once per iteration
Backward = backward_ratio x forward FLOPs (input + weight gradients); full recompute adds one more
forward, selective recompute adds the attention core, mlp recompute the MLP module's forward (mlp_recompute_s).
fp8 (Transformer Engine): the four GEMMs of each transformer layer run at the fp8 peak (fp8_gemm_time), plus TE's
casts to fp8 (bytes at hbm_GBps, forward and backward) and the weights' cast once per iteration; attention, the
output layer and every element-wise kernel stay bf16 (docs/notes/compute.md, "FP8").
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace

from planner.config import ParallelConfig, current_scaling
from planner.costs.comm import CommModel
from planner.costs.memory import padded_vocab, stage_layer_count
from planner.costs.pipeline import chunks_per_device

# Bytes per activation value (element-wise kernels, TP collectives, pipeline messages). fp8 training keeps its
# activations, residual stream and communication in bf16: only GEMM operands are fp8.
BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 2}


def activation_precision(precision: str) -> str:
    """Precision of everything but the transformer layers' fp8 GEMMs: attention (TE runs DotProductAttention in bf16
    unless --fp8-dot-product-attention), the output layer (Megatron's ColumnParallelLinear, not a TE module) and the
    element-wise kernels."""
    return "bf16" if precision == "fp8" else precision


# Fraction of bf16's fraction of peak that a tensor-wise-scaled FP8 GEMM reaches on Hopper (the throughput part of
# fp8_gemm_time), the default of ComputeModel.fp8_relative_efficiency; a compute profile may carry its own, measured
# at its GPU's power limit. It depends on that limit: a tighter cap favours fp8, which does more work per joule.
#   500 W H100: pytorch/FBGEMM#2546, cuBLAS bf16 585 / 575 TFLOP/s vs FP8 row-wise GEMM 1126 / 1083 at 8192^3 and
#     65536x8192x7168 (1.92x, 1.88x);
#   600 W H200 NVL: Transformer Engine's GEMM profiling tutorial, "Worked Example: 5B Model on H200", pre-quantized
#     table (NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b docs/examples/gemm_profiling/
#     gemm_profiling.rst): one layer's 12 GEMMs (M = 15872, hidden 4096, ffn 16384) 31.968 ms BF16, 16.785 ms FP8,
#     1.905x; with the H100 bf16 curve fp8_gemm_time reproduces that at 0.96 (this default);
#   700 W H200 SXM, measured here: 1.754x at the recipes' shapes with clocks at the limit, 0.89 (the H100 and H200
#     profiles; benchmarks/fp8_gemm_ratio.py, docs/notes/gpu_h200.md).
# The former 0.875 (cuBLAS 12.9 blog, 1.75x) is the channel- and block-scaled mode, which TE's delayed scaling does not
# use (TE measures FP8 block scaling at 1.40x there). Casts are not in this number: fp8_cast_elements, FP8_CAST_BYTES.
FP8_GEMM_RELATIVE_EFFICIENCY = 0.96
# TE's cast of a GEMM operand to fp8 with delayed scaling (amax taken in the same kernel, the scale from the history):
# read bf16 (2 bytes), write the fp8 row-wise and column-wise (transposed, Hopper's FP8 GEMMs need TN) copies (2).
FP8_CAST_BYTES = 4.0
# Current (tensor-wise dynamic) scaling: the scale comes from the tensor's own amax, so the cast needs the finished
# reduction and the bf16 operand is read once more (2 bytes per element) than with TE's delayed scaling, whose scale
# comes from the history and whose amax is taken in the cast kernel. Two stacks run it:
# - torchao's Float8 (ZeRO-3 fp8 plans: torchtitan): hp_tensor_to_float8_dynamic computes the scale from
#   tensor_to_amax (torch.max(torch.abs(x))) before hp_tensor_and_scale_to_float8 casts (pytorch/ao@00b36bcc
#   torchao/float8/float8_scaling_utils.py, @00141f40 float8_utils.py);
# - Transformer Engine's Float8CurrentScaling (training.fp8_recipe tensorwise, Megatron-Core --fp8-recipe tensorwise).
#   TE's GEMM profiling tutorial (H200 NVL, the 12 GEMMs of a layer, M = 15872, hidden 4096, ffn 16384;
#   NVIDIA/TransformerEngine@d0067d0d docs/examples/gemm_profiling/gemm_profiling.rst) times its autocast at
#   20.285 ms against 16.785 pre-quantized: 3.50 ms of casts where delayed scaling's are 2.19 (1.60x; 6 / 4 bytes
#   is 1.5x). Not charged: the amax all-reduce over the TP group before a sequence-parallel fp8 all-gather (one
#   float, latency only).
CURRENT_SCALING_AMAX_READ_BYTES = 2.0

# Bytes moved per token per hidden unit by the element-wise kernels of one GPT layer forward
# (16-bit activations): two LayerNorms (read+write, 8) and two bias-dropout-adds (two reads, a
# mask and a write, 14) run on the full hidden size on every tensor-parallel rank unless
# sequence parallelism splits them; QKV bias/split/transposes (12) and bias+GeLU on 4h (16) are split.
ELEM_REPLICATED = 22.0
ELEM_SHARDED = 28.0
# Bytes per attention-score element (s x s per head) forward: scale+mask+softmax read/write (4),
# dropout read/write and mask (5), at 16-bit.
ELEM_SCORES = 9.0
# Bytes per parameter one mixed-precision Adam step touches: fp16 grad read, fp32 master,
# m and v read+write, fp16 weight write, plus unscale / inf-check / norm passes over the grads.
OPT_BYTES_PER_PARAM = 40.0
# Bytes per logit of Megatron's vocab-parallel cross-entropy forward: fp16 read, fp32 cast, max,
# subtract, exp, sum (about five fp32 passes; the backward re-reads them 2x).
LOSS_BYTES = 24.0
# Backward of element-wise kernels moves ~1.5x their forward bytes (gradient in, gradient out and
# the saved input; softmax backward reads probabilities and gradient), unlike GEMMs whose FLOPs double.
ELEM_BACKWARD = 1.5


# Fused causal attention, forward + backward, head dim 128, as a fraction of the GPU's dense 16-bit peak, by
# sequence length, per kernel (training.attention_backend). FLOPs counted as 4 b s^2 heads d / 2 forward (causal)
# and 2.5x that backward (FlashAttention's benchmarks/benchmark_flash_attention.py count).
# flash2: FlashAttention-2's kernel. A100: its published fwd+bwd benchmark, causal mask, head dim 128 (panel d),
#   Dao-AILab/flash-attention@0251105a2fb19d2957484b7f023cd8c115286ced assets/flash2_a100_fwd_bwd_benchmark.png:
#   99, 133, 155, 173, 182, 189 TFLOP/s of 312. Hopper: measured on the lent H100 / H200 (PyTorch's flash SDPA back
#   end, its FlashAttention-2 copy; the same script and calls as cudnn below, benchmarks/data/{h100,h200}/bias_probe/
#   attention.json, median of 20 calls): H100 95, 161, 215, 257, 283, 308, 311 at 512-32768 tokens, H200 108, 169,
#   225, 265, 291, 313, 323. The flash-attn package itself, as
#   Transformer Engine runs it, agrees where it is published with shapes: 206 TFLOP/s at 2k (flash-attn 2.4.2, H100
#   SXM5; NVIDIA/TransformerEngine@d0067d0d docs/examples/attention/attention.ipynb, test_1; 324 at 8k with GQA,
#   test_3; docs/notes/te_published.md). The published H100 panel (assets/flash2_h100_fwd_bwd_benchmark.png: 163, 221,
#   265, 294, 308, 328) lies 6-42% above both at 512-8k, so it is not charged (docs/notes/published_recipes.md,
#   "The kernel each row ran, and FlashAttention-2 on Hopper as measured").
# cudnn: cuDNN's fused attention (sdpa_sm90 flash fprop/bprop kernels), measured on one H200 SXM (torch 2.11, cuDNN
#   9.19, PyTorch's cudnn SDPA back end; benchmarks/data/h200/bias_probe/attention.json, median of 20 calls):
#   146, 289, 397, 485, 500, 522, 544 TFLOP/s at 512-32768 tokens; on one H100 80GB HBM3 (same software, the same
#   script; benchmarks/data/h100/bias_probe/attention.json): 142, 246, 357, 434, 489, 532, 535, 10-15% below the
#   H200 at 1k-4k tokens (more than one machine's burst-to-burst spread; the short kernels' loads, HBM3 against
#   HBM3e), -2.2..+1.9% from 8k up, -3% at 512. The back end Transformer Engine picks on Hopper
#   (NVIDIA/TransformerEngine@a0b36d0c transformer_engine/pytorch/attention/dot_product_attention/utils.py
#   get_attention_backend: "Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance
#   reasons") and PyTorch 2.11's SDPA
#   default on the H200 (the probe's default-back-end layer ran at the cuDNN layer's speed, layer.json).
# cudnn and flash2 have a measured row per Hopper type; sdpa_flash's one row serves both.
# Other GPU types (V100, B200, unknown): A100's FlashAttention-2 fractions, an assumption, not a measurement; cudnn
# has no row for them (the spec check refuses it).
# Fused attention stays 16-bit under fp8 training (Transformer Engine's default keeps DPA in bf16).
FUSED_ATTENTION_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
CUDNN_ATTENTION_SEQ = (512, 1024, 2048, 4096, 8192, 16384, 32768)
_FA2_H100 = tuple(x / 989 for x in (95.2, 160.5, 215.0, 256.6, 282.5, 308.2, 311.2))
_FA2_H200 = tuple(x / 989 for x in (108.3, 169.0, 224.9, 265.3, 290.8, 313.1, 323.4))
_CUDNN_H200 = tuple(x / 989 for x in (146, 289, 397, 485, 500, 522, 544))
_CUDNN_H100 = tuple(x / 989 for x in (142, 246, 357, 434, 489, 532, 535))
# sdpa_flash: PyTorch's flash SDPA back end (its FlashAttention-2 copy) as it runs inside a training step, the kernel
#   torchtitan calls (ZeRO-3 plans; attention_backend). Measured on one H200 SXM (700 W, torch 2.11): the flash
#   kernels of one layer of a torchtitan-style Llama 3 8B step (benchmarks/data/h200/torchtitan_step: 210, 252, 281
#   TFLOP/s at 2048, 8192, 32768 tokens, the mean of the compiled and the eager runs), 0.87-0.94x the same kernel's
#   burst rate (bias_probe/attention.json), which that ratio, interpolated in log2(s), scales at the other lengths
#   (benchmarks/sdpa_flash_in_step.py derives both rows; a test pins them). One row for H100 and H200: the same
#   kernel's burst rates on one H100 80GB HBM3 (benchmarks/data/h100/bias_probe) are 1.6-4.4% below the H200's from
#   2k tokens up (causal; 5-12% at 512-1k, 2.6-7.8% unmasked), less than one machine's own burst-to-burst spread
#   at the recipes' lengths (the same 32k shape 7% apart on that H100 within minutes, docs/notes/gpu_h200.md "One
#   H100"), and the in-step ratio was measured on the H200 only. Steady state
#   already: the profile's sustained_slowdown is not applied to it again (STEADY_STATE_BACKENDS). GPU types without a
#   row (A100, V100, B200) are charged FlashAttention-2's.
SDPA_FLASH_CAUSAL = (CUDNN_ATTENTION_SEQ, (101.3, 158.0, 210.3, 239.2, 252.3, 271.7, 280.6))
SDPA_FLASH_UNMASKED = ((2048, 8192, 16384), (257.6, 269.9, 275.3))


def _per_peak(row: tuple) -> tuple:
    return (row[0], tuple(x / 989 for x in row[1]))


STEADY_STATE_BACKENDS = ("sdpa_flash",)
FUSED_ATTENTION_EFFICIENCY = {
    "flash2": {"A100": (FUSED_ATTENTION_SEQ, tuple(x / 312 for x in (99, 133, 155, 173, 182, 189))),
               "H100": (CUDNN_ATTENTION_SEQ, _FA2_H100), "H200": (CUDNN_ATTENTION_SEQ, _FA2_H200)},
    "cudnn": {"H100": (CUDNN_ATTENTION_SEQ, _CUDNN_H100), "H200": (CUDNN_ATTENTION_SEQ, _CUDNN_H200)},
    "sdpa_flash": {"H100": _per_peak(SDPA_FLASH_CAUSAL), "H200": _per_peak(SDPA_FLASH_CAUSAL)},
}
# The same without the causal mask (FLOPs 4 b s^2 heads d forward, not halved): PyTorch's context parallel runs its
# non-diagonal steps as unmasked SDPA calls (costs/context_parallel.py, allgather). flash2: FlashAttention-2's panel
# b (A100's 512 label is hidden by the legend: 151 read from the bar height against the labelled bars, 1.84 px per
# TFLOP/s); on Hopper measured as above at 2048, 8192 and 16384 tokens (H100 268, 300, 293; H200 276, 311, 317;
# the published H100 panel b: 320, 335, 338). cudnn: measured as above (H200 486, 538, 547; H100 467, 531, 513).
# Both flat below 2048.
FUSED_ATTENTION_EFFICIENCY_NONCAUSAL = {
    "flash2": {"A100": (FUSED_ATTENTION_SEQ, tuple(x / 312 for x in (151, 173, 187, 196, 201, 203))),
               "H100": _per_peak(((2048, 8192, 16384), (268.3, 299.8, 292.5))),
               "H200": _per_peak(((2048, 8192, 16384), (275.5, 311.1, 317.3)))},
    "cudnn": {"H100": _per_peak(((2048, 8192, 16384), (467, 531, 513))),
              "H200": _per_peak(((2048, 8192, 16384), (486, 538, 547)))},
    "sdpa_flash": {"H100": _per_peak(SDPA_FLASH_UNMASKED), "H200": _per_peak(SDPA_FLASH_UNMASKED)},
}
FUSED_ATTENTION_DEFAULT = "A100"
FUSED_BACKWARD_FLOPS = 2.5     # backward / forward FLOPs of a fused kernel (recomputes QK^T): 5 GEMMs against 2


def _gpu_key(table: dict, gpu_type: str) -> str | None:
    return next((k for k in table if k in (gpu_type or "").upper()), None)


def has_attention_backend(gpu_type: str, backend: str) -> bool:
    """A fused-attention efficiency row exists for this kernel on this GPU type (flash2: every type, by default)."""
    return backend == "flash2" or _gpu_key(FUSED_ATTENTION_EFFICIENCY[backend], gpu_type) is not None


def attention_backend(training, cfg=None) -> str:
    """The fused kernel whose efficiency a plan is charged: training.attention_backend, and for auto FlashAttention-2.
    ZeRO-3 plans (torchtitan's, cfg.zero == 3) run PyTorch's SDPA, whose flash back end is its own FlashAttention-2
    copy: auto and flash2 both charge it as measured in training steps (sdpa_flash; where the GPU type has no such
    row, fused_attention_efficiency charges FlashAttention-2's row).
    auto is not cuDNN on Hopper although TE and PyTorch 2.11 pick it there: with the cuDNN 9.19 row the published
    long-context NeMo rows (2024, attention-bound) come out 26-42% too fast, with FlashAttention-2's as measured
    within -6..+5% (docs/notes/gpu_h200.md, docs/notes/published_recipes.md): NeMo 24.07's launcher turned cuDNN
    attention off (NVIDIA/NeMo-Framework-Launcher@8325688d
    launcher_scripts/conf/config.yaml, NVTE_FUSED_ATTN: 0)."""
    b = getattr(training, "attention_backend", "auto")
    if b not in ("auto", "flash2"):
        return b
    return "sdpa_flash" if cfg is not None and getattr(cfg, "zero", 0) == 3 else "flash2"


def measured_backend(gpu_type: str, backend: str) -> str:
    """The kernel whose row is charged: `backend`, or FlashAttention-2 where sdpa_flash has no row for the GPU type."""
    if backend == "sdpa_flash" and _gpu_key(FUSED_ATTENTION_EFFICIENCY[backend], gpu_type) is None:
        return "flash2"
    return backend


def charged_backend(gpu_type: str, training, cfg=None) -> str:
    """The fused kernel whose measured row a plan is charged: attention_backend, then measured_backend."""
    return measured_backend(gpu_type, attention_backend(training, cfg))


def fused_attention_efficiency(gpu_type: str, seq: int, causal: bool = True, backend: str = "flash2") -> float:
    """Fraction of the dense 16-bit peak a fused causal (or, causal=False, unmasked) attention kernel reaches
    (forward + backward), linear in log2(s) between the measured sequence lengths, flat beyond them."""
    import math
    table = (FUSED_ATTENTION_EFFICIENCY if causal else FUSED_ATTENTION_EFFICIENCY_NONCAUSAL)[
        measured_backend(gpu_type, backend)]
    seqs, ys = table[_gpu_key(table, gpu_type) or FUSED_ATTENTION_DEFAULT]
    xs = [math.log2(x) for x in seqs]
    x = min(max(math.log2(max(seq, 1)), xs[0]), xs[-1])
    for i in range(len(xs) - 1):
        if x <= xs[i + 1]:
            return ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])
    return ys[-1]


def causal_attention_flops(b: int, s: int, h: int, t: int, causal: bool = True) -> float:
    """Forward FLOPs of QK^T and AV for one layer on one TP rank: 2 GEMMs of 2 b s^2 h / t, halved by the causal
    mask when the kernel skips the masked blocks (fused kernels do; the unfused path computes them)."""
    f = 2 * 2 * b * s * s * h / t
    return f / 2 if causal else f


@dataclass(frozen=True)
class StageTimes:
    forward: float          # s per micro-batch, all layers the device holds
    backward: float         # input + weight gradient, recompute included
    weight_grad: float      # the W part of backward (zero-bubble schedules defer it)
    recompute: float        # the recompute part of backward
    tp_comm: float          # TP collective time inside forward + backward
    step: float = 0.0       # once per iteration: optimizer step + fixed per-iteration overhead
    cp_forward: float = 0.0   # exposed context-parallel exchange inside forward (costs/context_parallel.py)
    cp_backward: float = 0.0  # ... inside backward (recompute included)


FITTED = ("max_efficiency", "half_size", "attn_efficiency", "hbm_GBps", "layer_overhead_s",
          "iteration_overhead_s", "tp_sync_s", "backward_ratio")
# fitted by default; backward_ratio stays at its FLOP count (2) unless asked, since the
# single-node runs cannot separate it from the GEMM efficiency
DEFAULT_FIT = ("max_efficiency", "half_size", "attn_efficiency", "hbm_GBps", "layer_overhead_s",
               "iteration_overhead_s", "tp_sync_s")


@dataclass(frozen=True)
class ComputeModel:
    """Time of a transformer layer from FLOPs, bytes and overheads; see the module docstring."""
    max_efficiency: float = 0.75       # of peak, for very large GEMMs
    half_size: float = 5.0e9          # per-GEMM FLOPs at which efficiency is half of max
    attn_efficiency: float = 0.5       # batched attention GEMMs, relative to a plain GEMM of equal FLOPs
    hbm_GBps: float = 1500.0           # achieved bandwidth of memory-bound element-wise kernels
    layer_overhead_s: float = 7e-4     # host time to launch one layer forward (Megatron, Python)
    iteration_overhead_s: float = 0.0  # fixed per iteration
    tp_sync_s: float = 0.0             # per TP collective and per other rank: launch skew, waiting for the slowest
    backward_ratio: float = 2.0        # backward time / forward time of the same work
    fp8_relative_efficiency: float = FP8_GEMM_RELATIVE_EFFICIENCY   # fp8 GEMMs' throughput part, relative to bf16's
    sustained_slowdown: float = 1.0    # GPU work in steady-state training / the same kernels as the profile timed them
    # fused attention's rate on this part / on the 700 W parts its tables were measured on (FUSED_ATTENTION_EFFICIENCY):
    # a power-capped part throttles every tensor-core-bound kernel; derived profiles carry their GEMM ceiling's ratio
    # to the reference part's (benchmarks/make_grand_teton_profile.py)
    attention_rate: float = 1.0
    # the GPUs in the runs the profile's times come from: they carry the slowest of those, so a cluster's
    # gpu.variability charges a plan on W GPUs slowest(W) / slowest(reference_gpus) (spec/variability.py)
    reference_gpus: float = 1.0
    comm: CommModel = field(default_factory=CommModel)
    source: str | None = field(default=None, compare=False)

    def params(self) -> dict:
        return {k: getattr(self, k) for k in FITTED}

    def with_params(self, **kw) -> ComputeModel:
        return replace(self, **kw)

    def gemm_fixed_s(self, peak: float) -> float:
        """The fixed part of one GEMM on the curve below, t = (flops + half_size) / (peak * max_efficiency): launch,
        fill and tail, worth half_size FLOPs. A GEMM split into n pieces pays it n times (userbuffers_overhead_s)."""
        return self.half_size / (peak * self.max_efficiency)

    def _gemm_time(self, flops: float, peak: float) -> float:
        if flops <= 0:
            return 0.0
        eff = self.max_efficiency * flops / (flops + self.half_size)
        return flops / (peak * eff)

    def fp8_gemm_time(self, flops: float, peak: float, peak_fp8: float) -> float:
        """One fp8 GEMM. The bf16 curve reads t = (flops + half_size) / (peak * max_efficiency): a throughput part
        and a fixed part (launch, fill, tail) worth half_size FLOPs. In fp8 the throughput part runs at peak_fp8 *
        fp8_relative_efficiency; the fixed part keeps its bf16 time (the GEMM's latency does not halve)."""
        if flops <= 0:
            return 0.0
        return (flops / (peak_fp8 * self.fp8_relative_efficiency) + self.half_size / peak) / self.max_efficiency

    def layer_parts(self, model, cluster, training, cfg: ParallelConfig) -> dict:
        """Forward of one layer, one micro-batch, split into physical parts (seconds)."""
        s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
        peak = cluster.gpu.peak_flops(activation_precision(training.precision))
        by = BYTES[training.precision]
        tokens = s * b
        kv, f = model.kv_channels, model.ffn_hidden_size
        gemms = [2 * tokens * h * (h + 2 * kv) / t, 2 * tokens * h * h / t,
                 2 * tokens * h * f * (2 if model.gated_mlp else 1) / t, 2 * tokens * f * h / t]
        fp8 = training.precision == "fp8"
        if fp8:
            peak8 = cluster.gpu.peak_flops("fp8")
            times = [self.fp8_gemm_time(g, peak, peak8) for g in gemms]
        else:
            times = [self._gemm_time(g, peak) for g in gemms]
        mm = sum(times)
        fused = getattr(training, "attention", "fused") == "fused"
        heads_local = model.num_attention_heads / t
        elem = tokens * h * (ELEM_REPLICATED / (t if cfg.sequence_parallel else 1) + ELEM_SHARDED / t) * by / 2
        eager = getattr(training, "kernels", "fused") == "eager"
        rot_f = rot_b = 0.0
        if eager:                        # torchtitan without torch.compile: each op its own pass (see the function)
            elem, elem_bwd = eager_elementwise_bytes(model, training, cfg)
        elif cfg.zero == 3 and model.family == "llama":
            # torchtitan compiled: Inductor leaves the complex rotary multiply eager (rotary_bytes)
            rot_f, rot_b = rotary_bytes(model, training, cfg)
            elem += rot_f
        if fused:
            # the kernel's softmax, mask and dropout run in registers: no s^2 bytes; 16-bit peak (fp32: its own)
            apeak = cluster.gpu.peak_flops(training.precision if training.precision in ("fp32", "fp16") else "bf16")
            backend = charged_backend(cluster.gpu.type, training, cfg)
            eff = fused_attention_efficiency(cluster.gpu.type, s, backend=backend)
            attn = causal_attention_flops(b, s, h, t) / (apeak * eff * self.attention_rate)
        else:
            # QK^T and AV: 2 GEMMs of 2*b*s*s*h/t FLOPs, batched over the local heads
            attn = 2 * self._gemm_time(2 * b * s * s * h / t, peak) / self.attn_efficiency
            scores = b * heads_local * s * s * ELEM_SCORES * by / 2
            elem += scores
            if eager:                    # the unfused softmax path keeps the fused model's backward ratio
                elem_bwd += ELEM_BACKWARD * scores
        elem_t = elem / (self.hbm_GBps * 1e9)
        # Megatron: one all-reduce after attention and one after the MLP (reduce-scatter +
        # all-gather pairs of the same volume with sequence parallelism); one all-gather and one reduce-scatter is
        # half an all-reduce each (tp_gather_bytes: the gather's element size)
        gather = self._tp_allreduce(tokens * h * tp_gather_bytes(training, cfg), t, cluster) / 2
        scatter = self._tp_allreduce(tokens * h * by, t, cluster) / 2
        comm = 2 * (gather + scatter)
        parts = {"gemm": mm, "attn": attn, "elem": elem_t, "overhead": self.layer_overhead_s, "tp_comm": comm,
                 # one all-gather / one reduce-scatter of sequence parallelism (forward; backward mirrors them)
                 "tp_gather": gather, "tp_scatter": scatter,
                 # the column-parallel GEMMs (QKV, fc1), forward; their dgrad and wgrad have the same FLOPs
                 "gemm_column": (times[0], times[2]),
                 # the row-parallel GEMMs (proj, fc2), forward; likewise
                 "gemm_row": (times[1], times[3])}
        if eager:                        # counted op by op, not ELEM_BACKWARD x forward
            parts["elem_backward"] = elem_bwd / (self.hbm_GBps * 1e9)
        elif rot_f:                      # the rotary's backward bytes as counted, the rest ELEM_BACKWARD x forward
            parts["elem_backward"] = (ELEM_BACKWARD * (elem - rot_f) + rot_b) / (self.hbm_GBps * 1e9)
        if fused:
            parts["attn_backward"] = FUSED_BACKWARD_FLOPS * attn
        else:
            # the scale / mask / softmax / dropout passes over the s^2 scores (inside "elem"): selective recompute
            # re-runs them with the two GEMMs (Megatron's checkpointed CoreAttention)
            parts["attn_scores"] = scores / (self.hbm_GBps * 1e9)
        if fp8:
            fwd_cast, bwd_cast = fp8_cast_elements(model, training, cfg)
            hbm = self.hbm_GBps * 1e9
            cast = fp8_cast_bytes(training, cfg)
            parts["fp8_cast"] = cast * fwd_cast / hbm
            parts["fp8_cast_bwd"] = cast * bwd_cast / hbm
        if self.sustained_slowdown != 1.0:        # profiles without it: every part bit for bit as before
            steady = fused and backend in STEADY_STATE_BACKENDS      # measured inside training steps already
            parts = sustained(parts, self.sustained_slowdown, skip=("attn", "attn_backward") if steady else ())
        k = self.straggler(cluster, cfg)
        if k != 1.0:                              # no gpu.variability: every part bit for bit as before
            parts = sustained(parts, k)
        return parts

    def straggler(self, cluster, cfg: ParallelConfig) -> float:
        """The slowest of the plan's GPUs against the profile's own (spec/variability.py); 1 without a spread."""
        var = getattr(cluster.gpu, "variability", None)
        if var is None:
            return 1.0
        return var.factor(cfg.num_gpus, self.reference_gpus)

    def _tp_allreduce(self, nbytes: float, t: int, cluster) -> float:
        # waiting for the slowest of t ranks' launches: skew grows with the number of other ranks
        return self.comm.tp_allreduce_time(nbytes, t, cluster) + self.tp_sync_s * (t - 1)

    def pass_times(self, parts: dict) -> tuple[float, float]:
        """(forward, backward) compute of one layer pass: GPU work or the host's launch time."""
        gpu_f = parts["gemm"] + parts["attn"] + parts["elem"]
        if "attn_backward" in parts:      # fused kernel: its own backward FLOPs at the kernel's efficiency
            gpu_b = self.backward_ratio * parts["gemm"] + parts["attn_backward"] + ELEM_BACKWARD * parts["elem"]
        else:
            gpu_b = self.backward_ratio * (parts["gemm"] + parts["attn"]) + ELEM_BACKWARD * parts["elem"]
        if "elem_backward" in parts:     # eager kernels, or compiled ZeRO-3 Llama (rotary): other sums bit for bit
            gpu_b += parts["elem_backward"] - ELEM_BACKWARD * parts["elem"]
        if "fp8_cast" in parts:          # fp8 only: bf16 / fp16 / fp32 sums stay bit for bit as they were
            gpu_f += parts["fp8_cast"]
            gpu_b += parts["fp8_cast_bwd"]
        return smooth_max(gpu_f, parts["overhead"]), smooth_max(gpu_b, 2 * parts["overhead"])

    def layer_forward(self, model, cluster, training, cfg: ParallelConfig) -> tuple[float, float, float]:
        """(compute s, attention-core s, TP comm s) for one layer's forward of one micro-batch."""
        p = self.layer_parts(model, cluster, training, cfg)
        f, _ = self.pass_times(p)
        return f - p["attn"], p["attn"], p["tp_comm"]

    def head_times(self, model, cluster, training, cfg: ParallelConfig) -> tuple[float, float, float]:
        """(first-stage extra fwd, last-stage extra fwd, TP comm of the head) per micro-batch:
        embedding lookup (+ its dense gradient), output projection and the vocab-parallel loss, over Megatron's
        padded vocabulary (memory.padded_vocab, as the memory model sizes the logits)."""
        s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
        V = padded_vocab(model, t)
        peak = cluster.gpu.peak_flops(activation_precision(training.precision))   # not a TE module: no fp8
        by = BYTES[training.precision]
        hbm = self.hbm_GBps * 1e9
        emb = (s * b * h * by * 2 + V * h / t * by) / hbm        # gather, and zeroing its dense grad
        logits = self._gemm_time(2 * s * b * h * V / t, peak)
        loss = s * b * V / t * LOSS_BYTES / hbm                   # fp32 vocab-parallel cross-entropy passes
        comm = self._tp_allreduce(s * b * h * by, t, cluster)   # embedding / output-grad all-reduce
        k = self.sustained_slowdown * self.straggler(cluster, cfg)
        return k * emb + self.layer_overhead_s, k * (logits + loss) + self.layer_overhead_s, comm

    def step_time(self, model, cluster, training, cfg: ParallelConfig, stage: int) -> float:
        from planner.costs.memory import stage_params
        opt = stage_params(model, cfg, stage) * OPT_BYTES_PER_PARAM / (self.hbm_GBps * 1e9)
        if cfg.zero == 3:
            opt /= cfg.shard_size        # HSDP: each replica steps its shard
        elif cfg.zero >= 1:
            opt /= cfg.dp
        if training.precision == "fp8":     # TE casts each weight (and its transpose) once, on the first micro-batch
            from planner.costs.memory import fp8_gemm_weights
            opt += FP8_CAST_BYTES * fp8_gemm_weights(model, cfg, stage) / (self.hbm_GBps * 1e9)
        return opt + self.iteration_overhead_s

    def stage_times(self, model, cluster, training, cfg: ParallelConfig) -> list[StageTimes]:
        comp, attn, comm = self.layer_forward(model, cluster, training, cfg)
        r = self.backward_ratio
        fwd = comp + attn + comm
        # backward: r x the compute, and the mirrored all-reduces of the input gradients
        p = self.layer_parts(model, cluster, training, cfg)
        bwd = self.pass_times(p)[1] + comm
        w = 0.5 * r * p["gemm"]                        # weight-grad GEMMs, about half the backward matmuls
        # selective: Megatron's checkpointed core attention, i.e. QK^T, scale/mask/softmax, dropout and AV
        # (megatron/model/transformer.py _checkpointed_attention_forward); fused: one kernel forward
        # full and block re-run a whole layer's forward, block for its checkpointed layers only (recomputed_layers)
        rc = {"none": 0.0, "selective": attn + p.get("attn_scores", 0.0), "full": fwd,
              "block": fwd}.get(cfg.recompute)
        if cfg.recompute == "mlp":
            rc = mlp_recompute_s(model, cfg, p)
        if cfg.op_sac:
            rc = op_sac_recompute_s(model, p)
        first, last, head_comm = self.head_times(model, cluster, training, cfg)
        from planner.costs.memory import stage_layer_count
        out = []
        for st in range(cfg.pp):
            L = stage_layer_count(model, cfg, st)      # uneven first / last stages (Megatron-Core) change it
            R = recomputed_layers(model, cfg, st)      # layers whose recompute runs (block: not all of them)
            # R == L: the product as before block existed, so the other modes' times stay bit for bit
            b_ = L * (bwd + rc) if R == L else L * bwd + R * rc
            f_, w_, c_ = L * fwd, L * w, L * 2 * comm + R * recompute_tp_comm(p, cfg.recompute)
            if st == 0:
                f_ += first
                b_ += r * first + head_comm
                c_ += 2 * head_comm
                f_ += head_comm
            if st == cfg.pp - 1:
                f_ += last
                b_ += r * last + (head_comm if cfg.pp > 1 else 0.0)
                w_ += 0.5 * r * last
            out.append(StageTimes(f_, b_, w_, R * rc, c_, self.step_time(model, cluster, training, cfg, st)))
        return out

    # --- profiles ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"compute": self.params(), "comm": self.comm.to_dict()}


# The GPU work of layer_parts (kernels), which ComputeModel.sustained_slowdown scales; not the host floor ("overhead")
# nor the collectives (tp_comm, tp_gather, tp_scatter: link-bound, timed by the comm model).
GPU_WORK_PARTS = ("gemm", "attn", "attn_backward", "attn_scores", "elem", "elem_backward", "fp8_cast", "fp8_cast_bwd",
                  "gemm_column", "gemm_row")


def sustained(parts: dict, k: float, skip: tuple = ()) -> dict:
    """`parts` with its GPU work times k-fold: a compute profile timed its kernels in short runs, steady-state
    training runs them slower (clocks at the power limit, gaps between kernels; docs/notes/gpu_h200.md). `skip`: parts
    whose rates were measured in training steps already."""
    out = dict(parts)
    for key in GPU_WORK_PARTS:
        if key in out and key not in skip:
            v = out[key]
            out[key] = tuple(k * x for x in v) if isinstance(v, tuple) else k * v
    return out


# Share of a layer's forward tensor-parallel collectives its recompute re-runs: a whole forward's (full), the MLP's
# input all-gather and fc2's reduce-scatter (mlp: two of the four, of equal size; one all-reduce of two without
# sequence parallelism), none for the attention core. Overlap hides the same share of them (iteration.stage_times).
RECOMPUTE_TP_SHARE = {"full": 1.0, "block": 1.0, "mlp": 0.5}


def recomputed_layers(model, cfg: ParallelConfig, stage: int) -> int:
    """Layers of a pipeline rank whose recompute runs in backward: all of them, except under block recompute, where
    each chunk re-runs its first min(N, layers), or on a ZeRO-3 plan (torchtitan's layer SAC) the rank re-runs every
    n-th of its blocks (ParallelConfig.recomputed_chunk_layers). The one count stage_times,
    the TP-overlap credit (iteration.stage_times) and the CP exchange's re-run (context_parallel) multiply by."""
    if cfg.recompute != "block":
        return stage_layer_count(model, cfg, stage)
    return sum(cfg.recomputed_chunk_layers(model.num_layers)[stage])


def recompute_tp_comm(parts: dict, recompute: str) -> float:
    """Seconds of tensor-parallel collectives one layer's recompute re-runs (RECOMPUTE_TP_SHARE)."""
    return RECOMPUTE_TP_SHARE.get(recompute, 0.0) * parts["tp_comm"]


# Shares of layer_parts' element-wise bytes (ELEM_REPLICATED, ELEM_SHARDED) inside Megatron-Core's MLP module: the
# pre-MLP norm fused into fc1 (4 of the two norms' and two bias-dropout-adds' 22; the bias-dropout-add is mlp_bda,
# outside the module) and the activation (16 of 28).
MLP_ELEM_REPLICATED = 4.0
MLP_ELEM_SHARDED = 16.0


def mlp_recompute_s(model, cfg: ParallelConfig, parts: dict) -> float:
    """Megatron-Core's `--recompute-modules mlp` (memory.mlp_recompute_dropped_bytes): one more forward of the MLP
    module in backward, from its checkpointed input: fc1 and fc2 (their forward GEMM times), the fused pre-MLP norm and
    the activation (their share of the layer's element-wise bytes; `kernels: eager` counts its bytes op by op without
    this split, and is charged the same share), TE's fp8 casts of fc1's and fc2's inputs (their share of
    fp8_cast_elements' forward casts), and the module's two tensor-parallel collectives (recompute_tp_comm)."""
    h, f, t = model.hidden_size, model.ffn_hidden_size, cfg.tp
    sp = t if cfg.sequence_parallel else 1
    elem = parts["elem"] * (MLP_ELEM_REPLICATED / sp + MLP_ELEM_SHARDED / t) / (ELEM_REPLICATED / sp
                                                                               + ELEM_SHARDED / t)
    out = parts["gemm_column"][1] + parts["gemm_row"][1] + elem + recompute_tp_comm(parts, "mlp")
    if "fp8_cast" in parts:      # forward casts: QKV and fc1 inputs h/sp each, projection h/t, fc2 f/t
        out += parts["fp8_cast"] * (h / sp + f / t) / (2 * h / sp + h / t + f / t)
    return out


def op_sac_recompute_s(model, parts: dict) -> float:
    """Recompute of one layer under torchtitan's per-op selective checkpointing (memory.op_sac_bytes): the wk, wo and
    w3 GEMMs (their share of the layer's GEMM FLOPs, at the layer's GEMM rate) and every element-wise op; SDPA is
    saved, not rerun."""
    h, kv, f = model.hidden_size, model.kv_channels, model.ffn_hidden_size
    g = 2 if model.gated_mlp else 1
    share = (h * kv + h * h + (h * f if g == 2 else 0)) / (h * (h + 2 * kv) + h * h + g * h * f + f * h)
    return share * parts["gemm"] + parts["elem"]


def eager_elementwise_bytes(model, training, cfg: ParallelConfig) -> tuple[float, float]:
    """(forward, backward) bytes the element-wise kernels of one Llama block move for one micro-batch on one rank
    when PyTorch runs it eagerly (`training.kernels: eager`), GEMMs and SDPA excluded (they are timed as GEMMs and
    fused attention). Counted op by op from torchtitan's model code (pytorch/torchtitan @ 9dec370a, the commit of
    its Dec 2024 H100 benchmarks: torchtitan/models/llama/model.py and norms.py, norm_type rmsnorm, FSDP2 with bf16
    parameters), each kernel reading its inputs and writing its outputs once; the per-op counts below equal what
    `profile.torchtitan_block.eager_bytes` measures by dispatching that block's aten ops (tests/test_eager.py).
    Per token, h hidden, q = heads x head_dim, k = kv_heads x head_dim, f the SwiGLU width:
      RMSNorm `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * w`: casts 6h + 6h, pow 8h, mean
        4h, scale 8h, weight 4h = 36h (+ 24 bytes of per-token scalars) forward; its autograd 92h (+ 40) backward;
      rotary (complex64): cast 6, complex multiply 8, cast back 6 = 20 bytes per element of q and of k, both ways,
        plus the broadcast freqs_cis (4 s head_dim bytes) per multiply, and backward its conjugate copy (8 s d);
      repeat_kv (expand + reshape copies K and V when 1 < kv_heads < heads): 2k + 2q each; backward sums them back;
      residual adds 6h each (x2); SwiGLU: silu 4f + product 6f forward, 6f + 6f + silu_backward 6f backward;
      backward accumulations of a tensor used twice (autograd adds the two gradients): the norm outputs (3 + 2 uses:
        18h), the residual stream (2 x 6h).
    Tensor parallelism (torchtitan: sequence-parallel norms): norms and residual work on s/tp tokens, rotary,
    repeat_kv and SwiGLU on the rank's heads and columns; the gradient sums of the gathered norm outputs on all s.
    Only tp = 1 is checked against the dispatch count."""
    s, b, t = training.seq_length, cfg.micro_batch_size, cfg.tp
    h, d, f = model.hidden_size, model.head_dim, model.ffn_hidden_size
    q, k = model.num_attention_heads * d, model.kv_channels
    T = s * b
    sp = t if cfg.sequence_parallel else 1
    # repeat_kv: backward always sums the repeats; forward copies unless kv_heads == 1 (reshape is then a view)
    rep_b = 4 * (q + k) if model.num_kv_heads < model.num_attention_heads else 0
    rep_f = rep_b if model.num_kv_heads > 1 else 0
    rot_f, rot_b = rotary_bytes(model, training, cfg)
    fwd = T / sp * (2 * (36 * h + 24) + 12 * h) + T / t * (rep_f + 10 * f) + 2 * 2 * h + rot_f
    bwd = T / sp * (2 * (92 * h + 40) + 12 * h) + T * 18 * h + T / t * (rep_b + 18 * f) + 2 * 4 * h + rot_b
    return float(fwd), float(bwd)


def rotary_bytes(model, training, cfg: ParallelConfig) -> tuple[float, float]:
    """(forward, backward) bytes of torchtitan's complex64 rotary embedding for one micro-batch on one rank: per
    element of q and of k a cast to fp32 (6), the complex multiply (8) and the cast back (6), plus the broadcast
    freqs_cis per multiply (4 s head_dim bytes; backward its conjugate copy too, 12). Part of the eager count
    (eager_elementwise_bytes) and, for torch.compile'd ZeRO-3 plans, charged as well: Inductor does not generate code
    for complex operators, so the multiply stays an eager kernel between its cast kernels (one H200 step: 0.58 ms of
    complex multiply and 0.38 ms of casts per Llama 3 8B layer at 2 x 8192 tokens,
    benchmarks/data/h200/torchtitan_step/steps_kernels_L2_L4.json; docs/notes/fsdp.md)."""
    s, b, t, d = training.seq_length, cfg.micro_batch_size, cfg.tp, model.head_dim
    qk = model.num_attention_heads * d + model.kv_channels
    return s * b / t * 20 * qk + 2 * 4 * s * d, s * b / t * 20 * qk + 2 * 12 * s * d


def fp8_cast_elements(model, training, cfg: ParallelConfig) -> tuple[float, float]:
    """(forward, backward) elements TE casts to fp8 in one layer, one micro-batch, one TP rank: the inputs of the
    four GEMMs in forward (QKV and fc1 inputs cast on the sequence-parallel shard before TE's fp8 all-gather), the
    output gradients in backward (dgrad and wgrad both read them)."""
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    kv, f = model.kv_channels, model.ffn_hidden_size
    sp = t if cfg.sequence_parallel else 1
    tokens = s * b
    fwd = tokens * (2 * h / sp + h / t + f / t)
    bwd = tokens * ((h + 2 * kv) / t + 2 * h / sp + f * (2 if model.gated_mlp else 1) / t)
    return fwd, bwd


def fp8_cast_bytes(training, cfg: ParallelConfig) -> float:
    """HBM bytes per element of one activation / gradient cast to fp8: TE's delayed scaling (FP8_CAST_BYTES), plus
    the amax read of current scaling (CURRENT_SCALING_AMAX_READ_BYTES: TE tensorwise, torchao for ZeRO-3 plans)."""
    return FP8_CAST_BYTES + (CURRENT_SCALING_AMAX_READ_BYTES if current_scaling(training, cfg) else 0.0)


def tp_gather_bytes(training, cfg: ParallelConfig) -> float:
    """Bytes per element of a sequence-parallel all-gather. torchao's Float8 tensor parallelism (ZeRO-3 fp8 plans:
    torchtitan) casts before it gathers: PrepareFloat8ModuleInput casts the attention / FFN input to float8_e4m3fn
    before its Shard(1) -> Replicate redistribute, and Float8RowwiseParallel's NoopFwToFloat8BwDynamic casts the
    output gradient to e5m2 before the backward's all-gather (pytorch/ao torchao/float8/float8_tensor_parallel.py,
    v0.8.0): 1 byte. Reduce-scatters move the bf16 GEMM output. Megatron / TE plans keep the profile's 16-bit bytes."""
    if training.precision == "fp8" and cfg.zero == 3 and cfg.sequence_parallel:
        return 1.0
    return BYTES[training.precision]


def smooth_max(a: float, b: float, p: float = 8.0) -> float:
    """max(a, b) rounded near a == b (overlap is partial there), differentiable for the fit."""
    if a <= 0 or b <= 0:
        return max(a, b)
    return (a ** p + b ** p) ** (1.0 / p)


PROFILE_FORMAT = "planner.compute-profile/1"     # a profile without "format" is read as this version
PROFILE_KEYS = ("format", "comm", "compute", "fit")
COMPUTE_KEYS = FITTED + ("fp8_relative_efficiency", "sustained_slowdown", "attention_rate",   # not fitted: optional
                          "reference_gpus")
COMM_KEYS = ("intra_efficiency", "inter_efficiency", "grad_bytes", "allreduce_tables")


def load_profile(path: str) -> ComputeModel:
    """A compute profile JSON: {"format", "compute": {fitted params}, "comm": {..., "allreduce_tables": dir},
    "fit": {how it was fitted}}. Unknown keys and formats are refused (SpecError naming the file and key)."""
    from planner.costs.comm import read_nccl_dir
    from planner.errors import SpecError
    from planner.io import load_json
    d = load_json(path, "compute profile")
    if not isinstance(d, dict):
        raise SpecError(path, None, "expected a JSON object (a compute profile)")
    for k in d:
        if k not in PROFILE_KEYS:
            raise SpecError(path, k, f"unknown key (expected {', '.join(PROFILE_KEYS)})")
    if d.get("format", PROFILE_FORMAT) != PROFILE_FORMAT:
        raise SpecError(path, "format", f"expected {PROFILE_FORMAT!r}")
    cd, pd = _section(path, d, "comm", COMM_KEYS), _section(path, d, "compute", COMPUTE_KEYS)
    for k, v in pd.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise SpecError(path, f"compute.{k}", "must be a number")
    if pd.get("reference_gpus", 1.0) < 1:          # a GPU count: below 1 it would read as 1 without a word
        raise SpecError(path, "compute.reference_gpus", f"is the GPUs of the profile's runs: at least 1, got "
                                                        f"{pd['reference_gpus']}")
    base = os.path.dirname(os.path.abspath(path))
    tables = {}
    tref = cd.pop("allreduce_tables", None)
    if tref:
        tables = read_nccl_dir(os.path.normpath(os.path.join(base, tref)))
    comm = CommModel(**cd, allreduce_tables=tables)
    params = {k: float(v) for k, v in pd.items()}
    return ComputeModel(**params, comm=comm, source=path)


def _section(path: str, d: dict, name: str, known) -> dict:
    from planner.errors import SpecError
    sec = d.get(name, {})
    if not isinstance(sec, dict):
        raise SpecError(path, name, "expected a mapping")
    for k in sec:
        if k not in known:
            raise SpecError(path, f"{name}.{k}", f"unknown key (expected {', '.join(known)})")
    return dict(sec)


def save_profile(path: str, model: ComputeModel, fit: dict, allreduce_tables: str | None = None) -> dict:
    """Write `model` as a compute profile JSON (atomically); `allreduce_tables`: the nccl-tests directory,
    stored relative to the file. Returns what was written."""
    from planner.io import atomic_write_text
    out = {"format": PROFILE_FORMAT, "comm": model.comm.to_dict()}
    if allreduce_tables:
        out["comm"]["allreduce_tables"] = os.path.relpath(os.path.abspath(allreduce_tables),
                                                          os.path.dirname(os.path.abspath(path)))
    out["compute"] = model.params()
    if model.fp8_relative_efficiency != FP8_GEMM_RELATIVE_EFFICIENCY:
        out["compute"]["fp8_relative_efficiency"] = model.fp8_relative_efficiency
    if model.sustained_slowdown != 1.0:
        out["compute"]["sustained_slowdown"] = model.sustained_slowdown
    if model.attention_rate != 1.0:
        out["compute"]["attention_rate"] = model.attention_rate
    if model.reference_gpus != 1.0:
        out["compute"]["reference_gpus"] = model.reference_gpus
    out["fit"] = fit
    atomic_write_text(path, json.dumps(out, indent=2) + "\n")
    return out


def chunk_count(cfg: ParallelConfig) -> int:
    return chunks_per_device(cfg.schedule, cfg.vpp)


__all__ = ["BYTES", "activation_precision", "fp8_cast_elements", "eager_elementwise_bytes", "ComputeModel",
           "StageTimes", "load_profile", "save_profile", "chunk_count", "asdict"]
