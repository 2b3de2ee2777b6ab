"""Communication times: point-to-point on measured links, ring and hierarchical collectives.

Bandwidths are GB/s (1e9 B/s), latencies microseconds, sizes bytes, results seconds.
"""
from __future__ import annotations

from dataclasses import dataclass


def p2p_time(nbytes: float, bw_GBps: float, latency_us: float) -> float:
    return latency_us * 1e-6 + nbytes / (bw_GBps * 1e9)


def ring_allreduce_time(nbytes: float, n: int, bw_GBps: float, latency_us: float) -> float:
    """Ring all-reduce: 2(n-1)/n of the buffer crosses the slowest link, 2(n-1) latency steps."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * latency_us * 1e-6 + 2 * (n - 1) / n * nbytes / (bw_GBps * 1e9)


def ring_reduce_scatter_time(nbytes: float, n: int, bw_GBps: float, latency_us: float) -> float:
    if n <= 1:
        return 0.0
    return (n - 1) * latency_us * 1e-6 + (n - 1) / n * nbytes / (bw_GBps * 1e9)


ring_allgather_time = ring_reduce_scatter_time


def hierarchical_allreduce_time(nbytes: float, per_node: int, nodes: int, intra_GBps: float,
                                intra_lat_us: float, inter_GBps: float, inter_lat_us: float) -> float:
    """Reduce-scatter inside each node, ring all-reduce of the shard across nodes, all-gather inside."""
    t = 0.0
    if per_node > 1:
        t += 2 * ring_reduce_scatter_time(nbytes, per_node, intra_GBps, intra_lat_us)
    if nodes > 1:
        t += ring_allreduce_time(nbytes / per_node, nodes, inter_GBps, inter_lat_us)
    return t


@dataclass(frozen=True)
class CommModel:
    """Collective efficiency knobs; `planner fit` may replace the defaults with measured ones."""
    intra_efficiency: float = 0.8      # achieved / nominal NVLink bandwidth for large messages
    inter_efficiency: float = 0.9      # achieved / measured-matrix bandwidth
    grad_bytes: int = 4                # bytes per gradient element in the data-parallel reduction

    def tp_allreduce_time(self, nbytes: float, tp: int, cluster) -> float:
        if tp <= 1:
            return 0.0
        return ring_allreduce_time(nbytes, tp, cluster.intra.bandwidth_GBps * self.intra_efficiency,
                                   cluster.intra.latency_us)
