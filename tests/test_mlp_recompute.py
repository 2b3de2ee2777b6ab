"""`recompute: mlp`, Megatron-Core's `--recompute-granularity selective --recompute-modules mlp`: what it stores
(against real PyTorch checkpointing of the profiler's block), what it re-runs, and how it is exported and imported."""
import dataclasses

import pytest
from test_memory_profile import TR, _model, _per_layer_activation

import planner
from planner.config import ParallelConfig as C
from planner.costs import default_costs
from planner.costs.compute import mlp_recompute_s
from planner.costs.iteration import stage_times
from planner.costs.memory import (
    fp8_saved_input_delta,
    layer_activation_bytes,
    layer_transient_bytes,
    mlp_recompute_dropped_bytes,
)
from planner.errors import SpecError
from planner.export import megatron_args, nemo_model
from planner.profile.memory import measure_stage, stage_peak_estimate
from planner.search.solve import check_config


@pytest.mark.parametrize("family,kv,tp,sp", [("llama", 4, 4, True), ("gpt", 16, 2, False)])
def test_profiled_checkpoint_stores_and_peaks_as_counted(family, kv, tp, sp):
    """The fake-tensor profiler runs the block's MLP under torch.utils.checkpoint: per-layer stored bytes and the
    stage's peak (the rebuilt MLP inside the backward working set) are the analytical ones."""
    cfg = C(tp, 2, 1, 2, 4, recompute="mlp", sequence_parallel=sp)
    measured, _ = _per_layer_activation(family, cfg, kv)
    assert measured == pytest.approx(layer_activation_bytes(_model(family, 2, kv), TR, cfg), rel=1e-3)
    none = layer_activation_bytes(_model(family, 2, kv), TR, dataclasses.replace(cfg, recompute="none"))
    assert none - measured == pytest.approx(mlp_recompute_dropped_bytes(_model(family, 2, kv), TR, cfg), rel=1e-3)
    peak = measure_stage(_model(family, 4, kv), TR, cfg, 1, 2).peak_allocated
    assert peak == pytest.approx(stage_peak_estimate(_model(family, 4, kv), TR, cfg, 1, 2), rel=2e-3)


@pytest.fixture(scope="module")
def spec():
    return planner.load_spec("specs/llama3-70b-h100-256.yaml")


def _cfg(rc, **kw):
    return C(8, 4, 8, 1, 16, "1f1b", recompute=rc, sequence_parallel=True, **kw)


def test_memory_lies_between_none_and_full(spec):
    m, tr = spec.model, spec.training
    act = {rc: layer_activation_bytes(m, tr, _cfg(rc)) for rc in ("none", "selective", "mlp", "full")}
    assert act["full"] < act["mlp"] < act["selective"] <= act["none"]
    # fused attention: the MLP is most of a Llama layer's activations
    assert act["mlp"] < 0.5 * act["none"]
    # the working set holds the rebuilt MLP on top of the no-recompute one
    assert layer_transient_bytes(m, tr, _cfg("mlp")) == pytest.approx(
        layer_transient_bytes(m, tr, _cfg("none")) + mlp_recompute_dropped_bytes(m, tr, _cfg("mlp")))
    # fp8: fc1's and fc2's fp8 inputs are not stored either (with SP the QKV input's saving and the projection's
    # extra fp8 copy cancel)
    fp8 = dataclasses.replace(tr, precision="fp8")
    assert fp8_saved_input_delta(m, fp8, _cfg("none")) < fp8_saved_input_delta(m, fp8, _cfg("mlp")) == 0.0


def test_time_reruns_the_mlp_only(spec):
    costs = default_costs(spec.cluster)
    st = {rc: stage_times(spec, _cfg(rc), costs)[1] for rc in ("none", "selective", "mlp", "full")}
    assert st["none"].recompute == 0.0
    assert 0.0 < st["mlp"].recompute < st["full"].recompute
    assert st["mlp"].backward == pytest.approx(st["none"].backward + st["mlp"].recompute)
    assert st["mlp"].forward == st["none"].forward
    # the MLP's GEMMs are most of a Llama-70B layer's FLOPs (3hf of 3hf + 2.25h^2 with GQA)
    assert st["mlp"].recompute > 0.6 * st["full"].recompute
    # it re-runs the MLP's two TP collectives, half of a forward's
    assert st["mlp"].tp_comm - st["none"].tp_comm == pytest.approx(
        0.5 * (st["full"].tp_comm - st["none"].tp_comm))
    # the compute model's times, before TP overlap hides half of its share of the re-run collectives: one
    # mlp_recompute_s per layer
    parts = costs.compute.layer_parts(spec.model, spec.cluster, spec.training, _cfg("mlp"))
    raw = costs.compute.stage_times(spec.model, spec.cluster, spec.training, _cfg("mlp"))[1]
    assert raw.recompute == pytest.approx(spec.model.num_layers / 4 * mlp_recompute_s(spec.model, _cfg("mlp"), parts))
    assert st["mlp"].recompute < raw.recompute       # the spec overlaps TP communication (training.overlap.tp_comm)


def test_export_and_import(spec, tmp_path):
    from planner import megatron_import as mi
    from planner.export import split_megatron_args
    sol = {"config": dataclasses.asdict(_cfg("mlp")), "precision": "bf16"}
    args = megatron_args(sol, None, spec.cluster.gpu.type, spec.model, spec.training.seq_length)
    line = " ".join(args)
    assert "--recompute-granularity selective" in line and "--recompute-modules mlp" in line
    assert "--recompute-activations" not in line
    flags, _ = split_megatron_args(args)
    run = mi.read_run(mi.parse_launch("torchrun pretrain_gpt.py " + " ".join(flags)), _cfg("mlp").num_gpus)
    assert run.config.recompute == "mlp"
    nemo = nemo_model(sol, sol["config"], None)
    assert 'recipe.model.config.recompute_granularity = "selective"' in nemo
    assert 'recipe.model.config.recompute_modules = ["mlp"]' in nemo


def test_zero3_refuses_it(spec):
    """torchtitan (ZeRO-3 plans) has no module checkpoint: refused naming the flag."""
    cfg = C(8, 1, 32, 1, 32, "1f1b", recompute="mlp", zero=3, sequence_parallel=True)
    with pytest.raises(SpecError, match="--recompute"):
        check_config(spec, cfg)


@pytest.mark.parametrize("rc,modules", [("mlp", '["mlp"]'), ("selective", '["core_attn"]')])
def test_nemo_overrides_clear_a_recipes_full_recompute(rc, modules):
    """A NeMo recipe may set full recompute's method and layer count (NVIDIA/NeMo @ 8cfedd72
    nemo/collections/llm/recipes/qwen3_32b.py: recompute_method "uniform", recompute_num_layers 1); left in force
    under the plan's selective granularity, TransformerConfig raises 'When using recompute_granularity: selective
    recompute_num_layers must be None' (NVIDIA/Megatron-LM d98e8a64 transformer_config.py). The overrides set both
    to None."""
    sol = {"config": dataclasses.asdict(_cfg(rc)), "precision": "bf16"}
    line = nemo_model(sol, sol["config"], None)
    assert f"recipe.model.config.recompute_modules = {modules}" in line
    assert "recipe.model.config.recompute_method = None" in line
    assert "recipe.model.config.recompute_num_layers = None" in line
