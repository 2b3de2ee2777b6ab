"""Context parallelism (Megatron-Core --context-parallel-size, Transformer Engine's context-parallel attention).

The one home of what cp changes; the estimate, the mapping objective (through stage_times) and the simulator call
these. A cp rank holds 1/cp of every sequence (2 * cp chunks, rank r keeping chunks r and 2cp-1-r: the causal load
balancing), so everything but attention is a cp = 1 rank's work on s/cp tokens (`shard_view`):
- GEMMs, element-wise kernels, tensor-parallel collectives, the output layer and the loss on s/cp tokens;
- activations of a sequence shard (fused attention: everything stored is linear in s);
- the weights are replicated over cp, and Megatron-Core reduces gradients and shards the distributed optimizer over
  the data-parallel-with-context-parallel group (Megatron-LM @ d98e8a64: distributed_data_parallel.py dp_cp_group,
  finalize_model_grads.py get_data_parallel_group(with_context_parallel=True)): dp * cp replicas for ZeRO.
What the shard view misses, added here:
- attention: each rank computes 1/cp of the causal attention of the whole sequence (cp times the causal FLOPs of its
  s/cp shard). ring (p2p): cp steps of one (s/cp x s/(2cp))-sized block pair each, at the fused kernel's efficiency
  for s/cp; all_to_all (a2a): the kernel runs on the whole sequence with heads/cp heads (its efficiency at s);
- ring: K and V of the shard (kv heads / tp; ZeRO-3: query heads / tp, `kv_shard_bytes`) go round the ring, cp - 1
  transfers, each overlapped with one step's attention (TE AttnFuncWithCPAndKVP2P sends step i+1's K/V while step
  i computes); backward sends K/V and dK/dV. Only what a step's compute does not hide counts:
  (cp - 1) * max(0, transfer - step);
- all_to_all: Q, K, V before and the output after attention (backward: dO before, dQ, dK, dV after) between
  sequence and head sharding, (cp - 1) / cp of each tensor leaves the GPU, not overlapped;
- memory: the ring's receive buffers and per-step outputs (TE keeps each step's output in fp32 until the layer's
  last step), or the all-to-all's copies, on top of the backward working set (an analytical term beside the fitted
  estimator, which sees only the shard view: docs/notes/context_parallel.md); allgather: PyTorch's gathered K/V and
  fp32 gradient buffers (`allgather_buffer_bytes`).
The cp group lies inside a node (tp * cp GPUs of a block, docs/ARCHITECTURE.md): its transfers use the node's
NVLink (the cluster's intra-node link).
With ZeRO-3 (torchtitan's FSDP2) the same shard view holds: torchtitan shards the parameters over dp_shard x cp
(pytorch/torchtitan @ 9dec370a parallel_dims.py, the `dp_shard_cp` mesh that parallelize_llama.py gives apply_fsdp;
the `fsdp` mesh of dp_shard * cp at 238fa995), i.e. over the shard view's dp * cp replicas. TE's all_to_all is not
torchtitan's and is refused. Its exchange, PyTorch's experimental context parallel with torchtitan's default rotate
method, is mode `allgather` (`allgather_layer_times`, read from the source, docs/notes/context_parallel.md "PyTorch's
context parallel"); `ring` on a ZeRO-3 plan keeps TE's ring model (torchtitan's `alltoall` rotation, approximated)
with K/V at the query heads, as torchtitan repeats them before SDPA.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from planner.config import ParallelConfig
from planner.costs.comm import p2p_time
from planner.costs.compute import BYTES, attention_backend, fused_attention_efficiency

MODES = ("ring", "all_to_all", "allgather")
MEGATRON_CP_COMM = {"ring": "p2p", "all_to_all": "a2a"}     # --cp-comm-type
# torchtitan's experimental.context_parallel_rotate_method (9dec370a config_manager.py; [parallelism] at 238fa995)
TORCHTITAN_ROTATE = {"allgather": "allgather", "ring": "alltoall"}


def shard_view(training, cfg: ParallelConfig):
    """(training, cfg) as a cp = 1 rank that sees one shard: seq_length / cp tokens, dp * cp replicas. The same
    objects when cp = 1, so nothing changes for configurations without context parallelism."""
    if cfg.cp == 1:
        return training, cfg
    return _shard_view(training, cfg)


@functools.lru_cache(maxsize=8192)
def _shard_view(training, cfg: ParallelConfig):
    # both are frozen dataclasses; the search asks for the same views many times (memory and time of each config)
    return (replace(training, seq_length=training.seq_length // cfg.cp),
            replace(cfg, dp=cfg.dp * cfg.cp, cp=1))


def all_to_all_ok(model, cfg: ParallelConfig) -> bool:
    """TE's a2a (AttnFuncWithCPAndQKVOA2A) asserts 'num_heads % cp_size == 0 for Q, K, V' on the local heads."""
    return (model.num_attention_heads // cfg.tp) % cfg.cp == 0 and (model.num_kv_heads // cfg.tp) % cfg.cp == 0


def legal_modes(spec, cfg: ParallelConfig) -> tuple[str, ...]:
    """The exchange modes the spec allows for this config (training.cp_comm; auto: every legal one). ZeRO-3 plans are
    torchtitan's: allgather (PyTorch's CP, auto's only choice) or ring (kept as TE's model); ZeRO 0-2 plans are
    Megatron-Core's: ring or all_to_all."""
    want = spec.training.cp_comm
    if cfg.zero == 3:
        return ("allgather",) if want in ("auto", "allgather") else ("ring",) if want == "ring" else ()
    modes = ("ring", "all_to_all") if want == "auto" else (want,)
    return tuple(m for m in modes if m == "ring" or m == "all_to_all" and all_to_all_ok(spec.model, cfg))


def load_balance_refusal(seq_length: int, cp: int) -> str | None:
    """The one rule on the sequence both frameworks share: causal load balancing cuts it into 2 * cp chunks."""
    if cp > 1 and seq_length % (2 * cp):
        return (f"seq_length {seq_length} is not a multiple of 2 * cp = {2 * cp} (causal load balancing: "
                "Megatron-Core and PyTorch's context parallel both cut a sequence into 2 * cp chunks)")
    return None


def node_fit_refusal(gpus_per_node: int, cp: int) -> str | None:
    """The placement's rule on cp alone: some tp (a divisor of the node) makes tp x cp part of a node or whole
    nodes (docs/ARCHITECTURE.md, the mapping model)."""
    gpn = gpus_per_node
    if cp > 1 and not any(gpn % (t * cp) == 0 or (t * cp) % gpn == 0 for t in range(1, gpn + 1) if gpn % t == 0):
        return f"cp={cp}: no tp makes tp x cp part of a node or whole nodes of {gpn} GPUs (docs/ARCHITECTURE.md)"
    return None


def cp_alone_legal(seq_length: int, gpus_per_node: int, cp: int) -> bool:
    """cp passes the rules on cp alone: the node fit and causal load balancing (2 * cp divides seq_length)."""
    return not node_fit_refusal(gpus_per_node, cp) and not load_balance_refusal(seq_length, cp)


def auto_context_parallel(seq_length: int, gpus_per_node: int, num_gpus: int) -> tuple[int, ...]:
    """search.context_parallel auto's degrees above 1: the powers of two 2 .. num_gpus (Megatron-Core / NeMo recipes
    use powers of two) that pass the rules on cp alone, the node fit and causal load balancing (2 * cp divides
    seq_length)."""
    out, c = [], 2
    while c <= num_gpus:
        if cp_alone_legal(seq_length, gpus_per_node, c):
            out.append(c)
        c *= 2
    return tuple(out)


def dropped_degrees(seq_length: int, gpus_per_node: int, degrees) -> str:
    """The degrees > 1 of a search.context_parallel list that the rules on cp alone drop, in words ('' if none):
    what the solution's note and the memory advice say when a list searched no cp > 1."""
    bits = []
    seq = [c for c in degrees
           if c > 1 and not node_fit_refusal(gpus_per_node, c) and load_balance_refusal(seq_length, c)]
    if seq:
        bits.append(f"cp {', '.join(map(str, seq))} dropped: seq_length {seq_length} is not a multiple of 2 * cp "
                    "(causal load balancing)")
    node = [c for c in degrees if c > 1 and node_fit_refusal(gpus_per_node, c)]
    if node:
        bits.append(f"cp {', '.join(map(str, node))} dropped: no tp makes tp x cp part of a node or whole nodes of "
                    f"{gpus_per_node} GPUs")
    return "; ".join(bits)


def cp_refusal(spec, cfg: ParallelConfig) -> str | None:
    """Why the plan's framework (Megatron-Core for ZeRO 0-2, torchtitan for ZeRO-3) or the planner's placement cannot
    run this cp, or None."""
    cp, tr, gpn = cfg.cp, spec.training, spec.cluster.gpus_per_node
    if cp == 1:
        return None
    w = cfg.tp * cp
    if gpn % w and w % gpn:
        return (f"tp*cp = {w} neither divides gpus_per_node={gpn} nor is a multiple of it: a tp x cp group fills "
                "part of one node or whole nodes (docs/ARCHITECTURE.md)")
    if load_balance_refusal(tr.seq_length, cp):
        return load_balance_refusal(tr.seq_length, cp)
    if tr.attention != "fused":
        return "context parallelism runs inside fused attention (Transformer Engine), not training.attention: unfused"
    if cfg.zero == 3 and cfg.dp_shard:
        return ("HSDP (dp_shard) with context parallelism, torchtitan's dp_replicate x (dp_shard x cp), is not "
                "modelled: ZeRO-3 with cp shards over all of dp x cp (docs/notes/context_parallel.md)")
    if not legal_modes(spec, cfg) and cfg.zero == 3:
        return ("training.cp_comm all_to_all is Transformer Engine's exchange (Megatron-Core); ZeRO-3 plans are "
                "torchtitan's, whose context parallelism exchanges K/V around the cp group (cp_comm allgather, "
                "ring or auto)")
    if not legal_modes(spec, cfg) and tr.cp_comm == "allgather":
        return (f"training.cp_comm allgather is PyTorch's context parallel (torchtitan), planned with ZeRO-3 only; "
                f"zero={cfg.zero} plans are Megatron-Core's (cp_comm ring, all_to_all or auto)")
    if not legal_modes(spec, cfg):
        return (f"training.cp_comm all_to_all needs the {spec.model.num_attention_heads // cfg.tp} local heads and "
                f"{spec.model.num_kv_heads // cfg.tp} local kv heads (tp={cfg.tp}) divisible by cp={cp} (TE's a2a)")
    return None


@dataclass(frozen=True)
class CPLayerTimes:
    """What context parallelism adds to one layer, one micro-batch, on one GPU, over its shard view (seconds)."""

    forward: float
    """Extra forward time: the rest of the attention (cp - 1 more blocks' worth) and the exposed exchange."""
    backward: float
    """Extra backward time, the same for the attention backward and its exchange."""
    exposed_forward: float
    """The exposed exchange inside `forward` (ring: past what the steps hide; all_to_all: all of it)."""
    exposed_backward: float
    """The exposed exchange inside `backward`."""


ZERO = CPLayerTimes(0.0, 0.0, 0.0, 0.0)


def kv_shard_bytes(model, training, cfg: ParallelConfig) -> float:
    """K and V of one shard on one tensor rank, one micro-batch: what one ring step sends and what its buffers hold
    (16-bit; fp8 training keeps attention in bf16). `training` and `cfg` are the real ones (cp > 1). The one home of
    the ring's K/V width: Megatron-Core plans (ZeRO 0-2) exchange the kv heads (TE passes GQA K/V unrepeated);
    ZeRO-3 plans are torchtitan's, whose Llama repeats K/V to the query heads (repeat_kv) before SDPA and so before
    CP, as allgather_kv_bytes counts."""
    s = training.seq_length // cfg.cp
    width = model.hidden_size if cfg.zero == 3 else model.kv_channels
    return 2 * s * cfg.micro_batch_size * width / cfg.tp * BYTES[training.precision]


def a2a_bytes(model, training, cfg: ParallelConfig) -> float:
    """Bytes one GPU sends in the all-to-alls of one layer's forward (the backward sends as much): Q, K, V and the
    output of its shard, (cp - 1) / cp of each."""
    s = training.seq_length // cfg.cp
    width = 2 * model.hidden_size + 2 * model.kv_channels      # q + out, k + v
    return (cfg.cp - 1) / cfg.cp * s * cfg.micro_batch_size * width / cfg.tp * BYTES[training.precision]


def dp_ring(spec, cfg: ParallelConfig, replicas_per_node: int, nodes: int) -> tuple[int, int, int]:
    """The data-parallel-with-context-parallel ring of a row: (its GPUs per node, its nodes, span). Megatron-Core
    reduces gradients, and torchtitan's FSDP2 gathers and reduce-scatters, over dp * cp GPUs: each replica brings its
    cp ranks (the same parameters), so a node holds replicas_per_node * cp GPUs of each ring; when a tp x cp group
    spans `span` nodes its cp ranks spread over them. (b, K, 1) for cp = 1."""
    per, span = replicas_per_node * cfg.cp, 1
    if per * cfg.tp > spec.cluster.gpus_per_node:
        span = per * cfg.tp // spec.cluster.gpus_per_node
        per, nodes = per // span, nodes * span
    return per, nodes, span


def ring_pair(pair_GBps, nodes: int, span: int):
    """The measured slowest link the ring's time takes, or None (nominal): only when the ring crosses blocks."""
    return pair_GBps if nodes > 1 and span == 1 or nodes > span else None


def spans_nodes(spec, cfg: ParallelConfig) -> bool:
    """The tp x cp group is wider than a node (whole consecutive nodes, rank order): its exchange crosses nodes."""
    return cfg.tp * cfg.cp > spec.cluster.gpus_per_node


def link_s(spec, cfg: ParallelConfig, nbytes: float, costs) -> float:
    """One transfer of the exchange. Inside a node: NVLink at the compute model's efficiency. A group across nodes:
    its slowest step crosses nodes, on the cluster's nominal inter-node rail with every GPU of the node sending
    (the crossing links inside a block do not depend on the mapping; a measured matrix's spread is not used)."""
    cl = spec.cluster
    if spans_nodes(spec, cfg):
        share = cl.rail_share(cl.gpus_per_node)
        return cl.inter.latency_us * 1e-6 + nbytes / (cl.inter.bandwidth_GBps * 1e9 * costs.comm.inter_efficiency
                                                       * share)
    return p2p_time(nbytes, cl.intra.bandwidth_GBps * costs.comm.intra_efficiency, cl.intra.latency_us)


def layer_times(spec, cfg: ParallelConfig, costs, mode: str | None = None) -> CPLayerTimes:
    """CPLayerTimes of `mode` (default: cp_mode); ZERO for cp = 1."""
    if cfg.cp == 1:
        return ZERO
    mode = mode or cp_mode(spec, cfg, costs)
    tr, c1 = shard_view(spec.training, cfg)
    p = costs.compute.layer_parts(spec.model, spec.cluster, tr, c1)
    a_f, a_b = p["attn"], p["attn_backward"]          # the shard's own causal attention (fused kernel)
    cp = cfg.cp
    if mode == "allgather":
        return allgather_layer_times(spec, cfg, costs, a_f, a_b)
    if mode == "ring":
        step = link_s(spec, cfg, kv_shard_bytes(spec.model, spec.training, cfg), costs)
        ef = (cp - 1) * max(0.0, step - a_f)
        eb = (cp - 1) * max(0.0, 2 * step - a_b)        # K/V and dK/dV each step
        return CPLayerTimes((cp - 1) * a_f + ef, (cp - 1) * a_b + eb, ef, eb)
    gpu = spec.cluster.gpu.type
    be = attention_backend(spec.training, cfg)
    r = (fused_attention_efficiency(gpu, spec.training.seq_length // cp, backend=be)
         / fused_attention_efficiency(gpu, spec.training.seq_length, backend=be))
    comm = link_s(spec, cfg, a2a_bytes(spec.model, spec.training, cfg), costs)
    return CPLayerTimes((cp * r - 1) * a_f + comm, (cp * r - 1) * a_b + comm, comm, comm)


# --- allgather: PyTorch's experimental context parallel as torchtitan runs it -------------------------------------
# Read from pytorch/pytorch torch/distributed/tensor/experimental/_attention.py (the late-2024 form of
# _templated_ring_attention / _templated_ring_attention_backward / _SDPAMerger / _AllGatherRotater, which the stored
# commit 0123248a still has; the pinned torch 1963fc83 of torchtitan's Dec 2024 page was not readable here) and
# pytorch/torchtitan @ 9dec370a (models/llama/model.py, utils.py, parallelize_llama.py). Per layer, per cp rank:
# - K and V enter SDPA after repeat_kv, so they carry the local *query* heads (heads / tp), not the kv heads;
# - forward: step 0 is the causal SDPA of the local 2-chunk shard; the all-gather of every rank's K/V is issued
#   before it and waited after it (one collective, overlapped with step 0 only); steps 1..cp-1 are non-causal SDPA
#   calls of (s/cp x s/2cp) or (s/2cp x s/cp) with load balancing (_cp_options.enable_load_balance, default True):
#   each the FLOPs of one causal shard step, as the ring; every step's output is merged in fp32 (_SDPAMerger,
#   convert_to_f32 True) and the merged output cast back;
# - backward: the K/V all-gather again (behind step 0's SDPA backward), cp SDPA backward calls, dQ/dK/dV
#   accumulated in fp32, and the fp32 dK/dV sent to the next rank after every step with a permute (an all-to-all,
#   whatever the rotate method): each hidden behind the next step's SDPA backward, the last one waited after the
#   loop (exposed in full);
# - SDPA backend: torchtitan enters sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION]) under CP: flash, as
#   without CP. Step 0 runs at the causal kernel's efficiency for s/cp (the shard view's attention); steps 1..cp-1
#   at the unmasked kernel's efficiency for s/2cp, the rectangle's shorter side (a (s/cp x s/2cp) call has the
#   k-loop of an s/2cp square and twice its q-blocks, a (s/2cp x s/cp) call its q-blocks and twice its k-loop:
#   neither less efficient than the square; the measured and published figures are squares);
# - torchtitan compiles each TransformerBlock with fullgraph=True, so the ring loop is traced and Inductor fuses
#   each merge / accumulation chain into one kernel (`kernels: eager` counts PyTorch's op-by-op passes instead).
# Bytes per element of a local output (b * s/cp * hidden/tp), moved by the merge / accumulation kernels:
AG_MERGE_FUSED = 10.0     # a merge step: read the fp32 running output and the bf16 step output, write fp32
AG_MERGE_EAGER = 38.0     # cast to fp32 (6), out - block (12), sigmoid-weighted product (8), subtract (12)
AG_FWD_FIXED_FUSED = 20.0   # K, V made contiguous + concatenated for the all-gather (8), first and last casts (12)
AG_FWD_FIXED_EAGER = 28.0   # contiguous (8) and cat (8) as separate copies, first and last casts (12)
AG_BWD_STEP_FUSED = 30.0  # dK, dV: received fp32 + bf16 step gradient -> fp32 send buffer (20); dQ += (10)
AG_BWD_STEP_EAGER = 52.0  # dK, dV partial_update adds and cats (26), cat for sending (16), dQ += (10)
AG_BWD_FIXED_FUSED = 26.0   # K, V contiguous + cat (8), final dQ cast (6) and dK/dV cast (12)
AG_BWD_FIXED_EAGER = 46.0   # zero-initialised fp32 accumulators (12), contiguous + cat (16), final casts (18)


def allgather_kv_bytes(model, training, cfg: ParallelConfig) -> float:
    """K and V of one shard as PyTorch's CP sends them: b * s/cp tokens at the local query heads (torchtitan repeats
    the kv heads before SDPA), 16-bit (fp8 training keeps attention in bf16): kv_shard_bytes of a ZeRO-3 plan, the
    one home of that width."""
    return kv_shard_bytes(model, training, replace(cfg, zero=3))


def allgather_layer_times(spec, cfg: ParallelConfig, costs, a_f: float, a_b: float) -> CPLayerTimes:
    """CPLayerTimes of torchtitan's `allgather` rotation (comment block above): the SDPA steps (the shard's causal
    attention, then cp - 1 unmasked steps of its FLOPs at the unmasked kernel's efficiency), the fp32 merge /
    accumulation passes at the HBM rate, the all-gather's part past step 0 (forward and backward), and the dK/dV
    permutes' part past each next step plus the last in full."""
    model, tr, cp = spec.model, spec.training, cfg.cp
    out = (tr.seq_length // cp) * cfg.micro_batch_size * model.hidden_size / cfg.tp     # local output elements
    eager = getattr(tr, "kernels", "fused") == "eager"
    merge, fwd_fixed, bstep, bwd_fixed = ((AG_MERGE_EAGER, AG_FWD_FIXED_EAGER, AG_BWD_STEP_EAGER, AG_BWD_FIXED_EAGER)
                                          if eager else (AG_MERGE_FUSED, AG_FWD_FIXED_FUSED, AG_BWD_STEP_FUSED,
                                                         AG_BWD_FIXED_FUSED))
    gpu = spec.cluster.gpu.type
    s = tr.seq_length // cp
    be = attention_backend(tr, cfg)
    rate = (fused_attention_efficiency(gpu, s, backend=be)
            / fused_attention_efficiency(gpu, s // 2, causal=False, backend=be))
    step_f, step_b = a_f * rate, a_b * rate          # a non-causal step: a causal shard step's FLOPs
    # the merges are GPU work: at the slowest of the plan's GPUs, as a_f / a_b are (gpu.variability; 1 without it)
    hbm = costs.compute.hbm_GBps * 1e9 / costs.compute.straggler(spec.cluster, cfg)
    elem_f = out * (fwd_fixed + (cp - 1) * merge) / hbm
    elem_b = out * (bwd_fixed + cp * bstep) / hbm
    kv = allgather_kv_bytes(model, tr, cfg)
    gather = (cp - 1) * link_s(spec, cfg, kv, costs)        # ring all-gather: cp - 1 transfers of one shard
    dkv = link_s(spec, cfg, kv * 4 / BYTES[tr.precision], costs)     # dK and dV in fp32
    ef = max(0.0, gather - a_f)
    eb = max(0.0, gather - a_b) + (cp - 1) * max(0.0, dkv - step_b) + dkv
    return CPLayerTimes((cp - 1) * step_f + elem_f + ef, (cp - 1) * step_b + elem_b + eb, ef, eb)


def allgather_buffer_bytes(spec, cfg: ParallelConfig) -> float:
    """What PyTorch's CP holds during one layer's attention backward beyond the shard view (its larger phase): every
    rank's K/V gathered (cp shards), the fp32 dQ accumulator, three fp32 dK/dV buffers (the one being accumulated,
    the one being sent, the one being received) and one step's bf16 dQ/dK/dV. Forward holds less: the gathered
    K/V, the fp32 running output and one step's output."""
    model, tr = spec.model, spec.training
    out = (tr.seq_length // cfg.cp) * cfg.micro_batch_size * model.hidden_size / cfg.tp
    by = BYTES[tr.precision]
    return cfg.cp * allgather_kv_bytes(model, tr, cfg) + out * (4 + 3 * 2 * 4 + 3 * by)


def cp_mode(spec, cfg: ParallelConfig, costs) -> str | None:
    """The exchange a config runs: training.cp_comm, or for auto the legal mode with the smaller added time (ring
    on a tie). None for cp = 1. ValueError for a cp the plan's framework cannot run (cp_refusal): `simulate` and
    stage_times do not check it first, and charging such a plan some other mode would hide the refusal."""
    if cfg.cp == 1:
        return None
    return _cp_mode(spec, cfg, costs)


@functools.lru_cache(maxsize=4096)
def _cp_mode(spec, cfg: ParallelConfig, costs) -> str:
    # memoised: the memory screen asks once per pipeline stage of every enumerated config (stage_memory), and for
    # auto each answer costs the layer times of every legal mode (tryout 7, F8: 36k calls, most of a 128-GPU solve's
    # wall). All three are frozen: spec hashes by identity (held here, so its id is not reused), cfg and costs by value.
    why = cp_refusal(spec, cfg)       # every rule (unfused attention, placement, ...), not only "no legal mode"
    if why:
        raise ValueError(why)
    modes = legal_modes(spec, cfg)
    if len(modes) == 1:
        return modes[0]
    return min(modes, key=lambda m: (_total(layer_times(spec, cfg, costs, m)), MODES.index(m)))


def _total(t: CPLayerTimes) -> float:
    return t.forward + t.backward


def with_cp_times(spec, cfg: ParallelConfig, costs, st: list) -> list:
    """The shard view's StageTimes plus the context-parallel attention and exchange of every layer a stage holds.
    Recompute (Megatron's selective: the attention core; full: the layer; block: the first N layers of each chunk)
    re-runs the attention and its exchange.
    torchtitan's per-op selective policy (ZeRO-3, cfg.op_sac) saves SDPA's output (compute.op_sac_recompute_s: "SDPA
    is saved, not rerun"), and under CP the SDPA call is the whole exchange loop: nothing of it is re-run."""
    if cfg.cp == 1:
        return st
    from planner.costs.compute import recomputed_layers
    from planner.costs.memory import stage_layer_count
    t = layer_times(spec, cfg, costs)
    rerun = cfg.recompute in ("full", "block") or (cfg.recompute == "selective" and not cfg.op_sac)
    rc = t.forward if rerun else 0.0
    out = []
    for i, s in enumerate(st):
        L = stage_layer_count(spec.model, cfg, i)
        if cfg.recompute != "block":
            out.append(replace(s, forward=s.forward + L * t.forward, backward=s.backward + L * (t.backward + rc),
                               recompute=s.recompute + L * rc, cp_forward=L * t.exposed_forward,
                               cp_backward=L * (t.exposed_backward + (t.exposed_forward if rc else 0.0))))
            continue
        R = recomputed_layers(spec.model, cfg, i)      # block: the first N layers of each chunk re-run it
        out.append(replace(s, forward=s.forward + L * t.forward, backward=s.backward + L * t.backward + R * rc,
                           recompute=s.recompute + R * rc, cp_forward=L * t.exposed_forward,
                           cp_backward=L * t.exposed_backward + R * t.exposed_forward))
    return out


def buffer_bytes(spec, cfg: ParallelConfig, mode: str) -> float:
    """Memory the exchange holds during one layer's attention, one micro-batch, beyond the shard view's terms.
    ring: forward, the K/V receive buffer and every step's output in fp32 (TE keeps out_per_step until the last
    step; a causal rank's steps produce 1 + (cp - 1) / 2 shards of output on average); backward, the K/V receive
    and dK/dV send and receive buffers; the larger of the two. all_to_all: the exchanged copies of Q, K, V and the
    output (16-bit). allgather: allgather_buffer_bytes."""
    if cfg.cp == 1:
        return 0.0
    if mode == "allgather":
        return allgather_buffer_bytes(spec, cfg)
    model, tr = spec.model, spec.training
    s, b, t = tr.seq_length // cfg.cp, cfg.micro_batch_size, cfg.tp
    kv = kv_shard_bytes(model, tr, cfg)
    if mode == "ring":
        outs = 4.0 * s * b * model.hidden_size / t * (1 + (cfg.cp - 1) / 2)
        return max(kv + outs, 3 * kv)
    return 2.0 * s * b * (2 * model.hidden_size + 2 * model.kv_channels) / t * BYTES[tr.precision]


def stage_memory(spec, cfg: ParallelConfig, costs, stage: int):
    """The memory estimator on the shard view, plus the exchange's buffers as backward working set (transient)."""
    tr, c1 = shard_view(spec.training, cfg)
    m = costs.memory.stage_memory(spec.model, spec.cluster, tr, c1, stage)
    if cfg.cp == 1:
        return m
    return replace(m, transient=m.transient + buffer_bytes(spec, cfg, cp_mode(spec, cfg, costs)))


def stage_memories(spec, cfg: ParallelConfig, costs):
    """stage_memory of stages 0 .. pp-1, one at a time (iteration.stage_memory is their list): a caller that only
    needs to know whether a config fits may stop at the first stage over the limit (screen.feasible_configs)."""
    return (stage_memory(spec, cfg, costs, s) for s in range(cfg.pp))
