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


# --- one nccl-tests parser: the cost model reads what `planner import nccl-tests` writes ----------------------

NCCL_STDOUT = "tests/data/nccl_allreduce_8gpu_stdout.txt"
NCCL_CSV = "tests/data/nccl_allreduce_8gpu_vtrain.csv.txt"


def test_the_importers_csv_reads_as_the_raw_output_it_came_from(tmp_path):
    """`planner import nccl-tests` writes size_bytes,time_us,...; the cost model read its busbw column as a time in
    ns (92.5 us -> 0.02 us at 1 MiB). Now both go through one header-based parser."""
    from plan_fixtures import run_cli
    for placement in ("out-of-place", "in-place"):
        out = tmp_path / placement / "allreduce_8gpu.csv"
        out.parent.mkdir()
        rc, _, err = run_cli(["import", "nccl-tests", NCCL_STDOUT, "-o", str(out), "--placement", placement])
        assert rc == 0, err
        t = read_nccl_tests(str(out))
        assert t.n == 8 and len(t.sizes) == 11
        # the stdout's own column for that placement (us), as printed in tests/data
        col = 5 if placement == "out-of-place" else 9
        raw = {int(ln.split()[0]): float(ln.split()[col]) * 1e-6 for ln in open(NCCL_STDOUT)
               if ln.split() and ln.split()[0].isdigit()}
        for s in (1048576, 67108864, 1073741824):
            assert t.time(s) == pytest.approx(raw[s], rel=1e-6)
        # and the raw output (mean of both placements) agrees with it within the placements' spread (< 1%)
        assert read_nccl_tests(NCCL_STDOUT).time(1048576) == pytest.approx(t.time(1048576), rel=0.01)
        # a directory of it is a profile's allreduce_tables / `fit compute --nccl`
        assert read_nccl_dir(str(out.parent))[8].time(67108864) == pytest.approx(579.9e-6 if col == 5 else 579.6e-6)


def test_vtrain_csv_and_stdout_of_the_same_run_agree():
    s, c = read_nccl_tests(NCCL_STDOUT), read_nccl_tests(NCCL_CSV, 8)
    for size in s.sizes:
        assert s.time(size) == pytest.approx(c.time(size), abs=1e-8)


def test_unknown_layouts_are_refused_naming_the_file(tmp_path):
    from plan_fixtures import run_cli

    from planner.errors import SpecError
    d = tmp_path / "nccl"
    d.mkdir()
    bad = d / "allreduce_8gpu.csv"
    bad.write_text("bytes,seconds\n1048576,0.0001\n2097152,0.0002\n")          # a layout no parser knows
    with pytest.raises(SpecError, match="not an nccl-tests table"):
        read_nccl_tests(str(bad))
    rc, _, err = run_cli(["fit", "compute", "--nccl", str(d), "-o", str(tmp_path / "p.json")])
    assert rc == 2 and str(bad) in err and "not an nccl-tests table" in err and "Traceback" not in err
    # a CSV with the vTrain header but a busbw where a time should be is not silently read by position
    bad.write_text("size(B),count,type,busbw(GB/s)\n1048576,262144,float,19.78\n2097152,524288,float,39.36\n")
    with pytest.raises(SpecError, match="no time column"):
        read_nccl_tests(str(bad))
    rc, _, err = run_cli(["fit", "compute", "--nccl", str(tmp_path / "none"), "-o", str(tmp_path / "p.json")])
    assert rc == 2 and "none" in err and "Traceback" not in err


def test_wrong_results_are_refused_by_the_cost_model_too(tmp_path):
    """The importer refuses a row whose #wrong > 0; the cost model averages both placements, so a wrong result in
    either is refused (it used to be read as a timing)."""
    from planner.errors import SpecError
    lines = open(NCCL_STDOUT).read().splitlines()
    k = next(i for i, ln in enumerate(lines) if ln.strip().startswith("2097152"))
    for col in (8, 12):                      # out-of-place, in-place #wrong
        cells = lines[k].split()
        cells[col] = "5"
        p = tmp_path / f"allreduce_8gpu_{col}.txt"
        p.write_text("\n".join(lines[:k] + ["  ".join(cells)] + lines[k + 1:]) + "\n")
        with pytest.raises(SpecError, match=rf"line {k + 1}.*wrong result"):
            read_nccl_tests(str(p))


def test_group_size_from_the_name_or_the_ranks(tmp_path):
    from planner.errors import SpecError
    text = open(NCCL_STDOUT).read()
    (tmp_path / "allreduce.txt").write_text(text)
    assert read_nccl_tests(str(tmp_path / "allreduce.txt")).n == 8          # the 8 '#  Rank' lines
    (tmp_path / "allreduce_4gpu.txt").write_text(text)
    with pytest.raises(SpecError, match="4 GPUs.*8 ranks"):
        read_nccl_tests(str(tmp_path / "allreduce_4gpu.txt"))
    (tmp_path / "a.csv").write_text(open(NCCL_CSV).read())
    with pytest.raises(SpecError, match="group size"):
        read_nccl_tests(str(tmp_path / "a.csv"))
