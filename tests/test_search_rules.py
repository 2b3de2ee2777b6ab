"""The search space and the configuration flags follow the frameworks' own rules (fourth practitioner tryout):
context_parallel auto, ZeRO-3-only specs, fp8_param_gather's distributed optimizer, sequence parallelism's split,
fp8 GEMM shapes, interleaving without a pipeline, HSDP shard groups inside a node, and context parallelism in the
memory advice."""
from __future__ import annotations

import os

import pytest
import yaml
from plan_fixtures import run_cli

from planner.cli.common import schedule_and_vpp
from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.iteration import stage_memory
from planner.errors import InfeasibleError, SpecError
from planner.search.compare import megatron_config
from planner.search.screen import fitting_configs, memory_advice
from planner.search.solve import check_config, solve
from planner.search.space import enumerate_configs
from planner.spec import parse_spec
from planner.spec.plan import SearchSpec

LLAMA8B = {"name": "llama3-8b", "family": "llama", "num_layers": 8, "hidden_size": 4096, "num_attention_heads": 32,
           "num_kv_heads": 8, "ffn_hidden_size": 14336, "vocab_size": 128256, "tied_embeddings": False}


def spec_dict(nodes=2, seq=8192, gbs=64, search=None, model=None, **training) -> dict:
    """An H100 spec (fp8 capable) of a shortened Llama-3 8B; `training` adds or replaces training keys."""
    return {"model": {**LLAMA8B, **(model or {})},
            "cluster": {"name": "h", "gpu": {"type": "H100-SXM5-80GB", "memory_GiB": 80,
                                             "peak_tflops": {"bf16": 989, "fp8": 1979}},
                        "nodes": nodes, "gpus_per_node": 8,
                        "network": {"intra_node": {"bandwidth_GBps": 450}, "inter_node": {"bandwidth_Gbps": 400}}},
            "training": {"global_batch_size": gbs, "seq_length": seq, **training},
            "search": {"schedules": ["1f1b"], "recompute": ["full"], "zero": [0, 1], "micro_batch_sizes": [1],
                       **(search or {})}}


def spec(**kw):
    return parse_spec(spec_dict(**kw), "t.yaml")


def cfg_of(s, tp, pp, dp, mbs=1, cp=1, **kw) -> ParallelConfig:
    return ParallelConfig(tp, pp, dp, mbs, s.training.global_batch_size // (dp * mbs), cp=cp, **kw)


# --- #2: search.context_parallel: auto ----------------------------------------------------------------------------

def test_context_parallel_auto_searches_every_legal_power_of_two():
    """auto was read as absent, i.e. [1]: a long-context spec never searched cp. Now 1 and the powers of two up to the
    GPU count that 2 * cp divides seq_length into."""
    from planner.search.space import context_parallel_options
    s = spec(seq=32768, search={"context_parallel": "auto"})
    assert s.search.context_parallel is None
    assert context_parallel_options(s) == (1, 2, 4, 8, 16)
    assert {c.cp for c in enumerate_configs(s)} >= {1, 2, 8, 16}
    # 2 * cp must divide seq_length: 4100 = 4 * 1025 takes cp 2 only
    assert context_parallel_options(spec(seq=4100, search={"context_parallel": "auto"})) == (1, 2)
    # resolved against the GPUs a search runs on (replan, idle nodes)
    assert context_parallel_options(s, 8) == (1, 2, 4, 8)


def test_context_parallel_default_stays_one_and_auto_keeps_the_spec_rules():
    assert SearchSpec().context_parallel == (1,) and spec().search.context_parallel == (1,)
    with pytest.raises(SpecError, match="search.context_parallel.*fused"):
        spec(search={"context_parallel": "auto"}, attention="unfused")


# --- #3: ZeRO-3 only never becomes a ZeRO-0 plan ------------------------------------------------------------------

def test_zero3_only_never_yields_zero0_configurations():
    """dp * cp = 1 turned the zero list into (0,): search.zero [3] returned a Megatron ZeRO-0 plan (tp8 pp4 dp1)."""
    s = spec(nodes=4, search={"zero": [3], "tensor_parallel": [8]})
    cfgs = list(enumerate_configs(s))
    assert cfgs and all(c.zero == 3 and c.dp * c.cp > 1 for c in cfgs)


@pytest.mark.parametrize("zero, kept", [([1], 1), ([2], 2), ([1, 2], 1), ([0, 1], 0), ([0, 1, 2, 3], 0),
                                        ([2, 3], 2)])
def test_zero_1_or_2_over_one_rank_keeps_the_stage_asked_for(zero, kept):
    """dp * cp = 1 turned search.zero [1] into ZeRO-0 configurations: the plan was labelled z0 (exported without
    --use-distributed-optimizer) though the user asked for the distributed optimizer, which Megatron-LM runs with dp 1.
    The lowest listed stage is kept, one configuration per shape as before."""
    s = spec(nodes=4, search={"zero": zero, "tensor_parallel": [8]})
    one_rank = [c for c in enumerate_configs(s) if c.dp * c.cp == 1]
    assert one_rank and {c.zero for c in one_rank} == {kept}
    plain = spec(nodes=4, search={"zero": [0], "tensor_parallel": [8]})
    assert len(one_rank) == len([c for c in enumerate_configs(plain) if c.dp * c.cp == 1])


def test_a_one_rank_zero1_plan_says_zero_1_in_solution_table_and_export(tmp_path):
    """A one-node tp 8 spec has dp = 1 only: search.zero [1] is written, shown and exported as ZeRO 1 (Megatron's
    distributed optimizer); [2] as ZeRO 2, which the Megatron export refuses naming config.zero as for any ZeRO-2
    plan (the distributed optimizer keeps the whole gradient buffer)."""
    for zero in (1, 2):
        path, out = tmp_path / f"z{zero}.yaml", tmp_path / f"z{zero}-sol.yaml"
        path.write_text(yaml.safe_dump(spec_dict(nodes=1, search={"zero": [zero], "tensor_parallel": [8]})))
        rc, _, err = run_cli(["solve", str(path), "--out", str(out), "--time-limit", "5"])
        assert rc == 0, err
        sol = yaml.safe_load(out.read_text())
        assert sol["config"]["dp"] == 1 and sol["config"]["zero"] == zero
        assert f"/ {zero} /" in err and f"z{zero}" in err
        rc, text, err = run_cli(["export", str(out), "--format", "megatron"])
        if zero == 1:
            assert rc == 0 and "--use-distributed-optimizer" in text
        else:
            assert rc == 2 and "config.zero" in err


def test_zero3_only_with_impossible_hsdp_names_the_search_fields():
    """search.zero [3] with dp_shard [8] at tp 8 has no configuration (dp <= 4, shard groups of 8 replicas): exit 1
    naming search.dp_shard and search.zero, not a z0 plan."""
    s = spec(nodes=4, search={"zero": [3], "tensor_parallel": [8], "dp_shard": [8]})
    with pytest.raises(InfeasibleError) as e:
        fitting_configs(s, default_costs(s.cluster))
    assert "search.dp_shard" in str(e.value) and "search.zero" in str(e.value) and " z0" not in str(e.value)


def test_megatron_baseline_uses_a_stage_of_the_spec():
    s = spec(nodes=4, search={"zero": [3]})
    costs = default_costs(s.cluster)
    assert megatron_config(s, costs) is None
    s1 = spec(nodes=4, search={"zero": [1]})
    assert megatron_config(s1, costs).zero == 1
    # ZeRO-2 has no Megatron-LM form (the export refuses it): no Megatron baseline from it
    assert megatron_config(spec(nodes=4, search={"zero": [2]}), costs) is None
    assert megatron_config(spec(nodes=4, search={"zero": [1, 2]}), costs).zero == 1


# --- #4 / #8: fp8_param_gather ------------------------------------------------------------------------------------

@pytest.mark.parametrize("zero, words", [([0], "distributed optimizer"), ([0, 3], "distributed optimizer"),
                                         ([3], "fsdp_float8_all_gather")])
def test_fp8_param_gather_needs_zero_1_or_2(zero, words):
    with pytest.raises(SpecError, match="training.fp8_param_gather") as e:
        spec(precision="fp8", fp8_param_gather=True, search={"zero": zero})
    assert words in str(e.value)


def test_fp8_param_gather_skips_zero0_and_refuses_the_flag():
    s = spec(nodes=4, precision="fp8", fp8_param_gather=True, search={"zero": [0, 1, 3]})
    cfgs = list(enumerate_configs(s))
    assert cfgs and all(c.zero != 0 for c in cfgs)
    assert {c.zero for c in cfgs if c.dp * c.cp == 1} == {1}        # the distributed optimizer, even on one rank
    with pytest.raises(SpecError, match="--zero"):
        check_config(s, cfg_of(s, 4, 1, 8, zero=0, sequence_parallel=True))
    check_config(s, cfg_of(s, 4, 1, 8, zero=1, sequence_parallel=True))


def test_zero3_plans_are_costed_without_fp8_param_gather():
    """ZeRO-3 plans are torchao's: TE's fp8 primary weights do not apply to them (their all-gather is
    fsdp_float8_all_gather)."""
    with_pg = spec(nodes=4, precision="fp8", fp8_recipe="tensorwise", fp8_param_gather=True, search={"zero": [1, 3]})
    without = spec(nodes=4, precision="fp8", fp8_recipe="tensorwise", search={"zero": [1, 3]})
    c = cfg_of(with_pg, 2, 1, 16, zero=3, sequence_parallel=True)
    costs = default_costs(with_pg.cluster)
    assert [m.total for m in stage_memory(with_pg, c, costs)] == [m.total for m in stage_memory(without, c, costs)]
    # and a ZeRO-3 plan's solution says so
    from planner.search.summary import fp8_param_gather_note
    assert "does not apply to this ZeRO-3 plan" in fp8_param_gather_note(with_pg, c)
    assert not fp8_param_gather_note(with_pg, cfg_of(with_pg, 2, 1, 16, zero=1, sequence_parallel=True))
    assert not fp8_param_gather_note(without, c)


# --- #5: sequence parallelism splits the sequence over tp ---------------------------------------------------------

def test_sequence_parallel_needs_tp_to_divide_the_sequence():
    """131070 / 4 is not whole: Megatron's scatter asserts; the search made such plans and estimate took --sp."""
    from planner.config import sequence_parallel_problem
    s = spec(nodes=4, seq=131070, gbs=32, search={"tensor_parallel": [2, 4]})
    sp = {(c.tp, c.sequence_parallel) for c in enumerate_configs(s)}
    assert (2, True) in sp and (4, False) in sp and (4, True) not in sp
    with pytest.raises(SpecError, match="--sp"):
        check_config(s, cfg_of(s, 4, 1, 8, zero=1, sequence_parallel=True))
    # with cp the rule is on seq / cp: 4100 / 4 = 1025 splits, 4100 / 2 / 4 = 512.5 does not
    c = spec(seq=4100, search={"context_parallel": [1, 2], "tensor_parallel": [4]})
    got = {(x.cp, x.sequence_parallel) for x in enumerate_configs(c)}
    assert (1, True) in got and (2, True) not in got and (2, False) in got
    assert sequence_parallel_problem(c.training, cfg_of(c, 4, 1, 2, cp=2, sequence_parallel=True))


# --- #6: fp8 GEMM shapes ------------------------------------------------------------------------------------------

def test_fp8_tokens_not_a_multiple_of_16_leave_no_configuration_and_say_why():
    """seq 8191 in fp8: every GEMM gets 8191 rows (TE asserts); the search planned it."""
    s = spec(nodes=4, seq=8191, gbs=96, precision="fp8", search={"micro_batch_sizes": [1, 2]})
    assert not list(enumerate_configs(s))
    with pytest.raises(InfeasibleError) as e:
        fitting_configs(s, default_costs(s.cluster))
    assert "training.precision" in str(e.value) and "multiple of 16" in str(e.value)
    with pytest.raises(SpecError, match="--mbs"):
        check_config(s, cfg_of(s, 1, 1, 32, zero=1))
    # bf16 has no such rule
    assert list(enumerate_configs(spec(nodes=4, seq=8191, gbs=96, search={"micro_batch_sizes": [1, 2]})))


def test_fp8_widths_and_the_sequence_parallel_input():
    from planner.config import fp8_shape_problem
    # ffn 14352 = 16 x 897: tp 1 only (7176 = 14352 / 2 is not a multiple of 16)
    w = spec(precision="fp8", model={"ffn_hidden_size": 14352})
    assert {c.tp for c in enumerate_configs(w)} == {1}
    assert fp8_shape_problem(w.model, w.training, cfg_of(w, 2, 1, 8), w.cluster.gpu)[0] == "tp"
    with pytest.raises(SpecError, match="--tp"):
        check_config(w, cfg_of(w, 2, 1, 8))
    # 8208 = 16 x 513 tokens: TE's sequence-parallel input at tp 4 holds 2052, not a multiple of 8; torchao (ZeRO-3)
    # gathers before its GEMMs
    s = spec(seq=8208, precision="fp8", fp8_recipe="tensorwise", search={"tensor_parallel": [2, 4], "zero": [1, 3]})
    got = {(c.tp, c.sequence_parallel, c.zero) for c in enumerate_configs(s)}
    assert (4, True, 1) not in got and (4, False, 1) in got and (2, True, 1) in got and (4, True, 3) in got
    with pytest.raises(SpecError, match="--sp"):
        check_config(s, cfg_of(s, 4, 1, 4, zero=1, sequence_parallel=True))


B200 = {"type": "B200-SXM-180GB", "memory_GiB": 180, "peak_tflops": {"bf16": 2250, "fp8": 4500}}


def test_fp8_gemm_layout_follows_the_gpu_architecture():
    """Transformer Engine runs TN-only fp8 GEMMs below compute capability 10 and on 12.x (nvte_is_non_tn_fp8_gemm_
    supported); data-centre Blackwell takes any layout. Unknown types get the stricter TN rule."""
    from planner.spec.cluster import GPUSpec, fp8_gemm_tn_only

    def tn(kind):
        return fp8_gemm_tn_only(GPUSpec(type=kind, memory_GiB=80, peak_tflops={"fp8": 1}))
    assert all(tn(k) for k in ("H100-SXM5-80GB", "H200-141GB", "GH200", "L40S", "RTX-PRO-6000-Blackwell", "X1"))
    assert not any(tn(k) for k in ("B200-SXM-180GB", "GB200-NVL72", "b300", "HGX-B100"))


def test_fp8_tokens_rule_is_hoppers_only_where_the_gemm_is_tn_only():
    """8200 tokens per micro-batch (8 x 1025): Hopper's TN-only weight-gradient GEMM reads them as its leading
    dimension (a multiple of 16), a B200's reads the widths, and TE's assert_dim_for_fp8_exec asks 8 of the rows on
    both. The rule used to be Hopper's for every fp8 GPU. torchao's _scaled_mm (ZeRO-3) asks 16 everywhere, and the
    widths' rule is the same on both."""
    from planner.config import fp8_shape_problem
    h = spec(nodes=2, seq=8200, gbs=64, precision="fp8", search={"tensor_parallel": [1], "zero": [1, 3]})
    b = parse_spec({**spec_dict(nodes=2, seq=8200, gbs=64, precision="fp8",
                                search={"tensor_parallel": [1], "zero": [1, 3]}),
                    "cluster": {**spec_dict()["cluster"], "gpu": B200}}, "t.yaml")
    te, fsdp = cfg_of(h, 1, 1, 16, zero=1), cfg_of(h, 1, 1, 16, zero=3)
    why = fp8_shape_problem(h.model, h.training, te, h.cluster.gpu)
    assert why[0] == "micro_batch_size" and "multiple of 16" in why[1] and "H100-SXM5-80GB" in why[1]
    assert fp8_shape_problem(b.model, b.training, te, b.cluster.gpu) is None
    assert fp8_shape_problem(b.model, b.training, fsdp, b.cluster.gpu)[0] == "micro_batch_size"
    assert fp8_shape_problem(h.model, h.training, cfg_of(h, 1, 1, 8, mbs=2, zero=1), h.cluster.gpu) is None
    with pytest.raises(SpecError, match="--mbs"):
        check_config(h, te)
    check_config(b, te)
    got = {(c.zero, c.micro_batch_size) for c in enumerate_configs(b) if c.dp == 16}
    assert (1, 1) in got and (3, 1) not in got
    assert not any(c.micro_batch_size == 1 for c in enumerate_configs(h) if c.dp == 16)
    # 4100 tokens (4 x 1025): assert_dim_for_fp8_exec refuses them on a B200 too
    b4 = parse_spec({**spec_dict(nodes=2, seq=4100, gbs=64, precision="fp8", search={"tensor_parallel": [1]}),
                     "cluster": {**spec_dict()["cluster"], "gpu": B200}}, "t.yaml")
    assert "multiple of 8" in fp8_shape_problem(b4.model, b4.training, cfg_of(b4, 1, 1, 16), b4.cluster.gpu)[1]
    # widths: ffn 14352 / tp 2 = 7176 is refused on both
    for gpu in (spec_dict()["cluster"]["gpu"], B200):
        w = parse_spec({**spec_dict(precision="fp8", model={"ffn_hidden_size": 14352}),
                        "cluster": {**spec_dict()["cluster"], "gpu": gpu}}, "t.yaml")
        assert fp8_shape_problem(w.model, w.training, cfg_of(w, 2, 1, 8), w.cluster.gpu)[0] == "tp"


# --- #9: interleaving needs a pipeline ----------------------------------------------------------------------------

def test_interleaved_with_pp_1_is_refused():
    with pytest.raises(SpecError, match="--vpp"):
        schedule_and_vpp(None, 2, 1)
    with pytest.raises(SpecError, match="--schedule"):
        schedule_and_vpp("interleaved", None, 1)
    assert schedule_and_vpp("interleaved", 2, 2) == ("interleaved", 2)
    from planner.config import V_SHAPES
    for v in V_SHAPES:                    # a V folds two chunks per device over the pipeline: none with pp 1
        with pytest.raises(SpecError, match="--schedule"):
            schedule_and_vpp(v, None, 1)
        assert schedule_and_vpp(v, None, 2) == (v, 2)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rc, _, err = run_cli(["estimate", os.path.join(root, "specs", "gpt3-13b-a100-128.yaml"), "--tp", "8", "--pp", "1",
                       "--dp", "16", "--mbs", "1", "--vpp", "2"])
    assert rc == 2 and "--vpp" in err and "greater than 1 with interleaved" in err


def test_check_config_refuses_the_pipelines_the_search_and_simulator_do_not_build(tmp_path):
    """Fuzz of valid plans (Nov 27): estimate_plan (a solution's config, the library) costed interleaved and V-shape
    plans on pp 1, which the flag parser refuses and Megatron-Core asserts against (the export's line then failed to
    import), and interleaved plans whose micro-batches pp does not divide, which the search never builds and the
    simulator refuses (orders.check): now check_config refuses both, naming the flag."""
    s = spec(nodes=2, gbs=64, search={"schedules": ["1f1b", "interleaved", "v-half"]})
    for sched in ("interleaved", "v-half", "v-zb"):
        with pytest.raises(SpecError, match="--pp.*greater than 1"):
            check_config(s, cfg_of(s, 8, 1, 2, schedule=sched, vpp=2))
    with pytest.raises(SpecError, match="--mbs.*divisible by pp"):
        check_config(s, cfg_of(s, 4, 4, 1, mbs=32, schedule="interleaved", vpp=2))        # m = 2, pp = 4
    check_config(s, cfg_of(s, 4, 4, 1, mbs=16, schedule="interleaved", vpp=2))            # m = 4
    # V-shapes below pp micro-batches: the search builds none, and V-ZB's replay ran 17-60% past its closed form
    # there (Nov 27, fifteenth session); m = pp is the first the planner models
    with pytest.raises(SpecError, match="--mbs.*m >= pp"):
        check_config(s, cfg_of(s, 4, 4, 1, mbs=32, schedule="v-half", vpp=2))             # m = 2 < pp = 4
    check_config(s, cfg_of(s, 4, 4, 1, mbs=16, schedule="v-zb", vpp=2))                    # m = 4
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec_dict(nodes=2, gbs=64, search={"schedules": ["interleaved"]})))
    rc, _, err = run_cli(["estimate", str(path), "--tp", "4", "--pp", "4", "--dp", "1", "--mbs", "32", "--vpp", "2"])
    assert rc == 2 and "--mbs" in err and "Traceback" not in err


def test_check_config_holds_zero3_plans_to_torchtitan_as_the_flags_do():
    """Fuzz of valid plans (Nov 27): the command line refused a ZeRO-3 plan torchtitan cannot run (tp without
    sequence parallelism, a Megatron-only split, fewer 1F1B micro-batches than stages, HSDP with cp) but
    estimate_plan, given the config (a solution, the library), costed it: check_config now refuses it, naming the
    same flag."""
    s = spec(nodes=2, gbs=64, search={"zero": [3], "schedules": ["1f1b", "zb-h1"]})
    with pytest.raises(SpecError, match="--sp.*torchtitan"):
        check_config(s, cfg_of(s, 2, 1, 8, zero=3))
    with pytest.raises(SpecError, match="--schedule.*torchtitan"):
        check_config(s, cfg_of(s, 2, 2, 4, zero=3, sequence_parallel=True, schedule="zb-h1"))
    with pytest.raises(SpecError, match="--mbs.*Schedule1F1B"):
        check_config(s, cfg_of(s, 2, 2, 4, mbs=16, zero=3, sequence_parallel=True))      # m = 1 < pp = 2
    check_config(s, cfg_of(s, 2, 1, 8, zero=3, sequence_parallel=True))
    check_config(s, cfg_of(s, 2, 1, 8, zero=1))                                         # Megatron's: SP optional


# --- #11: context parallelism in the memory advice and the cp note ------------------------------------------------

def test_memory_advice_suggests_context_parallelism():
    s = spec(nodes=4, seq=1048576, gbs=32)
    c = cfg_of(s, 8, 4, 1, recompute="full", sequence_parallel=True)
    tip = memory_advice(s, c, "logits")
    assert "context parallelism (search.context_parallel: auto = [1, 2, 4, 8, 16, 32])" in tip
    assert "context parallelism" not in memory_advice(s, c, "optimizer")
    # a list whose cp > 1 the 2 * cp rule drops says so
    odd = spec(nodes=4, seq=131070, gbs=32, search={"context_parallel": [1, 2, 4]})
    assert "seq_length 131070 must be a multiple of 2 * cp" in memory_advice(odd, cfg_of(odd, 8, 1, 4), "activations")
    # cp searched: no such tip
    cp = spec(nodes=4, seq=1048576, gbs=32, search={"context_parallel": [1, 8]})
    assert "context parallelism" not in memory_advice(cp, c, "logits")


def test_the_cp_note_names_the_degrees_the_2cp_rule_dropped():
    s = spec(nodes=1, seq=4098, gbs=8, search={"context_parallel": [1, 2, 4], "tensor_parallel": [8]})
    sol = solve(s, time_limit_s=2, simulate=False)
    assert sol.config.cp == 1
    assert "cp 2, 4 dropped: seq_length 4098 is not a multiple of 2 * cp" in sol.solver.note


# --- #12: HSDP's shard group lies inside one node -----------------------------------------------------------------

def test_dp_shard_larger_than_a_node_names_the_flag(tmp_path):
    s = spec(nodes=4, gbs=64)
    with pytest.raises(SpecError, match="--dp-shard.*inside one node.*gpus_per_node=8"):
        check_config(s, cfg_of(s, 1, 1, 32, zero=3, dp_shard=16))
    with pytest.raises(SpecError, match="--dp-shard.*at most 4 replica"):
        check_config(s, cfg_of(s, 2, 1, 16, zero=3, dp_shard=8, sequence_parallel=True))
    check_config(s, cfg_of(s, 1, 1, 32, zero=3, dp_shard=8))
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(spec_dict(nodes=4, gbs=64, search={"zero": [3]})))
    rc, _, err = run_cli(["estimate", str(path), "--tp", "1", "--pp", "1", "--dp", "32", "--mbs", "1", "--zero", "3",
                       "--dp-shard", "16"])
    assert rc == 2 and "--dp-shard" in err and "tile whole nodes" not in err


def test_a_zero3_solution_does_not_record_fp8_param_gather_and_zero2_says_it_has_no_export():
    """The solution file carries TE's fp8_param_gather only for the plans costed with it (not ZeRO-3's); a ZeRO-2
    plan over tp > 1 says that no export format runs it (Megatron-LM has no ZeRO-2, DeepSpeed no tp)."""
    from planner.search.solve import estimate_plan
    from planner.search.summary import zero2_note
    from planner.solution import Solution, SolverRecord
    s = spec(nodes=2, precision="fp8", fp8_recipe="tensorwise", fp8_param_gather=True, search={"zero": [1, 3]})

    def record(c):
        est, lay, assign, prob = estimate_plan(s, c)
        rec = SolverRecord("auto", "FEASIBLE", est.iteration_s, est.iteration_s, 0.0, 1, 0, 0, 1, 0)
        return Solution(s, c, lay, assign, prob.nodes, est, rec).as_dict()

    assert "fp8_param_gather" not in record(cfg_of(s, 2, 1, 8, zero=3, sequence_parallel=True))
    assert record(cfg_of(s, 2, 1, 8, zero=1, sequence_parallel=True))["fp8_param_gather"] is True
    b = spec(nodes=2, search={"zero": [1, 2]})
    assert "no `planner export` format runs" in zero2_note(b, cfg_of(b, 2, 1, 8, zero=2, sequence_parallel=True))
    assert "config.tp" in zero2_note(b, cfg_of(b, 2, 1, 8, zero=2, sequence_parallel=True))
    assert not zero2_note(b, cfg_of(b, 1, 1, 16, zero=2))          # DeepSpeed's ZeRO stage 2 runs it
    assert not zero2_note(b, cfg_of(b, 2, 1, 8, zero=1, sequence_parallel=True))


# --- tryout 5, #7: compare's Megatron baseline inside the spec's search space --------------------------------------

NARROW = {"schedules": ["interleaved"], "recompute": ["none"], "zero": [1], "tensor_parallel": [8],
          "context_parallel": [2], "micro_batch_sizes": [2]}


def test_megatron_baseline_follows_the_search_space():
    """The baseline was always cp 1, mbs 1, 1F1B and selective / full recompute, whatever the spec searched: with a
    narrow space it lay outside it (and beat the OPTIMAL plan with a negative gap to the bound). It is now built from
    the space's lists, and is a configuration the search enumerates."""
    s = spec(nodes=4, gbs=64, search=NARROW)
    cfg = megatron_config(s, default_costs(s.cluster))
    assert cfg in set(enumerate_configs(s))
    assert (cfg.tp, cfg.cp, cfg.micro_batch_size, cfg.recompute) == (8, 2, 2, "none")
    assert cfg.schedule == "interleaved" or cfg.pp == 1
    # the default space keeps the rule as it was: tp = node, cp 1, mbs 1, 1F1B, selective first
    d = spec(nodes=4, gbs=64, search={"recompute": ["none", "selective", "full"], "micro_batch_sizes": [1, 2]})
    c = megatron_config(d, default_costs(d.cluster))
    assert (c.tp, c.cp, c.micro_batch_size, c.schedule, c.recompute) == (8, 1, 1, "1f1b", "selective")


def test_compare_gap_to_bound_is_never_negative_for_the_baseline(monkeypatch):
    from planner.search import compare as cmp
    s = spec(nodes=4, gbs=64, search=NARROW)
    monkeypatch.setattr(cmp, "anneal", lambda probs, **k: type("R", (), {"objective": max(
        p.objective(p.rank_order()) for p in probs)})())     # Pipette's row is not what this test is about
    res = cmp.compare(s, time_limit_s=1)
    row = next(r for r in res["rows"] if r["method"].startswith("Megatron"))
    assert row["in_space"] and row["gap_to_bound"] >= -1e-9 and row["vs_best"] >= -1e-9
    # where no configuration of the space follows the rule, the rule as written is shown, outside the space: no gap to
    # a bound that does not cover it, and not the best
    monkeypatch.setattr(cmp, "megatron_config", lambda *a, **k: None)
    res = cmp.compare(s, time_limit_s=1)
    row = next(r for r in res["rows"] if r["method"].startswith("Megatron"))
    assert row["in_space"] is False and row["gap_to_bound"] is None and row["vs_best"] is None
    assert "outside the search space" in row["method"] and " cp" not in row["config"]
    assert min(r["vs_best"] for r in res["rows"] if r["vs_best"] is not None) == 0.0
