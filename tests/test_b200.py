"""The B200 entries: clusters/dgx-b200.yaml, its compute profile derived from the H100 one
(benchmarks/make_b200_profile.py) and the DGX-B200 rows of benchmarks/published_recipes_b200.py. No accuracy
assertions: the figures (a held-out check of the derived profile) are in docs/notes/published_recipes.md."""
from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
BENCH = os.path.join(ROOT, "benchmarks")


def _module(name: str):
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cluster():
    from planner.spec import load_cluster
    return load_cluster(os.path.join(ROOT, "clusters", "dgx-b200.yaml"))


def test_cluster_loads_with_datasheet_figures_and_blackwell_rules():
    from planner.spec.cluster import before_blackwell, compute_capability, fp8_gemm_tn_only
    c = _cluster()
    assert c.num_gpus == 256 and c.gpus_per_node == 8
    assert 179 <= c.gpu.memory_GiB < 180                   # 183359 MiB as nvidia-smi prints it, below the 180 GB
    assert c.gpu.peak_flops("bf16") == 2250e12 and c.gpu.peak_flops("fp8") == 2 * c.gpu.peak_flops("bf16")
    assert compute_capability(c.gpu.type) == (10, 0)
    assert not fp8_gemm_tn_only(c.gpu) and not before_blackwell(c.gpu.type)


def test_default_costs_pick_the_b200_profile():
    from planner.costs import default_costs, shipped_compute_profile
    c = _cluster()
    assert shipped_compute_profile(c.gpu.type).endswith("b200_compute_profile.json")
    # the other types still get their own
    assert shipped_compute_profile("H200-SXM-141GB").endswith("h200_compute_profile.json")
    assert shipped_compute_profile("H100-SXM5-80GB").endswith("h100_compute_profile.json")
    from planner.costs.compute import load_profile
    assert default_costs(c).compute.hbm_GBps == load_profile(
        os.path.join(ROOT, "planner", "data", "b200_compute_profile.json")).hbm_GBps


def test_profile_is_the_script_output_and_the_hbm_ratio():
    """The shipped JSON is what make_b200_profile.py builds (so an edit to the H100 profile must be re-derived), and
    its only change from the H100 profile is the element-wise bandwidth by the datasheet ratio 8000 / 3350."""
    mk = _module("make_b200_profile")
    built = mk.build()
    with open(mk.OUT) as f:
        shipped = json.load(f)
    assert shipped == built
    with open(os.path.join(ROOT, "planner", "data", "h100_compute_profile.json")) as f:
        h100 = json.load(f)
    assert shipped["compute"]["hbm_GBps"] == pytest.approx(h100["compute"]["hbm_GBps"] * 8000 / 3350, abs=0.05)
    rest = {k: v for k, v in shipped["compute"].items() if k != "hbm_GBps"}
    assert rest == {k: v for k, v in h100["compute"].items() if k != "hbm_GBps"}
    assert shipped["comm"] == h100["comm"]
    assert shipped["fit"]["kind"] == "derived" and shipped["fit"]["measured"] == []


def test_export_sets_no_max_connections_on_b200():
    from planner.export import launch_env
    c = {"tp": 4, "cp": 2, "zero": 1}
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in e for e in launch_env(c, "megatron", _cluster().gpu.type))
    assert any("CUDA_DEVICE_MAX_CONNECTIONS" in e for e in launch_env(c, "megatron", "H100-SXM5-80GB"))


def test_b200_rows_parse_and_build_on_the_b200_cluster():
    b = _module("published_recipes_b200")
    sources, rows, extra = b.load()
    assert {r["id"] for r in rows} >= {"mb2511-b200-llama3-8b-fp8cs-8", "mb2511-b200-llama31-405b-fp8cs-128"}
    for s in sources.values():
        assert len(s["commit"]) == 40
    assert extra and all("MX" in e["precision"] or "granularity" in e["precision"] for e in extra)
    row = next(r for r in rows if r["id"] == "mb2511-b200-llama31-405b-fp8cs-128")
    assert not b.pr.is_partial(row)
    spec, cfg, missing, _ = b.pr.build(row)
    assert spec.cluster.gpu.type.startswith("B200") and spec.cluster.num_gpus == 128
    assert (cfg.tp, cfg.cp, cfg.pp, cfg.dp, cfg.vpp) == (4, 2, 8, 2, 8)
    assert spec.training.precision == "fp8" and spec.training.fp8_recipe == "tensorwise"
    assert "cp" not in missing and "precision" not in missing
    # cuDNN attention has no B200 row: the knob is reported, not silently taken
    assert missing == ["attention_backend"]


def test_b200_data_refuses_a_row_off_the_b200_cluster(tmp_path):
    import yaml
    b = _module("published_recipes_b200")
    with open(b.DATA) as f:
        data = yaml.safe_load(f)
    bad = copy.deepcopy(data)
    bad["rows"][0]["knobs"]["cluster"] = "dgx-h100"
    p = tmp_path / "rows.yaml"
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match="knobs.cluster"):
        b.load(str(p))
    bad = copy.deepcopy(data)
    bad["not_expressible"][0]["source"] = "nowhere"
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match="not_expressible"):
        b.load(str(p))


def test_b200_script_runs_on_one_row(capsys):
    b = _module("published_recipes_b200")
    assert b.main(["--rows", "mb2511-b200-llama3-8b-fp8cs-8"]) == 0
    out = capsys.readouterr().out
    assert "mb2511-b200-llama3-8b-fp8cs-8" in out and "median |error|" in out and "not expressible" in out
