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
    from planner.cli.main import main
    from planner.costs.compute import load_profile
    out = tmp_path / "prof.csv"
    assert main(["profile", "compute", "-o", str(out), "--hidden", "64,128", "--heads", "4", "--seq", "32",
                 "--micro-batch", "1", "--tp", "1,2", "--repeats", "1"]) == 0
    samples = read_profile_csv(str(out))
    assert len(samples) == 4 and {s.tp for s in samples} == {1, 2}
    prof = tmp_path / "fit.json"
    assert main(["fit", "compute", "--profile", str(out), "--peak-tflops", "1", "-o", str(prof)]) == 0
    assert load_profile(str(prof)).max_efficiency > 0
    # --head-dim: heads follow each hidden size (64 / 32 = 2 heads, 128 / 32 = 4)
    out2 = tmp_path / "prof2.csv"
    assert main(["profile", "compute", "-o", str(out2), "--hidden", "64,128", "--head-dim", "32", "--seq", "32",
                 "--micro-batch", "1", "--tp", "1", "--repeats", "1"]) == 0
    assert [(s.hidden, s.heads) for s in read_profile_csv(str(out2))] == [(64, 2), (128, 4)]
    assert main(["profile", "compute", "-o", str(out2), "--head-dim", "0"]) == 2


def test_shipped_h100_profile_is_what_its_build_script_makes_from_the_measured_samples():
    # planner/data/h100_compute_profile.json = benchmarks/make_h100_profile.py applied to the H100 layer profile
    # shipped in benchmarks/data/h100 (GEMM curve and launch floor refitted here, the rest from the A100 fit)
    import importlib.util
    import json
    import os
    root = os.path.join(os.path.dirname(__file__), "..")
    spec = importlib.util.spec_from_file_location("make_h100", os.path.join(root, "benchmarks", "make_h100_profile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    built = mod.build()
    shipped = json.load(open(os.path.join(root, "planner", "data", "h100_compute_profile.json")))
    assert built["fit"]["samples"] == 120 and built["fit"]["compute_bound_mape_pct"] < 5.0
    for k, v in shipped["compute"].items():
        assert built["compute"][k] == pytest.approx(v, rel=1e-4), k
