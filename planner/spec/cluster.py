"""Cluster spec: GPUs, nodes and the measured links between them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from planner.errors import SpecError
from planner.io import read_matrix_csv
from planner.spec.fields import Fields


@dataclass(frozen=True)
class GPUSpec:
    type: str
    memory_GiB: float
    peak_tflops: dict           # precision -> dense TFLOP/s

    def peak_flops(self, precision: str) -> float:
        return 1e12 * float(self.peak_tflops.get(precision) or max(self.peak_tflops.values()))


@dataclass(frozen=True)
class Link:
    bandwidth_GBps: float       # per GPU (intra) or per NIC rail (inter), GB/s = 1e9 B/s
    latency_us: float


@dataclass(frozen=True, eq=False)
class ClusterSpec:
    name: str
    gpu: GPUSpec
    nodes: int
    gpus_per_node: int
    intra: Link
    inter: Link                 # nominal per-rail bandwidth (bandwidth_Gbps / 8)
    nics_per_node: int
    bandwidth: np.ndarray       # nodes x nodes, per-rail p2p GB/s, [i, j] = i sends to j; diagonal unused
    snapshots: tuple = ()       # more measured matrices (time series), for robust planning
    node_names: tuple = ()
    profiles: dict = field(default_factory=dict)
    price_per_gpu_hour_usd: float | None = None
    source: str | None = None   # file it was read from

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def rail_share(self, concurrent_gpus: int) -> float:
        """Fraction of a rail each of `concurrent_gpus` GPUs sending across nodes gets."""
        return min(1.0, self.nics_per_node / max(1, concurrent_gpus))

    def subset(self, keep: list[int]) -> "ClusterSpec":
        """The same cluster restricted to the given node indices (re-planning after failures)."""
        idx = np.asarray(keep)
        names = tuple(self.node_names[i] for i in keep) if self.node_names else ()
        return ClusterSpec(self.name, self.gpu, len(keep), self.gpus_per_node, self.intra, self.inter,
                           self.nics_per_node, self.bandwidth[np.ix_(idx, idx)],
                           tuple(s[np.ix_(idx, idx)] for s in self.snapshots), names,
                           dict(self.profiles), self.price_per_gpu_hour_usd, self.source)


def read_matrix(path: str, file: str | None, fieldname: str, nodes: int) -> np.ndarray:
    m = read_matrix_csv(path, file, fieldname)
    try:
        return check_matrix(m, file, fieldname, nodes)
    except SpecError as e:          # say which CSV, not only which field of the cluster file
        raise SpecError(file, fieldname, f"{path}: {e.reason}") from None


def check_matrix(m, file, fieldname, nodes) -> np.ndarray:
    m = np.asarray(m, dtype=float)
    if m.ndim != 2 or m.shape != (nodes, nodes):
        raise SpecError(file, fieldname, f"bandwidth matrix must be {nodes}x{nodes} (nodes x nodes), got shape {m.shape}")
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
        peaks[k] = pk.float(k)
    pk.done()
    if not peaks:
        raise g.error("peak_tflops", "needs at least one precision, e.g. {bf16: 312}")
    g.done()
    nodes = f.int("nodes")
    gpn = f.int("gpus_per_node")
    net = f.sub("network")
    intra_f = net.sub("intra_node")
    intra = Link(intra_f.float("bandwidth_GBps"), intra_f.float("latency_us", 3.0, positive=False, min_value=0))
    intra_f.done()
    inter_f = net.sub("inter_node")
    gbps = inter_f.float("bandwidth_Gbps")
    nics = inter_f.int("nics_per_node", gpn)
    inter = Link(gbps / 8.0, inter_f.float("latency_us", 5.0, positive=False, min_value=0))
    inter_f.done()
    matrix_ref = net.raw("bandwidth_matrix", None)
    snaps_ref = net.list("bandwidth_snapshots", [])
    names = net.list("node_names", [])
    net.raw("generator", None)       # provenance of synthetic matrices (informational)
    net.done()
    if matrix_ref is None:
        bw = np.full((nodes, nodes), inter.bandwidth_GBps)
        np.fill_diagonal(bw, 0.0)
    else:
        bw = _matrix(matrix_ref, base, file, net.path("bandwidth_matrix"), nodes)
    snaps = tuple(_matrix(s, base, file, f"{net.path('bandwidth_snapshots')}[{i}]", nodes)
                  for i, s in enumerate(snaps_ref))
    if names and len(names) != nodes:
        raise SpecError(file, net.path("node_names"), f"has {len(names)} names for {nodes} nodes")
    profiles = f.raw("profiles", {}) or {}
    if not isinstance(profiles, dict):
        raise f.error("profiles", "must be a mapping like {compute: path, memory: path}")
    profiles = {k: (os.path.normpath(os.path.join(base, v)) if isinstance(v, str) else v) for k, v in profiles.items()}
    price = f.float("price_per_gpu_hour_usd", None)
    f.raw("description", None)
    f.done()
    return ClusterSpec(name, GPUSpec(gtype, mem, peaks), nodes, gpn, intra, inter, nics, bw, snaps,
                       tuple(str(n) for n in names), profiles, price, file)


def _matrix(ref, base, file, fieldname, nodes):
    if isinstance(ref, str):
        return read_matrix(os.path.normpath(os.path.join(base, ref)), file, fieldname, nodes)
    if isinstance(ref, list):
        try:
            return check_matrix(np.array(ref, dtype=float), file, fieldname, nodes)
        except (ValueError, TypeError):
            raise SpecError(file, fieldname, "inline bandwidth matrix must be a list of numeric rows") from None
    raise SpecError(file, fieldname, "must be a CSV path or an inline list of rows")
