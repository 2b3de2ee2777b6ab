"""Measure point-to-point bandwidth and latency between ranks with torch.distributed (what and how:
planner.profile.network_options.DESCRIPTION, which `planner profile network --help` shows)."""
from __future__ import annotations

import datetime as _dt
import os
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from planner.errors import PlannerError, SpecError
from planner.io import matrix_csv_text
from planner.profile.network_options import STATISTICS

DEFAULT_SIZES = (1 << 16, 1 << 20, 1 << 24)          # 64 KiB, 1 MiB, 16 MiB


@dataclass(frozen=True)
class ProfileOptions:
    sizes_bytes: tuple = DEFAULT_SIZES
    repeats: int = 5
    warmup: int = 2
    statistic: str = "median"
    window: int = 1                 # messages in flight per timed repetition (mpiGraph's "window")
    scope: str = "node"             # node: one measuring rank per node; gpu: every rank pair
    exclusive_nodes: bool = True    # scope gpu: at most one inter-node pair per node in a round
    node_key: str = "host"          # host: group ranks by host name; rank: every rank is its own node
    max_pairs: int = 0              # pairs measured at once (0: every disjoint pair of a round; 1: one by one)
    backend: str | None = None      # None: nccl when CUDA is available, else gloo
    timeout_s: float = 120.0

    def check(self) -> ProfileOptions:
        if not self.sizes_bytes or any(int(s) <= 0 for s in self.sizes_bytes):
            raise SpecError(None, "sizes", "message sizes must be positive byte counts")
        if self.repeats < 1 or self.warmup < 0 or self.window < 1 or self.max_pairs < 0:
            raise SpecError(None, "repeats", "repeats and window must be >= 1, warmup and max_pairs >= 0")
        if self.statistic not in STATISTICS:
            raise SpecError(None, "statistic", f"must be one of {', '.join(STATISTICS)}")
        if self.scope not in ("node", "gpu"):
            raise SpecError(None, "scope", "must be node or gpu")
        if self.node_key not in ("host", "rank"):
            raise SpecError(None, "node_key", "must be host or rank")
        if self.backend not in (None, "gloo", "nccl"):
            raise SpecError(None, "backend", "must be gloo or nccl")
        return self


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    launcher: str


@dataclass(frozen=True, eq=False)
class NetworkProfile:
    node_names: tuple               # one per node
    bandwidth_GBps: np.ndarray      # nodes x nodes at the largest size; diagonal 0
    latency_us: np.ndarray          # nodes x nodes, one-way (half the small-message round trip)
    sizes_bytes: tuple
    bandwidth_by_size_GBps: np.ndarray   # sizes x nodes x nodes
    rank_nodes: tuple               # node index of every rank
    rank_hosts: tuple               # host name of every rank
    backend: str
    options: ProfileOptions
    rounds: int
    timestamp: str
    wall_s: float
    gpu_bandwidth_GBps: np.ndarray | None = None   # ranks x ranks (scope gpu)
    gpu_latency_us: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    @property
    def nodes(self) -> int:
        return len(self.node_names)

    def sidecar(self) -> dict:
        o = self.options
        d = {
            "kind": "planner network profile",
            "timestamp": self.timestamp,
            "backend": self.backend,
            "world_size": len(self.rank_hosts),
            "node_names": list(self.node_names),
            "rank_hosts": list(self.rank_hosts),
            "rank_nodes": list(self.rank_nodes),
            "scope": o.scope,
            "statistic": o.statistic,
            "repeats": o.repeats,
            "warmup": o.warmup,
            "window": o.window,
            "max_pairs": o.max_pairs,
            "rounds": self.rounds,
            "wall_s": round(self.wall_s, 3),
            "sizes_bytes": [int(s) for s in self.sizes_bytes],
            "matrix_size_bytes": int(self.sizes_bytes[-1]),
            "bandwidth_GBps": _round(self.bandwidth_GBps),
            "bandwidth_by_size_GBps": {int(s): _round(m)
                                       for s, m in zip(self.sizes_bytes, self.bandwidth_by_size_GBps)},
            "latency_us": _round(self.latency_us),
        }
        if len(self.sizes_bytes) >= 2:
            a, b = fit_alpha_beta(self.sizes_bytes, self.bandwidth_by_size_GBps)
            d["alpha_us"] = _round(a)
            d["beta_GBps"] = _round(b)
        if self.gpu_bandwidth_GBps is not None:
            d["gpu_bandwidth_GBps"] = _round(self.gpu_bandwidth_GBps)
            d["gpu_latency_us"] = _round(self.gpu_latency_us)
        d.update(self.extra)
        return d


def fit_alpha_beta(sizes_bytes, bw_by_size_GBps):
    """Per link, fit the message time t(S) = alpha + S / beta to the measured sizes (least squares).

    Returns (alpha_us, beta_GBps) matrices; NaN where a link has fewer than two measured sizes or the
    fit is not physical (time not growing with size). A negative alpha means the small sizes were
    measured slower than the line through the large ones (noise); it is reported as fitted.
    """
    sizes = np.asarray(sizes_bytes, dtype=float)
    bw = np.asarray(bw_by_size_GBps, dtype=float)
    n = bw.shape[1]
    alpha = np.full((n, n), np.nan)
    beta = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(n):
            ok = bw[:, i, j] > 0
            if i == j or ok.sum() < 2:
                continue
            t = sizes[ok] / (bw[ok, i, j] * 1e9)
            slope, icpt = np.polyfit(sizes[ok], t, 1)
            if slope > 0:
                alpha[i, j], beta[i, j] = icpt * 1e6, 1.0 / slope / 1e9
    np.fill_diagonal(alpha, 0.0)
    np.fill_diagonal(beta, 0.0)
    return alpha, beta


def _round(m, nd=4):
    return [[None if not np.isfinite(v) else round(float(v), nd) for v in row] for row in np.asarray(m)]


# ----------------------------------------------------------------------------- environment

def dist_env(environ=None) -> DistEnv:
    """Rank, world size and rendezvous address as torchrun, srun or mpirun set them."""
    e = os.environ if environ is None else environ
    for launcher, rk, ws, lr in (("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),  # noqa: B007 (used after break)
                                ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_RANK"),
                                ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
                                ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")):
        if rk in e and ws in e:
            try:
                rank, world = int(e[rk]), int(e[ws])
                local = int(e.get(lr, e.get("LOCAL_RANK", 0)))
            except ValueError:
                raise SpecError(None, f"${rk}/${ws}", "rank and world size must be integers") from None
            break
    else:
        launcher, rank, world, local = "single", 0, 1, 0
    if not 0 <= rank < world:
        raise SpecError(None, "rank", f"rank {rank} is outside world size {world}")
    addr = e.get("MASTER_ADDR")
    if addr is None:
        if world > 1:
            raise SpecError(None, "$MASTER_ADDR", f"needed to join a {world}-rank job ({launcher}); "
                            "export MASTER_ADDR=<host of rank 0> (and MASTER_PORT)")
        addr = "127.0.0.1"
    try:
        port = int(e.get("MASTER_PORT", 29500))
    except ValueError:
        raise SpecError(None, "$MASTER_PORT", "must be an integer port") from None
    return DistEnv(rank, world, local, addr, port, launcher)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _loopback_ifname() -> str | None:
    try:
        for _, name in socket.if_nameindex():
            if name.startswith("lo"):
                return name
    except OSError:
        pass
    return None


# ----------------------------------------------------------------------------- scheduling

def round_robin_rounds(participants) -> list:
    """1-factorization of the complete graph on `participants` (circle method).

    Returns rounds; each round is a list of unordered pairs (a, b) with a < b and every participant in
    at most one pair. n participants give n-1 rounds (n even) or n rounds (n odd, one sits out each round).
    """
    p = list(participants)
    if len(p) < 2:
        return []
    if len(p) % 2:
        p.append(None)
    n = len(p)
    rounds = []
    ring = p[1:]
    for _ in range(n - 1):
        line = [p[0]] + ring
        pairs = []
        for k in range(n // 2):
            a, b = line[k], line[n - 1 - k]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        ring = ring[-1:] + ring[:-1]
    return rounds


def split_exclusive(rounds, rank_nodes) -> list:
    """Split rounds so each node takes part in at most one inter-node pair per round (NIC not shared).

    Intra-node pairs stay where they are (they use NVLink / shared memory, not the node's NIC).
    """
    out = []
    for pairs in rounds:
        pending = list(pairs)
        for _ in range(len(pairs) + 1):           # bounded: each pass places at least one pair
            if not pending:
                break
            used, cur, rest = set(), [], []
            for a, b in pending:
                na, nb = rank_nodes[a], rank_nodes[b]
                if na == nb:
                    cur.append((a, b))
                elif na in used or nb in used:
                    rest.append((a, b))
                else:
                    used.update((na, nb))
                    cur.append((a, b))
            out.append(cur)
            pending = rest
    return out


def node_groups(rank_hosts, node_key: str = "host"):
    """(node names, node index of every rank), nodes in order of their first rank."""
    names, idx = [], []
    for r, h in enumerate(rank_hosts):
        key = f"{h}:{r}" if node_key == "rank" else h
        if key not in names:
            names.append(key)
        idx.append(names.index(key))
    return tuple(names), tuple(idx)


def schedule(rank_hosts, options: ProfileOptions):
    names, rank_nodes = node_groups(rank_hosts, options.node_key)
    if options.scope == "node":
        leaders = [rank_nodes.index(n) for n in range(len(names))]
        rounds = round_robin_rounds(leaders)
    else:
        rounds = round_robin_rounds(range(len(rank_hosts)))
        if options.exclusive_nodes:
            rounds = split_exclusive(rounds, rank_nodes)
    if options.max_pairs:
        # Fewer pairs at once: on hosts where pairs share something (CPU cores on loopback, a switch
        # uplink) this trades time for isolation.
        k = options.max_pairs
        rounds = [pairs[i:i + k] for pairs in rounds for i in range(0, len(pairs), k)]
    return names, rank_nodes, rounds


# ----------------------------------------------------------------------------- measurement

def _stat(values, name):
    if name == "median":
        return float(statistics.median(values))
    if name == "mean":
        return float(statistics.fmean(values))
    return float(min(values) if name == "min" else max(values))


class _Timer:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def now(self):
        if self.cuda:
            import torch
            torch.cuda.synchronize()
        return time.perf_counter()


def _measure_pair(dist, me, peer, first, options, bufs, ack, timer):
    """Both ranks of a pair run this. Returns (one-way latency s, {size: [bw B/s per rep] for me -> peer})."""
    # Latency: 1-byte ping-pong, `first` pings. Half the round trip is the one-way latency.
    lats = []
    for it in range(options.warmup + options.repeats):
        t0 = timer.now()
        if first:
            dist.send(ack, peer)
            dist.recv(ack, peer)
        else:
            dist.recv(ack, peer)
            dist.send(ack, peer)
        dt = timer.now() - t0
        if it >= options.warmup:
            lats.append(dt / 2)
    lat = _stat(lats, "median")   # the correction below always uses the median, whatever the statistic

    out = {}
    for direction in (0, 1):
        sending = (direction == 0) == first
        for size, buf in zip(options.sizes_bytes, bufs):
            bws = []
            for it in range(options.warmup + options.repeats):
                t0 = timer.now()
                if sending:
                    works = [dist.isend(buf, peer) for _ in range(options.window)]
                    for w in works:
                        w.wait()
                    dist.recv(ack, peer)      # the receiver has everything when the ack arrives
                else:
                    for _ in range(options.window):
                        dist.recv(buf, peer)
                    dist.send(ack, peer)
                dt = timer.now() - t0
                if sending and it >= options.warmup:
                    # Subtract the ack's one-way latency, but never more than half the time, so small
                    # messages on a noisy host do not produce absurd bandwidths.
                    eff = max(dt - lat, dt / 2)
                    bws.append(options.window * size / eff)
            if sending:
                out[size] = bws
    return lat, out


def run_rank(rank: int, world: int, options: ProfileOptions, master_addr: str, master_port: int,
             local_rank: int = 0, host: str | None = None):
    """Run the profile on one rank (inside an initialised job or after joining one). Rank 0 returns the
    NetworkProfile; other ranks return None."""
    import datetime

    import torch
    import torch.distributed as dist

    options.check()
    t_start = time.perf_counter()
    backend = options.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(local_rank % max(1, torch.cuda.device_count()))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    own = not dist.is_initialized()
    if own:
        dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=options.timeout_s))
    try:
        hosts = [None] * world
        dist.all_gather_object(hosts, host or socket.gethostname())
        names, rank_nodes, rounds = schedule(hosts, options)
        if len(names) < 2 and options.scope == "node":
            # Every rank reaches this same decision, so all of them leave together (no hang).
            raise SpecError(None, "ranks", f"all {world} rank(s) run on host {hosts[0]!r}: there is no node pair "
                            "to measure (use --group-by rank or --gpu-matrix, or launch on several nodes)")
        nsz = len(options.sizes_bytes)
        bw = torch.zeros((nsz, world, world), dtype=torch.float64)
        lat = torch.zeros((world, world), dtype=torch.float64)
        bufs = [torch.ones(int(s), dtype=torch.uint8, device=device) for s in options.sizes_bytes]
        ack = torch.ones(1, dtype=torch.uint8, device=device)
        timer = _Timer(device)
        for pairs in rounds:
            for a, b in pairs:
                if rank in (a, b):
                    peer = b if rank == a else a
                    l, res = _measure_pair(dist, rank, peer, rank == a, options, bufs, ack, timer)
                    lat[rank, peer] = l
                    for k, s in enumerate(options.sizes_bytes):
                        bw[k, rank, peer] = _stat(res[s], options.statistic)
            # The next round starts only when every pair of this one is done.
            dist.barrier(device_ids=[device.index]) if backend == "nccl" else dist.barrier()
        # Every entry was written by exactly one rank: a sum gathers the full matrices everywhere.
        packed = torch.cat([bw.flatten(), lat.flatten()]).to(device)
        dist.all_reduce(packed)
        packed = packed.cpu().numpy()
        bw_r = packed[:nsz * world * world].reshape(nsz, world, world) / 1e9
        lat_r = packed[nsz * world * world:].reshape(world, world) * 1e6
    finally:
        if own:
            dist.destroy_process_group()
    if rank != 0:
        return None
    return assemble(hosts, names, rank_nodes, bw_r, lat_r, options, backend, len(rounds),
                    time.perf_counter() - t_start)


def assemble(hosts, names, rank_nodes, bw_r, lat_r, options, backend, rounds, wall_s) -> NetworkProfile:
    """Rank-level measurements -> node x node matrices (statistic over the measured rank pairs)."""
    n, world = len(names), len(hosts)
    nsz = bw_r.shape[0]
    measured = lat_r > 0
    node_bw = np.zeros((nsz, n, n))
    node_lat = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            sel = [(a, b) for a in range(world) for b in range(world)
                   if rank_nodes[a] == i and rank_nodes[b] == j and measured[a, b]]
            if not sel:
                continue
            node_lat[i, j] = _stat([lat_r[a, b] for a, b in sel], options.statistic)
            for k in range(nsz):
                node_bw[k, i, j] = _stat([bw_r[k, a, b] for a, b in sel], options.statistic)
    gpu_bw = gpu_lat = None
    if options.scope == "gpu":
        gpu_bw, gpu_lat = bw_r[-1].copy(), lat_r.copy()
    return NetworkProfile(names, node_bw[-1].copy(), node_lat, tuple(int(s) for s in options.sizes_bytes),
                          node_bw, tuple(rank_nodes), tuple(hosts), backend, options, rounds,
                          _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), wall_s,
                          gpu_bw, gpu_lat)


# ----------------------------------------------------------------------------- local spawn

def _spawn_entry(rank, world, options, port, result_path, hosts=None):
    ifname = _loopback_ifname()
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname    # keep gloo on loopback, never a real NIC
    import torch
    torch.set_num_threads(1)
    prof = run_rank(rank, world, options, "127.0.0.1", port, local_rank=rank, host=hosts[rank] if hosts else None)
    if rank == 0:
        import pickle
        with open(result_path, "wb") as fh:
            pickle.dump(prof, fh)


def profile_spawn(nprocs: int, options: ProfileOptions | None = None, deadline_s: float = 300.0,
                  hosts=None) -> NetworkProfile:
    """Profile `nprocs` local gloo processes on 127.0.0.1; each process stands for one node, or, with
    `hosts` (a name per process), processes with one name stand for the GPUs of one node."""
    import pickle

    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    if nprocs < 2:
        raise SpecError(None, "--spawn", "needs at least 2 processes")
    if hosts is not None and len(hosts) != nprocs:
        raise SpecError(None, "--spawn-hosts", f"{len(hosts)} names for {nprocs} processes")
    options = (options or ProfileOptions(node_key="rank"))
    if options.backend == "nccl":
        raise SpecError(None, "--backend", "--spawn runs local gloo processes; nccl needs a launcher")
    from dataclasses import replace
    options = replace(options, backend="gloo", timeout_s=min(options.timeout_s, deadline_s)).check()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="planner-netprof-") as tmp:
        result = os.path.join(tmp, "profile.pkl")
        spawn_args = (nprocs, options, port, result, tuple(hosts) if hosts else None)
        ctx = mp.start_processes(_spawn_entry, args=spawn_args, nprocs=nprocs,
                                 join=False, start_method="spawn")
        end = time.monotonic() + deadline_s
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > end:
                    raise PlannerError(f"network profile of {nprocs} local processes exceeded {deadline_s:.0f} s")
        except ProcessException as e:
            raise PlannerError(f"a profiling process failed: {str(e).strip().splitlines()[-1]}") from None
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(5)
        with open(result, "rb") as fh:
            return pickle.load(fh)


def profile_from_env(options: ProfileOptions, environ=None) -> NetworkProfile | None:
    """Join the job the launcher started (torchrun / srun / mpirun) and profile it."""
    env = dist_env(environ)
    return run_rank(env.rank, env.world_size, options, env.master_addr, env.master_port, env.local_rank)


# ----------------------------------------------------------------------------- output

def matrix_csv(m: np.ndarray, comments=()) -> str:
    return matrix_csv_text(m, decimals=4, comments=comments)


def csv_node_names(path: str) -> tuple:
    """Node names from a matrix CSV's '# nodes: a b c' comment (written by the profiler and importers)."""
    try:
        with open(path) as fh:
            for line in fh:
                if not line.startswith("#"):
                    break
                m = line[1:].strip()
                if m.startswith("nodes:"):
                    return tuple(m[len("nodes:"):].split())
    except OSError:
        pass
    return ()


def sidecar_path(csv_path: str) -> str:
    root, ext = os.path.splitext(csv_path)
    return root + ".yaml"


def write_profile(profile: NetworkProfile, csv_path: str, sidecar: str | None = None, gpu_csv: str | None = None):
    from planner.io import atomic_write_text, write_yaml
    comments = [f"planner network profile {profile.timestamp}, backend {profile.backend}, "
                f"{profile.options.statistic} of {profile.options.repeats} repetitions at "
                f"{profile.sizes_bytes[-1]} B",
                "GB/s per rail, [i, j] = node i sends to node j; diagonal unused",
                "nodes: " + " ".join(profile.node_names)]
    atomic_write_text(csv_path, matrix_csv(profile.bandwidth_GBps, comments))
    write_yaml(sidecar or sidecar_path(csv_path), profile.sidecar())
    if gpu_csv and profile.gpu_bandwidth_GBps is not None:
        atomic_write_text(gpu_csv, matrix_csv(profile.gpu_bandwidth_GBps,
                                              comments[:2] + ["ranks: " + " ".join(profile.rank_hosts)]))


def parse_sizes(text: str) -> tuple:
    """Message sizes from "64K,1M,16M" (bytes; K/M/G suffixes, optionally KiB / KB), sorted, distinct."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    out = []
    for tok in text.split(","):
        tok = tok.strip().lower()
        if tok.endswith(("ib", "b")):
            tok = tok.rstrip("ib").rstrip("b")
        try:
            mult = units.get(tok[-1:], 1)
            out.append(int(float(tok[:-1] if tok[-1:] in units else tok) * mult))
        except (ValueError, IndexError):
            raise SpecError(None, "--sizes", f"{text!r}: give byte counts like 64K,1M,16M") from None
    if any(s <= 0 for s in out):
        raise SpecError(None, "--sizes", "sizes must be positive")
    return tuple(sorted(set(out)))
