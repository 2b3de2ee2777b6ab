"""Critical-path iteration time (Pipette eqs. 3-6, generalised to our schedules) and the estimate.

T = compute(schedule, bubbles) + (m/pp) * slowest pipeline's p2p path + slowest data-parallel ring
(each row's ring after its backward ends, less the slack it has over stage 0) + slowest tied-embedding
gradient all-reduce (GPT: first and last stage, after the DP sync; Megatron's finalize_model_grads).
`build_problem` folds everything the mapping does not change into a constant, so that the exact
solver, the annealer and `estimate` all score a mapping with MappingProblem.objective.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.config import ParallelConfig
from planner.costs import Costs, default_costs
from planner.costs.comm import p2p_time, ring_allreduce_time
from planner.costs.compute import BYTES
from planner.costs.memory import GiB, MemoryBreakdown, stage_params
from planner.mapping.problem import Layout, MappingProblem, layouts
from planner.costs.pipeline import V_SHAPES, p2p_hops, stage_compute_time


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


def memory_limit_GiB(spec) -> float:
    return spec.cluster.gpu.memory_GiB * (1.0 - spec.search.memory_margin)


def stage_memory(spec, cfg: ParallelConfig, costs: Costs) -> list[MemoryBreakdown]:
    return [costs.memory.stage_memory(spec.model, spec.cluster, spec.training, cfg, s) for s in range(cfg.pp)]


def compute_const(spec, cfg: ParallelConfig, costs: Costs, st=None) -> float:
    """Compute part of the iteration (bubbles included): mapping-independent, so with the same value in
    every MappingProblem of the config it is a valid lower bound for any of its mappings.
    Steady state at the slowest stage, fill and drain at each stage's own time (stage_compute_time)."""
    st = st or costs.compute.stage_times(spec.model, spec.cluster, spec.training, cfg)
    comp = stage_compute_time(cfg.schedule, cfg.pp, cfg.num_microbatches, cfg.vpp, [s.forward for s in st],
                              [s.backward for s in st], [s.weight_grad for s in st])
    # once per iteration: optimizer step and fixed overheads (the slowest stage's); mapping-independent
    return comp + max(getattr(s, "step", 0.0) for s in st)


def build_problem(spec, cfg: ParallelConfig, layout: Layout, costs: Costs | None = None,
                  bandwidth: np.ndarray | None = None, nodes: np.ndarray | None = None) -> MappingProblem:
    costs = costs or default_costs(spec.cluster)
    cl, tr, model = spec.cluster, spec.training, spec.model
    bw = cl.bandwidth if bandwidth is None else bandwidth
    nodes = np.arange(cl.nodes) if nodes is None else np.asarray(nodes)
    B = bw[np.ix_(nodes, nodes)]
    N = len(nodes)
    pp, m, tp = cfg.pp, cfg.num_microbatches, cfg.tp
    st = costs.compute.stage_times(model, cl, tr, cfg)
    const = compute_const(spec, cfg, costs, st)

    # pipeline p2p: activations of one micro-batch, scattered over the tensor group
    eff = costs.comm.inter_efficiency
    share = cl.rail_share(layout.b * tp)
    msg = tr.seq_length * cfg.micro_batch_size * model.hidden_size * BYTES[tr.precision] / tp
    trav, wraps = p2p_hops(cfg.schedule, pp, cfg.vpp, m, tr.pipeline_engine)
    coef = m / pp
    with np.errstate(divide="ignore"):
        one_way = cl.inter.latency_us * 1e-6 + msg / (np.where(B > 0, B, np.inf) * 1e9 * eff * share)
    hop = coef * trav * (one_way + one_way.T)
    intra_hop = 2 * p2p_time(msg, cl.intra.bandwidth_GBps * costs.comm.intra_efficiency, cl.intra.latency_us)
    if pp > 1:
        const += coef * trav * (pp - layout.rows) * intra_hop
    wrap = None
    if wraps and pp > 1:
        if layout.rows > 1:
            wrap = coef * wraps * (one_way + one_way.T)
        else:
            const += coef * wraps * intra_hop
    np.fill_diagonal(hop, 0.0)

    # data parallel: per row, one NCCL ring over the b replicas in each of its K nodes, limited by the
    # row's slowest inter-node link of the ring (CommModel.dp_allreduce_time); dp_link[i][n, q] is that time
    # if n-q is the slowest link, and MappingProblem.dp_costs takes the ring's links in column (rank)
    # order, as NCCL's connectRings does; less the slack over stage 0
    R, K, b = layout.rows, layout.cols, layout.b
    dp_base = np.zeros(R)
    dp_link = np.zeros((R, N, N))
    if cfg.dp > 1:
        gbytes = costs.comm.grad_bytes
        slack_unit = min(s.backward for s in st) / max(1, cfg.vpp if cfg.schedule == "interleaved" else 1)
        pair_bw = np.minimum(B, B.T)
        for i in range(R):
            stages = range(i * layout.a, (i + 1) * layout.a)
            nbytes = max(stage_params(model, cfg, s) for s in stages) * gbytes
            slack = i * layout.a * slack_unit
            if K > 1:
                dp_base[i] = -slack
                with np.errstate(divide="ignore"):
                    dp_link[i] = costs.comm.dp_allreduce_time(nbytes, b, K, tp, cl, np.where(pair_bw > 0, pair_bw, np.inf))
                np.fill_diagonal(dp_link[i], 0.0)
            else:
                dp_base[i] = costs.comm.dp_allreduce_time(nbytes, b, 1, tp, cl) - slack
    # tied embeddings (GPT): after the DP sync, each column's first- and last-stage GPUs all-reduce the word
    # embedding's gradient (vocab x hidden / tp elements; 2 ranks; Megatron's _allreduce_embedding_grads,
    # DeepSpeed's _exec_reduce_tied_grads). V-shapes keep both ends on device 0: nothing to reduce
    emb = None
    if model.tied_embeddings and pp > 1 and cfg.schedule not in V_SHAPES:
        ebytes = costs.comm.tied_embedding_bytes(model, tp)
        if layout.rows > 1:
            pair = np.minimum(B, B.T)
            with np.errstate(divide="ignore"):
                emb = ring_allreduce_time(ebytes, 2, np.where(pair > 0, pair, np.inf) * eff * share,
                                          cl.inter.latency_us)
            np.fill_diagonal(emb, 0.0)
        else:                                  # both ends in one node: NVLink, mapping-independent
            const += costs.comm.intra_allreduce_time(ebytes, 2, cl)
    return MappingProblem(layout, nodes, hop, wrap, dp_base, dp_link, const, emb)



def evaluate(spec, cfg: ParallelConfig, problem: MappingProblem, assign: np.ndarray,
             costs: Costs | None = None) -> Estimate:
    costs = costs or default_costs(spec.cluster)
    t = problem.objective(assign)
    path = float(problem.path_costs(assign).max())
    dpc = float(problem.dp_costs(assign).max())
    emb = float(problem.emb_costs(assign).max())
    tokens = spec.training.global_batch_size * spec.training.seq_length
    flops = spec.model.model_flops_per_token(spec.training.seq_length) * tokens
    peak = spec.cluster.gpu.peak_flops(spec.training.precision) * cfg.num_gpus
    return Estimate(t, tokens / t, flops / (t * peak), problem.const, path, dpc,
                    stage_memory(spec, cfg, costs), memory_limit_GiB(spec), emb)


def default_layout(cfg: ParallelConfig, gpus_per_node: int) -> Layout:
    """The layout Megatron's rank order (tp -> dp -> pp) produces on consecutive nodes."""
    opts = layouts(cfg.tp, cfg.pp, cfg.dp, gpus_per_node)
    if not opts:
        raise ValueError(f"{cfg.label()} does not tile onto nodes of {gpus_per_node} GPUs")
    # rank order fills a node with data-parallel replicas first
    return max(opts, key=lambda L: L.b)
