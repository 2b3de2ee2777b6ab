"""Per-stage forward / backward time of one micro-batch (tensor-parallel collectives included).

Physically grounded: matmul FLOPs at an efficiency that grows with matrix size, memory-bound
element-wise work, a fixed per-layer kernel overhead. Parameters can be fitted to measurements.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from planner.config import ParallelConfig
from planner.costs.comm import CommModel
from planner.schedules import chunks_per_device

BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class StageTimes:
    forward: float          # s per micro-batch, all layers the device holds
    backward: float         # input + weight gradient, recompute included
    weight_grad: float      # the W part of backward (zero-bubble schedules defer it)
    recompute: float        # the recompute part of backward
    tp_comm: float          # TP collective time inside forward + backward


@dataclass(frozen=True)
class ComputeModel:
    """Time of a transformer layer = matmul FLOPs / (peak * eff(size)) + element-wise bytes / HBM bw + overhead."""
    max_efficiency: float = 0.75       # of peak, for very large GEMMs
    half_size: float = 2.0e9           # per-GEMM FLOPs at which efficiency is half of max
    hbm_GBps: float = 1500.0           # memory-bound element-wise work
    layer_overhead_s: float = 60e-6    # kernel launches and small ops per layer forward
    backward_ratio: float = 2.0        # backward FLOPs / forward FLOPs
    comm: CommModel = field(default_factory=CommModel)

    def _gemm_time(self, flops: float, peak: float) -> float:
        eff = self.max_efficiency * flops / (flops + self.half_size)
        return flops / (peak * eff) if flops > 0 else 0.0

    def layer_forward(self, model, cluster, training, cfg: ParallelConfig) -> tuple[float, float, float]:
        """(compute s, attention-core s, TP comm s) for one layer's forward of one micro-batch."""
        s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
        peak = cluster.gpu.peak_flops(training.precision)
        tokens = s * b
        kv, f = model.kv_channels, model.ffn_hidden_size
        gemms = [2 * tokens * h * (h + 2 * kv) / t, 2 * tokens * h * h / t,
                 2 * tokens * h * f * (2 if model.gated_mlp else 1) / t, 2 * tokens * f * h / t]
        attn_flops = 4 * b * s * s * h / t
        mm = sum(self._gemm_time(g, peak) for g in gemms)
        heads_local = max(1, model.num_attention_heads // t)
        attn = heads_local * self._gemm_time(attn_flops / heads_local, peak)
        # element-wise: norms, residuals, activation, dropout: ~ 16 passes over s*b*h, bytes per element
        elem = 16 * tokens * h * BYTES[training.precision] / (t if cfg.sequence_parallel else 1)
        elem += 4 * b * s * s * (model.num_attention_heads / t) * BYTES[training.precision]  # softmax
        elem_t = elem / (self.hbm_GBps * 1e9)
        comm = 2 * self.comm.tp_allreduce_time(tokens * h * BYTES[training.precision], t, cluster)
        return mm + elem_t + self.layer_overhead_s, attn, comm

    def stage_times(self, model, cluster, training, cfg: ParallelConfig) -> list[StageTimes]:
        comp, attn, comm = self.layer_forward(model, cluster, training, cfg)
        fwd = comp + attn + comm
        bwd = self.backward_ratio * (comp + attn) + comm
        w = 0.5 * self.backward_ratio * (comp - self.layer_overhead_s)   # weight-grad GEMMs
        rc = {"none": 0.0, "selective": attn, "full": fwd}[cfg.recompute]
        L = model.num_layers // cfg.pp
        out = []
        for st in range(cfg.pp):
            f_, b_ = L * fwd, L * (bwd + rc)
            extra = 0.0
            if st == cfg.pp - 1:   # output layer + loss
                tokens = training.seq_length * cfg.micro_batch_size
                extra = self._gemm_time(2 * tokens * model.hidden_size * model.vocab_size / cfg.tp,
                                        cluster.gpu.peak_flops(training.precision))
            out.append(StageTimes(f_ + extra, b_ + 2 * extra, L * w + extra, L * rc, L * 2 * comm))
        return out


def chunk_count(cfg: ParallelConfig) -> int:
    return chunks_per_device(cfg.schedule, cfg.vpp)
