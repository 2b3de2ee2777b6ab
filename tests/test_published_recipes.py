"""The published-recipes validation set (#8): its data file's schema and citations, the knob mapping, the FLOP
conversion, the script on two rows, and the H200 entries. No accuracy assertions: the figures are in
docs/notes/published_recipes.md."""
from __future__ import annotations

import copy
import importlib.util
import os

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _module():
    spec = importlib.util.spec_from_file_location("published_recipes",
                                                  os.path.join(ROOT, "benchmarks", "published_recipes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pr = _module()


def test_data_file_schema_and_citations():
    sources, rows = pr.load_rows()
    assert rows and sources
    for r in rows:
        src = sources[r["source"]]
        assert "paper" in src or len(src["commit"]) == 40, r["id"]
        assert r["row"], r["id"]                         # the published row, transcribed
        if isinstance(r["model"], str):                  # a shipped model file that cites its config source
            assert os.path.exists(os.path.join(ROOT, "models", f"{r['model']}.yaml")), r["id"]
    assert any(not pr.is_partial(r) for r in rows)       # at least one full-knob row for the summary
    assert all("dgxc-benchmarking" not in str(s.get("repo", "")) for s in sources.values())


def _bad(rows_mutator, tmp_path):
    import yaml
    data = yaml.safe_load(open(pr.DATA))
    rows_mutator(data)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError) as e:
        pr.load_rows(str(p))
    return str(e.value)


def test_schema_rejects_bad_rows(tmp_path):
    def unstated_without_value(d):
        d["rows"][0]["knobs"].pop("recompute")
        d["rows"][0]["unstated"] = ["recompute"]
    assert "need an `assumed` value" in _bad(unstated_without_value, tmp_path)
    assert "both stated and unstated" in _bad(lambda d: d["rows"][0].__setitem__("unstated", ["tp"]), tmp_path)
    assert "unknown knobs" in _bad(lambda d: d["rows"][0]["knobs"].__setitem__("zero_bubble", True), tmp_path)
    assert "not in `sources`" in _bad(lambda d: d["rows"][0].__setitem__("source", "nowhere"), tmp_path)
    assert "commit" in _bad(lambda d: d["sources"]["mb2602"].__setitem__("commit", "abc"), tmp_path)
    assert "measured" in _bad(lambda d: d["rows"][0].__setitem__("measured", {"mfu": 0.4}), tmp_path)


def test_knob_mapping_flags_what_the_planner_lacks():
    _, rows = pr.load_rows()
    row = next(r for r in rows if r["id"] == "mb2602-llama31-405b-fp8-1024")
    spec, cfg, missing, notes = pr.build(row)
    assert cfg.num_gpus == row["gpus"] and cfg.global_batch_size == row["knobs"]["gbs"]
    assert (cfg.tp, cfg.pp, cfg.vpp, cfg.schedule, cfg.zero, cfg.sequence_parallel) == (8, 8, 8, "interleaved", 1, True)
    # Megatron-Bridge's 405B recipe counts the embedding and the loss as layers: 126 + 2 over 8 x 8 chunks
    assert spec.model.num_layers == 126 and cfg.account_embedding and cfg.account_loss
    assert cfg.stage_layers(126) == (15,) + (16,) * 6 + (15,) and "uneven_stages" not in missing
    # the Llama 3 paper's one layer fewer on the first and last stage: --decoder-first/last-pipeline-num-layers
    paper = next(r for r in rows if r["id"] == "llama3-paper-405b-8192")
    _, pcfg, pmissing, _ = pr.build(paper)
    assert (pcfg.first_stage_layers, pcfg.last_stage_layers, pcfg.zero) == (7, 7, 2) and not pmissing
    # the old form (`true`) still pads to an even split and flags the knob
    old = copy.deepcopy(row)
    old["knobs"]["uneven_stages"] = True
    ospec, _, omissing, _ = pr.build(old)
    assert ospec.model.num_layers == 128 and "uneven_stages" in omissing
    # a stated knob equal to what the planner does anyway is not missing
    plain = copy.deepcopy(row)
    plain["knobs"].update(attention="unfused", tp_comm_overlap=False, precision="bf16")
    assert not {"tp_comm_overlap", "precision"} & set(pr.build(plain)[2])


def test_megatron_flops_matches_sc21_formula_without_recompute():
    from planner.spec import load_model
    m = load_model(os.path.join(ROOT, "models", "gpt3-175b.yaml"))
    B, s, L, h, V = 8, 2048, m.num_layers, m.hidden_size, m.vocab_size
    # Narayanan et al. 2021 count 96 B s L h^2 (1 + s/6h + V/16Lh) with a recomputed forward; without it the
    # layer terms are 3/4 of that and the logit term is unchanged
    expected = 72 * B * s * L * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V
    assert pr.megatron_flops(m, B, s) == pytest.approx(expected, rel=1e-12)


def test_script_runs_on_two_rows(capsys):
    assert pr.main(["--rows", "mb2602-llama3-70b-fp8-64,nemo2407-llama2-7b-fp8-8"]) == 0
    out = capsys.readouterr().out
    assert "mb2602-llama3-70b-fp8-64" in out and "nemo2407-llama2-7b-fp8-8" in out
    assert "median |error|" in out                       # the full-knob row makes a summary


def test_h200_cluster_spec_and_profile():
    from planner.costs import default_costs, shipped_compute_profile
    from planner.spec import load_spec
    spec = load_spec(os.path.join(ROOT, "specs", "llama3-70b-h200-256.yaml"))
    assert spec.cluster.gpu.memory_GiB > 80 and spec.cluster.num_gpus == 256
    assert shipped_compute_profile(spec.cluster.gpu.type).endswith("h200_compute_profile.json")
    assert shipped_compute_profile("H100-SXM5-80GB").endswith("h100_compute_profile.json")
    h100 = default_costs(load_spec(os.path.join(ROOT, "specs", "llama3-70b-h100-256.yaml")).cluster).compute
    h200 = default_costs(spec.cluster).compute
    assert h200.hbm_GBps == pytest.approx(h100.hbm_GBps * 4800 / 3350, rel=1e-3)
    assert h200.max_efficiency == h100.max_efficiency


def test_fsdp_rows_read_alone_are_judged_as_in_the_default_run(capsys):
    """`--data published_recipes_fsdp.yaml` marks a row with a knob the planner could not take as partial, as the
    default run's #9 table does (the 405B interleaved row's torchtitan stage split), so both print one summary."""
    import json
    row = "tt2412-405b-3d-interl-512"
    pr.main(["--json", "--rows", row])
    default = json.loads(capsys.readouterr().out)["fsdp_rows"][0]
    pr.main(["--json", "--rows", row, "--data", pr.DATA_FSDP])
    alone = json.loads(capsys.readouterr().out)["rows"][0]
    assert default["missing"] == alone["missing"] == ["uneven_stages"]
    assert default["partial"] and alone["partial"]
