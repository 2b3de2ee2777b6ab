"""Network profiler: scheduling, environment parsing, aggregation, and a real 4-process gloo run."""

import numpy as np
import pytest

from planner.errors import SpecError
from planner.profile import network as net
from planner.spec.cluster import read_matrix

# ------------------------------------------------------------------ rounds (1-factorization)

@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16])
def test_round_robin_covers_every_pair_once_no_rank_twice_per_round(n):
    rounds = net.round_robin_rounds(range(n))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = []
    for pairs in rounds:
        ranks = [r for p in pairs for r in p]
        assert len(ranks) == len(set(ranks)), "a rank takes part in two pairs of one round"
        seen += pairs
    assert sorted(seen) == [(a, b) for a in range(n) for b in range(a + 1, n)]


def test_round_robin_trivial():
    assert net.round_robin_rounds([]) == [] and net.round_robin_rounds([7]) == []
    assert net.round_robin_rounds([3, 9]) == [[(3, 9)]]


def test_split_exclusive_one_inter_node_pair_per_node_per_round():
    hosts = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    names, rank_nodes = net.node_groups(hosts)
    assert names == ("a", "b", "c") and rank_nodes[5] == 1
    rounds = net.split_exclusive(net.round_robin_rounds(range(12)), rank_nodes)
    seen = []
    for pairs in rounds:
        ranks = [r for p in pairs for r in p]
        assert len(ranks) == len(set(ranks))
        inter = [rank_nodes[r] for a, b in pairs if rank_nodes[a] != rank_nodes[b] for r in (a, b)]
        assert len(inter) == len(set(inter)), "a node's NIC is shared within a round"
        seen += pairs
    assert sorted(seen) == [(a, b) for a in range(12) for b in range(a + 1, 12)]


def test_schedule_node_scope_uses_one_leader_per_host():
    hosts = ["h0", "h0", "h1", "h1", "h2", "h2"]
    opts = net.ProfileOptions(scope="node")
    names, rank_nodes, rounds = net.schedule(hosts, opts)
    assert names == ("h0", "h1", "h2")
    assert {r for p in sum(rounds, []) for r in p} == {0, 2, 4}


# ------------------------------------------------------------------ environment

def test_dist_env_launchers():
    e = net.dist_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n0", "MASTER_PORT": "1234"})
    got = (e.rank, e.world_size, e.local_rank, e.master_addr, e.master_port, e.launcher)
    assert got == (3, 8, 1, "n0", 1234, "torchrun")
    e = net.dist_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "MASTER_ADDR": "n0"})
    assert (e.rank, e.world_size, e.local_rank, e.master_port, e.launcher) == (5, 6, 1, 29500, "srun")
    e = net.dist_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                      "OMPI_COMM_WORLD_LOCAL_RANK": "0", "MASTER_ADDR": "x"})
    assert (e.rank, e.world_size, e.launcher) == (0, 2, "mpirun")
    e = net.dist_env({})
    assert (e.rank, e.world_size, e.master_addr) == (0, 1, "127.0.0.1")


def test_dist_env_errors_name_the_variable():
    with pytest.raises(SpecError) as ex:
        net.dist_env({"RANK": "1", "WORLD_SIZE": "4"})
    assert "MASTER_ADDR" in str(ex.value)
    with pytest.raises(SpecError):
        net.dist_env({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "x"})
    with pytest.raises(SpecError):
        net.dist_env({"RANK": "a", "WORLD_SIZE": "4", "MASTER_ADDR": "x"})


def test_options_and_sizes_parsing():
    assert net.parse_sizes("64K,1M,16m") == (65536, 1 << 20, 16 << 20)
    assert net.parse_sizes("1MiB,4096") == (4096, 1 << 20)
    with pytest.raises(SpecError):
        net.parse_sizes("lots")
    with pytest.raises(SpecError):
        net.ProfileOptions(statistic="mode").check()
    with pytest.raises(SpecError):
        net.ProfileOptions(repeats=0).check()


# ------------------------------------------------------------------ aggregation (pure)

def test_assemble_groups_rank_pairs_by_host_with_the_statistic():
    hosts = ["a", "a", "b", "b"]
    names, rank_nodes = net.node_groups(hosts)
    bw = np.zeros((1, 4, 4))
    lat = np.zeros((4, 4))
    vals = {(0, 2): 10, (0, 3): 20, (1, 2): 30, (1, 3): 40, (2, 0): 5, (3, 1): 7, (0, 1): 99, (1, 0): 99}
    for (i, j), v in vals.items():
        bw[0, i, j] = v
        lat[i, j] = 1.0
    p = net.assemble(hosts, names, rank_nodes, bw, lat, net.ProfileOptions(scope="gpu", sizes_bytes=(1024,)),
                     "gloo", 3, 0.1)
    assert p.node_names == ("a", "b")
    assert p.bandwidth_GBps[0, 1] == pytest.approx(25.0)        # median of 10, 20, 30, 40
    assert p.bandwidth_GBps[1, 0] == pytest.approx(6.0)         # only measured pairs count
    assert p.bandwidth_GBps[0, 0] == 0                          # intra-host pairs stay off the node matrix
    assert p.gpu_bandwidth_GBps[0, 1] == 99


# ------------------------------------------------------------------ real gloo processes on loopback

@pytest.fixture(scope="module")
def four_proc_profile():
    opts = net.ProfileOptions(sizes_bytes=(4096, 1 << 18), repeats=3, warmup=1, node_key="rank", timeout_s=60)
    return net.profile_spawn(4, opts, deadline_s=120), None    # its time: benchmarks/network_profile.py


def test_four_gloo_processes_give_full_positive_4x4_matrix(four_proc_profile):
    prof, _ = four_proc_profile
    assert prof.backend == "gloo" and prof.nodes == 4 and prof.rounds == 3
    bw = prof.bandwidth_GBps
    assert bw.shape == (4, 4)
    off = ~np.eye(4, dtype=bool)
    assert np.all(bw[off] > 0) and np.all(np.isfinite(bw[off])) and np.all(np.diag(bw) == 0)
    assert np.all(prof.latency_us[off] > 0)
    # loopback moves well under a terabyte per second; a mis-timed transfer would show up as absurd values
    assert np.all(bw[off] < 1000)
    assert prof.bandwidth_by_size_GBps.shape == (2, 4, 4)


def test_profile_writes_cluster_csv_and_sidecar(four_proc_profile, tmp_path):
    import yaml
    prof, _ = four_proc_profile
    out = tmp_path / "bw.csv"
    net.write_profile(prof, str(out))
    m = read_matrix(str(out), None, "bandwidth_matrix", 4)
    assert np.allclose(m, prof.bandwidth_GBps, atol=1e-3)
    side = yaml.safe_load((tmp_path / "bw.yaml").read_text())
    assert side["node_names"] == list(prof.node_names) and len(side["latency_us"]) == 4
    assert side["sizes_bytes"] == [4096, 1 << 18] and side["timestamp"]
    assert len(side["alpha_us"]) == 4 and len(side["beta_GBps"][0]) == 4
    assert net.csv_node_names(str(out)) == prof.node_names


def test_profile_network_cli_spawn(tmp_path):
    from planner.cli.main import main
    out = tmp_path / "m.csv"
    assert main(["profile", "network", "--spawn", "2", "--sizes", "4K", "--repeats", "2", "--warmup", "0",
                 "-o", str(out), "--gpu-matrix", str(tmp_path / "g.csv"), "--timeout", "60"]) == 0
    m = read_matrix(str(out), None, "m", 2)
    assert m[0, 1] > 0 and m[1, 0] > 0
    g = read_matrix(str(tmp_path / "g.csv"), None, "g", 2)
    assert g[0, 1] > 0


def test_spawn_all_on_one_host_fails_cleanly_without_hanging():
    from planner.errors import PlannerError
    with pytest.raises(PlannerError) as e:      # deadline_s bounds it: a hang would end in a timeout error
        net.profile_spawn(2, net.ProfileOptions(sizes_bytes=(1024,), repeats=1, warmup=0, node_key="host"),
                          deadline_s=60)
    assert "no node pair" in str(e.value)


# ------------------------------------------------------------------ timing arithmetic on a simulated link

class _SimLink:
    """A point-to-point link with latency `lat` s and bandwidth `bw` B/s, on a simulated clock.

    Sends complete locally at once; a blocking receive of the peer's reply returns when the last data
    sent has arrived (lat + bytes/bw) and the reply has come back (lat + its bytes/bw).
    """

    def __init__(self, lat, bw):
        self.lat, self.bw, self.clock, self.outstanding = lat, bw, 0.0, 0

    def now(self):
        return self.clock

    def isend(self, t, peer):
        self.outstanding += t.numel()
        return self

    def wait(self):
        pass

    def send(self, t, peer):
        self.isend(t, peer)

    def recv(self, t, peer):
        if self.outstanding:          # our data must arrive before the peer replies
            self.clock += self.lat + self.outstanding / self.bw
            self.outstanding = 0
        self.clock += self.lat + t.numel() / self.bw


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("window", [1, 4])
def test_measure_pair_recovers_latency_and_effective_bandwidth(first, window):
    import torch
    lat, bw = 20e-6, 10e9
    link = _SimLink(lat, bw)
    sizes = (1 << 16, 1 << 24)
    opts = net.ProfileOptions(sizes_bytes=sizes, repeats=3, warmup=1, window=window)
    bufs = [torch.zeros(s, dtype=torch.uint8) for s in sizes]
    ack = torch.zeros(1, dtype=torch.uint8)
    got_lat, res = net._measure_pair(link, 0, 1, first, opts, bufs, ack, link)
    assert got_lat == pytest.approx(lat + 1 / bw, rel=1e-9)
    for s in sizes:
        # what the profiler reports: window*S delivered in (lat + window*S/bw), the ack's latency removed
        expect = window * s / (lat + window * s / bw)
        assert len(res[s]) == 3
        assert res[s][0] == pytest.approx(expect, rel=1e-3)
    assert res[sizes[1]][0] / bw == pytest.approx(1.0, abs=0.02)   # large messages: the link's bandwidth


def test_fit_alpha_beta_recovers_a_linear_link():
    sizes = (1 << 12, 1 << 16, 1 << 20, 1 << 24)
    alpha_s, beta = 5e-6, 12.5e9
    bw = np.zeros((4, 3, 3))
    for k, s in enumerate(sizes):
        bw[k] = s / (alpha_s + s / beta) / 1e9
        np.fill_diagonal(bw[k], 0)
    bw[:, 2, 0] = 0                       # one link not measured
    a, b = net.fit_alpha_beta(sizes, bw)
    assert a[0, 1] == pytest.approx(5.0, rel=1e-6) and b[1, 2] == pytest.approx(12.5, rel=1e-6)
    assert np.isnan(a[2, 0]) and a[1, 1] == 0


@pytest.mark.slow
def test_spawn_emulated_two_nodes_of_two_gpus_gpu_matrix():
    """Real gloo processes grouped as 2 hosts x 2 ranks: GPU x GPU matrix and per-host aggregation."""
    opts = net.ProfileOptions(sizes_bytes=(4096, 1 << 16), repeats=2, warmup=1, scope="gpu", node_key="host",
                              timeout_s=60)
    prof = net.profile_spawn(4, opts, deadline_s=120, hosts=["h0", "h0", "h1", "h1"])
    assert prof.node_names == ("h0", "h1") and prof.rank_nodes == (0, 0, 1, 1)
    g = prof.gpu_bandwidth_GBps
    off = ~np.eye(4, dtype=bool)
    assert g.shape == (4, 4) and np.all(g[off] > 0)
    # 3 tournament rounds; the two with 2 inter-host pairs each are split so a host's NIC is never shared
    assert prof.rounds == 5
    assert prof.bandwidth_GBps[0, 1] == pytest.approx(np.median(g[np.ix_([0, 1], [2, 3])]))
    assert prof.bandwidth_GBps[1, 0] == pytest.approx(np.median(g[np.ix_([2, 3], [0, 1])]))


def test_cli_shows_the_profilers_description_and_statistics(capsys):
    # both read planner.profile.network_options, so building the parser imports no profiler
    from planner.cli.main import main
    assert main(["profile", "network", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "round-robin tournament" in out and "{" + ",".join(net.STATISTICS) + "}" in out
