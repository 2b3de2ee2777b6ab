"""ZeRO-3 / FSDP / HSDP (#9): config and spec rules, memory, time, bounds against brute force, simulator, export."""
import json

import numpy as np
import pytest
import tomllib

from planner.config import ParallelConfig
from planner.costs.iteration import build_problem, evaluate
from planner.costs.memory import AnalyticalMemory, fsdp_buffer_bytes
from planner.errors import SpecError
from planner.export import deepspeed_config, megatron_args, torchtitan_toml
from planner.mapping import layouts
from planner.mapping.cpsat import solve_exact
from planner.search.space import enumerate_configs
from planner.simulator import simulate


def _cfg(tp=4, pp=1, dp=4, m=16, zero=3, shard=0, sched="1f1b", v=1):
    return ParallelConfig(tp, pp, dp, 1, m, sched, v, "selective", zero, tp > 1, dp_shard=shard)


def test_config_round_trip_and_labels():
    c = _cfg(dp=8, m=8, shard=4)
    assert ParallelConfig.from_dict(c.as_dict()) == c
    assert c.label().endswith(" hsdp4") and c.replicas == 2 and c.shard_size == 4
    plain = _cfg(zero=1)
    assert "dp_shard" not in plain.as_dict() and "hsdp" not in plain.label()
    bads = (({"dp_shard": 3}, "dp_shard"), ({"dp_shard": 8}, "dp_shard"), ({"zero": 1, "dp_shard": 2}, "dp_shard"),
            ({"zero": 4}, "zero"))
    for bad, field in bads:
        d = {**_cfg(dp=8, m=8).as_dict(), **bad}
        with pytest.raises(SpecError, match=field):
            ParallelConfig.from_dict(d, "x.yaml")


def test_spec_rules_name_the_field(make_spec):
    with pytest.raises(SpecError, match="search.dp_shard"):
        make_spec(schedules=["1f1b"], recompute=["selective"], zero=[0, 1], dp_shard=[2])
    with pytest.raises(SpecError, match="search.dp_shard"):
        make_spec(schedules=["1f1b"], recompute=["selective"], zero=[3], dp_shard=[3])
    with pytest.raises(SpecError, match="search.schedules"):
        make_spec(schedules=["zb-h1"], recompute=["selective"], zero=[3])


def test_default_search_has_no_zero3_and_zero3_search_is_torchtitan_shaped(make_spec):
    spec = make_spec()
    assert all(c.zero < 3 and c.dp_shard == 0 for c in enumerate_configs(spec))
    spec3 = make_spec(schedules=["1f1b", "zb-h1"], recompute=["selective"], zero=[0, 3], dp_shard="auto")
    z3 = [c for c in enumerate_configs(spec3) if c.zero == 3]
    assert z3 and all(c.schedule == "1f1b" and (c.tp == 1 or c.sequence_parallel) for c in z3)
    hs = [c for c in z3 if c.dp_shard]
    assert hs and all(layouts(c.tp, c.pp, c.dp, 8, c.dp_shard) for c in hs)


def test_memory_shards_state_and_adds_gathered_buffers(make_spec):
    spec = make_spec()
    mem = AnalyticalMemory()
    z1 = mem.stage_memory(spec.model, spec.cluster, spec.training, _cfg(zero=1), 0)
    z3 = mem.stage_memory(spec.model, spec.cluster, spec.training, _cfg(zero=3), 0)
    assert z3.weights < z1.weights and z3.gradients < z1.gradients
    assert z3.fsdp > 0 and z1.fsdp == 0 and "fsdp" not in z1.as_GiB()
    hs = mem.stage_memory(spec.model, spec.cluster, spec.training, _cfg(dp=8, m=8, tp=2, shard=2), 0)
    full = mem.stage_memory(spec.model, spec.cluster, spec.training, _cfg(dp=8, m=8, tp=2), 0)
    assert hs.weights == pytest.approx(4 * full.weights)          # sharded 2-way instead of 8-way
    # pp > 1 keeps the whole stage gathered (no reshard after forward): more than the per-unit buffers of pp = 1
    assert fsdp_buffer_bytes(spec.model, _cfg(tp=2, pp=2, dp=8, m=8), 0) > fsdp_buffer_bytes(spec.model, _cfg(
        tp=2, pp=1, dp=16, m=4), 0)
    # pp > 1, exactly: the stage's bf16 parameters (2 B) and its unsharded gradients accumulated in the fp32
    # reduce dtype (4 B: FSDPParam.to_accumulated_grad_if_needed), plus one unit's fp32 reduce-scatter input
    from planner.costs.memory import fsdp_units
    units = fsdp_units(spec.model, _cfg(tp=2, pp=2, dp=8, m=8), 0)
    assert fsdp_buffer_bytes(spec.model, _cfg(tp=2, pp=2, dp=8, m=8), 0) == pytest.approx(
        6 * sum(units) + 4 * max(units))


def test_fsdp_with_pp_exposes_the_whole_reduce_scatter_once(make_spec):
    """PyTorch pipelining issues FSDP's reduce-scatters after the stage's last backward: nothing hides them."""
    from planner.costs import default_costs
    from planner.costs.fsdp import fsdp_collectives
    from planner.costs.iteration import fsdp_exposed_parts, stage_times
    from planner.costs.memory import fsdp_units
    spec = make_spec(spread=(0.01, 0.02))
    cfg, costs = _cfg(tp=2, pp=2, dp=8, m=8), default_costs(spec.cluster)
    st = stage_times(spec, cfg, costs)
    f, b, once = fsdp_exposed_parts(spec, cfg, costs, st, 0, 4, 2)
    _, rs, rep = fsdp_collectives(spec, cfg, costs, sum(fsdp_units(spec.model, cfg, 0)), 4, 2)
    assert f == 0 and b == 0 and rs > 0 and once >= rs + rep


def test_pp_stage_keeps_fp32_accumulated_grads_and_receive_buffers(make_spec):
    from planner.costs.memory import fsdp_units, pipelining_buffer_bytes
    spec = make_spec()
    cfg = _cfg(tp=2, pp=2, dp=8, m=8)
    s, b, h = spec.training.seq_length, cfg.micro_batch_size, spec.model.hidden_size
    units = fsdp_units(spec.model, cfg, 0)
    # bf16 gathered (2) + fp32 unsharded_accumulated_grad (4) per parameter, one unit's fp32 reduce-scatter input
    assert fsdp_buffer_bytes(spec.model, cfg, 0) == pytest.approx(6 * sum(units) + 4 * max(units))
    # stage 0 of 2: one gradient receive buffer per micro-batch, plus its m outputs (fwd_cache / output_chunks, no
    # receive buffer to cancel them); interleaved v2: its chunks have both directions, plus virtual stage 0's held
    # outputs (5 chunk forwards held at the peak, chunks 0 0 1 1 0)
    assert pipelining_buffer_bytes(spec.model, spec.training, cfg, 0) == pytest.approx((8 + 8) * 2 * s * b * h / 2)
    # stage 1 of 2 (the last): m input receive buffers, and the m - 1 input gradients left on them
    assert pipelining_buffer_bytes(spec.model, spec.training, cfg, 1) == pytest.approx((8 + 7) * 2 * s * b * h / 2)
    il = _cfg(tp=2, pp=2, dp=8, m=8, sched="interleaved", v=2)
    assert pipelining_buffer_bytes(spec.model, spec.training, il, 0) == pytest.approx((3 * 8 + 3) * 2 * s * b * h / 2)
    assert pipelining_buffer_bytes(spec.model, spec.training, _cfg(tp=2, dp=16, m=4), 0) == 0.0

def test_fsdp_time_grows_with_slower_links_and_exposes_per_microbatch(make_spec):
    fast = make_spec(spread=(0.9, 1.0))
    slow = make_spec(spread=(0.01, 0.02))
    cfg = _cfg(tp=8, dp=4, m=16)
    lay = layouts(8, 1, 4, 8)[0]
    t = [evaluate(s, cfg, p := build_problem(s, cfg, lay), p.rank_order()).dp_comm_s for s in (fast, slow)]
    assert 0 < t[0] < t[1]
    z1 = _cfg(tp=8, dp=4, m=16, zero=1)
    p1 = build_problem(slow, z1, lay)
    # ZeRO-3 moves parameters every micro-batch (pp = 1): far more exposed time than ZeRO-1's one sync
    assert t[1] > evaluate(slow, z1, p1, p1.rank_order()).dp_comm_s


def test_torchtitan_pipelining_schedule_and_loss_terms(make_spec):
    from planner.costs.memory import logits_bytes, padded_vocab, stage_inflight
    from planner.costs.pipeline import inflight_microbatches
    # m == pp: neither Megatron-Core (since 4295be1a) nor PyTorch's ScheduleInterleaved1F1B runs every forward
    # first on every rank; the last rank warms up (v - 1) pp chunks, plus the one in flight
    assert inflight_microbatches("interleaved", 8, 8, 2, 7) == 4.5                    # (8 + 0 + 1) / 2
    assert inflight_microbatches("interleaved", 8, 8, 2, 0) == 8.0                    # capped at m v
    assert stage_inflight(_cfg(tp=2, pp=8, dp=1, m=8, sched="interleaved", v=2), 7) == 4.5
    assert stage_inflight(_cfg(tp=2, pp=8, dp=1, m=8, sched="interleaved", v=2, zero=1), 7) == 4.5
    spec = make_spec()
    s = spec.training.seq_length

    def per_logit(cfg, stage):
        return logits_bytes(spec.model, spec.training, cfg, stage) / (s * padded_vocab(spec.model, cfg.tp) / cfg.tp)
    assert per_logit(_cfg(tp=1, dp=16, m=4), 0) == pytest.approx(2 + 2)       # compiled cross_entropy (default)
    from dataclasses import replace
    eager_loss = replace(spec.training, compile_loss=False)
    assert logits_bytes(spec.model, eager_loss, _cfg(tp=1, dp=16, m=4), 0) / (
        s * padded_vocab(spec.model, 1)) == pytest.approx(4 + 8)                  # plain cross_entropy, eager
    assert per_logit(_cfg(tp=2, dp=8, m=8), 0) == pytest.approx(4 + 12)       # loss_parallel's backward
    assert per_logit(_cfg(tp=2, pp=2, dp=4, m=8), 1) == pytest.approx(4 + 12 + 2 * 8)   # + output_chunks
    assert per_logit(_cfg(tp=2, pp=2, dp=4, m=8, zero=1), 1) == pytest.approx(4 + 2)

def test_pp_reduce_scatter_runs_once_after_the_last_backward_exposed(make_spec):
    from planner.costs import default_costs
    from planner.costs.fsdp import fsdp_collectives
    from planner.costs.iteration import exposed_s, fsdp_exposed_parts, stage_times
    from planner.costs.memory import fsdp_units
    spec = make_spec()
    cfg, costs = _cfg(tp=2, pp=2, dp=8, m=8), default_costs(spec.cluster)
    st = stage_times(spec, cfg, costs)
    f, bw, once = fsdp_exposed_parts(spec, cfg, costs, st, 0, 2, 4)
    ag, rs, rep = fsdp_collectives(spec, cfg, costs, sum(fsdp_units(spec.model, cfg, 0)), 2, 4)
    # nothing per micro-batch (the fp32 gradient accumulation is in stage_times' backward); the whole stage's
    # reduce-scatter is charged once (a backward would have hidden most of it), beside FSDP2's once-per-iteration
    # copies (fsdp_copy_s)
    from planner.costs.fsdp import fsdp_copy_s
    copies = fsdp_copy_s(spec, cfg, costs, 0)[2]
    assert f == 0 and bw == 0 and copies > 0 and rs + rep < once - copies <= ag + rs + rep
    assert exposed_s(rs + rep, st[0].backward, len(fsdp_units(spec.model, cfg, 0))) < 0.5 * (rs + rep)

@pytest.mark.parametrize("case", [(4, (4, 1, 8), 0), (4, (4, 2, 4), 0), (4, (2, 1, 16), 2), (4, (4, 2, 4), 2)])
def test_exact_equals_brute_force_with_zero3(make_spec, optimum, case):
    n, (tp, pp, dp), shard = case
    spec = make_spec(nodes=n, seed=7, gbs=64)
    cfg = ParallelConfig(tp, pp, dp, 1, 64 // dp, "1f1b", 1, "selective", 3, True, dp_shard=shard)
    for lay in layouts(tp, pp, dp, 8, shard):
        prob = build_problem(spec, cfg, lay)
        best, _ = optimum(prob)
        ex = solve_exact(prob, time_limit_s=20)
        assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9)
        assert prob.lower_bound() <= best + 1e-12


@pytest.mark.parametrize("tp, pp, dp", [(4, 1, 8), (4, 2, 4)])
def test_simulator_agrees_with_the_estimate(make_spec, tp, pp, dp):
    spec = make_spec(nodes=4, seed=3, gbs=64)
    cfg = ParallelConfig(tp, pp, dp, 1, 64 // dp, "1f1b", 1, "selective", 3, True)
    lay = max(layouts(tp, pp, dp, 8), key=lambda L: L.b)
    prob = build_problem(spec, cfg, lay)
    est = evaluate(spec, cfg, prob, prob.rank_order())
    sim = simulate(spec, cfg, layout=lay, assign=prob.rank_order())
    assert est.dp_comm_s > 0
    assert sim.iteration_s == pytest.approx(est.iteration_s, rel=0.05)


def _solution(cfg, **extra):
    return {"config": cfg.as_dict(), "seq_length": 2048, "num_layers": 24, **extra}


def test_torchtitan_toml_names_the_degrees():
    cfg = ParallelConfig(4, 2, 8, 1, 8, "interleaved", 2, "full", 3, True, dp_shard=2)
    d = tomllib.loads(torchtitan_toml(_solution(cfg)))
    p = d["parallelism"]
    assert (p["data_parallel_shard_degree"], p["data_parallel_replicate_degree"], p["tensor_parallel_degree"],
            p["pipeline_parallel_degree"], p["context_parallel_degree"]) == (2, 4, 4, 2, 1)
    assert p["pipeline_parallel_schedule"] == "Interleaved1F1B" and d["activation_checkpoint"]["mode"] == "full"
    assert d["training"]["local_batch_size"] == 8 and d["training"]["seq_len"] == 2048


def test_fp8_zero3_plans_are_torchao_float8():
    """fp8 with ZeRO-3 is searched (torchao's Float8 as torchtitan runs it) and exported as its tables; fp8 without
    ZeRO-3 stays Transformer Engine's, which torchtitan cannot run."""
    import os

    import yaml

    from planner.spec import parse_spec
    path = os.path.join(os.path.dirname(__file__), "..", "specs", "llama3-8b-h100-fsdp-128.yaml")
    with open(path) as f:
        raw = yaml.safe_load(f)
    raw["training"] = {**raw["training"], "precision": "fp8", "fsdp_float8_all_gather": True}
    spec = parse_spec(raw, path)
    assert any(c.zero == 3 for c in enumerate_configs(spec)) and any(c.zero < 3 for c in enumerate_configs(spec))
    cfg = ParallelConfig(4, 1, 16, 1, 4, "1f1b", 1, "selective", 3, True)
    for f8 in (False, True):
        d = tomllib.loads(torchtitan_toml(_solution(cfg, precision="fp8", fsdp_float8_all_gather=f8)))
        assert d["model"]["converters"] == ["quantize.linear.float8"] and d["compile"]["enable"] is True
        q = d["quantize"]["linear"]["float8"]
        assert q["enable_fsdp_float8_all_gather"] is f8 and q["filter_fqns"] == ["output"] and "recipe_name" not in q
        assert d["activation_checkpoint"]["selective_ac_option"] == "op"
        assert d["training"]["mixed_precision_param"] == "bfloat16"     # Float8 GEMMs under bf16 FSDP2 parameters
    bf16 = tomllib.loads(torchtitan_toml(_solution(cfg, kernels="eager")))
    assert "model" not in bf16 and "compile" not in bf16 and "quantize" not in bf16
    # the plan's TP-communication overlap is torchtitan's async TP (only under compile: eager says so)
    assert "enable_async_tensor_parallel" not in bf16["parallelism"]
    on = _solution(cfg, overlap={"tp_comm": True})
    assert tomllib.loads(torchtitan_toml(on))["parallelism"]["enable_async_tensor_parallel"] is True
    eager_on = torchtitan_toml({**on, "kernels": "eager"})
    assert "async TP runs only under torch.compile" in eager_on
    assert "enable_async_tensor_parallel" not in tomllib.loads(eager_on)["parallelism"]
    with pytest.raises(SpecError, match="precision"):
        torchtitan_toml(_solution(ParallelConfig(4, 1, 16, 1, 4, "1f1b", 1, "selective", 0, True), precision="fp8"))


def test_exports_refuse_what_the_framework_cannot_run():
    pp2 = ParallelConfig(4, 2, 8, 1, 8, "1f1b", 1, "full", 3, True)
    with pytest.raises(SpecError, match="config.pp"):
        deepspeed_config(_solution(pp2))
    with pytest.raises(SpecError, match="config.zero"):
        megatron_args(_solution(pp2))
    with pytest.raises(SpecError, match="config.cp"):      # DeepSpeed's config has no context parallelism
        deepspeed_config({**_solution(ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "full", 3, False, cp=2)),
                          "cp_comm": "allgather"})
    with pytest.raises(SpecError, match="config.zero"):
        torchtitan_toml(_solution(ParallelConfig(4, 2, 8, 1, 8, "1f1b", 1, "full", 1, True)))
    with pytest.raises(SpecError, match="config.tp"):      # nor tensor parallelism: tp ranks are no data ranks
        deepspeed_config(_solution(ParallelConfig(4, 1, 16, 1, 4, "1f1b", 1, "full", 3, True)))
    ds = deepspeed_config(_solution(ParallelConfig(1, 1, 64, 1, 4, "1f1b", 1, "full", 3, False)))
    assert json.loads(json.dumps(ds))["zero_optimization"]["stage"] == 3
    assert ds["train_batch_size"] == 256 and ds["gradient_accumulation_steps"] == 4
    assert np.isfinite(ds["train_micro_batch_size_per_gpu"])


def test_cli_refuses_zero3_outside_torchtitan(tmp_path, capsys):
    from planner.cli.main import main
    spec = "specs/llama3-8b-h100-fsdp-128.yaml"
    base = ["estimate", spec, "--tp", "1", "--mbs", "1", "--zero", "3"]
    for extra, flag in ((["--pp", "2", "--dp", "64", "--schedule", "zb-h1"], "--schedule"),
                        (["--pp", "2", "--dp", "64", "--pipeline-engine", "deepspeed"], "--zero"),
                        (["--pp", "1", "--dp", "128", "--dp-shard", "3"], "--dp-shard")):
        assert main(base + extra) == 2
        assert flag in capsys.readouterr().err


@pytest.mark.parametrize("h, a, kv, f, s", [(256, 4, 1, 768, 64), (256, 4, 4, 512, 32)])
def test_op_sac_bytes_match_a_fake_tensor_torchtitan_block(h, a, kv, f, s):
    """ZeRO-3 plans' selective recompute (torchtitan's per-op policy): the count equals what torch's selective
    checkpointing keeps for a torchtitan-style block (GQA and MHA), measured on fake tensors."""
    from types import SimpleNamespace

    from planner.costs.memory import op_sac_bytes
    from planner.profile.torchtitan_block import saved_bytes
    model = SimpleNamespace(hidden_size=h, kv_channels=kv * (h // a), ffn_hidden_size=f, num_attention_heads=a)
    cfg = ParallelConfig(1, 1, 8, 1, 1, "1f1b", 1, "selective", 3, False)
    lin, core = op_sac_bytes(model, SimpleNamespace(seq_length=s), cfg)
    assert lin + core == saved_bytes(h, a, kv, f, s)


def test_fsdp_float8_all_gather_gathers_linear_weights_in_one_byte(make_spec):
    """torchao's fp8 all-gather (training.fsdp_float8_all_gather): a block's Linear weights move and stay gathered
    at 1 byte, the rest at bf16's 2; the reduce-scatter is unchanged; it needs precision fp8."""
    from dataclasses import replace

    from planner.costs import default_costs
    from planner.costs.fsdp import fsdp_collectives
    from planner.costs.memory import fp8_gemm_weights, fsdp_gather_bytes, fsdp_units
    from planner.spec import parse_spec
    spec = make_spec()
    f8 = replace(spec.training, precision="fp8")
    on = replace(f8, fsdp_float8_all_gather=True)
    for cfg in (_cfg(tp=2, dp=16, m=4), _cfg(tp=2, pp=2, dp=8, m=8)):
        assert fsdp_gather_bytes(spec.model, f8, cfg, 0) is None
        lin = fp8_gemm_weights(spec.model, cfg, 0)
        assert sum(fsdp_gather_bytes(spec.model, on, cfg, 0)) == pytest.approx(
            2 * sum(fsdp_units(spec.model, cfg, 0)) - lin)
        assert fsdp_buffer_bytes(spec.model, cfg, 0, on) <= fsdp_buffer_bytes(spec.model, cfg, 0, f8)  # pp 1: the
        # largest unit in flight counts, here the (bf16) embedding
    pp2 = _cfg(tp=2, pp=2, dp=8, m=8)           # the whole stage gathered: exactly the Linear weights' second byte
    assert fsdp_buffer_bytes(spec.model, pp2, 0, f8) - fsdp_buffer_bytes(spec.model, pp2, 0, on) == pytest.approx(
        fp8_gemm_weights(spec.model, pp2, 0))
    costs, P = default_costs(spec.cluster), 1e9
    ag2, rs2, _ = fsdp_collectives(spec, pp2, costs, P, 4, 2)
    ag1, rs1, _ = fsdp_collectives(spec, pp2, costs, P, 4, 2, gathered=P)
    assert ag1 == pytest.approx(ag2 / 2) and rs1 == rs2
    with pytest.raises(SpecError, match="fsdp_float8_all_gather"):
        parse_spec({**spec.raw, "training": {"global_batch_size": 64, "seq_length": 2048,
                                             "fsdp_float8_all_gather": True}}, "x.yaml")


def test_pipelining_keeps_outputs_and_input_grads_of_1f1b(make_spec):
    """torch of Dec 2024: every stage's outputs stay in output_chunks, every input gradient on its receive buffer."""
    from planner.costs.memory import pipelining_kept_boundaries
    cfg = _cfg(tp=2, pp=4, dp=4, m=8)
    # held forwards 4, 3, 2, 1: first stage m outputs; middle stages (m - held) outputs and input gradients; last stage
    # (m - 1) input gradients (its outputs are the logits)
    assert [pipelining_kept_boundaries(cfg, st) for st in range(4)] == [8, 2 * 5, 2 * 6, 7]
    assert pipelining_kept_boundaries(_cfg(tp=2, pp=4, dp=4, m=8, sched="gpipe"), 1) == 0


def test_torchtitan_output_edge_keeps_fp32_norm_and_gathered_output_input(make_spec):
    """ZeRO-3 (torchtitan): eager RMSNorm keeps x.float() and its bf16 output on the sequence shard; the
    ColwiseParallel output layer keeps its all-gathered input. Megatron plans keep 4sbh/sp."""
    from planner.costs.memory import output_edge_bytes
    spec = make_spec()
    s, h = spec.training.seq_length, spec.model.hidden_size
    tt = _cfg(tp=4, pp=1, dp=4, m=16)
    assert output_edge_bytes(spec.model, spec.training, tt) == pytest.approx(s * h * (6 / 4 + 2))
    assert output_edge_bytes(spec.model, spec.training, _cfg(tp=1, dp=16)) == pytest.approx(8 * s * h)
    assert output_edge_bytes(spec.model, spec.training, _cfg(tp=4, zero=1)) == pytest.approx(4 * s * h / 4)


def test_fsdp2_copies_on_the_compute_stream_are_charged(make_spec, monkeypatch):
    """FSDP2's work on the compute stream: the copy-out of each gathered unit (read + write of its gathered bytes), the
    reduce-scatter's fp32 copy-in (chunk_cat at the measured 0.41 of the HBM rate) and, without gradient sync, the
    fp32 accumulation. pp = 1: per micro-batch (gathered twice, [norm, output] once; reduced from bf16, 6 bytes);
    pp > 1: once per iteration one gather and the reduce from fp32 (8 bytes), and in every backward the mean of the
    fp32 accumulation (upcast 6 + accumulate 10 x (m - 1), over m). Never hidden; torchao's fp8 all-gather copies 1
    byte per Linear weight."""
    from dataclasses import replace

    import planner.costs.iteration as it
    from planner.costs import default_costs
    from planner.costs.fsdp import CHUNK_CAT_EFFICIENCY, fsdp_copy_s
    from planner.costs.memory import fsdp_gather_bytes, fsdp_units
    spec = make_spec()
    costs = default_costs(spec.cluster)
    hbm = costs.compute.hbm_GBps * 1e9
    cat = 1 / (hbm * CHUNK_CAT_EFFICIENCY)
    cfg = _cfg(tp=2, dp=16, m=4)
    units = fsdp_units(spec.model, cfg, 0)
    P, out_unit = sum(units), units[-1]
    f, b, once = fsdp_copy_s(spec, cfg, costs, 0)
    assert f == pytest.approx(2 * 2 * P / hbm) and once == 0.0
    assert b == pytest.approx(2 * 2 * (P - out_unit) / hbm + 6 * P * cat)
    pp2 = _cfg(tp=2, pp=2, dp=8, m=8)
    P2 = sum(fsdp_units(spec.model, pp2, 1))
    f2, b2, once2 = fsdp_copy_s(spec, pp2, costs, 1)
    assert f2 == 0.0 and b2 == pytest.approx((6 + 10 * 7) * P2 / hbm / 8)
    assert once2 == pytest.approx(2 * 2 * P2 / hbm + 8 * P2 * cat)
    assert 8 * b2 + once2 == pytest.approx(2 * 2 * P2 / hbm + (6 + 10 * 7) * P2 / hbm + 8 * P2 * cat)  # the total
    # fp8 all-gather: the gathered buffer, hence the copy-out, shrinks by a byte per Linear weight
    from types import SimpleNamespace  # the spec's A100 refuses fp8; the copies read model, training and cluster
    fp8 = SimpleNamespace(model=spec.model, cluster=spec.cluster,       # (the cluster's gpu.variability)
                          training=replace(spec.training, precision="fp8", fsdp_float8_all_gather=True))
    g8 = sum(fsdp_gather_bytes(fp8.model, fp8.training, cfg, 0))
    assert g8 < 2 * P and fsdp_copy_s(fp8, cfg, costs, 0)[0] == pytest.approx(2 * g8 / hbm)
    # added to the exposed slots whole, whatever the links hide: pp = 1 per micro-batch, pp > 1 once (its
    # accumulation is in stage_times: test_pp_fp32_accumulation_is_in_every_backward)
    with_copies = {c: it.fsdp_exposed_parts(spec, c, costs, it.stage_times(spec, c, costs), s, 8, 2)
                   for c, s in ((cfg, 0), (pp2, 1))}
    monkeypatch.setattr(it, "fsdp_copy_s", lambda *a: (0.0, 0.0, 0.0))
    for c, s, want in ((cfg, 0, (f, b, 0.0)), (pp2, 1, (0.0, 0.0, once2))):
        without = it.fsdp_exposed_parts(spec, c, costs, it.stage_times(spec, c, costs), s, 8, 2)
        assert [x - y for x, y in zip(with_copies[c], without)] == pytest.approx(list(want))


def test_pp_fp32_accumulation_is_in_every_backward(make_spec, monkeypatch):
    """ZeRO-3 with pp > 1: FSDP2's fp32 gradient accumulation runs at the end of each micro-batch's backward on the
    compute stream, so stage_times carries it in every stage's backward (and its W part), where the pipeline's
    closed form and the simulator both see it; pp = 1 and ZeRO 0-2 stage times are untouched."""
    import planner.costs.iteration as it
    from planner.costs import default_costs
    from planner.costs.fsdp import fsdp_copy_s
    spec = make_spec()
    costs = default_costs(spec.cluster)
    pp2 = _cfg(tp=2, pp=2, dp=8, m=8)
    with_acc = it.stage_times(spec, pp2, costs)
    monkeypatch.setattr(it, "fsdp_copy_s", lambda *a: (0.0, 0.0, 0.0))
    without = it.stage_times(spec, pp2, costs)
    monkeypatch.undo()
    for i, (a, b) in enumerate(zip(with_acc, without)):
        acc = fsdp_copy_s(spec, pp2, costs, i)[1]
        assert acc > 0 and a.backward - b.backward == pytest.approx(acc)
        assert a.weight_grad - b.weight_grad == pytest.approx(acc) and a.forward == b.forward
    for c in (_cfg(tp=2, dp=16, m=4), _cfg(tp=2, pp=2, dp=8, m=8, zero=1)):
        monkeypatch.setattr(it, "fsdp_copy_s", lambda *a: (1.0, 1.0, 1.0))
        spied = it.stage_times(spec, c, costs)
        monkeypatch.undo()
        assert [s.backward for s in spied] == [s.backward for s in it.stage_times(spec, c, costs)]


def test_deepspeed_export_says_what_its_checkpointing_block_cannot():
    """DeepSpeed's activation_checkpointing block only configures deepspeed.checkpointing: the export notes what the
    plan recomputes, and that selective (the attention core) has no DeepSpeed mode; nothing for rc=none."""
    from planner.export import deepspeed_recompute_note
    sel = _solution(ParallelConfig(1, 1, 64, 1, 4, "1f1b", 1, "selective", 3, False))
    assert "activation_checkpointing" in deepspeed_config(sel)
    assert "selective" in deepspeed_recompute_note(sel) and "no such mode" in deepspeed_recompute_note(sel)
    assert "full" in deepspeed_recompute_note(_solution(ParallelConfig(1, 1, 64, 1, 4, "1f1b", 1, "full", 3, False)))
    assert deepspeed_recompute_note(_solution(ParallelConfig(1, 1, 64, 1, 4, "1f1b", 1, "none", 3, False))) is None
