"""torchtitan's async TP (training.overlap.tp_comm on ZeRO-3 plans): only the collectives Inductor's micro-pipeline TP
pass fuses are credited, at the fused op's cost; Megatron / TE plans keep userbuffers' model."""
import dataclasses
from types import SimpleNamespace

import pytest
from plan_fixtures import estimate_and_simulate, with_training

import planner.costs.iteration as it
from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.compute import BYTES, ComputeModel, tp_gather_bytes
from planner.costs.iteration import (
    async_tp_exposed_s,
    async_tp_overhead_s,
    async_tp_saving,
    stage_times,
    tp_overlap_saving,
)
from planner.spec.plan import OverlapSpec


def _cfg(zero, tp=4, dp=4, mbs=4, m=4, rc="full"):
    return ParallelConfig(tp, 1, dp, mbs, m, "1f1b", 1, rc, zero, True)


def test_fused_op_hides_the_copies_behind_all_but_one_chunk():
    # tp - 1 copies behind tp - 1 of the tp GEMM chunks: hidden when the GEMM is long, the rest exposed otherwise
    assert async_tp_exposed_s(1.0, 8.0, 8) == 0.0
    assert async_tp_exposed_s(1.0, 8 / 7, 8) == pytest.approx(0.0, abs=1e-12)
    assert async_tp_exposed_s(1.0, 0.4, 4) == pytest.approx(1.0 - 0.3)
    assert async_tp_exposed_s(1.0, 0.0, 8) == 1.0


def test_the_pass_fuses_four_forward_and_two_backward_collectives():
    """With free chunks and GEMMs long enough, forward hides its two all-gathers and two reduce-scatters, backward only
    its two output-gradient all-gathers: the column layers' input-gradient reduce-scatters sum several matmuls."""
    class Free:        # no GEMM fixed part, no HBM term: overheads 0
        backward_ratio = 2.0
    parts = {"tp_comm": 2 * (0.3 + 0.5), "tp_gather": 0.3, "tp_scatter": 0.5,
             "gemm_column": (10.0, 10.0), "gemm_row": (10.0, 10.0)}
    sf, sb = async_tp_saving(parts, Free(), 1e15, 8, 1e6, 1.0, True, out_bytes=2)
    assert sf == pytest.approx(2 * 0.3 + 2 * 0.5) and sb == pytest.approx(2 * 0.3)
    # short GEMMs: each collective is credited only what 7/8 of its GEMM hides
    parts["gemm_row"] = (0.16, 0.16)
    sf2, sb2 = async_tp_saving(parts, Free(), 1e15, 8, 1e6, 1.0, True, out_bytes=2)
    assert sf2 == pytest.approx(2 * 0.3 + 2 * 0.16 * 7 / 8) and sb2 == pytest.approx(2 * 0.16 * 7 / 8)


def test_fused_ops_pay_chunks_the_reduce_kernel_and_the_local_copy():
    c = ComputeModel()
    f = c.gemm_fixed_s(1e15)
    act, tp, hbm = 1e8, 8, c.hbm_GBps * 1e9
    fwd, bwd = async_tp_overhead_s(c, 1e15, tp, act, 1.0, 2, out_bytes=2)
    reduce = act * 2 * (1 + 1 / tp) / hbm
    copy = 2 * act / tp * 1.0 / hbm
    assert fwd == pytest.approx((3 + 1 + 2 + 1) * (tp - 1) * f + 2 * reduce + 2 * copy)
    assert bwd == pytest.approx(2 * (tp - 1) * f + 2 * copy)
    assert async_tp_overhead_s(c, 1e15, 1, act, 1.0, 2, out_bytes=2) == (0.0, 0.0)


def test_the_reduce_kernel_moves_the_plans_activation_bytes(make_spec, monkeypatch):
    """fused_matmul_reduce_scatter sums the partials in the matmul's output dtype: fp32 plans move 4 bytes per element
    where bf16 and fp8 plans (bf16 GEMM outputs) move 2; only the two forward reduce kernels change."""
    c = ComputeModel()
    act, tp, hbm = 1e8, 8, c.hbm_GBps * 1e9
    f16, b16 = async_tp_overhead_s(c, 1e15, tp, act, 4.0, 2, out_bytes=2)
    f32, b32 = async_tp_overhead_s(c, 1e15, tp, act, 4.0, 2, out_bytes=4)
    assert f32 - f16 == pytest.approx(2 * act * 2 * (1 + 1 / tp) / hbm) and b32 == b16
    # tp_overlap_saving passes the plan's size: 4 for fp32, 2 for 16-bit (the fixture's A100 has no fp8)
    seen = []
    real = it.async_tp_overhead_s

    def spy(*a, **kw):
        seen.append(kw["out_bytes"])
        return real(*a, **kw)
    monkeypatch.setattr(it, "async_tp_overhead_s", spy)
    spec = _big(make_spec)
    costs = default_costs(spec.cluster)
    for p in ("bf16", "fp16", "fp32"):
        tp_overlap_saving(with_training(spec, precision=p), _cfg(3), costs)
    assert seen == [2, 2, 4]


def _big(make_spec):
    """Layers large enough (h 8192, 8K tokens per micro-batch: _cfg's mbs 4) that the hidden transfers outweigh the
    chunks' cost."""
    return with_training(make_spec(nodes=4, seed=3, gbs=64, layers=4, hidden=8192, heads=64), attention="unfused")


def test_small_layers_can_lose_by_async_tp(make_spec):
    # h 2048, 2K tokens: 21 more GEMM fixed parts and the reduce kernels cost more than the transfers they hide
    spec = with_training(make_spec(nodes=4, seed=3, gbs=64), attention="unfused")
    sf, sb = tp_overlap_saving(spec, _cfg(3, mbs=1, m=16), default_costs(spec.cluster))
    assert sf < 0 and sb < 0


def test_zero3_plans_take_async_tp_and_zero1_plans_keep_userbuffers(make_spec, monkeypatch):
    spec = _big(make_spec)
    costs = default_costs(spec.cluster)
    z1, z3 = tp_overlap_saving(spec, _cfg(1), costs), tp_overlap_saving(spec, _cfg(3), costs)
    assert z1 != z3 and 0 < z3[1] < z3[0]
    # ZeRO-1 is userbuffers' model: async TP's function is never asked
    monkeypatch.setattr(it, "async_tp_saving", lambda *a, **kw: (_ for _ in ()).throw(AssertionError("called")))
    assert tp_overlap_saving(spec, _cfg(1), costs) == z1
    with pytest.raises(AssertionError, match="called"):
        tp_overlap_saving(spec, _cfg(3), costs)
    # eager kernels: no Inductor pass, torchtitan refuses async TP without compile
    # (the spec's own check wants a Llama block for eager kernels: only what tp_overlap_saving reads is kept here)
    eager = SimpleNamespace(model=spec.model, cluster=spec.cluster,
                            training=dataclasses.replace(spec.training, kernels="eager"))
    assert tp_overlap_saving(eager, _cfg(3), costs) == (0.0, 0.0)
    # tp_comm off: nothing credited (ZeRO-3 has no Megatron asynchronous backward either way)
    off = with_training(spec, overlap=dataclasses.replace(OverlapSpec(), tp_comm=False, tp_backward=False))
    assert tp_overlap_saving(off, _cfg(3), costs) == (0.0, 0.0)
    # ... even with tp_backward on (the default): Megatron's asynchronous column-parallel backward is not torchtitan's
    back = with_training(spec, overlap=dataclasses.replace(OverlapSpec(), tp_comm=False, tp_backward=True))
    assert tp_overlap_saving(back, _cfg(3), costs) == (0.0, 0.0)
    assert tp_overlap_saving(back, _cfg(1), costs)[1] > 0             # Megatron's plans keep it
    nosp = dataclasses.replace(_cfg(3), sequence_parallel=False)  # tp_comm on, no SP: no async TP or backward
    assert tp_overlap_saving(spec, nosp, costs) == (0.0, 0.0)


def test_recompute_gets_the_forward_saving_and_estimate_matches_simulation(make_spec):
    spec = _big(make_spec)
    off = with_training(spec, overlap=dataclasses.replace(OverlapSpec(), tp_comm=False, tp_backward=False))
    on = with_training(spec, overlap=dataclasses.replace(OverlapSpec(), tp_backward=False))
    cfg = _cfg(3, tp=4, dp=8, mbs=4, m=2)
    costs = default_costs(spec.cluster)
    sf, sb = tp_overlap_saving(on, cfg, costs)
    assert sf > 0
    a, b = stage_times(off, cfg, costs)[0], stage_times(on, cfg, costs)[0]
    L = spec.model.num_layers
    assert a.forward - b.forward == pytest.approx(L * sf)
    assert a.recompute - b.recompute == pytest.approx(L * sf)     # the backward graph's recomputed forward, fused
    assert a.backward - b.backward == pytest.approx(L * (sb + sf))
    (e0, s0), (e1, s1) = estimate_and_simulate(off, cfg), estimate_and_simulate(on, cfg)
    assert e1.iteration_s < e0.iteration_s and s1.iteration_s < s0.iteration_s
    assert e1.iteration_s == pytest.approx(s1.iteration_s, rel=0.05)


def test_torchao_float8_gathers_in_one_byte_only_under_zero3():
    from planner.spec import load_cluster
    from planner.spec.model import ModelSpec
    from planner.spec.plan import TrainingSpec
    h100 = load_cluster("clusters/dgx-h100.yaml")
    llama = ModelSpec(name="l", family="llama", num_layers=16, hidden_size=8192, num_attention_heads=64,
                      num_kv_heads=8, ffn_hidden_size=28672, vocab_size=128256)
    bf16 = TrainingSpec(global_batch_size=64, seq_length=4096, precision="bf16")
    fp8 = dataclasses.replace(bf16, precision="fp8")
    assert tp_gather_bytes(fp8, _cfg(3)) == 1.0
    assert tp_gather_bytes(fp8, _cfg(1)) == BYTES["fp8"]           # TE plans: unchanged
    assert tp_gather_bytes(bf16, _cfg(3)) == BYTES["bf16"]
    cm = default_costs(h100).compute
    p3 = cm.layer_parts(llama, h100, fp8, _cfg(3))
    p1 = cm.layer_parts(llama, h100, fp8, _cfg(1))
    assert p3["tp_gather"] < p3["tp_scatter"] == p1["tp_scatter"] and p1["tp_gather"] == p1["tp_scatter"]
    assert p3["tp_comm"] == pytest.approx(2 * (p3["tp_gather"] + p3["tp_scatter"])) and p3["tp_comm"] < p1["tp_comm"]
    # a 16-bit plan's TP term is the two all-reduces it always was
    pb = cm.layer_parts(llama, h100, bf16, _cfg(3))
    tokens = bf16.seq_length * _cfg(3).micro_batch_size * llama.hidden_size
    assert pb["tp_comm"] == 2 * cm._tp_allreduce(tokens * BYTES["bf16"], 4, h100)


def test_torchao_dynamic_scaling_reads_each_cast_tensor_once_more():
    from planner.costs.compute import CURRENT_SCALING_AMAX_READ_BYTES, FP8_CAST_BYTES, fp8_cast_bytes
    from planner.spec import load_cluster
    from planner.spec.model import ModelSpec
    from planner.spec.plan import TrainingSpec
    h100 = load_cluster("clusters/dgx-h100.yaml")
    llama = ModelSpec(name="l", family="llama", num_layers=16, hidden_size=8192, num_attention_heads=64,
                      num_kv_heads=8, ffn_hidden_size=28672, vocab_size=128256)
    fp8 = TrainingSpec(global_batch_size=64, seq_length=4096, precision="fp8")
    assert fp8_cast_bytes(fp8, _cfg(1)) == FP8_CAST_BYTES and fp8_cast_bytes(fp8, _cfg(3)) == FP8_CAST_BYTES + 2
    cm = default_costs(h100).compute
    p3, p1 = cm.layer_parts(llama, h100, fp8, _cfg(3)), cm.layer_parts(llama, h100, fp8, _cfg(1))
    ratio = (FP8_CAST_BYTES + CURRENT_SCALING_AMAX_READ_BYTES) / FP8_CAST_BYTES
    assert p3["fp8_cast"] == pytest.approx(ratio * p1["fp8_cast"])
    assert p3["fp8_cast_bwd"] == pytest.approx(ratio * p1["fp8_cast_bwd"])
