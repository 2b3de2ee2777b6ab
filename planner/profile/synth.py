"""Seeded generator of measured-style node x node bandwidth matrices (and time series of them).

Real clusters are profiled (mpiGraph / NCCL-tests, Pipette's Algorithm 1 line 1); this module makes
stand-in matrices *with the same structure* for clusters we cannot measure, so that the planner and
its benchmarks see the heterogeneity that real profiles show. Every shipped synthetic matrix records
the exact call in its cluster YAML (`network.generator`) and `regenerate()` rebuilds it byte for byte.

What the structure is based on (see docs/notes/catalog.md for the numbers):
- Pipette (seed 000, Fig. 3 and §IV): a 40-day mpiGraph profile of its 'high-end' 16 x 8 A100 /
  HDR cluster shows node pairs with different, drifting bandwidths although all are designed equal,
  and "bidirectional bandwidths between a pair of nodes are often almost symmetric".
- Pipette's published mpiGraph matrices of that cluster (github.com/yimjinkyu1/date2024_pipette,
  Megatron-LM-2.5/mpigraph/vivaldi-master/time_{0,1}.json, 16 nodes, one HDR rail): mean 18.8 GB/s
  = 0.75 of the 25 GB/s line rate, per-link log-sd 0.03, send/receive log-ratio sd 0.055, and
  between the two snapshots a per-link log-ratio sd of 0.03. Hence the default `efficiency` 0.75 and
  `asymmetry` 0.04 (a ratio of two such factors has log-sd 0.057).
- The two-node mpiGraph sample (shared/data/mpigraph/two_node_a100_hdr.log): 14.5 vs 11.1 GB/s
  send/receive on one HDR rail (0.58 / 0.44 of line rate) - the tail a slow link can reach.
- NCCL maintainers quote ~24 GB/s as the peak per 200 Gb/s NIC (NVIDIA/nccl-tests#119), 0.96 of line
  rate: the ceiling (`max_efficiency`) no generated link exceeds.
Slow links, slow nodes and a rack hierarchy are modelling choices, not fitted: their sizes are
parameters, recorded with each matrix.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from planner.io import atomic_write_text, load_yaml, matrix_csv_text

# Draw order inside bandwidth_matrix is part of the contract (same seed -> same matrix): symmetric
# spread, directional asymmetry, slow nodes (choice, then factors), slow links (choice, then factors).


def bandwidth_matrix(nodes: int, nominal_GBps: float, *, seed: int, efficiency: float = 0.75,
                     spread: float = 0.08, asymmetry: float = 0.04,
                     slow_links: int = 0, slow_link_factor: Sequence[float] = (0.35, 0.6),
                     slow_nodes: int = 0, slow_node_factor: Sequence[float] = (0.5, 0.8),
                     rack_size: int | None = None, inter_rack_factor: float = 0.85,
                     max_efficiency: float = 0.96) -> np.ndarray:
    """A nodes x nodes matrix of per-rail point-to-point GB/s; [i, j] is i sending to j; diagonal 0.

    nominal_GBps      line rate of one rail (e.g. 200 Gb/s HDR -> 25.0).
    efficiency        median achieved fraction of nominal on a healthy intra-rack link.
    spread            log-sd of the per-link factor shared by both directions (log-normal, median 1).
    asymmetry         log-sd of an extra per-direction factor (send vs receive differ a little).
    slow_links        number of node pairs whose links (both directions) are degraded by a factor drawn
                      uniformly from slow_link_factor (a bad cable / port / congested route).
    slow_nodes        number of nodes whose every link is degraded by a factor drawn uniformly from
                      slow_node_factor (a bad HCA, PCIe downgrade, noisy neighbour).
    rack_size         consecutive nodes per rack (leaf switch); links crossing racks are multiplied by
                      inter_rack_factor (oversubscribed / longer route through the spine). None: flat.
    max_efficiency    no link exceeds this fraction of nominal (protocol overhead bounds what any
                      link achieves).
    """
    n = _positive_int(nodes, "nodes")
    if not nominal_GBps > 0:
        raise ValueError(f"nominal_GBps must be positive, got {nominal_GBps}")
    if not 0 < efficiency <= max_efficiency:
        raise ValueError(f"efficiency must be in (0, max_efficiency={max_efficiency}], got {efficiency}")
    if spread < 0 or asymmetry < 0:
        raise ValueError("spread and asymmetry must be >= 0")
    pairs = n * (n - 1) // 2
    if not 0 <= slow_links <= pairs:
        raise ValueError(f"slow_links must be in [0, {pairs}] for {n} nodes, got {slow_links}")
    if not 0 <= slow_nodes <= n:
        raise ValueError(f"slow_nodes must be in [0, {n}], got {slow_nodes}")
    slo, shi = _factor_range(slow_link_factor, "slow_link_factor")
    nlo, nhi = _factor_range(slow_node_factor, "slow_node_factor")
    if rack_size is not None and rack_size < 1:
        raise ValueError(f"rack_size must be >= 1 or None, got {rack_size}")
    if not 0 < inter_rack_factor <= 1:
        raise ValueError(f"inter_rack_factor must be in (0, 1], got {inter_rack_factor}")

    rng = np.random.default_rng(seed)
    iu = np.triu_indices(n, 1)
    sym = np.zeros((n, n))
    sym[iu] = rng.normal(0.0, 1.0, size=pairs) * spread
    sym = sym + sym.T
    direction = rng.normal(0.0, 1.0, size=(n, n)) * asymmetry
    log_bw = math.log(nominal_GBps * efficiency) + sym + direction

    if rack_size is not None:
        rack = np.arange(n) // rack_size
        log_bw = log_bw + np.where(rack[:, None] != rack[None, :], math.log(inter_rack_factor), 0.0)

    slow_node_idx = np.sort(rng.choice(n, size=slow_nodes, replace=False)) if slow_nodes else np.array([], int)
    for k in slow_node_idx:
        f = math.log(rng.uniform(nlo, nhi))
        log_bw[k, :] += f
        log_bw[:, k] += f          # a pair of two slow nodes gets both factors

    if slow_links:
        chosen = np.sort(rng.choice(pairs, size=slow_links, replace=False))
        for p in chosen:
            i, j = int(iu[0][p]), int(iu[1][p])
            f = math.log(rng.uniform(slo, shi))
            log_bw[i, j] += f
            log_bw[j, i] += f

    bw = np.minimum(np.exp(log_bw), nominal_GBps * max_efficiency)
    np.fill_diagonal(bw, 0.0)
    return bw


def snapshots(base: np.ndarray, n: int, drift: float = 0.2, seed: int = 0, *,
              correlation: float = 0.5, cap: float | None = None) -> list[np.ndarray]:
    """`n` later measurements of the links in `base`: a time series with per-link drift.

    Each directed link follows its own stationary AR(1) process in log space,
    x_t = correlation * x_{t-1} + sqrt(1 - correlation^2) * e_t, x_0 ~ N(0, 1), and snapshot t is
    base * exp(drift * x_t): drift is the log-sd of a link around its base value (0.2 ~ +-20%),
    correlation the lag-1 autocorrelation between consecutive snapshots. Values are capped at `cap`
    (the line-rate ceiling) when given. The diagonal stays 0.
    """
    base = np.asarray(base, dtype=float)
    if base.ndim != 2 or base.shape[0] != base.shape[1]:
        raise ValueError(f"base must be a square matrix, got shape {base.shape}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if drift < 0:
        raise ValueError(f"drift must be >= 0, got {drift}")
    if not -1 < correlation < 1:
        raise ValueError(f"correlation must be in (-1, 1), got {correlation}")
    rng = np.random.default_rng(seed)
    off = ~np.eye(base.shape[0], dtype=bool)
    if np.any(base[off] <= 0):
        raise ValueError("base has non-positive off-diagonal entries")
    out = []
    x = rng.normal(size=base.shape)
    innov = math.sqrt(1.0 - correlation * correlation)
    for t in range(n):
        if t:
            x = correlation * x + innov * rng.normal(size=base.shape)
        m = base * np.exp(drift * x)
        if cap is not None:
            m = np.minimum(m, cap)
        np.fill_diagonal(m, 0.0)
        out.append(m)
    return out


def format_csv(matrix: np.ndarray, *, decimals: int = 2, header: Sequence[str] = ()) -> str:
    """The CSV text write_csv writes: '# ' comment lines, then one row per node, diagonal as 0."""
    return matrix_csv_text(matrix, decimals=decimals, comments=header, zero_diagonal=True)


def write_csv(path: str, matrix: np.ndarray, *, decimals: int = 2, header: Sequence[str] = ()) -> None:
    """Write a bandwidth matrix as planner.spec.cluster.read_matrix reads it (atomically)."""
    atomic_write_text(path, format_csv(matrix, decimals=decimals, header=header))


# --- regeneration of the shipped matrices from their YAML record -------------------------------

_MATRIX_KEYS = ("efficiency", "spread", "asymmetry", "slow_links", "slow_link_factor", "slow_nodes",
                "slow_node_factor", "rack_size", "inter_rack_factor", "max_efficiency")


def from_record(nodes: int, record: dict) -> tuple[np.ndarray, list[np.ndarray]]:
    """Rebuild (matrix, snapshots) from a cluster YAML's `network.generator` mapping."""
    kw = {k: record[k] for k in _MATRIX_KEYS if k in record}
    for k in ("slow_link_factor", "slow_node_factor"):
        if k in kw:
            kw[k] = tuple(kw[k])
    nominal = float(record["nominal_GBps"])
    base = bandwidth_matrix(nodes, nominal, seed=int(record["seed"]), **kw)
    snaps_rec = record.get("snapshots") or {}
    snaps = []
    if snaps_rec and snaps_rec.get("model", "ar1") == "structured":
        # flaky links / nodes + small noise (planner.profile.snapshots.structured_snapshots); links only
        # get slower than base, so no cap is needed
        from planner.profile.snapshots import structured_snapshots
        kw = {k: snaps_rec[k] for k in ("noise", "flaky_link_fraction", "flaky_nodes") if k in snaps_rec}
        kw.update({k: tuple(snaps_rec[k]) for k in ("link_factor", "node_factor") if k in snaps_rec})
        snaps = structured_snapshots(base, int(snaps_rec["n"]), float(snaps_rec["loss"]), int(snaps_rec["seed"]), **kw)
    elif snaps_rec:
        cap = nominal * float(record.get("max_efficiency", 0.96))
        snaps = snapshots(base, int(snaps_rec["n"]), float(snaps_rec["drift"]), int(snaps_rec["seed"]),
                          correlation=float(snaps_rec.get("correlation", 0.5)), cap=cap)
    return base, snaps


def regenerate(cluster_yaml: str, out_dir: str | None = None) -> list[str]:
    """Rewrite the CSVs a cluster YAML names (bandwidth_matrix, bandwidth_snapshots) from its
    network.generator record; into `out_dir` (same file names) when given. Returns the paths written."""
    data = load_yaml(cluster_yaml)
    net = data["network"]
    record = net.get("generator")
    if not record:
        return []
    base, snaps = from_record(int(data["nodes"]), record)
    folder = out_dir or os.path.dirname(os.path.abspath(cluster_yaml))
    targets = [(net["bandwidth_matrix"], base)]
    names = net.get("bandwidth_snapshots") or []
    if len(names) != len(snaps):
        raise ValueError(f"{cluster_yaml}: {len(names)} bandwidth_snapshots named, generator makes {len(snaps)}")
    targets += list(zip(names, snaps))
    written = []
    for k, (name, m) in enumerate(targets):
        what = "matrix" if k == 0 else f"snapshot {k} of {len(snaps)}"
        header = [f"{data['name']} {what}: per-rail p2p GB/s, row i sends to column j (diagonal unused)",
                  f"synthetic, from planner.profile.synth with network.generator in {os.path.basename(cluster_yaml)}; "
                  "regenerate with: python clusters/generate.py"]
        path = os.path.join(folder, os.path.basename(name) if out_dir else name)
        write_csv(path, m, decimals=int(record.get("decimals", 2)), header=header)
        written.append(path)
    return written


def _positive_int(v, name) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _factor_range(r, name) -> tuple[float, float]:
    lo, hi = (float(r[0]), float(r[1])) if isinstance(r, (tuple, list)) else (float(r), float(r))
    if not 0 < lo <= hi <= 1:
        raise ValueError(f"{name} must be a factor or (low, high) range within (0, 1], got {r!r}")
    return lo, hi
