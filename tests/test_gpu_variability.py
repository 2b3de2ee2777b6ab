"""gpu.variability: the slowest GPU of a synchronous job (planner/spec/variability.py)."""
import json
import os
from dataclasses import replace

import numpy as np
import pytest

from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.compute import GPU_WORK_PARTS, load_profile
from planner.errors import SpecError
from planner.mapping.problem import layouts
from planner.search.solve import build_problem, estimate_plan, evaluate
from planner.simulator import simulate
from planner.spec.variability import DATA, SHIPPED, GPUVariability, read_variability

SGEMM = "longhorn-v100-sgemm"


def shipped():
    return read_variability(SGEMM, ".", None, "gpu.variability")


def with_spread(spec, var):
    return replace(spec, cluster=replace(spec.cluster, gpu=replace(spec.cluster.gpu, variability=var)))


def test_slowest_is_the_expected_maximum_of_draws():
    """The exact order-statistic sum against a seeded Monte Carlo of the same draws (with replacement)."""
    rng = np.random.default_rng(0)
    times = rng.lognormal(0.0, 0.05, size=50)
    v = GPUVariability(tuple(times), "test")
    for n in (2, 7, 64):
        mc = rng.choice(times, size=(40000, n)).max(axis=1).mean() / times.mean()
        assert v.slowest(n) == pytest.approx(mc, rel=2e-3)
    assert v.slowest(1) == 1.0
    grid = [v.slowest(n) for n in (1, 2, 4, 16, 256, 10**6)]
    assert all(a < b for a, b in zip(grid, grid[1:]))
    assert grid[-1] == pytest.approx(times.max() / times.mean(), rel=1e-9)
    assert v.factor(64, 64) == 1.0 and v.factor(8, 64) < 1.0 < v.factor(64, 8)


def test_the_shipped_spread_is_longhorns_v100_sgemm_without_its_outliers():
    """planner/data/gpu_variability/README.md: 386 per-GPU medians; docs/notes/gpu_variability.md's order statistics
    (outliers excluded: 1.022 / 1.036 / 1.043 / 1.044 at 8 / 64 / 512 / 1024 GPUs, there by sampling)."""
    v = shipped()
    assert set(SHIPPED) == {SGEMM} and os.path.isfile(os.path.join(DATA, SHIPPED[SGEMM]))
    assert len(v.times) == 386 and 0.95 < min(v.times) < max(v.times) < 1.05
    for n, want in ((8, 1.022), (64, 1.036), (512, 1.043), (1024, 1.044)):
        assert v.slowest(n) == pytest.approx(want, abs=1.5e-3)


def test_a_cluster_names_a_spread_or_gives_its_own_csv(tmp_path, make_spec):
    from planner.spec import parse_spec
    spec = make_spec()
    assert spec.cluster.gpu.variability is None
    (tmp_path / "burnin.csv").write_text("relative_time\n1.0\n1.02\n0.99\n1.05\n")
    for ref, n in ((SGEMM, 386), ("burnin.csv", 4)):
        d = _spec_dict(ref)
        s = parse_spec(d, str(tmp_path / "spec.yaml"))
        assert len(s.cluster.gpu.variability.times) == n
    assert parse_spec(_spec_dict("none"), str(tmp_path / "spec.yaml")).cluster.gpu.variability is None


@pytest.mark.parametrize("content,why", [
    ("1.0\nnan\n", "line 2"), ("1.0\n-1\n", "not a positive finite"), ("1.0,2.0\n1.1,2.1\n", "one value per line"),
    ("1.0\n", "at least 2"), ("t\n1.0\nabc\n", "'abc' is not a number"), ("1.0\ninf\n", "line 2"),
])
def test_a_bad_spread_names_the_file_field_and_line(tmp_path, content, why):
    from planner.spec import parse_spec
    (tmp_path / "bad.csv").write_text(content)
    with pytest.raises(SpecError) as e:
        parse_spec(_spec_dict("bad.csv"), str(tmp_path / "spec.yaml"))
    msg = str(e.value)
    assert "cluster.gpu.variability" in msg and "bad.csv" in msg and why in msg


def test_an_unknown_spread_is_refused_naming_the_shipped_ones(tmp_path):
    from planner.spec import parse_spec
    with pytest.raises(SpecError, match=r"cluster\.gpu\.variability.*neither a shipped spread \(longhorn-v100-sgemm\)"):
        parse_spec(_spec_dict("longhorn-a100"), str(tmp_path / "spec.yaml"))


def _spec_dict(ref):
    return {"model": {"name": "m", "num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
                      "vocab_size": 50257},
            "cluster": {"name": "c", "gpu": {"type": "A100", "memory_GiB": 80, "peak_tflops": {"bf16": 312},
                                             "variability": ref},
                        "nodes": 4, "gpus_per_node": 8,
                        "network": {"intra_node": {"bandwidth_GBps": 300}, "inter_node": {"bandwidth_Gbps": 200}}},
            "training": {"global_batch_size": 64, "seq_length": 2048}}


def test_gpu_work_is_charged_the_slowest_of_the_plans_gpus(make_spec):
    """Every GPU-work part of a layer scales by slowest(W) / slowest(reference): the A100 profile was fitted on runs
    of up to 8 GPUs (reference_gpus 8), so a plan on 32 GPUs pays slowest(32) / slowest(8), the collectives and the
    host floor nothing."""
    spec = make_spec()
    var = shipped()
    on = with_spread(spec, var)
    cm = default_costs(spec.cluster).compute
    assert cm.reference_gpus == 8.0
    cfg = ParallelConfig(2, 2, 8, 1, 8, "1f1b", 1, "selective", 0, True)
    off_p = cm.layer_parts(spec.model, spec.cluster, spec.training, cfg)
    on_p = cm.layer_parts(on.model, on.cluster, on.training, cfg)
    k = var.slowest(32) / var.slowest(8)
    assert cm.straggler(on.cluster, cfg) == pytest.approx(k) and k > 1.009
    for key, v in off_p.items():
        a, b = np.asarray(v, float), np.asarray(on_p[key], float)
        np.testing.assert_allclose(b, a * k if key in GPU_WORK_PARTS else a, rtol=1e-12)
    e_off, e_on = estimate_plan(spec, cfg)[0], estimate_plan(on, cfg)[0]
    assert e_off.compute_s < e_on.compute_s < e_off.compute_s * k * 1.0001
    # a plan on the profile's own 8 GPUs pays nothing
    cfg8 = ParallelConfig(2, 2, 2, 1, 32, "1f1b", 1, "selective", 0, True)
    assert cm.straggler(on.cluster, cfg8) == pytest.approx(1.0)


def test_the_simulator_and_the_mapping_see_the_same_factor(make_spec):
    spec = with_spread(make_spec(nodes=4, seed=3), shipped())
    cfg = ParallelConfig(2, 2, 8, 1, 8, "1f1b", 1, "selective", 0, True)
    lay = max(layouts(2, 2, 8, 8), key=lambda L: L.b)
    prob = build_problem(spec, cfg, lay)
    est = evaluate(spec, cfg, prob, prob.rank_order())
    assert est.iteration_s == pytest.approx(estimate_plan(spec, cfg)[0].iteration_s, rel=1e-9)
    sim = simulate(spec, cfg, layout=lay, assign=prob.rank_order())
    assert sim.iteration_s == pytest.approx(est.iteration_s, rel=0.05)
    plain = make_spec(nodes=4, seed=3)
    assert sim.iteration_s > simulate(plain, cfg, layout=lay, assign=prob.rank_order()).iteration_s


def test_a_fit_records_the_gpus_its_runs_had_and_a_profile_keeps_it(tmp_path):
    from planner.costs.compute_fit import IterationTimeFit
    from planner.profile.validate import read_vtrain_csv
    from planner.spec import load_cluster
    root = os.path.dirname(os.path.dirname(__file__))
    rows = [r for r in read_vtrain_csv(os.path.join(root, "planner", "data", "vtrain", "measured_single_node.csv"))
            if r.gpus <= 4][:12]
    cl = load_cluster(os.path.join(root, "clusters", "vtrain-a100-40gb-1node.yaml"))
    base = load_profile(os.path.join(root, "planner", "data", "a100_compute_profile.json"))
    est = IterationTimeFit(cl, base, params=("max_efficiency",)).fit(rows)
    assert est.model_.reference_gpus == float(max(r.gpus for r in rows)) == 4.0
    out = est.save(str(tmp_path / "p.json"))
    assert out["compute"]["reference_gpus"] == 4.0
    assert load_profile(str(tmp_path / "p.json")).reference_gpus == 4.0
    # a one-GPU profile (the default) writes no such key
    one = replace(est.model_, reference_gpus=1.0)
    from planner.costs.compute import save_profile
    assert "reference_gpus" not in save_profile(str(tmp_path / "q.json"), one, {})["compute"]
    assert json.load(open(tmp_path / "q.json"))["compute"].get("reference_gpus") is None


def test_estimate_says_what_the_slowest_gpu_costs(tmp_path, capsys):
    import yaml

    from planner.cli.main import main
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(_spec_dict(SGEMM)))
    argv = ["estimate", str(tmp_path / "spec.yaml"), "--tp", "2", "--pp", "2", "--dp", "8", "--mbs", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().err         # the text report goes to stderr (report.console)
    assert "slowest of 32 GPUs x1.0099" in out and "gpu.variability longhorn-v100-sgemm" in out
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["slowest_gpu_factor"] == pytest.approx(shipped().slowest(32) / shipped().slowest(8))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(_spec_dict("missing.csv")))
    assert main(argv) == 2
    assert "cluster.gpu.variability" in capsys.readouterr().err


@pytest.mark.parametrize("make,why", [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(b"1.0\n" * (10 * 1024 * 1024 // 4 + 1)), "more than the"),
    (lambda p: p.write_text("1" * 200_000 + "\n1.0\n"), "not valid CSV"),
    (lambda p: p.write_bytes(b"1.0\n\xff\xfe\n"), "not UTF-8"),
])
def test_a_spread_file_is_read_as_every_input_file_is(tmp_path, make, why):
    """io.read_text_file's rules (a regular UTF-8 file of bounded size) and a csv.Error as bad input: a directory was
    reported 'not found', a file of any size was read (a 12 MB one took seconds per estimate), and a 200 kB field
    left the csv module's error unhandled (exit 3, 'internal error')."""
    from planner.spec import parse_spec
    make(tmp_path / "bad.csv")
    with pytest.raises(SpecError) as e:
        parse_spec(_spec_dict("bad.csv"), str(tmp_path / "spec.yaml"))
    msg = str(e.value)
    assert "cluster.gpu.variability" in msg and "bad.csv" in msg and why in msg, msg


def test_a_spread_with_a_byte_order_mark_keeps_its_first_value(tmp_path):
    """A CSV saved by a spreadsheet starts with a UTF-8 byte-order mark: its first value is a time, not a header
    (read_csv_rows drops the mark too)."""
    from planner.spec import parse_spec
    (tmp_path / "bom.csv").write_text("\ufeff1.0\n1.1\n", encoding="utf-8")
    var = parse_spec(_spec_dict("bom.csv"), str(tmp_path / "spec.yaml")).cluster.gpu.variability
    assert var.times == (1.0, 1.1)


def test_the_slowest_of_n_is_computed_once_per_n(monkeypatch):
    """The search asks for the factor on every layer_parts call: each n's order-statistic sum is computed once per
    spread (it re-sorted the spread and hashed all its values on every call: ~4 ms a call at 200,000 GPUs)."""
    from planner.spec import variability as mod
    calls = []
    real = mod._slowest
    monkeypatch.setattr(mod, "_slowest", lambda times, n: calls.append(n) or real(times, n))
    v = GPUVariability(tuple(float(x) for x in range(2000, 0, -1)), "test")
    first = [v.slowest(64), v.factor(64, 8)]
    for _ in range(50):
        assert [v.slowest(64), v.factor(64, 8)] == first
    assert sorted(calls) == [8.0, 64.0]


def test_an_iteration_fit_on_a_cluster_with_a_spread_saves_the_model_it_fitted():
    """The fit's runs are charged slowest(W) / slowest(reference) while it fits, with the reference the saved
    profile records (its runs' largest W): it fitted with the base profile's reference (1 here) and saved another
    (4), so the saved profile did not predict what its fit's error says."""
    from planner.costs.compute_fit import IterationTimeFit
    from planner.profile.validate import read_vtrain_csv
    from planner.spec import load_cluster
    root = os.path.dirname(os.path.dirname(__file__))
    rows = [r for r in read_vtrain_csv(os.path.join(root, "planner", "data", "vtrain", "measured_single_node.csv"))
            if r.gpus <= 4][:12]
    cl = load_cluster(os.path.join(root, "clusters", "vtrain-a100-40gb-1node.yaml"))
    cl = replace(cl, gpu=replace(cl.gpu, variability=shipped()))
    base = replace(load_profile(os.path.join(root, "planner", "data", "a100_compute_profile.json")),
                   reference_gpus=1.0)
    est = IterationTimeFit(cl, base, params=("max_efficiency",)).fit(rows)
    assert est.model_.reference_gpus == 4.0 and {r.gpus for r in rows} > {4}
    pred = est.predict(rows)
    meas = np.array([r.measured_s for r in rows])
    assert np.sqrt(np.mean(np.log(pred / meas) ** 2)) == pytest.approx(est.rms_log_error_, rel=1e-9)


@pytest.mark.parametrize("bad", [0, 0.5, -8])
def test_a_profile_reference_below_one_gpu_is_refused(tmp_path, bad):
    """reference_gpus is a count of GPUs the profile's runs had: below 1 it was read as 1 (slowest(n <= 1) = 1)
    without a word."""
    d = json.load(open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "planner", "data",
                                    "a100_compute_profile.json")))
    d["compute"]["reference_gpus"] = bad
    d["comm"].pop("allreduce_tables", None)
    (tmp_path / "p.json").write_text(json.dumps(d))
    with pytest.raises(SpecError) as e:
        load_profile(str(tmp_path / "p.json"))
    assert e.value.field == "compute.reference_gpus" and "at least 1" in e.value.reason


def test_the_gpu_passes_outside_a_layers_parts_are_charged_the_slowest_gpu_too():
    """FSDP2's copy-out / accumulation (fsdp.fsdp_copy_s) and PyTorch CP's merge passes (allgather_layer_times) are
    HBM-bound kernels on the compute stream, GPU work like layer_parts' element-wise passes: a plan on 128 GPUs paid
    slowest(128) / slowest(1) on those and nothing on these."""
    from planner.costs import context_parallel as cpar
    from planner.costs.fsdp import fsdp_copy_s
    from planner.spec import load_spec
    root = os.path.dirname(os.path.dirname(__file__))
    spec = load_spec(os.path.join(root, "specs", "llama3-8b-h100-fsdp-128.yaml"))
    on = with_spread(spec, shipped())
    costs = default_costs(spec.cluster)
    cfg = ParallelConfig(1, 1, 64, 1, 4, zero=3, cp=2)
    k = costs.compute.straggler(on.cluster, cfg)
    assert k > 1.02
    np.testing.assert_allclose(fsdp_copy_s(on, cfg, costs, 0), k * np.array(fsdp_copy_s(spec, cfg, costs, 0)),
                               rtol=1e-12)
    t_off, t_on = (cpar.layer_times(s, cfg, costs, "allgather") for s in (spec, on))
    # what is not the exposed exchange: cp - 1 SDPA steps and the merge passes, all GPU work
    assert t_on.forward - t_on.exposed_forward == pytest.approx(k * (t_off.forward - t_off.exposed_forward),
                                                                rel=1e-12)


@pytest.mark.parametrize("script", ["megatron_sc21.py", "megatron_selective.py", "validate_vtrain.py",
                                    "published_recipes.py"])
def test_the_validation_scripts_read_a_spread_csv_from_where_they_are_run(tmp_path, script):
    """--gpu-variability CSV on the validation scripts: a relative path is the shell's (it was resolved against the
    script's folder, the repository root or benchmarks/data, depending on the script), and a bad one exits 2 naming
    the flag (it ended in a traceback, after the first rows had run)."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "burn.csv").write_text("1.0\n")
    env = dict(os.environ, PYTHONPATH=root)
    r = subprocess.run([sys.executable, os.path.join(root, "benchmarks", script), "--gpu-variability", "burn.csv"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "--gpu-variability" in r.stderr and str(tmp_path / "burn.csv") in r.stderr and "at least 2" in r.stderr


def test_a_spread_flag_resolves_against_the_working_directory(tmp_path, monkeypatch):
    from planner.spec.variability import variability_flag
    (tmp_path / "burn.csv").write_text("1.0\n1.02\n")
    monkeypatch.chdir(tmp_path)
    assert variability_flag("burn.csv") == str(tmp_path / "burn.csv")
    assert variability_flag(SGEMM) == SGEMM and variability_flag("none") == "none"


def test_the_plan_table_says_the_gpu_work_is_the_slowest_gpus(make_spec):
    """`planner solve`'s table carries the factor where the cluster names a spread, and nothing without one."""
    import io

    from rich.console import Console

    from planner.report import plan_table
    from planner.search.solve import solve

    def text(spec):
        sol = solve(spec, time_limit_s=1, seed=0, simulate=False)
        out = io.StringIO()
        Console(file=out, width=200).print(plan_table(sol))
        return out.getvalue(), sol
    on, sol = text(with_spread(make_spec(), shipped()))
    k = default_costs(sol.spec.cluster).compute.straggler(sol.spec.cluster, sol.config)
    assert "slowest GPU" in on and f"x{k:.4f}" in on and f"slowest of {sol.config.num_gpus} GPUs" in on
    assert "slowest GPU" not in text(make_spec())[0]
