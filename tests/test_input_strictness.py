"""Input strictness (tryout 6, findings 1, 2, 4, 5): a cluster's peak_tflops keys and profiles, empty search lists and
virtual_stages 1 are refused with file, field and reason (exit 2), never read as something else."""
import glob
import os

import pytest
import yaml
from plan_fixtures import mini_spec_dict

from planner.errors import SpecError
from planner.spec import GPUSpec, load_cluster, load_spec, parse_cluster, parse_spec
from planner.spec.fields import FieldError
from planner.spec.plan import PRECISIONS, SearchSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100 = os.path.join(ROOT, "clusters", "dgx-h100-16x8.yaml")


def _inline(cluster_file: str, precision: str = "bf16", **gpu) -> dict:
    """mini_spec_dict on `cluster_file` inlined, its gpu fields replaced by `gpu`."""
    with open(cluster_file) as fh:
        c = yaml.safe_load(fh)
    c["gpu"].update(gpu)
    c.get("network", {}).pop("bandwidth_matrix", None)
    c.pop("profiles", None)
    return mini_spec_dict(cluster=c, training={"global_batch_size": 16, "seq_length": 128, "precision": precision})


def _error(d, file="s.yaml") -> SpecError:
    with pytest.raises(SpecError) as e:
        parse_spec(d, file)
    return e.value


def _cli(argv, capsys):
    from planner.cli.main import main
    rc = main(argv)
    return rc, capsys.readouterr().err


# --- 1. gpu.peak_tflops -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key,near", [("BF16", "bf16"), ("bf61", "bf16"), ("fp61", "fp16"), ("tf32", None),
                                      ("int8", None)])
def test_unknown_peak_precision_is_refused(key, near):
    e = _error(_inline(H100, peak_tflops={key: 989, "fp8": 1979, "fp32": 67}))
    assert (e.file, e.field) == ("s.yaml", f"cluster.gpu.peak_tflops.{key}")
    assert "unknown precision" in e.reason and all(p in e.reason for p in PRECISIONS)
    assert (f"a misspelling of {near!r}?" in e.reason) if near else "misspelling" not in e.reason


def test_unknown_peak_precision_in_a_cluster_file_names_the_file(tmp_path):
    with open(H100) as fh:
        c = yaml.safe_load(fh)
    c["gpu"]["peak_tflops"]["bf61"] = 312
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(c))
    with pytest.raises(SpecError) as e:
        load_cluster(str(p))
    assert (e.value.file, e.value.field) == (str(p), "gpu.peak_tflops.bf61")


@pytest.mark.parametrize("precision,peaks,missing", [
    ("bf16", {"fp8": 1979, "fp32": 67}, "bf16"),             # the tryout's case: costed at fp8's 1979 before
    ("bf16", {"fp16": 989, "fp8": 1979, "fp32": 67}, "bf16"),
    ("fp16", {"bf16": 989, "fp8": 1979}, "fp16"),
    ("fp32", {"bf16": 989, "fp16": 989, "fp8": 1979}, "fp32"),
    ("fp8", {"fp8": 1979, "fp32": 67}, "bf16"),              # fp8 plans run attention and the rest in bf16
])
def test_a_precision_without_its_peak_is_refused(precision, peaks, missing):
    e = _error(_inline(H100, precision, peak_tflops=peaks))
    assert (e.file, e.field) == ("s.yaml", "training.precision")
    assert f"cluster.gpu.peak_tflops of H100-SXM5-80GB has no {missing} entry" in e.reason
    assert e.reason.startswith(f"{precision} needs the GPU's {missing} peak")


def test_the_16_bit_peaks_hint_at_each_other_from_ampere_on():
    e = _error(_inline(H100, "fp16", peak_tflops={"bf16": 989}))
    assert "fp16: 989" in e.reason
    v100 = os.path.join(ROOT, "clusters", "v100-16x8-edr.yaml")
    e = _error(_inline(v100, "fp32", peak_tflops={"fp16": 125}))      # no Ampere hint on a V100, and no bf16 one
    assert "has no fp32 entry" in e.reason and "Ampere" not in e.reason


def test_v100_fp16_stands_and_bf16_keeps_its_architecture_refusal():
    v100 = os.path.join(ROOT, "clusters", "v100-16x8-edr.yaml")
    assert parse_spec(_inline(v100, "fp16"), "s.yaml").cluster.gpu.peak_flops("fp16") == 125e12
    e = _error(_inline(v100, "bf16"))
    assert e.field == "training.precision" and "Ampere" in e.reason and "use fp16" in e.reason


def test_peak_flops_never_falls_back_to_another_precision():
    gpu = GPUSpec(type="X", memory_GiB=80, peak_tflops={"fp8": 1979, "fp32": 67})
    with pytest.raises(FieldError, match="has no bf16 entry"):
        gpu.peak_flops("bf16")
    assert gpu.peak_flops("fp32") == 67e12


def test_every_shipped_cluster_and_spec_lists_only_known_precisions_and_its_own_peak():
    for path in sorted(glob.glob(os.path.join(ROOT, "clusters", "*.yaml"))):
        assert set(load_cluster(path).gpu.peak_tflops) <= set(PRECISIONS), path
    for path in sorted(glob.glob(os.path.join(ROOT, "specs", "*.yaml"))):
        s = load_spec(path)
        assert s.training.precision in s.cluster.gpu.peak_tflops, path


def test_cli_refuses_a_missing_peak_with_exit_2(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(_inline(H100, peak_tflops={"fp8": 1979, "fp32": 67})))
    rc, err = _cli(["estimate", str(p), "--tp", "4", "--pp", "1", "--dp", "1", "--mbs", "1"], capsys)
    assert rc == 2 and "Traceback" not in err
    assert str(p) in err and "training.precision" in err and "cluster.gpu.peak_tflops" in err and "bf16" in err


# --- 2. cluster.profiles ------------------------------------------------------------------------------------------

def _with_profiles(profiles) -> dict:
    d = mini_spec_dict()
    d["cluster"]["profiles"] = profiles
    return d


@pytest.mark.parametrize("key,near", [("compute_profile", "compute"), ("compte", "compute"), ("mem", "memory"),
                                      ("network", None)])
def test_unknown_profile_kind_is_refused(key, near, tmp_path):
    (tmp_path / "p.json").write_text("{}")
    e = _error(_with_profiles({key: "p.json"}), str(tmp_path / "s.yaml"))
    assert e.field == f"cluster.profiles.{key}" and "unknown key (known: compute, memory)" in e.reason
    assert (f"a misspelling of {near!r}?" in e.reason) if near else "misspelling" not in e.reason


@pytest.mark.parametrize("kind", ["compute", "memory"])
def test_a_missing_profile_file_names_the_file_and_field(kind, tmp_path):
    spec = str(tmp_path / "s.yaml")
    e = _error(_with_profiles({kind: "nope.json"}), spec)
    assert (e.file, e.field) == (spec, f"cluster.profiles.{kind}")
    assert f"{kind} profile file {tmp_path / 'nope.json'} does not exist" in e.reason


@pytest.mark.parametrize("value", [5, 1.5, True, ["a.json"], {"path": "a.json"}, ""])
def test_a_profile_must_be_a_path(value):
    e = _error(_with_profiles({"compute": value}))
    assert e.field == "cluster.profiles.compute" and "must be the path of a compute profile file" in e.reason


def test_profiles_must_be_a_mapping():
    e = _error(_with_profiles(["a.json"]))
    assert e.field == "cluster.profiles" and "must be a mapping" in e.reason


def test_profiles_in_a_cluster_file_resolve_against_it_and_name_it(tmp_path):
    with open(os.path.join(ROOT, "clusters", "grand-teton-h100-hbm2e.yaml")) as fh:
        c = yaml.safe_load(fh)
    c["network"].pop("bandwidth_matrix", None)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.json").write_text("{}")
    c["profiles"] = {"memory": "m.json"}
    p = tmp_path / "sub" / "c.yaml"
    p.write_text(yaml.safe_dump(c))
    assert load_cluster(str(p)).profiles == {"memory": str(tmp_path / "sub" / "m.json")}
    c["profiles"] = {"memory": "../m.json"}
    p.write_text(yaml.safe_dump(c))
    with pytest.raises(SpecError) as e:
        load_cluster(str(p))
    assert (e.value.file, e.value.field) == (str(p), "profiles.memory")
    c["profiles"] = {"compute_profile": "m.json"}
    p.write_text(yaml.safe_dump(c))
    with pytest.raises(SpecError) as e:
        load_cluster(str(p))
    assert (e.value.file, e.value.field) == (str(p), "profiles.compute_profile")


def test_shipped_profiles_still_load():
    c = load_cluster(os.path.join(ROOT, "clusters", "grand-teton-h100-hbm2e.yaml"))
    assert set(c.profiles) == {"compute"} and os.path.isfile(c.profiles["compute"])
    with open(H100) as fh:
        assert parse_cluster({**yaml.safe_load(fh), "profiles": None}, H100).profiles == {}


def test_cli_refuses_a_misspelt_profile_with_exit_2(tmp_path, capsys):
    (tmp_path / "a100.compute.json").write_text("{}")
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(_with_profiles({"compute_profile": "a100.compute.json"})))
    rc, err = _cli(["estimate", str(p), "--tp", "4", "--pp", "1", "--dp", "1", "--mbs", "1"], capsys)
    assert rc == 2 and "Traceback" not in err
    assert str(p) in err and "cluster.profiles.compute_profile" in err and "'compute'" in err


# --- 3. search lists ----------------------------------------------------------------------------------------------

SEARCH_LISTS = ("schedules", "recompute", "zero", "sequence_parallel", "micro_batch_sizes", "tensor_parallel",
                "virtual_stages", "context_parallel", "uneven_stages", "dp_shard")


@pytest.mark.parametrize("key", SEARCH_LISTS)
def test_an_empty_search_list_is_refused(key):
    e = _error(mini_spec_dict(search={key: []}))
    assert e.field == f"search.{key}" and "must not be empty" in e.reason
    if key == "context_parallel":       # absent and auto differ here: the message says which is which
        assert "leave it out for no context parallelism, or write auto for every legal degree" in e.reason


@pytest.mark.parametrize("value", [[1], [1, 2], 1, [0]])
def test_virtual_stages_below_2_are_refused(value):
    e = _error(mini_spec_dict(search={"schedules": ["interleaved"], "virtual_stages": value}))
    assert e.field == "search.virtual_stages"
    assert ("no interleaving" in e.reason) if value != [0] else "got 0" in e.reason


@pytest.mark.parametrize("key", ["micro_batch_sizes", "tensor_parallel", "virtual_stages", "context_parallel",
                                 "uneven_stages"])
def test_auto_or_absent_is_still_the_default(key):
    absent = parse_spec(mini_spec_dict(), "s.yaml").search
    auto = parse_spec(mini_spec_dict(search={key: "auto"}), "s.yaml").search
    if key == "context_parallel":       # auto: every legal degree (None); absent: no context parallelism
        assert auto.context_parallel is None and absent.context_parallel == SearchSpec().context_parallel == (1,)
    else:
        assert auto == absent == SearchSpec()


def test_cli_refuses_an_empty_list_with_exit_2(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(mini_spec_dict(search={"tensor_parallel": []})))
    rc, err = _cli(["estimate", str(p), "--tp", "4", "--pp", "1", "--dp", "1", "--mbs", "1"], capsys)
    assert rc == 2 and "Traceback" not in err and str(p) in err and "search.tensor_parallel" in err


# --- 4. export --help ---------------------------------------------------------------------------------------------

def test_export_help_states_the_default_format(capsys):
    from planner.cli.main import main
    try:
        main(["export", "--help"])
    except SystemExit:
        pass
    out = " ".join(capsys.readouterr().out.split())
    assert "default: torchrun" in out


def test_an_unknown_training_keys_message_lists_overlap_among_the_known():
    """Fields.has marks the key it asks about as known: `overlap` (read through has() when absent) was missing from
    the list an unknown key's message gives."""
    from planner.spec.fields import Fields
    f = Fields({"global_batch_size": 8, "precison": "bf16"}, "s.yaml", "training")
    f.has("overlap")
    f.raw("global_batch_size")
    with pytest.raises(SpecError) as e:
        f.done()
    assert "overlap" in str(e.value) and "training.precison" in str(e.value)
