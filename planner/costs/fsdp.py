"""ZeRO-3 / FSDP / HSDP collectives of one pipeline stage, as torchtitan's FSDP2 issues them (docs/notes/fsdp.md).

One FSDP unit per transformer block (plus the embedding and [norm, output]; memory.fsdp_units). Per unit, forward
all-gathers its bf16 parameters over the shard group; backward all-gathers them again when they were resharded after
forward and reduce-scatters the gradients in fp32 (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32),
pytorch/torchtitan @ 238fa9953e4aec2a62582121564273d7cbb1e9f1 torchtitan/config/job_config.py and
torchtitan/models/llama3/infra/parallelize.py apply_fsdp). HSDP then all-reduces the reduced shard over the replicate
group. These are NCCL rings: an all-gather or a reduce-scatter moves (n-1)/n of the buffer over the ring's slowest
link, half an all-reduce of the same buffer, so they reuse CommModel.dp_allreduce_time (the data-parallel ring the
mapping scores, over the row's columns in rank order) and CommModel.intra_allreduce_time (HSDP's shard group inside a
node, on NVLink). How much of each is hidden behind compute is costs/iteration.py's (fsdp_exposed_parts).
"""
from __future__ import annotations

from planner.costs.context_parallel import dp_ring, ring_pair

PARAM_BYTES = 2      # bf16 all-gather (mixed_precision_param)
REDUCE_BYTES = 4     # fp32 reduce-scatter / all-reduce (mixed_precision_reduce)


def fsdp_collectives(spec, cfg, costs, params: float, b: int, K: int, pair_GBps=None, gathered: float | None = None):
    """(all-gather, reduce-scatter, replicate all-reduce) seconds for `params` parameters per GPU, gathered or reduced
    once, by a row whose nodes hold `b` replicas each over `K` nodes (columns), limited by pair_GBps, the ring's
    slowest inter-node link (a scalar or a matrix of candidate links; monotone in it).

    FSDP (dp_shard 0): both collectives run over the whole data-parallel ring, with context parallelism the
    dp x cp ring (torchtitan shards over dp_shard x cp; context_parallel.dp_ring); the replicate term is 0.
    HSDP: the shard group (dp_shard GPUs) is inside the node (mapping.problem.layouts), so the gather and the scatter
    are NVLink collectives of dp_shard GPUs; the replicate group of each shard rank has b / dp_shard members per node
    over the K nodes, and the node's dp_shard x tp replicate communicators share its rails.
    gathered: bytes the all-gather moves per GPU when not PARAM_BYTES per parameter (memory.fsdp_gather_bytes)."""
    cl, comm = spec.cluster, costs.comm
    if not (1 < cfg.dp_shard < cfg.dp):
        per, nodes, span = dp_ring(spec, cfg, b, K)
        ar = comm.dp_allreduce_time(params * REDUCE_BYTES, per, nodes, cfg.tp, cl, ring_pair(pair_GBps, nodes, span))
        # a ring all-reduce = reduce-scatter + all-gather of the same buffer; the gather moves bf16
        per_param = PARAM_BYTES if gathered is None else gathered / params
        return ar / 2 * per_param / REDUCE_BYTES, ar / 2, 0.0
    S = cfg.dp_shard
    ag = comm.intra_allreduce_time(params * PARAM_BYTES if gathered is None else gathered, S, cl) / 2
    rs = comm.intra_allreduce_time(params * REDUCE_BYTES, S, cl) / 2
    rep = comm.dp_allreduce_time(params * REDUCE_BYTES / S, b // S, K, cfg.tp * S, cl, pair_GBps if K > 1 else None)
    return ag, rs, rep


# FSDP2's own copies on the compute stream (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py and
# _fsdp_param.py, read in torch 2.13): foreach_all_gather_copy_out waits for the all-gather and runs
# split_with_sizes_copy of the gathered buffer into the unit's parameters (read + write of the gathered bytes; the fp8
# all-gather's buffer is copied bytewise); foreach_reduce runs foreach_reduce_scatter_copy_in (chunk_cat of the
# unsharded gradients into the fp32 reduce-scatter input: bf16 in, 2 + 4 bytes per parameter; an fp32 accumulator in,
# 4 + 4) before it hands the buffer to the reduce-scatter stream. Without gradient sync (PyTorch pipelining, every
# micro-batch but the last) post_backward keeps an fp32 accumulator instead: the first micro-batch's bf16 gradient
# upcast (2 + 4 bytes per parameter, to_accumulated_grad_if_needed), each later one added into it (2 + 4 + 4,
# accumulate_unsharded_grad_if_needed). All of it sits between the unit's kernels, not beside them. The copy-in of the
# local shard (fp32 -> bf16 / fp8) runs on the all-gather stream over 1/shard of the parameters: not counted.
# chunk_cat ran at 0.41 of the H200's HBM rate inside a training step (1.97 of 4.8 TB/s: 5.86 ms for 1.92e9 parameters
# x 6 bytes, benchmarks/data/h200/torchtitan_step/steps_kernels_L2_L4.json, docs/notes/fsdp.md), and is charged at that
# fraction of the profile's rate; the copy-out and the accumulation at the profile's rate (not measured apart).
CHUNK_CAT_EFFICIENCY = 0.41
UPCAST_BYTES, ACCUMULATE_BYTES = 6.0, 10.0       # bf16 -> fp32; fp32 += bf16


def fsdp_copy_s(spec, cfg, costs, stage: int) -> tuple[float, float, float]:
    """GPU seconds of FSDP2's copy-out, gradient accumulation and reduce-scatter copy-in for one device of `stage`:
    (per micro-batch forward, per micro-batch backward, once per iteration), in the slots of
    iteration.fsdp_exposed_parts.
    pp = 1: each micro-batch gathers in forward, gathers again in backward (resharded after forward; [norm, output]
    is not, as memory.fsdp_buffer_bytes counts it) and reduces its bf16 gradients (chunk_cat 6 bytes per parameter);
    pp > 1: one gather per iteration and one reduce of the fp32 accumulator (chunk_cat 8 bytes per parameter), once;
    the fp32 accumulation runs in each micro-batch's backward (post_backward without gradient sync: the first
    micro-batch's upcast, then one accumulation per later one), charged as its mean per micro-batch."""
    from planner.costs.memory import fsdp_gather_bytes, fsdp_units, holds_output
    units = fsdp_units(spec.model, cfg, stage)
    gathered = fsdp_gather_bytes(spec.model, spec.training, cfg, stage) or [PARAM_BYTES * u for u in units]
    params, g = sum(units), sum(gathered)
    # GPU work: at the slowest of the plan's GPUs, as layer_parts' kernels (gpu.variability; 1 without it)
    hbm = costs.compute.hbm_GBps * 1e9 / costs.compute.straggler(spec.cluster, cfg)
    cat = params / (hbm * CHUNK_CAT_EFFICIENCY)
    if cfg.pp == 1:
        regathered = g - (gathered[-1] if holds_output(cfg, stage) else 0.0)
        return 2.0 * g / hbm, 2.0 * regathered / hbm + 6.0 * cat, 0.0
    m = cfg.num_microbatches
    accumulate = (UPCAST_BYTES + ACCUMULATE_BYTES * (m - 1)) * params / hbm
    return 0.0, accumulate / m, 2.0 * g / hbm + 8.0 * cat
