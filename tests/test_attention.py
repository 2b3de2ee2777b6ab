"""training.attention: fused (default) vs unfused (Korthikanti's count, the old numbers)."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from planner.config import ParallelConfig
from planner.costs.compute import ComputeModel, causal_attention_flops, fused_attention_efficiency
from planner.costs.learned import load_default
from planner.costs.memory import AnalyticalMemory, layer_activation_bytes, layer_transient_bytes
from planner.errors import SpecError
from planner.spec import load_cluster, load_model, parse_spec
from planner.spec.plan import TrainingSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT = load_model(os.path.join(ROOT, "models", "gpt3-175b.yaml"))
LLAMA = load_model(os.path.join(ROOT, "models", "llama3-70b.yaml"))
A100 = load_cluster(os.path.join(ROOT, "clusters", "dgx-a100-superpod.yaml"))
H100 = load_cluster(os.path.join(ROOT, "clusters", "dgx-h100.yaml"))


def cfg(rc="none", sp=True, mbs=1):
    return ParallelConfig(8, 8, 1, mbs, 64, "1f1b", 1, rc, 1, sp)


def tr(seq, attention):
    # fp32 gradient buffer, as these numbers were pinned before the buffer followed grad_reduce_in_fp32
    return TrainingSpec(global_batch_size=64, seq_length=seq, precision="bf16", attention=attention,
                        grad_reduce_in_fp32=True)


# Computed with the code before training.attention existed (commit b9e5707, /tmp/attn/pins.py in the branch's
# report): stage 0, tp 8 pp 8 dp 1 mbs 1 m 64 1f1b zero 1 -> [activations, transient, total] bytes,
# [forward, backward] s of ComputeModel() defaults. `unfused` must give them exactly. Except the selective backward,
# re-pinned on branch `bias` (#8): selective recompute now re-runs the softmax / dropout passes over the s^2 scores
# with the two attention GEMMs (Megatron's checkpointed core attention); it was 0.12749578903535677. Branch `costfix`
# re-pinned the stage-0 times (+1e-5 .. +3e-5): the embedding gradient zeroed there is the padded vocabulary's
# (costs/memory.py padded_vocab, as memory counts it); they were 0.06824660781629636 / 0.1238270912121773,
# 0.06824660781629636 / 0.13111966769135677, 0.09083358580557505 / 0.14527339795592184, 0.08222128166343323 /
# 0.21282770719648403. Memory is unchanged.
OLD = {("gpt", 2048, "none", True): (34456207360.0, 251658240.0, 87664521216.0, 0.06824853908029636,
                                     0.1238309537401773),
       ("gpt", 2048, "selective", True): (10297016320.0, 346030080.0, 63599702016.0, 0.06824853908029636,
                                          0.13112353021935677),
       ("llama", 8192, "none", False): (148377698304.0, 2994733056.0, 175152889856.0, 0.09083463438157505,
                                        0.14527549510792184),
       ("llama", 8192, "full", True): (1409286144.0, 4378853376.0, 29568598016.0, 0.08222233023943323,
                                       0.21282980434848403)}


@pytest.mark.parametrize("key", list(OLD))
def test_unfused_keeps_the_old_numbers(key):
    fam, seq, rc, sp = key
    model, cl = (GPT, A100) if fam == "gpt" else (LLAMA, H100)
    t, c = tr(seq, "unfused"), cfg(rc, sp)
    m = AnalyticalMemory().stage_memory(model, cl, t, c, 0)
    st = ComputeModel().stage_times(model, cl, t, c)[0]
    assert (m.activations, m.transient, m.total, st.forward, st.backward) == OLD[key]


def test_default_is_fused():
    assert TrainingSpec(global_batch_size=1, seq_length=2048).attention == "fused"


@pytest.mark.parametrize("model", [GPT, LLAMA], ids=["gpt", "llama-gqa"])
@pytest.mark.parametrize("rc", ["none", "selective", "full"])
def test_fused_memory_below_unfused(model, rc):
    c = cfg(rc)
    f = AnalyticalMemory().stage_memory(model, H100, tr(4096, "fused"), c, 0)
    u = AnalyticalMemory().stage_memory(model, H100, tr(4096, "unfused"), c, 0)
    assert f.total < u.total
    if rc == "none":      # the s^2 scores are the bulk of the difference
        assert f.activations < 0.8 * u.activations


@pytest.mark.parametrize("model", [GPT, LLAMA], ids=["gpt", "llama-gqa"])
@pytest.mark.parametrize("rc", ["none", "selective", "full"])
def test_fused_has_no_s_squared_term(model, rc):
    """Per-layer stored activations are linear in s (2x s -> exactly 2x bytes); the backward working set is the
    largest of linear terms and an s-independent weight gradient, so at most linear."""
    c = cfg(rc)
    a, b, d = (layer_activation_bytes(model, tr(s, "fused"), c) for s in (2048, 4096, 8192))
    assert b == pytest.approx(2 * a, rel=1e-12) and d == pytest.approx(4 * a, rel=1e-12)
    a, b, d = (layer_transient_bytes(model, tr(s, "fused"), c) for s in (8192, 16384, 32768))
    assert b <= 2 * a * (1 + 1e-12) and d == pytest.approx(2 * b, rel=1e-12)
    # unfused is not: the scores grow with s^2
    a, b = (layer_activation_bytes(model, tr(s, "unfused"), cfg()) for s in (2048, 4096))
    assert b > 2.2 * a


def test_fused_keeps_qkv_output_and_lse():
    """GPT, no recompute, SP, t = 8: 34 sbh/t of Korthikanti's linear part (Q, K, V and the output included) plus
    the fp32 log-sum-exp 4 * s * b * a / t, nothing else per layer."""
    s, b, h, a, t = 2048, 1, GPT.hidden_size, GPT.num_attention_heads, 8
    got = layer_activation_bytes(GPT, tr(s, "fused"), cfg("none", True))
    assert got == pytest.approx(34 * s * b * h / t + 4 * s * b * a / t)
    # selective (Megatron-Core's core_attn) drops only the log-sum-exp with a fused kernel
    sel = layer_activation_bytes(GPT, tr(s, "fused"), cfg("selective", True))
    assert got - sel == pytest.approx(4 * s * b * a / t)


def test_causal_flops_are_half():
    assert causal_attention_flops(2, 4096, 8192, 4) == pytest.approx(causal_attention_flops(2, 4096, 8192, 4,
                                                                                            causal=False) / 2)
    assert causal_attention_flops(1, 2048, 12288, 1, causal=False) == 4 * 2048 * 2048 * 12288


def test_fused_time_is_causal_flops_at_the_published_efficiency():
    t = tr(2048, "fused")
    p = ComputeModel().layer_parts(GPT, A100, t, cfg())
    # A100, s = 2k: 155 TFLOP/s (FlashAttention-2, causal, head dim 128, fwd + bwd)
    assert fused_attention_efficiency("A100-SXM4-80GB", 2048) == pytest.approx(155 / 312)
    assert p["attn"] == pytest.approx(causal_attention_flops(1, 2048, GPT.hidden_size, 8) / 155e12)
    assert p["attn_backward"] == pytest.approx(2.5 * p["attn"])
    u = ComputeModel().layer_parts(GPT, A100, tr(2048, "unfused"), cfg())
    assert p["attn"] < u["attn"] and p["elem"] < u["elem"]       # no s^2 element-wise bytes
    # interpolation in log s, flat outside the measured range; each Hopper type has its own measured row
    assert fused_attention_efficiency("H100", 3000) > fused_attention_efficiency("H100", 2048)
    assert fused_attention_efficiency("H100", 100000) == pytest.approx(311.2 / 989)
    assert fused_attention_efficiency("H200", 4096) > fused_attention_efficiency("H100", 4096)


def test_selective_with_fused_recomputes_the_kernel_forward():
    c = ComputeModel()
    st_n = c.stage_times(GPT, H100, tr(4096, "fused"), cfg("none"))[0]
    st_s = c.stage_times(GPT, H100, tr(4096, "fused"), cfg("selective"))[0]
    attn = c.layer_parts(GPT, H100, tr(4096, "fused"), cfg("selective"))["attn"]
    assert st_s.recompute == pytest.approx(GPT.num_layers // 8 * attn)
    assert st_s.backward > st_n.backward


def test_learned_estimator_takes_fused_specs():
    """The shipped estimator's features come from the analytical terms: a fused spec goes through it, its
    activations feature without any s^2 term, and its correction stays small."""
    est = load_default()
    for rc in ("none", "selective", "full"):
        f = est.stage_memory(LLAMA, H100, tr(8192, "fused"), cfg(rc), 0)
        u = est.stage_memory(LLAMA, H100, tr(8192, "unfused"), cfg(rc), 0)
        a = AnalyticalMemory().stage_memory(LLAMA, H100, tr(8192, "fused"), cfg(rc), 0)
        assert f.activations == a.activations and f.total < u.total
        assert abs(f.correction) < 0.01 * a.total


def _spec(training):
    return {"name": "x", "model": os.path.join(ROOT, "models", "gpt3-1.3b.yaml"),
            "cluster": os.path.join(ROOT, "clusters", "dgx-h100.yaml"),
            "training": {"global_batch_size": 8, "seq_length": 2048, **training}}


def test_parser_reads_attention():
    assert parse_spec(_spec({}), "s.yaml").training.attention == "fused"
    assert parse_spec(_spec({"attention": "unfused"}), "s.yaml").training.attention == "unfused"


@pytest.mark.parametrize("bad", ["flash", "", 1, True, "FUSED"])
def test_parser_refuses_bad_attention(bad):
    with pytest.raises(SpecError) as e:
        parse_spec(_spec({"attention": bad}), "s.yaml")
    assert "training.attention" in str(e.value) and "s.yaml" in str(e.value)


def test_validations_declare_unfused():
    from planner.profile.validate import VTRAIN_DEFAULTS, Row, row_spec
    assert VTRAIN_DEFAULTS["attention"] == "unfused"
    row = Row(8, 16, 1, 2048, 16, 24, 2048, 2, 4, 1, 1.0)
    spec, _ = row_spec(row, replace(A100.subset([0]), gpus_per_node=8))
    assert spec.training.attention == "unfused"


# --- tryout 5, #3: no fused attention before Ampere ----------------------------------------------------------------

def _v100_spec(training, search=None):
    return {"name": "v", "model": os.path.join(ROOT, "models", "gpt3-1.3b.yaml"),
            "cluster": {"name": "v", "gpu": {"type": "Tesla V100-SXM2-32GB", "memory_GiB": 32,
                                             "peak_tflops": {"fp16": 125, "fp32": 15.7}},
                        "nodes": 1, "gpus_per_node": 8,
                        "network": {"intra_node": {"bandwidth_GBps": 150}, "inter_node": {"bandwidth_Gbps": 100}}},
            "training": {"global_batch_size": 8, "seq_length": 2048, "precision": "fp16", **training},
            **({"search": search} if search else {})}


def test_v100_runs_unfused_attention_by_default():
    """FlashAttention-2 and Transformer Engine (cuDNN's fused attention) need Ampere; on V100 Megatron-LM runs
    --transformer-impl local, the unfused softmax path. A spec that leaves training.attention out means unfused
    there, and its hash says so; an A100 spec keeps fused and its hash."""
    from planner.spec import load_spec
    s = parse_spec(_v100_spec({}), "v.yaml")
    assert s.training.attention == "unfused"
    assert parse_spec(_v100_spec({"attention": "unfused"}), "v.yaml").training == s.training
    shipped = load_spec(os.path.join(ROOT, "specs", "llama2-7b-v100-het-128.yaml"))
    assert shipped.training.attention == "unfused" and shipped.raw["training"]["attention"] == "unfused"
    assert "attention" not in load_spec(os.path.join(ROOT, "specs", "gpt3-13b-a100-het-128.yaml")).raw["training"]
    # a Spec built in code (a sweep's case, `size`) gets the same default
    assert replace(shipped, training=replace(shipped.training, attention="fused")).training.attention == "unfused"


@pytest.mark.parametrize("training, field", [({"attention": "fused"}, "training.attention"),
                                             ({"attention_backend": "flash2"}, "training.attention_backend")])
def test_fused_attention_stated_on_v100_is_refused(training, field):
    with pytest.raises(SpecError) as e:
        parse_spec(_v100_spec(training), "v.yaml")
    assert e.value.file == "v.yaml" and e.value.field == field
    assert "V100" in str(e.value) and "Ampere" in str(e.value)


def test_v100_refusal_through_the_cli(tmp_path, capsys):
    import yaml

    from planner.cli.main import main
    p = tmp_path / "v.yaml"
    p.write_text(yaml.safe_dump(_v100_spec({"attention": "fused"})))
    assert main(["estimate", str(p), "--tp", "8", "--pp", "1", "--dp", "1", "--mbs", "1"]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and "training.attention" in err and "V100" in err and "Traceback" not in err


def test_v100_context_parallel_names_the_gpu():
    with pytest.raises(SpecError) as e:
        parse_spec(_v100_spec({}, {"context_parallel": [2]}), "v.yaml")
    assert e.value.field == "search.context_parallel" and "V100" in str(e.value)


def test_v100_solution_records_unfused():
    from planner.search.solve import solve
    s = parse_spec(_v100_spec({}, {"recompute": ["full"], "zero": [0], "micro_batch_sizes": [1]}), "v.yaml")
    d = solve(s, time_limit_s=1, simulate=False).as_dict()
    assert d["attention"] == "unfused"
    h = parse_spec(_spec({}), "s.yaml")
    assert "attention" not in solve(h, time_limit_s=1, simulate=False).as_dict()      # fused: absent, as before
