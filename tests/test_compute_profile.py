import numpy as np
import pytest

from planner.costs.compute import ComputeModel
from planner.costs.compute_fit import LayerTimeFit, layer_times
from planner.profile.compute import LayerSample, measure_layer, read_profile_csv, write_profile_csv


def test_measures_a_real_layer_on_this_device():
    import torch
    # One intra-op thread: under pytest-xdist on two cores, OpenMP workers of both processes spin against each
    # other and a tiny layer once took 92 ms against a larger one's 42 ms (CI, Nov 26). The work ratio below is
    # ~500x, so the ordering holds on any loaded machine once threads stop fighting.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        s = measure_layer(64, 4, 32, 2, tp=1, precision="fp32", repeats=3)
        assert s.forward_ms > 0 and s.backward_ms > 0
        # a wider, longer layer does more work and takes longer
        big = measure_layer(512, 4, 256, 2, tp=1, precision="fp32", repeats=3)
    finally:
        torch.set_num_threads(threads)
    assert big.forward_ms > s.forward_ms and big.backward_ms > s.backward_ms


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
                f, bw = layer_times(truth, LayerSample(h, 8, s, b, 1, "fp32", "cpu", 0, 0), peak)
                samples.append(LayerSample(h, 8, s, b, 1, "fp32", "cpu", f * 1e3, bw * 1e3))
    est = LayerTimeFit(peak, params=("max_efficiency", "half_size", "hbm_GBps", "layer_overhead_s")).fit(samples)
    assert est is not None and np.max(np.abs(est.errors_pct_)) < 1.0          # percent
    assert est.model_.max_efficiency == pytest.approx(0.6, rel=0.05)


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


def test_cross_validation_folds_are_the_seeded_permutation_split_in_k():
    # sklearn's KFold over numpy's default_rng(seed) permutation: the folds the k-fold figures were made with
    from planner.costs.compute_fit import cross_validate

    class Recorder:
        seen = []

        def __init__(self, tag=0):
            self.tag = tag

        def get_params(self):
            return {"tag": self.tag}

        def fit(self, X, y=None):
            Recorder.seen.append(list(X))
            self.model_ = None
            return self

        def predict(self, X):
            return np.array(X, float)

    n, k = 23, 5
    pred, _ = cross_validate(Recorder(), list(range(n)), k=k, seed=0)
    folds = np.array_split(np.random.default_rng(0).permutation(n), k)
    assert [sorted(set(range(n)) - set(f.tolist())) for f in folds] == Recorder.seen
    assert pred.tolist() == list(range(n))          # every sample predicted once, in place


def test_profile_and_fit_commands_import_no_profiler_or_fitting_library():
    import subprocess
    import sys
    code = ("import argparse, sys\n"
            "from planner.cli import fit, profile, validate, validate_memory\n"
            "sub = argparse.ArgumentParser().add_subparsers()\n"
            "for m in (fit, profile, validate, validate_memory): m.register(sub)\n"
            "print(sorted(m for m in ('torch', 'sklearn', 'scipy', 'ortools', 'numpy') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_cpu_profile_says_it_describes_the_cpu(tmp_path, capsys):
    """Tryout 8: `profile compute` on a machine without CUDA timed the CPU in fp32 for ~13 s without a word, and
    `fit compute` turned that into a profile a GPU cluster accepted (an H100 plan at 0.6% MFU). Both now say the
    timings are the CPU's, and the fitted profile records the device it was fitted on."""
    import json

    from planner.cli.main import main
    out = tmp_path / "prof.csv"
    assert main(["profile", "compute", "-o", str(out), "--device", "cpu", "--hidden", "64", "--heads", "4",
                 "--seq", "32", "--micro-batch", "1", "--tp", "1", "--repeats", "1"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "profiling 1 layer shape(s) on cpu (fp32)" in err and "not a GPU's" in err
    samples = [LayerSample(h, 8, s, b, 1, "fp32", "cpu", 0.01 * h * s * b / 1e3, 0.02 * h * s * b / 1e3)
               for h in (256, 512) for s in (128, 256) for b in (1, 2)]
    write_profile_csv(str(out), samples)
    prof = tmp_path / "fit.json"
    assert main(["fit", "compute", "--profile", str(out), "--peak-tflops", "1", "-o", str(prof)]) == 0
    assert "measured on cpu" in capsys.readouterr().err
    assert json.loads(prof.read_text())["fit"]["device"] == ["cpu"]


def test_a_gpu_cluster_warns_once_when_it_plans_with_a_cpu_profile(tmp_path, capsys):
    """Tryout 8's leftover: a cluster naming a CPU-fitted compute profile planned silently; now default_costs warns
    (once per cluster and profile), and a GPU-fitted (or unrecorded) profile gives no warning."""
    import dataclasses
    import json

    import planner
    from planner.costs import default_costs, shipped_compute_profile
    cl = planner.load_spec("specs/llama3-70b-h100-256.yaml").cluster
    cpu = tmp_path / "cpu.json"
    gpu = tmp_path / "gpu.json"
    with open(shipped_compute_profile(cl.gpu.type)) as fh:      # the H100's: no paths relative to its folder
        shipped = json.load(fh)
    for path, dev in ((cpu, ["cpu"]), (gpu, ["cuda"])):
        path.write_text(json.dumps({**shipped, "fit": {**(shipped.get("fit") or {}), "device": dev}}))
    with_cpu = dataclasses.replace(cl, name="cpu-planned", profiles={"compute": str(cpu)})
    default_costs(with_cpu)
    default_costs(with_cpu)
    err = capsys.readouterr().err
    assert err.count("fitted on CPU timings") == 1 and "cpu-planned" in err
    assert f"({cl.source}, gpu.type {cl.gpu.type})" in err and str(cpu) in err     # the cluster file and the profile
    default_costs(dataclasses.replace(cl, name="gpu-planned", profiles={"compute": str(gpu)}))
    assert "fitted on CPU" not in capsys.readouterr().err
    # a cluster whose "GPU" is the CPU the profile was fitted on: that is what the fit is for, no warning
    on_cpu = dataclasses.replace(cl, name="cpu-box", gpu=dataclasses.replace(cl.gpu, type="cpu"),
                                 profiles={"compute": str(cpu)})
    default_costs(on_cpu)
    assert "fitted on CPU" not in capsys.readouterr().err


def test_an_odd_fit_device_record_does_not_crash_the_cpu_warning(tmp_path, capsys):
    """fit.device is free-form JSON: a number there made default_costs raise TypeError (a traceback) before the
    profile was even loaded; it is now read as "not fitted on CPU"."""
    import dataclasses
    import json

    import planner
    from planner.costs import default_costs, shipped_compute_profile
    cl = planner.load_spec("specs/llama3-70b-h100-256.yaml").cluster
    with open(shipped_compute_profile(cl.gpu.type)) as fh:
        shipped = json.load(fh)
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({**shipped, "fit": {**(shipped.get("fit") or {}), "device": 7}}))
    default_costs(dataclasses.replace(cl, name="odd-device", profiles={"compute": str(odd)}))
    assert "fitted on CPU" not in capsys.readouterr().err


def test_layer_fit_keeps_attention_at_or_below_the_gemm_rate():
    """Tryout 8: a CPU fit reached attn_efficiency 2.0, the old bound, i.e. attention's batched GEMMs at twice the GEMM
    curve's rate and, with max_efficiency near 1, past the device's peak. Samples made with such a model now fit with
    attention capped at the curve's rate (attn_efficiency <= 1.0)."""
    truth = ComputeModel(max_efficiency=0.9, half_size=5e8, attn_efficiency=1.8, hbm_GBps=200.0, layer_overhead_s=2e-4)
    peak = 2e12
    samples = []
    for h in (256, 512):
        for s in (512, 2048):
            f, bw = layer_times(truth, LayerSample(h, 4, s, 1, 1, "fp32", "cpu", 0, 0), peak)
            samples.append(LayerSample(h, 4, s, 1, 1, "fp32", "cpu", f * 1e3, bw * 1e3))
    m = LayerTimeFit(peak).fit(samples).model_
    assert 0 < m.attn_efficiency <= 1.0 and m.max_efficiency <= 1.0
