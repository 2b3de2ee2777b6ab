"""The spec dataclasses: keyword-only, a docstring per field, defaults written once (on the dataclass, the
parser leaves absent keys out), object rules in `__post_init__` named with file and field by the parser."""
import ast
import copy
import dataclasses
import inspect

import numpy as np
import pytest
import yaml
from plan_fixtures import mini_spec_dict as _spec

from planner.config import ParallelConfig
from planner.errors import SpecError
from planner.spec import (
    ClusterSpec,
    GPUSpec,
    Link,
    ModelSpec,
    SearchSpec,
    SolverSpec,
    Spec,
    TrainingSpec,
    load_spec,
    parse_cluster,
    parse_model,
    parse_spec,
)
from planner.spec.cluster import INTER_NODE_LATENCY_US, INTRA_NODE_LATENCY_US
from planner.spec.fields import DEFAULT, FieldError, Fields

SPEC_CLASSES = (ModelSpec, GPUSpec, Link, ClusterSpec, TrainingSpec, SearchSpec, SolverSpec, Spec)


def _error(d, file="x.yaml") -> SpecError:
    with pytest.raises(SpecError) as e:
        parse_spec(d, file)
    return e.value


def _field_docstrings(cls) -> dict[str, str]:
    """Field name -> the string literal right under it in the class body (attribute docstring)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    out = {}
    for stmt, nxt in zip(body, body[1:] + [None], strict=True):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            doc = nxt.value.value if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                                      and isinstance(nxt.value.value, str)) else None
            out[stmt.target.id] = doc
    return out


@pytest.mark.parametrize("cls", SPEC_CLASSES + (ParallelConfig,), ids=lambda c: c.__name__)
def test_every_field_has_a_docstring(cls):
    docs = _field_docstrings(cls)
    assert set(docs) == {f.name for f in dataclasses.fields(cls)}
    assert all(d and d.strip() for d in docs.values()), [k for k, d in docs.items() if not d]
    assert cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(")   # a written one, not the generated


@pytest.mark.parametrize("cls", SPEC_CLASSES, ids=lambda c: c.__name__)
def test_spec_classes_are_keyword_only(cls):
    assert all(f.kw_only for f in dataclasses.fields(cls))
    with pytest.raises(TypeError):
        cls("positional")


def test_parallel_config_stays_positional():
    assert ParallelConfig(2, 1, 4, 1, 8) == ParallelConfig(tp=2, pp=1, dp=4, micro_batch_size=1, num_microbatches=8)


def test_parser_defaults_are_the_dataclass_defaults():
    s = parse_spec(_spec(), "x.yaml")
    assert s.training == TrainingSpec(global_batch_size=16, seq_length=128)
    assert s.search == SearchSpec()
    assert s.solver == SolverSpec()
    assert s.model == ModelSpec(name="m", num_layers=4, hidden_size=256, num_attention_heads=8, vocab_size=1000)
    assert s.cluster.intra == Link(bandwidth_GBps=100.0, latency_us=INTRA_NODE_LATENCY_US)
    assert s.cluster.inter == Link(bandwidth_GBps=12.5, latency_us=INTER_NODE_LATENCY_US)
    default_fields = ("snapshots", "node_names", "profiles", "price_per_gpu_hour_usd")
    plain = ClusterSpec(name="c", gpu=s.cluster.gpu, nodes=2, gpus_per_node=4, intra=s.cluster.intra,
                        inter=s.cluster.inter)
    for name in default_fields + ("nics_per_node",):
        assert getattr(s.cluster, name) == getattr(plain, name), name
    assert np.array_equal(s.cluster.bandwidth, plain.bandwidth)


def test_null_reads_as_absent():
    d = _spec(training={"global_batch_size": 16, "seq_length": 128, "precision": None, "tokens": None},
              search={"virtual_stages": "auto", "top_k": None}, solver=None)
    s = parse_spec(d, "x.yaml")
    assert s.training == TrainingSpec(global_batch_size=16, seq_length=128)
    assert s.search == SearchSpec() and s.solver == SolverSpec()


def test_search_lists_read_as_before():
    s = parse_spec(_spec(search={"schedules": "interleaved", "zero": [1, 0, 1], "virtual_stages": [4, 2, 4],
                                 "micro_batch_sizes": [4, 1, 4], "tensor_parallel": 2}), "x.yaml")
    assert s.search.schedules == ("interleaved",) and s.search.zero == (1, 0)
    assert s.search.virtual_stages == (2, 4)        # an empty list is refused (test_input_strictness)
    assert s.search.micro_batch_sizes == (1, 4) and s.search.tensor_parallel == (2,)


@pytest.mark.parametrize("bad", [True, "13", 0, -1, float("nan"), float("inf")])
def test_parameters_b_is_a_positive_number(bad):
    """docs/SPEC.md: parameters_B is a number > 0, and `true` is not a number; `true` was read as 1 and compared
    with the shapes' size ('more than 10% from the stated TrueB')."""
    d = _spec()
    d["model"]["parameters_B"] = bad
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert e.value.field == "model.parameters_B" and "must be a positive number" in e.value.reason


@pytest.mark.parametrize("bad", ["1", 1.5, True, float("inf"), 2**70])
def test_zero_stages_are_integers_only(bad):
    with pytest.raises(SpecError, match="search.zero"):
        parse_spec(_spec(search={"zero": [bad]}), "x.yaml")


@pytest.mark.parametrize("field,bad", [("num_layers", 4.0), ("num_layers", True), ("vocab_size", 1e308),
                                       ("vocab_size", 2**70), ("hidden_size", "4096")])
def test_integer_fields_refuse_floats_bools_and_huge_values(field, bad):
    d = _spec()
    d["model"][field] = bad
    with pytest.raises(SpecError, match=f"model.{field}"):
        parse_spec(d, "x.yaml")


@pytest.mark.parametrize("family,ffn,tied", [("gpt", 4 * 4096, True), ("llama", 11008, False)])
def test_model_family_defaults_resolve_in_post_init(family, ffn, tied):
    m = ModelSpec(name="m", family=family, num_layers=2, hidden_size=4096, num_attention_heads=32, vocab_size=32000)
    assert (m.num_kv_heads, m.ffn_hidden_size, m.tied_embeddings) == (32, ffn, tied)
    parsed = parse_model({"name": "m", "family": family, "num_layers": 2, "hidden_size": 4096,
                          "num_attention_heads": 32, "vocab_size": 32000}, "m.yaml")
    assert parsed == m
    # given values win, and replace() keeps the resolved ones
    assert dataclasses.replace(m, tied_embeddings=not tied).tied_embeddings is (not tied)
    assert dataclasses.replace(m, hidden_size=8192).ffn_hidden_size == ffn


def test_cluster_defaults_resolve_in_post_init():
    gpu = GPUSpec(type="X", memory_GiB=80, peak_tflops={"bf16": 312})
    cl = ClusterSpec(name="c", gpu=gpu, nodes=3, gpus_per_node=8, intra=Link(bandwidth_GBps=300, latency_us=3),
                     inter=Link(bandwidth_GBps=25, latency_us=5))
    assert cl.nics_per_node == 8
    assert cl.bandwidth.tolist() == [[0, 25, 25], [25, 0, 25], [25, 25, 0]]
    sub = cl.subset([0, 2])
    assert (sub.nodes, sub.nics_per_node, sub.bandwidth.shape) == (2, 8, (2, 2))


# --- object rules: a FieldError (a SpecError without file) built directly; file + full path when parsed ---

def test_field_error_is_a_spec_error_and_a_value_error():
    e = FieldError("num_kv_heads", "bad")
    assert isinstance(e, SpecError) and isinstance(e, ValueError)
    assert (e.file, e.field, e.reason, e.exit_code, str(e)) == (None, "num_kv_heads", "bad", 2, "num_kv_heads: bad")


@pytest.mark.parametrize("kw,field,reason", [
    ({"num_attention_heads": 7}, "num_attention_heads", "hidden_size 256 is not divisible by 7 heads"),
    ({"num_kv_heads": 3}, "num_kv_heads", "num_attention_heads 8 is not divisible by 3 kv heads"),
    ({"num_layers": 0}, "num_layers", "must be positive"),
])
def test_model_rules(kw, field, reason):
    base = {"name": "m", "num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "vocab_size": 1000}
    with pytest.raises(FieldError) as e:
        ModelSpec(**{**base, **kw})
    assert (e.value.file, e.value.field, e.value.reason) == (None, field, reason)
    if field == "num_layers":
        return                                   # the parser's own range check comes first (">= 1")
    err = _error(_spec(model={**base, **kw}))
    assert type(err) is SpecError
    assert (err.file, err.field, err.reason) == ("x.yaml", f"model.{field}", reason)
    err = _error(_spec(model={**base, **kw}), None)
    assert str(err) == f"model.{field}: {reason}"


def test_model_rule_in_its_own_file_names_that_file(tmp_path):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(
        {"name": "m", "num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "num_kv_heads": 3,
         "vocab_size": 1000}))
    d = _spec(model="m.yaml")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError) as e:
        load_spec(str(tmp_path / "s.yaml"))
    assert (e.value.file, e.value.field) == (str(tmp_path / "m.yaml"), "num_kv_heads")


def test_gpu_needs_a_peak():
    with pytest.raises(FieldError):
        GPUSpec(type="X", memory_GiB=16, peak_tflops={})
    d = _spec()
    d["cluster"]["gpu"]["peak_tflops"] = {}
    err = _error(d)
    assert (err.field, err.reason) == ("cluster.gpu.peak_tflops", "needs at least one precision, e.g. {bf16: 312}")


def test_node_names_one_per_node():
    d = _spec()
    d["cluster"]["network"]["node_names"] = ["a", "b", "c"]
    err = _error(d)
    assert (err.file, err.field, err.reason) == ("x.yaml", "cluster.network.node_names", "has 3 names for 2 nodes")
    c = copy.deepcopy(d["cluster"])
    with pytest.raises(SpecError) as e:
        parse_cluster(c, "c.yaml")
    assert (e.value.file, e.value.field) == ("c.yaml", "network.node_names")
    c["network"]["node_names"] = ["a", "b"]
    assert parse_cluster(c, "c.yaml").node_names == ("a", "b")


# --- the file rules that stay in the parser, with their messages ---

@pytest.mark.parametrize("over,field,reason", [
    ({"search": {"tensor_parallel": [3]}}, "search.tensor_parallel",
     "tp=3 does not divide gpus_per_node=4 (tensor groups stay inside a node)"),
    ({"training": {"global_batch_size": 16, "seq_length": 128, "pipeline_engine": "deepspeed"},
      "search": {"schedules": ["1f1b", "interleaved"]}}, "search.schedules",
     "has interleaved; training.pipeline_engine deepspeed runs only its 1F1B TrainSchedule"),
    ({"training": {"global_batch_size": 16, "seq_length": 128, "pipeline_engine": "deepspeed"},
      "search": {"zero": [0, 2]}}, "search.zero",
     "has 2; DeepSpeed's pipeline engine supports ZeRO stages 0 and 1 only"),
    ({"training": {"global_batch_size": 16, "seq_length": 128, "precision": "int4"}}, "training.precision",
     "must be one of ['bf16', 'fp16', 'fp32', 'fp8'], got 'int4'"),
    ({"solver": {"robust": "best"}}, "solver.robust", "must be one of ['mean', 'none', 'worst'], got 'best'"),
    ({"search": {"zero": [4]}}, "search.zero", "has 4, expected one of [0, 1, 2, 3]"),
    ({"training": {"global_batch_size": 16, "seq_length": 128, "pipeline_engine": "deepspeed"},
      "search": {"zero": [0, 3]}}, "search.zero",
     "has 3; DeepSpeed's pipeline engine supports ZeRO stages 0 and 1 only"),
    ({"search": {"memory_margin": 0.95}}, "search.memory_margin", "must be <= 0.9, got 0.95"),
])
def test_file_rules_keep_their_messages(over, field, reason):
    err = _error(_spec(**over))
    assert (err.file, err.field, err.reason, err.exit_code) == ("x.yaml", field, reason, 2)


def test_cli_engine_override_may_build_what_the_file_rule_forbids():
    s = parse_spec(_spec(search={"schedules": ["1f1b", "interleaved"]}), "x.yaml")
    ds = dataclasses.replace(s, training=dataclasses.replace(s.training, pipeline_engine="deepspeed"))
    assert ds.training.pipeline_engine == "deepspeed"


# --- the Fields helpers ---

def test_build_leaves_default_out_and_names_the_field():
    f = Fields({"seq_length": 8, "global_batch_size": 4}, "t.yaml", "training")
    t = f.build(TrainingSpec, global_batch_size=f.int("global_batch_size"), seq_length=f.int("seq_length"),
                precision=f.str("precision", DEFAULT), tokens=f.float("tokens", DEFAULT))
    f.done()
    assert t == TrainingSpec(global_batch_size=4, seq_length=8)
    g = Fields({}, "g.yaml", "cluster.gpu")
    with pytest.raises(SpecError) as e:
        g.build(GPUSpec, type="X", memory_GiB=1.0, peak_tflops={})
    assert type(e.value) is SpecError and (e.value.file, e.value.field) == ("g.yaml", "cluster.gpu.peak_tflops")


def test_bool_default_passes_through():
    assert Fields({}, None).bool("x", DEFAULT) is DEFAULT
    with pytest.raises(SpecError):
        Fields({"x": "yes"}, None).bool("x", DEFAULT)


def test_digest_of_the_shipped_spec_is_unchanged():
    sol = yaml.safe_load(open("solutions/gpt3-13b-a100-128.yaml"))
    assert load_spec("specs/gpt3-13b-a100-128.yaml").digest() == sol["spec_hash"]


def test_virtual_stages_auto_tries_every_even_chunking():
    """Absent (auto): 2 and every v that gives each stage whole, equal chunks, as Megatron-Core recipes choose v
    (NeMo's run 5 to 20); a list is taken as given."""
    from dataclasses import replace

    from planner.search.space import enumerate_configs, virtual_stage_options
    d = _spec()
    d["model"] = {**d["model"], "num_layers": 48}
    spec = parse_spec(d, "x.yaml")
    assert spec.search.virtual_stages is None
    assert virtual_stage_options(spec, 2) == (2, 3, 4, 6, 8, 12, 24)      # 24 layers per stage
    assert virtual_stage_options(spec, 4) == (2, 3, 4, 6, 12)             # 12 per stage
    assert virtual_stage_options(spec, 16) == (2, 3)                      # 3 per stage: 2 only by an uneven split
    given = replace(spec, search=replace(spec.search, virtual_stages=(3,), schedules=("interleaved",)))
    assert virtual_stage_options(given, 2) == (3,)
    assert {c.vpp for c in enumerate_configs(given) if c.schedule == "interleaved"} <= {3}


def test_a_misspelt_required_key_is_named():
    d = _spec(training={"global_batchsize": 16, "seq_length": 128})
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert e.value.field == "training.global_batch_size" and "'global_batchsize' is given" in str(e.value)
