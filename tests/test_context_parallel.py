"""Context parallelism (#9): the config field, the spec knobs, the cost model, the mapping and the export."""
from dataclasses import replace

import numpy as np
import pytest

from planner.config import ParallelConfig
from planner.costs import context_parallel as cpar
from planner.costs import default_costs
from planner.costs.iteration import build_problem, stage_memory, stage_times
from planner.errors import SpecError
from planner.export import megatron_args, rank_layout
from planner.mapping import layouts
from planner.mapping.anneal import anneal
from planner.mapping.cpsat import solve_exact
from planner.mapping.problem import worker_table
from planner.search.solve import estimate_plan
from planner.search.space import enumerate_configs
from planner.spec import parse_spec


def long_spec(seq=32768, cp=(1, 2, 4), cp_comm="ring", nodes=2, intra=450, heads=32, kv=8, **training):
    d = {"model": {"name": "m", "family": "llama", "num_layers": 8, "hidden_size": 4096, "num_attention_heads": heads,
                   "num_kv_heads": kv, "ffn_hidden_size": 14336, "vocab_size": 128256, "tied_embeddings": False},
         "cluster": {"name": "h", "gpu": {"type": "H100-SXM5-80GB", "memory_GiB": 80, "peak_tflops": {"bf16": 989}},
                     "nodes": nodes, "gpus_per_node": 8,
                     "network": {"intra_node": {"bandwidth_GBps": intra}, "inter_node": {"bandwidth_Gbps": 400}}},
         "training": {"global_batch_size": 16, "seq_length": seq, "cp_comm": cp_comm, **training},
         "search": {"schedules": ["1f1b"], "recompute": ["none", "full"], "zero": [0, 1], "micro_batch_sizes": [1],
                    "context_parallel": list(cp)}}
    return parse_spec(d, "long.yaml")


def test_config_field_order_serialisation_and_label():
    c = ParallelConfig(2, 1, 4, 1, 4, "1f1b", 1, "none", 0, True, None, None, False, False, 2)
    assert c.cp == 2 and c.num_gpus == 2 * 2 * 4
    assert c.as_dict()["cp"] == 2 and ParallelConfig.from_dict(c.as_dict()) == c
    assert " cp2 " in c.label()
    one = replace(c, cp=1)
    assert "cp" not in one.as_dict() and "cp" not in one.label()
    with pytest.raises(SpecError, match="config.cp"):
        ParallelConfig.from_dict({**c.as_dict(), "cp": 0})
    with pytest.raises(SpecError, match="config"):
        ParallelConfig.from_dict({**c.as_dict(), "cp": 1.5})


@pytest.mark.parametrize("patch, field", [
    ({"search": {"context_parallel": [0]}}, "search.context_parallel"),
    ({"search": {"context_parallel": ["two"]}}, "search.context_parallel"),
    ({"search": {"context_parallel": [3]}}, "search.context_parallel"),          # does not divide 8 GPUs
    ({"training": {"seq_length": 4100}, "search": {"context_parallel": [4]}},
     "search.context_parallel"),                                                  # not a multiple of 2 * cp
    ({"training": {"attention": "unfused"}}, "search.context_parallel"),
    ({"training": {"cp_comm": "ulysses"}}, "training.cp_comm"),
])
def test_bad_knobs_name_the_field(patch, field):
    spec = long_spec()
    d = dict(spec.raw)
    d["training"] = {**d["training"], **patch.get("training", {})}
    d["search"] = {**d["search"], **patch.get("search", {})}
    with pytest.raises(SpecError) as e:
        parse_spec(d, "long.yaml")
    assert field in str(e.value)


def test_default_search_has_no_cp_and_cp_groups_fill_part_of_a_node_or_whole_nodes():
    spec = long_spec(cp=(1,))
    assert {c.cp for c in enumerate_configs(spec)} == {1}
    cfgs = list(enumerate_configs(long_spec(cp=(1, 2, 4, 8, 16))))
    assert {c.cp for c in cfgs} == {1, 2, 4, 8, 16}
    assert all(8 % (c.tp * c.cp) == 0 or (c.tp * c.cp) % 8 == 0 for c in cfgs)
    assert any(c.tp * c.cp == 16 for c in cfgs)
    assert all(c.zero == 0 for c in cfgs if c.dp * c.cp == 1)


def test_all_to_all_needs_heads_divisible_by_tp_cp():
    spec = long_spec(cp=(1, 2, 4, 8), cp_comm="all_to_all", heads=32, kv=4)
    cfgs = [c for c in enumerate_configs(spec) if c.cp > 1]
    assert cfgs and all((4 // c.tp) % c.cp == 0 for c in cfgs)
    assert not any(c.cp == 8 for c in cfgs)                                   # 4 kv heads
    assert any(c.cp == 8 for c in enumerate_configs(long_spec(cp=(8,), heads=32, kv=4)))   # the ring has no such rule


def test_shard_view_memory_and_gradients_over_dp_cp():
    spec, costs = long_spec(), None
    costs = default_costs(spec.cluster)
    one = ParallelConfig(2, 1, 8, 1, 2, "1f1b", 1, "none", 1, True)
    two = ParallelConfig(2, 1, 4, 1, 4, "1f1b", 1, "none", 1, True, cp=2)
    m1, m2 = stage_memory(spec, one, costs)[0], stage_memory(spec, two, costs)[0]
    # a cp rank holds half a sequence: about half the activations; same weights, optimizer sharded over dp*cp = 8
    assert m2.activations == pytest.approx(m1.activations / 2, rel=0.02)
    assert m2.weights == m1.weights and m2.optimizer == pytest.approx(m1.optimizer)
    assert m2.transient > 0
    assert cpar.shard_view(spec.training, one) == (spec.training, one)        # cp = 1: the same objects


def test_ring_exchange_hidden_on_nvlink_exposed_on_a_slow_link():
    cfg = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "none", 0, False, cp=4)
    fast = long_spec()
    t = cpar.layer_times(fast, cfg, default_costs(fast.cluster), "ring")
    assert t.exposed_forward == 0 and t.exposed_backward == 0 and t.forward > 0
    slow = long_spec(intra=2)
    t2 = cpar.layer_times(slow, cfg, default_costs(slow.cluster), "ring")
    assert t2.exposed_forward > 0 and t2.exposed_backward > t2.exposed_forward
    a2a = cpar.layer_times(fast, cfg, default_costs(fast.cluster), "all_to_all")
    assert a2a.exposed_forward > 0                                           # never overlapped
    auto = long_spec(cp_comm="auto")
    costs = default_costs(auto.cluster)
    best = cpar.cp_mode(auto, cfg, costs)
    other = "all_to_all" if best == "ring" else "ring"
    assert (cpar._total(cpar.layer_times(auto, cfg, costs, best))
            <= cpar._total(cpar.layer_times(auto, cfg, costs, other)))


def test_attention_work_is_split_not_shrunk():
    """cp ranks share the causal attention of the whole sequence: cp x the attention of one shard, while the GEMMs
    shrink with the tokens."""
    spec = long_spec(seq=65536)
    costs = default_costs(spec.cluster)
    one = ParallelConfig(1, 1, 8, 1, 2, "1f1b", 1, "none", 0, False)
    four = ParallelConfig(1, 1, 2, 1, 8, "1f1b", 1, "none", 0, False, cp=4)
    f1, f4 = stage_times(spec, one, costs)[0].forward, stage_times(spec, four, costs)[0].forward
    # attention dominates at 64K: a cp rank's forward is close to a quarter (never less)
    assert f1 / 4 <= f4 <= f1 / 4 * 1.15


def test_bounds_and_exact_match_brute_force_with_cp(make_spec, optimum):
    spec = make_spec(nodes=5, seed=7, gbs=64, layers=24, context_parallel=[1, 2])
    cfg = ParallelConfig(2, 2, 4, 1, 16, "1f1b", 1, "selective", 0, False, cp=2)
    for lay in layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, 8):
        prob = build_problem(spec, cfg, lay)
        best, _ = optimum(prob)
        ex = solve_exact(prob, time_limit_s=20)
        assert ex.objective == pytest.approx(best, rel=1e-9)
        assert prob.lower_bound() <= best + 1e-12
        assert anneal(prob, seed=1).objective >= ex.objective - 1e-12


def test_estimate_matches_simulation_and_shows_the_exchange():
    import planner
    spec = long_spec(intra=2)
    cfg = ParallelConfig(2, 2, 2, 1, 8, "1f1b", 1, "none", 1, True, cp=2)
    est = estimate_plan(spec, cfg)[0]
    sim = planner.simulate(spec, cfg)
    assert abs(est.iteration_s / sim.iteration_s - 1) < 0.05
    assert sim.cp_exposed_s and sim.cp_exposed_s[0][0] > 0
    from planner.simulator.trace import trace_events
    ops = [e for e in trace_events(sim, memory_counters=False) if e.get("cat") == "forward"]
    assert ops and all(e["args"]["cp_exposed_us"] > 0 for e in ops)      # the timeline shows the exposed exchange


def test_rank_order_and_megatron_flags():
    lay = layouts(2 * 2, 2, 2, 8)[0]
    table = worker_table(lay, np.arange(lay.blocks).reshape(lay.rows, lay.cols), 2, np.arange(lay.blocks), 2)
    cfg = ParallelConfig(2, 2, 2, 1, 8, "1f1b", 1, "none", 1, False, cp=2)
    sol = {"config": cfg.as_dict(), "mapping": table, "cp_comm": "all_to_all"}
    ranks = rank_layout(sol)
    assert [r["rank"] for r in ranks] == list(range(16))
    by_rank = {r["rank"]: r for r in ranks}
    for w in table:                 # Megatron-Core's order tp-cp-dp-pp
        r = w["tp_rank"] + 2 * (w["cp_rank"] + 2 * (w["dp_rank"] + 2 * w["stage"]))
        assert (by_rank[r]["node"], by_rank[r]["gpu"]) == (w["node"], w["gpu"])
    args = megatron_args(sol)
    assert "--context-parallel-size 2" in args and "--cp-comm-type a2a" in args
    assert not any("context-parallel" in a for a in megatron_args({**sol, "config": replace(cfg, cp=1).as_dict()}))
    with pytest.raises(SpecError, match="cp_comm"):
        megatron_args({**sol, "cp_comm": "p3p"})


def test_solve_chooses_cp_where_no_cp1_plan_fits():
    """tp held at 1 and no recompute: 64K-token sequences fit only when cp splits them."""
    from planner.errors import InfeasibleError
    from planner.search.solve import solve
    spec = long_spec(seq=65536, cp=(1, 2, 4, 8), nodes=1)
    d = dict(spec.raw)
    d["search"] = {**d["search"], "tensor_parallel": [1], "recompute": ["none"], "zero": [1]}
    d["training"] = {**d["training"], "global_batch_size": 8}
    sol = solve(parse_spec(d, "long.yaml"), time_limit_s=10, simulate=False)
    assert sol.config.cp > 1 and sol.estimate.fits
    # the solution says why: no cp = 1 plan fits, and by how much the closest misses
    assert f"cp = {sol.config.cp} chosen" in sol.solver.note and "no cp = 1 plan fits in memory" in sol.solver.note
    assert "GiB over" in sol.solver.note
    d["search"] = {**d["search"], "context_parallel": [1]}
    with pytest.raises(InfeasibleError):
        solve(parse_spec(d, "long.yaml"), time_limit_s=10, simulate=False)


def test_cp_group_across_nodes_blocks_of_whole_nodes(make_spec, optimum):
    """tp x cp wider than a node: each (stage, replica) takes an aligned run of nodes (rank order); the mapping
    places those runs, and exact = brute force, the bound holds, the worker table is Megatron's order."""
    spec = make_spec(nodes=9, seed=3, gbs=64, layers=24, context_parallel=[4])
    cfg = ParallelConfig(4, 2, 2, 1, 32, "1f1b", 1, "selective", 0, False, cp=4)
    (lay,) = layouts(16, 2, 2, 8)
    assert lay.span == 2 and lay.blocks == 4
    prob = build_problem(spec, cfg, lay)
    assert list(prob.nodes) == [0, 2, 4, 6]                 # node 8 cannot start a run of two
    best, _ = optimum(prob)
    assert solve_exact(prob, time_limit_s=20).objective == pytest.approx(best, rel=1e-9)
    assert prob.lower_bound() <= best + 1e-12
    table = worker_table(lay, prob.rank_order(), 4, prob.nodes, 4)
    assert sorted({(w["node"], w["gpu"]) for w in table}) == [(n, g) for n in range(8) for g in range(8)]
    ranks = rank_layout({"config": cfg.as_dict(), "mapping": table})
    assert [(r["node"], r["gpu"]) for r in ranks] == [(n, g) for n in range(8) for g in range(8)]
    whole = make_spec(nodes=8, seed=3, gbs=64, layers=24, context_parallel=[4])
    est, _, assign, p8 = estimate_plan(whole, cfg)
    import planner
    sim = planner.simulate(whole, cfg, layout=lay, assign=assign, nodes=p8.nodes)
    assert abs(est.iteration_s / sim.iteration_s - 1) < 0.05


def test_zero3_with_cp_is_fsdp_over_dp_x_cp():
    """torchtitan's FSDP + CP: the parameters shard over dp x cp (its dp_shard_cp mesh). The cp terms (compute,
    attention, exchange, activations) are ZeRO-1 + cp's; the sharded state and the FSDP collectives are those of a
    cp = 1 ZeRO-3 rank with dp * cp replicas; the search enumerates it on the ring, not TE's all-to-all or HSDP."""
    from planner.costs.fsdp import fsdp_collectives
    spec = long_spec(cp=(1, 2))
    spec = replace(spec, search=replace(spec.search, zero=(1, 3), dp_shard=(0, 2)))
    costs = default_costs(spec.cluster)
    z3 = ParallelConfig(1, 1, 8, 1, 2, "1f1b", 1, "full", 3, False, cp=2)
    z1 = replace(z3, zero=1)
    flat = ParallelConfig(1, 1, 16, 1, 1, "1f1b", 1, "full", 3, False)    # the shard view, at s / cp
    half = replace(spec, training=replace(spec.training, seq_length=spec.training.seq_length // 2))
    m3, m1 = stage_memory(spec, z3, costs)[0], stage_memory(spec, z1, costs)[0]
    mf = stage_memory(half, flat, costs)[0]
    assert (m3.weights, m3.gradients, m3.optimizer, m3.fsdp) == (mf.weights, mf.gradients, mf.optimizer, mf.fsdp)
    assert m3.fsdp > 0 and m1.fsdp == 0
    # the same, but for torchtitan's output edge (eager fp32 norm, gathered output-layer input: output_edge_bytes)
    from planner.costs.memory import output_edge_bytes
    edge = output_edge_bytes(half.model, half.training, flat) - output_edge_bytes(half.model, half.training,
                                                                                 replace(flat, zero=1))
    assert edge > 0 and m3.activations == pytest.approx(m1.activations + edge)
    # the ring's buffers hold K/V at the query heads on ZeRO-3 (torchtitan's repeat_kv), at the kv heads on ZeRO-1
    assert m3.transient - m1.transient == pytest.approx(
        cpar.buffer_bytes(spec, z3, "ring") - cpar.buffer_bytes(spec, z1, "ring"))
    assert (m3.activations, m3.transient) != (mf.activations, mf.transient)
    # the same GEMMs; ZeRO-3 plans (torchtitan's) are charged PyTorch's flash in steady state, another row than
    # FlashAttention-2's burst one made steady, and, compiled, the rotary multiply Inductor leaves eager: pinning one
    # kernel for both (cuDNN's row is the same whoever calls it) leaves the rotary difference alone
    from planner.costs.compute import rotary_bytes
    pinned = replace(spec, training=replace(spec.training, attention_backend="cudnn"))
    p3, p1 = (costs.compute.layer_parts(spec.model, spec.cluster, pinned.training, c) for c in (z3, z1))
    assert p3["gemm"] == p1["gemm"] and p3["attn"] == p1["attn"]
    assert p3["elem"] > p1["elem"] and rotary_bytes(spec.model, spec.training, z3)[0] > 0
    assert stage_times(spec, z3, costs)[0].backward > stage_times(pinned, z3, costs)[0].backward
    P = 1e9
    assert fsdp_collectives(spec, z3, costs, P, 4, 2) == fsdp_collectives(half, flat, costs, P, 8, 2)
    assert estimate_plan(spec, z3)[0].iteration_s > estimate_plan(spec, z1)[0].iteration_s
    got = [c for c in enumerate_configs(spec) if c.zero == 3 and c.cp == 2]
    assert got and all(c.dp_shard == 0 for c in got)
    a2a = replace(spec, training=replace(spec.training, cp_comm="all_to_all"))
    assert not [c for c in enumerate_configs(a2a) if c.zero == 3 and c.cp > 1]
    assert [c for c in enumerate_configs(a2a) if c.zero == 1 and c.cp > 1]
    assert "all_to_all" in cpar.cp_refusal(a2a, z3) and "HSDP" in cpar.cp_refusal(spec, replace(z3, dp_shard=2))


def test_ring_on_zero3_exchanges_kv_at_the_query_heads():
    """torchtitan repeats K/V to the query heads before SDPA, so before CP: a ZeRO-3 plan's ring sends heads / kv_heads
    times a Megatron plan's K/V (TE exchanges GQA K/V unrepeated). The exchange time and the buffers both follow,
    so the estimate, the mapping objective (stage_times) and the simulator do."""
    spec = long_spec(heads=32, kv=8, intra=2)           # Llama-3-8B's GQA (4 query heads per kv head), a slow link
    spec = replace(spec, search=replace(spec.search, zero=(1, 3)))
    costs = default_costs(spec.cluster)
    z3 = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "full", 3, False, cp=4)
    z1 = replace(z3, zero=1)
    assert cpar.cp_mode(spec, z3, costs) == cpar.cp_mode(spec, z1, costs) == "ring"
    m, tr = spec.model, spec.training
    k3, k1 = cpar.kv_shard_bytes(m, tr, z3), cpar.kv_shard_bytes(m, tr, z1)
    assert k1 == 2 * (tr.seq_length // 4) * m.kv_channels * 2                   # ZeRO-1: the kv heads, bf16
    assert k3 == 32 // 8 * k1 == cpar.allgather_kv_bytes(m, tr, z3)          # ZeRO-3: the query heads
    t3, t1 = cpar.layer_times(spec, z3, costs), cpar.layer_times(spec, z1, costs)
    p3 = costs.compute.layer_parts(m, spec.cluster, *cpar.shard_view(tr, z3))
    step = cpar.link_s(spec, z3, k3, costs)
    assert t3.exposed_forward > 0 and t3.exposed_forward == pytest.approx(3 * max(0.0, step - p3["attn"]))
    assert t3.exposed_backward == pytest.approx(3 * max(0.0, 2 * step - p3["attn_backward"]))
    assert t3.exposed_forward > t1.exposed_forward
    assert stage_times(spec, z3, costs)[0].cp_forward == pytest.approx(m.num_layers * t3.exposed_forward)
    # the ring's receive buffers: max(K/V + fp32 step outputs, 3 K/V)
    outs = 4.0 * (tr.seq_length // 4) * m.hidden_size * (1 + 3 / 2)
    assert cpar.buffer_bytes(spec, z3, "ring") == max(k3 + outs, 3 * k3)
    assert cpar.buffer_bytes(spec, z1, "ring") == max(k1 + outs, 3 * k1)


def test_cp_mode_refuses_a_plan_with_no_legal_exchange():
    """simulate() does not run cp_refusal first: a ZeRO-1 plan under cp_comm allgather (torchtitan's, ZeRO-3 only)
    is refused with cp_refusal's reason, not charged as the ring."""
    import planner
    spec = _ag_spec()
    z1 = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "full", 1, False, cp=4)
    with pytest.raises(ValueError, match="allgather"):
        cpar.cp_mode(spec, z1, default_costs(spec.cluster))
    with pytest.raises(ValueError, match="allgather"):
        planner.simulate(spec, z1)
    # every refusal rule, not only "no legal mode": unfused attention with cp > 1 is refused by name (it reached
    # the layer model and failed there with a KeyError)
    d = dict(_ag_spec().raw)
    d["training"] = {**d["training"], "attention": "unfused", "cp_comm": "ring"}
    d["search"] = {**d["search"], "context_parallel": [1]}     # the spec refuses cp > 1 there; simulate does not
    unfused = parse_spec(d, "x.yaml")
    with pytest.raises(ValueError, match="unfused"):
        planner.simulate(unfused, z1)


def test_cli_and_export_of_zero3_with_cp(capsys):
    import tomllib

    from planner.cli.main import main
    from planner.export import torchtitan_toml
    base = ["estimate", "specs/llama3-8b-h100-fsdp-128.yaml", "--tp", "1", "--pp", "1", "--mbs", "1", "--zero", "3",
            "--cp", "2"]
    assert main(base + ["--dp", "64"]) == 0
    capsys.readouterr()
    assert main(base + ["--dp", "64", "--dp-shard", "2"]) == 2
    assert "--dp-shard" in capsys.readouterr().err
    cfg = ParallelConfig(2, 1, 4, 1, 4, "1f1b", 1, "full", 3, True, cp=2)
    p = tomllib.loads(torchtitan_toml({"config": cfg.as_dict(), "seq_length": 32768, "num_layers": 8}))["parallelism"]
    assert (p["context_parallel_degree"], p["data_parallel_shard_degree"], p["tensor_parallel_degree"]) == (2, 4, 2)


def _ag_spec(**kw):
    d = dict(long_spec(cp=(1, 2, 4), **kw).raw)
    d["training"] = {**d["training"], "cp_comm": "allgather"}
    d["search"] = {**d["search"], "zero": [1, 3]}
    return parse_spec(d, "long.yaml")


def test_allgather_is_torchtitans_mode_only():
    """training.cp_comm allgather (PyTorch's CP): ZeRO-3 plans only; auto gives ZeRO-3 allgather and Megatron's plans
    ring / all_to_all; a spec without 3 in search.zero is refused naming the field."""
    with pytest.raises(SpecError) as e:
        long_spec(cp_comm="allgather")                 # search.zero [0, 1]
    assert e.value.field == "training.cp_comm"
    spec = _ag_spec()
    z3 = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "full", 3, False, cp=4)
    z1 = replace(z3, zero=1)
    assert cpar.legal_modes(spec, z3) == ("allgather",) and cpar.legal_modes(spec, z1) == ()
    assert "training.cp_comm" in cpar.cp_refusal(spec, z1) and cpar.cp_refusal(spec, z3) is None
    auto = replace(spec, training=replace(spec.training, cp_comm="auto"))
    assert cpar.legal_modes(auto, z3) == ("allgather",) and cpar.legal_modes(auto, z1) == ("ring", "all_to_all")
    ring = replace(spec, training=replace(spec.training, cp_comm="ring"))
    assert cpar.legal_modes(ring, z3) == ("ring",)     # kept: TE's ring model for torchtitan's alltoall rotation
    got = list(enumerate_configs(spec))
    assert all(c.zero == 3 for c in got if c.cp > 1) and any(c.cp > 1 for c in got)
    assert any(c.zero == 1 and c.cp == 1 for c in got)


def test_unnamed_cp_comm_is_each_frameworks_own_choice():
    """A spec that does not name training.cp_comm gets auto: torchtitan's default rotation (allgather) for a ZeRO-3
    plan, not TE's ring standing for its `alltoall` one; for a Megatron plan the cheaper of its two."""
    d = dict(long_spec(cp=(1, 2, 4)).raw)
    d["training"] = {k: v for k, v in d["training"].items() if k != "cp_comm"}
    d["search"] = {**d["search"], "zero": [1, 3]}
    spec = parse_spec(d, "long.yaml")
    assert spec.training.cp_comm == "auto"
    costs = default_costs(spec.cluster)
    z3 = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "full", 3, False, cp=4)
    assert cpar.cp_mode(spec, z3, costs) == "allgather"
    z1 = replace(z3, zero=1)
    assert cpar.cp_mode(spec, z1, costs) in ("ring", "all_to_all")


@pytest.mark.parametrize("kv, winner, ring_over_a2a", [
    # Bytes per GPU per layer (forward + backward), in units of (s/cp)·b·2 B at tp 1, cp 4, hidden 4096 (128 x 32):
    # ring: (cp - 1) K/V shards forward and twice that backward (K/V and dK/dV): 3·(1 + 2)·2·kv·128;
    # all_to_all (Ulysses): (cp - 1)/cp of Q, K, V and the output, forward and backward: 2·0.75·(2·4096 + 2·kv·128).
    (4, "ring", 9 * 1024 / (1.5 * 9216)),          # GQA, 4 kv heads: ring 9216, a2a 13824: all_to_all must lose
    (32, "all_to_all", 9 * 8192 / (1.5 * 16384)),  # MHA: ring 73728, a2a 24576: the ring must lose
])
def test_auto_cp_comm_on_a_slow_link_picks_the_mode_that_moves_fewer_bytes(kv, winner, ring_over_a2a):
    """cp_comm auto on a 1 GB/s NVLink: the exchange dominates the attention (a ring step of 17 MB takes ~20 ms, a
    shard's attention ~1 ms), so the mode that moves fewer bytes must win, and the two added times stand in the
    ratio of the bytes counted by hand above (the ring's steps are not hidden behind ~1 ms of attention)."""
    spec = long_spec(cp=(1, 2, 4), cp_comm="auto", intra=1, kv=kv)
    costs = default_costs(spec.cluster)
    z1 = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "full", 1, False, cp=4)
    assert cpar.cp_mode(spec, z1, costs) == winner
    t = {m: cpar.layer_times(spec, z1, costs, m) for m in ("ring", "all_to_all")}
    got = (t["ring"].forward + t["ring"].backward) / (t["all_to_all"].forward + t["all_to_all"].backward)
    assert got == pytest.approx(ring_over_a2a, rel=0.1)


def test_all_to_all_with_only_zero3_is_refused_naming_the_field():
    """The mirror of allgather without ZeRO-3: TE's a2a has no torchtitan plan, so a search of ZeRO-3 only would drop
    every cp > 1 configuration (and `solve` said only that every (tp, pp, dp) breaks a rule, naming none)."""
    d = dict(long_spec(cp=(2,)).raw)
    d["training"] = {**d["training"], "cp_comm": "all_to_all"}
    d["search"] = {**d["search"], "zero": [3]}
    with pytest.raises(SpecError) as e:
        parse_spec(d, "long.yaml")
    assert e.value.field == "training.cp_comm" and "long.yaml" in str(e.value)
    d["search"] = {**d["search"], "zero": [1, 3]}       # Megatron-Core's ZeRO-1 plans run it: accepted
    assert parse_spec(d, "long.yaml").training.cp_comm == "all_to_all"


def test_torchtitans_op_sac_reruns_no_cp_attention():
    """ZeRO-3's selective recompute is torchtitan's per-op policy, which saves SDPA (the whole CP loop under CP):
    the CP steps and exchange are not charged again, as Megatron's selective (core attention) and full recompute are."""
    spec = _ag_spec()
    costs = default_costs(spec.cluster)
    base = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "none", 3, False, cp=4)
    t = cpar.layer_times(spec, base, costs)
    L = spec.model.num_layers

    def added(cfg):       # what with_cp_times adds to the shard view's recompute
        tr, c1 = cpar.shard_view(spec.training, cfg)
        st = costs.compute.stage_times(spec.model, spec.cluster, tr, c1)
        return cpar.with_cp_times(spec, cfg, costs, st)[0].recompute - st[0].recompute

    assert added(replace(base, recompute="selective")) == 0.0          # op SAC: SDPA saved
    assert added(replace(base, recompute="full")) == pytest.approx(L * t.forward)
    ring = replace(spec, training=replace(spec.training, cp_comm="ring"))
    meg = replace(base, zero=1, recompute="selective")                   # Megatron: the core attention re-run
    tr, c1 = cpar.shard_view(ring.training, meg)
    st = costs.compute.stage_times(ring.model, ring.cluster, tr, c1)
    assert cpar.with_cp_times(ring, meg, costs, st)[0].recompute - st[0].recompute == pytest.approx(
        L * cpar.layer_times(ring, meg, costs).forward)


def test_allgather_times_follow_pytorchs_loop():
    """Per layer: cp SDPA steps (the ring's attention), fp32 merges / accumulations at the HBM rate, the all-gather
    past step 0 and the dK/dV permutes: the last one exposed in full, the others past each next step."""
    spec = _ag_spec()
    costs = default_costs(spec.cluster)
    cfg = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "full", 3, False, cp=4)
    ring, ag = cpar.layer_times(spec, cfg, costs, "ring"), cpar.layer_times(spec, cfg, costs, "allgather")
    tr, c1 = cpar.shard_view(spec.training, cfg)
    p = costs.compute.layer_parts(spec.model, spec.cluster, tr, c1)
    out = spec.training.seq_length // 4 * 4096            # b * s/cp * hidden/tp
    hbm = costs.compute.hbm_GBps * 1e9
    kv = cpar.allgather_kv_bytes(spec.model, spec.training, cfg)
    assert kv == 2 * out * 2                             # K and V at the query heads (repeat_kv), bf16
    dkv = cpar.link_s(spec, cfg, 2 * kv, costs)          # fp32
    gather = 3 * cpar.link_s(spec, cfg, kv, costs)
    assert gather < p["attn"] and dkv < p["attn_backward"]       # NVLink: hidden but the last permute
    assert ag.exposed_forward == 0 and ag.exposed_backward == pytest.approx(dkv)
    # steps 1..3: unmasked calls of a causal step's FLOPs, at the unmasked kernel's efficiency for s/2cp (H100: 4K)
    from planner.costs.compute import fused_attention_efficiency
    # (ZeRO-3: torchtitan's kernel, PyTorch's flash as measured in training steps; 4K unmasked interpolated)
    rate = (fused_attention_efficiency("H100", 8192, backend="sdpa_flash")
            / fused_attention_efficiency("H100", 4096, causal=False, backend="sdpa_flash"))
    assert rate == pytest.approx(252.3 / ((257.6 + 269.9) / 2))
    assert ag.forward == pytest.approx(3 * rate * p["attn"]
                                       + out * (cpar.AG_FWD_FIXED_FUSED + 3 * cpar.AG_MERGE_FUSED) / hbm)
    assert ag.backward == pytest.approx(3 * rate * p["attn_backward"] + dkv
                                        + out * (cpar.AG_BWD_FIXED_FUSED + 4 * cpar.AG_BWD_STEP_FUSED) / hbm)
    assert ag.backward > ring.backward                   # fp32 accumulations and the last permute
    eager = replace(spec, training=replace(spec.training, kernels="eager"))
    assert cpar.layer_times(eager, cfg, costs, "allgather").forward > ag.forward
    # a slow link: the all-gather shows past step 0, each permute past the next step's backward
    slow = _ag_spec(intra=5)
    t = cpar.layer_times(slow, cfg, costs, "allgather")
    g, d = 3 * cpar.link_s(slow, cfg, kv, costs), cpar.link_s(slow, cfg, 2 * kv, costs)
    assert t.exposed_forward > 0 and t.exposed_forward == pytest.approx(max(0.0, g - p["attn"]))
    assert t.exposed_backward == pytest.approx(max(0.0, g - p["attn_backward"])
                                               + 3 * max(0.0, d - rate * p["attn_backward"]) + d)


def test_allgather_memory_and_export():
    """The gathered K/V of every rank, fp32 dQ and three fp32 dK/dV buffers and one step's 16-bit gradients as the
    backward working set; the torchtitan export names the rotate method."""
    import tomllib

    from planner.export import torchtitan_toml
    spec = _ag_spec()
    costs = default_costs(spec.cluster)
    cfg = ParallelConfig(1, 1, 4, 1, 4, "1f1b", 1, "full", 3, False, cp=4)
    out = spec.training.seq_length // 4 * 4096
    assert cpar.buffer_bytes(spec, cfg, "allgather") == 4 * (2 * out * 2) + out * (4 + 24 + 6)
    ring = replace(spec, training=replace(spec.training, cp_comm="ring"))
    m_ag, m_ring = stage_memory(spec, cfg, costs)[0], stage_memory(ring, cfg, costs)[0]
    assert m_ag.transient - m_ring.transient == pytest.approx(
        cpar.buffer_bytes(spec, cfg, "allgather") - cpar.buffer_bytes(spec, cfg, "ring"))
    sol = {"config": cfg.as_dict(), "seq_length": spec.training.seq_length, "num_layers": 8, "cp_comm": "allgather"}
    assert tomllib.loads(torchtitan_toml(sol))["parallelism"]["context_parallel_rotate_method"] == "allgather"
    assert tomllib.loads(torchtitan_toml({**sol, "cp_comm": "ring"}))["parallelism"][
        "context_parallel_rotate_method"] == "alltoall"
    with pytest.raises(SpecError, match="cp_comm"):
        torchtitan_toml({**sol, "cp_comm": "all_to_all"})


def test_measured_cp_loop_replays_pytorchs_load_balanced_attention():
    """benchmarks/gpu_cp_loop.py (the loop measured on the lent H100) computes what PyTorch's context parallel
    computes: each rank's merged output equals full causal attention over the whole sequence at its two chunks."""
    import importlib.util
    import os

    import torch
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("cpl", os.path.join(root, "benchmarks", "gpu_cp_loop.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    cp, c = 4, 8
    Q, K, V = (torch.randn(1, 2, 2 * cp * c, 8) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True)

    def local(x, r):               # rank r holds chunks r and 2cp - 1 - r
        return torch.cat([x[:, :, r * c:(r + 1) * c], x[:, :, (2 * cp - 1 - r) * c:(2 * cp - r) * c]], dim=2)
    fwd, _ = mod._flash("cpu")
    for r in range(cp):
        out, _, steps = mod.forward_loop(local(Q, r), [(local(K, s), local(V, s)) for s in range(cp)], r, cp, fwd)
        assert len(steps) == cp
        assert torch.allclose(out, local(ref, r), atol=1e-5)


def test_a_context_parallel_list_with_some_legal_values_searches_those():
    """seq 4100 takes cp 2 (4100 = 2 * 2 * 1025) but not cp 4: the spec is accepted and the search skips cp 4,
    rather than refusing the whole list (it did); a list with no legal value is still refused."""
    spec = long_spec(seq=4100, cp=(1, 2, 4))
    cps = {c.cp for c in enumerate_configs(spec)}
    assert 2 in cps and 4 not in cps
    d = dict(spec.raw)
    d["search"] = {**d["search"], "context_parallel": [4]}
    with pytest.raises(SpecError, match="2 \\* cp = 8"):
        parse_spec(d, "long.yaml")
