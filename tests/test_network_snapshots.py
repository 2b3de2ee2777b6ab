"""Bandwidth snapshots: spread statistics, mean / worst-case matrices, the report command."""
import json

import numpy as np
import pytest

from planner.cli import main
from planner.profile import snapshots as sn
from planner.profile.network import matrix_csv


def _three():
    a = np.array([[0, 10, 20], [10, 0, 30], [20, 30, 0]], dtype=float)
    b = a.copy(); b[0, 1] = 6
    c = a.copy(); c[0, 1] = 8; c[2, 1] = 33
    return [a, b, c]


def test_mean_and_worst_case():
    s = _three()
    assert sn.mean_matrix(s)[0, 1] == pytest.approx(8.0)
    assert sn.worst_case_matrix(s)[0, 1] == 6
    assert sn.worst_case_matrix(s)[2, 1] == 30
    assert np.all(np.diag(sn.worst_case_matrix(s)) == 0)
    with pytest.raises(ValueError):
        sn.stack([np.zeros((3, 3)), np.zeros((2, 2))])
    with pytest.raises(ValueError):
        sn.stack([])


def test_spread_report_ranks_most_variable_link_first():
    rep = sn.spread_report(_three(), ("x", "y", "z"), top=2)
    assert rep.snapshots == 3 and rep.links == 6
    top = rep.most_variable[0]
    assert (top.src_name, top.dst_name) == ("x", "y")
    assert top.mean_GBps == pytest.approx(8) and top.min_GBps == 6 and top.max_GBps == 10
    assert top.cv == pytest.approx(np.std([10, 6, 8]) / 8)
    assert top.drop == pytest.approx(0.25)
    assert rep.most_variable[1].dst_name == "y" and rep.most_variable[1].src_name == "z"
    assert rep.worst_GBps == 6 and len(rep.most_variable) == 2
    assert rep.max_cv == pytest.approx(top.cv)


def test_constant_snapshots_have_zero_spread():
    a = np.full((4, 4), 12.5)
    np.fill_diagonal(a, 0)
    rep = sn.spread_report([a, a.copy()])
    assert rep.max_cv == 0 and rep.max_drop == 0


def test_drifted_snapshots_bounds_and_determinism():
    base = np.full((5, 5), 25.0)
    np.fill_diagonal(base, 0)
    s1 = sn.drifted_snapshots(base, 4, 0.2, seed=3)
    s2 = sn.drifted_snapshots(base, 4, 0.2, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(s1, s2))
    off = ~np.eye(5, dtype=bool)
    for m in s1:
        assert np.all(m[off] >= 20.0) and np.all(m[off] <= 25.0) and np.all(np.diag(m) == 0)
    assert sn.spread_report(s1).max_cv > 0
    sym = sn.drifted_snapshots(base, 1, 0.2, seed=1, symmetric=True)[0]
    assert np.allclose(sym, sym.T)


def _cluster(tmp_path, snaps, names=("a", "b", "c")):
    refs = []
    for k, m in enumerate(snaps):
        (tmp_path / f"s{k}.csv").write_text(matrix_csv(m))
        refs.append(f"s{k}.csv")
    y = tmp_path / "c.yaml"
    y.write_text(f"""name: t
gpu: {{type: X, memory_GiB: 80, peak_tflops: {{bf16: 312}}}}
nodes: {len(snaps[0])}
gpus_per_node: 8
network:
  intra_node: {{bandwidth_GBps: 300}}
  inter_node: {{bandwidth_Gbps: 200}}
  bandwidth_snapshots: [{", ".join(refs)}]
  node_names: [{", ".join(names)}]
""")
    return str(y)


def test_cli_network_report(tmp_path, capsys):
    y = _cluster(tmp_path, _three())
    assert main(["network", "report", y, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["snapshots"] == 3 and d["node_names"] == ["a", "b", "c"]
    assert d["most_variable"][0]["src_name"] == "a" and d["most_variable"][0]["dst_name"] == "b"
    assert main(["network", "report", y, "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "3 snapshot(s) of 3 nodes" in text and "most variable" in text
    csvs = [str(tmp_path / f"s{k}.csv") for k in range(3)]
    assert main(["network", "report", *csvs, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["links"] == 6


def test_cli_network_report_bad_input(tmp_path, capsys):
    assert main(["network", "report", str(tmp_path / "none.yaml")]) == 2
    assert main(["network", "report", "a.txt"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_rank_correlation_matches_scipy_and_detects_reshuffling():
    from scipy.stats import spearmanr
    rng = np.random.default_rng(0)
    base = rng.uniform(10, 30, size=(5, 5))
    np.fill_diagonal(base, 0)
    off = ~np.eye(5, dtype=bool)
    same_order = [base, base * 0.9, base * 1.1]
    assert sn.rank_correlation(same_order) == (pytest.approx(1.0), pytest.approx(1.0))
    other = rng.uniform(10, 30, size=(5, 5))
    np.fill_diagonal(other, 0)
    mean, mn = sn.rank_correlation([base, other])
    assert mean == pytest.approx(spearmanr(base[off], other[off]).statistic)
    assert sn.rank_correlation([base]) == (None, None)
    flat = np.full((5, 5), 3.0)
    assert sn.rank_correlation([flat, flat]) == (None, None)
    rep = sn.spread_report(sn.drifted_snapshots(base, 4, 0.2, seed=1))
    assert rep.rank_corr_min is not None and rep.rank_corr_min < 1
