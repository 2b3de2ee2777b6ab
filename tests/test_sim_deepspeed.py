"""DeepSpeed's pipeline engine (planner/simulate/deepspeed.py) and its closed form (schedules.p2p_hops)."""
import dataclasses
import os

import numpy as np
import pytest

from planner.config import ParallelConfig
from planner.costs.pipeline import p2p_hops
from planner.errors import SpecError
from planner.simulator import simulate, simulate_uniform
from planner.simulator.deepspeed import step_to_microbatch
from planner.spec.plan import parse_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "x.yaml")      # relative parts resolve against the repository root
GRID = [(2, 1), (2, 8), (3, 12), (4, 4), (4, 16), (5, 3), (8, 8), (8, 32), (16, 4), (16, 64)]


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7, 8])
def test_step_mapping_is_deepspeeds_1f1b(p):
    """Every forward and backward once, F(k) at step 2k + s and B(k) at 2k + 2p - 1 - s, in 2(m + p - 1) steps."""
    m = 5
    for s in range(p):
        seen = {}
        for t in range(2 * (m + p - 1)):
            k, fwd = step_to_microbatch(t, s, p)
            if 0 <= k < m:
                assert (k, fwd) not in seen
                seen[(k, fwd)] = t
        assert len(seen) == 2 * m
        for k in range(m):
            assert seen[(k, True)] == 2 * k + s and seen[(k, False)] == 2 * k + 2 * p - 1 - s


@pytest.mark.parametrize("p,m", GRID)
def test_no_communication_is_plain_1f1b(p, m):
    ds = simulate_uniform("1f1b", p, m, f=1.0, b=2.0, pipeline_engine="deepspeed")
    assert ds.iteration_s == pytest.approx((m + p - 1) * 3.0)
    assert ds.iteration_s == pytest.approx(simulate_uniform("1f1b", p, m, f=1.0, b=2.0).iteration_s)


@pytest.mark.parametrize("p,m", GRID)
def test_closed_form_hops_exact_on_uniform_stages(p, m):
    c = 0.05
    t0 = simulate_uniform("1f1b", p, m, f=1.0, b=2.0, pipeline_engine="deepspeed").iteration_s
    t1 = simulate_uniform("1f1b", p, m, f=1.0, b=2.0, comm=c, pipeline_engine="deepspeed").iteration_s
    trav, wraps = p2p_hops("1f1b", p, 1, m, "deepspeed")
    assert wraps == 0
    assert (m / p) * trav * (p - 1) * 2 * c == pytest.approx(t1 - t0)


@pytest.mark.parametrize("p,m", GRID)
def test_walk_is_the_replay_and_the_closed_form_on_uniform_stages(p, m):
    """lockstep.deepspeed_time runs the replay's streams: on uniform stages and hops its added time is the closed
    form's 4m + 2(p - 4) (2m at p = 2) one-way hops wherever that is exact (m >= 2)."""
    from planner.costs.lockstep import deepspeed_time
    c = 0.05
    f, b = [1.0] * p, [2.0] * p
    t1 = simulate_uniform("1f1b", p, m, f=1.0, b=2.0, comm=c, pipeline_engine="deepspeed").iteration_s
    t0 = simulate_uniform("1f1b", p, m, f=1.0, b=2.0, pipeline_engine="deepspeed").iteration_s
    if p > 1:
        assert deepspeed_time(f, b, m, c) - deepspeed_time(f, b, m) == pytest.approx(t1 - t0)
    if p > 1 and m >= 2:
        assert deepspeed_time(f, b, m, c) - deepspeed_time(f, b, m) == pytest.approx(
            (2 * m if p == 2 else 4 * m + 2 * (p - 4)) * c)


def test_walk_hides_transfers_behind_a_heavier_stage():
    """A heavier last stage paces; the interior stages' four transfers a micro-batch fit in their slack, so the walk
    charges fewer hops than the closed form, and per boundary: alternating NVLink / network hops (two stages a node)
    are not their mean."""
    from planner.costs.lockstep import deepspeed_time
    p, m = 8, 16
    f, b = [1.0] * (p - 1) + [1.6], [2.0] * (p - 1) + [3.2]
    c = [0.001 if j % 2 == 0 else 0.1 for j in range(p - 1)]
    added = deepspeed_time(f, b, m, c) - deepspeed_time(f, b, m)
    assert added < (4 * m + 2 * (p - 4)) * sum(c) / len(c) / 2
    assert added != pytest.approx(deepspeed_time(f, b, m, sum(c) / len(c)) - deepspeed_time(f, b, m))


def test_fuzz_case_with_a_heavier_last_stage_agrees():
    """The fuzz of valid plans, seed 8 case 304 (pp 32 on 16 V100 nodes, first / last stage one layer, m 16): the
    closed form was +9.39% over the replay; the walk at the typical hops within 2%."""
    import benchmarks.fuzz_plans as fz
    from planner.costs import default_costs
    from planner.search.solve import estimate_plan
    from planner.simulator import agreement
    case = fz.draw(8, 304)
    spec = fz._spec(case["data"], case["spec"])
    cfg = ParallelConfig.from_dict(case["cfg"], None, "config")
    assert spec.training.pipeline_engine == "deepspeed" and cfg.pp == 32
    costs = default_costs(spec.cluster)
    est, lay, assign, prob = estimate_plan(spec, cfg, costs=costs)
    sim = simulate(spec, cfg, costs=costs, layout=lay, assign=assign, nodes=prob.nodes)
    assert abs(agreement(sim, est)) < 0.02


def test_rendezvous_holds_both_devices():
    """pp = 2, one micro-batch: F on stage 0, the activation (sent at stage 0's next step), F and B on stage 1,
    the gradient, B on stage 0: every transfer on the critical path, once."""
    f, b, c = 1.0, 2.0, 0.3
    r = simulate_uniform("1f1b", 2, 1, f=f, b=b, comm=c, pipeline_engine="deepspeed")
    assert r.iteration_s == pytest.approx(2 * f + 2 * b + 2 * c)
    # steady state of an interior stage: f + b + 4 transfers per micro-batch (Megatron's model: sends overlap)
    long = [simulate_uniform("1f1b", 4, m, f=f, b=b, comm=c, pipeline_engine="deepspeed").iteration_s
            for m in (40, 41)]
    assert long[1] - long[0] == pytest.approx(f + b + 4 * c)
    mega = [simulate_uniform("1f1b", 4, m, f=f, b=b, comm=c).iteration_s for m in (40, 41)]
    assert mega[1] - mega[0] < long[1] - long[0]


def test_only_1f1b():
    with pytest.raises(ValueError, match="1F1B"):
        p2p_hops("interleaved", 4, 2, 8, "deepspeed")
    with pytest.raises(ValueError, match="1F1B"):
        simulate_uniform("interleaved", 4, 8, 2, pipeline_engine="deepspeed")
    with pytest.raises(ValueError, match="variants of Megatron"):
        simulate_uniform("1f1b", 4, 8, rendezvous_p2p=True, pipeline_engine="deepspeed")
    with pytest.raises(ValueError, match="unknown pipeline engine"):
        simulate_uniform("1f1b", 4, 8, pipeline_engine="colossal")


def _spec_data(engine, schedules=("1f1b",)):
    return {"name": "t", "model": "models/gpt3-13b.yaml", "cluster": "clusters/a100-16x8-hdr.yaml",
            "training": {"global_batch_size": 256, "seq_length": 2048, "pipeline_engine": engine},
            "search": {"schedules": list(schedules)}}


def test_spec_field_validated():
    spec = parse_spec(_spec_data("deepspeed"), SPEC)
    assert spec.training.pipeline_engine == "deepspeed"
    assert parse_spec({**_spec_data("megatron"), "training": {"global_batch_size": 256, "seq_length": 2048}},
                      SPEC).training.pipeline_engine == "megatron"
    with pytest.raises(SpecError, match="search.schedules"):
        parse_spec(_spec_data("deepspeed", ("1f1b", "zb-h1")), SPEC)
    zero2 = _spec_data("deepspeed")
    zero2["search"]["zero"] = [1, 2]
    with pytest.raises(SpecError, match="search.zero"):
        parse_spec(zero2, SPEC)
    with pytest.raises(SpecError, match="pipeline_engine"):
        parse_spec(_spec_data("pytorch-pp"), SPEC)


def test_real_plan_engines_agree_without_pipeline_and_differ_with_it():
    spec = parse_spec(_spec_data("deepspeed"), SPEC)
    # Megatron's engine with DeepSpeed's message (1/tp without sequence parallelism, pipe_partitioned; Megatron-Core
    # would send the whole tensor): the engines then differ only in how they issue the p2p
    mega = dataclasses.replace(spec, training=dataclasses.replace(spec.training, pipeline_engine="megatron",
                                                                  p2p_scatter_gather=True))
    flat = ParallelConfig(8, 1, 16, 1, 16, "1f1b", 1, "full", 0, False)
    assert simulate(spec, flat).iteration_s == pytest.approx(simulate(mega, flat).iteration_s)
    deep = ParallelConfig(8, 4, 4, 1, 64, "1f1b", 1, "full", 0, False)
    ds, mg = simulate(spec, deep), simulate(mega, deep)
    assert ds.iteration_s > mg.iteration_s
    # the kwarg overrides the spec's p2p issuance (the message size stays the spec's, training.p2p_scatter_gather);
    # memory depends on the engine only through the gradient buffer: DeepSpeed's is fp32, Megatron-Core's follows
    # grad_reduce_in_fp32 (costs/memory.py grad_buffer_bytes)
    assert simulate(spec, deep, pipeline_engine="megatron").iteration_s == pytest.approx(mg.iteration_s)
    mega32 = dataclasses.replace(mega, training=dataclasses.replace(mega.training, grad_reduce_in_fp32=True))
    assert np.allclose(ds.peak_memory_GiB, simulate(mega32, deep).peak_memory_GiB)
    assert all(d > m for d, m in zip(ds.peak_memory_GiB, mg.peak_memory_GiB))


def test_export_says_which_engine_the_plan_is_for():
    from planner.export import megatron_args
    cfg = {"tp": 8, "pp": 4, "micro_batch_size": 1, "num_microbatches": 64, "dp": 4, "schedule": "1f1b"}
    assert any("--deepspeed" in a for a in megatron_args({"config": cfg, "pipeline_engine": "deepspeed"}))
    assert not any("--deepspeed" in a for a in megatron_args({"config": cfg, "pipeline_engine": "megatron"}))


def test_cli_engine_flag(capsys):
    import json

    from planner.cli.main import main
    spec = os.path.join(ROOT, "specs", "gpt3-13b-a100-128.yaml")
    # sequence parallel: both engines send 1/tp of the stage output (without it Megatron-Core sends the whole tensor,
    # DeepSpeed 1/tp), so the p2p times differ only by how each engine issues them
    flags = ["--tp", "8", "--pp", "4", "--dp", "4", "--mbs", "1", "--sp", "--json"]
    out = {}
    for engine in ("megatron", "deepspeed"):
        assert main(["estimate", spec, *flags, "--pipeline-engine", engine]) == 0
        out[engine] = json.loads(capsys.readouterr().out)
    assert out["deepspeed"]["pipeline_engine"] == "deepspeed"
    assert out["deepspeed"]["estimate"]["pp_comm_s"] > out["megatron"]["estimate"]["pp_comm_s"]
    assert main(["simulate", spec, *flags, "--pipeline-engine", "deepspeed", "--schedule", "zb-h1"]) == 2
    assert "--schedule" in capsys.readouterr().err
