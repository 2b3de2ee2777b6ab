"""Op-level simulation of one plan: the judge of the closed-form latency and memory models.

    sim = simulate(spec, config)                   # Megatron rank order on nodes 0..N-1
    sim = simulate(spec, config, mapping=workers)  # workers: [{stage, dp_rank, node, ...}] (a solution's)
    sim = simulate(spec, config, layout=L, assign=A)
    sim.iteration_s, sim.bubble_fraction, sim.peak_memory_GiB, sim.busy_s

Op times come from the compute model's StageTimes (chunks get 1/v of a stage's layer time; the
embedding / output-layer extra goes to the chunk that holds stage 0 / the last stage). Communication
terms come from planner.costs.iteration, as build_problem's do, evaluated on the *mapped* links: p2p
sends take the one-way hop times, the data-parallel all-reduce of each device runs the ring formula after
its last backward, limited by the slowest link of the ring through its replicas' nodes in dp_rank order
(NCCL's connectRings), and the tied-embedding all-reduce follows both ends' syncs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.config import PIPELINE_ENGINES, V_SHAPES, ParallelConfig
from planner.costs import Costs, default_costs
from planner.costs.context_parallel import shard_view
from planner.costs.context_parallel import stage_memory as cp_stage_memory
from planner.costs.iteration import (
    aligned_grad_sync,
    block_bandwidth,
    block_span,
    default_layout,
    dp_allreduce_s,
    dp_bucket_count,
    dp_sync_s,
    exposed_s,
    first_chunk_params,
    fsdp_exposed_parts,
    overlap_of,
    p2p_blocking,
    p2p_inter_s,
    p2p_intra_s,
    p2p_message_bytes,
    p2p_share,
    param_gather_ratio,
    ring_slowest_GBps,
    tied_embedding_inter_s,
    tied_embedding_intra_s,
    tied_embedding_reduced,
)
from planner.costs.iteration import (
    stage_times as overlapped_stage_times,
)
from planner.costs.memory import (
    GiB,
    chunk_stored_bytes,
    layer_activation_bytes,
    stage_activation_bytes,
    stage_params,
    stored_layer_bytes,
)
from planner.costs.pipeline import aligned_sync_step, chunks_per_device, place_chunk_times
from planner.mapping.problem import worker_table
from planner.simulator import deepspeed, engine, mcore
from planner.simulator.engine import DeadlockError
from planner.simulator.ops import B, F, R, Schedule, W
from planner.simulator.orders import build

__all__ = ["simulate", "simulate_uniform", "agreement", "SimResult", "DeadlockError", "Schedule", "build"]


@dataclass
class SimResult:
    config: ParallelConfig | None
    schedule: Schedule
    iteration_s: float
    compute_s: float                      # pipeline makespan without the data-parallel all-reduce
    dp_comm_s: float                      # the longest per-device data-parallel sync (its transfers)
    busy_s: list                          # per device: time computing
    peak_memory_GiB: list                 # per device: static + peak live activations
    static_memory_GiB: list               # per device: weights, gradients, optimizer, logits, overhead
    activation_peak_GiB: list             # per device
    inflight: list                        # per device: peak live activations in micro-batches (chunk = 1/v)
    pipelines: int = 1                    # distinct data-parallel pipelines simulated (distinct links)
    # op arrays of the slowest pipeline (device-major), for plots and traces
    op_dev: np.ndarray = field(default=None, repr=False)
    op_kind: np.ndarray = field(default=None, repr=False)
    op_mb: np.ndarray = field(default=None, repr=False)
    op_chunk: np.ndarray = field(default=None, repr=False)
    op_start: np.ndarray = field(default=None, repr=False)
    op_end: np.ndarray = field(default=None, repr=False)
    op_alloc: np.ndarray = field(default=None, repr=False)
    op_free: np.ndarray = field(default=None, repr=False)
    dp_start: list = field(default_factory=list)
    dp_end: list = field(default_factory=list)
    cp_exposed_s: list = field(default_factory=list)   # per device: (forward, backward) exposed context-parallel
    #                                                    exchange inside one micro-batch's ops (all its chunks)
    step_s: list = field(default_factory=list)          # per device: the optimizer step after its sync (dp_end)

    @property
    def bubble_fraction(self) -> float:
        """Mean over devices of the idle share of the iteration."""
        if self.iteration_s <= 0:
            return 0.0
        return float(1.0 - np.mean(self.busy_s) / self.iteration_s)

    @property
    def peak_memory_max_GiB(self) -> float:
        return float(max(self.peak_memory_GiB)) if self.peak_memory_GiB else 0.0

    @property
    def num_ops(self) -> int:
        return 0 if self.op_kind is None else int(len(self.op_kind))

    def memory_timeline(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """(times, live activation GiB after each event) for one device, allocation at op start,
        release at op end."""
        sel = self.op_dev == device
        t = np.r_[self.op_start[sel], self.op_end[sel]]
        d = np.r_[self.op_alloc[sel], -self.op_free[sel]]
        order = np.lexsort((d, t))     # releases before allocations at the same instant (as the peak counts)
        return t[order], np.cumsum(d[order]) / GiB

    def as_dict(self) -> dict:
        # the data-parallel sync's whole transfer time (the estimate's dp_comm_s is its exposed part: another key) and
        # what the iteration spends after the pipeline ends (the exposed sync and the optimizer step)
        return {"iteration_s": self.iteration_s, "compute_s": self.compute_s, "dp_transfer_s": self.dp_comm_s,
                "after_pipeline_s": max(0.0, self.iteration_s - self.compute_s),
                "bubble_fraction": self.bubble_fraction,
                "peak_memory_GiB": {"per_device": [round(x, 3) for x in self.peak_memory_GiB],
                                    "max": round(self.peak_memory_max_GiB, 3)},
                "static_memory_GiB": [round(x, 3) for x in self.static_memory_GiB],
                "activation_peak_GiB": [round(x, 3) for x in self.activation_peak_GiB],
                "inflight_microbatches": [round(x, 3) for x in self.inflight],
                "busy_s": self.busy_s, "schedule": self.schedule.name, "chunks": self.schedule.v,
                "microbatches": self.schedule.m, "ops": self.num_ops, "pipelines": self.pipelines,
                "config": self.config.as_dict() if self.config else None}


def agreement(sim, estimate) -> float:
    """Relative difference of the closed-form estimate from the simulation: (est - sim) / sim."""
    s = sim.iteration_s if hasattr(sim, "iteration_s") else float(sim)
    e = estimate.iteration_s if hasattr(estimate, "iteration_s") else float(estimate)
    return float((e - s) / s) if s > 0 else float("inf")


# ------------------------------------------------------------------------------------ core

def _simulate_core(sched: Schedule, dur: np.ndarray, lat_f: np.ndarray, lat_b: np.ndarray,
                   dp_time: np.ndarray, act: np.ndarray, transient: np.ndarray, static: np.ndarray,
                   overlap_dp: bool = False, config=None, step: np.ndarray | None = None,
                   blocking_p2p: bool = False, rendezvous_p2p: bool = False,
                   pipeline_engine: str = "megatron", emb: tuple | None = None,
                   dp_overlap: tuple | None = None, mcore_1f1b: bool = False) -> SimResult:
    """dur: (p, v, 4) seconds per op kind; lat_f/lat_b: (pipelines, S) latency of the edge into stage s
    going forward / backward; dp_time: (p, v) all-reduce seconds per chunk; act/transient: (p, v) bytes;
    emb: (first device, last device, seconds) of the tied-embedding all-reduce after both DP syncs, or None;
    dp_overlap: (pieces (p, v), zero >= 1, param_gather, gather_ratio, aligned) for --overlap-grad-reduce
    (_overlapped_dp), or None; aligned: Megatron-Core's interleaved schedule with --align-grad-reduce (its default),
    which launches a chunk's whole sync pipeline_parallel_rank backward steps after the chunk's last backward
    (_aligned_ready); mcore_1f1b: time 1F1B by Megatron-Core's waited p2p calls (mcore.py, _mcore_lock_step) instead
    of sends that overlap the sender's next op."""
    g = engine.build_graph(sched)
    p, v = sched.p, sched.v
    durs = dur[g.dev, g.chunk, g.kind]
    offs, pred, durl = g.offs.tolist(), g.pred.tolist(), durs.tolist()
    # pipelines with identical link times give identical timelines: simulate each distinct one once
    lat_rows = np.stack([np.zeros_like(lat_f), lat_f, lat_b], axis=1)       # (P, 3, S)
    uniq = np.unique(np.round(lat_rows, 15), axis=0)
    best = None
    grad_last = np.full((p, v), -np.inf)
    launch = None
    # Megatron-Core's call streams, built once for every distinct pipeline (each times them on its own links)
    skeleton = mcore.call_skeleton(g, p, sched.m) if mcore_1f1b and pipeline_engine != "deepspeed" else None
    for row in uniq:
        lat = row[g.edge, g.stage]
        op_dur = durl
        if blocking_p2p or rendezvous_p2p:
            # Megatron's p2p is blocking: batched isend/irecv are waited on (and the stream synchronised)
            # before the next op, so the sender's device is held for the transfer; the data is there when
            # the sending op (compute + send) ends
            cross = (g.pred >= 0) & (lat > 0)
            d_ops = durs.copy()
            np.add.at(d_ops, g.pred[cross], lat[cross])
            if rendezvous_p2p:
                # separate blocking send and receive (an approximation of DeepSpeed's pipeline engine, which
                # pipeline_engine="deepspeed" now replays exactly): the receiver is held for the same
                # transfer, before its op: the receiving op starts at the sender's compute end (edge
                # latency -lat) and lasts transfer + compute. An idle receiver thus gets the data exactly as
                # in `blocking`; a busy one pays the transfer once it is free. Not modelled: a sender kept
                # waiting for a busy receiver (optimistic for the sender only).
                d_ops[cross] += lat[cross]
                lat = np.where(cross, -lat, lat)
            lat = np.where(cross, np.minimum(lat, 0.0), lat)
            op_dur = d_ops.tolist()
        if pipeline_engine == "deepspeed":       # its own lock-step instruction streams, rendezvous p2p
            start, end = deepspeed.timeline(g, p, sched.m, durl, row[1], row[2])
        elif mcore_1f1b:
            start, end = mcore.timeline(g, p, sched.m, durl, row[1], row[2], skeleton)
        else:
            start, end = engine.run(offs, pred, lat.tolist(), op_dur)
        start, end = np.asarray(start), np.asarray(end)
        last = end[g.offs[1:] - 1].max()
        gk = (g.kind == W) if sched.split else (g.kind == B)
        gl = np.full((p, v), -np.inf)
        np.maximum.at(gl, (g.dev[gk], g.chunk[gk]), end[gk])
        grad_last = np.maximum(grad_last, gl)      # all replicas must finish before the all-reduce
        if dp_overlap is not None and dp_overlap[4]:
            ready = _aligned_ready(g, p, v, end)
            launch = ready if launch is None else np.maximum(launch, ready)
        if best is None or last > best[0]:
            best = (last, start, end)
    compute_s, start, end = best
    # data-parallel all-reduce: per device after its last backward (or per chunk, in order, if overlapped)
    dp_start, dp_end = [], []
    gkind = W if sched.split else B
    for d in range(p):
        if dp_overlap is not None and launch is not None:
            # launched whole at `launch` (start_grad_sync: every bucket at once), not piece by piece over the backward
            s0, e0 = _overlapped_dp(launch[d], np.zeros(v), dur[d, :, F].sum(), dp_time[d], *dp_overlap[1:4],
                                    dp_overlap[0][d])
            dp_start.append(s0)
            dp_end.append(max(e0, float(grad_last[d].max())))
        elif dp_overlap is not None:
            s0, e0 = _overlapped_dp(grad_last[d], dur[d, :, gkind], dur[d, :, F].sum(), dp_time[d], *dp_overlap[1:4],
                                    dp_overlap[0][d])
            dp_start.append(s0)
            dp_end.append(e0)
        elif overlap_dp:
            t = 0.0
            first = None
            for c in np.argsort(grad_last[d]):
                t = max(t, grad_last[d, c]) + dp_time[d, c]
                first = grad_last[d, c] if first is None else first
            dp_start.append(float(first))
            dp_end.append(float(t))
        else:
            s0 = float(grad_last[d].max())
            dp_start.append(s0)
            dp_end.append(s0 + float(dp_time[d].sum()))
    if emb is not None:
        # tied embeddings: the first and last stage all-reduce the word embedding's gradient once both have
        # synced their data-parallel gradients (Megatron's finalize_model_grads order)
        d0, d1, t_emb = emb
        e = max(dp_end[d0], dp_end[d1]) + t_emb
        dp_end[d0] = dp_end[d1] = e
    # once per iteration, after a device's all-reduce: its optimizer step (StageTimes.step)
    step = np.zeros(p) if step is None else np.asarray(step, dtype=float)
    iteration = max(compute_s, max(e + float(step[d]) for d, e in enumerate(dp_end)))
    busy = np.zeros(p)
    np.add.at(busy, g.dev, durs)
    alloc, free = engine.memory_deltas(g, sched.split, act, transient)
    act_peak = engine.peak_activation(g, alloc, free)
    inflight = engine.peak_inflight(g, sched.split, v)
    # the sync's transfer time: with the distributed optimizer's overlapped buckets dp_time holds the all-reduce,
    # of which the reduce-scatter half and the all-gather at gather_ratio move (dp_sync_s's rule)
    transfer = dp_time.sum(axis=1)
    if dp_overlap is not None and dp_overlap[1]:
        transfer = transfer / 2 * (1.0 + dp_overlap[3])
    return SimResult(config, sched, float(iteration), float(compute_s), float(transfer.max()),
                     busy.tolist(), ((static + act_peak) / GiB).tolist(), (static / GiB).tolist(),
                     (act_peak / GiB).tolist(), inflight.tolist(), len(uniq),
                     g.dev, g.kind, g.mb, g.chunk, start, end, alloc, free, dp_start, dp_end,
                     step_s=step.tolist())


def _aligned_ready(g, p: int, v: int, end) -> np.ndarray:
    """(p, v) when Megatron-Core's interleaved schedule launches each chunk's gradient sync with --overlap-grad-reduce
    and --align-grad-reduce (both on by default): in backward_step_helper_postprocess, `pipeline_parallel_rank`
    backward steps after the chunk's last micro-batch's backward (virtual_microbatch_id - pipeline_parallel_rank), and
    the chunks not launched by then after the device's last backward ("Launch any remaining grad reductions"),
    NVIDIA/Megatron-LM@d98e8a64 megatron/core/pipeline_parallel/schedules.py; start_grad_sync launches all of a
    chunk's buckets at once (training.py sets grad_sync_func only with align_grad_reduce)."""
    out = np.zeros((p, v))
    for d in range(p):
        idx = np.flatnonzero((g.dev == d) & (g.kind == B))      # the device's backward steps, in order
        for c in range(v):
            out[d, c] = end[idx[aligned_sync_step(g.chunk[idx], d, c)]]
    return out


def _overlapped_dp(grad_last, b_last, f_first: float, allreduce, distributed: bool, param_gather: bool,
                   gather_ratio: float, pieces) -> tuple[float, float]:
    """One device's data-parallel sync under --overlap-grad-reduce: (start, end).

    Each chunk's reduction (the all-reduce, or its reduce-scatter half with the distributed optimizer) is issued
    in `pieces[c]` equal buckets evenly over the chunk's last backward op (ending at grad_last[c], lasting
    b_last[c]); all buckets of the device share one stream, in order. The all-gather half (distributed optimizer)
    follows, gather_ratio of the reduce-scatter (param_gather_ratio: it moves the parameters): with
    --overlap-param-gather only its exposed part behind the next iteration's first forward of the device (exposed_s
    over f_first, as the estimate), else all of it."""
    t, first = 0.0, None
    for c in np.argsort(grad_last):
        n = int(pieces[c])
        red = allreduce[c] / 2 if distributed else allreduce[c]
        s_c = grad_last[c] - b_last[c]
        for k in range(1, n + 1):
            ready = s_c + k * b_last[c] / n
            first = ready if first is None else first
            t = max(t, ready) + red / n
    end = max(t, float(grad_last.max()))
    if distributed:
        ag = float(np.sum(allreduce)) / 2 * gather_ratio
        end += float(exposed_s(ag, f_first, int(np.sum(pieces)))) if param_gather else ag
    return float(first), float(end)


def simulate_uniform(schedule: str, p: int, m: int, vpp: int = 1, *, f: float = 1.0, b: float = 2.0,
                     w: float = 0.0, recompute: float = 0.0, comm: float = 0.0,
                     recompute_in_bubbles: bool = False, blocking_p2p: bool = False,
                     rendezvous_p2p: bool = False, pipeline_engine: str = "megatron",
                     async_p2p: bool = False, pytorch: bool = False) -> SimResult:
    """Uniform stages: per *device* times f, b (w and recompute included in b), split evenly over chunks;
    every p2p hop between devices takes `comm`. Activation memory: 1 byte per device-layer-set and
    micro-batch (so `inflight` and activation peaks read in 1F1B's units). pytorch: PyTorch pipelining's order where
    it differs (V-ZB, torchtitan's: orders.build)."""
    v = chunks_per_device(schedule, vpp)
    _check_engine(pipeline_engine, schedule, blocking_p2p or rendezvous_p2p or async_p2p)
    sched = build(schedule, p, m, vpp, recompute=recompute > 0, early_recompute=recompute_in_bubbles,
                  times=(f / v, b / v, w / v), pytorch=pytorch)
    dur = np.zeros((p, v, 4))
    bb = b - recompute
    if sched.split:
        dur[:, :, B], dur[:, :, W] = (bb - w) / v, w / v
    else:
        dur[:, :, B] = bb / v
    dur[:, :, F] = f / v
    dur[:, :, R] = recompute / v
    S = p * v
    st = sched.stage_of()
    dev_of = np.empty(S, np.int64)
    dev_of[st.ravel()] = np.repeat(np.arange(p), v)
    cross = np.r_[False, dev_of[1:] != dev_of[:-1]]          # edge s-1 -> s crosses devices
    lat_f = np.where(cross, comm, 0.0)[None, :]
    cross_b = np.r_[dev_of[:-1] != dev_of[1:], False]         # edge s+1 -> s
    lat_b = np.where(cross_b, comm, 0.0)[None, :]
    act = np.full((p, v), 1.0 / v) * GiB
    return _simulate_core(sched, dur, lat_f, lat_b, np.zeros((p, v)), act, np.zeros((p, v)), np.zeros(p),
                          blocking_p2p=blocking_p2p, rendezvous_p2p=rendezvous_p2p, pipeline_engine=pipeline_engine,
                          mcore_1f1b=_mcore_lock_step(pipeline_engine, schedule, p,
                                                      blocking_p2p or rendezvous_p2p or async_p2p,
                                                      recompute_in_bubbles))


def _mcore_lock_step(pipeline_engine: str, schedule: str, p: int, p2p_variant: bool, early_recompute: bool) -> bool:
    """Whether a plan's pipeline runs 1F1B with every p2p call waited for its transfers (mcore.py): the megatron
    engine's 1F1B with pp > 1, unless a p2p variant is asked for or Mario's early recompute reorders it. ZeRO-3 plans
    (torchtitan: PyTorch pipelining's Schedule1F1B) too: its steady state fuses each send with the next receive and
    waits on both before computing (pytorch/pytorch@00722e648b74 torch/distributed/pipelining/schedules.py,
    Schedule1F1B._step_microbatches: _wait_batch_p2p(_batch_p2p(fwd_sends + bwd_recvs)), the same for bwd_sends +
    fwd_recvs), Megatron-Core's send_forward_recv_backward / send_backward_recv_forward; only its warm-up and
    cool-down sends are waited one op later, which Megatron-Core's streams replay as waited at once (an upper bound:
    an earlier wait only adds a constraint). The variants (async_p2p: sends overlap the sender's next op, the
    simulator's model before Nov 27; blocking_p2p; rendezvous_p2p) stay available for comparison."""
    return (pipeline_engine == "megatron" and schedule == "1f1b" and p > 1 and not p2p_variant
            and not early_recompute)


def _check_engine(pipeline_engine: str, schedule: str, p2p_variant: bool = False) -> None:
    if pipeline_engine not in PIPELINE_ENGINES:
        raise ValueError(f"unknown pipeline engine {pipeline_engine!r}; one of {', '.join(PIPELINE_ENGINES)}")
    if pipeline_engine == "deepspeed" and schedule != "1f1b":
        raise ValueError(f"DeepSpeed's pipeline engine runs only its 1F1B TrainSchedule, not {schedule}")
    if pipeline_engine == "deepspeed" and p2p_variant:
        raise ValueError("async / blocking / rendezvous p2p are variants of Megatron's p2p; the deepspeed engine has "
                         "its own")


def _builder_times(st: list, p: int, v: int) -> tuple[float, float, float]:
    """Per-chunk (f, b, w) a V-ZB order is built from: the seed's avg_then_mid (runtime.py), each device's chunk
    mean, the upper median of those over devices."""
    return tuple(np.sort(np.array([[s.forward, s.backward, s.weight_grad] for s in st]), axis=0)[p // 2] / v)


def simulate_stage_times(schedule: str, p: int, m: int, vpp: int, st: list, pytorch: bool = False) -> SimResult:
    """Per-rank StageTimes (as ComputeModel.stage_times returns them: embedding extra on rank 0, output
    layer on rank p-1), placed on chunks as `simulate` places them; zero communication, no all-reduce.
    The judge of schedules.stage_compute_time (non-uniform stages); pytorch as stage_compute_time's."""
    v = chunks_per_device(schedule, vpp)
    rc_ops = any(s.recompute > 0 for s in st)
    sched = build(schedule, p, m, vpp, recompute=rc_ops, times=_builder_times(st, p, v), pytorch=pytorch)
    dur = _chunk_times(st, p, v, sched.stage_of(), sched.split, rc_ops)
    z = np.zeros((1, p * v))
    zp = np.zeros((p, v))
    return _simulate_core(sched, dur, z, z, zp, zp, zp, np.zeros(p))


# ------------------------------------------------------------------------------------ real plans

def chunk_params(model, cfg: ParallelConfig, p: int, v: int, stage_of: np.ndarray) -> np.ndarray:
    """(p, v) parameters per GPU per chunk (tensor shard), embedding with stage 0, output with the last."""
    if cfg.uneven:      # Megatron-Core's uneven first / last stage: each chunk its own layer count
        out = np.array(cfg.chunk_layers(model.num_layers), float) * model.layer_params() / cfg.tp
    else:
        L = model.num_layers // cfg.pp
        out = np.full((p, v), L / v * model.layer_params() / cfg.tp)
    S = p * v
    d0, c0 = np.argwhere(stage_of == 0)[0]
    dl, cl = np.argwhere(stage_of == S - 1)[0]
    out[d0, c0] += model.embedding_params() / cfg.tp
    out[dl, cl] += model.output_params() / cfg.tp
    if model.tied_embeddings and dl != d0:       # Megatron keeps a copy of the word embedding there
        out[dl, cl] += model.vocab_size * model.hidden_size / cfg.tp
    return out


def _chunk_times(st: list, p: int, v: int, stage_of: np.ndarray, split: bool, rc_ops: bool,
                 layers: np.ndarray | None = None, rc_layers: np.ndarray | None = None) -> np.ndarray:
    """(p, v, 4) op durations from per-device StageTimes. `layers` (p, v): transformer layers of each chunk when
    the stages are uneven (Megatron-Core's first / last stage counts); then the per-layer time (the least per-layer
    time of any device: a middle device's, which holds no embedding or output layer) runs on each chunk by its
    layer count and each device's remainder (embedding, output layer and loss) goes where the even case puts it.
    `rc_layers` (p, v): block recompute's re-run layers of each chunk; a device's recompute goes to its chunks by
    those counts, not by their layers."""
    arr = np.array([[s.forward, s.backward, s.weight_grad, s.recompute] for s in st])    # (p, 4)
    dl, cl = np.argwhere(stage_of == p * v - 1)[0]
    per = place_chunk_times(arr, v, (int(dl), int(cl)), layers, rc_layers)
    f, b, w, rc = per[..., 0], per[..., 1], per[..., 2], per[..., 3]
    dur = np.zeros((p, v, 4))
    dur[..., F] = f
    bb = b - rc if rc_ops else b
    dur[..., R] = rc if rc_ops else 0.0
    if split:
        dur[..., B], dur[..., W] = np.maximum(bb - w, 0.0), w
    else:
        dur[..., B] = bb
    return dur


def _node_table(spec, cfg: ParallelConfig, mapping, layout, assign, nodes=None) -> tuple[np.ndarray, np.ndarray]:
    """(node[stage, dp_rank], gpu[stage, dp_rank]) of tensor rank 0 of every pipeline worker."""
    if mapping is None:
        layout = layout or default_layout(cfg, spec.cluster.gpus_per_node)
        if assign is None:
            assign = np.arange(layout.blocks).reshape(layout.rows, layout.cols)
        if layout.blocks * layout.span > (spec.cluster.nodes if nodes is None else len(nodes) * layout.span):
            raise ValueError(f"{cfg.label()} needs {layout.blocks} nodes, the cluster has {spec.cluster.nodes}")
        # assign indexes the problem's candidate nodes (MappingProblem.nodes), by default all of them
        nodes = (np.arange(0, spec.cluster.nodes - layout.span + 1, layout.span) if nodes is None
                 else np.asarray(nodes))
        mapping = worker_table(layout, np.asarray(assign), cfg.tp, nodes, cfg.cp)
    node = np.full((cfg.pp, cfg.dp), -1, np.int64)
    gpu = np.full((cfg.pp, cfg.dp), -1, np.int64)
    for wkr in mapping:
        s, r = int(wkr["stage"]), int(wkr["dp_rank"])
        if int(wkr.get("tp_rank", 0)) == 0 and int(wkr.get("cp_rank", 0)) == 0:
            node[s, r], gpu[s, r] = int(wkr["node"]), int(wkr["gpu"])
    if (node < 0).any():
        raise ValueError("mapping does not place every (stage, dp_rank) worker")
    if node.max() >= spec.cluster.nodes:
        raise ValueError(f"mapping uses node {node.max()}, the cluster has {spec.cluster.nodes}")
    return node, gpu


def simulate(spec, config: ParallelConfig, mapping=None, *, costs: Costs | None = None, layout=None,
             assign=None, nodes=None, recompute_in_bubbles: bool = False, overlap_dp: bool = False,
             blocking_p2p: bool = False, rendezvous_p2p: bool = False,
             pipeline_engine: str | None = None, async_p2p: bool = False) -> SimResult:
    """Simulate one plan. The mapping is a worker table ([{stage, dp_rank, node, ...}], a solution's), or
    layout + assign (+ nodes: the physical node of each index assign uses, MappingProblem.nodes; default
    0..N-1), or neither (Megatron rank order on nodes 0..). pipeline_engine (default: the spec's
    training.pipeline_engine): "deepspeed" replays DeepSpeed's TrainSchedule instruction by instruction
    (simulate.deepspeed; blocking_p2p / rendezvous_p2p / async_p2p, variants of Megatron's p2p, then do not apply).
    With the megatron engine, 1F1B runs Megatron-Core's waited p2p calls (mcore.py) and interleaved without
    overlap_p2p_comm holds each sender (blocking); async_p2p lets every send overlap the sender's next op instead.
    Raises ValueError for plans it cannot run."""
    cfg = config
    costs = costs or default_costs(spec.cluster)
    model, cl, tr = spec.model, spec.cluster, spec.training
    pipeline_engine = pipeline_engine or tr.pipeline_engine
    _check_engine(pipeline_engine, cfg.schedule, blocking_p2p or rendezvous_p2p or async_p2p)
    # interleaved without overlap_p2p_comm (training.overlap.p2p false): Megatron waits on every p2p batch
    blocking_p2p = blocking_p2p or (pipeline_engine == "megatron" and p2p_blocking(spec, cfg) and not async_p2p)
    p, m = cfg.pp, cfg.num_microbatches
    v = chunks_per_device(cfg.schedule, cfg.vpp)
    if cfg.uneven:
        if cfg.schedule in V_SHAPES:
            raise ValueError("uneven first / last stages are Megatron-Core's, for its schedules, not V-shapes")
        chunk_layers = np.array(cfg.chunk_layers(model.num_layers), float)   # ValueError as Megatron-Core would
    elif model.num_layers % p or (model.num_layers // p) % v:
        raise ValueError(f"{model.num_layers} layers do not split into {p} stages x {v} chunks")
    else:
        chunk_layers = None
    st = overlapped_stage_times(spec, cfg, costs)      # less the TP communication --tp-comm-overlap hides
    rc_ops = cfg.recompute != "none" and any(s.recompute > 0 for s in st)
    sched = build(cfg.schedule, p, m, cfg.vpp, recompute=rc_ops, early_recompute=recompute_in_bubbles,
                  times=_builder_times(st, p, v), pytorch=cfg.zero == 3,   # ZeRO-3: PyTorch pipelining's schedules
                  model=(model.hidden_size, model.num_attention_heads, tr.seq_length))
    stage_of = sched.stage_of()
    block = cfg.recompute == "block"          # the first N layers of each chunk re-run, not a share of the device's
    rc_layers = np.array(cfg.recomputed_chunk_layers(model.num_layers), float) if block else None
    dur = _chunk_times(st, p, v, stage_of, sched.split, rc_ops, chunk_layers, rc_layers if rc_ops else None)

    # ---- p2p on the mapped links (the one-way times of planner.costs.iteration, as build_problem's)
    node, _gpu = _node_table(spec, cfg, mapping, layout, assign, nodes)
    b_rep = int(np.sum(node[0] == node[0, 0]))           # replicas of a stage per node
    msg = p2p_message_bytes(spec, cfg)
    share = p2p_share(spec, cfg, b_rep)
    intra = p2p_intra_s(spec, msg, costs)
    bw = block_bandwidth(cl.bandwidth, block_span(spec, cfg))     # build_problem's links between blocks

    def one_way(a, b):
        if a == b:
            return intra
        return p2p_inter_s(spec, msg, bw[a, b], costs, share)

    S = p * v
    dev_of = np.empty(S, np.int64)
    dev_of[stage_of.ravel()] = np.repeat(np.arange(p), v)
    lat_f = np.zeros((cfg.dp, S))
    lat_b = np.zeros((cfg.dp, S))
    for r in range(cfg.dp):
        for s in range(1, S):
            d0, d1 = dev_of[s - 1], dev_of[s]
            if d0 != d1:
                lat_f[r, s] = one_way(node[d0, r], node[d1, r])        # activation s-1 -> s
                lat_b[r, s - 1] = one_way(node[d1, r], node[d0, r])    # gradient s -> s-1

    # ---- data-parallel all-reduce per device (per chunk for overlap), build_problem's ring formula
    params = chunk_params(model, cfg, p, v, stage_of)
    dp_time = np.zeros((p, v))
    if cfg.dp * cfg.cp > 1:          # over dp * cp (Megatron-Core's dp_cp group)
        for d in range(p):
            nodes_d, counts = np.unique(node[d], return_counts=True)
            bd, K = int(counts.max()), len(nodes_d)
            # NCCL's inter-node ring joins the nodes in the communicator's rank order (dp_rank order):
            # the distinct nodes by first dp_rank
            pair = ring_slowest_GBps(bw, list(dict.fromkeys(int(n) for n in node[d])))
            if cfg.zero == 3:
                # ZeRO-3: the exposed all-gathers / reduce-scatters of each micro-batch lengthen its F and B ops
                # (pp = 1), or the once-per-iteration gather and scatter follow the device's last backward (pp > 1)
                f_e, b_e, once = fsdp_exposed_parts(spec, cfg, costs, st, d, bd, K, pair)
                dur[d, :, F] += f_e / v
                dur[d, :, B] += b_e / v
                dp_time[d, 0] = once
                continue
            for c in range(v):
                dp_time[d, c] = dp_allreduce_s(spec, cfg, costs, params[d, c], bd, K, pair)

    # ---- --overlap-grad-reduce: buckets per chunk (rank 0's first chunk only, as Megatron-Core; dp_bucket_count)
    ov = overlap_of(spec)
    dp_overlap = None
    if cfg.zero == 3:
        overlap_dp = False       # FSDP2's own overlap is in the exposed parts above
    elif ov.grad_reduce and cfg.dp * cfg.cp > 1:
        pieces = np.ones((p, v), np.int64)
        d0, c0 = np.argwhere(stage_of == 0)[0]
        pieces[d0, c0] = dp_bucket_count(spec, cfg, first_chunk_params(model, cfg), True)
        dp_overlap = (pieces, cfg.zero >= 1, ov.param_gather, param_gather_ratio(spec, cfg),
                      aligned_grad_sync(spec, cfg))
    elif cfg.zero in (1, 2):
        # no bucketed overlap: each chunk's whole sync, its reduce-scatter and the parameter all-gather (dp_sync_s)
        dp_time = dp_sync_s(spec, cfg, dp_time)

    # ---- tied-embedding all-reduce between the devices of the first and the last stage (as build_problem)
    emb = None
    dl = int(dev_of[S - 1])
    if tied_embedding_reduced(model, cfg):      # then the last stage is not on device 0 (not a V-shape)
        t_emb = 0.0
        for r in range(cfg.dp):
            a_, b_ = int(node[0, r]), int(node[dl, r])
            if a_ == b_:
                t = tied_embedding_intra_s(spec, cfg, costs)
            else:
                t = tied_embedding_inter_s(spec, cfg, costs, min(bw[a_, b_], bw[b_, a_]), share)
            t_emb = max(t_emb, t)
        emb = (0, dl, t_emb)

    # ---- memory: the estimator's static parts with parameters where the schedule puts them
    static = np.zeros(p)
    work = np.zeros(p)
    logits_total = 0.0
    tr_s, cfg_s = shard_view(tr, cfg)       # a context-parallel rank stores a sequence shard's activations
    for d in range(p):
        mb_ = cp_stage_memory(spec, cfg, costs, d)
        per_param = (mb_.weights + mb_.gradients + mb_.optimizer) / max(stage_params(model, cfg, d), 1.0)
        static[d] = per_param * params[d].sum() + mb_.overhead
        logits_total += mb_.logits
        # the estimator's backward working set of one layer (with recompute: the rebuilt layer inside it) is live
        # during a backward only; what it counts beyond that and the scheduled layer activations (embedding and
        # output-layer inputs, a learned estimator's correction and safety headroom) stays on the device
        work[d] = mb_.transient
        static[d] += max(0.0, mb_.total - mb_.weights - mb_.gradients - mb_.optimizer - mb_.overhead - mb_.logits
                         - mb_.transient - stage_activation_bytes(model, tr_s, cfg_s, d))
    dl, _cl = np.argwhere(stage_of == S - 1)[0]
    static[dl] += logits_total
    L = model.num_layers // cfg.pp
    layer_act = stored_layer_bytes(model, tr_s, cfg_s)
    per_chunk = np.full((p, v), L / v) if chunk_layers is None else chunk_layers
    act = np.array(chunk_stored_bytes(model, tr_s, cfg_s))       # each chunk's own bytes (block: its two kinds)
    transient = np.repeat(work[:, None], v, axis=1)
    if rc_ops and recompute_in_bubbles:
        # Mario's early recompute rebuilds a chunk's layers in a bubble: the others besides the one in the working set
        # stay live until its backward
        full_layer = layer_activation_bytes(model, tr_s, _no_recompute(cfg_s))
        transient += (full_layer - layer_act) * np.maximum((rc_layers if block else per_chunk) - 1.0, 0.0)
    step = np.array([getattr(s, "step", 0.0) for s in st])
    mc = _mcore_lock_step(pipeline_engine, cfg.schedule, p, blocking_p2p or rendezvous_p2p or async_p2p,
                          recompute_in_bubbles)
    res = _simulate_core(sched, dur, lat_f, lat_b, dp_time, act, transient, static, overlap_dp, cfg, step,
                         blocking_p2p, rendezvous_p2p, pipeline_engine, emb, dp_overlap, mc)
    if cfg.cp > 1:      # the ops' durations include it (stage_times); kept apart for the timeline
        res.cp_exposed_s = [(s.cp_forward, s.cp_backward) for s in st]
    return res


def _no_recompute(cfg: ParallelConfig) -> ParallelConfig:
    from dataclasses import replace
    return replace(cfg, recompute="none", recompute_layers=None)
