"""Several measured bandwidth matrices of one cluster (a time series): their spread per link.

Pipette observed that links sold as equal differ and drift over days; a plan tuned to one snapshot may
be poor on the next. These pure functions summarise the spread per directed link and give the two
matrices a solver optimises against: the mean and the worst case (per-link minimum bandwidth).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def stack(snaps) -> np.ndarray:
    """(k, n, n) array of the snapshots; they must be square and of one shape."""
    mats = [np.asarray(s, dtype=float) for s in snaps]
    if not mats:
        raise ValueError("no bandwidth snapshots")
    n = mats[0].shape
    for k, m in enumerate(mats):
        if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape != n:
            raise ValueError(f"snapshot {k} has shape {m.shape}, expected {n} (square)")
    return np.stack(mats)


def _offdiag(n):
    return ~np.eye(n, dtype=bool)


def mean_matrix(snaps) -> np.ndarray:
    """Per-link mean bandwidth over the snapshots (diagonal 0)."""
    s = stack(snaps)
    m = s.mean(axis=0)
    np.fill_diagonal(m, 0.0)
    return m


def worst_case_matrix(snaps) -> np.ndarray:
    """Per-link minimum bandwidth over the snapshots (diagonal 0).

    A mapping's time on this matrix bounds its time on every snapshot from above only for objectives
    that are monotone in each link's bandwidth (true for the p2p and ring terms used here); the exact
    robust objective is the max over snapshots of the time, which the solver evaluates per snapshot.
    """
    s = stack(snaps)
    m = s.min(axis=0)
    np.fill_diagonal(m, 0.0)
    return m


@dataclass(frozen=True)
class LinkSpread:
    src: int
    dst: int
    src_name: str
    dst_name: str
    mean_GBps: float
    min_GBps: float
    max_GBps: float
    std_GBps: float
    cv: float               # std / mean (population std over the snapshots)
    drop: float             # (mean - min) / mean: how far the worst snapshot falls below the mean


@dataclass(frozen=True)
class SpreadReport:
    snapshots: int
    nodes: int
    node_names: tuple
    links: int
    mean_cv: float
    max_cv: float
    median_cv: float
    max_drop: float
    mean_GBps: float        # mean over links of the per-link mean
    worst_GBps: float       # slowest link of the worst-case matrix
    most_variable: tuple    # LinkSpread, most variable first (by cv)
    per_snapshot_mean_GBps: tuple
    # Spearman rank correlation of the links' bandwidths between snapshot pairs: near 1 means the fast
    # and slow links stay the same (a mapping tuned on one snapshot carries over); near 0 means the
    # ordering is reshuffled by drift. None with one snapshot or when a snapshot has equal links.
    rank_corr_mean: float | None = None
    rank_corr_min: float | None = None

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["node_names"] = list(self.node_names)
        d["most_variable"] = [dict(x.__dict__) for x in self.most_variable]
        d["per_snapshot_mean_GBps"] = list(self.per_snapshot_mean_GBps)
        return d


def link_spreads(snaps, node_names=()) -> list:
    s = stack(snaps)
    n = s.shape[1]
    names = list(node_names) if node_names and len(node_names) == n else [str(i) for i in range(n)]
    mean, mn, mx, sd = s.mean(0), s.min(0), s.max(0), s.std(0)
    out = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            mu = float(mean[i, j])
            cv = float(sd[i, j] / mu) if mu > 0 else 0.0
            drop = float((mu - mn[i, j]) / mu) if mu > 0 else 0.0
            out.append(LinkSpread(i, j, names[i], names[j], mu, float(mn[i, j]), float(mx[i, j]),
                                  float(sd[i, j]), cv, drop))
    return out


def spread_report(snaps, node_names=(), top: int = 10) -> SpreadReport:
    s = stack(snaps)
    n = s.shape[1]
    links = link_spreads(s, node_names)
    if not links:
        raise ValueError("a 1-node cluster has no links")
    cvs = np.array([x.cv for x in links])
    ranked = sorted(links, key=lambda x: (-x.cv, x.src, x.dst))
    off = _offdiag(n)
    names = tuple(node_names) if node_names and len(node_names) == n else tuple(str(i) for i in range(n))
    return SpreadReport(
        snapshots=s.shape[0], nodes=n, node_names=names, links=len(links),
        mean_cv=float(cvs.mean()), max_cv=float(cvs.max()), median_cv=float(np.median(cvs)),
        max_drop=float(max(x.drop for x in links)),
        mean_GBps=float(s.mean(0)[off].mean()), worst_GBps=float(s.min(0)[off].min()),
        most_variable=tuple(ranked[:max(0, top)]),
        per_snapshot_mean_GBps=tuple(float(m[off].mean()) for m in s),
        **dict(zip(("rank_corr_mean", "rank_corr_min"), rank_correlation(s))))


def rank_correlation(snaps):
    """(mean, min) Spearman correlation of link bandwidths over all snapshot pairs, or (None, None)."""
    from scipy.stats import spearmanr
    s = stack(snaps)
    k, n = s.shape[0], s.shape[1]
    off = _offdiag(n)
    vals = []
    for a in range(k):
        for b in range(a + 1, k):
            x, y = s[a][off], s[b][off]
            if np.ptp(x) == 0 or np.ptp(y) == 0:
                continue
            vals.append(float(spearmanr(x, y).statistic))
    if not vals:
        return None, None
    return float(np.mean(vals)), float(np.min(vals))


def cluster_snapshots(cluster, include_main: bool = False) -> list:
    """The measured matrices of a ClusterSpec to report on: its bandwidth_snapshots, and its main
    matrix first when asked (or when it has no snapshots)."""
    snaps = list(cluster.snapshots)
    if include_main or not snaps:
        snaps.insert(0, cluster.bandwidth)
    return snaps


def drifted_snapshots(base, k: int, drift: float = 0.2, seed: int = 0, symmetric: bool = False) -> list:
    """k synthetic snapshots: every directed link of `base` scaled by an independent factor drawn
    uniformly from [1 - drift, 1] (links only get slower than their best measurement).

    For tests and benchmarks of robust planning when no measured time series is at hand; say so
    wherever its results are reported.
    """
    if not 0 <= drift < 1:
        raise ValueError("drift must be in [0, 1)")
    rng = np.random.default_rng(seed)
    base = np.asarray(base, dtype=float)
    out = []
    for _ in range(k):
        f = rng.uniform(1 - drift, 1.0, size=base.shape)
        if symmetric:
            f = np.triu(f) + np.triu(f, 1).T
        m = base * f
        np.fill_diagonal(m, 0.0)
        out.append(m)
    return out


def volatile_snapshots(base, k: int, drift: float = 0.2, fraction: float = 0.3, seed: int = 0) -> list:
    """k synthetic snapshots in which links differ in *spread*, not in mean: a fixed `fraction` of node
    pairs (both directions) is volatile, each snapshot scaling it by an independent factor uniform in
    [1 - drift, 1]; every other link is steady at the factor with the same mean *time*,
    drift / ln(1 / (1 - drift)) (0.896 for 20%), i.e. E[1/f] is equal for both kinds.

    SYNTHETIC. The case a worst-case (robust) mapping is made for: a mean-optimal mapping cannot tell the
    two kinds apart, while the worst case sees a volatile link at 1 / (1 - drift) of its best time.
    """
    if not 0 < drift < 1:
        raise ValueError("drift must be in (0, 1)")
    if not 0 <= fraction <= 1:
        raise ValueError("fraction must be in [0, 1]")
    rng = np.random.default_rng(seed)
    base = np.asarray(base, dtype=float)
    n = base.shape[0]
    iu = np.triu_indices(n, 1)
    vol = np.zeros((n, n), dtype=bool)
    pick = rng.uniform(size=len(iu[0])) < fraction
    vol[iu[0][pick], iu[1][pick]] = True
    vol |= vol.T
    steady = drift / np.log(1.0 / (1.0 - drift))
    out = []
    for _ in range(k):
        f = rng.uniform(1 - drift, 1.0, size=base.shape)
        m = base * np.where(vol, f, steady)
        np.fill_diagonal(m, 0.0)
        out.append(m)
    return out


def mean_loss(base, snaps) -> float:
    """Average fractional bandwidth loss below `base` over every off-diagonal link and snapshot:
    1 - mean(snap / base). Uniform factors in [1 - d, 1] give d / 2."""
    b = np.asarray(base, dtype=float)
    s = stack(snaps)
    off = _offdiag(b.shape[0])
    return float(1.0 - (s[:, off] / b[off]).mean())


def structured_snapshots(base, k: int, loss: float = 0.2, seed: int = 0, *, noise: float = 0.1,
                         flaky_link_fraction: float = 0.3, link_factor=(0.1, 0.5),
                         flaky_nodes: int = 2, node_factor=(0.4, 0.8),
                         return_info: bool = False):
    """k synthetic snapshots with *structured* drift: mostly small noise, a few heavy degradations.

    SYNTHETIC, and not fitted to any measured time series. Motivation: Pipette's 40-day mpiGraph profile
    (its Fig. 3) shows node pairs designed equal with different latencies that change over the days, but
    the paper gives no statistics of that drift; the two-node mpiGraph sample shows one HDR link at
    0.44-0.58 of line rate with a 24% send/receive gap. The *structure* below (flaky links and nodes,
    the rest quiet) is an assumption about how real links degrade (bad cable, congested switch port,
    bad HCA, noisy neighbour), not an observation:
    - every directed link, every snapshot: independent noise factor uniform in [1 - noise, 1];
    - a fixed set of *flaky* node pairs (flaky_link_fraction of all pairs: a bad cable, a congested
      switch port, an oversubscribed route) which, in a snapshot, degrade with probability `rate` to a
      factor uniform in link_factor, both directions together;
    - `flaky_nodes` fixed flaky nodes (a bad HCA, a noisy neighbour) which, in a snapshot, degrade with
      probability `rate` all their links to a factor uniform in node_factor;
    - factors multiply; links only get slower than `base` (taken as their best measurement).
    `rate` is found by bisection so that the average loss, mean_loss(base, snaps), equals `loss`
    (the event draws are fixed first, so the loss is monotone in rate and the result is seeded and
    deterministic). A link that is fast on average is therefore sometimes very slow, which is the case
    a worst-case (robust) mapping can avoid and a mean-optimal one cannot see.
    With return_info, also returns {'rate', 'loss', 'flaky_pairs', 'flaky_nodes', 'events'}.
    """
    base = np.asarray(base, dtype=float)
    if base.ndim != 2 or base.shape[0] != base.shape[1]:
        raise ValueError(f"base must be a square matrix, got shape {base.shape}")
    n = base.shape[0]
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not 0 <= noise < 1:
        raise ValueError("noise must be in [0, 1)")
    if not 0 <= flaky_link_fraction <= 1:
        raise ValueError("flaky_link_fraction must be in [0, 1]")
    if not 0 <= flaky_nodes <= n:
        raise ValueError(f"flaky_nodes must be in [0, {n}]")
    for r, name in ((link_factor, "link_factor"), (node_factor, "node_factor")):
        if not 0 < r[0] <= r[1] <= 1:
            raise ValueError(f"{name} must be a (low, high) range within (0, 1], got {r!r}")
    off = _offdiag(n)
    if n < 2 or np.any(base[off] <= 0):
        raise ValueError("base needs >= 2 nodes and positive off-diagonal entries")
    rng = np.random.default_rng(seed)
    # draw order is part of the contract (same seed -> same snapshots)
    nz = rng.uniform(1 - noise, 1.0, size=(k, n, n))
    iu = np.triu_indices(n, 1)
    pairs = len(iu[0])
    npairs = int(round(flaky_link_fraction * pairs))
    fp = np.sort(rng.choice(pairs, size=npairs, replace=False)) if npairs else np.array([], int)
    fn = np.sort(rng.choice(n, size=flaky_nodes, replace=False)) if flaky_nodes else np.array([], int)
    lu, lf = rng.uniform(size=(k, npairs)), rng.uniform(*link_factor, size=(k, npairs))
    nu, nf = rng.uniform(size=(k, len(fn))), rng.uniform(*node_factor, size=(k, len(fn)))

    def build(rate):
        out = []
        for t in range(k):
            f = nz[t].copy()
            for q, p in enumerate(fp):
                if lu[t, q] < rate:
                    i, j = iu[0][p], iu[1][p]
                    f[i, j] *= lf[t, q]
                    f[j, i] *= lf[t, q]
            for q, v in enumerate(fn):
                if nu[t, q] < rate:
                    f[v, :] *= nf[t, q]
                    f[:, v] *= nf[t, q]
            m = base * f
            np.fill_diagonal(m, 0.0)
            out.append(m)
        return out

    lo_loss, hi_loss = mean_loss(base, build(0.0)), mean_loss(base, build(1.0))
    if not lo_loss - 1e-12 <= loss <= hi_loss + 1e-12:
        raise ValueError(f"loss {loss:.3f} not reachable with these parameters: noise alone gives "
                         f"{lo_loss:.3f}, every flaky link/node degraded in every snapshot {hi_loss:.3f}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if mean_loss(base, build(mid)) < loss:
            lo = mid
        else:
            hi = mid
    rate = hi
    snaps = build(rate)
    if not return_info:
        return snaps
    events = int((lu < rate).sum() + (nu < rate).sum())
    return snaps, {"rate": rate, "loss": mean_loss(base, snaps), "events": events,
                   "flaky_pairs": [(int(iu[0][p]), int(iu[1][p])) for p in fp],
                   "flaky_nodes": [int(v) for v in fn]}
