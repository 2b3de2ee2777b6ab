"""Cluster spec: GPUs, nodes and the measured links between them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from planner.errors import SpecError
from planner.io import read_matrix_csv
from planner.spec.fields import DEFAULT, FieldError, Fields
from planner.spec.hosts import check_hostname
from planner.spec.variability import GPUVariability, read_variability

# A node is one NVLink domain (8 GPUs on DGX / HGX, 72 on an NVL72 rack); a cluster at most a few
# hundred thousand GPUs. Larger values are typos, refused here, where the field can still be named.
MAX_GPUS_PER_NODE = 1024
MAX_NODES = 1_000_000

INTRA_NODE_LATENCY_US = 3.0
"""Default network.intra_node.latency_us: one NVLink/NVSwitch hop plus the collective's launch."""
INTER_NODE_LATENCY_US = 5.0
"""Default network.inter_node.latency_us: one InfiniBand/RoCE hop plus the collective's launch."""

PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
"""The compute precisions the planner costs (training.precision) and so the keys gpu.peak_tflops may have."""
PROFILE_KINDS = ("compute", "memory")
"""The measured profiles a cluster may name (profiles.compute: a fitted compute profile, costs.default_costs;
profiles.memory: a fitted memory estimator, costs.learned.default_memory_estimator)."""


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    """One GPU model: memory and dense peak throughput per precision."""

    type: str
    """Name, e.g. A100-80GB (informational)."""
    memory_GiB: float
    """Device memory the plan must fit in, GiB."""
    peak_tflops: dict
    """Precision (PRECISIONS: bf16, fp16, fp32, fp8; other keys are refused) -> dense peak TFLOP/s (without 2:4
    sparsity); at least one entry. A plan needs the entry of its training.precision (fp8 plans also bf16's), never
    another precision's standing in (peak_refusal): an `fp8` entry is what lets a plan ask for `training.precision:
    fp8` (H100 SXM: 1979, twice its bf16 989); a V100 lists fp16 and fp32 only."""

    variability: GPUVariability | None = None
    """The speed spread of this model's GPUs (`gpu.variability`: "none", the default; a shipped spread,
    `longhorn-v100-sgemm`; or a CSV of per-GPU times from the cluster's own burn-in): a synchronous step waits for
    its slowest GPU, so a plan on more GPUs runs its GPU work slower (planner/spec/variability.py)."""

    def __post_init__(self):
        if not self.peak_tflops:
            raise FieldError("peak_tflops", "needs at least one precision, e.g. {bf16: 312}")

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s in `precision`; never another precision's peak standing in for it (a Spec refuses a
        training.precision whose peaks its cluster lacks: peak_refusal)."""
        if precision == "fp8" and "fp8" not in self.peak_tflops:
            raise FieldError("peak_tflops", fp8_refusal(self))
        if precision not in self.peak_tflops:
            raise FieldError("peak_tflops", _missing_peak(self, precision, precision))
        return 1e12 * float(self.peak_tflops[precision])


# Compute capability by GPU type, the one table behind the architecture rules below; matched as a substring of the
# cluster file's gpu.type, first hit wins (so GB200 before B200, A100 before A10, L40 before L4). NVIDIA's CUDA GPU
# list (developer.nvidia.com/cuda-gpus): Blackwell data-centre 10.x (B300 / GB300 10.3), RTX / workstation Blackwell
# 12.0 (named "... Blackwell"), Hopper 9.0, Ada 8.9, Ampere 8.0 / 8.6, Turing 7.5, Volta 7.0, Pascal 6.0.
COMPUTE_CAPABILITY = (("GB300", (10, 3)), ("B300", (10, 3)), ("GB200", (10, 0)), ("B200", (10, 0)), ("B100", (10, 0)),
                      ("BLACKWELL", (12, 0)), ("H200", (9, 0)), ("H100", (9, 0)), ("H800", (9, 0)), ("GH200", (9, 0)),
                      ("L40", (8, 9)), ("L4", (8, 9)), ("A100", (8, 0)), ("A800", (8, 0)), ("A30", (8, 0)),
                      ("A40", (8, 6)), ("A10", (8, 6)), ("T4", (7, 5)), ("V100", (7, 0)), ("P100", (6, 0)))


def compute_capability(gpu_type: str | None) -> tuple[int, int] | None:
    """(major, minor) of `gpu_type` from COMPUTE_CAPABILITY; None for a type the table does not know."""
    kind = (gpu_type or "").upper()
    return next((cc for name, cc in COMPUTE_CAPABILITY if name in kind), None)


def _cc_text(gpu: GPUSpec) -> str:
    major, minor = compute_capability(gpu.type)
    return f"compute capability {major}.{minor}"


def _known_below(gpu: GPUSpec, cc: tuple[int, int]) -> bool:
    """A known type of compute capability below `cc` (an unknown type is taken as new enough)."""
    have = compute_capability(gpu.type)
    return have is not None and have < cc


# FP8 tensor cores came with Ada and Hopper (8.9): a cluster file naming an older type and an fp8 peak is a mistake.
FP8_MIN_CC = (8, 9)
# Transformer Engine needs compute capability 8.0, Ampere (its support matrix, nvidia.github.io/TransformerEngine/
# support_matrix.html), so before it no userbuffers overlap (--tp-comm-overlap), no fused attention, no bf16 tensor
# cores; PyTorch's async TP (symmetric memory) is not for them either.
AMPERE_CC = (8, 0)
# Megatron-LM's get_device_arch_version() >= 10: from Blackwell on (export.py's launch environment).
BLACKWELL_CC = (10, 0)


def before_blackwell(gpu_type: str | None) -> bool:
    """Whether Megatron-LM's get_device_arch_version() < 10 on `gpu_type` (True for an unknown type)."""
    cc = compute_capability(gpu_type)
    return cc is None or cc < BLACKWELL_CC


def fp8_gemm_tn_only(gpu: GPUSpec) -> bool:
    """Whether `gpu`'s per-tensor-scaled FP8 GEMMs are TN only rather than any layout, under Transformer Engine's
    delayed and tensorwise recipes. NVIDIA/TransformerEngine @ d0067d0da6cb01811b8072a7d304f0e00344ce2b,
    transformer_engine/common/transformer_engine.cpp nvte_is_non_tn_fp8_gemm_supported(): compute capability
    10.x-11.x or >= 13.0 takes any layout (data-centre Blackwell); Hopper (9.0), Ada (8.9) and the RTX / workstation
    Blackwell parts (12.x) run only TN fp8 GEMMs (common/gemm/cublaslt_gemm.cu "Hopper only supports TN GEMMs for
    FP8"), and so is an unknown type taken to: the stricter rule (config.fp8_shape_problem), whose plans run on
    either kind."""
    cc = compute_capability(gpu.type)
    return cc is None or not (10 <= cc[0] < 12 or cc[0] >= 13)


def runs_transformer_engine(gpu: GPUSpec) -> bool:
    return not _known_below(gpu, AMPERE_CC)


def fused_attention_refusal(gpu: GPUSpec) -> str | None:
    """Why `gpu` runs no fused attention kernel (None: it does). FlashAttention-2 runs on Ampere, Ada and Hopper only
    (Dao-AILab/flash-attention @ 0251105a README.md: "Ampere, Ada, or Hopper GPUs"; Turing has a separate subset,
    Volta none), and cuDNN's fused attention reaches Megatron-Core through Transformer Engine, which needs compute
    capability 8.0 (AMPERE_CC). On such a GPU Megatron-LM runs --transformer-impl local, whose core attention is
    the unfused softmax path (NVIDIA/Megatron-LM @ d98e8a64 megatron/core/models/backends.py LocalSpecProvider:
    DotProductAttention), the planner's training.attention unfused."""
    if not _known_below(gpu, AMPERE_CC):
        return None
    return (f"fused attention (FlashAttention-2, or cuDNN's through Transformer Engine) needs Ampere or newer (compute "
            f"capability 8.0); the cluster's GPU {gpu.type} ({_cc_text(gpu)}) runs neither: Megatron-LM runs it with "
            "--transformer-impl local, whose core attention is the unfused softmax path")


def bf16_refusal(gpu: GPUSpec) -> str | None:
    """Why `gpu` cannot train in bf16 (None: it can): bf16 tensor cores came with Ampere; before it PyTorch runs bf16
    math in emulation, far below any listed peak."""
    if _known_below(gpu, AMPERE_CC):
        return (f"bf16 needs bf16 tensor cores (Ampere or newer); the cluster's GPU {gpu.type} ({_cc_text(gpu)}) has "
                "none: use fp16")
    return None


def fp8_refusal(gpu: GPUSpec) -> str | None:
    """Why `gpu` cannot train in fp8 (None: it can): no fp8 peak in the cluster file, or a pre-Hopper type."""
    if _known_below(gpu, FP8_MIN_CC):
        return (f"fp8 needs FP8 tensor cores (Hopper, Ada or newer); the cluster's GPU {gpu.type} ({_cc_text(gpu)}) "
                "has none: use bf16 or fp16")
    if "fp8" not in gpu.peak_tflops:
        return (f"fp8 needs the GPU's fp8 peak: the cluster's GPU {gpu.type} has no gpu.peak_tflops.fp8 (dense, "
                "without sparsity); add it if the GPU has FP8 tensor cores, or use bf16")
    return None


def peaks_needed(precision: str) -> tuple[str, ...]:
    """The gpu.peak_tflops entries a plan in `precision` is costed with: its own, and for fp8 also bf16 (attention,
    the output layer and the element-wise kernels stay in bf16: costs.compute.activation_precision)."""
    return ("fp8", "bf16") if precision == "fp8" else (precision,)


def _missing_peak(gpu: GPUSpec, precision: str, key: str) -> str:
    why = "" if key == precision else (f" ({precision} runs attention, the output layer and the element-wise kernels "
                                       f"in {key})")
    text = (f"{precision} needs the GPU's {key} peak{why}: cluster.gpu.peak_tflops of {gpu.type} has no {key} entry "
            f"(it lists {', '.join(sorted(map(str, gpu.peak_tflops)))}); add {key} (dense TFLOP/s, without sparsity)")
    other = {"bf16": "fp16", "fp16": "bf16"}.get(key)
    if other in gpu.peak_tflops and not _known_below(gpu, AMPERE_CC):
        text += f" (from Ampere on the dense fp16 and bf16 peaks are equal: {key}: {gpu.peak_tflops[other]:g})"
    return text


def peak_refusal(gpu: GPUSpec, precision: str) -> str | None:
    """Why `gpu` has no peak for a plan in `precision` (None: it has every peak the plan is costed with): never
    another precision's peak standing in for it."""
    if precision == "fp8" and fp8_refusal(gpu):
        return fp8_refusal(gpu)
    for key in peaks_needed(precision):
        if key not in gpu.peak_tflops:
            return _missing_peak(gpu, precision, key)
    return None


@dataclass(frozen=True, kw_only=True)
class Link:
    """One class of link (inside a node or across nodes), alpha-beta."""

    bandwidth_GBps: float
    """Per GPU (intra) or per NIC rail (inter), GB/s = 1e9 B/s."""
    latency_us: float
    """Per message, microseconds."""


@dataclass(frozen=True, eq=False, kw_only=True)
class ClusterSpec:
    """GPUs, nodes and the measured links between them."""

    name: str
    """Label used in reports, case ids and file names."""
    gpu: GPUSpec
    """Every GPU in the cluster is of this model."""
    nodes: int
    """Number of nodes."""
    gpus_per_node: int
    """GPUs in each node (tensor-parallel groups stay inside one)."""
    intra: Link
    """Inside a node (NVLink / NVSwitch), per GPU."""
    inter: Link
    """Across nodes: nominal per-rail bandwidth (the spec's bandwidth_Gbps / 8)."""
    nics_per_node: int | None = None
    """Network rails per node, shared by the node's GPUs sending across nodes. None: gpus_per_node."""
    bandwidth: np.ndarray | None = None
    """nodes x nodes per-rail p2p GB/s, [i, j] = i sends to j; diagonal unused (0).
    None: every pair at inter.bandwidth_GBps."""
    snapshots: tuple = ()
    """More measured matrices like `bandwidth` (a time series), for robust planning."""
    node_names: tuple = ()
    """Host names, one per node when given (reports and re-planning after failures)."""
    profiles: dict = field(default_factory=dict)
    """Measured profiles, compute and / or memory -> path (resolved against the cluster file)."""
    price_per_gpu_hour_usd: float | None = None
    """For cost to train; None: unknown."""
    source: str | None = None
    """The file it was read from."""

    def __post_init__(self):
        if self.nics_per_node is None:
            object.__setattr__(self, "nics_per_node", self.gpus_per_node)
        if self.bandwidth is None:
            bw = np.full((self.nodes, self.nodes), self.inter.bandwidth_GBps)
            np.fill_diagonal(bw, 0.0)
            object.__setattr__(self, "bandwidth", bw)
        if self.node_names and len(self.node_names) != self.nodes:
            raise FieldError("network.node_names", f"has {len(self.node_names)} names for {self.nodes} nodes")

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def rail_share(self, concurrent_gpus: int) -> float:
        """Fraction of a rail each of `concurrent_gpus` GPUs sending across nodes gets."""
        return min(1.0, self.nics_per_node / max(1, concurrent_gpus))

    def subset(self, keep: list[int]) -> ClusterSpec:
        """The same cluster restricted to the given node indices (re-planning after failures)."""
        idx = np.asarray(keep)
        names = tuple(self.node_names[i] for i in keep) if self.node_names else ()
        return ClusterSpec(name=self.name, gpu=self.gpu, nodes=len(keep), gpus_per_node=self.gpus_per_node,
                           intra=self.intra, inter=self.inter, nics_per_node=self.nics_per_node,
                           bandwidth=self.bandwidth[np.ix_(idx, idx)],
                           snapshots=tuple(s[np.ix_(idx, idx)] for s in self.snapshots), node_names=names,
                           profiles=dict(self.profiles), price_per_gpu_hour_usd=self.price_per_gpu_hour_usd,
                           source=self.source)


def read_matrix(path: str, file: str | None, fieldname: str, nodes: int) -> np.ndarray:
    m = read_matrix_csv(path, file, fieldname)
    try:
        return check_matrix(m, file, fieldname, nodes)
    except SpecError as e:          # say which CSV, not only which field of the cluster file (once: file may be it)
        raise SpecError(file, fieldname, e.reason if path == file else f"{path}: {e.reason}") from None


def check_matrix(m, file, fieldname, nodes) -> np.ndarray:
    m = np.asarray(m, dtype=float)
    if m.ndim != 2 or m.shape != (nodes, nodes):
        raise SpecError(file, fieldname,
                        f"bandwidth matrix must be {nodes}x{nodes} (nodes x nodes), got shape {m.shape}")
    off = m[~np.eye(nodes, dtype=bool)]
    if off.size and not np.all(np.isfinite(off)):
        raise SpecError(file, fieldname, "bandwidth matrix has non-finite entries")
    if off.size and np.any(off <= 0):
        i, j = [int(v) for v in np.argwhere((m <= 0) & ~np.eye(nodes, dtype=bool))[0]]
        raise SpecError(file, fieldname, f"bandwidth matrix entry [{i},{j}] = {m[i, j]} is not positive")
    m = m.copy()
    np.fill_diagonal(m, 0.0)
    return m


def parse_cluster(data, file: str | None, prefix: str = "") -> ClusterSpec:
    f = Fields(data, file, prefix)
    base = os.path.dirname(file) if file else "."
    name = f.str("name")
    g = f.sub("gpu")
    gtype = g.str("type")
    mem = g.float("memory_GiB")
    pk = g.sub("peak_tflops")
    peaks = {}
    for k in list(pk.data):
        if k not in PRECISIONS:
            import difflib
            near = difflib.get_close_matches(str(k).lower(), PRECISIONS, n=1, cutoff=0.6)
            hint = (f"; a misspelling of {near[0]!r}?" if near and str(k).lower() != "tf32" else
                    "; TF32 is not a precision the planner costs (fp32 plans run at the plain FP32 peak)"
                    if str(k).lower() == "tf32" else "")
            raise pk.error(str(k), f"unknown precision (known: {', '.join(PRECISIONS)}){hint}")
        peaks[k] = pk.float(k)
    pk.done()
    var = read_variability(g.raw("variability", None), base, file, g.path("variability"))
    gpu = g.build(GPUSpec, type=gtype, memory_GiB=mem, peak_tflops=peaks, variability=var)
    g.done()
    nodes = f.int("nodes", max_value=MAX_NODES)
    gpn = f.int("gpus_per_node", max_value=MAX_GPUS_PER_NODE)
    net = f.sub("network")
    intra_f = net.sub("intra_node")
    intra = intra_f.build(Link, bandwidth_GBps=intra_f.float("bandwidth_GBps"),
                          latency_us=intra_f.float("latency_us", INTRA_NODE_LATENCY_US, positive=False, min_value=0))
    intra_f.done()
    inter_f = net.sub("inter_node")
    gbps = inter_f.float("bandwidth_Gbps")
    nics = inter_f.int("nics_per_node", DEFAULT)
    inter = inter_f.build(Link, bandwidth_GBps=gbps / 8.0,
                          latency_us=inter_f.float("latency_us", INTER_NODE_LATENCY_US, positive=False, min_value=0))
    inter_f.done()
    matrix_ref = net.raw("bandwidth_matrix", None)
    snaps_ref = net.list("bandwidth_snapshots", [])
    names = [check_hostname(str(n) if isinstance(n, int) and not isinstance(n, bool) else n, file,
                            f"{net.path('node_names')}[{i}]")
             for i, n in enumerate(net.list("node_names", []))]
    net.raw("generator", None)       # provenance of synthetic matrices (informational)
    net.done()
    bw = DEFAULT if matrix_ref is None else _matrix(matrix_ref, base, file, net.path("bandwidth_matrix"), nodes)
    snaps = tuple(_matrix(s, base, file, f"{net.path('bandwidth_snapshots')}[{i}]", nodes)
                  for i, s in enumerate(snaps_ref))
    profiles = _profiles(f, base)
    price = f.float("price_per_gpu_hour_usd", DEFAULT)
    f.raw("description", None)
    f.done()
    return f.build(ClusterSpec, name=name, gpu=gpu, nodes=nodes, gpus_per_node=gpn, intra=intra, inter=inter,
                   nics_per_node=nics, bandwidth=bw, snapshots=snaps, node_names=tuple(str(n) for n in names),
                   profiles=profiles, price_per_gpu_hour_usd=price, source=file)


def _profiles(f: Fields, base: str) -> dict:
    """cluster.profiles: {compute: path, memory: path}, each optional, resolved against the cluster file and checked
    here, where the file and the field can still be named."""
    if f.raw("profiles", None) is None:
        f.seen.add("profiles")
        return {}
    if not isinstance(f.data["profiles"], dict):
        raise f.error("profiles", "must be a mapping like {compute: path, memory: path}")
    p = f.sub("profiles")
    out = {}
    for kind in PROFILE_KINDS:
        ref = p.raw(kind, None)
        if ref is None:
            continue
        if not isinstance(ref, str) or not ref:
            raise p.error(kind, f"must be the path of a {kind} profile file, got {ref!r}")
        path = os.path.normpath(os.path.join(base, ref))
        if not os.path.isfile(path):
            raise p.error(kind, f"{kind} profile file {path} does not exist")
        out[kind] = path
    p.done()
    return out


def _matrix(ref, base, file, fieldname, nodes):
    if isinstance(ref, str):
        return read_matrix(os.path.normpath(os.path.join(base, ref)), file, fieldname, nodes)
    if isinstance(ref, list):
        try:
            return check_matrix(np.array(ref, dtype=float), file, fieldname, nodes)
        except (ValueError, TypeError):
            raise SpecError(file, fieldname, "inline bandwidth matrix must be a list of numeric rows") from None
    raise SpecError(file, fieldname, "must be a CSV path or an inline list of rows")
