
import numpy as np
import pytest
from batch_fixtures import CLUSTER, SWEEP, sweep_dict, write_sweep

from planner.batch.sweep import ShapeRule, load_sweep, shape_for_params
from planner.errors import SpecError


@pytest.mark.parametrize("target,layers,hidden", [(6.7e9, 32, 4096), (13e9, 40, 5120), (175e9, 96, 12288)])
def test_shape_rule_recovers_gpt3_shapes(target, layers, hidden):
    # GPT-3 keeps hidden / layers = 128 at these sizes; the rule must land on the published shapes
    m = shape_for_params(target)
    assert (m.num_layers, m.hidden_size) == (layers, hidden)


def test_shape_rule_hits_targets_and_keeps_tp_friendly_heads():
    rule = ShapeRule()
    for k in range(40):
        n = 1e9 * 1000 ** (k / 39)
        m = shape_for_params(n, rule=rule)
        assert abs(m.num_params() / n - 1) <= rule.tolerance + 1e-9
        assert m.num_layers % rule.layer_multiple == 0 and m.hidden_size % rule.hidden_multiple == 0
        assert m.num_attention_heads % 8 == 0 and m.hidden_size % m.num_attention_heads == 0
        assert 0.3 < (m.hidden_size / m.num_layers) / 128 < 3.0


def test_llama_shapes_use_swiglu_ffn():
    m = shape_for_params(7e9, "llama", 32000)
    assert m.family == "llama" and not m.tied_embeddings
    assert abs(m.num_params() / 7e9 - 1) < 0.02
    assert m.ffn_hidden_size % 256 == 0 and abs(m.ffn_hidden_size / m.hidden_size - 8 / 3) < 0.1


LLAMA3 = ShapeRule(kv_heads=8, ffn_multiplier=1.3, ffn_multiple=1024)


def test_llama3_shape_rule_gives_metas_blocks():
    """Meta-Llama-3-8B / -70B config.json: 8 KV heads, MLP 14336 at h 4096 and 28672 at h 8192 (meta-llama/llama-models
    FeedForward: int(2 * 4h / 3) x 1.3, rounded up to 1024); 8.03B and 70.55B parameters with vocab 128256, untied."""
    from planner.batch.sweep import _model
    m8 = _model("x", "llama", 32, 4096, 32, 128256, 8192, LLAMA3)
    m70 = _model("x", "llama", 80, 8192, 64, 128256, 8192, LLAMA3)
    assert (m8.num_kv_heads, m8.ffn_hidden_size, m70.num_kv_heads, m70.ffn_hidden_size) == (8, 14336, 8, 28672)
    assert m8.num_params() == pytest.approx(8.03e9, rel=1e-3) and m70.num_params() == pytest.approx(70.55e9, rel=1e-3)
    for target in (8.03e9, 70.55e9):       # generated sizes: near the target, grouped-query attention kept
        m = shape_for_params(target, "llama", 128256, LLAMA3, seq_length=8192)
        assert abs(m.num_params() / target - 1) < 0.02 and m.num_kv_heads == 8
        assert m.num_attention_heads % 8 == 0


def test_llama_keys_leave_existing_ids_and_refuse_gpt(tmp_path):
    """The defaults are Llama 2's shape: a llama grid's ids (pinned before the keys existed) are unchanged; the keys
    change them when given; a gpt grid refuses them, naming the field."""
    grid = {"family": "llama", "vocab_size": 32000, "parameters_B": [7, 13]}
    sw = load_sweep(write_sweep(tmp_path, sweep_dict(grid=grid)))
    base = [c.id for c in sw.cases if c.model_label.startswith("llama")]
    assert base and all(i.startswith(("llama-7.12b", "llama-13b")) for i in base)
    old = load_sweep(write_sweep(tmp_path, sweep_dict(grid={**grid, "shape_rule": {"kv_heads": 0}})))
    assert [c.id for c in old.cases if c.model_label.startswith("llama")] == base
    gqa = load_sweep(write_sweep(tmp_path, sweep_dict(grid={**grid, "shape_rule": {"kv_heads": 8}})))
    ids = [c.id for c in gqa.cases if c.model_label.startswith("llama")]
    assert ids and not set(ids) & set(base)
    with pytest.raises(SpecError, match="kv_heads"):
        load_sweep(write_sweep(tmp_path, sweep_dict(grid={"family": "gpt", "parameters_B": [1],
                                                          "shape_rule": {"kv_heads": 8}})))
    with pytest.raises(SpecError, match="heads_multiple"):
        load_sweep(write_sweep(tmp_path, sweep_dict(grid={**grid, "shape_rule": {"kv_heads": 3}})))


def test_size_refuses_llama_keys_for_gpt(capsys):
    from planner.cli.main import main
    assert main(["size", "--cluster", "clusters/dgx-h100-32.yaml", "--budget-gpu-days", "10", "--kv-heads", "8"]) == 2
    assert "--family" in capsys.readouterr().err
    assert main(["size", "--cluster", "clusters/dgx-h100-32.yaml", "--budget-gpu-days", "10", "--family", "llama",
                 "--kv-heads", "3"]) == 2
    assert "--kv-heads" in capsys.readouterr().err


def test_llama_case_ids_pinned_before_the_keys():
    """Ids written by the code before the Llama 3 keys (Nov 27) for this llama sweep: resumed CSVs still match. An id
    encodes the search space, so the default search.recompute gaining mlp (Nov 27, fifteenth session) and then block
    changed them: results searched without a mode are not reused as if searched with it."""
    import os
    import tempfile
    root = os.path.join(os.path.dirname(__file__), "..")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "llama.yaml")
        with open(path, "w") as fh:
            fh.write("name: llama-ids\ngrid: {family: llama, vocab_size: 32000, parameters_B: [7, 13]}\n"
                     f"clusters: [{os.path.abspath(os.path.join(root, 'clusters/dgx-h100-32.yaml'))}]\n"
                     "training: {global_batch_size: [256], seq_length: [4096], precision: bf16}\n"
                     "sizing: {budget_gpu_days: [100], family: llama, vocab_size: 32000}\n")
        sw = load_sweep(path)
    assert [c.id for c in sw.cases] == ["llama-7.12b-dgx-h100-32-32g-b256-s4096-e9b80496",
                                        "llama-13b-dgx-h100-32-32g-b256-s4096-f0e5266e"]
    assert [t.id for t in sw.sizing] == ["size-dgx-h100-32-32g-100gpud-b256-s4096-8dcd9ef7"]


def test_expansion_ids_are_stable_and_ordered(tmp_path):
    a = load_sweep(write_sweep(tmp_path))
    b = load_sweep(write_sweep(tmp_path))
    assert [c.id for c in a.cases] == [c.id for c in b.cases]
    assert len(a.cases) == 3 * 2 and len({c.id for c in a.cases}) == 6
    # order: cluster -> GPU count -> model
    assert [(c.gpus, c.model_label) for c in a.cases] == [(g, m) for g in (8, 16)
                                                          for m in ("m-small", "m-mid", "m-huge")]
    # a change in what is solved changes the id; the label part stays readable
    c = load_sweep(write_sweep(tmp_path, sweep_dict(solver={"time_limit_s": 2})))
    assert not {x.id for x in c.cases} & {x.id for x in a.cases}
    assert a.cases[0].id.startswith("m-small-mini-8g-b64-s1024-")


def test_gpu_counts_take_the_first_nodes_with_their_links(tmp_path):
    sw = load_sweep(write_sweep(tmp_path))
    c8, c16 = sw.cases[0], sw.cases[3]
    assert c8.spec.cluster.nodes == 1 and c16.spec.cluster.nodes == 2
    full = np.array(CLUSTER["network"]["bandwidth_matrix"], dtype=float)
    assert np.allclose(c16.spec.cluster.bandwidth, full[:2, :2])
    assert c8.price_per_gpu_hour_usd == 2.0


def test_chinchilla_tokens_and_grid(tmp_path):
    d = sweep_dict(models=[], grid={"family": "gpt", "parameters_B": {"from": 1, "to": 4, "count": 3}},
                   training={"global_batch_size": 64, "seq_length": 1024, "tokens": "chinchilla"})
    sw = load_sweep(write_sweep(tmp_path, d))
    sizes = sorted({c.params for c in sw.cases})
    assert len(sizes) == 3 and abs(sizes[0] / 1e9 - 1) < 0.02 and abs(sizes[-1] / 4e9 - 1) < 0.02
    for c in sw.cases:
        assert c.tokens == pytest.approx(20 * c.params)


def test_explicit_grid_skips_non_dividing_heads(tmp_path):
    d = sweep_dict(models=[], grid={"num_layers": [4, 8], "hidden_size": [1024, 1536], "num_attention_heads": [16, 24]})
    sw = load_sweep(write_sweep(tmp_path, d))
    shapes = {(c.spec.model.num_layers, c.spec.model.hidden_size, c.spec.model.num_attention_heads) for c in sw.cases}
    # 1024 / 24 and 1536 / ... : 1024 % 24 != 0 is skipped, the rest are kept
    assert (4, 1024, 24) not in shapes and (4, 1536, 24) in shapes and (8, 1024, 16) in shapes
    assert any("1024" in what for what, _ in sw.skipped)


@pytest.mark.parametrize("change,field", [
    ({"bogus": 1}, "bogus"),
    ({"clusters": [{"path": "mini-cluster.yaml", "gpus": [12]}]}, "clusters[0]"),
    ({"clusters": ["nope.yaml"]}, "clusters[0]"),
    ({"models": ["missing.yaml"]}, "models[0]"),
    ({"training": {"global_batch_size": [0], "seq_length": 1024}}, "training.global_batch_size"),
    ({"grid": {"parameters_B": [1], "num_layers": [4]}, "models": []}, "grid.num_layers"),
    ({"search": {"schedules": ["warp"]}}, "search.schedules"),
    ({"models": SWEEP["models"][:1] * 2}, "models"),
    # a plan rule (fp8 needs FP8 tensor cores) failing on one case still names the sweep file and its field
    ({"training": {"global_batch_size": [64], "seq_length": 1024, "precision": "fp8"}}, "training.precision"),
])
def test_errors_name_file_and_field(tmp_path, change, field):
    path = write_sweep(tmp_path, sweep_dict(**change))
    with pytest.raises(SpecError) as e:
        load_sweep(path)
    assert e.value.file is not None and e.value.field == field, str(e.value)


@pytest.mark.parametrize("name", ["../../escape", "sub/name", "/abs", "..", ".", "", "a\\b"])
def test_name_must_be_a_plain_file_name(tmp_path, name):
    # the name makes OUT/<name>.csv: a path in it would write outside --out
    with pytest.raises(SpecError) as e:
        load_sweep(write_sweep(tmp_path, sweep_dict(name=name)))
    assert e.value.field == "name" and e.value.file.endswith("sweep.yaml")
    assert "plain file name" in str(e.value)


def test_name_defaults_to_the_file_name(tmp_path):
    d = sweep_dict()
    del d["name"]
    assert load_sweep(write_sweep(tmp_path, d)).name == "sweep"
    assert load_sweep(write_sweep(tmp_path, sweep_dict(name="v2.1_odd-sizes"))).name == "v2.1_odd-sizes"


def test_inline_model_errors_point_into_the_sweep(tmp_path):
    d = sweep_dict(models=[{"name": "x", "num_layers": 4, "hidden_size": 1000, "num_attention_heads": 16,
                            "vocab_size": 100}])
    with pytest.raises(SpecError) as e:
        load_sweep(write_sweep(tmp_path, d))
    assert e.value.field == "models[0].num_attention_heads" and e.value.file.endswith("sweep.yaml")


def test_example_sweeps_parse():
    import glob
    files = sorted(glob.glob("sweeps/*.yaml"))
    assert files
    for f in files:
        sw = load_sweep(f)
        assert sw.cases
    big = load_sweep("sweeps/gpt-sizes-a100-128.yaml")
    assert len(big.cases) == 100 and {c.gpus for c in big.cases} == {128}
    assert not big.skipped


def test_generated_names_of_trillion_parameter_sizes():
    """Tryout 8: `planner size` with a large budget listed "gpt-1.49e+04b (14918.97B)"; sizes of 1T and more are
    named in t, the smaller ones as before."""
    assert shape_for_params(1.5e13).name.endswith("t") and "e+" not in shape_for_params(1.5e13).name
    assert shape_for_params(1.5e13).name == f"gpt-{shape_for_params(1.5e13).num_params() / 1e12:.3g}t"
    assert shape_for_params(6.7e9).name == "gpt-6.66b"
    from planner.batch.sweep import _fmt_params
    assert [_fmt_params(n) for n in (999.7e9, 999.7e6, 1.2e12, 3.5e8)] == ["1t", "1b", "1.2t", "350m"]


def test_size_takes_the_sweeps_ffn_limits_and_names_the_flag(capsys):
    """planner size takes --ffn-multiplier within the sweep's shape_rule range (0.1 to 16; it accepted 100 and sized a
    "1.08b" model of 256 hidden whose MLP held nearly all the parameters) and names --ffn-multiple when that is the
    wrong one (it named --ffn-multiplier)."""
    from planner.cli.main import main
    base = ["size", "--cluster", "clusters/dgx-h100-32.yaml", "--budget-gpu-days", "10", "--family", "llama"]
    assert main(base + ["--ffn-multiplier", "100"]) == 2
    assert "--ffn-multiplier" in capsys.readouterr().err
    assert main(base + ["--ffn-multiple", "0"]) == 2
    err = capsys.readouterr().err
    assert "--ffn-multiple:" in err and "--ffn-multiplier" not in err


def test_sizing_takes_the_llama3_keys_and_gpt_refuses_them(tmp_path):
    """A sweep's sizing block reads the same llama keys as the grid (one reader): they reach the sizing task's rule and
    change its id; without them the id is the one pinned before the keys; a gpt sizing refuses a shape_rule."""
    import os
    root = os.path.join(os.path.dirname(__file__), "..")
    cl = os.path.abspath(os.path.join(root, "clusters/dgx-h100-32.yaml"))
    base = {"name": "llama-ids", "grid": {"family": "llama", "vocab_size": 32000, "parameters_B": [7, 13]},
            "clusters": [cl], "training": {"global_batch_size": [256], "seq_length": [4096], "precision": "bf16"},
            "sizing": {"budget_gpu_days": [100], "family": "llama", "vocab_size": 32000}}
    plain = load_sweep(write_sweep(tmp_path, base)).sizing[0]
    assert plain.id == "size-dgx-h100-32-32g-100gpud-b256-s4096-8dcd9ef7" and plain.rule == ShapeRule()
    l3 = {**base, "sizing": {**base["sizing"], "shape_rule": {"kv_heads": 8, "ffn_multiplier": 1.3,
                                                              "ffn_multiple": 1024}}}
    task = load_sweep(write_sweep(tmp_path, l3)).sizing[0]
    assert task.rule == ShapeRule(kv_heads=8, ffn_multiplier=1.3, ffn_multiple=1024) and task.id != plain.id
    gpt = {**base, "sizing": {"budget_gpu_days": [100], "family": "gpt", "shape_rule": {"kv_heads": 8}}}
    with pytest.raises(SpecError, match="shape_rule"):
        load_sweep(write_sweep(tmp_path, gpt))
    bad = {**base, "sizing": {**base["sizing"], "shape_rule": {"ffn_multiplier": 100}}}
    with pytest.raises(SpecError, match="ffn_multiplier"):
        load_sweep(write_sweep(tmp_path, bad))
