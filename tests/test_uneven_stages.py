"""Uneven pipeline stages (issue #8 item 2): Megatron-Core's first / last stage layer counts and the accounted
embedding / loss, through the split rule, memory, compute, simulator, search space, spec knob and export."""
import dataclasses
import os

import pytest

import planner
from planner.config import ParallelConfig as C
from planner.config import split_layers
from planner.costs import default_costs
from planner.costs.iteration import build_problem, default_layout, evaluate, stage_times
from planner.costs.memory import AnalyticalMemory, GiB, stage_params
from planner.errors import SpecError
from planner.export import megatron_args
from planner.search.solve import check_config, estimate_plan
from planner.search.space import enumerate_configs, uneven_splits
from planner.simulator import agreement, simulate
from planner.spec import load_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def spec405(tmp_path_factory):
    """Llama 3.1 405B (126 layers: no pp > 2 that is a power of two divides it) on 32 DGX H100 nodes."""
    p = tmp_path_factory.mktemp("u") / "l405.yaml"
    p.write_text(f"model: {ROOT}/models/llama3-405b.yaml\ncluster: {ROOT}/clusters/dgx-h100.yaml\n"
                 "training: {global_batch_size: 512, seq_length: 8192, precision: bf16, optimizer: adam}\n"
                 "search: {schedules: [1f1b, interleaved], recompute: [full], zero: [1], micro_batch_sizes: [1],\n"
                 "         tensor_parallel: [8], sequence_parallel: [true]}\n")
    return load_spec(str(p))


@pytest.fixture(scope="module")
def spec13():
    return planner.load_spec(os.path.join(ROOT, "specs/gpt3-13b-a100-128.yaml"))


# ---- the split rule (Megatron-LM @ d98e8a64: transformer_config.py "Uneven PP", get_num_layers_to_build)

def test_split_rule_examples():
    assert split_layers(126, 16, 1, 7, 7) == (7,) + (8,) * 14 + (7,)
    assert split_layers(70, 12, 1, 4, 6) == (4,) + (6,) * 10 + (6,)
    assert split_layers(80, 8) == (10,) * 8
    assert split_layers(126, 8, 2, account_embedding=True, account_loss=True) == (15,) + (16,) * 6 + (15,)
    assert split_layers(25, 2, 1, 12, None) == (12, 13)         # only the first given: the rest is the last
    assert split_layers(10, 2, 1, None, 3) == (7, 3)


@pytest.mark.parametrize("args,msg", [
    ((126, 16, 1, 6, 7), "middle layers must split evenly"),
    ((126, 16, 1, 0, 7), "larger than 0"),
    ((126, 8, 2, 15, 15), "divisible by the 2 virtual stages"),
    ((24, 4, 2, 4, 4), "each middle stage must be divisible"),       # 16 middle layers, 8 per rank, ok...
    ((20, 2, 1, 8, 8), "middle layers remain for 0 middle stages"),
    ((16, 3, 1, 8, 8), "0 middle layers remain for 1 middle stages"),
    ((126, 16), "do not split evenly"),
])
def test_split_rule_refusals(args, msg):
    if args == (24, 4, 2, 4, 4):       # 16 / 2 = 8 per middle rank, divisible by 2: legal; 5 per rank is not
        assert split_layers(*args) == (4, 8, 8, 4)
        with pytest.raises(ValueError, match=msg):
            split_layers(18, 4, 2, 4, 4)
        return
    with pytest.raises(ValueError, match=msg):
        split_layers(*args)


def test_split_rule_exclusive_modes():
    with pytest.raises(ValueError, match="cannot be set"):
        split_layers(126, 16, 1, 7, None, account_embedding=True)


def test_chunk_layers_follow_megatron():
    c = C(8, 8, 2, 1, 16, "interleaved", 2, account_embedding=True, account_loss=True)
    ch = c.chunk_layers(126)
    assert ch[0] == (7, 8) and ch[-1] == (8, 7) and all(x == (8, 8) for x in ch[1:-1])
    assert sum(map(sum, ch)) == 126
    u = C(8, 8, 2, 1, 16, "interleaved", 2, first_stage_layers=14, last_stage_layers=16)
    assert u.chunk_layers(126)[0] == (7, 7) and u.chunk_layers(126)[1] == (16 // 2,) * 2


# ---- the configuration: parsing, label, serialised form

def test_old_dicts_mean_even_and_labels_unchanged():
    d = {"tp": 4, "pp": 8, "dp": 8, "micro_batch_size": 1, "num_microbatches": 128, "schedule": "1f1b", "vpp": 1,
         "recompute": "selective", "zero": 1, "sequence_parallel": True}
    c = C.from_dict(d)
    assert not c.uneven and c.as_dict() == d
    assert c.label() == "tp4 pp8 dp8 mbs1 m128 1f1b rc=selective z1 sp"
    u = dataclasses.replace(c, first_stage_layers=9, last_stage_layers=9)
    assert u.label().endswith(" sp L9/9")
    assert C.from_dict(u.as_dict()) == u
    # CSV cells arrive as strings; an empty cell is the even split
    assert C.from_dict({k: str(v) for k, v in u.as_dict().items()}) == u
    assert C.from_dict({**{k: str(v) for k, v in d.items()}, "first_stage_layers": ""}) == c
    a = dataclasses.replace(c, account_embedding=True)
    assert a.label().endswith(" LE/-") and C.from_dict(a.as_dict()) == a


def test_sorting_mixes_even_and_uneven():
    cs = [C(1, 2, 1, 1, 2, first_stage_layers=3), C(1, 2, 1, 1, 2), C(1, 2, 1, 1, 2, last_stage_layers=3)]
    assert sorted(cs)[0] == C(1, 2, 1, 1, 2)


@pytest.mark.parametrize("extra,field", [
    ({"first_stage_layers": 0}, "config.first_stage_layers"),
    ({"last_stage_layers": -2}, "config.last_stage_layers"),
    ({"first_stage_layers": "x"}, "config.first_stage_layers"),     # the field itself, since Nov 27
    ({"schedule": "interleaved", "vpp": 2, "first_stage_layers": 7}, "config.first_stage_layers"),
    ({"schedule": "v-zb", "vpp": 2, "last_stage_layers": 8}, "config.last_stage_layers"),
    ({"first_stage_layers": 8, "account_loss": True}, "config.first_stage_layers"),
])
def test_from_dict_refusals_name_the_field(extra, field):
    d = {"tp": 1, "pp": 4, "dp": 1, "micro_batch_size": 1, "num_microbatches": 4, **extra}
    with pytest.raises(SpecError) as e:
        C.from_dict(d, "sol.yaml")
    assert e.value.field == field and e.value.file == "sol.yaml"


def test_flags_refusal_names_the_flag(spec405):
    with pytest.raises(SpecError) as e:
        check_config(spec405, C(8, 16, 2, 1, 256, first_stage_layers=6, last_stage_layers=7))
    assert e.value.field == "--first-stage-layers" and "113 middle layers" in str(e.value)
    with pytest.raises(SpecError) as e:
        check_config(spec405, C(8, 16, 2, 1, 256))          # even: 126 % 16
    assert e.value.field == "--pp"


def test_cli_estimate_refusal_exit_2(capsys):
    # in-process main(), which `python -m planner` exits with (tests/test_cli_startup.py runs that as a process)
    from planner.cli.main import main
    spec = os.path.join(ROOT, "specs", "gpt3-13b-a100-128.yaml")
    rc = main(["estimate", spec, "--tp", "8", "--pp", "4", "--dp", "4", "--mbs", "1", "--first-stage-layers", "9",
               "--last-stage-layers", "9"])
    # 40 - 18 = 22 over 2 middle stages: legal (9, 11, 11, 9)
    assert rc in (0, 1), capsys.readouterr().err
    capsys.readouterr()
    rc = main(["estimate", spec, "--tp", "8", "--pp", "4", "--dp", "4", "--mbs", "1", "--last-stage-layers", "9"])
    err = capsys.readouterr().err
    assert rc == 2 and "--last-stage-layers" in err, err


# ---- memory and time per stage

def test_memory_per_stage_follows_the_split(spec405):
    model, tr = spec405.model, spec405.training
    u = C(8, 16, 2, 1, 256, "1f1b", recompute="full", zero=1, sequence_parallel=True,
          first_stage_layers=7, last_stage_layers=7)
    per_layer = model.layer_params() / 8
    assert stage_params(model, u, 1) == pytest.approx(8 * per_layer)
    assert stage_params(model, u, 0) == pytest.approx(7 * per_layer + model.embedding_params() / 8)
    assert stage_params(model, u, 15) == pytest.approx(7 * per_layer + model.output_params() / 8)
    an = AnalyticalMemory()
    m = [an.stage_memory(model, spec405.cluster, tr, u, s) for s in range(16)]
    # stages 1 and 2 differ only in how many micro-batches they hold (1F1B: pp - stage)
    act_per_layer_mb = m[1].activations - m[2].activations
    assert act_per_layer_mb > 0
    assert m[1].activations == pytest.approx(8 * 15 * act_per_layer_mb / 8, rel=1e-9)
    # stage 0 holds 7 layers x 16 micro-batches (Llama, fused attention: nothing else stored there)
    assert m[0].activations == pytest.approx(7 * 16 * act_per_layer_mb / 8, rel=1e-9)
    # bf16 weights: 2 bytes per parameter of the stage (plus what Megatron does not shard over tp)
    assert m[1].weights - m[2].weights == 0
    assert m[0].weights < m[1].weights        # one layer (1.6 B / 8 parameters) more than the embedding shard


def test_compute_per_stage_and_slowest_stage_bounds(spec405):
    costs = default_costs(spec405.cluster)
    u = C(8, 16, 2, 1, 256, "1f1b", recompute="full", zero=1, sequence_parallel=True,
          first_stage_layers=7, last_stage_layers=7)
    st = stage_times(spec405, u, costs)
    per_layer = st[1].forward / 8
    assert st[2].forward == pytest.approx(8 * per_layer)
    assert st[0].forward > 7 * per_layer and st[0].forward < 8 * per_layer      # 7 layers + the embedding
    assert st[15].forward > 7 * per_layer                                         # 7 layers + output layer, loss
    est = estimate_plan(spec405, u)[0]
    assert est.iteration_s > 0 and est.fits
    # the bubble-free part is bounded by the slowest stage
    slowest = max(s.forward + s.backward for s in st)
    assert est.compute_s >= u.num_microbatches * slowest


def test_405b_pp16_uneven_is_legal_and_estimates(spec405):
    cfgs = [c for c in enumerate_configs(spec405) if c.pp == 16]
    assert C(8, 16, 2, 1, 256, "1f1b", 1, "full", 1, True, 7, 7) in cfgs
    assert all(c.uneven for c in cfgs)           # 126 layers: no even split on pp 16


def test_even_split_estimate_is_unchanged_by_the_knob(spec13):
    """Even splits give the same numbers whether uneven splits are searched or not (they are the same function)."""
    cfg = C(8, 4, 4, 1, 128, "1f1b", recompute="selective")
    a = estimate_plan(spec13, cfg)[0]
    off = dataclasses.replace(spec13, search=dataclasses.replace(spec13.search, uneven_stages=()))
    b = estimate_plan(off, cfg)[0]
    assert a.iteration_s == b.iteration_s and a.memory == b.memory


# ---- simulator

def _estimate(spec, cfg):
    layout = default_layout(cfg, spec.cluster.gpus_per_node)
    prob = build_problem(spec, cfg, layout)
    return evaluate(spec, cfg, prob, prob.rank_order())


@pytest.mark.parametrize("cfg", [
    C(8, 4, 4, 1, 128, "1f1b", first_stage_layers=9, last_stage_layers=9),
    C(8, 4, 4, 1, 128, "1f1b", first_stage_layers=11, last_stage_layers=9),
    C(8, 4, 4, 1, 128, "interleaved", 2, first_stage_layers=8, last_stage_layers=8),
    C(8, 4, 4, 1, 128, "zb-h1", first_stage_layers=9, last_stage_layers=9),
])
def test_simulator_agrees_on_uneven_plans(spec13, cfg):
    sim = simulate(spec13, cfg)
    est = _estimate(spec13, cfg)
    assert abs(agreement(sim, est)) <= 0.05, (cfg.label(), sim.iteration_s, est.iteration_s)


def test_simulator_memory_equals_estimator_1f1b_uneven(spec13):
    cfg = C(8, 4, 4, 1, 128, "1f1b", first_stage_layers=9, last_stage_layers=9)
    sim = simulate(spec13, cfg)
    est = _estimate(spec13, cfg)
    assert sim.peak_memory_GiB == pytest.approx([m.total / GiB for m in est.memory], rel=1e-9)


def test_simulator_places_layers_per_chunk(spec405):
    """Accounted embedding and loss on the interleaved schedule: the layers are where Megatron-Core builds them, so
    the busiest device is a middle one, and the simulation agrees with the estimate."""
    cfg = C(8, 8, 4, 1, 128, "interleaved", 2, "full", 1, True, account_embedding=True, account_loss=True)
    sim = simulate(spec405, cfg)
    est = _estimate(spec405, cfg)
    assert abs(agreement(sim, est)) <= 0.05, (sim.iteration_s, est.iteration_s)


def test_simulator_refuses_a_split_megatron_refuses(spec13):
    with pytest.raises(ValueError):
        simulate(spec13, C(8, 4, 4, 1, 128, "1f1b", last_stage_layers=9))


# ---- search space and spec knob

def test_uneven_splits_are_few_and_legal():
    for L in (24, 40, 70, 80, 96, 126):
        for pp in (2, 3, 4, 6, 8, 12, 16, 32):
            for c in (1, 2, 3, 4):
                sp = uneven_splits(L, pp, c, (0, 1, 2))
                assert len(sp) <= 9
                for s in sp:
                    assert sum(split_layers(L, pp, c, *s)) == L
    assert (7, 7, False, False) in uneven_splits(126, 16, 1, (0, 1, 2))
    assert (5, 5, False, False) in uneven_splits(70, 12, 1, (0, 1, 2))
    assert uneven_splits(126, 16, 1, ()) == []
    assert uneven_splits(126, 16, 1, (1,)) == [(7, 7, False, False)]


def test_space_grows_by_a_bounded_factor(spec13):
    big = planner.load_spec(os.path.join(ROOT, "specs/gpt3-13b-a100-het-128.yaml"))
    n = sum(1 for _ in enumerate_configs(big))
    off = dataclasses.replace(big, search=dataclasses.replace(big.search, uneven_stages=()))
    n0 = sum(1 for _ in enumerate_configs(off))
    assert not any(c.uneven for c in enumerate_configs(off))
    assert n0 < n <= 2.5 * n0


def _spec_with(tmp_path, value):
    p = tmp_path / "s.yaml"
    p.write_text(f"model: {ROOT}/models/gpt3-13b.yaml\ncluster: {ROOT}/clusters/a100-16x8-hdr.yaml\n"
                 "training: {global_batch_size: 512, seq_length: 2048}\n"
                 f"search: {{uneven_stages: {value}}}\n")
    return str(p)


@pytest.mark.parametrize("value,want", [("auto", (0, 1, 2)), ("none", ()), ("[1]", (1,)), ("[2, 0]", (0, 2))])
def test_spec_knob(tmp_path, value, want):
    assert load_spec(_spec_with(tmp_path, value)).search.uneven_stages == want


@pytest.mark.parametrize("value", ["sometimes", "[-1]", "[9]", "[true]", "3"])
def test_spec_knob_refusals(tmp_path, value):
    with pytest.raises(SpecError) as e:
        load_spec(_spec_with(tmp_path, value))
    assert "uneven_stages" in str(e.value.field)


# ---- export

def test_export_flags():
    sol = {"config": C(8, 16, 2, 1, 256, first_stage_layers=7, last_stage_layers=7).as_dict()}
    a = megatron_args(sol)
    assert "--decoder-first-pipeline-num-layers 7" in a and "--decoder-last-pipeline-num-layers 7" in a
    sol = {"config": C(8, 8, 2, 1, 256, "interleaved", 2, account_embedding=True, account_loss=True).as_dict()}
    a = megatron_args(sol)
    assert "--account-for-embedding-in-pipeline-split" in a and "--account-for-loss-in-pipeline-split" in a
    assert "--num-virtual-stages-per-pipeline-rank 2" in a
    even = megatron_args({"config": C(8, 8, 2, 1, 256, "interleaved", 2).as_dict()})
    assert not any("pipeline-num-layers" in x or "account-for" in x for x in even)


def test_estimate_divisibility_errors_point_to_what_would_work(make_spec):
    """pp not dividing the layers: the error names --first-stage-layers / --last-stage-layers for 1F1B, and for a
    V-shape (two equal chunks per stage, no uneven split) says to choose another pp or schedule."""
    from planner.config import ParallelConfig
    from planner.errors import SpecError
    from planner.search.solve import check_config
    spec = make_spec(nodes=1, gpn=8, layers=30, gbs=8)
    with pytest.raises(SpecError, match="--first-stage-layers") as e:
        check_config(spec, ParallelConfig(1, 4, 2, 1, 4, "1f1b", 1, "none", 0, False))
    assert "must divide 30 layers" in str(e.value)
    with pytest.raises(SpecError, match="V-shape schedules hold two equal chunks"):
        check_config(spec, ParallelConfig(1, 4, 2, 1, 4, "v-half", 2, "none", 0, False))


def test_unequal_chunks_hold_their_own_bytes():
    """An accounted embedding / loss makes one chunk of the end ranks a layer shorter; the interleaved warm-up holds
    the first chunk most, so the rank's mean chunk misjudged them (the 405B plan's last rank, chunks of 2 and 1 layers:
    27.9 GiB estimated against the replay's 36.7). The estimate now counts each held forward at its chunk's bytes and
    agrees with the replay on both end ranks."""
    import yaml

    import planner
    from planner.config import ParallelConfig
    from planner.search.solve import estimate_plan
    spec = planner.load_spec("specs/llama3-405b-h100-fsdp-512.yaml")
    cfg = ParallelConfig.from_dict(yaml.safe_load(open("solutions/llama3-405b-h100-fsdp-512.yaml"))["config"])
    assert cfg.account_embedding and cfg.account_loss and cfg.chunks == 2
    est, lay, assign, prob = estimate_plan(spec, cfg)
    sim = planner.simulate(spec, cfg, layout=lay, assign=assign, nodes=prob.nodes)
    for s in (0, cfg.pp - 1):
        assert est.memory[s].total / 2**30 == pytest.approx(sim.peak_memory_GiB[s], rel=0.02)
