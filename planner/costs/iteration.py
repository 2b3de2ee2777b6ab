"""Critical-path iteration time (Pipette eqs. 3-6, generalised to our schedules) and the estimate.

T = compute(schedule, bubbles) + (m/pp) * slowest pipeline's p2p path + slowest data-parallel ring
(each row's ring after its backward ends, less the slack it has over stage 0) + slowest tied-embedding
gradient all-reduce (GPT: first and last stage, after the DP sync; Megatron's finalize_model_grads).
`build_problem` folds everything the mapping does not change into a constant, so that the exact
solver, the annealer and `estimate` all score a mapping with MappingProblem.objective. The communication
terms (p2p hop, data-parallel ring, tied-embedding all-reduce) are small functions here, which the
simulator (planner.simulator.replay) calls on the mapped links too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from planner.config import SPLIT_SCHEDULES, ParallelConfig
from planner.costs import Costs, default_costs
from planner.costs import context_parallel as cpar
from planner.costs.comm import p2p_time, ring_allreduce_time
from planner.costs.compute import BYTES, RECOMPUTE_TP_SHARE, activation_precision, recomputed_layers, tp_gather_bytes
from planner.costs.fsdp import fsdp_collectives, fsdp_copy_s
from planner.costs.lockstep import deepspeed_time, lock_step_time
from planner.costs.memory import (
    GiB,
    MemoryBreakdown,
    fsdp_gather_bytes,
    fsdp_units,
    grad_reduce_bytes,
    stage_layer_count,
    stage_params,
    weight_bytes,
)
from planner.costs.pipeline import (
    V_SHAPES,
    convex_pieces,
    interleaved_sync_leads,
    interleaved_time,
    lock_step_p2p_s,
    lock_step_pace,
    p2p_hops,
    place_chunk_times,
    stage_compute_time,
)
from planner.costs.vwalk import v_walk, v_walk_p2p_s, vzb_hops_walked, vzb_walked
from planner.mapping import work
from planner.mapping.problem import Layout, MappingProblem, Pace, layouts


@dataclass
class Estimate:
    iteration_s: float
    tokens_per_s: float
    mfu: float
    compute_s: float
    pp_comm_s: float
    dp_comm_s: float
    memory: list = field(default_factory=list)      # MemoryBreakdown per stage
    memory_limit_GiB: float = 0.0
    emb_comm_s: float = 0.0                          # tied-embedding gradient all-reduce (slowest column)

    @property
    def peak_memory_GiB(self) -> float:
        return max(m.total for m in self.memory) / GiB if self.memory else 0.0

    @property
    def fits(self) -> bool:
        return self.peak_memory_GiB <= self.memory_limit_GiB

    def memory_dict(self) -> dict:
        worst = max(self.memory, key=lambda m: m.total)
        d = {k: round(v, 3) for k, v in worst.as_GiB().items() if k != "total"}
        d["peak"] = round(self.peak_memory_GiB, 3)
        d["limit"] = round(self.memory_limit_GiB, 3)
        d["per_stage"] = [round(m.total / GiB, 3) for m in self.memory]
        return d

    def as_dict(self) -> dict:
        return {"iteration_s": self.iteration_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "compute_s": self.compute_s, "pp_comm_s": self.pp_comm_s, "dp_comm_s": self.dp_comm_s,
                "emb_comm_s": self.emb_comm_s, "memory_GiB": self.memory_dict()}


def mfu_note(spec) -> str:
    """What an MFU figure is measured against: for fp8 plans the 16-bit (bf16) peak, as NeMo's and Megatron's model
    TFLOP/s figures are; empty for 16/32-bit plans, whose MFU is against their own peak."""
    return precision_mfu_note(spec.training.precision)


def precision_mfu_note(precision: str | None) -> str:
    """mfu_note of a plan in `precision` (a batch CSV row's)."""
    return " of the bf16 peak" if precision == "fp8" else ""


def memory_limit_GiB(spec) -> float:
    return spec.cluster.gpu.memory_GiB * (1.0 - spec.search.memory_margin)


def stage_memory(spec, cfg: ParallelConfig, costs: Costs) -> list[MemoryBreakdown]:
    """Per stage; a context-parallel rank is its shard view plus the exchange's buffers (costs.context_parallel)."""
    return list(cpar.stage_memories(spec, cfg, costs))


# ---- communication overlapped with compute (training.overlap): only the exposed part is charged. One home for
# the estimate, the mapping objective (folded into dp_link / dp_base, see build_problem) and the simulator.

def overlap_of(spec):
    """The overlaps in force: the spec's training.overlap, none for DeepSpeed's engine (it overlaps none of them), and
    no tp_comm (TE's userbuffers, torchtitan's async TP) on a GPU older than Ampere, which neither runs on."""
    ov = spec.training.overlap
    if spec.training.pipeline_engine == "deepspeed":
        return type(ov).none()
    return tp_comm_in_force(spec)


def tp_comm_in_force(spec):
    """training.overlap with tp_comm off where the GPU cannot run it (spec.cluster.runs_transformer_engine)."""
    from dataclasses import replace

    from planner.spec.cluster import runs_transformer_engine
    ov = spec.training.overlap
    return ov if not ov.tp_comm or runs_transformer_engine(spec.cluster.gpu) else replace(ov, tp_comm=False)


def exposed_s(comm, hide, pieces: int = 1):
    """Exposed part of a transfer of `comm` seconds split into `pieces` equal pieces, each issued when its share
    of `hide` seconds of compute is done (piece k at k*hide/n) and run one after another on one stream.
    Piece k ends at k*hide/n + (n-k+1)*comm/n, linear in k, so the end is at k = n or k = 1 and the part after
    the compute is max(comm/n, comm - hide*(1 - 1/n)): the last piece, or everything past what the compute hides.
    Never more than comm; pieces -> inf gives max(0, comm - hide). Scalars or arrays (monotone in comm)."""
    n = max(int(pieces), 1)
    return np.maximum(comm / n, comm - hide * (1.0 - 1.0 / n))


def tp_overlap_saving(spec, cfg: ParallelConfig, costs: Costs) -> tuple[float, float]:
    """Seconds of one layer's tensor-parallel collectives hidden behind GEMMs, (forward, backward).

    ZeRO-3 plans are torchtitan's: there training.overlap.tp_comm is async TP (async_tp_saving), not userbuffers.
    --tp-comm-overlap (training.overlap.tp_comm, ZeRO 0-2): Transformer Engine's userbuffers split each all-gather /
    reduce-scatter of sequence parallelism into tp pieces pipelined with the adjacent GEMM (ring exchange):
    exposed_s(comm, GEMM time, tp). Megatron asserts sequence parallelism for it (arguments.py: 'Tensor parallel
    communication/GEMM overlap can happen only when sequence parallelism is enabled'); the attention core and the
    element-wise work hide nothing.
    Otherwise Megatron's asynchronous backward of a column-parallel layer (training.overlap.tp_backward,
    tp_backward_saving; ZeRO 0-2 only); the forward's collectives all wait."""
    parts_of = getattr(costs.compute, "layer_parts", None)
    if cfg.tp <= 1 or parts_of is None:
        return 0.0, 0.0
    ov = overlap_of(spec)
    if ov.tp_comm and cfg.sequence_parallel and cfg.zero == 3:      # torchtitan: async TP, not userbuffers
        if getattr(spec.training, "kernels", "fused") == "eager":
            # the pass is Inductor's: torchtitan refuses async TP without compile (parallelize_llama.py, 9dec370a:
            # "Async TP requires --training.compile"), and DTensor's eager collectives all wait
            return 0.0, 0.0
        tr, c = cpar.shard_view(spec.training, cfg)
        return async_tp_saving(parts_of(spec.model, spec.cluster, tr, c), costs.compute,
                               spec.cluster.gpu.peak_flops(activation_precision(spec.training.precision)), cfg.tp,
                               tr.seq_length * c.micro_batch_size * spec.model.hidden_size,
                               tp_gather_bytes(tr, c), spec.model.gated_mlp,
                               out_bytes=BYTES[activation_precision(tr.precision)])
    if ov.tp_comm and cfg.sequence_parallel:
        p = parts_of(spec.model, spec.cluster, *cpar.shard_view(spec.training, cfg))
        comm, gemm = p["tp_comm"], p["gemm"]
        r = getattr(costs.compute, "backward_ratio", 2.0)
        # the GEMMs' 16-bit (fp32: their own) peak, whose curve layer_parts charges; fp8 GEMMs keep its fixed part
        peak = spec.cluster.gpu.peak_flops(activation_precision(spec.training.precision))
        of, ob = userbuffers_overhead_s(costs.compute, peak, cfg.tp)
        return (float(comm - exposed_s(comm, gemm, cfg.tp) - of), float(comm - exposed_s(comm, r * gemm, cfg.tp) - ob))
    if ov.tp_backward and cfg.zero != 3:
        # Megatron's LinearWithGradAccumulationAndAsyncCommunication; torchtitan's DTensor backward has no counterpart:
        # the input gradient's reduce-scatter is issued after the mm backward (dgrad and wgrad in one autograd node)
        # and waited at its first use (the published-recipe rows state tp_backward_overlap false for torchtitan)
        return 0.0, tp_backward_saving(parts_of(spec.model, spec.cluster, *cpar.shard_view(spec.training, cfg)),
                                       cfg.sequence_parallel)
    if cfg.sequence_parallel and cfg.zero != 3:
        # the other collectives wait, but the input re-gather still runs under the dgrad GEMM (Megatron issues it
        # async whatever the flag: the exposed part beyond it is an added cost)
        return 0.0, -tp_regather_exposed(parts_of(spec.model, spec.cluster, *cpar.shard_view(spec.training, cfg)))
    return 0.0, 0.0


# Transformer Engine's default userbuffers methods per GEMM (NVIDIA/TransformerEngine@d0067d0d
# transformer_engine/pytorch/module/base.py, initialize_ub; the same lists and split counts at 67b67432, July 2024):
# "ring_exchange" (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad) runs the GEMM as tp chunks, one per exchanged
# piece; "pipeline" (proj_fprop, fc2_fprop) as UB_PIPELINE_SPLITS chunks; "bulk" (qkv/fc1 dgrad and wgrad) and the
# proj/fc2 wgrads do not split their GEMM. Recipes may override them per shape (Megatron-Bridge comm_overlap.py).
UB_RING_EXCHANGE_FWD = 2          # qkv_fprop, fc1_fprop
UB_PIPELINE_FWD = 2               # proj_fprop, fc2_fprop
UB_RING_EXCHANGE_BWD = 2          # proj_dgrad, fc2_dgrad
UB_PIPELINE_SPLITS = 4


def userbuffers_overhead_s(compute, peak_bf16: float, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds per layer that TE's userbuffers overlap adds by splitting GEMMs into chunks:
    each extra chunk pays the GEMM curve's fixed part again (ComputeModel.gemm_fixed_s; fp8 GEMMs keep that part's
    bf16 time, fp8_gemm_time). Not charged: the SMs the pipeline / bulk methods' communication kernels take
    beside the GEMM (set_sm_margin and num_sm differ between TE versions and recipes)."""
    fixed = getattr(compute, "gemm_fixed_s", None)
    if fixed is None or tp <= 1:
        return 0.0, 0.0
    f = fixed(peak_bf16)
    fwd = UB_RING_EXCHANGE_FWD * (tp - 1) * f + UB_PIPELINE_FWD * (UB_PIPELINE_SPLITS - 1) * f
    return fwd, UB_RING_EXCHANGE_BWD * (tp - 1) * f


# ---- torchtitan's async TP (experimental.enable_async_tensor_parallel, ZeRO-3 plans): Inductor's micro-pipeline TP
# pass (torch/_inductor/fx_passes/micro_pipeline_tp.py) rewrites, in each compiled TransformerBlock's forward and
# backward graphs, an all-gather whose result feeds matmuls into symm_mem.fused_all_gather_(scaled_)matmul and a
# reduce-scatter of one matmul's output into symm_mem.fused_(scaled_)matmul_reduce_scatter
# (torch/distributed/_symmetric_memory/__init__.py). docs/notes/fsdp.md, "torchtitan's async TP, read from the source".
ASYNC_TP_QKV_MATMULS = 3      # torchtitan's wq, wk, wv: three nn.Linear, each its own matmul in the fused op


def async_tp_exposed_s(comm, gemm, tp: int):
    """Exposed seconds of one collective of `comm` seconds fused with matmuls of `gemm` seconds over tp ranks.

    _pipelined_all_gather_and_consume: the local shard's GEMM chunk runs first, then remote shard k is copied from a
    peer's symmetric buffer (a copy-engine memcpy) and its chunk computed, on two alternating streams, so copy k + 1
    overlaps chunk k and the last chunk follows the last copy. _pipelined_produce_and_all2all (matmul +
    reduce-scatter) mirrors it: the chunk for remote rank k is computed and pulled while chunk k + 1 is computed, the
    local chunk last. Either way the tp - 1 copies hide behind tp - 1 of the tp chunks: exposed
    max(0, comm - gemm (tp - 1) / tp), whether each copy is shorter than its chunk (then 0) or longer (then tp - 1
    copies and one chunk). The copies are charged the collective's time (the copy engines' pull at the bandwidth
    the collective reaches: not measured here)."""
    return max(0.0, comm - gemm * (tp - 1) / tp)


def async_tp_overhead_s(compute, peak_bf16: float, tp: int, act_elements: float, gather_bytes: float,
                        ffn_in_matmuls: int, *, out_bytes: float) -> tuple[float, float]:
    """(forward, backward) seconds per layer that the fused ops add (torch/distributed/_symmetric_memory/__init__.py):
    - each fused matmul runs as tp chunks of M / tp rows: tp - 1 more GEMM fixed parts per matmul
      (ComputeModel.gemm_fixed_s, as userbuffers_overhead_s): forward QKV (3), proj, FFN input (w1, w3), fc2;
      backward the two output-gradient all-gathers' dgrad GEMMs (proj, fc2);
    - fused_matmul_reduce_scatter writes every rank's partial chunk into stacked_partials (M x N, the output dtype)
      and sums them in one kernel (reduce_fn over the group dim): it reads M x N and writes M / tp x N, out_bytes
      each (the plan's activation element size: bf16 for bf16 and fp8 plans, 4 for fp32), where NCCL's
      reduce-scatter reduces inside its own kernel: two per forward;
    - fused_all_gather_matmul copies the local shard into its gathered output (chunks[rank].copy_(shard)) on the
      compute stream: a read and a write of the shard, each all-gather (two forward, two backward).
    act_elements: M x h, the gathered activation of one micro-batch (tokens x hidden) on one rank.
    Not charged: the copy into the local symmetric buffer (on the side stream, beside the first chunk), the barriers,
    and any restride copy Inductor does not fold into the producer (force_stride_order)."""
    fixed = getattr(compute, "gemm_fixed_s", None)
    hbm = getattr(compute, "hbm_GBps", None)
    if fixed is None or hbm is None or tp <= 1:
        return 0.0, 0.0
    f = fixed(peak_bf16)
    bw = hbm * 1e9
    reduce = act_elements * out_bytes * (1 + 1 / tp) / bw
    local_copy = 2 * act_elements / tp * gather_bytes / bw
    fwd = (ASYNC_TP_QKV_MATMULS + 1 + ffn_in_matmuls + 1) * (tp - 1) * f + 2 * reduce + 2 * local_copy
    bwd = 2 * (tp - 1) * f + 2 * local_copy
    return fwd, bwd


def async_tp_saving(parts: dict, compute, peak_bf16: float, tp: int, act_elements: float, gather_bytes: float,
                    gated_mlp: bool, *, out_bytes: float) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's tensor-parallel collectives async TP hides, less what its fused ops
    add (async_tp_overhead_s). Which collectives the pass fuses with torchtitan's layout (sequence parallel on dim 1,
    pytorch/torchtitan@9dec370a torchtitan/parallelisms/parallelize_llama.py apply_tp):
    - forward, all four: the attention input's all-gather with wq / wk / wv, the FFN input's with w1 / w3 (gather_dim
      1 is matched by the split + cat pattern; with Float8 the uint8 view pattern and fused_all_gather_scaled_matmul
      over _scaled_mm), and the reduce-scatters of wo's and w2's outputs, each the output of one (reshape -> mm ->
      reshape) matmul with one user;
    - full recompute: the recomputed forward sits in the backward graph, which the pass also rewrites: the same four
      (stage_times credits the recompute with the forward's saving);
    - backward, two of four: the output-gradient all-gathers before wo's and w2's dgrad GEMMs (the gathered gradient
      is the lhs of a reshape -> mm -> reshape; the wgrad reads it transposed and is not fused). The reduce-scatters of
      the column-parallel layers' input gradients are not: their input is the sum of three (wq, wk, wv) or two
      (w1, w3) dgrad matmuls, and fuse_matmul_reduce_scatter needs a matmul as the producer. They stay exposed.
    Backward dgrad GEMMs take backward_ratio / 2 of their forward GEMM's time (the compute model's split)."""
    ag, rs = parts["tp_gather"], parts["tp_scatter"]       # ComputeModel.layer_parts, the only source, has both
    (qkv, fc1), (proj, fc2) = parts["gemm_column"], parts["gemm_row"]
    half_r = getattr(compute, "backward_ratio", 2.0) / 2
    fwd = sum(c - async_tp_exposed_s(c, g, tp) for c, g in ((ag, qkv), (rs, proj), (ag, fc1), (rs, fc2)))
    bwd = sum(ag - async_tp_exposed_s(ag, half_r * g, tp) for g in (proj, fc2))
    of, ob = async_tp_overhead_s(compute, peak_bf16, tp, act_elements, gather_bytes, 2 if gated_mlp else 1,
                                 out_bytes=out_bytes)
    return fwd - of, bwd - ob


def tp_backward_saving(parts: dict, sequence_parallel: bool) -> float:
    """Seconds of one layer's backward collectives hidden by Megatron's asynchronous column-parallel backward
    (Megatron-LM@80389ef6 megatron/mpu/layers.py, LinearWithGradAccumulationAndAsyncCommunication.backward, the code
    of Korthikanti et al. 2022; on by default, arguments.py --no-async-tensor-model-parallel-allreduce).

    The compute model charges the backward two all-reduces of the layer's activations per layer (parts["tp_comm"]),
    one per column-parallel GEMM (QKV, fc1). Without sequence parallelism each is issued before that layer's
    weight-gradient GEMM and waited for after it: exposed max(0, AR - wgrad). With sequence parallelism the backward
    runs an all-gather of the output gradient before each row-parallel GEMM (proj, fc2: exposed, half an all-reduce
    each) and, in each column-parallel GEMM, an all-gather of the saved input during the input-gradient GEMM and a
    reduce-scatter of the input gradient during the weight-gradient GEMM (half an all-reduce each, exposed only
    beyond their GEMM). The wgrad / dgrad GEMMs have the forward GEMM's FLOPs (parts["gemm_column"]).

    The re-gather is the backward's third pair of collectives beyond the two all-reduces' worth the compute model
    charges (Transformer Engine too: layernorm_linear.py / layernorm_mlp.py gather ln_out with async_op=True before
    the dgrad GEMM under sequence parallelism, NVIDIA/TransformerEngine main 2025). Where the column GEMMs are shorter
    than their collectives, the exposed time exceeds what is charged: the saving is then negative (an added cost),
    not zero."""
    ar = parts["tp_comm"] / 2
    cols = parts.get("gemm_column", ())
    if sequence_parallel:
        # the two output-gradient all-gathers (half an all-reduce each) stay exposed; the re-gather under dgrad and
        # the reduce-scatter under wgrad are the same size under GEMMs of the same FLOPs: twice the re-gather's excess
        exposed = ar + 2 * tp_regather_exposed(parts)
    else:
        exposed = sum(max(0.0, ar - g) for g in cols)
    return 2 * ar - exposed if cols else 0.0


def tp_regather_exposed(parts: dict) -> float:
    """Seconds of one layer's sequence-parallel input re-gathers (QKV, fc1; half an all-reduce each) not hidden by
    their input-gradient GEMMs, where the backward's other collectives wait: Megatron-Core issues the re-gather with
    async_op=True before the dgrad GEMM and waits after it (tensor_parallel/layers.py,
    LinearWithGradAccumulationAndAsyncCommunication.backward), TE likewise (layernorm_linear.py). The compute model's
    two all-reduces per layer do not include it."""
    half = parts["tp_comm"] / 4
    return sum(max(0.0, half - g) for g in parts.get("gemm_column", ()))


def stage_times(spec, cfg: ParallelConfig, costs: Costs) -> list:
    """The compute model's StageTimes less the tensor-parallel communication --tp-comm-overlap hides: what the
    estimate (compute_const, build_problem) and the simulator (simulator.replay) both use. With context parallelism:
    the shard view's times plus the attention and exchange the shard view misses (costs.context_parallel); ZeRO-3
    under pipelining: plus FSDP2's fp32 gradient accumulation in every backward (_with_fsdp_accumulation)."""
    st = costs.compute.stage_times(spec.model, spec.cluster, *cpar.shard_view(spec.training, cfg))
    st = cpar.with_cp_times(spec, cfg, costs, st)
    st = _with_fsdp_accumulation(spec, cfg, costs, st)
    sf, sb = tp_overlap_saving(spec, cfg, costs)
    if sf == 0.0 and sb == 0.0:
        return st
    out = []
    for i, s in enumerate(st):
        L = stage_layer_count(spec.model, cfg, i)              # per stage: uneven first / last stages
        R = recomputed_layers(spec.model, cfg, i) if cfg.recompute == "block" else L      # block: N per chunk
        rf = R * sf * RECOMPUTE_TP_SHARE.get(cfg.recompute, 0.0)   # the recomputed forward's collectives, overlap too
        out.append(replace(s, forward=s.forward - L * sf, backward=s.backward - L * sb - rf,
                           recompute=s.recompute - rf, tp_comm=s.tp_comm - L * (sf + sb) - rf))
    return out


def _with_fsdp_accumulation(spec, cfg: ParallelConfig, costs: Costs, st) -> list:
    """ZeRO-3 under PyTorch pipelining (pp > 1): every micro-batch's backward ends with FSDP2's fp32 gradient
    accumulation on the compute stream (fsdp.fsdp_copy_s, its per-micro-batch mean), GPU work after the weight
    gradients: part of the backward and of its W part, so the pipeline carries it on every stage."""
    if cfg.zero != 3 or cfg.pp == 1:
        return st
    out = []
    for i, s in enumerate(st):
        acc = fsdp_copy_s(spec, cfg, costs, i)[1]
        out.append(replace(s, backward=s.backward + acc, weight_grad=s.weight_grad + acc))
    return out


def megatron_bucket_size(bucket_size: int | None, dp_cp: int) -> int:
    """Megatron-Core's DDP bucket in parameters: --ddp-bucket-size (training.overlap.bucket_size), else
    max(40M, 1M x the data-parallel group, dp x cp) (Megatron-LM@d98e8a64 distributed_data_parallel.py)."""
    return bucket_size if bucket_size else max(40_000_000, 1_000_000 * dp_cp)


def dp_bucket_count(spec, cfg: ParallelConfig, params: float, first_chunk_of_stage0: bool) -> int:
    """Gradient buckets of one model chunk's data-parallel buffer (`params` per GPU). Megatron-Core buckets only
    the first chunk of pipeline rank 0 (Megatron-LM@d98e8a64 training.py: bucketing 'disabled for non-first
    chunks ... or for non-zero pipeline-parallel ranks'; distributed_data_parallel.py: 'not on the critical
    path'), at bucket_size = max(40M, 1M x dp) parameters unless --ddp-bucket-size (dp of the data-parallel-with-
    context-parallel group: distributed_data_parallel.py sizes it by dp_group, which is dp_cp_group there); every
    other chunk is one."""
    if not (overlap_of(spec).grad_reduce and first_chunk_of_stage0):
        return 1
    size = megatron_bucket_size(overlap_of(spec).bucket_size, cfg.dp * cfg.cp)
    return max(1, math.ceil(params / size))


def dp_exposed_s(spec, cfg: ParallelConfig, allreduce, hide_b: float, hide_f: float, pieces: int = 1):
    """Exposed data-parallel time of one device, from its gradient all-reduce time `allreduce` (a scalar or an
    array of candidate links: monotone in it, so build_problem can fold it into dp_link).

    Without the distributed optimizer (ZeRO 0): the all-reduce, hidden behind hide_b (the last micro-batch's
    backward) with --overlap-grad-reduce. With it (ZeRO >= 1): a reduce-scatter and an all-gather of half the
    all-reduce each (a ring all-reduce is exactly the two); the reduce-scatter hides behind hide_b
    (--overlap-grad-reduce), the all-gather behind hide_f, the next iteration's first forward
    (--overlap-param-gather). Everything off: the whole sync (dp_sync_s). The all-gather moves the parameters, not
    the gradients: param_gather_ratio of the reduce-scatter half."""
    ov = overlap_of(spec)
    if not ov.grad_reduce:
        return dp_sync_s(spec, cfg, allreduce)
    if cfg.zero < 1:
        return exposed_s(allreduce, hide_b, pieces)
    half = allreduce / 2
    gather = half * param_gather_ratio(spec, cfg)
    ag = exposed_s(gather, hide_f, pieces) if ov.param_gather else gather
    return exposed_s(half, hide_b, pieces) + ag


def param_gather_ratio(spec, cfg: ParallelConfig | None = None) -> float:
    """Bytes the distributed optimizer's parameter all-gather moves per element, over those its gradient
    reduce-scatter moves (grad_bytes): Megatron-Core all-gathers bucket.param_data, the parameters in their own dtype
    (NVIDIA/Megatron-LM@d98e8a64 megatron/core/distributed/param_and_grad_buffer.py start_param_sync,
    all_gather_into_tensor; param_data is allocated in param_dtype), and reduces the gradient buffer. So with
    16-bit weights and grad_reduce_in_fp32 the all-gather is half the reduce-scatter (2 / 4), else equal. With
    training.fp8_param_gather (fp8 plans) the TE GEMM weights are stored quantized, `param_dtype = torch.uint8`
    (same file, _param_uses_quantized_storage), so they move 1 byte and the rest (embedding, output layer, norms) 2:
    the model's share of GEMM weights (memory.fp8_gemm_weights over its stages; with cfg), one figure for every stage
    (the embedding's stages gather a little more)."""
    tr = spec.training
    wb = weight_bytes(tr)
    if tr.precision == "fp8" and getattr(tr, "fp8_param_gather", False) and cfg is not None:
        from planner.costs.memory import fp8_gemm_weights
        gemm = sum(fp8_gemm_weights(spec.model, cfg, st) for st in range(cfg.pp)) * cfg.tp
        wb -= min(1.0, gemm / max(spec.model.num_params(), 1))
    return wb / grad_reduce_bytes(tr)


def dp_sync_s(spec, cfg: ParallelConfig, allreduce):
    """The whole data-parallel sync of one device, nothing hidden, from its gradient all-reduce time: the all-reduce
    (ZeRO 0), or its reduce-scatter half plus the parameter all-gather (ZeRO 1-2, param_gather_ratio). Exactly
    `allreduce` when the ratio is 1."""
    if cfg.zero < 1:
        return allreduce
    half = allreduce / 2
    return half + half * param_gather_ratio(spec, cfg)


def dp_hide_s(st, cfg: ParallelConfig, split: bool) -> tuple[float, float]:
    """(backward, forward) one micro-batch of a device computes while its gradients (its parameters) are
    reduced (gathered): the B op's time less recompute (W when the schedule splits it), and the F op's."""
    b = st.weight_grad if split else st.backward - (st.recompute if cfg.recompute != "none" else 0.0)
    return max(b, 0.0), st.forward


def interleaved_chunk_times(spec, cfg: ParallelConfig, st) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) (p, v) of each model chunk of an interleaved plan, as the replay places the StageTimes
    (pipeline.place_chunk_times: uneven first / last stages by their layers, block recompute by its re-run layers of
    each chunk, N per chunk as Megatron-Core's --recompute-method block); backward with recompute."""
    L = spec.model.num_layers
    layers = np.array(cfg.chunk_layers(L), float) if cfg.uneven else None
    rc_layers = (np.array(cfg.recomputed_chunk_layers(L), float)
                 if cfg.recompute == "block" and any(s.recompute > 0 for s in st) else None)
    arr = [[s.forward, s.backward, s.weight_grad, s.recompute] for s in st]
    per = place_chunk_times(arr, cfg.vpp, (cfg.pp - 1, cfg.vpp - 1), layers, rc_layers)
    return per[..., 0], per[..., 1]


def compute_const(spec, cfg: ParallelConfig, costs: Costs, st=None) -> float:
    """Compute part of the iteration (bubbles included): mapping-independent, so with the same value in
    every MappingProblem of the config it is a valid lower bound for any of its mappings.
    Steady state at the slowest stage, fill and drain at each stage's own time (stage_compute_time)."""
    st = st or stage_times(spec, cfg, costs)
    if cfg.schedule == "interleaved" and cfg.pp > 1 and cfg.num_microbatches % cfg.pp == 0:   # Megatron-Core's order
        comp = interleaved_time(*interleaved_chunk_times(spec, cfg, st), cfg.num_microbatches)
        return comp + max(getattr(s, "step", 0.0) for s in st)
    # ZeRO-3 plans are torchtitan's: PyTorch pipelining's orders (its V-ZB differs: pytorch); the V-shapes walked
    comp = stage_compute_time(
        cfg.schedule, cfg.pp, cfg.num_microbatches, cfg.vpp, [s.forward for s in st], [s.backward for s in st],
        [s.weight_grad for s in st], pytorch=cfg.zero == 3, model=v_builder_model(spec))
    # once per iteration: optimizer step and fixed overheads (the slowest stage's); mapping-independent
    return comp + max(getattr(s, "step", 0.0) for s in st)


# ---- communication terms of one iteration. build_problem evaluates them on every candidate link at once
# (matrices), the simulator on the mapped links one by one: one definition, the same float operations in
# the same order, so the estimate and the simulation agree to the bit on the same plan.

def p2p_scatter_gather(training) -> bool:
    """Whether a stage's output is split over the tensor group for its p2p send when sequence parallelism does not
    split it already: training.p2p_scatter_gather, or, left out, the engine's own behaviour (Megatron-Core: no;
    DeepSpeed's PipelineEngine: yes, pipe_partitioned)."""
    v = getattr(training, "p2p_scatter_gather", None)
    if v is None:
        return getattr(training, "pipeline_engine", "megatron") == "deepspeed"
    return bool(v)


def p2p_message_bytes(spec, cfg: ParallelConfig) -> float:
    """One micro-batch's activations (or their gradient) that each GPU sends to the adjacent stage: the
    [s/cp, b, h] tensor, each context-parallel rank its own shard; split over the tensor group only with sequence
    parallelism (Megatron-Core's get_tensor_shapes, NVIDIA/Megatron-LM@d98e8a64 megatron/core/pipeline_parallel/
    schedules.py) or with the scatter-gather of Megatron-LM 2021-22 / DeepSpeed's engine (p2p_scatter_gather).
    The estimate and the simulator both call it."""
    tr, model = spec.training, spec.model
    split = cfg.tp if cfg.sequence_parallel or p2p_scatter_gather(tr) else 1
    return tr.seq_length * cfg.micro_batch_size * model.hidden_size * BYTES[tr.precision] / (split * cfg.cp)


def p2p_share(spec, cfg: ParallelConfig, replicas_per_node: int) -> float:
    """Share of a rail each sender gets: the node's replicas of a stage, each with its tensor and context-parallel
    group, send at once (all the node's GPUs when a tp x cp group spans nodes)."""
    return spec.cluster.rail_share(min(replicas_per_node * cfg.tp * cfg.cp, spec.cluster.gpus_per_node))


def p2p_intra_s(spec, msg: float, costs: Costs) -> float:
    """One-way p2p time of a hop inside a node (NVLink)."""
    cl = spec.cluster
    return p2p_time(msg, cl.intra.bandwidth_GBps * costs.comm.intra_efficiency, cl.intra.latency_us)


def p2p_inter_s(spec, msg: float, bw_GBps, costs: Costs, share: float):
    """One-way p2p time of a hop between nodes over links of bw_GBps per rail (a scalar or a matrix)."""
    return spec.cluster.inter.latency_us * 1e-6 + msg / (bw_GBps * 1e9 * costs.comm.inter_efficiency * share)


def dp_allreduce_s(spec, cfg: ParallelConfig, costs: Costs, params: float, replicas_per_node: int, nodes: int,
                   pair_GBps=None):
    """Gradient all-reduce of one data-parallel ring: `params` per GPU, `replicas_per_node` replicas in each
    of `nodes` nodes, limited by pair_GBps, the ring's slowest inter-node link (a scalar or a matrix of
    candidate links; used only when the ring leaves the node). CommModel.dp_allreduce_time has the formula.
    Megatron-Core reduces over the data-parallel-with-context-parallel group: each replica brings its cp ranks (the
    same parameters), so a node holds replicas_per_node * cp GPUs of each ring."""
    nbytes = params * grad_bytes(spec, costs)
    per, nodes, span = cpar.dp_ring(spec, cfg, replicas_per_node, nodes)
    return costs.comm.dp_allreduce_time(nbytes, per, nodes, cfg.tp, spec.cluster,
                                        cpar.ring_pair(pair_GBps, nodes, span))


def grad_bytes(spec, costs: Costs) -> float:
    """Bytes per gradient element the data-parallel reduction and the tied-embedding all-reduce move: the plan's
    gradient dtype (memory.grad_reduce_bytes, the rule Megatron-Core's gradient buffer follows too: 4 for fp32 plans or
    with training.grad_reduce_in_fp32, else 2). The compute profile's `grad_bytes` stays only where no plan is known
    (CommModel.tied_embedding_bytes' default)."""
    return grad_reduce_bytes(spec.training)


def ring_slowest_GBps(bandwidth: np.ndarray, ring: list[int]) -> float:
    """Slowest link (either direction) of NCCL's ring through the distinct nodes `ring` in rank order, each
    linked to the next and the last to the first (connectRings); inf for a single node."""
    K = len(ring)
    pair = np.inf
    if K > 1:
        for k in range(K if K > 2 else 1):
            x, y = ring[k], ring[(k + 1) % K]
            pair = min(pair, bandwidth[x, y], bandwidth[y, x])
    return pair


def tied_embedding_reduced(model, cfg: ParallelConfig) -> bool:
    """Tied embeddings (GPT): after the DP sync, each column's first- and last-stage GPUs all-reduce the word
    embedding's gradient (Megatron's _allreduce_embedding_grads, DeepSpeed's _exec_reduce_tied_grads).
    V-shapes keep both ends on device 0: nothing to reduce."""
    return bool(model.tied_embeddings) and cfg.pp > 1 and cfg.schedule not in V_SHAPES


def tied_embedding_intra_s(spec, cfg: ParallelConfig, costs: Costs) -> float:
    """The tied-embedding all-reduce when both ends share a node: NVLink."""
    ebytes = costs.comm.tied_embedding_bytes(spec.model, cfg.tp, grad_bytes(spec, costs))
    return costs.comm.intra_allreduce_time(ebytes, 2, spec.cluster)


def tied_embedding_inter_s(spec, cfg: ParallelConfig, costs: Costs, pair_GBps, share: float):
    """The tied-embedding all-reduce between two nodes joined by pair_GBps per rail (a scalar or a matrix)."""
    ebytes = costs.comm.tied_embedding_bytes(spec.model, cfg.tp, grad_bytes(spec, costs))
    return ring_allreduce_time(ebytes, 2, pair_GBps * costs.comm.inter_efficiency * share,
                               spec.cluster.inter.latency_us)


def p2p_blocking(spec, cfg: ParallelConfig) -> bool:
    """Megatron's interleaved schedule without overlap_p2p_comm: every send / receive batch is waited on before
    the next chunk computes, so the sender is held for the transfer (the simulator's blocking p2p). Megatron-Core
    ignores overlap_p2p_comm for the other schedules (arguments.py forces it off): the simulator replays 1F1B with
    its waited calls whatever the flag (simulator/mcore.py), the rest with sends overlapping compute."""
    return (cfg.schedule == "interleaved" and cfg.pp > 1 and spec.training.pipeline_engine == "megatron"
            and not overlap_of(spec).p2p)


def p2p_exposed_hops(spec, cfg: ParallelConfig, lock_step: tuple | None = None) -> tuple[float, float]:
    """(traversals, wrap-around hops) per micro-batch whose time the schedule exposes, charged (m/pp) times on the
    path (schedules.p2p_hops); without lock_step, interleaved with blocking p2p (p2p_blocking): each device holds
    about 2v - 1 one-way transfers per micro-batch (the last device sends v - 1 forward, the first v - 1 backward)
    plus a ramp of about 2(pp - 1), i.e. v - 1/2 + (pp - 1)/m traversals and wraps (-14% .. +4% of the exposed p2p
    time on uniform stages; docs/notes/simulator.md, tests/test_overlap.py). With lock_step = (stage
    times, one-way inter-node hop matrix, NVLink hop, node rows), the schedules whose exposed hops depend on the
    stages' slack are charged their closed form at the plan's typical hop (typical_hop_traversals): Megatron-Core's
    1F1B (waited_lock_step: pipeline.lock_step_p2p_s; build_problem asks for it on one node row only, elsewhere the
    lock step is charged on the mapped hops, MappingProblem.pace), ZB-H1 and the walked V-shapes (V-Min, V-Half,
    torchtitan's V-ZB, the seed's V-ZB where vwalk.vzb_walked): their orders walked with the typical hop and without
    (vwalk.v_walk_p2p_s), and DeepSpeed's engine (training.pipeline_engine) its replay's streams walked likewise
    (lockstep.deepspeed_time); without lock_step, one traversal, two, 1.5, 3 and 2.5 (pipeline.p2p_hops; the seed's V-ZB
    beyond its walk too). Interleaved (Megatron-Core's order, with or without overlap_p2p_comm): its order run with
    and without hops on the plan's chunk times (pipeline.interleaved_time), the wrap hop included, the same
    traversals charged on the path and the wrap; the ramp-only count (v and v - 1 traversals p/m per micro-batch,
    sends overlapping) missed a hop longer than a chunk's forward, which the steady state no longer hides (-14% on
    the iteration, the fuzz of valid plans' case 678 of seed 2), and the blocking count v - 1/2 + (pp - 1)/m was
    -14 .. +4%."""
    m = cfg.num_microbatches
    if lock_step is not None and spec.training.pipeline_engine == "deepspeed" and cfg.pp > 1:
        # DeepSpeed's rendezvous walked with each boundary's typical hop and without (lockstep.deepspeed_time): its
        # closed form charged the busiest stage's four transfers a micro-batch on top of the slowest stage's compute,
        # where a heavier stage's pace hides them (+9.4%: the fuzz of valid plans, seed 8 case 304)
        return typical_hop_traversals(cfg, *lock_step, lambda st, c: deepspeed_time(
            [s.forward for s in st], [s.backward for s in st], m, c)
            - deepspeed_time([s.forward for s in st], [s.backward for s in st], m), per_boundary=True), 0.0
    if lock_step is not None and waited_lock_step(spec, cfg):
        return typical_hop_traversals(cfg, *lock_step, lambda st, c: lock_step_p2p_s(
            [s.forward + s.backward for s in st], c, m), per_boundary=True), 0.0
    if lock_step is not None and cfg.schedule == "zb-h1" and cfg.pp > 1:
        # its order walked with each boundary's typical hop and without (the closed form it replaces was -22% with
        # hops near a forward: the fuzz of valid plans, seed 4 case 609); per boundary, not their mean: two or more
        # stages a node alternate NVLink and network hops, and a network hop past a stage's slack binds where the
        # mean's does not (-2.1% at pp 32 on 16 nodes: seed 6 case 682)
        return typical_hop_traversals(cfg, *lock_step, lambda st, c: v_walk_p2p_s(
            "zb-h1", [s.forward for s in st], [s.backward for s in st], [s.weight_grad for s in st], m, tuple(c)),
            per_boundary=True), 0.0
    beyond = lock_step is not None and vzb_hops_beyond(cfg, *lock_step)
    if lock_step is not None and (v_walked(cfg) or beyond):
        # a V's order walked with the typical hop and without (its exposed hops, whatever the schedule's slack); the
        # seed's V-ZB beyond its walk too where its hops are past the closed form's fit (vzb_hops_beyond)
        return typical_hop_traversals(cfg, *lock_step, lambda st, c: v_walk_p2p_s(
            cfg.schedule, [s.forward for s in st], [s.backward for s in st], [s.weight_grad for s in st], m, c,
            pytorch_zbv(cfg), v_builder_model(spec), beyond)), 0.0
    if lock_step is not None and cfg.schedule == "interleaved" and cfg.pp > 1 and m % cfg.pp == 0:
        fc, bc = interleaved_chunk_times(spec, cfg, lock_step[0])
        blocking = p2p_blocking(spec, cfg)
        x = typical_hop_traversals(cfg, *lock_step, lambda st, c: interleaved_time(fc, bc, m, c, blocking)
                                   - interleaved_time(fc, bc, m, 0.0, blocking), per_boundary=True, wrap=True)
        return x, x
    if p2p_blocking(spec, cfg):
        x = cfg.vpp - 0.5 + (cfg.pp - 1) / m
        return x, x
    return p2p_hops(cfg.schedule, cfg.pp, cfg.vpp, m, spec.training.pipeline_engine)


def vzb_hops_beyond(cfg: ParallelConfig, st, one_way: np.ndarray, intra_s: float, rows: int) -> bool:
    """The seed's V-ZB beyond its walk whose hops are walked all the same (vwalk.vzb_hops_walked): the plan's typical
    one-way hop (typical_hop_traversals' mean over the boundaries) against the fastest device's forward."""
    if cfg.schedule != "v-zb" or pytorch_zbv(cfg) or cfg.pp < 2:
        return False
    cs = typical_boundary_hops(cfg.pp, rows, typical_inter_hop(one_way, intra_s), intra_s)
    return vzb_hops_walked(cfg.pp, cfg.num_microbatches, sum(cs) / len(cs), min(s.forward for s in st))


def pytorch_zbv(cfg: ParallelConfig) -> bool:
    """torchtitan's V-ZB: ZeRO-3 plans run PyTorch pipelining's ScheduleZBVZeroBubble (pipeline.pytorch_zbv_order),
    the simulator's rule (replay: build(..., pytorch=cfg.zero == 3)); the seed's V-ZB (ZeRO 0-2) builds its own."""
    return cfg.schedule == "v-zb" and cfg.zero == 3


def waited_lock_step(spec, cfg: ParallelConfig) -> bool:
    """1F1B whose every p2p call waits for its peer: the megatron engine's 1F1B with pp > 1, Megatron-Core's and, for
    ZeRO-3 plans, PyTorch pipelining's Schedule1F1B (its steady state waits on fused send / receive batches as
    Megatron-Core's calls do; its warm-up and cool-down sends are waited one op later: charged as Megatron-Core's, an
    upper bound); the simulator's rule (simulator.replay._mcore_lock_step)."""
    return spec.training.pipeline_engine == "megatron" and cfg.schedule == "1f1b" and cfg.pp > 1


def typical_hop_traversals(cfg: ParallelConfig, st, one_way: np.ndarray, intra_s: float, rows: int,
                           added_s, per_boundary: bool = False, wrap: bool = False) -> float:
    """The traversals per micro-batch (charged m / pp times on the path, as p2p_exposed_hops') that make the path
    cost added_s(st, c) at the plan's typical one-way hop c: the median inter-node one-way time of the candidate
    links for the rows - 1 boundaries between nodes, NVLink's for the others. A constant of the plan (the mapping
    scales it by its own hops), so exact on equal links. Used for the schedules whose exposed hops depend on the
    stages' slack: Megatron-Core's 1F1B lock step (it was one traversal, 2 (pp - 1) / pp transfers per micro-batch
    whatever the slack) and ZB-H1 (two traversals), docs/notes/simulator.md. per_boundary (the lock step): c is
    the list of each boundary's typical hop, the network's where stage j + 1 starts a row of the layout (pp / rows
    stages a row), NVLink's elsewhere; their mean stood for both and, with several stages a node, charged every
    stage the mean of one NVLink and one network hop twice where the lock step's interior stages each have one of
    each (pp 32 on 16 nodes: +3 .. +5% over the replay, the fuzz of valid plans). wrap (interleaved): the wrap-around
    hop, last device to device 0, is one more boundary (the network's between rows, else NVLink's), charged the same
    traversals on the wrap."""
    pp, m = cfg.pp, cfg.num_microbatches
    cs = typical_boundary_hops(pp, rows, typical_inter_hop(one_way, intra_s), intra_s, wrap)
    c = sum(cs) / len(cs)
    if not c > 0:
        return 1.0
    return added_s(st, cs if per_boundary else c) / (m / pp * len(cs) * 2 * c)


def first_chunk_params(model, cfg: ParallelConfig) -> float:
    """Parameters per GPU of pipeline rank 0's first model chunk (its layers and the embedding): the one
    Megatron-Core buckets."""
    first = cfg.chunk_layers(model.num_layers)[0][0] if cfg.uneven else (model.num_layers // cfg.pp) / cfg.chunks
    return first * model.layer_params() / cfg.tp + model.embedding_params() / cfg.tp


def fsdp_exposed_parts(spec, cfg: ParallelConfig, costs: Costs, st, stage: int, b: int, K: int, pair_GBps=None):
    """ZeRO-3 (FSDP2 as torchtitan runs it): exposed seconds of one device of `stage`, as (per micro-batch forward, per
    micro-batch backward, once per iteration); scalars or arrays over candidate links (monotone in the link time).

    FSDP2 prefetches the next unit's all-gather while the current unit computes (implicit prefetch in forward, and in
    backward in reverse order), each unit one piece of exposed_s over the stage's F (B) time of one micro-batch.
    - pp = 1 (reshard after forward): every micro-batch gathers in forward, gathers again in backward and
      reduce-scatters (+ HSDP's replicate all-reduce), torchtitan's gradient accumulation syncing each one;
    - pp > 1 (no reshard after forward; gradient sync only on the last micro-batch): one gather before the first
      forward, hidden behind one micro-batch's F, and one reduce-scatter (+ all-reduce) of every unit, exposed: PyTorch
      pipelining's stage issues them only after its last backward has returned (torch.distributed.pipelining stage.py
      backward_maybe_with_nosync, run_post_backward: post_backward of each FSDP param group in turn), and the
      optimizer step waits for them; stage 0, whose last backward ends the schedule, has no compute left to hide them.
    The overlap flags of training.overlap are Megatron-Core's and do not apply: FSDP2 always overlaps. FSDP2's own
    copies (the gathered buffer's copy-out, the reduce-scatter's fp32 copy-in; fsdp.fsdp_copy_s) run on the compute
    stream and are added in the same slots, so this data-parallel time holds that GPU work too; with pp > 1 the fp32
    gradient accumulation of every backward is compute-stream work of each micro-batch, in stage_times instead."""
    units = fsdp_units(spec.model, cfg, stage)
    gathered = fsdp_gather_bytes(spec.model, spec.training, cfg, stage)
    ag, rs, rep = fsdp_collectives(spec, cfg, costs, sum(units), b, K, pair_GBps,
                                   None if gathered is None else sum(gathered))
    n = len(units)
    hb, hf = max(st[stage].backward, 0.0), max(st[stage].forward, 0.0)
    # FSDP2's copy-out and reduce-scatter copy-in run on the compute stream: added, never hidden (costs/fsdp.py)
    cf, cb, ci = fsdp_copy_s(spec, cfg, costs, stage)
    if cfg.pp == 1:
        return exposed_s(ag, hf, n) + cf, exposed_s(ag + rs + rep, hb, n) + cb, 0.0 * ag
    return 0.0 * ag, 0.0 * ag, exposed_s(ag, hf, n) + rs + rep + ci      # cb: in stage_times' backward


def fsdp_exposed_s(spec, cfg: ParallelConfig, costs: Costs, st, stage: int, b: int, K: int, pair_GBps=None):
    """The whole iteration's exposed ZeRO-3 time of one device of `stage` (fsdp_exposed_parts)."""
    f, bw, it = fsdp_exposed_parts(spec, cfg, costs, st, stage, b, K, pair_GBps)
    return cfg.num_microbatches * (f + bw) + it


def dp_row_s(spec, cfg: ParallelConfig, costs: Costs, st, stages, b: int, K: int, pair_GBps=None, lead_hops=None):
    """Data-parallel time of one row of blocks (its `stages`), per candidate link when pair_GBps is a matrix.

    No overlap: the whole sync of the row's largest stage (dp_sync_s of its dp_allreduce_s). With --overlap-grad-reduce:
    each stage's exposed part (dp_exposed_s), behind that stage's own backward / forward of one micro-batch (dp_hide_s),
    with its gradient buckets: the device's chunks count as equal pieces over the whole backward (v chunks; rank 0's
    first chunk in its buckets), which the simulator, replaying each chunk's own last backward, can only beat; device 0
    of a V-shape, whose last stage's gradients are ready long before its end, by v_first_device_dp_s. V-shapes whose
    order the estimate times (v_timeline_of): every device from its chunks' own ready times (v_timeline_dp_s).
    The worst stage of the row counts. Monotone in the link time, so the mapping models keep their structure.
    lead_hops: the interleaved order's hops for its chunks' sync leads (sync_lead_hops; none: zero)."""
    model = spec.model
    if cfg.zero == 3:
        out = None
        for s in stages:
            e = fsdp_exposed_s(spec, cfg, costs, st, s, b, K, pair_GBps)
            out = e if out is None else np.maximum(out, e)
        return out
    tl = v_timeline_of(spec, st, cfg)
    if tl is not None:
        out = None
        for s in stages:
            e = v_timeline_dp_s(spec, cfg, costs, tl, s, b, K, pair_GBps)
            out = e if out is None else np.maximum(out, e)
        return out
    if not overlap_of(spec).grad_reduce:
        params = max(stage_params(model, cfg, s) for s in stages)
        return dp_sync_s(spec, cfg, dp_allreduce_s(spec, cfg, costs, params, b, K, pair_GBps))
    v = cfg.chunks
    split = cfg.schedule in SPLIT_SCHEDULES and cfg.pp > 1
    out = None
    for s in stages:
        hb, hf = dp_hide_s(st[s], cfg, split)
        if s == 0 and cfg.schedule in V_SHAPES and cfg.pp > 1:
            e = v_first_device_dp_s(spec, cfg, costs, st, hb, hf, b, K, pair_GBps)
            out = e if out is None else np.maximum(out, e)
            continue
        pieces = (v - 1) + dp_bucket_count(spec, cfg, first_chunk_params(model, cfg), True) if s == 0 else v
        if aligned_grad_sync(spec, cfg):
            e = interleaved_dp_exposed_s(spec, cfg, costs, st, s, hb, hf, pieces - (v - 1), b, K, pair_GBps,
                                         lead_hops)
        else:
            T = dp_allreduce_s(spec, cfg, costs, stage_params(model, cfg, s), b, K, pair_GBps)
            e = dp_exposed_s(spec, cfg, T, hb, hf, pieces)
        out = e if out is None else np.maximum(out, e)
    return out


def aligned_grad_sync(spec, cfg: ParallelConfig) -> bool:
    """Megatron-Core's interleaved schedule with --overlap-grad-reduce and --align-grad-reduce (on by default,
    NVIDIA/Megatron-LM@d98e8a64 megatron/training/config/common_config.py; training.py then sets grad_sync_func): each
    chunk's whole gradient sync is launched pipeline_parallel_rank backward steps after its last backward, every
    bucket at once (schedules.py backward_step_helper_postprocess). The replay's _aligned_ready and
    interleaved_dp_exposed_s follow it. ZeRO-3 plans are torchtitan's (FSDP2's own overlap)."""
    return (cfg.schedule == "interleaved" and cfg.pp > 1 and spec.training.pipeline_engine == "megatron"
            and cfg.zero < 3 and overlap_of(spec).grad_reduce)


def interleaved_dp_exposed_s(spec, cfg: ParallelConfig, costs: Costs, st, s: int, hb: float, hf: float, n0: int,
                             b: int, K: int, pair_GBps=None, lead_hops=None):
    """Exposed data-parallel time of a device of `stage` s in Megatron-Core's interleaved schedule under
    --overlap-grad-reduce (scalar or array over links), the chunks' reductions queued on one stream in the order
    their syncs are launched, as the replay (_overlapped_dp) runs them. Megatron-Core launches chunk c's sync s
    backward steps after the chunk's last backward on pipeline rank s (pipeline.aligned_sync_step); the last group of
    pp micro-batches runs its backwards chunk-major, chunk v-1 first (schedules.py, get_model_chunk_id), so chunk 0's
    sync (its n0 buckets included) is launched after the device's last backward, nothing left to hide it. Each chunk's
    lead (launch to the device's end) is its walked order's (pipeline.interleaved_sync_leads on the chunk times the
    replay places, with hops lead_hops, sync_lead_hops: the least the plan's pipelines can have, so the leads are about
    the least the replay's can be): the cool-down's backwards wait on their neighbours across every boundary, and the
    lower bound this replaces (pp backwards of each chunk below c at the least per-layer B, no hops, no recompute) left
    the hops out, up to +7% of the iteration over the replay on V100 links with pp 2 (the fuzz of valid plans: seed 2
    case 283, seed 0 case 321). Without pp | m (an order Megatron-Core refuses, kept for old runs' validation) that
    lower bound stays. With the distributed optimizer the reduce-scatter halves queue and the parameter all-gather
    follows (dp_exposed_s's rule)."""
    model, ov, v, pp, m = spec.model, overlap_of(spec), cfg.chunks, cfg.pp, cfg.num_microbatches
    rc = cfg.recompute != "none"
    layers = (cfg.chunk_layers(model.num_layers) if cfg.uneven
              else [[model.num_layers // pp // v] * v for _ in range(pp)])
    if m % pp == 0:
        fc, bc = interleaved_chunk_times(spec, cfg, st)
        lead = interleaved_sync_leads(fc, bc, m, 0.0 if lead_hops is None else lead_hops, p2p_blocking(spec, cfg))[s]
        ready = [-float(x) for x in lead]
    else:
        # a chunk's B at least its layers at the least per-layer B of any stage (the replay's chunk times); ready pp
        # backwards of each chunk below c before the end, launched s backward steps (of chunk c - 1) later
        unit = max(min((x.backward - (x.recompute if rc else 0.0)) / max(sum(n), 1)
                       for x, n in zip(st, layers, strict=True)), 0.0)
        ready = [0.0] + [-pp * unit * sum(layers[s][:c]) + s * unit * layers[s][c - 1] for c in range(1, v)]
    p0 = first_chunk_params(model, cfg) if s == 0 else layers[s][0] * model.layer_params() / cfg.tp
    t0 = dp_allreduce_s(spec, cfg, costs, p0, b, K, pair_GBps)
    rest = dp_allreduce_s(spec, cfg, costs, (stage_params(model, cfg, s) - p0) / (v - 1), b, K, pair_GBps)
    half = 0.5 if cfg.zero >= 1 else 1.0
    t = None
    for c in sorted(range(1, v), key=lambda c: ready[c]):        # in launch order
        t = (ready[c] if t is None else np.maximum(t, ready[c])) + half * rest
    # chunk 0: launched after the device's last backward, all its buckets at once (aligned_grad_sync)
    e = np.maximum(t, ready[0]) + half * t0
    if cfg.zero >= 1:
        ag = (t0 + (v - 1) * rest) / 2 * param_gather_ratio(spec, cfg)
        e = e + (exposed_s(ag, hf, n0 + v - 1) if ov.param_gather else ag)
    return e


def sync_lead_hops(cfg: ParallelConfig, rows: int, one_way: np.ndarray, intra_s: float) -> list[float] | None:
    """The hops (each boundary's and the wrap's, as interleaved_time takes them) at which build_problem times the
    interleaved chunks' sync leads (interleaved_dp_exposed_s), or None where the walk does not apply: the least one-way
    time of the candidate links on the boundaries between node rows, NVLink's inside a node. A lead grows with the
    hops (the cool-down's backwards wait on them), and the replay launches a chunk's sync when its slowest pipeline
    is ready and ends with its slowest one, so its lead is at least the least of its pipelines' leads, each timed on
    mapped links at least this fast: the data-parallel term stays a constant of the row and at most the replay's lead
    (exact on one node row). Max-plus does not make a lead monotone in the hops: in 400 draws a lead at larger hops was
    shorter in 2 plan-like ones, by at most 0.086 of the least chunk backward (24 random ones, up to 2.3 of it;
    tests/test_interleaved_order.py)."""
    if not (cfg.schedule == "interleaved" and cfg.pp > 1 and cfg.num_microbatches % cfg.pp == 0):
        return None
    off = one_way[~np.eye(len(one_way), dtype=bool)]
    off = off[np.isfinite(off)]
    least = float(off.min()) if off.size else intra_s
    return typical_boundary_hops(cfg.pp, rows, least, intra_s, wrap=True)


def v_last_chunk_lead_s(st, cfg: ParallelConfig) -> float:
    """V-shapes: seconds by which device 0's second chunk (the last stage) has its gradients before device 0's
    last backward ends. Between them the last micro-batch's backward runs through the 2p - 2 stages of the other
    devices and device 0's first chunk (B, then W): (2p - 1) chunk B's and a W on the chain. Charged: (2p - 3) of the
    smallest chunk B (B less W and recompute, no p2p), because the seed's orders may run that chunk's last W up to
    about two chunk B's after its B: on uniform stages the replay's lead is 2(p - 1) chunk B's for V-Half / V-Min,
    (2p - 3) for V-ZB at p = 8, and more at p = 2 (docs/notes/simulator.md). V-ZB with m <= p: (p - 1), since the
    seed's order (zbv.py) then runs that W closer to the end (the replay's lead down to 2p - 3 - 3.6 chunk B's,
    measured at m = p over random ratios, p 2..8), and the estimate must not hide more than the replay does; at
    p < m < 2p the replay's lead is at most 0.55 chunk B under 2p - 3 (random ratios), kept (crediting p - 1 there
    loses more accuracy than it saves)."""
    rc = cfg.recompute != "none"
    bc = min(s.backward - s.weight_grad - (s.recompute if rc else 0.0) for s in st) / cfg.chunks
    n = cfg.pp - 1 if cfg.schedule == "v-zb" and cfg.num_microbatches <= cfg.pp else 2 * cfg.pp - 3
    return max(n, 0) * max(bc, 0.0)


def v_builder_model(spec) -> tuple[int, int, int]:
    """(hidden size, attention heads, sequence length): the seed's V-ZB builder's memory model, as the replay passes it
    (simulator/zbv.py)."""
    return spec.model.hidden_size, spec.model.num_attention_heads, spec.training.seq_length


def v_walked(cfg: ParallelConfig) -> bool:
    """Whether the estimate walks the plan's V-shape order (v_walk_of): every V-Min, V-Half and PyTorch's V-ZB, the
    seed's V-ZB where vwalk.vzb_walked."""
    return cfg.pp > 1 and cfg.schedule in V_SHAPES and (cfg.schedule != "v-zb" or pytorch_zbv(cfg)
                                                        or vzb_walked(cfg.pp, cfg.num_microbatches))


def v_walk_of(spec, st, cfg: ParallelConfig):
    """A V-shape's order walked (costs/vwalk.py v_walk) on the plan's stage times at zero communication: V-Min, V-Half,
    the seed's V-ZB (ZeRO 0-2) where vwalk.vzb_walked, PyTorch's V-ZB (ZeRO-3: torchtitan's); else None."""
    if cfg.pp < 2 or cfg.schedule not in V_SHAPES:
        return None
    return v_walk(cfg.schedule, [s.forward for s in st], [s.backward for s in st], [s.weight_grad for s in st],
                  cfg.num_microbatches, 0.0, pytorch_zbv(cfg), v_builder_model(spec))


def v_timeline_of(spec, st, cfg: ParallelConfig):
    """The walk (v_walk_of) whose timeline the data-parallel term reads (v_timeline_dp_s): ZeRO 0-2 (ZeRO-3's sync is
    FSDP's, fsdp_exposed_s); else None (the fixed leads)."""
    return None if cfg.zero == 3 else v_walk_of(spec, st, cfg)


def v_timeline_dp_s(spec, cfg: ParallelConfig, costs: Costs, tl, s: int, b: int, K: int, pair_GBps=None):
    """Data-parallel time of device s of a V past the pipeline's end (tl.makespan: negative where the device's sync
    ends before it), scalar or array over links, from the order's own timeline tl (v_timeline_of): each chunk's
    gradients are ready at its last W's end, which in a V comes far before the device's end for the chunk of the
    down-stroke (device 0's last stage most: the last micro-batch's backward still runs down the other 2p - 2 stages)
    and, at small m, a device other than 0 can end last. As the replay (_overlapped_dp) runs it: with
    --overlap-grad-reduce the chunks' reductions (the reduce-scatter halves under ZeRO >= 1) queue on one stream in
    the order their gradients are ready, each in its buckets issued over its last W (device 0's first chunk
    dp_bucket_count buckets, every other chunk one), then the all-gather (dp_exposed_s's rule); without, the whole
    sync (dp_sync_s) after the device's last W. Each chunk's all-reduce on its own parameters (replay.chunk_params).
    The fixed leads this replaces (v_last_chunk_lead_s; the row slack of build_problem, s chunk B's) were
    under the order's by up to 4 s on a pp 2 plan (docs/notes/simulator.md). Monotone in the link time."""
    model = spec.model
    if s == 0:
        p0 = first_chunk_params(model, cfg)
        params = (p0, stage_params(model, cfg, 0) - p0)
        n = (dp_bucket_count(spec, cfg, p0, True), 1)
    else:
        params = (stage_params(model, cfg, s) / 2,) * 2
        n = (1, 1)
    red = [dp_allreduce_s(spec, cfg, costs, x, b, K, pair_GBps) for x in params]
    T, ready = tl.makespan, tl.grad_ready[s]
    if not overlap_of(spec).grad_reduce:
        return dp_sync_s(spec, cfg, red[0] + red[1]) - (T - max(ready))
    half = 0.5 if cfg.zero >= 1 else 1.0
    first, second = sorted((0, 1), key=lambda c: ready[c])       # the replay's argsort (stable: chunk 0 on a tie)
    t = ready[first] - T + exposed_s(half * red[first], tl.w_chunk[s][first], n[first]) + half * red[second]
    e = np.maximum(np.maximum(t, ready[second] - T + exposed_s(half * red[second], tl.w_chunk[s][second],
                                                                  n[second])), max(ready) - T)
    if cfg.zero >= 1:
        ag = (red[0] + red[1]) / 2 * param_gather_ratio(spec, cfg)
        e = e + (exposed_s(ag, tl.f_device[s], n[0] + n[1]) if overlap_of(spec).param_gather else ag)
    return e


def dp_row_slack_s(spec, st, cfg: ParallelConfig, first_stage: int, last_stage: int | None = None) -> float:
    """Seconds by which a row's devices (stages first_stage .. last_stage) end their pipeline before its end, the
    data-parallel term's credit (build_problem): first_stage of the smallest chunk backward (each later stage ends its
    last backward that much earlier); none where the row's term is already taken from the V's timeline
    (v_timeline_dp_s). ZB-H1 holds its later stages' W's back to the end (the order runs W(j - d) after B(j)), so they
    end close together, d (B - W) apart on uniform stages, not d B's: the gap to the latest stage end in its walked
    order (vwalk.v_walk's device ends; the 1F1B credit gave a later stage its whole last backward, and the DP ring ran
    past the replay's end: -5.8%, fuzz seed 4 case 8)."""
    if v_timeline_of(spec, st, cfg) is not None:
        return 0.0
    if cfg.schedule == "zb-h1" and cfg.pp > 1:
        if first_stage == 0:
            return 0.0
        ends = v_walk("zb-h1", [s.forward for s in st], [s.backward for s in st], [s.weight_grad for s in st],
                      cfg.num_microbatches).device_end
        last = first_stage if last_stage is None else last_stage
        return max(0.0, max(ends) - max(ends[first_stage:last + 1]))
    return first_stage * (min(s.backward for s in st) / cfg.chunks)       # (the bits of the form before)


def v_first_device_dp_s(spec, cfg: ParallelConfig, costs: Costs, st, hb: float, hf: float, b: int, K: int,
                        pair_GBps=None):
    """Exposed data-parallel time of device 0 of a V-shape under --overlap-grad-reduce (scalar or array over links).

    Device 0 holds the first stage (Megatron-Core's first model chunk: its buckets) and the last stage (one bucket).
    The last stage's reduce is issued when its last W ends, v_last_chunk_lead_s before device 0's end, and runs on the
    same stream ahead of the first chunk's buckets, which are issued over that chunk's last W (hb / 2): the end is
    max(T0 + T1 - lead, exposed_s(T0, W, n0)) past device 0's last W, as the replay (_overlapped_dp) runs it. With the
    distributed optimizer the reduce-scatter halves run there and the all-gather follows (dp_exposed_s's rule).
    The form the other devices keep (v equal pieces over one micro-batch's W) would hide the last stage's reduce
    behind one W only, though in a V it has the whole down-stroke of the last micro-batch to hide behind."""
    model, ov = spec.model, overlap_of(spec)
    p0 = first_chunk_params(model, cfg)
    t0 = dp_allreduce_s(spec, cfg, costs, p0, b, K, pair_GBps)
    t1 = dp_allreduce_s(spec, cfg, costs, stage_params(model, cfg, 0) - p0, b, K, pair_GBps)
    n0 = dp_bucket_count(spec, cfg, p0, True)
    half = 0.5 if cfg.zero >= 1 else 1.0
    e = np.maximum(half * (t0 + t1) - v_last_chunk_lead_s(st, cfg), exposed_s(half * t0, hb / cfg.chunks, n0))
    if cfg.zero >= 1:
        ag = (t0 + t1) / 2 * param_gather_ratio(spec, cfg)
        e = e + (exposed_s(ag, hf, n0 + 1) if ov.param_gather else ag)
    return e


def block_span(spec, cfg: ParallelConfig) -> int:
    """Nodes one tp x cp group spans (1 when it fits in a node): a block of the mapping is that many consecutive
    nodes (layouts' span)."""
    gpn = spec.cluster.gpus_per_node
    return cfg.tp * cfg.cp // gpn if cfg.tp * cfg.cp > gpn else 1


def block_bandwidth(bw: np.ndarray, span: int) -> np.ndarray:
    """Links between blocks, each named by its first node: a block of `span` consecutive nodes reaches another over
    its span node pairs side by side, the slowest one counting (bw itself for span 1). build_problem scores a
    mapping's p2p hops, rings and tied-embedding pairs on it, and the simulator replays the mapped plan on it, so
    that both see every node of a block, not only its first one's links."""
    if span <= 1:
        return bw
    n = len(bw)
    out = np.array(bw, dtype=float, copy=True)
    for m in range(1, span):
        out[:n - m, :n - m] = np.minimum(out[:n - m, :n - m], bw[m:, m:])
    return out


def build_problem(spec, cfg: ParallelConfig, layout: Layout, costs: Costs | None = None,
                  bandwidth: np.ndarray | None = None, nodes: np.ndarray | None = None,
                  bound_only: bool = False, walk: bool = True) -> MappingProblem:
    """The mapping problem of (cfg, layout) on the cluster's links (or `bandwidth`, one snapshot), over `nodes`.
    bound_only: a relaxation for bounds alone (screening's), whose objective is at most the full problem's on every
    mapping: interleaved's and waited 1F1B's steep pace left out (>= 0; bound_differs says where), which spares
    their boundaries' walks. walk False: no schedule's hops walked per mapped boundary (interleaved, waited 1F1B,
    ZB-H1): the typical hop's traversals (p2p_exposed_hops; waited 1F1B its closed form, lock_step_problem_parts) on
    the mapped sum, as one node row has them; the problem says so (MappingProblem.walk_dropped) where that changed
    it. What build_problems falls back to when the walks would take more work than a search allows."""
    costs = costs or default_costs(spec.cluster)
    cl, model = spec.cluster, spec.model
    bw = cl.bandwidth if bandwidth is None else bandwidth
    nodes = np.arange(cl.nodes) if nodes is None else np.asarray(nodes)
    if layout.span > 1:
        # a tp x cp group wider than a node: a block is an aligned run of `span` nodes (rank order), represented by
        # its first node; a link between two blocks is their span node pairs side by side, the slowest one counts
        have, k = {int(n) for n in nodes}, layout.span
        nodes = np.array([f for f in sorted({int(n) - int(n) % k for n in nodes})
                          if all(f + m in have for m in range(k))], dtype=int)
        B = block_bandwidth(bw, k)[np.ix_(nodes, nodes)]
    else:
        B = bw[np.ix_(nodes, nodes)]
    N = len(nodes)
    st = stage_times(spec, cfg, costs)
    const = compute_const(spec, cfg, costs, st)

    # pipeline p2p: activations of one micro-batch (p2p_message_bytes)
    share = p2p_share(spec, cfg, layout.b)
    msg = p2p_message_bytes(spec, cfg)
    with np.errstate(divide="ignore"):
        one_way = p2p_inter_s(spec, msg, np.where(B > 0, B, np.inf), costs, share)
    intra_s = p2p_intra_s(spec, msg, costs)
    walks = walked_hops(spec, cfg, layout, [s.forward + s.backward for s in st], one_way)
    walked = walk and walks
    base = const
    hop, wrap, pace, const = p2p_parts(spec, cfg, layout, st, one_way, intra_s, const, walked, bound_only)

    # data parallel: per row, one NCCL ring over the b replicas in each of its K nodes, limited by the
    # row's slowest inter-node link of the ring (CommModel.dp_allreduce_time); dp_link[i][n, q] is that time
    # if n-q is the slowest link, and MappingProblem.dp_costs takes the ring's links in column (rank)
    # order, as NCCL's connectRings does; less the slack over stage 0
    R, K, b = layout.rows, layout.cols, layout.b
    dp_base = np.zeros(R)
    dp_link = np.zeros((R, N, N))
    pair_bw = np.minimum(B, B.T)            # a ring's link runs at its slower direction
    pair_bw = np.where(pair_bw > 0, pair_bw, np.inf)    # no link (the diagonal): zeroed after use
    if cfg.dp * cfg.cp > 1:        # the gradient reduce runs over dp * cp (dp_allreduce_s)
        lead_hops = sync_lead_hops(cfg, R, one_way, intra_s) if aligned_grad_sync(spec, cfg) else None
        for i in range(R):
            stages = range(i * layout.a, (i + 1) * layout.a)
            slack = dp_row_slack_s(spec, st, cfg, i * layout.a, (i + 1) * layout.a - 1)
            with np.errstate(divide="ignore"):
                ring = dp_row_s(spec, cfg, costs, st, stages, b, K, pair_bw if K > 1 else None, lead_hops)
            if K > 1:
                dp_base[i] = -slack
                dp_link[i] = ring
                np.fill_diagonal(dp_link[i], 0.0)
            else:
                dp_base[i] = ring - slack
    # tied embeddings: per column, between its first- and last-stage GPUs (tied_embedding_reduced)
    emb = None
    if tied_embedding_reduced(model, cfg):
        if layout.rows > 1:
            with np.errstate(divide="ignore"):
                emb = tied_embedding_inter_s(spec, cfg, costs, pair_bw, share)
            np.fill_diagonal(emb, 0.0)
        else:                                  # both ends in one node: NVLink, mapping-independent
            const += tied_embedding_intra_s(spec, cfg, costs)
    prob = MappingProblem(layout, nodes, hop, wrap, dp_base, dp_link, const, emb, pace,
                          walk_dropped=walks and not walk)
    if walked and bound_only:
        # the problem its full build falls back to past a search's allowance (build_problems), for the bound; only
        # the pipeline terms differ (walked hops need several rows, so no later term was added to const)
        hop2, wrap2, pace2, const2 = p2p_parts(spec, cfg, layout, st, one_way, intra_s, base, False, False)
        prob.typical = replace(prob, hop=hop2, wrap=wrap2, pace=pace2, const=const2, walk_dropped=True)
    return prob


def p2p_parts(spec, cfg: ParallelConfig, layout: Layout, st, one_way: np.ndarray, intra_s: float, const: float,
              walked: bool, bound_only: bool):
    """(hop, wrap, pace, const): build_problem's pipeline terms, `const` plus their mapping-independent part: the
    schedule's hops walked per mapped boundary where `walked` (walked_hops; bound_only: their relaxation), else the
    typical hop's traversals (waited 1F1B: its closed form)."""
    pace = None
    wrap = None
    pp, m = cfg.pp, cfg.num_microbatches
    coef = m / pp
    if walked and interleaved_paced(spec, cfg):
        # Megatron-Core's interleaved order walked per mapped boundary: its linear part on the sum, its steep part
        # (past a chunk's slack) as a bottleneck (Pace.steep), not the typical hop's traversals scaled by the sum
        fc, bc = interleaved_chunk_times(spec, cfg, st)
        hop, wrap, pace, add = interleaved_problem_parts(fc, bc, m, p2p_blocking(spec, cfg), layout, one_way, intra_s,
                                                         steep=not bound_only)
        const += add
        wraps = 0.0
    elif walked and waited_lock_step(spec, cfg) and lock_step_walked(layout):
        # Megatron-Core's 1F1B, two or more stages a node: its waited calls walked per mapped row boundary (each
        # stage touches one at most), the linear part on the sum, the rest as a bottleneck (Pace.steep)
        hop, pace, add = lock_step_walk_parts([s.forward for s in st], [s.backward for s in st], m, layout, one_way,
                                              intra_s, steep=not bound_only)
        const += add
        wraps = 0.0
    elif walked and zb_h1_walked(cfg, layout):
        # ZB-H1, two or more stages a node: its order walked per mapped row boundary, as the lock step's below (a slow
        # link past a stage's slack paces every micro-batch, which the typical hop's traversals scaled by the mapped
        # sum charged at a share: -5.4% at pp 32 on 16 V100 nodes, the fuzz of valid plans' seed 6 case 682)
        hop, pace, add = zb_h1_walk_parts([s.forward for s in st], [s.backward for s in st],
                                          [s.weight_grad for s in st], m, layout, one_way, intra_s,
                                          steep=not bound_only)
        const += add
        wraps = 0.0
    elif walked and waited_lock_step(spec, cfg):
        # Megatron-Core's 1F1B, one stage a node, hops past LOCK_STEP_A1_WALK of a stage: walked per boundary with
        # each interior stage's two boundaries as planes (the closed form below is -8 .. +4% off there)
        hop, pace, add = lock_step_walk_parts([s.forward for s in st], [s.backward for s in st], m, layout, one_way,
                                              intra_s, steep=not bound_only, one_stage=True)
        const += add
        wraps = 0.0
    elif waited_lock_step(spec, cfg) and layout.rows > 1:
        # Megatron-Core's 1F1B, one stage a node: lock_step_p2p_s itself on the column's mapped hops (lock_step_pace),
        # not a typical hop's traversals scaled by the mapped ones (a slow link counted at 1 / (pp - 1) of its weight)
        hop, pace, add = lock_step_problem_parts([s.forward + s.backward for s in st], m, layout, one_way, intra_s)
        const += add
        wraps = 0.0
        if pace.weight == 0 and not pace.lin:
            pace = None         # one micro-batch: no steady state and no exchange of its own, only the ramp (hop)
    else:
        trav, wraps = p2p_exposed_hops(spec, cfg, (st, one_way, intra_s, layout.rows))
        hop = coef * trav * (one_way + one_way.T)
        if pp > 1:
            const += coef * trav * (pp - layout.rows) * (2 * intra_s)
    intra_hop = 2 * intra_s
    if wraps and pp > 1:
        if layout.rows > 1:
            wrap = coef * wraps * (one_way + one_way.T)
        else:
            const += coef * wraps * intra_hop
    np.fill_diagonal(hop, 0.0)
    return hop, wrap, pace, const


def walked_hops(spec, cfg: ParallelConfig, layout: Layout, t, one_way: np.ndarray) -> bool:
    """Whether build_problem charges the plan's pipeline hops by its schedule's walk per mapped boundary: Megatron-
    Core's interleaved order (interleaved_paced) and waited 1F1B with two or more stages a node (lock_step_walked) on
    several node rows, ZB-H1 likewise (zb_h1_walked), and waited 1F1B with one stage a node where its hops are slow
    enough (lock_step_one_stage_walked; t: each stage's F + B)."""
    if layout.rows < 2:
        return False
    return (interleaved_paced(spec, cfg) or zb_h1_walked(cfg, layout)
            or (waited_lock_step(spec, cfg) and (lock_step_walked(layout)
                                                  or lock_step_one_stage_walked(layout, t, one_way))))


def build_problems(spec, cfg: ParallelConfig, layout: Layout, costs: Costs | None, mats, *, bound_only: bool = False,
                   walk_work_s: float | None = None) -> list[MappingProblem]:
    """build_problem on each bandwidth matrix of `mats` (None: the cluster's), within walk_work_s work seconds
    (None: no limit): the builds of a deep pipeline's walked hops on slow links grow with its knees (a pp 32
    interleaved order on 0.3 GB/s links walked each of its 32 curves ~46 times, 13 work s, where the time limit of
    10 s buys 3.5), so past that work they are given up at once (work.ceiling: where, depends on the work alone) and
    every matrix is built again with walk=False, the typical hop's traversals (MappingProblem.walk_dropped): one
    model for all of a configuration's snapshots."""
    mats = [None] if mats is None else list(mats)
    try:
        with work.ceiling(walk_work_s):
            return [build_problem(spec, cfg, layout, costs, bandwidth=m, bound_only=bound_only) for m in mats]
    except work.OverCeiling:
        return [build_problem(spec, cfg, layout, costs, bandwidth=m, bound_only=bound_only, walk=False)
                for m in mats]


def bound_differs(spec, cfg: ParallelConfig, layout: Layout) -> bool:
    """Whether build_problem(..., bound_only=True) differs from the full problem (interleaved's steep pace, waited
    1F1B's and ZB-H1's walked ones; with one stage a node, where its hops may be walked: lock_step_one_stage_walked
    reads them, so on one_stage_walk_shape's layouts this says it may, and the full problem is then built for the
    exact bound)."""
    return layout.rows > 1 and (interleaved_paced(spec, cfg) or zb_h1_walked(cfg, layout)
                                or (waited_lock_step(spec, cfg) and (lock_step_walked(layout) or
                                                                     one_stage_walk_shape(layout))))


def interleaved_paced(spec, cfg: ParallelConfig) -> bool:
    """Megatron-Core's interleaved order (pipeline.interleaved_time: pp > 1, m a multiple of pp), whose hops the
    mapping charges per boundary (interleaved_problem_parts) where the layout has several node rows."""
    return (spec.training.pipeline_engine == "megatron" and cfg.schedule == "interleaved" and cfg.pp > 1
            and cfg.num_microbatches % cfg.pp == 0)


def typical_boundary_hops(pp: int, rows: int, inter: float, intra_s: float, wrap: bool = False) -> list[float]:
    """Each stage boundary's typical one-way hop, j = 0 .. pp - 2: the network's (`inter`) where stage j + 1 starts a
    row of the layout (pp / rows stages a row), NVLink's elsewhere; with `wrap`, the wrap-around hop (last stage to
    stage 0) last, the network's between rows when there are several."""
    a = pp // rows
    cs = [inter if (j + 1) % a == 0 else intra_s for j in range(pp - 1)]
    if wrap:
        cs.append(inter if rows > 1 else intra_s)
    return cs


def typical_inter_hop(one_way: np.ndarray, intra_s: float) -> float:
    """The plan's typical one-way inter-node hop: the median of the candidate links (NVLink's where none)."""
    off = one_way[~np.eye(len(one_way), dtype=bool)]
    off = off[np.isfinite(off)]
    return float(np.median(off)) if off.size else intra_s


def interleaved_problem_parts(fc, bc, m: int, blocking: bool, layout: Layout, one_way: np.ndarray, intra_s: float,
                              steep: bool = True):
    """(hop, wrap, pace, const): the exposed hops of interleaved's walk, interleaved_time(c) - interleaved_time(0),
    on a column's mapped hops (walked_problem_parts: the row boundaries and the wrap). A hop is the mean of its two
    directions, as the typical-hop charge's (one_way + one_way.T); the typical hop the median one-way link. Each
    boundary's slope is at most 2 v crossings a micro-batch (4 v for two rows' joint curve): the margin's. Levelled,
    as the lock step's: the boundaries' steep parts differ at the typical hop by position (boundary 0's the largest on
    the fuzz's V100 cases), and unlevelled a slow pair on another boundary was charged nothing up to that (-0.5 s of
    13.7 on the fuzz's seed 10 case 380; docs/notes/simulator.md, "Interleaved under one slow boundary"). One stage
    a node on three rows or more, blocking p2p: each row's two boundaries' planes too (pair_planes: their rises add in
    part, -4.0 s of 55.6 on seed 8 case 521; "A device's two boundaries as planes"). Not with overlap_p2p_comm: there
    the levelled form was within -1.9 .. +2.4% of the walk on random hops (planes -1.2 .. +2.7%), and the planes' walks
    (up to 9 points x 3 a row) took llama3-405b-h100-fsdp-512's solve (pp 32, m 128) from 2.9 to its whole 21 work s."""
    c = (one_way + one_way.T) / 2
    np.fill_diagonal(c, 0.0)
    return walked_problem_parts(lambda h: interleaved_time(fc, bc, m, h, blocking), len(fc), layout, c,
                                typical_inter_hop(one_way, intra_s), intra_s, True, 4.0 * m * len(fc[0]), steep,
                                level=True, planes=blocking and layout.a == 1 and layout.rows >= 3)


def lock_step_walked(layout: Layout) -> bool:
    """Whether a waited 1F1B plan's mapped hops are charged by the walk (lock_step_walk_parts): several node rows of
    two or more stages a node, so each stage touches at most one row boundary. One stage a node (a = 1) keeps the
    closed form (lock_step_problem_parts) below LOCK_STEP_A1_WALK: a stage's pace there couples its two row
    boundaries, which a per-boundary curve cannot say (docs/notes/simulator.md, "1F1B's lock step walked", design
    point 2); past it the walk with planes does (lock_step_one_stage_walked)."""
    return layout.rows > 1 and layout.a >= 2


LOCK_STEP_A1_WALK = 0.02   # one stage a node: the walk (with planes) replaces the closed form from a typical hop
#                            of this share of the fastest stage's F + B (the closed form's error at 1/30: -1.5 ..
#                            +1.8% on random draws, benchmarks/lock_step_one_stage_probe.py)
ONE_STAGE_TYPICAL_Q = 0.25  # one_stage_typical_hop's quantile of the candidate hops
# No cap on the rows: the build walks each boundary's curve and each row's planes, so its cost grows as rows^2 x (m up
# to p + 36): 0.13 work s at pp 16 (m 128-512), 1.9 at pp 32 (m 384), 23 at pp 64 (m 768), which took a 10 s solve to
# 21 s of wall under a cap of 16 rows (Nov 27). A search's allowance bounds it now (build_problems: past it, the closed
# form); on pp 17-40 the walk with planes is -0.3 .. +0.8% of the walk at 1/10 where the closed form is -5.9 .. +2.8%
# (benchmarks/lock_step_one_stage_probe.py --pp 17 40 --typ 0.25 --draws 30)


def lock_step_one_stage_walked(layout: Layout, t, one_way: np.ndarray) -> bool:
    """Whether a waited 1F1B plan with one stage a node (a = 1, 3 rows or more) is charged its walk
    with planes (lock_step_walk_parts(one_stage=True)) rather than lock_step_p2p_s's closed form: where its typical hop
    (one_stage_typical_hop) is at least LOCK_STEP_A1_WALK of the fastest stage's F + B (t). Below it the closed
    form is within -0.4 .. +0.3% of the walk at 1/150; at 1/10 -8.3 .. +3.6% where the walk with planes is -1.2 ..
    +0.6% (docs/notes/simulator.md, "One stage a node: the lock step walked with planes")."""
    if not one_stage_walk_shape(layout):
        return False
    typ = one_stage_typical_hop(one_way)
    return bool(np.isfinite(typ) and typ >= LOCK_STEP_A1_WALK * min(t))


def one_stage_walk_shape(layout: Layout) -> bool:
    """The layouts lock_step_one_stage_walked may walk, whatever the hops: one stage a node on 3 rows or more
    (bound_differs asks this, without the hops)."""
    return layout.a == 1 and layout.rows >= 3


def one_stage_typical_hop(one_way: np.ndarray) -> float:
    """The typical hop of a one-stage-a-node lock step's walked curves: the lower quartile of the candidate boundary
    hops (each pair's slower direction; inf where none). Levelled curves lie over the walk where a mapped hop falls
    below the typical one and under it where several rise above it (their rises add in part), and a mapping takes the
    faster links: on the fuzz of valid plans (rank-order placements, seeds 13 and 0) the 1F1B line's min / max were
    -2.0 / +0.5% with the fastest hop, -1.2 / +0.5% with the 10th percentile, -0.03 / +1.0% with the quartile, and the
    median lay over by up to 12.8% on random draws (benchmarks/lock_step_one_stage_probe.py)."""
    c = np.maximum(one_way, one_way.T)
    off = c[~np.eye(len(c), dtype=bool)]
    off = off[np.isfinite(off)]
    return float(np.quantile(off, ONE_STAGE_TYPICAL_Q)) if off.size else np.inf


def lock_step_walk_parts(f, b, m: int, layout: Layout, one_way: np.ndarray, intra_s: float, steep: bool = True,
                         one_stage: bool = False):
    """(hop, pace, const): Megatron-Core 1F1B's exposed hops, lock_step_time(c) - lock_step_time(0) (the waited-call
    walk, exact against the replay), on a column's mapped row-boundary hops (walked_problem_parts, no wrap). A hop
    is its pair's slower direction (Pace.c, as lock_step_problem_parts: the steady state's calls batch one boundary's
    activation down and gradient up and wait for both), the typical hop the median of those. A boundary's slope is
    at most its 2 m transfers (a path through the walk's DAG takes each transfer once): the margin's. Levelled (each
    boundary's steep part equal at the typical hop): 1F1B's curves differ by position (the ramp's slope 2 from 0 on
    an early boundary, a first piece of slope 0 on later ones, so Lrow is 0 and the ramp sits in S_r), and without
    it a slow boundary other than the largest-at-typical one would be charged nothing up to that largest.
    one_stage (a = 1, lock_step_one_stage_walked): each interior stage's two boundaries as planes too (pair_planes),
    and the typical hop the candidates' lower quartile, not their median (one_stage_typical_hop)."""
    c = np.maximum(one_way, one_way.T)
    np.fill_diagonal(c, 0.0)
    f, b = tuple(map(float, f)), tuple(map(float, b))
    typ = one_stage_typical_hop(one_way) if one_stage else typical_inter_hop(c, intra_s)
    hop, _, pace, const = walked_problem_parts(lambda h: lock_step_time(f, b, m, h), len(f), layout, c, typ,
                                               intra_s, False, 2.0 * m, steep, level=True, drop_flat=True,
                                               planes=one_stage)
    return hop, pace, const


def zb_h1_walked(cfg: ParallelConfig, layout: Layout) -> bool:
    """Whether a ZB-H1 plan's mapped hops are charged by its walk per row boundary (zb_h1_walk_parts): several node
    rows of two or more stages a node, so each stage touches at most one row boundary (lock_step_walked's rule; one
    stage a node keeps the typical hop's traversals, p2p_exposed_hops)."""
    return cfg.schedule == "zb-h1" and cfg.pp > 1 and layout.rows > 1 and layout.a >= 2


def zb_h1_walk_parts(f, b, w, m: int, layout: Layout, one_way: np.ndarray, intra_s: float, steep: bool = True):
    """(hop, pace, const): ZB-H1's exposed hops, its order walked with the hops less without (vwalk.v_walk, exact
    against the replay on per-boundary hops alike both ways), on a column's mapped row-boundary hops
    (walked_problem_parts, no wrap, levelled as the lock step's). A hop is the mean of its two directions (the sends
    overlap compute, each direction waited for by its own receiver, as interleaved's), the typical hop the median of
    those. A boundary's slope is at most its 2 m transfers (a path through the walk's DAG crosses each once)."""
    c = (one_way + one_way.T) / 2
    np.fill_diagonal(c, 0.0)
    f, b, w = (tuple(map(float, x)) for x in (f, b, w))

    def walk(h):
        return v_walk("zb-h1", f, b, w, m, tuple(h) if np.ndim(h) else float(h)).makespan

    hop, _, pace, const = walked_problem_parts(walk, len(f), layout, c, typical_inter_hop(c, intra_s), intra_s, False,
                                               2.0 * m, steep, level=True, drop_flat=True)
    return hop, pace, const


PLANE_GRID = (1.5, 3.0)   # x the typical hop: the points, per coordinate, where pair_planes takes a row's planes
PLANE_MOVE = 1e-3         # x the typical hop: a plane's point moved off its grid point (into one piece's interior)
PLANE_STEP = 1e-5         # x the typical hop: the forward differences' step there
PLANE_INT_TOL = 1e-3      # a plane's slopes are crossing counts less the linear part's: integers within this (or
PLANE_INT_REL = 1e-5      # this much of the slope: thousands of crossings on a hop of 1e-4 s, seed 1 case 201), else
#                           the step straddled a knee and the plane is left out (it could lie over the curve)


def pair_planes(exposed2, typ: float, l1: float, l2: float, at_cs: float, at_typ: float, hi: float) -> np.ndarray:
    """Planes (n x 3: alpha, beta, gamma; alpha, beta integers) under a row's joint curve in its two boundaries' hops
    (x: the one above, y: below), in the pace's terms: P(x, y) = E(x, y) - at_cs + at_typ - l1 (x - typ) - l2 (y -
    typ), E = exposed2(x, y) the walk with those two hops set and every other typical (E(typ, typ) = at_cs), l1, l2
    the linear part's slopes (Pace.steep's levelled parts are at_typ at the typical hop, as P). E is convex (a
    max-plus walk: the max over paths of sums with its hops crossing counts as coefficients), so the plane of the
    piece at a point is under it everywhere; with the other boundaries off the typical hop it can lie over the walk,
    as the levelled parts do below it. At each grid point (PLANE_GRID x typ, moved by PLANE_MOVE along an irrational
    direction so that x = y ties are not hit) its gradient from forward differences (3 walks a point); where the
    slowest candidate hop `hi` lies past the grid, at it too (a knee out there is met only from its own piece)."""
    out = []
    move, step = PLANE_MOVE * typ, PLANE_STEP * typ
    grid = PLANE_GRID + ((hi / typ,) if hi > 1.1 * PLANE_GRID[-1] * typ else ())
    for gx in grid:
        for gy in grid:
            x, y = gx * typ + move, gy * typ + 0.6180339887 * move
            e = exposed2(x, y)
            sx, sy = (exposed2(x + step, y) - e) / step - l1, (exposed2(x, y + step) - e) / step - l2
            a, b = round(sx), round(sy)
            if max(abs(sx - a) - PLANE_INT_REL * abs(sx), abs(sy - b) - PLANE_INT_REL * abs(sy)) > PLANE_INT_TOL:
                continue
            g = e - at_cs + at_typ - l1 * (x - typ) - l2 * (y - typ) - a * x - b * y
            out.append((float(a), float(b), g))
    # none kept: the plane 0, never above the pace's base 0 (so every row has one, as Pace.planes wants)
    return np.array(out or [(0.0, 0.0, 0.0)])


def walked_problem_parts(walk, pp: int, layout: Layout, c: np.ndarray, typ: float, intra_s: float, wrap: bool,
                         slope_max: float, steep: bool = True, level: bool = False, drop_flat: bool = False,
                         planes: bool = False):
    """(hop, wrap, pace, const): a schedule's exposed hops, walk(hops) - walk(0) (`walk`: a makespan on per-boundary
    one-way hops, stage boundaries j = 0 .. pp - 2, with `wrap` the last stage -> stage 0 hop after them; 0.0: none),
    on a column's mapped hops c (N x N, symmetric), as  const + Lrow sum_r h_r + Lwrap h_wrap + max_r S_r(h_r)  (r
    over the row boundaries, and the wrap). E_r(x), the walk with boundary r's hop at x and every other at the typical
    hop `typ` (NVLink's inside a node), is convex piecewise-linear in x (a max-plus walk: docs/notes/simulator.md,
    "Interleaved on heterogeneous links", "1F1B's lock step walked"): its pieces come from the walk itself
    (pipeline.convex_pieces on [0, the slowest candidate hop]); its first slope L_r is the linear part (Lrow: the
    least over row boundaries, a row boundary's surplus L_r - Lrow stays in its S_r), the rest S_r(x) = E_r(x) - L x
    - E_r(0) >= 0 the steep part, whose max over boundaries is Pace.steep. Exact where one boundary leaves the
    typical hop and takes the max (every boundary's S_r(typical) equal, or the one raised the largest; with two rows
    and a wrap the boundary and the wrap join one pair, so their joint curve is exact everywhere). `level`: each S_r
    raised by max S(typical) - S_r(typical) (>= 0, so still >= 0 and nondecreasing), which makes every boundary's
    S_r(typical) the largest: exact wherever one boundary's hop rises above the typical one, over (by S_r(typical) -
    S_r(x)) where it falls below; without it, a boundary whose S_r(typical) is not the largest is charged nothing
    until its S_r passes that largest (under by up to their difference). steep False (a
    bound's relaxation): no pace, each curve walked only for its first slope (two walks a boundary, not its pieces'),
    the same hop and wrap, and const less a margin (rounding, the pieces' secant error; `slope_max`: the most any
    boundary's curve rises per unit hop), so the objective is at most the full one's: that less its max_r S_r(h_r)
    >= 0 (levelled: less max_r U_r(h_r) - (max S(typical) - min S(typical)) >= 0). `planes` (one stage a node,
    steep): each row's two boundaries' joint curve as planes in the pace's max too (pair_planes, Pace.planes); they
    only raise the objective, so the relaxation stays under it."""
    R = layout.rows
    a = pp // R
    cs = typical_boundary_hops(pp, R, typ, intra_s, wrap=wrap)       # R > 1 here: the wrap is the network's
    at = [(r + 1) * a - 1 for r in range(R - 1)] + ([pp - 1] if wrap else [])   # boundaries' stage boundaries
    fin = c[np.isfinite(c)]
    hi = max(float(fin.max()) if fin.size else 0.0, typ)
    zero = walk(0.0)
    joint = wrap and R == 2     # the boundary and the wrap join the same pair: one curve with both at x (exact)
    level = level and not joint     # there the one curve is exact already; levelled, its partner's zero would floor it
    sets = [tuple(at)] if joint else [(j,) for j in at]
    at_cs = walk(cs) - zero        # every E_r at the typical hop
    curves = []
    for js in sets:
        def exposed(x, js=js):
            h = list(cs)
            for j in js:
                h[j] = x
            return walk(h) - zero
        if steep:
            curves.append(np.array(convex_pieces(exposed, hi)))
        else:       # the first piece alone, convex_pieces' own (its secant over 1e-6 of the range at 0)
            d, f0 = hi * 1e-6, exposed(0.0)
            curves.append(np.array([[(exposed(d) - f0) / d if hi > 0 else 0.0, f0]]))
    if joint:
        curves.append(np.zeros((1, 2)))
    nrow = R - 1
    lrow = min(float(pc[0, 0]) for pc in curves[:nrow])
    lin = [lrow] * nrow + ([float(curves[-1][0, 0])] if wrap else [])
    if steep:
        parts = tuple(np.stack([pc[:, 0] - lr, pc[:, 1] - pc[0, 1]], axis=1)
                      for pc, lr in zip(curves, lin, strict=True))
        at = [float(np.max(pc[:, 0] * typ + pc[:, 1])) for pc in parts]
        at_typ = max(at)
        if level:       # every S_r raised to the largest at the typical hop: U_r = S_r - S_r(typ) + max S(typ)
            parts = tuple(np.stack([pc[:, 0], pc[:, 1] + (at_typ - v)], axis=1) for pc, v in zip(parts, at,
                                                                                                  strict=True))
        qs = ()
        if planes and a == 1 and (wrap or R >= 3):
            def exposed2(x, y, i):      # a = 1: row i's boundaries are stage boundaries i - 1 (wrap: pp - 1) and i
                h = list(cs)
                h[(i - 1) % R], h[i] = x, y
                return walk(h) - zero
            # without a wrap the end rows touch one boundary each: no planes (their curves are exact in `parts`)
            qs = tuple(pair_planes(lambda x, y, i=i: exposed2(x, y, i), typ, lin[(i - 1) % R], lin[i], at_cs, at_typ,
                                   hi) if wrap or 0 < i < R - 1 else np.zeros((0, 3)) for i in range(R))
        pace = Pace(c, 1.0, 0.0, np.full(R - 1, -np.inf), np.full(R, -np.inf), (), parts, planes=qs)
        if drop_flat and max(float(np.max(pc[:, 0] * hi + pc[:, 1])) for pc in parts) <= 1e-9 * (1.0 + abs(at_cs)):
            # every curve one line (its slope's secant noise aside, convex_pieces' equality tolerance): no steep
            # part, and a pace would only turn the decompositions off; the objective moves by that tolerance at most
            pace = None
    else:
        # S_r(typ) = E_r(typ) - L typ - E_r(0) from the walks (E_r(typ) = at_cs for every boundary; two rows' joint
        # wrap curve is 0); the full build reads it off its pieces, which may lie over the walk by a slope jump times
        # convex_pieces' secant step (hi 1e-6) next to a knee, and by its equality tolerance: the margin covers both
        # with the steepest slope a curve can have, so the relaxation stays at or under the full objective
        pace = None
        real = curves[:-1] if joint else curves
        # levelled, every U_r(h) >= U_r(0) = max S(typ) - S_r(typ): the least S_r(typ) is what the pace always adds
        at_typ = (min if level else max)([0.0] * joint + [at_cs - lr * typ - float(pc[0, 1])
                                                          for pc, lr in zip(real, lin[:len(real)], strict=True)])
        at_typ += 2e-9 * (1.0 + abs(at_cs) + slope_max * hi) + slope_max * hi * 1e-6
    const = at_cs - lrow * nrow * typ - (lin[-1] * typ if wrap else 0.0) - at_typ
    with np.errstate(invalid="ignore"):          # a pair without a link (inf) stays unusable at slope 0
        hop = np.where(np.isinf(c), np.inf, lrow * c)
        wrap_m = np.where(np.isinf(c), np.inf, lin[-1] * c) if wrap else None
    return hop, wrap_m, pace, const


def lock_step_problem_parts(t, m: int, layout: Layout, one_way: np.ndarray, intra_s: float):
    """(hop, pace, const): pipeline.lock_step_p2p_s(t, c, m) of a column whose row boundaries r have the mapped
    hops c_r, split for MappingProblem: the ramp's 2 sum(c) (hop = 2 c per row boundary, the NVLink boundaries'
    2 intra_s in const), the slowest stage's own exchange (Pace.lin, its NVLink hops in const) and the bottleneck
    W max_i (d_i + ex_i) (Pace; a stage's NVLink hops folded into its constant). A boundary's hop is its slower
    direction: the steady state's calls batch the activation down and the gradient up of one boundary and wait for
    both (simulator/mcore.py, send_forward_recv_backward / send_backward_recv_forward)."""
    pp, a, R = len(t), layout.a, layout.rows
    k, w, d = lock_step_pace(t, m)
    c = np.maximum(one_way, one_way.T)
    np.fill_diagonal(c, 0.0)
    base, e, f = -np.inf, np.full(R - 1, -np.inf), np.full(R, -np.inf)
    lin, const = [], 2 * (pp - R) * intra_s
    for s in range(pp):
        i, pos = divmod(s, a)
        up = s > 0 and pos == 0                  # stage s's boundary above is row boundary i - 1 (mapped)
        down = s < pp - 1 and pos == a - 1       # its boundary below is row boundary i
        nvl = (intra_s if s > 0 and not up else 0.0) + (intra_s if s < pp - 1 and not down else 0.0)
        v = d[s] + nvl
        if up and down:
            f[i] = max(f[i], v)
        elif up:
            e[i - 1] = max(e[i - 1], v)
        elif down:
            e[i] = max(e[i], v)
        else:
            base = max(base, v)
        if s == k and m >= 2:                    # k's own exchange, once
            lin += ([i - 1] if up else []) + ([i] if down else [])
            const += nvl
    return 2 * c, Pace(c, w, float(base), e, f, tuple(lin)), const


def evaluate(spec, cfg: ParallelConfig, problem: MappingProblem, assign: np.ndarray,
             costs: Costs | None = None) -> Estimate:
    costs = costs or default_costs(spec.cluster)
    t = problem.objective(assign)
    path = float(problem.path_costs(assign).max())
    dpc = float(problem.dp_costs(assign).max())
    emb = float(problem.emb_costs(assign).max())
    tokens = spec.training.global_batch_size * spec.training.seq_length
    flops = spec.model.model_flops_per_token(spec.training.seq_length) * tokens
    # MFU against the 16-bit peak also for fp8 plans: model TFLOP/s over the bf16 peak, as NeMo and Megatron report
    # it (mfu_note says so in the output), so fp8 and bf16 plans compare on one scale
    peak = spec.cluster.gpu.peak_flops(activation_precision(spec.training.precision)) * cfg.num_gpus
    return Estimate(t, tokens / t, flops / (t * peak), problem.const, path, dpc,
                    stage_memory(spec, cfg, costs), memory_limit_GiB(spec), emb)


def default_layout(cfg: ParallelConfig, gpus_per_node: int) -> Layout:
    """The layout Megatron's rank order (tp -> cp -> dp -> pp) produces on consecutive nodes."""
    opts = layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, gpus_per_node, cfg.dp_shard)
    if not opts:
        raise ValueError(f"{cfg.label()} does not tile onto nodes of {gpus_per_node} GPUs")
    # rank order fills a node with data-parallel replicas first
    return max(opts, key=lambda L: L.b)
