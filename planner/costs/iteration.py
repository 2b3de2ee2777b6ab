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

from dataclasses import dataclass, field

import numpy as np

from planner.config import ParallelConfig
from planner.costs import Costs, default_costs
from planner.costs.comm import p2p_time, ring_allreduce_time
from planner.costs.compute import BYTES
from planner.costs.memory import GiB, MemoryBreakdown, stage_params
from planner.costs.pipeline import V_SHAPES, p2p_hops, stage_compute_time
from planner.mapping.problem import Layout, MappingProblem, layouts


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


# ---- communication terms of one iteration. build_problem evaluates them on every candidate link at once
# (matrices), the simulator on the mapped links one by one: one definition, the same float operations in
# the same order, so the estimate and the simulation agree to the bit on the same plan.

def p2p_message_bytes(spec, cfg: ParallelConfig) -> float:
    """One micro-batch's activations (or their gradient) sent between adjacent stages, scattered over the
    tensor group."""
    tr, model = spec.training, spec.model
    return tr.seq_length * cfg.micro_batch_size * model.hidden_size * BYTES[tr.precision] / cfg.tp


def p2p_share(spec, cfg: ParallelConfig, replicas_per_node: int) -> float:
    """Share of a rail each sender gets: the node's replicas of a stage, each with its tensor group, send at once."""
    return spec.cluster.rail_share(replicas_per_node * cfg.tp)


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
    candidate links; used only when the ring leaves the node). CommModel.dp_allreduce_time has the formula."""
    nbytes = params * costs.comm.grad_bytes
    return costs.comm.dp_allreduce_time(nbytes, replicas_per_node, nodes, cfg.tp, spec.cluster,
                                        pair_GBps if nodes > 1 else None)


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
    ebytes = costs.comm.tied_embedding_bytes(spec.model, cfg.tp)
    return costs.comm.intra_allreduce_time(ebytes, 2, spec.cluster)


def tied_embedding_inter_s(spec, cfg: ParallelConfig, costs: Costs, pair_GBps, share: float):
    """The tied-embedding all-reduce between two nodes joined by pair_GBps per rail (a scalar or a matrix)."""
    ebytes = costs.comm.tied_embedding_bytes(spec.model, cfg.tp)
    return ring_allreduce_time(ebytes, 2, pair_GBps * costs.comm.inter_efficiency * share,
                               spec.cluster.inter.latency_us)


def build_problem(spec, cfg: ParallelConfig, layout: Layout, costs: Costs | None = None,
                  bandwidth: np.ndarray | None = None, nodes: np.ndarray | None = None) -> MappingProblem:
    costs = costs or default_costs(spec.cluster)
    cl, tr, model = spec.cluster, spec.training, spec.model
    bw = cl.bandwidth if bandwidth is None else bandwidth
    nodes = np.arange(cl.nodes) if nodes is None else np.asarray(nodes)
    B = bw[np.ix_(nodes, nodes)]
    N = len(nodes)
    pp, m = cfg.pp, cfg.num_microbatches
    st = costs.compute.stage_times(model, cl, tr, cfg)
    const = compute_const(spec, cfg, costs, st)

    # pipeline p2p: activations of one micro-batch, scattered over the tensor group
    share = p2p_share(spec, cfg, layout.b)
    msg = p2p_message_bytes(spec, cfg)
    trav, wraps = p2p_hops(cfg.schedule, pp, cfg.vpp, m, tr.pipeline_engine)
    coef = m / pp
    with np.errstate(divide="ignore"):
        one_way = p2p_inter_s(spec, msg, np.where(B > 0, B, np.inf), costs, share)
    hop = coef * trav * (one_way + one_way.T)
    intra_hop = 2 * p2p_intra_s(spec, msg, costs)
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
    pair_bw = np.minimum(B, B.T)            # a ring's link runs at its slower direction
    pair_bw = np.where(pair_bw > 0, pair_bw, np.inf)    # no link (the diagonal): zeroed after use
    if cfg.dp > 1:
        slack_unit = min(s.backward for s in st) / max(1, cfg.vpp if cfg.schedule == "interleaved" else 1)
        for i in range(R):
            stages = range(i * layout.a, (i + 1) * layout.a)
            params = max(stage_params(model, cfg, s) for s in stages)
            slack = i * layout.a * slack_unit
            if K > 1:
                dp_base[i] = -slack
                with np.errstate(divide="ignore"):
                    dp_link[i] = dp_allreduce_s(spec, cfg, costs, params, b, K, pair_bw)
                np.fill_diagonal(dp_link[i], 0.0)
            else:
                dp_base[i] = dp_allreduce_s(spec, cfg, costs, params, b, 1) - slack
    # tied embeddings: per column, between its first- and last-stage GPUs (tied_embedding_reduced)
    emb = None
    if tied_embedding_reduced(model, cfg):
        if layout.rows > 1:
            with np.errstate(divide="ignore"):
                emb = tied_embedding_inter_s(spec, cfg, costs, pair_bw, share)
            np.fill_diagonal(emb, 0.0)
        else:                                  # both ends in one node: NVLink, mapping-independent
            const += tied_embedding_intra_s(spec, cfg, costs)
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
