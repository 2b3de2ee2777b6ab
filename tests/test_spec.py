import pytest
from plan_fixtures import mini_spec_dict as _spec

from planner.errors import SpecError
from planner.spec import load_spec, parse_spec

SPEC = "specs/gpt3-13b-a100-128.yaml"


def test_example_spec_loads():
    s = load_spec(SPEC)
    assert s.model.num_layers == 40
    assert s.cluster.num_gpus == 128
    assert s.cluster.bandwidth.shape == (16, 16)
    assert 12.5e9 < s.model.num_params() < 13.5e9


def test_unknown_key_named():
    d = _spec(training={"global_batch_size": 16, "seq_length": 128, "seq_lenght": 3})
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert e.value.field == "training.seq_lenght" and "unknown key" in e.value.reason


def test_heads_not_divisible_named():
    d = _spec()
    d["model"]["num_attention_heads"] = 7
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert e.value.field == "model.num_attention_heads"


def test_bad_matrix_shape_and_entries():
    d = _spec()
    d["cluster"]["network"]["bandwidth_matrix"] = [[0, 1, 2], [1, 0, 2], [1, 1, 0]]
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert "2x2" in e.value.reason
    d["cluster"]["network"]["bandwidth_matrix"] = [[0, -1], [1, 0]]
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert "not positive" in e.value.reason


def test_missing_file_named(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("model: nope.yaml\ncluster: nope.yaml\ntraining: {global_batch_size: 8, seq_length: 8}\n")
    with pytest.raises(SpecError) as e:
        load_spec(str(p))
    assert e.value.field == "model" and "does not exist" in e.value.reason
