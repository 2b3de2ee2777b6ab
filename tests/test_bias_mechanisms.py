"""The mechanisms branch `bias` (#8) added to the cost model, each checked as behaviour, not as a fitted figure:
selective recompute re-runs the unfused core's element-wise passes; Megatron's asynchronous column-parallel backward
(training.overlap.tp_backward) hides backward collectives behind the GEMMs they run with; training.grad_reduce_in_fp32
doubles the data-parallel and tied-embedding bytes."""
import dataclasses

import pytest
from plan_fixtures import estimate_and_simulate as _estimate_and_sim
from plan_fixtures import with_training

from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.iteration import (
    grad_bytes,
    stage_times,
    tp_backward_saving,
    tp_overlap_saving,
    userbuffers_overhead_s,
)
from planner.errors import SpecError
from planner.spec.plan import OverlapSpec

NO_OVERLAP = OverlapSpec.none()


def test_selective_recompute_reruns_the_score_passes(make_spec):
    spec = with_training(make_spec(), attention="unfused", overlap=NO_OVERLAP)
    cfg = ParallelConfig(8, 2, 2, 1, 16, "1f1b", 1, "selective", 0, False)
    cm = default_costs(spec.cluster).compute
    p = cm.layer_parts(spec.model, spec.cluster, spec.training, cfg)
    assert 0 < p["attn_scores"] < p["elem"]          # the s^2 passes are part of the forward's element-wise work
    st = cm.stage_times(spec.model, spec.cluster, spec.training, cfg)[0]
    layers = spec.model.num_layers // cfg.pp
    assert st.recompute == pytest.approx(layers * (p["attn"] + p["attn_scores"]))
    # fused attention has no score tensor: one kernel forward, as before
    fused = with_training(spec, attention="fused")
    pf = cm.layer_parts(fused.model, fused.cluster, fused.training, cfg)
    assert "attn_scores" not in pf
    assert cm.stage_times(fused.model, fused.cluster, fused.training, cfg)[0].recompute == pytest.approx(
        layers * pf["attn"])


def test_tp_backward_saving_formula():
    # no sequence parallelism: each input-gradient all-reduce hides behind its column GEMM's weight gradient
    parts = {"tp_comm": 2.0, "gemm_column": (0.4, 2.0)}          # all-reduce 1.0 each
    assert tp_backward_saving(parts, False) == pytest.approx(2.0 - (0.6 + 0.0))
    # sequence parallelism: the two output-gradient all-gathers stay exposed (one all-reduce's worth); the input
    # all-gather and the reduce-scatter (0.5 each) hide behind dgrad / wgrad of the column GEMMs
    assert tp_backward_saving(parts, True) == pytest.approx(2.0 - (1.0 + 2 * 0.1 + 0.0))
    # column collectives longer than their GEMMs: with sequence parallelism the backward's six half all-reduces
    # (two exposed all-gathers, the input re-gathers and the reduce-scatters) all show, one all-reduce more than the
    # two charged: a negative saving; without it, the two all-reduces at most (zero saving)
    assert tp_backward_saving({"tp_comm": 2.0, "gemm_column": (0.0, 0.0)}, True) == pytest.approx(-1.0)
    assert tp_backward_saving({"tp_comm": 2.0, "gemm_column": (0.0, 0.0)}, False) == 0.0
    # collectives waited (tp_backward off), sequence parallelism: the re-gathers still run under dgrad, and what
    # outlasts it is added; turning the overlap on never costs more than off
    from planner.costs.iteration import tp_regather_exposed
    short = {"tp_comm": 2.0, "gemm_column": (0.1, 0.0)}
    assert tp_regather_exposed(short) == pytest.approx(0.4 + 0.5)
    assert tp_regather_exposed(parts) == pytest.approx(0.1)
    for p in (parts, short, {"tp_comm": 2.0, "gemm_column": (0.0, 0.0)}):
        assert 2.0 - tp_backward_saving(p, True) <= 2.0 + tp_regather_exposed(p) + 1e-12
    # nothing without column GEMMs
    assert tp_backward_saving({"tp_comm": 2.0}, False) == 0.0


@pytest.mark.parametrize("sp", [False, True])
def test_tp_backward_hides_backward_collectives_only(make_spec, sp):
    spec = make_spec(nodes=4, seed=3, gbs=64)
    off = with_training(spec, overlap=NO_OVERLAP, attention="unfused")
    on = with_training(off, overlap=dataclasses.replace(NO_OVERLAP, tp_backward=True))
    cfg = ParallelConfig(8, 2, 2, 1, 16, "1f1b", 1, "full", 0, sp)
    costs = default_costs(spec.cluster)
    sf, sb = tp_overlap_saving(on, cfg, costs)
    assert sf == 0.0 and sb > 0.0
    # off: nothing hidden; with sequence parallelism the input re-gathers' excess over dgrad is added (this small
    # model's QKV GEMM is shorter than half an all-reduce at tp 8)
    sf0, sb0 = tp_overlap_saving(off, cfg, costs)
    assert sf0 == 0.0 and (sb0 < 0.0 if sp else sb0 == 0.0)
    a, b = stage_times(off, cfg, costs)[0], stage_times(on, cfg, costs)[0]
    assert b.forward == a.forward and b.recompute == a.recompute      # forward and recompute collectives wait
    assert b.backward == pytest.approx(a.backward - cfg.layers_per_stage(spec.model.num_layers) * (sb - sb0))
    # estimate and simulation take the same stage times: both get faster, their gap stays
    (e0, s0), (e1, s1) = _estimate_and_sim(off, cfg), _estimate_and_sim(on, cfg)
    assert e1.iteration_s < e0.iteration_s and s1.iteration_s < s0.iteration_s
    assert abs((e1.iteration_s - s1.iteration_s) / s1.iteration_s
               - (e0.iteration_s - s0.iteration_s) / s0.iteration_s) < 0.01


def test_userbuffers_take_precedence_and_tp1_has_nothing(make_spec):
    spec = with_training(make_spec(nodes=4, seed=3, gbs=64), attention="unfused")
    costs = default_costs(spec.cluster)
    sp_cfg = ParallelConfig(8, 2, 2, 1, 16, "1f1b", 1, "none", 0, True)
    ub = tp_overlap_saving(spec, sp_cfg, costs)
    no_tp_comm = with_training(spec, overlap=dataclasses.replace(OverlapSpec(), tp_comm=False))
    only_bwd = tp_overlap_saving(no_tp_comm, sp_cfg, costs)
    assert ub[0] != 0.0 and only_bwd[0] == 0.0 and ub != only_bwd
    assert tp_overlap_saving(spec, ParallelConfig(1, 2, 16, 1, 2, "1f1b", 1, "none", 0, False), costs) == (0.0, 0.0)


def test_grad_reduce_in_fp32_doubles_the_reduction(make_spec):
    spec = with_training(make_spec(nodes=4, seed=3, gbs=64), overlap=NO_OVERLAP)
    fp32 = with_training(spec, grad_reduce_in_fp32=True)
    costs = default_costs(spec.cluster)
    assert grad_bytes(spec, costs) == costs.comm.grad_bytes == 2 and grad_bytes(fp32, costs) == 4
    cfg = ParallelConfig(8, 1, 4, 1, 16, "1f1b", 1, "none", 0, False)
    (e2, s2), (e4, s4) = _estimate_and_sim(spec, cfg), _estimate_and_sim(fp32, cfg)
    assert e4.dp_comm_s > 1.8 * e2.dp_comm_s and e4.iteration_s > e2.iteration_s
    assert s4.iteration_s - s2.iteration_s == pytest.approx(e4.iteration_s - e2.iteration_s, rel=0.05)


def test_new_keys_are_validated():
    from planner.spec import parse_spec
    d = {"model": {"name": "m", "num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000},
         "cluster": {"name": "c", "gpu": {"type": "A100", "memory_GiB": 80, "peak_tflops": {"bf16": 312}},
                     "nodes": 1, "gpus_per_node": 8,
                     "network": {"intra_node": {"bandwidth_GBps": 300}, "inter_node": {"bandwidth_Gbps": 200}}},
         "training": {"global_batch_size": 8, "seq_length": 128}}
    assert parse_spec(d, "x.yaml").training.overlap.tp_backward is True
    assert parse_spec(d, "x.yaml").training.grad_reduce_in_fp32 is False
    for training, field in (({"grad_reduce_in_fp32": "yes"}, "training.grad_reduce_in_fp32"),
                            ({"overlap": {"tp_backward": 1}}, "training.overlap.tp_backward")):
        with pytest.raises(SpecError) as e:
            parse_spec({**d, "training": {**d["training"], **training}}, "x.yaml")
        assert e.value.field == field and "x.yaml" in str(e.value)
    # DeepSpeed's engine: tp_backward left out is off, like every other overlap there
    ds = parse_spec({**d, "training": {**d["training"], "pipeline_engine": "deepspeed",
                                       "overlap": {"grad_reduce": False, "param_gather": False, "p2p": False,
                                                   "tp_comm": False}}}, "x.yaml")
    assert ds.training.overlap == OverlapSpec.none()


def test_export_names_the_nemo_overrides():
    from planner.config import ParallelConfig
    from planner.export import megatron_args, nemo_overlap, nemo_recipe
    c = {"tp": 4, "pp": 2, "dp": 2, "micro_batch_size": 1, "num_microbatches": 8, "schedule": "interleaved", "vpp": 2,
         "sequence_parallel": True, "recompute": "full", "zero": 1}
    lines = nemo_recipe({"overlap": dict(vars(OverlapSpec(p2p=False)))}, c, "bf16", None, None)
    assert all(x.startswith("# NeMo 2.0 recipe") for x in lines)
    text = "\n".join(lines)
    for part in ('recompute_granularity = "full"', "use_distributed_optimizer = True", "overlap_grad_reduce=True",
                 "tp_comm_overlap=True", "overlap_p2p_comm=False", "sequence_parallel = True"):
        assert part in text
    assert nemo_overlap(None, c) is None            # a solution written before training.overlap: no callback
    ds = ParallelConfig(1, 2, 2, 1, 4, "1f1b", 1).as_dict()
    assert not any("NeMo" in a for a in megatron_args({"config": ds, "pipeline_engine": "deepspeed"}))
    assert any("NeMo" in a for a in megatron_args({"config": ds, "pipeline_engine": "megatron"}))


def test_userbuffers_pay_for_their_gemm_chunks(make_spec, monkeypatch):
    """TE's ring-exchange / pipeline overlaps split GEMMs into chunks: the saving is the hidden transfer less one GEMM
    fixed part per extra chunk (qkv, fc1 forward and proj, fc2 dgrad in tp chunks; proj, fc2 forward in 4)."""
    import planner.costs.iteration as it
    spec = with_training(make_spec(nodes=4, seed=3, gbs=64), attention="unfused")
    costs = default_costs(spec.cluster)
    cfg = ParallelConfig(4, 2, 4, 1, 16, "1f1b", 1, "none", 0, True)
    with_chunks = tp_overlap_saving(spec, cfg, costs)
    monkeypatch.setattr(it, "userbuffers_overhead_s", lambda *a: (0.0, 0.0))
    free = tp_overlap_saving(spec, cfg, costs)
    fixed = costs.compute.gemm_fixed_s(spec.cluster.gpu.peak_flops("bf16"))
    assert fixed > 0
    assert free[0] - with_chunks[0] == pytest.approx((2 * 3 + 2 * 3) * fixed)
    assert free[1] - with_chunks[1] == pytest.approx(2 * 3 * fixed)
    assert userbuffers_overhead_s(costs.compute, 1e15, 1) == (0.0, 0.0)
    # a GEMM on the curve is its throughput part plus exactly that fixed part
    cm = costs.compute
    assert cm._gemm_time(1e12, 1e15) == pytest.approx(1e12 / (1e15 * cm.max_efficiency) + cm.gemm_fixed_s(1e15))


def test_param_all_gather_moves_the_16bit_parameters(make_spec):
    """The distributed optimizer reduce-scatters the gradient buffer (fp32 with grad_reduce_in_fp32) but all-gathers the
    parameter buffer in the parameters' dtype (Megatron-LM@d98e8a64 param_and_grad_buffer.py start_param_sync:
    all_gather_into_tensor of bucket.param_data, param_dtype): with bf16 weights and fp32 gradients the all-gather is
    half the reduce-scatter, not equal to it. Audit of Nov 27 (docs/notes/memory.md)."""
    from planner.costs.iteration import dp_exposed_s, param_gather_ratio
    spec = with_training(make_spec(nodes=4, seed=3, gbs=64))
    fp32 = with_training(spec, grad_reduce_in_fp32=True)
    z1 = ParallelConfig(8, 1, 4, 1, 16, "1f1b", 1, "none", 1, False)
    assert param_gather_ratio(spec) == 1.0 and param_gather_ratio(fp32) == 0.5
    assert param_gather_ratio(with_training(spec, precision="fp32", grad_reduce_in_fp32=True)) == 1.0
    T = 1.0          # a gradient all-reduce of 1 s, nothing to hide behind: reduce-scatter 0.5 s + all-gather
    assert dp_exposed_s(spec, z1, T, 0.0, 0.0) == 1.0
    assert dp_exposed_s(fp32, z1, T, 0.0, 0.0) == 0.75
    assert dp_exposed_s(with_training(fp32, overlap=NO_OVERLAP), z1, T, 0.0, 0.0) == 0.75
    z0 = dataclasses.replace(z1, zero=0)
    assert dp_exposed_s(fp32, z0, T, 0.0, 0.0) == 1.0        # ZeRO 0: one all-reduce of the gradients
    # estimate and simulation, with and without overlap: ZeRO 1 syncs 3/4 of ZeRO 0's bytes in fp32, all of them in bf16
    for ov in (NO_OVERLAP, OverlapSpec(grad_reduce=False, param_gather=False)):
        s = with_training(fp32, overlap=ov)
        (e0, s0), (e1, s1) = _estimate_and_sim(s, z0), _estimate_and_sim(s, z1)
        assert e1.dp_comm_s == pytest.approx(0.75 * e0.dp_comm_s, rel=1e-9)
        assert s1.dp_comm_s == pytest.approx(0.75 * s0.dp_comm_s, rel=1e-9)
        assert s1.iteration_s == pytest.approx(e1.iteration_s, rel=1e-9)
    s = with_training(spec, overlap=NO_OVERLAP)
    (e0, _), (e1, _) = _estimate_and_sim(s, z0), _estimate_and_sim(s, z1)
    assert e1.dp_comm_s == pytest.approx(e0.dp_comm_s, rel=1e-12)
    # overlapped (the defaults): the estimate and the replay take the same all-gather
    for ov in (OverlapSpec(), OverlapSpec(param_gather=False)):
        e, sim = _estimate_and_sim(with_training(fp32, overlap=ov), z1)
        assert sim.iteration_s == pytest.approx(e.iteration_s, rel=1e-9)


def test_simulated_transfer_time_takes_the_param_gather_ratio_with_overlap_too(make_spec):
    """SimResult.dp_comm_s (simulate's "ms of transfers", JSON dp_transfer_s) is the sync's whole transfer time: with
    the distributed optimizer the reduce-scatter half plus the all-gather at param_gather_ratio, whether the buckets
    overlap the backward or not (second read of the eleventh session: with --overlap-grad-reduce it reported the
    fp32 all-reduce, 4/3 of the bytes moved)."""
    fp32 = with_training(make_spec(nodes=4, seed=3, gbs=64), grad_reduce_in_fp32=True)
    z1 = ParallelConfig(8, 1, 4, 1, 16, "1f1b", 1, "none", 1, False)
    off = _estimate_and_sim(with_training(fp32, overlap=OverlapSpec(grad_reduce=False, param_gather=False)), z1)[1]
    on = _estimate_and_sim(with_training(fp32, overlap=OverlapSpec()), z1)[1]
    assert off.dp_comm_s > 0
    assert on.dp_comm_s == pytest.approx(off.dp_comm_s, rel=1e-9)


def test_fp8_param_gather_all_gathers_the_gemm_weights_in_one_byte():
    """With --fp8-param-gather the TE GEMM weights live quantized, `param_dtype = torch.uint8` (Megatron-LM@d98e8a64
    param_and_grad_buffer.py _param_uses_quantized_storage), so the distributed optimizer's all-gather moves 1 byte for
    them and 2 for the embedding, output layer and norms (second read, Nov 27). Llama 3 70B: 2 x 128256 x 8192 of
    70.55B parameters are not GEMM weights, so the all-gather is ~51.5% of the bf16 reduce-scatter; the estimate
    and the replay take the same figure."""
    import planner
    from planner.costs.iteration import param_gather_ratio
    from planner.costs.memory import fp8_gemm_weights
    base = planner.load_spec("specs/llama3-70b-h100-256.yaml")
    fp8 = dataclasses.replace(base, training=dataclasses.replace(base.training, precision="fp8",
                                                                 grad_reduce_in_fp32=False))
    gathered = dataclasses.replace(fp8, training=dataclasses.replace(fp8.training, fp8_param_gather=True))
    cfg = ParallelConfig(8, 4, 8, 1, 32, "1f1b", 1, "none", 1, True)
    share = sum(fp8_gemm_weights(base.model, cfg, s) for s in range(4)) * 8 / base.model.num_params()
    assert 0.96 < share < 0.98
    assert param_gather_ratio(fp8, cfg) == 1.0 and param_gather_ratio(gathered) == 1.0     # no cfg: no share
    assert param_gather_ratio(gathered, cfg) == pytest.approx((2.0 - share) / 2.0, rel=1e-12)
    e_off, _ = _estimate_and_sim(fp8, cfg)
    e_on, s_on = _estimate_and_sim(gathered, cfg)
    assert e_on.iteration_s <= e_off.iteration_s
    assert s_on.iteration_s == pytest.approx(e_on.iteration_s, rel=2e-2)
