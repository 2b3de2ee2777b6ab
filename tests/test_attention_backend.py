"""training.attention_backend (FlashAttention-2 or cuDNN, each measured on H100 and H200) and the
compute profile's sustained_slowdown: the H200 measurements of docs/notes/gpu_h200.md in the model."""
from __future__ import annotations

import json
import os

import pytest
from plan_fixtures import mini_spec_dict, tp2_solution, with_training

from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.compute import (
    CUDNN_ATTENTION_SEQ,
    ComputeModel,
    attention_backend,
    causal_attention_flops,
    fused_attention_efficiency,
    has_attention_backend,
)
from planner.costs.context_parallel import layer_times
from planner.errors import SpecError
from planner.export import megatron_args
from planner.spec import load_cluster, load_model, parse_spec
from planner.spec.plan import TrainingSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "benchmarks", "data", "h200", "bias_probe", "attention.json")
PROBE_H100 = os.path.join(ROOT, "benchmarks", "data", "h100", "bias_probe", "attention.json")
LLAMA = load_model(os.path.join(ROOT, "models", "llama3-70b.yaml"))
H100 = load_cluster(os.path.join(ROOT, "clusters", "dgx-h100.yaml"))


def _measured(backend: str, causal: bool = True, probe: str = PROBE) -> dict:
    rows = json.load(open(probe))
    return {r["seq"]: r["fwd_bwd_tflops"] for r in rows if r["backend"] == backend and r["causal"] == causal
            and r["heads"] == 32 and r["seq"] == r["kv_seq"]}


def test_cudnn_rows_are_each_types_measurement():
    """cuDNN's row per Hopper type is that type's measurement (one H200, one H100: the same script)."""
    for gpu, probe in (("H200", PROBE), ("H100", PROBE_H100)):
        m, full = _measured("cudnn", probe=probe), _measured("cudnn", causal=False, probe=probe)
        for s in CUDNN_ATTENTION_SEQ:
            # the table keeps whole TFLOP/s of the median of 20 calls
            assert fused_attention_efficiency(gpu, s, backend="cudnn") * 989 == pytest.approx(m[s], abs=0.5)
        for s in (2048, 8192, 16384):
            assert fused_attention_efficiency(gpu, s, causal=False, backend="cudnn") * 989 == pytest.approx(
                full[s], abs=0.5)
    # the H100 ran the short kernels slower (1k-4k tokens), not the long ones
    assert fused_attention_efficiency("H100", 2048, backend="cudnn") < fused_attention_efficiency(
        "H200", 2048, backend="cudnn")


def test_flash2_rows_are_each_hopper_types_measurement():
    """flash2 on Hopper is FlashAttention-2's kernel as measured on that type (PyTorch's copy, the same calls as
    cuDNN's row), not the published H100 panel, which lies 6-42% above it at 512-8k tokens; cuDNN is 1.6-1.9x it."""
    for gpu, probe in (("H200", PROBE), ("H100", PROBE_H100)):
        m, full = _measured("flash", probe=probe), _measured("flash", causal=False, probe=probe)
        for s in CUDNN_ATTENTION_SEQ:
            assert fused_attention_efficiency(gpu, s) * 989 == pytest.approx(m[s], abs=0.06)
        for s in (2048, 8192, 16384):
            assert fused_attention_efficiency(gpu, s, causal=False) * 989 == pytest.approx(full[s], abs=0.06)
    published_h100 = {2048: 265, 4096: 294, 8192: 308}
    for s, pub in published_h100.items():
        assert fused_attention_efficiency("H100", s) * 989 < 0.95 * pub
    # the flash-attn package under Transformer Engine (2.4.2, H100 SXM5; TransformerEngine@d0067d0d
    # docs/examples/attention/attention.ipynb test_1: b 2, 16 heads, s 2048, causal, 0.5850 ms fwd + bwd) agrees
    te = 3.5 * causal_attention_flops(2, 2048, 16 * 128, 1) / 0.5850e-3 / 1e12
    assert te == pytest.approx(fused_attention_efficiency("H100", 2048) * 989, rel=0.05)
    cu = _measured("cudnn")
    for s in (2048, 4096, 8192, 16384):
        assert 1.6 < cu[s] / (fused_attention_efficiency("H200", s) * 989) < 1.9


def test_auto_is_flash2_and_cudnn_makes_attention_faster():
    t = TrainingSpec(global_batch_size=64, seq_length=8192)
    assert attention_backend(t) == "flash2"
    assert attention_backend(TrainingSpec(global_batch_size=64, seq_length=8192, attention_backend="cudnn")) == "cudnn"
    cfg = ParallelConfig(8, 1, 8, 1, 8, "1f1b", 1, "none", 1, True)
    c = ComputeModel()
    a = c.layer_parts(LLAMA, H100, t, cfg)
    b = c.layer_parts(LLAMA, H100, TrainingSpec(global_batch_size=64, seq_length=8192, attention_backend="cudnn"), cfg)
    assert b["attn"] == pytest.approx(a["attn"] * (282.5 / 489))     # 8k: FA2 282.5 vs cuDNN 489 TFLOP/s (H100)
    assert b["gemm"] == a["gemm"] and b["elem"] == a["elem"]


def test_context_parallel_steps_follow_the_backend():
    spec = parse_spec({"name": "x", "model": os.path.join(ROOT, "models", "llama3-8b.yaml"),
                       "cluster": os.path.join(ROOT, "clusters", "dgx-h100.yaml"),
                       "training": {"global_batch_size": 8, "seq_length": 65536},
                       "search": {"context_parallel": [2], "zero": [1]}}, os.path.join(ROOT, "x.yaml"))
    cfg = ParallelConfig(2, 1, 4, 1, 1, "1f1b", 1, "full", 1, True, cp=2)
    costs = default_costs(spec.cluster)
    for mode in ("ring", "all_to_all"):
        f2 = layer_times(spec, cfg, costs, mode)
        cu = layer_times(with_training(spec, attention_backend="cudnn"), cfg, costs, mode)
        assert cu.forward < f2.forward and cu.backward < f2.backward


def test_spec_checks_name_the_field():
    d = mini_spec_dict()
    d["training"] = {**d["training"], "attention_backend": "cudnn"}      # GPU type X: no cuDNN row
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert "training.attention_backend" in str(e.value) and "'X'" in str(e.value)
    d["training"] = {**d["training"], "attention_backend": "flash2", "attention": "unfused"}
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert "attention_backend" in str(e.value) and "unfused" in str(e.value)
    d["training"] = {**d["training"], "attention_backend": "flash3", "attention": "fused"}
    with pytest.raises(SpecError) as e:
        parse_spec(d, "x.yaml")
    assert "attention_backend" in str(e.value)
    assert has_attention_backend("NVIDIA H100 80GB HBM3", "cudnn") and not has_attention_backend("A100", "cudnn")


def test_megatron_export_names_the_kernel_only_when_the_spec_does():
    assert not any("attention-backend" in a for a in megatron_args(tp2_solution()))
    args = megatron_args(tp2_solution(attention_backend="cudnn"))
    assert "--attention-backend fused" in args
    assert any("attention_backend = AttnBackend.fused" in a for a in args)
    assert "--attention-backend flash" in megatron_args(tp2_solution(attention_backend="flash2"))
    with pytest.raises(SpecError):
        megatron_args(tp2_solution(attention_backend="fa9"))


def test_sustained_slowdown_scales_the_gpu_work_only():
    """A compute profile's sustained_slowdown (the 700 W profiles: H100 1.03, H200 1.06, each type's layer
    steady-state step over its profiled kernels) multiplies the kernels' parts, not the host floor or the
    collectives."""
    import dataclasses
    cfg = ParallelConfig(8, 1, 8, 1, 8, "1f1b", 1, "none", 1, True)
    t = TrainingSpec(global_batch_size=64, seq_length=8192, precision="fp8")
    base = ComputeModel()
    slow = dataclasses.replace(base, sustained_slowdown=1.06)
    a, b = base.layer_parts(LLAMA, H100, t, cfg), slow.layer_parts(LLAMA, H100, t, cfg)
    for k in ("gemm", "attn", "attn_backward", "elem", "fp8_cast", "fp8_cast_bwd"):
        assert b[k] == pytest.approx(1.06 * a[k])
    assert b["gemm_column"] == pytest.approx(tuple(1.06 * x for x in a["gemm_column"]))
    for k in ("overhead", "tp_comm", "tp_gather", "tp_scatter"):
        assert b[k] == a[k]
    (f1, l1, c1), (f2, l2, c2) = base.head_times(LLAMA, H100, t, cfg), slow.head_times(LLAMA, H100, t, cfg)
    o = base.layer_overhead_s
    assert c1 == c2 and f2 - o == pytest.approx(1.06 * (f1 - o)) and l2 - o == pytest.approx(1.06 * (l1 - o))


def test_profiles_carry_the_measured_sustained_slowdown(tmp_path):
    import importlib.util

    from planner.costs.compute import load_profile, save_profile
    spec = importlib.util.spec_from_file_location("sf", os.path.join(ROOT, "benchmarks", "sustained_factor.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for dirs in mod.DIRS.values():            # one H200, two H100 machines; four cases each
        for d in dirs:
            r = mod.ratios(d)
            assert len(r) == 4 and all(1.0 < v < 1.1 for v in r.values())
    for prof, gpu in (("planner/data/h100_compute_profile.json", "H100"), ("planner/data/h200_compute_profile.json",
                                                                         "H200")):
        assert load_profile(os.path.join(ROOT, prof)).sustained_slowdown == round(mod.sustained_slowdown(gpu), 2)
    assert load_profile(os.path.join(ROOT, "clusters", "grand-teton-h100-hbm2e.compute.json")).sustained_slowdown == 1
    assert load_profile(os.path.join(ROOT, "planner", "data", "a100_compute_profile.json")).sustained_slowdown == 1
    # save / load keep it; a profile at 1.0 does not write the key (older readers see the same file)
    m = load_profile(os.path.join(ROOT, "planner", "data", "h100_compute_profile.json"))
    out = save_profile(str(tmp_path / "p.json"), m, {"kind": "test"})
    assert out["compute"]["sustained_slowdown"] == 1.03 and load_profile(str(tmp_path / "p.json")) == m
    import dataclasses
    out = save_profile(str(tmp_path / "q.json"), dataclasses.replace(m, sustained_slowdown=1.0), {"kind": "test"})
    assert "sustained_slowdown" not in out["compute"]


def test_estimate_names_the_profile_and_its_measured_factors():
    from planner.cli.estimate import costs_note
    from planner.spec import load_spec
    spec = load_spec(os.path.join(ROOT, "specs", "llama3-70b-h100-256.yaml"))
    note = costs_note(spec)
    assert "h100_compute_profile.json" in note and "x1.03" in note and "fused attention flash2" in note
    assert "fp8" not in note
    fp8 = with_training(spec, precision="fp8", attention_backend="cudnn")
    assert "fp8 GEMMs at 1.78x" in costs_note(fp8) and "fused attention cudnn" in costs_note(fp8)
    a100 = load_spec(os.path.join(ROOT, "specs", "gpt3-13b-a100-het-128.yaml"))
    assert "a100_compute_profile.json" in costs_note(a100) and "x1" not in costs_note(a100)


def test_torchtitan_export_says_what_it_cannot_set():
    """torchtitan has no SDPA back-end key: the TOML says which kernel the plan charged; a bad value exits as
    SpecError before anything is printed (the file is read into a shell or a config)."""
    from planner.export import torchtitan_toml
    sol = tp2_solution(attention_backend="cudnn", framework="torchtitan", precision="bf16", seq_length=4096,
                       num_layers=4)
    # dp 2: ZeRO-3 over one replica would be no FSDP, and torchtitan would train it in fp32 (export refuses it)
    sol["config"] = {**sol["config"], "zero": 3, "sequence_parallel": True, "dp": 2}
    assert "# attention_backend cudnn: the plan charged that kernel's speed" in torchtitan_toml(sol)
    # flash2 on a ZeRO-3 plan was charged PyTorch's own flash copy (sdpa_flash), and the comment says so
    assert "the plan charged PyTorch's flash kernel" in torchtitan_toml({**sol, "attention_backend": "flash2"})
    assert "attention_backend" not in torchtitan_toml({k: v for k, v in sol.items() if k != "attention_backend"})
    with pytest.raises(SpecError):
        torchtitan_toml({**sol, "attention_backend": "cudnn\n[training]"})


def test_export_refuses_a_list_where_a_name_belongs():
    """A hand-edited solution with a list for cp_comm or attention_backend exits as a SpecError naming the field (the
    CLI's exit 2), not a TypeError from a dict lookup."""
    from planner.export import torchtitan_toml
    cp2 = tp2_solution(cp_comm=["ring"])
    cp2["config"] = {**cp2["config"], "tp": 1, "cp": 2}
    with pytest.raises(SpecError) as e:
        megatron_args(cp2)
    assert e.value.field == "cp_comm"
    with pytest.raises(SpecError) as e:
        megatron_args(tp2_solution(attention_backend=["cudnn"]))
    assert e.value.field == "attention_backend"
    tt = {**cp2, "framework": "torchtitan", "precision": "bf16", "seq_length": 4096, "num_layers": 4}
    tt["config"] = {**tt["config"], "zero": 3}
    with pytest.raises(SpecError) as e:
        torchtitan_toml(tt)
    assert e.value.field == "cp_comm"


def _load_bench(name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sdpa_flash_rows_are_the_in_step_measurement():
    """The sdpa_flash rows (PyTorch's flash back end inside a torchtitan-style step, one H200) are what
    benchmarks/sdpa_flash_in_step.py derives from the two data sets, and lie below the same kernel's burst rate."""
    from planner.costs.compute import SDPA_FLASH_CAUSAL, SDPA_FLASH_UNMASKED
    t = _load_bench("sdpa_flash_in_step").table()
    assert sorted(t["in_step"]) == [2048, 8192, 32768]
    assert all(0.8 < r < 1.0 for r in t["ratios"].values())
    for shipped, derived in ((SDPA_FLASH_CAUSAL, t["causal"]), (SDPA_FLASH_UNMASKED, t["unmasked"])):
        assert tuple(shipped[0]) == tuple(derived)
        for s, v in zip(*shipped):
            assert v == pytest.approx(derived[s], abs=0.06)
    burst = _measured("flash")
    assert all(v < burst[s] for s, v in zip(*SDPA_FLASH_CAUSAL))
    # one row for both types: the H100's bursts through the same ratios lie within 6% of it (2k tokens up)
    h100 = _load_bench("sdpa_flash_in_step").table(burst_data=os.path.dirname(os.path.dirname(PROBE_H100)))
    assert all(abs(h100["causal"][s] / v - 1) < 0.06 for s, v in zip(*SDPA_FLASH_CAUSAL) if s >= 2048)
    assert fused_attention_efficiency("H100", 8192, backend="sdpa_flash") == fused_attention_efficiency(
        "H200", 8192, backend="sdpa_flash")


def test_zero3_plans_are_charged_pytorchs_flash_in_steady_state():
    """auto: ZeRO-3 plans (torchtitan's) get sdpa_flash where the GPU type has the row (not scaled again by the
    profile's sustained_slowdown), FlashAttention-2's elsewhere; an explicit backend wins; ZeRO 0-2 keep flash2."""
    import dataclasses
    t = TrainingSpec(global_batch_size=64, seq_length=8192)
    z3 = ParallelConfig(1, 1, 8, 1, 8, "1f1b", 1, "selective", 3, False)
    z1 = dataclasses.replace(z3, zero=1)
    assert attention_backend(t, z3) == "sdpa_flash" and attention_backend(t, z1) == "flash2"
    assert attention_backend(t) == "flash2"
    assert attention_backend(dataclasses.replace(t, attention_backend="cudnn"), z3) == "cudnn"
    # flash2 named on a torchtitan plan is PyTorch's copy of it: the same row as auto; Megatron plans keep the burst one
    assert attention_backend(dataclasses.replace(t, attention_backend="flash2"), z3) == "sdpa_flash"
    assert attention_backend(dataclasses.replace(t, attention_backend="flash2"), z1) == "flash2"
    assert fused_attention_efficiency("H100-SXM5-80GB", 8192, backend="sdpa_flash") == pytest.approx(252.3 / 989)
    assert (fused_attention_efficiency("A100-SXM4-80GB", 4096, backend="sdpa_flash")
            == fused_attention_efficiency("A100-SXM4-80GB", 4096, backend="flash2"))
    slow = dataclasses.replace(ComputeModel(), sustained_slowdown=1.06)
    p3, p1 = slow.layer_parts(LLAMA, H100, t, z3), slow.layer_parts(LLAMA, H100, t, z1)
    flops = causal_attention_flops(1, 8192, LLAMA.hidden_size, 1)
    assert p3["attn"] == pytest.approx(flops / (989e12 * 252.3 / 989))          # the measured rate, as it stands
    assert p1["attn"] == pytest.approx(1.06 * flops / (989e12 * 282.5 / 989))   # the burst table, made steady
    assert p3["gemm"] == p1["gemm"]


def test_compiled_loss_keeps_bf16_logits():
    """training.compile_loss (default): a ZeRO-3, tp 1, fused-kernel plan keeps 2 bytes per logit per held
    micro-batch and 2 live in the loss backward; false, eager kernels or tp > 1 keep the eager loss's 4 + 8."""
    import dataclasses

    from planner.costs.memory import logits_bytes
    m = load_model(os.path.join(ROOT, "models", "llama3-8b.yaml"))
    z3 = ParallelConfig(1, 1, 8, 2, 1, "1f1b", 1, "selective", 3, False)
    t = TrainingSpec(global_batch_size=16, seq_length=8192)
    per_logit = 2 * 8192 * m.vocab_size
    assert logits_bytes(m, t, z3, 0) == pytest.approx(4 * per_logit, rel=1e-3)
    assert logits_bytes(m, dataclasses.replace(t, compile_loss=False), z3, 0) == pytest.approx(12 * per_logit,
                                                                                               rel=1e-3)
    assert logits_bytes(m, dataclasses.replace(t, kernels="eager"), z3, 0) == pytest.approx(12 * per_logit, rel=1e-3)
    assert logits_bytes(m, t, dataclasses.replace(z3, zero=1), 0) == logits_bytes(
        m, dataclasses.replace(t, compile_loss=False), dataclasses.replace(z3, zero=1), 0)


def test_compile_loss_false_reaches_the_torchtitan_config():
    """compile_loss false (torchtitan of Dec 2024) leaves the loss out of [compile] components; absent, it is in."""
    import tomllib

    from planner.export import torchtitan_toml
    sol = tp2_solution(framework="torchtitan", precision="bf16", seq_length=4096, num_layers=4)
    # dp 2: ZeRO-3 over one replica would be no FSDP, and torchtitan would train it in fp32 (export refuses it)
    sol["config"] = {**sol["config"], "zero": 3, "sequence_parallel": True, "dp": 2}
    assert tomllib.loads(torchtitan_toml(sol))["compile"]["components"] == ["model", "loss"]
    assert tomllib.loads(torchtitan_toml({**sol, "compile_loss": False}))["compile"]["components"] == ["model"]
    with pytest.raises(SpecError, match="compile_loss"):
        torchtitan_toml({**sol, "compile_loss": "false"})
    d = mini_spec_dict()
    d["training"] = {**d["training"], "compile_loss": False}
    assert parse_spec(d, "x.yaml").training.compile_loss is False
    d["training"]["compile_loss"] = "no"
    with pytest.raises(SpecError, match="compile_loss"):
        parse_spec(d, "x.yaml")


def test_estimate_names_the_kernel_a_zero3_plan_is_charged():
    from planner.cli.estimate import costs_note
    from planner.spec import load_spec
    spec = load_spec(os.path.join(ROOT, "specs", "llama3-8b-h100-fsdp-128.yaml"))
    z3 = ParallelConfig(1, 1, 128, 2, 1, "1f1b", 1, "selective", 3, False)
    assert "fused attention sdpa_flash (measured in training steps)" in costs_note(spec, z3)
    assert "fused attention flash2" in costs_note(spec, ParallelConfig(1, 1, 128, 2, 1, "1f1b", 1, "none", 1, False))


def test_compiled_loss_under_pipelining_counts_the_kept_logits_once():
    """pp > 1: PyTorch pipelining's last stage keeps every micro-batch's bf16 output, which is what the compiled loss
    saves for its backward; the held micro-batches' logits are not counted a second time (the eager loss's fp32
    log-softmax is a separate tensor and is)."""
    import dataclasses

    from planner.costs.memory import held_at_output, logits_bytes
    m = load_model(os.path.join(ROOT, "models", "llama3-8b.yaml"))
    t = TrainingSpec(global_batch_size=32, seq_length=8192)
    pp2 = ParallelConfig(1, 2, 4, 2, 4, "1f1b", 1, "selective", 3, False)
    last = pp2.pp - 1
    held = held_at_output(pp2, last)
    assert held >= 1
    per_logit = 2 * 8192 * m.vocab_size
    # compiled: kept bf16 outputs (2 x m) and the 2 bytes live in the backward, nothing per held micro-batch
    assert logits_bytes(m, t, pp2, last) == pytest.approx((2 * pp2.num_microbatches + 2) * per_logit, rel=1e-3)
    eager = dataclasses.replace(t, compile_loss=False)
    assert logits_bytes(m, eager, pp2, last) == pytest.approx((4 * held + 8 + 2 * pp2.num_microbatches) * per_logit,
                                                              rel=1e-3)
