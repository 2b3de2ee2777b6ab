"""`recompute: block`, Megatron-Core's `--recompute-granularity full --recompute-method block --recompute-num-layers N`:
the first N layers of each model chunk rebuilt from their input, the rest storing everything. What it stores (against
real PyTorch checkpointing of the profiler's layers), what it re-runs, how the search picks N, and export / import."""
import dataclasses

import numpy as np
import pytest
from test_memory_profile import TR, _model

import planner
from planner.config import ParallelConfig as C
from planner.config import torchtitan_problem
from planner.costs import default_costs
from planner.costs.iteration import memory_limit_GiB, stage_memory, stage_times
from planner.costs.memory import (
    GiB,
    block_transient_bytes,
    layer_transient_bytes,
    stage_stored_bytes,
    stored_layer_bytes,
)
from planner.errors import SpecError
from planner.export import deepspeed_recompute_note, megatron_args, nemo_model
from planner.profile.memory import measure_stage, stage_peak_estimate
from planner.search.screen import block_layers, feasible_configs
from planner.search.solve import check_config
from planner.search.space import enumerate_configs, space_key
from planner.simulator import simulate
from planner.simulator.ops import R


def _none(cfg):
    return dataclasses.replace(cfg, recompute="none", recompute_layers=None)


def _full(cfg):
    return dataclasses.replace(cfg, recompute="full", recompute_layers=None)


@pytest.mark.parametrize("family,kv,tp,sp,sched,v", [("llama", 4, 4, True, "1f1b", 1),
                                                     ("gpt", 16, 2, False, "interleaved", 2)])
def test_profiled_checkpoint_stores_and_peaks_as_counted(family, kv, tp, sp, sched, v):
    """The fake-tensor profiler checkpoints the first N layers of each chunk with torch.utils.checkpoint: a stage's
    stored bytes per held forward and its peak are the analytical ones. The working set is the stage's
    (block_transient_bytes): full recompute's less the chunk's stored layers, freed by the time the checkpointed ones
    run their backward; with the larger of full's and none's the first stage came out 156 MiB (6%) over."""
    lpc, pp = 3, 2
    model = _model(family, pp * v * lpc, kv)
    for n in (1, 2):
        cfg = C(tp, pp, 1, 2, 4, sched, v, recompute="block", sequence_parallel=sp, recompute_layers=n)
        per_layer = stored_layer_bytes(model, TR, _none(cfg)) - stored_layer_bytes(model, TR, _full(cfg))
        for stage in (0, 1):
            r = measure_stage(model, TR, cfg, stage, lpc)
            base = measure_stage(model, TR, _none(cfg), stage, lpc)
            # n layers per chunk stored as full recompute's instead of none's, per held forward
            assert (base.after_forward - r.after_forward) / r.held_forwards == pytest.approx(n * per_layer, rel=1e-3)
            assert stage_stored_bytes(model, TR, cfg, stage) == pytest.approx(
                stage_stored_bytes(model, TR, _none(cfg), stage) - n * v * per_layer, rel=1e-12)
            err = stage_peak_estimate(model, TR, cfg, stage, lpc) - r.peak_allocated
            if stage == 1:
                assert abs(err) <= 2e-3 * r.peak_allocated
            else:      # the first stage: exactly the no-recompute estimate's own error (its embedding's terms)
                err0 = stage_peak_estimate(model, TR, _none(cfg), stage, lpc) - base.peak_allocated
                assert err == pytest.approx(err0, abs=2**20)


@pytest.fixture(scope="module")
def spec():
    return planner.load_spec("specs/llama3-70b-h100-256.yaml")


def _cfg(rc, n=None, **kw):
    kw = {"schedule": "1f1b", **kw}
    return C(8, 4, 8, 1, 128, recompute=rc, sequence_parallel=True, recompute_layers=n, **kw)


def test_memory_between_none_and_full(spec):
    """Each chunk stores min(N, layers) layers as full recompute's and the rest as none's; N >= a chunk's layers is
    full recompute; the working set is the larger of the two modes'."""
    m, tr = spec.model, spec.training
    L = m.num_layers // 4
    per = {n: stage_stored_bytes(m, tr, _cfg("block", n), 1) for n in range(1, L + 2)}
    assert all(per[n + 1] < per[n] for n in range(1, L))
    assert per[L] == pytest.approx(stage_stored_bytes(m, tr, _full(_cfg("none")), 1))
    assert per[L + 1] == per[L]
    assert per[3] == pytest.approx(3 * stored_layer_bytes(m, tr, _cfg("full")) + (L - 3) * stored_layer_bytes(
        m, tr, _cfg("none")))
    full_t, none_t = layer_transient_bytes(m, tr, _cfg("full")), layer_transient_bytes(m, tr, _cfg("none"))
    assert layer_transient_bytes(m, tr, _cfg("block", 3)) == max(full_t, none_t)      # without a stage: the bound
    # on a stage: full's once the chunk's L - N stored layers are freed, no less than none's
    assert block_transient_bytes(m, tr, _cfg("block", 3), 1) == max(
        none_t, full_t - (L - 3) * stored_layer_bytes(m, tr, _cfg("none")))
    assert block_transient_bytes(m, tr, _cfg("block", L), 1) == full_t
    # fp8: the stored layers carry TE's fp8 GEMM inputs, the checkpointed ones only their bf16 input
    fp8 = dataclasses.replace(tr, precision="fp8")
    assert stage_stored_bytes(m, fp8, _cfg("block", 3), 1) == pytest.approx(
        3 * stored_layer_bytes(m, fp8, _cfg("full")) + (L - 3) * stored_layer_bytes(m, fp8, _cfg("none")))
    # the estimator's stage: between none and full, full at N = L
    costs = default_costs(spec.cluster)
    mem = {(rc if n is None else (rc, n)): [x.total for x in stage_memory(spec, _cfg(rc, n), costs)]
           for rc, n in (("none", None), ("block", 3), ("block", L), ("full", None))}
    assert all(f < b < n for f, b, n in zip(mem["full"], mem[("block", 3)], mem["none"]))
    assert mem[("block", L)] == pytest.approx(mem["full"], rel=1e-12)


def test_chunks_recompute_their_first_n_layers():
    """Per model chunk (Megatron-Core's TransformerBlock of each virtual stage): min(N, chunk layers), uneven and
    accounted splits included."""
    cfg = C(1, 4, 1, 1, 8, "interleaved", 2, recompute="block", recompute_layers=3, account_embedding=True)
    assert cfg.chunk_layers(31) == ((3, 4), (4, 4), (4, 4), (4, 4))      # the embedding in a layer's place
    assert cfg.recomputed_chunk_layers(31) == ((3, 3), (3, 3), (3, 3), (3, 3))
    u = C(1, 4, 1, 1, 8, "1f1b", recompute="block", recompute_layers=5, first_stage_layers=2, last_stage_layers=6)
    assert u.recomputed_chunk_layers(32) == ((2,), (5,), (5,), (5,))
    assert _full(u).recomputed_chunk_layers(32) == u.chunk_layers(32)
    assert _none(u).recomputed_chunk_layers(32) == ((0,), (0,), (0,), (0,))


def test_time_reruns_the_first_n_layers(spec):
    """Block re-runs full recompute's per-layer forward on min(N, layers) layers of each chunk: the recompute, the
    backward's share and the re-run TP collectives (less what TP overlap hides of them) scale with N."""
    costs = default_costs(spec.cluster)
    L = spec.model.num_layers // 4
    none, full = stage_times(spec, _cfg("none"), costs), stage_times(spec, _cfg("full"), costs)
    for n in (1, 3, L):
        st = stage_times(spec, _cfg("block", n), costs)
        for i in range(4):
            assert st[i].recompute == pytest.approx(n / L * full[i].recompute, rel=1e-12)
            assert st[i].backward == pytest.approx(none[i].backward + st[i].recompute, rel=1e-12)
            assert st[i].forward == none[i].forward
            assert st[i].tp_comm - none[i].tp_comm == pytest.approx(n / L * (full[i].tp_comm - none[i].tp_comm))
    assert stage_times(spec, _cfg("block", L), costs) == full


def test_context_parallel_exchange_reruns_with_the_recomputed_layers():
    spec = planner.load_spec("specs/llama3-8b-128k-h100-32.yaml")
    costs = default_costs(spec.cluster)
    cfg = C(2, 2, 1, 1, spec.training.global_batch_size, recompute="block", recompute_layers=4, cp=8)
    check_config(spec, cfg)
    full, none, st = (stage_times(spec, c, costs) for c in (_full(cfg), _none(cfg), cfg))
    L = spec.model.num_layers // 2
    for i in range(2):
        assert st[i].cp_backward - none[i].cp_backward == pytest.approx(4 / L * (full[i].cp_backward
                                                                                  - none[i].cp_backward))
        assert st[i].recompute == pytest.approx(4 / L * full[i].recompute)


def test_simulator_recomputes_n_layers_per_chunk():
    """Each R op carries its chunk's min(N, layers) re-run layers (uneven chunks: 4 on the first and last stages'
    chunks, 6 on the middle ones, N = 5), and block's iteration lies between no recompute's and full's; the 1F1B
    memory equality is tests/test_sim_engine.py's."""
    spec = planner.load_spec("specs/gpt3-13b-a100-128.yaml")
    costs = default_costs(spec.cluster)
    cfg = C(8, 4, 4, 1, 128, "interleaved", 2, recompute="block", recompute_layers=5, first_stage_layers=8,
            last_stage_layers=8)
    assert cfg.recomputed_chunk_layers(40) == ((4, 4), (5, 5), (5, 5), (4, 4))
    sim = simulate(spec, cfg, costs=costs)
    per_layer = stage_times(spec, _full(cfg), costs)[1].recompute / 12       # a middle stage's 12 layers
    r = sim.op_kind == R
    dur = (sim.op_end - sim.op_start)[r]
    want = np.array(cfg.recomputed_chunk_layers(40), float)[sim.op_dev[r], sim.op_chunk[r]] * per_layer
    assert dur == pytest.approx(want, rel=1e-9)
    assert simulate(spec, _none(cfg), costs=costs).iteration_s < sim.iteration_s
    assert sim.iteration_s < simulate(spec, _full(cfg), costs=costs).iteration_s


def test_config_field():
    cfg = C(2, 2, 2, 1, 8, recompute="block", recompute_layers=3)
    d = cfg.as_dict()
    assert d["recompute_layers"] == 3 and C.from_dict(d) == cfg
    assert "rc=block3" in cfg.label()
    assert "recompute_layers" not in _full(cfg).as_dict() and "rc=full " in _full(cfg).label()
    assert list(C.__dataclass_fields__)[-1] == "recompute_layers"      # positional fields keep their places
    base = {k: v for k, v in d.items() if k != "recompute_layers"}
    for bad, words in (({**base}, "is required"), ({**d, "recompute_layers": 0}, "positive"),
                       ({**d, "recompute": "full"}, "takes none"), ({**d, "recompute_layers": "x"}, "bad value")):
        with pytest.raises(SpecError) as e:
            C.from_dict(bad, "s.yaml")
        assert words in str(e.value)
        assert "recompute_layers" in str(e.value) or "bad value" in words


@pytest.mark.parametrize("bad", [2.5, float("inf"), float("nan"), True])
def test_layer_counts_from_a_file_are_whole_numbers(bad):
    """A solution's recompute_layers (or first / last stage layers) of 2.5 was read as 2 and .inf raised
    OverflowError (a traceback): both are bad input naming the field."""
    d = C(2, 2, 2, 1, 8, recompute="block", recompute_layers=3).as_dict()
    for key in ("recompute_layers", "first_stage_layers"):
        with pytest.raises(SpecError) as e:
            C.from_dict({**d, key: bad}, "s.yaml")
        assert f"config.{key}" in str(e.value) and "s.yaml" in str(e.value)
    assert C.from_dict({**d, "recompute_layers": 3.0}).recompute_layers == 3     # a whole float is the count


def test_search_picks_the_fewest_n_that_fits(spec):
    """Screening resolves each enumerated block configuration (N unset) to the fewest N whose stages fit: N - 1
    does not (or, at N = 1, no recompute does not and `none` is in the space); configurations whose no-recompute
    twin fits, or where no N below the chunk size fits, carry no block."""
    sp = dataclasses.replace(spec, search=dataclasses.replace(spec.search, recompute=("none", "block", "full"),
                                                              schedules=("1f1b",)))
    costs = default_costs(sp.cluster)
    enumerated = [c for c in enumerate_configs(sp) if c.recompute == "block"]
    assert enumerated and all(c.recompute_layers is None for c in enumerated)
    fits, _, _ = feasible_configs(sp, costs)
    blocks = [c for _, c in fits if c.recompute == "block"]
    assert blocks
    limit = memory_limit_GiB(sp)

    def peak(c):
        return max(m.total for m in stage_memory(sp, c, costs)) / GiB

    for c in blocks:
        assert space_key(c) in set(enumerated)
        assert peak(c) <= limit
        below = dataclasses.replace(c, recompute_layers=c.recompute_layers - 1) if c.recompute_layers > 1 else _none(c)
        assert peak(below) > limit
        assert c.recompute_layers < max(map(max, c.chunk_layers(sp.model.num_layers)))
    # every fitting none config has no block twin
    nones = {space_key(dataclasses.replace(c, recompute="block")) for _, c in fits if c.recompute == "none"}
    assert not nones & {space_key(c) for c in blocks}
    # without none in the space, N = 1 is kept where it fits
    only = dataclasses.replace(sp, search=dataclasses.replace(sp.search, recompute=("block",)))
    c = next(c for c in enumerated if peak(_none(c)) <= limit)
    assert block_layers(only, c, costs).recompute_layers == 1
    assert block_layers(sp, c, costs) is None


def test_one_layer_chunks_leave_block_to_full():
    spec = planner.load_spec("specs/gpt3-13b-a100-128.yaml")
    sp = dataclasses.replace(spec, search=dataclasses.replace(spec.search, recompute=("block",), uneven_stages=(),
                                                              pipeline_parallel=(8,), schedules=("interleaved",),
                                                              virtual_stages=(5,)))     # 40 layers: 1 per chunk
    dropped: dict = {}
    assert not list(enumerate_configs(sp, dropped=dropped))
    assert "search.recompute" in dropped and "full recompute" in dropped["search.recompute"][1]


def test_megatron_baseline_and_pinned_import_treat_block_by_its_n(spec):
    from planner.search.compare import megatron_config
    costs = default_costs(spec.cluster)
    sp = dataclasses.replace(spec, search=dataclasses.replace(spec.search, recompute=("block",)))
    cfg = megatron_config(sp, costs)
    assert cfg is not None and cfg.recompute == "block" and cfg.recompute_layers >= 1
    assert max(m.total for m in stage_memory(sp, cfg, costs)) / GiB <= memory_limit_GiB(sp)
    assert space_key(cfg) in set(enumerate_configs(sp))


def test_export_and_refusals(spec):
    cfg = _cfg("block", 5)
    sol = {"config": cfg.as_dict()}
    line = " ".join(megatron_args(sol))
    assert "--recompute-granularity full --recompute-method block --recompute-num-layers 5" in line
    nemo = nemo_model(sol, cfg.as_dict(), None)
    assert 'recompute_method = "block"' in nemo and "recompute_num_layers = 5" in nemo
    assert 'recompute_granularity = "full"' in nemo
    assert "first 5 transformer layers" in deepspeed_recompute_note(sol)
    # a ZeRO-3 plan's block is torchtitan's per-layer SAC (tests/test_layer_sac.py): accepted; a ZeRO 0-2 plan's
    # block (Megatron-Core's first N of each chunk) has no torchtitan form, so the torchtitan export refuses it
    check_config(spec, C(8, 4, 8, 1, 128, recompute="block", recompute_layers=2, zero=3, sequence_parallel=True))
    why = torchtitan_problem(cfg)
    assert why is not None and why[0] == "recompute" and "block" in why[1]


def test_cli_flag(tmp_path, capsys, spec):
    """--recompute-layers reaches the estimate: the configuration carries N and the iteration is the library's for
    that N (a flag read but dropped would cost N unset, i.e. nothing recomputed)."""
    import json

    from planner.cli.main import main
    from planner.search.solve import estimate_plan
    flags = ["estimate", "specs/llama3-70b-h100-256.yaml", "--tp", "8", "--pp", "4", "--dp", "8", "--mbs", "1", "--sp",
             "--recompute", "block", "--json"]
    got = {}
    for n in (1, 3):
        assert main(flags + ["--recompute-layers", str(n)]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["config"]["recompute"] == "block" and d["config"]["recompute_layers"] == n
        got[n] = d["estimate"]["iteration_s"]
        assert got[n] == pytest.approx(estimate_plan(spec, _cfg("block", n))[0].iteration_s, rel=1e-9)
    assert got[1] < got[3]
    rc = main(["estimate", "specs/llama3-70b-h100-256.yaml", "--tp", "8", "--pp", "4", "--dp", "8", "--mbs", "1",
               "--sp", "--recompute", "block"])
    assert rc == 2 and "--recompute-layers" in capsys.readouterr().err


@pytest.mark.parametrize("rc,n", [("mlp", None), ("block", 2)])
def test_deepspeed_engine_has_neither_mode(spec, capsys, rc, n):
    """pipeline_engine deepspeed is Megatron-DeepSpeed's GPTModelPipe: it turns --recompute-method block into no
    checkpointing at all and has no --recompute-modules (microsoft/Megatron-DeepSpeed @ f4157bea
    megatron/model/gpt_model.py: 'deepspeed's pipeline doesn't support the block recompute method', interval 0;
    megatron/arguments.py). The search leaves both out of such a spec (saying why), and a given plan is refused."""
    from plan_fixtures import with_training

    from planner.cli.main import main
    ds = with_training(spec, pipeline_engine="deepspeed")
    ds = dataclasses.replace(ds, search=dataclasses.replace(ds.search, schedules=("1f1b",), zero=(0, 1)))
    got = {c.recompute for c in enumerate_configs(ds)}
    assert got and not got & {"mlp", "block"}
    only = dataclasses.replace(ds, search=dataclasses.replace(ds.search, recompute=(rc,)))
    dropped: dict = {}
    assert not list(enumerate_configs(only, dropped=dropped))
    assert "deepspeed" in dropped["search.recompute"][1]
    with pytest.raises(SpecError, match="--recompute"):
        check_config(ds, C(8, 4, 8, 1, 128, recompute=rc, sequence_parallel=True, recompute_layers=n))
    flags = ["estimate", "specs/llama3-70b-h100-256.yaml", "--tp", "8", "--pp", "4", "--dp", "8", "--mbs", "1", "--sp",
             "--recompute", rc, "--pipeline-engine", "deepspeed"] + (["--recompute-layers", str(n)] if n else [])
    assert main(flags) == 2 and "--recompute" in capsys.readouterr().err


def test_batch_table_names_block_n():
    """The batch table's rc/z column says block's N as the label does (rc=block3), not a bare `block`."""
    import contextlib
    import io

    from planner.cli.batch import results_table
    from planner.report import console
    row = {"model": "m", "params": 7e9, "cluster": "c", "gpus": 64, "precision": "bf16", "tp": 8, "pp": 4, "dp": 2,
           "micro_batch_size": 1, "schedule": "1f1b", "recompute": "block", "recompute_layers": 3, "zero": 1,
           "iteration_s": 1.0, "tokens_per_s": 1.0, "mfu": 0.4, "peak_memory_GiB": 60.0, "status": "OPTIMAL"}
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        console(width=250).print(results_table([row, {**row, "recompute": "full", "recompute_layers": None}], "x"))
    text = buf.getvalue()
    assert "block3/1" in text and "full/1" in text
