import numpy as np
import pytest

from planner.costs.compute import ComputeModel
from planner.profile.compute import (LayerSample, _layer_pred, fit_layer_profile, measure_layer, read_profile_csv,
                                     write_profile_csv)


def test_measures_a_real_layer_on_this_device():
    s = measure_layer(64, 4, 32, 2, tp=1, precision="fp32", repeats=2)
    assert s.forward_ms > 0 and s.backward_ms > 0
    # a wider layer does more work and takes longer
    big = measure_layer(512, 4, 128, 2, tp=1, precision="fp32", repeats=2)
    assert big.forward_ms > s.forward_ms


def test_csv_roundtrip(tmp_path):
    samples = [LayerSample(64, 4, 32, 1, 1, "fp32", "cpu", 1.5, 3.25)]
    p = tmp_path / "p.csv"
    write_profile_csv(str(p), samples)
    assert read_profile_csv(str(p)) == samples


def test_layer_fit_recovers_known_parameters():
    truth = ComputeModel(max_efficiency=0.6, half_size=5e8, hbm_GBps=200.0, layer_overhead_s=2e-4)
    peak = 2e12
    samples = []
    for h in (256, 512, 1024):
        for s in (128, 512):
            for b in (1, 4):
                f, bw = _layer_pred(truth, LayerSample(h, 8, s, b, 1, "fp32", "cpu", 0, 0), peak)
                samples.append(LayerSample(h, 8, s, b, 1, "fp32", "cpu", f * 1e3, bw * 1e3))
    m, rel = fit_layer_profile(samples, peak, names=("max_efficiency", "half_size", "hbm_GBps", "layer_overhead_s"))
    assert np.max(np.abs(rel)) < 0.01
    assert m.max_efficiency == pytest.approx(0.6, rel=0.05)


def test_profile_and_fit_compute_through_the_cli(tmp_path):
    from planner.cli import main
    from planner.costs.compute import load_profile
    out = tmp_path / "prof.csv"
    assert main(["profile", "compute", "-o", str(out), "--hidden", "64,128", "--heads", "4", "--seq", "32",
                 "--micro-batch", "1", "--tp", "1,2", "--repeats", "1"]) == 0
    samples = read_profile_csv(str(out))
    assert len(samples) == 4 and {s.tp for s in samples} == {1, 2}
    prof = tmp_path / "fit.json"
    assert main(["fit", "compute", "--profile", str(out), "--peak-tflops", "1", "-o", str(prof)]) == 0
    assert load_profile(str(prof)).max_efficiency > 0


def test_shipped_h100_profile_reproduces_from_its_measured_samples():
    # the GEMM curve and launch floor of planner/data/h100_compute_profile.json come from the H100 layer profile
    # shipped beside the benchmarks; fitting it again gives them back
    import json
    import os
    from planner.profile.compute import fit_layer_profile, read_profile_csv
    root = os.path.join(os.path.dirname(__file__), "..")
    shipped = json.load(open(os.path.join(root, "planner", "data", "h100_compute_profile.json")))
    samples = read_profile_csv(os.path.join(root, "benchmarks", "data", "h100", "compute.csv"))
    assert len(samples) == 120 and samples[0].device == "cuda"
    from planner.costs.compute import ComputeModel
    m, rel = fit_layer_profile(samples, 989e12, ComputeModel())
    for k in ("max_efficiency", "half_size", "layer_overhead_s"):
        assert getattr(m, k) == pytest.approx(shipped["compute"][k], rel=0.02)
    assert shipped["fit"]["kind"] == "layer" and abs(rel).mean() < 0.08
