"""Communication times: point-to-point on measured links, ring and hierarchical collectives.

Bandwidths are GB/s (1e9 B/s), latencies microseconds, sizes bytes, results seconds.
A measured nccl-tests table (all-reduce time by message size, per group size) replaces the
ring formula for tensor-parallel collectives inside a node when one is given: small messages are
latency-bound and NVSwitch reaches its bus bandwidth only above ~100 MB, which a formula with one
bandwidth cannot capture.
"""
from __future__ import annotations

import functools
import glob
import os
import re
from dataclasses import dataclass, field

import numpy as np


def p2p_time(nbytes: float, bw_GBps: float, latency_us: float) -> float:
    return latency_us * 1e-6 + nbytes / (bw_GBps * 1e9)


def ring_allreduce_time(nbytes: float, n: int, bw_GBps: float, latency_us: float) -> float:
    """Ring all-reduce: 2(n-1)/n of the buffer crosses the slowest link, 2(n-1) latency steps."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * latency_us * 1e-6 + 2 * (n - 1) / n * nbytes / (bw_GBps * 1e9)


def slowest_link_GBps(bandwidth: np.ndarray, group: list[int]) -> float:
    """A ring over `group` (node indices) runs at its slowest directed link, in both ring directions."""
    g = list(group)
    if len(g) < 2:
        return float("inf")
    sub = np.asarray(bandwidth)[np.ix_(g, g)]
    off = ~np.eye(len(g), dtype=bool)
    return float(sub[off].min())


# --- nccl-tests tables ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CollectiveTable:
    """Measured collective time by message size for one group size (nccl-tests output)."""
    n: int
    sizes: tuple            # bytes, increasing
    times_s: tuple          # seconds (mean of out-of-place and in-place)

    @functools.cached_property
    def _arrays(self):
        # the search asks a table tens of thousands of times: convert (and take logs) once, the same values
        s, t = np.asarray(self.sizes, dtype=float), np.asarray(self.times_s, dtype=float)
        return s, t, np.log(s), np.log(t)

    def time(self, nbytes: float) -> float:
        s, t, log_s, log_t = self._arrays
        if nbytes <= 0:
            return 0.0
        if nbytes <= s[0]:
            # below the table: latency + bytes at the bandwidth of the two smallest points (alpha-beta)
            beta = (t[1] - t[0]) / (s[1] - s[0])
            alpha = max(t[0] - beta * s[0], 0.0)
            return float(alpha + beta * nbytes)
        if nbytes >= s[-1]:
            return float(t[-1] * nbytes / s[-1])      # bandwidth-bound: scale linearly
        return float(np.exp(np.interp(np.log(nbytes), log_s, log_t)))

    def as_dict(self) -> dict:
        return {"n": self.n, "sizes": list(self.sizes), "times_s": list(self.times_s)}


def read_nccl_tests(path: str, n: int | None = None) -> CollectiveTable:
    """One nccl-tests table for the cost model, read by the one nccl-tests reader
    (`planner.profile.importers.read_nccl_table`: nccl-tests' stdout, its CSV variant as in vTrain's tables, or
    the CSV `planner import nccl-tests` writes; columns by header name; rows with wrong results refused; any other
    layout refused). The time is the mean of the out-of-place and in-place columns when the file has both.
    n: the group size; default the `<N>gpu` in the file name, else the ranks the stdout lists."""
    from planner.errors import SpecError
    from planner.profile.importers import read_nccl_table
    first = read_nccl_table(path)
    tables = [first] + [read_nccl_table(path, p) for p in first.placements if p != first.placement]
    named = re.search(r"(\d+)\s*gpu", os.path.basename(path), re.I)
    if n is None:
        n = int(named.group(1)) if named else first.nranks
        if n is None:
            raise SpecError(path, None, "cannot tell the group size: name the file <N>gpu (e.g. allreduce_8gpu.txt)")
        if named and first.nranks and first.nranks != n:
            raise SpecError(path, None, f"the name says {n} GPUs, the nccl-tests output lists {first.nranks} ranks")
    if len(first.rows) < 2:
        raise SpecError(path, "rows", "fewer than two measurements")
    sizes = tuple(float(r.size_bytes) for r in first.rows)
    times = np.mean([[r.time_us for r in t.rows] for t in tables], axis=0) * 1e-6
    return CollectiveTable(int(n), sizes, tuple(float(x) for x in times))


def read_nccl_dir(path: str) -> dict[int, CollectiveTable]:
    """All `*<N>gpu*` tables of a directory, keyed by group size N (two tables of one size are refused)."""
    from planner.errors import SpecError
    if not os.path.isdir(path):
        raise SpecError(path, None, "is not a directory of nccl-tests tables (*<N>gpu*.txt)")
    out, src = {}, {}
    for f in sorted(glob.glob(os.path.join(path, "*gpu*"))):
        t = read_nccl_tests(f)
        if t.n in out:
            raise SpecError(f, None, f"a second table for {t.n} GPUs (the first: {os.path.basename(src[t.n])})")
        out[t.n], src[t.n] = t, f
    if not out:
        raise SpecError(path, None, "no nccl-tests tables (*<N>gpu*.txt)")
    return out


@dataclass(frozen=True)
class CommModel:
    """Collective efficiency knobs; `planner fit` may replace the defaults with measured ones."""
    intra_efficiency: float = 0.8      # achieved / nominal NVLink bandwidth for large messages
    inter_efficiency: float = 0.9      # achieved / measured-matrix bandwidth
    grad_bytes: int = 4                # bytes per gradient element in the data-parallel reduction
    allreduce_tables: dict = field(default_factory=dict, compare=False)   # n -> CollectiveTable (in node)

    def tied_embedding_bytes(self, model, tp: int, grad_bytes: float | None = None) -> float:
        """Bytes of the tied word-embedding gradient each tensor rank all-reduces between the first and the
        last stage (vocab-parallel: padded vocab x hidden / tp elements of grad_bytes, default the profile's;
        the whole padded weight's gradient, memory.padded_vocab)."""
        from planner.costs.memory import padded_vocab
        nbytes = self.grad_bytes if grad_bytes is None else grad_bytes
        return padded_vocab(model, tp) * model.hidden_size / tp * nbytes

    def intra_allreduce_time(self, nbytes: float, n: int, cluster) -> float:
        """All-reduce inside one node: the measured table for n GPUs when there is one, else a ring."""
        if n <= 1:
            return 0.0
        tab = self.allreduce_tables.get(n)
        if tab is not None:
            return tab.time(nbytes)
        return ring_allreduce_time(nbytes, n, cluster.intra.bandwidth_GBps * self.intra_efficiency,
                                   cluster.intra.latency_us)

    def tp_allreduce_time(self, nbytes: float, tp: int, cluster) -> float:
        return self.intra_allreduce_time(nbytes, tp, cluster)

    def dp_allreduce_time(self, nbytes: float, b: int, K: int, tp: int, cluster, pair_GBps=None):
        """Gradient all-reduce of one data-parallel group: `b` GPUs in each of `K` nodes, `nbytes` per GPU.

        NCCL runs a ring over all n = b*K GPUs of the communicator, not a hierarchical
        reduce-scatter / inter-node ring / all-gather: each GPU sends 2(n-1)/n of the buffer, and on the
        ring's inter-node hops a node's b members share one crossing, so a node pushes 2(n-1)/n * nbytes
        per communicator through its NICs. The tp communicators of a node (one per tensor rank) run at
        the same time and share the node's rails (cluster.rail_share(b * tp) per GPU, so b of them per
        communicator), and no faster than its in-node NVLink hops. With K == 1 it is the measured in-node
        all-reduce (nccl-tests table) of b GPUs.
        pair_GBps: the slowest inter-node link of the ring (per rail, a scalar or an array of candidate
        links); default the cluster's nominal rail. Vectorised over pair_GBps."""
        n = b * K
        if n <= 1:
            return 0.0
        if K <= 1:
            return self.intra_allreduce_time(nbytes, b, cluster)
        bw = cluster.inter.bandwidth_GBps if pair_GBps is None else pair_GBps
        ring_bw = np.asarray(bw, dtype=float) * self.inter_efficiency * cluster.rail_share(b * tp) * b
        if b > 1:   # the ring's in-node hops (NVLink) bound it too when the rails are faster
            ring_bw = np.minimum(ring_bw, cluster.intra.bandwidth_GBps * self.intra_efficiency)
        return ring_allreduce_time(nbytes, n, ring_bw, cluster.inter.latency_us)

    def to_dict(self) -> dict:
        return {"intra_efficiency": self.intra_efficiency, "inter_efficiency": self.inter_efficiency,
                "grad_bytes": self.grad_bytes}
