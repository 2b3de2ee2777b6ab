import math

import numpy as np
import pytest

from planner.costs.comm import (
    CollectiveTable,
    CommModel,
    read_nccl_dir,
    read_nccl_tests,
    ring_allreduce_time,
    slowest_link_GBps,
)
from planner.spec import load_cluster

TABLES = "planner/data/vtrain/nccl_allreduce_nvlink"


def test_reads_vtrain_nccl_tables():
    tabs = read_nccl_dir(TABLES)
    assert sorted(tabs) == [2, 3, 4, 5, 6, 7, 8]
    t8 = tabs[8]
    assert t8.sizes[0] == 1048576 and t8.sizes[-1] == 1073741824
    # at a measured point the table returns the measurement (mean of out-of-place and in-place)
    assert t8.time(1048576) == pytest.approx((92790 + 92150) / 2 * 1e-9, rel=1e-9)
    # larger messages take longer; bus bandwidth at 1 GB is ~229 GB/s as nccl-tests printed
    assert t8.time(5e8) < t8.time(1e9)
    busbw = 2 * 7 / 8 * 1073741824 / t8.time(1073741824) / 1e9
    assert busbw == pytest.approx(229.3, rel=0.01)


def test_below_and_above_the_table():
    t = CollectiveTable(2, (1e6, 2e6, 4e6), (40e-6, 50e-6, 70e-6))
    assert t.time(0) == 0.0
    assert t.time(5e5) == pytest.approx(35e-6)        # alpha-beta from the two smallest points
    assert t.time(8e6) == pytest.approx(140e-6)       # bandwidth-bound beyond the table
    assert 50e-6 < t.time(3e6) < 70e-6


def test_console_format(tmp_path):
    p = tmp_path / "allreduce_4gpu.txt"
    p.write_text("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                 "   1048576 262144 float sum -1 51.40 20.40 30.60 0 52.74 19.88 29.82 0\n"
                 "   2097152 524288 float sum -1 61.00 34.38 51.57 0 60.00 34.95 52.43 0\n")
    t = read_nccl_tests(str(p))
    assert t.n == 4 and t.time(1048576) == pytest.approx(52.07e-6)


def test_comm_model_uses_table_then_ring():
    cl = load_cluster("clusters/vtrain-a100-40gb-1node.yaml")
    tabs = read_nccl_dir(TABLES)
    with_t = CommModel(allreduce_tables=tabs)
    ring = CommModel()
    nbytes = 8 * 2 ** 20
    assert with_t.tp_allreduce_time(nbytes, 8, cl) == pytest.approx(tabs[8].time(nbytes))
    assert ring.tp_allreduce_time(nbytes, 8, cl) == pytest.approx(
        ring_allreduce_time(nbytes, 8, 300 * 0.8, 3.0))
    assert with_t.tp_allreduce_time(nbytes, 1, cl) == 0.0
    assert with_t.intra_allreduce_time(nbytes, 4, cl) == pytest.approx(tabs[4].time(nbytes))


def test_ring_limited_by_slowest_link():
    bw = np.array([[0, 10, 20], [10, 0, 5], [20, 5, 0]], dtype=float)
    assert slowest_link_GBps(bw, [0, 2]) == 20
    assert slowest_link_GBps(bw, [0, 1, 2]) == 5
    assert math.isinf(slowest_link_GBps(bw, [1]))


def test_dp_allreduce_is_one_ring_over_the_communicator():
    """NCCL's ring over all b*K GPUs: 2(n-1)/n of the buffer leaves each node once per communicator,
    through the rails it shares with the node's other tensor ranks' communicators."""
    from planner.spec import load_cluster
    cl = load_cluster("clusters/vtrain-a100-64x8-hdr.yaml")       # 4 rails per 8 GPUs
    c = CommModel(inter_efficiency=1.0)
    S, rail = 4e9, 10.0
    # one GPU per node (tp 8): 8 GPUs share 4 rails -> half a rail each
    t1 = c.dp_allreduce_time(S, 1, 8, 8, cl, rail)
    assert t1 == pytest.approx(2 * 7 / 8 * S / (rail * 0.5 * 1e9) + 2 * 7 * cl.inter.latency_us * 1e-6)
    # four replicas per node (tp 2): the ring has n = 32 members, the communicator gets 4 x half a rail
    t4 = c.dp_allreduce_time(S, 4, 8, 2, cl, rail)
    assert t4 == pytest.approx(2 * 31 / 32 * S / (rail * 2.0 * 1e9) + 2 * 31 * cl.inter.latency_us * 1e-6)
    # a node pushes the same bytes whatever the split: K = 2 nodes, b = 4 -> 7/8 of 2S, not the 1/2 of a
    # hierarchical reduce-scatter + 2-node ring
    t2 = c.dp_allreduce_time(S, 4, 2, 2, cl, rail)
    assert t2 > 1.7 * ring_allreduce_time(S / 4, 2, rail * 0.5, cl.inter.latency_us)
    # slower links, slower ring; vectorised over candidate links
    arr = c.dp_allreduce_time(S, 2, 4, 4, cl, np.array([5.0, 10.0]))
    assert arr[0] > arr[1] > 0
    # very fast rails: the ring's NVLink hops bound it
    fast = c.dp_allreduce_time(S, 8, 4, 1, cl, 1e4)
    assert fast == pytest.approx(2 * 31 / 32 * S / (cl.intra.bandwidth_GBps * c.intra_efficiency * 1e9)
                                 + 2 * 31 * cl.inter.latency_us * 1e-6)
    # all replicas in one node: the in-node all-reduce (ring formula without a table)
    assert c.dp_allreduce_time(S, 8, 1, 1, cl) == pytest.approx(c.intra_allreduce_time(S, 8, cl))
    assert c.dp_allreduce_time(S, 1, 1, 8, cl) == 0.0


def test_vtrain_cluster_uses_the_measured_hdr_bandwidth():
    from planner.spec import load_cluster
    cl = load_cluster("clusters/vtrain-a100-64x8-hdr.yaml")
    off = cl.bandwidth[~np.eye(cl.nodes, dtype=bool)]
    # mpiGraph two-node A100 / HDR log: 11.6 GB/s the slower way, well below the nominal 25 GB/s rail
    assert off.min() == pytest.approx(11.6103) and off.max() == pytest.approx(11.6103)
    assert cl.inter.bandwidth_GBps == pytest.approx(25.0)


def test_estimate_and_simulator_charge_the_same_data_parallel_all_reduce():
    from planner.costs import default_costs
    from planner.costs.iteration import build_problem, default_layout, evaluate
    from planner.profile.validate import Row, row_cluster, row_spec
    from planner.simulator import simulate
    cl = load_cluster("clusters/vtrain-a100-64x8-hdr.yaml")
    costs = default_costs(cl)
    for tp, dp in ((8, 32), (2, 128)):      # one GPU per node per communicator; four
        row = Row(256, 1024, 8, 6144, 48, 40, 2048, tp, dp, 1, 10.0)
        spec, cfg = row_spec(row, row_cluster(row, cl))
        prob = build_problem(spec, cfg, default_layout(cfg, 8), costs)
        est = evaluate(spec, cfg, prob, prob.rank_order(), costs)
        sim = simulate(spec, cfg, costs=costs)
        assert sim.dp_comm_s == pytest.approx(est.dp_comm_s, rel=1e-9)
        # the whole stage's fp16 gradients (all tp shards) leave each node 2(n-1)/n times, through the
        # node's 4 rails of 11.6 GB/s at 0.9, whatever the split between tp and replicas per node
        from planner.costs.memory import stage_params
        n = dp
        node_bytes = 2 * (n - 1) / n * stage_params(spec.model, cfg, 0) * costs.comm.grad_bytes * tp
        assert est.dp_comm_s == pytest.approx(node_bytes / (4 * 11.6103 * 0.9 * 1e9), rel=0.01)
