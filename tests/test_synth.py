import glob
import os

import numpy as np
import pytest
import yaml

from planner.profile.synth import bandwidth_matrix, format_csv, regenerate, snapshots, write_csv
from planner.spec.cluster import read_matrix

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFF16 = ~np.eye(16, dtype=bool)


def test_deterministic_for_a_seed_and_different_across_seeds():
    a = bandwidth_matrix(16, 25.0, seed=3, slow_links=2, slow_nodes=1, rack_size=8)
    b = bandwidth_matrix(16, 25.0, seed=3, slow_links=2, slow_nodes=1, rack_size=8)
    c = bandwidth_matrix(16, 25.0, seed=4, slow_links=2, slow_nodes=1, rack_size=8)
    assert np.array_equal(a, b)
    assert not np.allclose(a, c)


def test_shape_positive_capped_diagonal_zero():
    m = bandwidth_matrix(16, 25.0, seed=0, spread=0.3, slow_links=5, slow_nodes=2, rack_size=4)
    assert m.shape == (16, 16)
    assert np.all(np.diag(m) == 0)
    assert np.all(m[OFF16] > 0)
    assert m.max() <= 0.96 * 25.0 + 1e-12


def test_efficiency_sets_the_median():
    m = bandwidth_matrix(64, 25.0, seed=1, efficiency=0.75, spread=0.05)
    assert np.median(m[~np.eye(64, dtype=bool)]) == pytest.approx(0.75 * 25.0, rel=0.02)


def test_spread_and_asymmetry_are_log_sds():
    n = 128
    off = ~np.eye(n, dtype=bool)
    m = bandwidth_matrix(n, 25.0, seed=2, spread=0.08, asymmetry=0.0)
    assert np.allclose(m, m.T)                       # no asymmetry -> symmetric
    assert np.log(m[off]).std() == pytest.approx(0.08, rel=0.05)
    m = bandwidth_matrix(n, 25.0, seed=2, spread=0.0, asymmetry=0.04)
    ratio = np.log(m[off] / m.T[off])
    assert ratio.std() == pytest.approx(0.04 * np.sqrt(2), rel=0.05)


def test_slow_links_are_slower():
    n = 16
    base = bandwidth_matrix(n, 25.0, seed=5, spread=0.05)
    slow = bandwidth_matrix(n, 25.0, seed=5, spread=0.05, slow_links=3, slow_link_factor=(0.4, 0.5))
    ratio = slow[OFF16] / base[OFF16]
    # same draws up to the slow links; exactly 3 pairs (6 directed links) degraded by 0.4-0.5
    assert np.sum(ratio < 0.99) == 6
    assert np.all((ratio[ratio < 0.99] >= 0.4 - 1e-9) & (ratio[ratio < 0.99] <= 0.5 + 1e-9))
    assert np.allclose(ratio[ratio >= 0.99], 1.0)
    d = slow / np.where(base > 0, base, 1)
    assert np.allclose(d, d.T)                      # both directions of a slow pair


def test_slow_nodes_have_all_links_slower():
    n = 16
    m = bandwidth_matrix(n, 25.0, seed=6, spread=0.03, slow_nodes=1, slow_node_factor=(0.5, 0.5))
    mm = np.where(np.eye(n, dtype=bool), np.nan, m)
    node_mean = (np.nanmean(mm, 0) + np.nanmean(mm, 1)) / 2
    k = int(np.argmin(node_mean))
    others = np.delete(np.arange(n), k)
    # every link of the slow node is below every link among the healthy ones
    assert max(m[k, others].max(), m[others, k].max()) < m[np.ix_(others, others)][~np.eye(n - 1, dtype=bool)].min()


def test_rack_structure_visible():
    n, r = 32, 8
    m = bandwidth_matrix(n, 25.0, seed=7, spread=0.05, rack_size=r, inter_rack_factor=0.7)
    rack = np.arange(n) // r
    same = (rack[:, None] == rack[None, :]) & ~np.eye(n, dtype=bool)
    cross = rack[:, None] != rack[None, :]
    assert np.median(m[cross]) / np.median(m[same]) == pytest.approx(0.7, rel=0.03)
    flat = bandwidth_matrix(n, 25.0, seed=7, spread=0.05)
    assert np.median(flat[cross]) / np.median(flat[same]) == pytest.approx(1.0, rel=0.03)


def test_bad_arguments_rejected():
    with pytest.raises(ValueError):
        bandwidth_matrix(0, 25.0, seed=0)
    with pytest.raises(ValueError):
        bandwidth_matrix(4, -1.0, seed=0)
    with pytest.raises(ValueError):
        bandwidth_matrix(4, 25.0, seed=0, slow_links=7)      # only 6 pairs
    with pytest.raises(ValueError):
        bandwidth_matrix(4, 25.0, seed=0, slow_node_factor=(0.5, 1.5))


def test_snapshots_drift_and_correlation():
    base = bandwidth_matrix(64, 25.0, seed=8)
    off = ~np.eye(64, dtype=bool)
    s = snapshots(base, 6, drift=0.2, seed=9, correlation=0.5)
    assert len(s) == 6 and all(x.shape == base.shape and np.all(np.diag(x) == 0) for x in s)
    x = [np.log(t[off] / base[off]) for t in s]
    assert all(v.std() == pytest.approx(0.2, rel=0.1) for v in x)
    lag1 = np.mean([np.corrcoef(x[t], x[t + 1])[0, 1] for t in range(5)])
    assert lag1 == pytest.approx(0.5, abs=0.08)
    again = snapshots(base, 6, drift=0.2, seed=9, correlation=0.5)
    assert all(np.array_equal(a, b) for a, b in zip(s, again))
    capped = snapshots(base, 3, drift=0.5, seed=1, cap=20.0)
    assert max(c.max() for c in capped) <= 20.0
    assert snapshots(base, 2, drift=0.0, seed=1)[1][off] == pytest.approx(base[off])


def test_write_csv_round_trips_through_the_loader(tmp_path):
    m = bandwidth_matrix(5, 25.0, seed=0)
    p = tmp_path / "m.csv"
    write_csv(str(p), m, header=["test"])
    back = read_matrix(str(p), None, "bandwidth_matrix", 5)
    assert np.allclose(back, m, atol=0.005 + 1e-12)
    assert p.read_text() == format_csv(m, header=["test"])


def _generated():
    out = []
    for y in sorted(glob.glob(os.path.join(ROOT, "clusters", "*.yaml"))):
        if (yaml.safe_load(open(y))["network"] or {}).get("generator"):
            out.append(os.path.splitext(os.path.basename(y))[0])
    return out


def test_every_heterogeneous_cluster_is_generated():
    assert {"v100-16x8-edr-het", "a100-16x8-hdr-het", "a100-32x8-het", "a100-64x8-het", "a100-128x8-het",
            "a100-256x8-het", "dgx-a100-superpod-het", "dgx-h100-het"} <= set(_generated())


@pytest.mark.parametrize("name", _generated())
def test_regenerating_gives_the_shipped_csvs_byte_identically(name, tmp_path):
    y = os.path.join(ROOT, "clusters", f"{name}.yaml")
    written = regenerate(y, str(tmp_path))
    assert written
    for path in written:
        shipped = os.path.join(ROOT, "clusters", os.path.basename(path))
        assert open(path, "rb").read() == open(shipped, "rb").read(), os.path.basename(path)
