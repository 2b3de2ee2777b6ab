"""Plan spec: ties a model, a cluster, a training job, the search space and the solver settings."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from planner.config import PIPELINE_ENGINES, RECOMPUTE, SCHEDULES, TORCHTITAN_SCHEDULES, ZERO_STAGES
from planner.errors import SpecError
from planner.io import load_yaml
from planner.spec.cluster import PRECISIONS, ClusterSpec, parse_cluster
from planner.spec.fields import DEFAULT, MAX_INT, FieldError, Fields
from planner.spec.model import ModelSpec, parse_model

OPTIMIZERS = ("adam", "adamw", "sgd")
METHODS = ("auto", "exact", "anneal")
ROBUST = ("none", "worst", "mean")
ATTENTION = ("fused", "unfused")
ATTENTION_BACKENDS = ("auto", "flash2", "cudnn")
CP_COMM = ("ring", "all_to_all", "allgather", "auto")
KERNELS = ("fused", "eager")
FP8_RECIPES = ("delayed", "tensorwise")


@dataclass(frozen=True, kw_only=True)
class OverlapSpec:
    """Which communication overlaps with compute (Megatron-Core's flags; only the exposed part is charged).

    Defaults: what NeMo 2.0's Megatron-Core recipes run today (NVIDIA/NeMo@8cfedd72,
    nemo/collections/llm/recipes/llama3_70b.py and gpt3_175b.py: DistributedDataParallelConfig(overlap_grad_reduce=True,
    overlap_param_gather=True), MegatronCommOverlapCallback(tp_comm_overlap=True); Megatron-LM@d98e8a64
    megatron/training/arguments.py: overlap_p2p_comm on by default, forced off without the interleaved schedule).
    A run that predates these (vTrain, SC21, Korthikanti) declares them off (`OverlapSpec.none()`)."""

    grad_reduce: bool = True
    """--overlap-grad-reduce: the data-parallel gradient reduce(-scatter) runs bucket by bucket during the last
    micro-batch's backward; off: after it."""
    param_gather: bool = True
    """--overlap-param-gather (distributed optimizer, ZeRO >= 1, needs grad_reduce): the parameter all-gather runs
    under the next iteration's first forward; off: after the optimizer step. No effect without ZeRO."""
    p2p: bool = True
    """overlap_p2p_comm (Megatron-Core's default; --no-overlap-p2p-communication turns it off): pipeline sends and
    receives run while the next chunk computes. Megatron-Core honours it only with the interleaved schedule;
    off there: every send holds its GPU (the simulator's blocking p2p). Other schedules are unaffected."""
    tp_comm: bool = True
    """--tp-comm-overlap (Transformer Engine userbuffers): tensor-parallel all-gathers / reduce-scatters are split
    and pipelined with the layer's GEMMs. Needs sequence parallelism and tp > 1 (Megatron asserts it); no effect
    on other configurations."""
    tp_backward: bool = True
    """Megatron's asynchronous tensor-parallel communication in the backward of a column-parallel layer (QKV, fc1):
    the input-gradient all-reduce runs during the weight-gradient GEMM; with sequence parallelism the all-gather of
    the saved input runs during the input-gradient GEMM and the reduce-scatter of the input gradient during the
    weight-gradient GEMM (Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication since Aug 2021, on unless
    --no-async-tensor-model-parallel-allreduce; Megatron-Core and Transformer Engine's Linear do the same). Off: every
    backward collective waits (Megatron-LM before Aug 2021: the SC21 runs). Where tp_comm (userbuffers) applies, it
    covers these collectives already."""
    bucket_size: int | None = None
    """--ddp-bucket-size, parameters per gradient bucket; None: Megatron-Core's default max(40M, 1M x dp).
    Only the first pipeline stage's first model chunk is bucketed (the rest: one bucket per chunk)."""

    def __post_init__(self):
        if self.param_gather and not self.grad_reduce:
            raise FieldError("param_gather", "needs grad_reduce (Megatron: 'Must use --overlap-param-gather with "
                             "--overlap-grad-reduce')")

    @classmethod
    def none(cls) -> OverlapSpec:
        """Every overlap off: the runs that predate them (vTrain, SC21, Korthikanti)."""
        return cls(grad_reduce=False, param_gather=False, p2p=False, tp_comm=False, tp_backward=False)

    @property
    def any(self) -> bool:
        return self.grad_reduce or self.param_gather or self.p2p or self.tp_comm or self.tp_backward


@dataclass(frozen=True, kw_only=True)
class TrainingSpec:
    """The training job: batch, sequence, numerics and budget."""

    global_batch_size: int
    """Sequences per optimizer step (= micro_batch_size * num_microbatches * dp)."""
    seq_length: int
    """Tokens per sequence."""
    precision: str = "bf16"
    """Compute precision, one of PRECISIONS; picks the GPU's peak and the bytes per value. fp8: Transformer Engine's
    FP8 training (bf16 weights and activations, fp32 master weights and Adam state, the transformer layers' GEMMs
    in fp8 with delayed scaling, attention in bf16); needs a GPU with FP8 tensor cores and a `gpu.peak_tflops.fp8`."""
    optimizer: str = "adam"
    """adam, adamw or sgd: sets the optimizer state per parameter."""
    tokens: float | None = None
    """Training budget in tokens, for time and cost to train; None: not reported."""
    pipeline_engine: str = "megatron"
    """How pipeline p2p is issued (config.PIPELINE_ENGINES): Megatron-LM's batched send/recv pairs, or
    DeepSpeed's PipelineEngine (its own 1F1B, separate blocking sends and receives)."""
    overlap: OverlapSpec = field(default_factory=OverlapSpec)
    """Communication overlapped with compute (OverlapSpec); the deepspeed engine overlaps none of it."""
    grad_reduce_in_fp32: bool = False
    """Data-parallel gradient reduction (and the tied-embedding all-reduce) in fp32, 4 bytes per gradient, instead of
    the 16-bit weights' 2 (fp32 plans reduce 4 bytes either way; costs/memory.py grad_reduce_bytes):
    Megatron-Core's DistributedDataParallelConfig.grad_reduce_in_fp32 (with the deepspeed engine: its
    communication_data_type fp32).
    Megatron-LM's training script forces it with --bf16 (NVIDIA/Megatron-LM core_r0.8.0 megatron/training/
    arguments.py: 'accumulate and all-reduce gradients in fp32 for bfloat16 data type'); Megatron-Bridge's and NeMo's
    performance recipes turn it off (Megatron-Bridge@c0b9a000 scripts/performance/configs/llama/
    llama3_llm_pretrain.py: cfg.ddp.grad_reduce_in_fp32 = False)."""
    p2p_scatter_gather: bool | None = None
    """Without sequence parallelism, each tensor-parallel rank sends only 1/tp of a stage's [s/cp, b, h] output to the
    next stage, which all-gathers it inside its node. Megatron-LM did so from Feb 2021 to Mar 2023
    (--scatter-gather-tensors-in-pipeline, on by default since NVIDIA/Megatron-LM@72e4230b; gone when the pipeline
    moved into megatron/core, 3c92fa93): the SC21 and Korthikanti et al. runs. Megatron-Core sends the whole tensor
    (Megatron-LM@d98e8a64 megatron/core/pipeline_parallel/schedules.py get_tensor_shapes divides the sequence by tp
    only with sequence_parallel). DeepSpeed's PipelineEngine partitions its sends over the tensor group
    (microsoft/DeepSpeed@38327e07 deepspeed/runtime/pipe/engine.py is_pipe_partitioned; the `pipeline.pipe_partitioned`
    config, default true, since c2074b34 of Nov 2023, always on before). None (left out): the engine's own behaviour,
    false for megatron and true for deepspeed (iteration.p2p_scatter_gather). With sequence parallelism the message is
    1/tp either way."""
    attention: str = "fused"
    """fused (FlashAttention-2/3, cuDNN fused attention through Transformer Engine: no s x s tensors kept, causal
    FLOPs at the fused kernels' efficiency) or unfused (Megatron's local softmax path that Korthikanti et al. 2022
    count: scores, softmax and dropout mask stored); one of ATTENTION. On a GPU without fused kernels (before Ampere:
    V100, P100, T4; cluster.fused_attention_refusal) a Spec runs unfused, as Megatron-LM's --transformer-impl local
    does there: left out of a spec file it means unfused on such a GPU, and `fused` stated there is refused."""
    attention_backend: str = "auto"
    """The fused attention kernel (training.attention fused), one of ATTENTION_BACKENDS: cudnn (cuDNN's fused
    attention: Transformer Engine's choice on Hopper, Megatron-Core --attention-backend fused; PyTorch 2.11's SDPA
    default there), flash2 (FlashAttention-2: TE's choice before Hopper, PyTorch SDPA's flash back end, first in its
    priority order in late 2024), or auto (flash2's efficiency: the level published H100 recipes bear out;
    costs.compute.attention_backend). For ZeRO-3 plans, torchtitan's, auto and flash2 both mean PyTorch's flash SDPA
    back end, charged as measured inside training steps on Hopper (sdpa_flash). Sets the kernel's efficiency
    (costs.compute FUSED_ATTENTION_EFFICIENCY); cudnn
    is cuDNN 9.19's measured speed (1.6-1.9x FlashAttention-2's on an H200), for stacks of that age."""
    cp_comm: str = "auto"
    """How context-parallel ranks exchange attention inputs (cp > 1), one of CP_COMM: ring (Megatron-Core
    --cp-comm-type p2p: K/V passed around the cp ring, overlapped with each step's attention), all_to_all
    (--cp-comm-type a2a, DeepSpeed-Ulysses style: Q, K, V and the output exchanged between sequence and heads, not
    overlapped; needs the local heads and kv heads divisible by cp), allgather (PyTorch's experimental context
    parallel with torchtitan's default rotate method `allgather`: ZeRO-3 plans only, needs 3 in search.zero), or auto
    (per configuration: for ZeRO 0-2 the one of ring and all_to_all the cost model finds faster, for ZeRO-3
    allgather; costs/context_parallel.cp_mode). The default is auto: a ZeRO-3 plan then gets torchtitan's own default
    (allgather), not TE's ring standing for its `alltoall` rotation, and a Megatron-Core plan ring unless all_to_all
    is cheaper."""
    kernels: str = "fused"
    """How the element-wise work of a layer runs (KERNELS). fused: Megatron-Core / Transformer Engine's fused norm,
    bias-activation and residual kernels (costs.compute ELEM_* bytes). eager: PyTorch eager mode as torchtitan runs
    its Llama block without torch.compile: RMSNorm, rotary embedding, repeat_kv, SiLU, the gate product, residual
    adds and every dtype cast each a separate kernel (costs.compute.eager_elementwise_bytes, counted from
    torchtitan's model code). Needs a Llama-style model (gated MLP) and bf16."""
    fp8_recipe: str = "delayed"
    """precision fp8 only: how Transformer Engine scales each fp8 tensor (Megatron-Core --fp8-recipe, FP8_RECIPES).
    delayed: the scale from a 1024-step amax history, the amax taken inside the cast kernel (Megatron-Core's
    default; NeMo's bf16_with_fp8_mixed). tensorwise: per-tensor current scaling (Megatron-Bridge's and NeMo 2.0's
    "fp8_cs" recipes, bf16_with_fp8_current_scaling_mixed): each tensor's amax is reduced before its cast, so the
    bf16 operand is read once more (costs.compute.fp8_cast_bytes) and no amax history is kept. The fp8 GEMMs run at
    the same speed (TE's GEMM profiling tutorial). ZeRO-3 plans are torchao's Float8 (torchtitan), tensorwise
    whatever this says."""
    fp8_param_gather: bool = False
    """precision fp8 only: the transformer layers' GEMM weights are Transformer Engine fp8 tensors (Megatron-Core
    --fp8-param-gather; Megatron-Bridge's FP8 current-scaling recipe sets it): per weight 1 fp8 byte in the
    distributed optimizer's param buffer and its 1-byte transpose, instead of the bf16 weight plus TE's cached fp8
    copy and transpose (costs/memory.py fp8_weight_copy_bytes). The fp32 main weights and gradients are as without it.
    Memory only: the all-gather time still counts 16-bit parameters. It needs the distributed optimizer (Megatron-LM
    asserts '--fp8-param-gather only supported with distributed optimizer, ...'): ZeRO-0 configurations are not
    searched, and search.zero must hold 1 or 2. ZeRO-3 plans (torchtitan's torchao Float8) are costed without it (their
    fp8 all-gather is fsdp_float8_all_gather); with search.zero [3] alone it is refused."""
    compile_loss: bool = True
    """ZeRO-3 plans (torchtitan's) with kernels fused: the loss F.cross_entropy(pred.float()) is torch.compile'd with
    the model, as torchtitan does since Feb 2025 (pytorch/torchtitan d1f62be7, bbb1b616; `[compile] components` with
    "loss"): its fp32 upcast, log-softmax and backward fuse, so each held micro-batch keeps its bf16 logits (2 bytes
    per logit) and the backward adds their bf16 gradient, where the eager loss keeps the fp32 log-softmax (4) and has
    8 bytes per logit live in its backward (costs/memory.py logits_bytes). false: torchtitan of Dec 2024 (9dec370a,
    the loss compile commented out) or eager kernels. Memory only; tp > 1 (loss_parallel's DTensor kernels) keeps
    the eager count. Other plans ignore it."""
    fsdp_float8_all_gather: bool = False
    """precision fp8 with ZeRO-3 only (torchtitan --float8.enable_fsdp_float8_all_gather, torchao's Float8Linear):
    FSDP2 casts each transformer block's Linear weights to fp8 before its all-gather, so they move and stay gathered
    at 1 byte instead of bf16's 2 (norms, embedding and output stay bf16; memory.fsdp_gather_bytes). ZeRO 0-2 plans
    are unaffected: with precision fp8 they are Transformer Engine's (Megatron-Core), ZeRO-3 plans torchao's Float8
    with tensorwise dynamic scaling, as torchtitan runs it (export writes its [quantize.linear.float8] table)."""


@dataclass(frozen=True, kw_only=True)
class SearchSpec:
    """The configuration space the search enumerates."""

    schedules: tuple = ("1f1b",)
    """Pipeline schedules to try (config.SCHEDULES); default 1F1B only: the others are searched only when listed."""
    recompute: tuple = ("none", "selective", "mlp", "block", "full")
    """Activation recomputation modes to try (config.RECOMPUTE)."""
    zero: tuple = (0, 1)
    """ZeRO stages to try (config.ZERO_STAGES); 3 = FSDP / ZeRO-3 as torchtitan's FSDP2 runs it (docs/notes/fsdp.md)."""
    dp_shard: tuple = (0,)
    """ZeRO-3 shard-group sizes to try (ParallelConfig.dp_shard): 0 = shard over all dp (FSDP), k > 1 = HSDP with
    k-way shard groups inside a node (those that divide dp are tried). `auto` = 0 and every divisor > 1 of
    gpus_per_node."""
    micro_batch_sizes: tuple | None = None
    """Micro-batch sizes to try; None: auto (1, 2, 4, 8, 16: those dividing each replica's batch, global_batch_size /
    dp)."""
    virtual_stages: tuple | None = None
    """Model chunks per device to try for the interleaved schedule, each >= 2; None (auto): 2 and every v that splits
    each stage's layers evenly (layers % (pp * v) == 0), up to one layer per chunk, as Megatron-Core recipes pick it
    (NeMo's run 5 to 20); search.space.virtual_stage_options."""
    sequence_parallel: tuple = (False, True)
    """Sequence parallelism off / on (only with tp > 1)."""
    tensor_parallel: tuple | None = None
    """Tensor-parallel degrees to try, each dividing gpus_per_node; None: every divisor of gpus_per_node."""
    memory_margin: float = 0.05
    """Fraction of GPU memory kept free (a soft margin against fragmentation and the unmodelled)."""
    top_k: int = 5
    """How many other plans the solution lists as `alternatives` (search/summary.py: the best of each structurally
    different plan first, then near-duplicates). It does not set how many candidates are simulated: the simulator
    re-ranks at most search.rerank.RERANK_MAX (5) distinct configs within RERANK_WITHIN (3%) of the best estimate,
    whatever top_k is."""
    uneven_stages: tuple = (0, 1, 2)
    """Uneven first / last pipeline stages to try (Megatron-Core --decoder-first/last-pipeline-num-layers): how
    many layers per model chunk the first and the last stage may hold fewer than a middle stage (search.space
    uneven_splits). `auto` = (0, 1, 2); `none` = () (even splits only)."""
    pipeline_parallel: tuple | None = None
    """Pipeline-parallel degrees to try; None (auto): every degree the GPUs and the layers allow (search.space)."""
    pipeline_split: tuple | None = None
    """The one pipeline split searched, as ParallelConfig's (first_stage_layers, last_stage_layers,
    account_embedding, account_loss): Megatron-Core's --decoder-first/last-pipeline-num-layers and
    --account-for-embedding/loss-in-pipeline-split, taken wherever it is legal; `planner import megatron` pins a
    run's split with it. None: the even split and search.uneven_stages."""
    context_parallel: tuple | None = (1,)
    """Context-parallel degrees to try (Megatron-Core --context-parallel-size); the tp * cp group fills part of a node
    or whole nodes. Default (1,): no context parallelism, the search space of specs written before it existed.
    None (`auto` in a file): 1 and every power of two from 2 up to the GPU count (the degrees Megatron-Core / NeMo
    recipes use) that is legal for the spec: 2 * cp divides seq_length (causal load balancing) and some tp makes
    tp * cp part of a node or whole nodes (search.space.context_parallel_options, resolved against the GPUs a search
    runs on); each configuration's own rules (heads for all_to_all, the exchange's framework) still apply."""


@dataclass(frozen=True, kw_only=True)
class SolverSpec:
    """How the mapping is solved."""

    method: str = "auto"
    """auto: the mapping portfolio (annealer, then the exact model up to 32 nodes; above it LNS, two-row re-solves at
    33-64 nodes, a reheat beyond); exact: CP-SAT alone; anneal: the annealer alone (docs/ARCHITECTURE.md)."""
    time_limit_s: float = 60.0
    """Seconds of limit: buys mapping.work.WORK_PER_S x this of deterministic work (CP-SAT deterministic time,
    annealer iterations), so the plan does not depend on the machine's load; the wall clock stops the search at this
    only as a safety stop (solver.stopped_by wall)."""
    seed: int = 0
    """Random seed (annealing, tie-breaks): the same spec and seed give the same plan."""
    robust: str = "none"
    """none, worst or mean over the cluster's bandwidth snapshots."""


@dataclass(frozen=True, eq=False, kw_only=True)
class Spec:
    """A planning problem: a model, a cluster, a training job, the search space and the solver settings."""

    name: str
    """Label of the plan; a spec file's default is its file name without extension."""
    model: ModelSpec
    """What is trained."""
    cluster: ClusterSpec
    """Where it is trained."""
    training: TrainingSpec
    """The training job."""
    search: SearchSpec = field(default_factory=SearchSpec)
    """The configuration space."""
    solver: SolverSpec = field(default_factory=SolverSpec)
    """The mapping solver's settings."""
    source: str | None = None
    """The spec file it was read from."""
    raw: dict | None = None
    """The resolved YAML (model and cluster inlined), for hashing (`digest`) and re-writing."""

    def __post_init__(self):
        from planner.spec.cluster import bf16_refusal, peak_refusal
        precision = self.training.precision
        why = (bf16_refusal(self.cluster.gpu) if precision == "bf16" else None) or peak_refusal(self.cluster.gpu,
                                                                                                precision)
        if why:
            raise FieldError("training.precision", why)
        # the attention a GPU without fused kernels runs (a spec file that states fused there is refused by
        # parse_spec, which knows what the file says; a Spec built in code, e.g. by a sweep or `size`, has the default)
        object.__setattr__(self, "training", attention_in_force(self.training, self.cluster.gpu))
        if self.training.kernels == "eager" and not self.model.gated_mlp:
            raise FieldError("training.kernels", "eager counts torchtitan's Llama block (RMSNorm, rotary, SwiGLU); "
                             f"model {self.model.name} has no gated MLP")

    def digest(self) -> str:
        blob = json.dumps(self.raw or {}, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def attention_in_force(training: TrainingSpec, gpu) -> TrainingSpec:
    """`training` with the attention it runs on `gpu`: unfused where the GPU has no fused kernel
    (cluster.fused_attention_refusal), as it stands elsewhere."""
    from dataclasses import replace

    from planner.spec.cluster import fused_attention_refusal
    if training.attention == "fused" and fused_attention_refusal(gpu):
        return replace(training, attention="unfused")
    return training


def _check_attention(file, data: dict, training: TrainingSpec, cluster: ClusterSpec) -> TrainingSpec:
    """training.attention against the cluster's GPU: fused stated for a GPU without fused kernels is refused (as is a
    fused kernel named in attention_backend); left out, it is unfused there (attention_in_force)."""
    from planner.spec.cluster import fused_attention_refusal
    why = fused_attention_refusal(cluster.gpu)
    if not why:
        return training
    tr = data.get("training")
    if isinstance(tr, dict) and tr.get("attention") == "fused":
        raise SpecError(file, "training.attention", f"fused: {why}. Use unfused, or leave training.attention out (on "
                        f"{cluster.gpu.type} it means unfused)")
    if training.attention_backend != "auto":
        raise SpecError(file, "training.attention_backend", f"{training.attention_backend} is a fused attention "
                        f"kernel: {why}; leave attention_backend out")
    return attention_in_force(training, cluster.gpu)


def _part(f: Fields, key: str, base: str):
    """A spec part is a path (relative to the spec) or an inline mapping."""
    v = f.raw(key)
    if isinstance(v, str):
        path = os.path.normpath(os.path.join(base, v))
        if not os.path.exists(path):
            raise f.error(key, f"file {path} does not exist")
        return load_yaml(path, f.file, field=f.path(key)), path, ""
    return v, f.file, key


def _cluster_part(f: Fields, base: str):
    """(raw data, ClusterSpec) of spec.cluster: a path, an inline cluster, or {path, gpus}: the first gpus /
    gpus_per_node nodes of a cluster file, as a sweep's cluster entry takes them (a run on part of a cluster:
    `planner import megatron` writes it)."""
    v = f.raw("cluster")
    if not (isinstance(v, dict) and "path" in v):
        cdata, cfile, cpre = _part(f, "cluster", base)
        return cdata, parse_cluster(cdata, cfile, cpre)
    g = f.sub("cluster")
    ref = g.str("path")
    gpus = g.int("gpus", None)
    g.done()
    path = os.path.normpath(os.path.join(base, ref))
    if not os.path.exists(path):
        raise g.error("path", f"file {path} does not exist")
    cl = parse_cluster(load_yaml(path, f.file, field="cluster.path"), path)
    if gpus is None or gpus == cl.num_gpus:
        return v, cl
    if gpus > cl.num_gpus or gpus % cl.gpus_per_node:
        what = (f"{gpus} GPUs is more than {cl.name}'s {cl.num_gpus}" if gpus > cl.num_gpus
                else f"{gpus} GPUs is not a whole number of {cl.name}'s nodes")
        raise g.error("gpus", f"{what} ({cl.gpus_per_node} GPUs each, {cl.nodes} nodes)")
    return v, cl.subset(list(range(gpus // cl.gpus_per_node)))


def load_model(path: str) -> ModelSpec:
    return parse_model(load_yaml(path), path)


def load_cluster(path: str) -> ClusterSpec:
    return parse_cluster(load_yaml(path), path)


def load_spec(path: str) -> Spec:
    data = load_yaml(path)
    return parse_spec(data, path)


def parse_spec(data, file: str | None = None) -> Spec:
    f = Fields(data, file)
    base = os.path.dirname(file) if file else "."
    name = f.str("name", os.path.splitext(os.path.basename(file))[0] if file else "plan")
    mdata, mfile, mpre = _part(f, "model", base)
    model = parse_model(mdata, mfile, mpre)
    cdata, cluster = _cluster_part(f, base)
    training = _parse_training(f.sub("training"))
    search = _parse_search(f.sub("search", {}), cluster)
    solver = _parse_solver(f.sub("solver", {}))
    f.raw("description", None)
    f.done()
    # rules on what the file asks the search for, not on a Spec object: the CLI's --pipeline-engine override
    # builds deepspeed Specs from files whose search lists other schedules, to simulate one 1F1B configuration
    other = [x for x in search.schedules if x != "1f1b"]
    if training.pipeline_engine == "deepspeed" and other:
        raise SpecError(file, "search.schedules", f"has {', '.join(other)}; training.pipeline_engine deepspeed "
                        "runs only its 1F1B TrainSchedule")
    resolved = _check_attention(file, data, training, cluster)
    _check_context_parallel(file, resolved, search, cluster)
    from planner.costs.compute import has_attention_backend  # the costs package is built on specs: lazily
    if training.attention_backend == "cudnn" and not has_attention_backend(cluster.gpu.type, "cudnn"):
        raise SpecError(file, "training.attention_backend", f"cudnn has no measured efficiency row for GPU type "
                        f"{cluster.gpu.type!r} (rows: H100, H200); use flash2 or auto")
    for z in (2, 3):
        if training.pipeline_engine == "deepspeed" and z in search.zero:
            # microsoft/DeepSpeed @ 38327e07f6cd39b63418f60cedd1651b0be3e7c3 deepspeed/runtime/pipe/engine.py asserts
            # zero_optimization_stage() < 2: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
            raise SpecError(file, "search.zero", f"has {z}; DeepSpeed's pipeline engine supports ZeRO stages 0 and 1 "
                            "only")
    if 3 in search.zero:
        bad = [x for x in search.schedules if x not in TORCHTITAN_SCHEDULES]
        if len(bad) == len(search.schedules):
            raise SpecError(file, "search.schedules", f"has only {', '.join(bad)}; ZeRO-3 plans (search.zero 3) "
                            f"run on torchtitan's schedules {sorted(TORCHTITAN_SCHEDULES)}")
    tr = data.get("training")
    if isinstance(tr, dict) and tr.get("fp8_recipe") == "delayed" and set(search.zero) == {3}:
        # the mirror of cp_comm all_to_all: ZeRO-3 plans are torchtitan's, whose torchao Float8 scales tensorwise
        raise SpecError(file, "training.fp8_recipe", "delayed is Transformer Engine's (Megatron-Core); search.zero "
                        "has only 3, whose plans are torchtitan's (torchao Float8, tensorwise scaling): use "
                        "tensorwise, or add 0, 1 or 2 to search.zero")
    if training.fp8_param_gather and set(search.zero) == {3}:
        # the mirror of fp8_recipe delayed: --fp8-param-gather is Transformer Engine's fp8 weights in Megatron-Core's
        # distributed optimizer; ZeRO-3 plans are torchtitan's (torchao Float8), whose fp8 all-gather is its own key
        raise SpecError(file, "training.fp8_param_gather", "is Transformer Engine's fp8 weights in Megatron-Core's "
                        "distributed optimizer (--fp8-param-gather); search.zero has only 3, whose plans are "
                        "torchtitan's (torchao Float8): use training.fsdp_float8_all_gather for fp8 all-gathers, or "
                        "add 1 or 2 to search.zero")
    if training.fp8_param_gather and not {1, 2} & set(search.zero):
        raise SpecError(file, "training.fp8_param_gather", f"needs Megatron-Core's distributed optimizer, ZeRO 1 or 2 "
                        f"(Megatron-LM megatron/training/arguments.py: '--fp8-param-gather only supported with "
                        f"distributed optimizer, torch fsdp2, megatron fsdp, or inference mode'); search.zero has "
                        f"{list(search.zero)} (add 1 or 2; ZeRO-3 plans are torchtitan's, which use "
                        "training.fsdp_float8_all_gather instead)")
    if search.dp_shard != (0,) and 3 not in search.zero:
        raise SpecError(file, "search.dp_shard", "sets HSDP shard groups, which need 3 in search.zero")
    raw_training = data.get("training")
    if resolved.attention != training.attention:
        # the spec means unfused on this GPU: its hash says so (specs whose meaning did not change keep theirs)
        raw_training = {**raw_training, "attention": resolved.attention}
    raw = {"name": name, "model": mdata, "cluster": cdata, "training": raw_training,
           "search": data.get("search"), "solver": data.get("solver")}
    return f.build(Spec, name=name, model=model, cluster=cluster, training=resolved, search=search, solver=solver,
                   source=file, raw=raw)


def _check_context_parallel(file, training: TrainingSpec, search: SearchSpec, cluster: ClusterSpec) -> None:
    """Rules on search.context_parallel that do not depend on the rest of the configuration (Megatron-LM @ d98e8a64,
    megatron/training/arguments.py: 'seq-length should be a multiple of 2 * context-parallel-size'; context
    parallelism runs inside Transformer Engine's fused attention, so the unfused path has none)."""
    from planner.costs.context_parallel import auto_context_parallel, load_balance_refusal, node_fit_refusal
    auto = search.context_parallel is None
    if auto:       # what the search will try on the whole cluster (search.space.context_parallel_options)
        cps = list(auto_context_parallel(training.seq_length, cluster.gpus_per_node, cluster.num_gpus))
    else:
        cps = [c for c in search.context_parallel if c > 1]
    if not cps:
        return
    gpn = cluster.gpus_per_node
    why = {}
    for c in cps:
        if node_fit_refusal(gpn, c):
            why[c] = node_fit_refusal(gpn, c)
        elif load_balance_refusal(training.seq_length, c):
            why[c] = f"cp={c}: training.{load_balance_refusal(training.seq_length, c)}"
    # a list with some legal value is searched over those (the search skips the others, context_parallel.cp_refusal,
    # and `estimate` explains each); only a list with none is refused
    if why and len(why) == len(cps) and 1 not in (search.context_parallel or (1,)):
        raise SpecError(file, "search.context_parallel", "; ".join(why.values()))
    cps = [c for c in cps if c not in why]
    if not cps:
        return
    if auto:       # the rules below name the list; auto's is the spec's legal degrees
        cps = f"auto, i.e. {cps}"
    if training.attention != "fused":
        from planner.spec.cluster import fused_attention_refusal
        gpu = (f" (the cluster's GPU {cluster.gpu.type} has no fused attention kernel, so the spec runs unfused)"
               if fused_attention_refusal(cluster.gpu) else "")
        raise SpecError(file, "search.context_parallel", f"has {cps}; context parallelism runs inside a fused "
                        f"attention kernel (Transformer Engine), not with training.attention: unfused{gpu}")
    if training.pipeline_engine == "deepspeed":
        raise SpecError(file, "search.context_parallel", f"has {cps}; the planner models Megatron-Core's context "
                        "parallelism, not with training.pipeline_engine: deepspeed")
    if training.pipeline_engine == "megatron" and training.p2p_scatter_gather:
        raise SpecError(file, "search.context_parallel", f"has {cps}; context parallelism is Megatron-Core's, whose "
                        "pipeline sends whole tensors: training.p2p_scatter_gather (Megatron-LM before 2023) does "
                        "not combine with it (leave it out or set it false)")
    if training.cp_comm == "allgather" and 3 not in search.zero:
        raise SpecError(file, "training.cp_comm", f"allgather is PyTorch's context parallel (torchtitan), planned "
                        f"with ZeRO-3 only; search.zero has {list(search.zero)} (add 3, or use ring, all_to_all or "
                        "auto for Megatron-Core)")
    if training.cp_comm == "all_to_all" and set(search.zero) == {3}:
        # the mirror case: TE's a2a is Megatron-Core's, ZeRO-3 plans are torchtitan's (context_parallel.legal_modes);
        # left to the search, every cp > 1 configuration is dropped and the spec reads as having no configuration
        raise SpecError(file, "training.cp_comm", "all_to_all is Transformer Engine's exchange (Megatron-Core); "
                        "search.zero has only 3, whose plans are torchtitan's (use allgather, ring or auto, or add "
                        "0, 1 or 2 to search.zero)")


def _parse_training(f: Fields) -> TrainingSpec:
    t = f.build(
        TrainingSpec,
        global_batch_size=f.int("global_batch_size"),
        seq_length=f.int("seq_length"),
        precision=f.str("precision", DEFAULT, choices=PRECISIONS),
        optimizer=f.str("optimizer", DEFAULT, choices=OPTIMIZERS),
        tokens=f.float("tokens", DEFAULT),
        pipeline_engine=f.str("pipeline_engine", DEFAULT, choices=PIPELINE_ENGINES),
        # DeepSpeed's engine overlaps none of them: its specs record that, also for a later switch of engine
        overlap=(_parse_overlap(f.sub("overlap"), f.raw("pipeline_engine", None) == "deepspeed") if f.has("overlap")
                 else OverlapSpec.none() if f.raw("pipeline_engine", None) == "deepspeed" else DEFAULT),
        attention=f.str("attention", DEFAULT, choices=ATTENTION),
        attention_backend=f.str("attention_backend", DEFAULT, choices=ATTENTION_BACKENDS),
        cp_comm=f.str("cp_comm", DEFAULT, choices=CP_COMM),
        grad_reduce_in_fp32=f.bool("grad_reduce_in_fp32", DEFAULT),
        p2p_scatter_gather=f.bool("p2p_scatter_gather", DEFAULT),
        kernels=f.str("kernels", DEFAULT, choices=KERNELS),
        fp8_recipe=f.str("fp8_recipe", DEFAULT, choices=FP8_RECIPES),
        fp8_param_gather=f.bool("fp8_param_gather", DEFAULT),
        fsdp_float8_all_gather=f.bool("fsdp_float8_all_gather", DEFAULT),
        compile_loss=f.bool("compile_loss", DEFAULT),
    )
    f.done()
    if t.attention_backend != "auto" and t.attention != "fused":
        raise f.error("attention_backend", f"picks a fused kernel ({t.attention_backend}); training.attention is "
                      f"{t.attention}")
    if f.has("fp8_recipe") and t.precision != "fp8":
        raise f.error("fp8_recipe", f"scales fp8 tensors (Transformer Engine); training.precision is {t.precision}, "
                      "not fp8")
    if t.fp8_param_gather and t.precision != "fp8":
        raise f.error("fp8_param_gather", f"stores fp8 weights (Transformer Engine); training.precision is "
                      f"{t.precision}, not fp8")
    if t.fsdp_float8_all_gather and t.precision != "fp8":
        raise f.error("fsdp_float8_all_gather", f"all-gathers Float8 weights; training.precision is {t.precision}, "
                      "not fp8")
    if t.kernels == "eager" and t.precision != "bf16":
        raise f.error("kernels", f"eager counts torchtitan's bf16 block (bf16 activations, fp32 norms and rotary); "
                      f"training.precision is {t.precision}")
    # DeepSpeed's engine overlaps none of them (the cost model ignores `overlap` there: iteration.overlap_of);
    # saying otherwise in the file is a mistake worth stopping for
    if t.pipeline_engine == "deepspeed" and f.has("overlap") and t.overlap.any:
        raise f.error("overlap", "DeepSpeed's pipeline engine overlaps none of these; with pipeline_engine deepspeed "
                      "leave overlap out or set every key false")
    return t


def _parse_overlap(f: Fields, deepspeed: bool = False) -> OverlapSpec:
    """training.overlap; with DeepSpeed's engine every key left out is off (it overlaps none of them)."""
    bucket = f.raw("bucket_size", None)
    if bucket is not None:
        bucket = f.int("bucket_size", min_value=1)
    left_out = False if deepspeed else DEFAULT
    o = f.build(OverlapSpec, grad_reduce=f.bool("grad_reduce", left_out),
                param_gather=f.bool("param_gather", left_out), p2p=f.bool("p2p", left_out),
                tp_comm=f.bool("tp_comm", left_out), tp_backward=f.bool("tp_backward", left_out), bucket_size=bucket)
    f.done()
    return o


def _choices(f: Fields, key: str, allowed, cast=lambda v: v):
    """A list of allowed values (a scalar reads as a one-item list), deduplicated in order; DEFAULT if absent."""
    vals = f.list(key, DEFAULT)
    if vals is DEFAULT:
        return DEFAULT
    out = []
    for v in vals:
        try:
            v = cast(v)
        except (TypeError, ValueError, OverflowError):
            raise f.error(key, f"has {v!r}, expected one of {list(allowed)}") from None
        if v not in allowed:
            raise f.error(key, f"has {v!r}, expected one of {list(allowed)}")
        out.append(v)
    if not out:
        raise f.error(key, "must not be empty")
    return tuple(dict.fromkeys(out))


def _exact_int(v) -> int:
    """int(v) for integers only: 1.5 or true must not become a ZeRO stage."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(v)
    return v


def _pos_ints(f: Fields, key: str, min_value: int = 1, why: str = ""):
    """Sorted distinct integers >= min_value (a scalar reads as a one-item list); None for absent or 'auto'. An empty
    list is refused, as `_choices` refuses one: it would search nothing, not the default."""
    v = f.raw(key, None)
    if v is None or v == "auto":
        return None
    if not isinstance(v, list):
        v = [v]
    if not v:
        raise f.error(key, "must not be empty: it would search nothing (" + (
            "leave it out for no context parallelism, or write auto for every legal degree)"
            if key == "context_parallel" else "leave it out, or write auto, for the default)"))
    what = "positive integers" if min_value == 1 else f"integers >= {min_value}"
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= MAX_INT:
            raise f.error(key, f"must be 'auto' or a list of {what}, got {x!r}")
        if x < min_value:
            raise f.error(key, f"must be 'auto' or a list of {what}, got {x!r}{why}")
    return tuple(sorted(set(v)))


def _uneven_stages(f: Fields):
    """search.uneven_stages: 'auto' (the dataclass default), 'none' (), or a list of layer deficits 0..8."""
    v = f.raw("uneven_stages", None)
    if v is None or v == "auto":
        return DEFAULT
    if v == "none":
        return ()
    if not isinstance(v, list):
        raise f.error("uneven_stages", f"must be 'auto', 'none' or a list of layer deficits (0..8), got {v!r}")
    if not v:
        raise f.error("uneven_stages", "must not be empty (leave it out, or write auto, for the default; none for "
                      "even splits only)")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= 8:
            raise f.error("uneven_stages", f"must be 'auto', 'none' or a list of layer deficits (0..8), got {x!r}")
    return tuple(sorted(set(v)))


def _pipeline_split(f: Fields):
    """search.pipeline_split: absent (None), or one uneven split {first_stage_layers, last_stage_layers,
    account_embedding, account_loss} with Megatron-Core's rule that the explicit counts and the accounted embedding /
    loss exclude each other; not with search.uneven_stages (the split is pinned, not searched)."""
    if f.raw("pipeline_split", None) is None:
        return DEFAULT
    if f.has("uneven_stages"):
        raise f.error("pipeline_split", "pins the one split searched; search.uneven_stages searches splits: give one "
                      "of them")
    g = f.sub("pipeline_split")
    first, last = g.int("first_stage_layers", None), g.int("last_stage_layers", None)
    emb, loss = g.bool("account_embedding", False), g.bool("account_loss", False)
    g.done()
    if (first is not None or last is not None) and (emb or loss):
        raise f.error("pipeline_split", "first_stage_layers / last_stage_layers cannot be set with account_embedding "
                      "/ account_loss (Megatron-Core refuses both)")
    if first is None and last is None and not (emb or loss):
        raise f.error("pipeline_split", "names no uneven split (write search.uneven_stages: none for the even split)")
    return (first, last, emb, loss)


def _dp_shard(f: Fields, cluster: ClusterSpec):
    """search.dp_shard: absent (the dataclass default: 0 only), 'auto' (0 and the divisors > 1 of gpus_per_node) or
    a list of 0 and shard-group sizes > 1 that divide gpus_per_node (HSDP's shard group stays inside a node)."""
    v = f.raw("dp_shard", None)
    if v is None:
        return DEFAULT
    gpn = cluster.gpus_per_node
    if v == "auto":
        return (0,) + tuple(d for d in range(2, gpn + 1) if gpn % d == 0)
    if not isinstance(v, list):
        v = [v]
    if not v:
        raise f.error("dp_shard", "must not be empty")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or x < 0 or x == 1 or (x and gpn % x):
            raise f.error("dp_shard", f"must be 'auto' or a list of 0 (shard over all dp) and HSDP shard-group sizes "
                                      f"> 1 that divide gpus_per_node={gpn}, got {x!r}")
    return tuple(sorted(set(v)))


def _parse_search(f: Fields, cluster: ClusterSpec) -> SearchSpec:
    s = f.build(
        SearchSpec,
        schedules=_choices(f, "schedules", SCHEDULES),
        recompute=_choices(f, "recompute", RECOMPUTE),
        zero=_choices(f, "zero", ZERO_STAGES, _exact_int),
        micro_batch_sizes=_pos_ints(f, "micro_batch_sizes"),
        virtual_stages=_pos_ints(f, "virtual_stages", 2, ": a virtual stage count of 1 is no interleaving (one "
                                 "model chunk per device, the plain schedule); the interleaved schedule needs >= 2"),
        sequence_parallel=_choices(f, "sequence_parallel", (False, True)),
        tensor_parallel=_pos_ints(f, "tensor_parallel"),
        memory_margin=f.float("memory_margin", DEFAULT, positive=False, min_value=0.0, max_value=0.9),
        top_k=f.int("top_k", DEFAULT),
        uneven_stages=_uneven_stages(f),
        pipeline_parallel=_pos_ints(f, "pipeline_parallel"),
        pipeline_split=_pipeline_split(f),
        context_parallel=None if f.raw("context_parallel", None) == "auto" else (
            _pos_ints(f, "context_parallel") or DEFAULT),      # absent: (1,), no context parallelism
        dp_shard=_dp_shard(f, cluster),
    )
    # checked against the cluster here, not in Spec: a sweep validates one search block per cluster it lists
    if s.tensor_parallel:
        for t in s.tensor_parallel:
            if cluster.gpus_per_node % t:
                raise f.error("tensor_parallel", f"tp={t} does not divide gpus_per_node={cluster.gpus_per_node} "
                                                 "(tensor groups stay inside a node)")
    f.done()
    return s


def _parse_solver(f: Fields) -> SolverSpec:
    s = f.build(
        SolverSpec,
        method=f.str("method", DEFAULT, choices=METHODS),
        time_limit_s=f.float("time_limit_s", DEFAULT),
        seed=f.int("seed", DEFAULT, min_value=0),
        robust=f.str("robust", DEFAULT, choices=ROBUST),
    )
    f.done()
    return s
