"""export --format torchtitan against what torchtitan @ 238fa99 runs: DDP only alone, seq_len and the layer count for
every plan, the pipeline split per virtual stage, and the precisions its job config takes."""
from __future__ import annotations

import pytest
import tomllib
import yaml
from plan_fixtures import mini_spec_dict

from planner.cli.main import main
from planner.config import ParallelConfig
from planner.errors import SpecError
from planner.export import planned_stage_layers, torchtitan_stage_layers, torchtitan_toml


def _sol(cfg: ParallelConfig, **extra) -> dict:
    return {"config": cfg.as_dict(), "precision": "bf16", "seq_length": 4096, "num_layers": 30, **extra}


def _cfg(tp=1, pp=1, dp=8, zero=0, cp=1, sched="1f1b", v=1, first=None, last=None) -> ParallelConfig:
    return ParallelConfig(tp, pp, dp, 1, 4, sched, v, "full", zero, tp > 1, first, last, cp=cp)


# --- 1. ZeRO levels: DDP (zero 0) only alone, FSDP (zero 3) with anything, ZeRO-1/2 not at all ----------------------

@pytest.mark.parametrize("tp,pp,cp", [(2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 2, 1)])
def test_ddp_with_tp_pp_or_cp_is_refused_naming_the_config(tp, pp, cp):
    with pytest.raises(SpecError) as e:
        torchtitan_toml(_sol(_cfg(tp=tp, pp=pp, cp=cp), cp_comm="allgather"), "s.yaml")
    msg = str(e.value)
    assert "s.yaml" in msg and "config.zero" in msg and f"tp {tp}, pp {pp}, cp {cp}, dp 8" in msg
    assert "search.zero [3]" in msg
    # the same split as ZeRO-3 (FSDP) is what torchtitan runs
    d = tomllib.loads(torchtitan_toml(_sol(_cfg(tp=tp, pp=pp, cp=cp, zero=3), cp_comm="allgather")))
    assert d["parallelism"]["data_parallel_shard_degree"] == 8


def test_tp_or_pp_without_any_data_parallel_sharding_would_train_in_fp32():
    """dp 1, no FSDP: torchtitan turns autocast off under TP / PP, so a 16-bit plan is refused; an fp32 one runs."""
    for zero in (0, 3):      # ZeRO-3 over one replica shards nothing: torchtitan enables no FSDP either
        with pytest.raises(SpecError, match="float32, not the plan's bf16"):
            torchtitan_toml(_sol(_cfg(tp=2, dp=1, zero=zero)))
    assert torchtitan_toml(_sol(_cfg(tp=2, dp=1, cp=2, zero=3), cp_comm="allgather"))     # cp shards: FSDP
    d = tomllib.loads(torchtitan_toml(_sol(_cfg(tp=2, dp=1), precision="fp32")))
    assert d["training"]["mixed_precision_param"] == "float32"
    assert (d["parallelism"]["data_parallel_replicate_degree"], d["parallelism"]["tensor_parallel_degree"]) == (1, 2)


def test_plain_ddp_is_exported_as_replicate_with_the_gradient_note():
    text = torchtitan_toml(_sol(_cfg()))
    p = tomllib.loads(text)["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (8, 1)
    assert "all-reduces float32 gradients" in text
    assert "all-reduces float32" not in torchtitan_toml(_sol(_cfg(), grad_reduce_in_fp32=True))


@pytest.mark.parametrize("zero", [1, 2])
def test_zero1_and_zero2_are_no_torchtitan_form(zero):
    with pytest.raises(SpecError) as e:       # even where torchtitan_problem would complain first (no sp)
        torchtitan_toml(_sol(ParallelConfig(2, 1, 8, 1, 4, "1f1b", 1, "full", zero, False)), "s.yaml")
    assert "config.zero" in str(e.value) and f"ZeRO-{zero}" in str(e.value)
    # the hint names an export that takes the plan: Megatron-LM's distributed optimizer is ZeRO-1 only, and DeepSpeed's
    # ZeRO-2 runs without tp (this plan has tp 2), so a ZeRO-2 plan gets neither (tryout 4, #1)
    assert ("--format megatron" in str(e.value)) == (zero == 1) and "--format deepspeed" not in str(e.value)
    with pytest.raises(SpecError, match="--format deepspeed"):
        torchtitan_toml(_sol(ParallelConfig(1, 1, 16, 1, 4, "1f1b", 1, "full", 2, False)), "s.yaml")


# --- 2. seq_length / num_layers recorded for every plan; old files say which is missing ----------------------------

def _solve(tmp_path, nodes: int, gpn: int) -> str:
    d = mini_spec_dict(solver={"time_limit_s": 5, "seed": 0}, search={"zero": [0]})
    d["cluster"] = {**d["cluster"], "nodes": nodes, "gpus_per_node": gpn}
    spec, out = tmp_path / "s.yaml", tmp_path / "sol.yaml"
    spec.write_text(yaml.safe_dump(d))
    assert main(["solve", str(spec), "--out", str(out)]) == 0
    return str(out)


def test_a_zero0_solution_records_seq_length_and_layers_and_exports_seq_len(tmp_path, capsys):
    out = _solve(tmp_path, 1, 1)
    sol = yaml.safe_load(open(out))
    assert sol["config"]["zero"] == 0 and "framework" not in sol
    assert (sol["seq_length"], sol["num_layers"]) == (128, 4)
    capsys.readouterr()
    assert main(["export", out, "--format", "torchtitan"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["training"]["seq_len"] == 128
    # a file from before the field: refused naming it, not exported at the preset's seq_len
    del sol["seq_length"]
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(sol))
    assert main(["export", str(old), "--format", "torchtitan"]) == 2
    err = capsys.readouterr().err
    assert "old.yaml: seq_length: is not in this solution" in err and "Traceback" not in err


def test_a_zero0_pipeline_solution_is_refused_as_ddp_not_for_a_missing_layer_count(tmp_path, capsys):
    out = _solve(tmp_path, 2, 4)
    sol = yaml.safe_load(open(out))
    assert sol["config"]["pp"] > 1 or sol["config"]["tp"] > 1, sol["config"]
    capsys.readouterr()
    assert main(["export", out, "--format", "torchtitan"]) == 2
    err = capsys.readouterr().err
    assert "config.zero" in err and "num_layers" not in err


def test_a_pipeline_split_without_the_layer_count_names_num_layers():
    sol = _sol(_cfg(pp=4, dp=2, zero=3, first=6, last=8))
    del sol["num_layers"]
    with pytest.raises(SpecError, match="num_layers: is not in this solution"):
        torchtitan_toml(sol, "s.yaml")
    even = _sol(_cfg(pp=2, dp=4, zero=3))       # an even 1F1B split needs no layer count
    del even["num_layers"]
    assert tomllib.loads(torchtitan_toml(even))["parallelism"]["pipeline_parallel_first_stage_less_layers"] == 0


# --- 3. the pipeline split per virtual stage ------------------------------------------------------------------------

def test_torchtitans_rule_as_the_tryout_found_it():
    """torchtitan's first / last_stage_less_layers shorten only the first and last virtual stage."""
    assert torchtitan_stage_layers(30, 4, "Interleaved1F1B", 4, 1, 0) == (3, 4, 4, 4, 4, 4, 4, 3)
    s = torchtitan_stage_layers(126, 4, "Interleaved1F1B", 16, 1, 0)
    assert [s[r] + s[r + 4] for r in range(4)] == [31, 32, 32, 31]
    with pytest.raises(ValueError, match=r"virtual stages \(11\) must be divisible by pipeline parallel size \(4\)"):
        torchtitan_stage_layers(30, 4, "Interleaved1F1B", 3, 1, 1)
    assert torchtitan_stage_layers(30, 4, "1F1B", 8, 2, 0) == (6, 8, 8, 8)


def _module_parts(cfg: ParallelConfig, layers: int) -> tuple[dict, str]:
    text = torchtitan_toml(_sol(cfg, num_layers=layers))
    return tomllib.loads(text)["parallelism"], text


@pytest.mark.parametrize("layers,pp,v,first,last,want", [
    (30, 4, 2, 6, 8, (3, 4, 4, 4, 3, 4, 4, 4)),
    (30, 4, 3, 6, 6, (2, 3, 3, 2) * 3),
    (126, 4, 2, 30, None, (15, 16, 16, 16) * 2),
])
def test_interleaved_uneven_splits_are_written_stage_by_stage(layers, pp, v, first, last, want):
    cfg = _cfg(pp=pp, dp=2, zero=3, sched="interleaved", v=v, first=first, last=last)
    assert planned_stage_layers(cfg, layers) == want
    par, text = _module_parts(cfg, layers)
    parts = par["module_fqns_per_model_part"]
    assert [sum(m.startswith("layers.") for m in p) for p in parts] == list(want)
    assert [m for p in parts for m in p if m.startswith("layers.")] == [f"layers.{i}" for i in range(layers)]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    # the explicit list replaces torchtitan's own rule: none of its keys beside it
    assert not any(k in par for k in ("pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
                                      "pipeline_parallel_last_stage_less_layers"))
    assert f"the plan's layers per virtual stage are {list(want)}" in text


def test_splits_torchtitans_rule_reproduces_keep_its_keys():
    par, _ = _module_parts(_cfg(pp=4, dp=2, zero=3, first=6, last=8), 30)       # 1F1B uneven
    assert "module_fqns_per_model_part" not in par
    assert (par["pipeline_parallel_layers_per_stage"], par["pipeline_parallel_first_stage_less_layers"],
            par["pipeline_parallel_last_stage_less_layers"]) == (8, 2, 0)
    par, _ = _module_parts(_cfg(pp=4, dp=2, zero=3, sched="interleaved", v=2), 32)    # interleaved even
    assert "module_fqns_per_model_part" not in par and par["pipeline_parallel_layers_per_stage"] == 4
    par, _ = _module_parts(_cfg(pp=4, dp=2, zero=3, sched="v-zb", v=2), 32)
    assert "module_fqns_per_model_part" not in par and par["pipeline_parallel_schedule"] == "ZBVZeroBubble"


# --- 4. precision ---------------------------------------------------------------------------------------------------

def test_fp16_is_refused_naming_precision_and_other_precisions_map():
    z3 = _cfg(pp=2, dp=4, zero=3)
    with pytest.raises(SpecError) as e:
        torchtitan_toml(_sol(z3, precision="fp16"), "s.yaml")
    assert "s.yaml: precision: fp16" in str(e.value) and "bfloat16 or float32" in str(e.value)
    assert "--format deepspeed" not in str(e.value)          # pp 2: DeepSpeed's ZeRO-3 has no pipeline
    with pytest.raises(SpecError, match="--format deepspeed"):
        torchtitan_toml(_sol(_cfg(zero=3), precision="fp16"))
    for precision, want in (("bf16", "bfloat16"), ("fp32", "float32"), ("fp8", "bfloat16")):
        d = tomllib.loads(torchtitan_toml(_sol(z3, precision=precision)))
        assert d["training"]["mixed_precision_param"] == want
    old = _sol(z3)
    del old["precision"]
    text = torchtitan_toml(old)
    assert "bfloat16 assumed" in text and tomllib.loads(text)["training"]["mixed_precision_param"] == "bfloat16"


def test_cli_torchtitan_json_runs_torchtitans_trainer_for_a_ddp_plan(tmp_path, capsys):
    import json
    sol = {**_sol(_cfg(dp=2)), "mapping": [{"stage": 0, "tp_rank": 0, "dp_rank": d, "node": 0, "gpu": d}
                                           for d in range(2)]}
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(sol))
    assert main(["export", str(path), "--format", "torchtitan", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "torchtitan.train" in out["torchrun"][0] and "pretrain_gpt.py" not in out["torchrun"][0]


def test_header_says_which_torchtitan_reads_the_toml():
    """Tryout 5 #9: torchtitan 9810191bb (Feb 2026), 238fa99's child, replaced TOML job configs with Python config
    functions, so the header names the last torchtitan that loads the file."""
    lines = torchtitan_toml(_sol(_cfg(zero=3))).splitlines()
    header = [x for x in lines if x.startswith("#")]
    assert any("up to 238fa99 only" in x and "9810191bb" in x and "--module / --config" in x for x in header)
    assert lines.index(header[1]) == 1          # right under the first line, before the notes


def test_fp8_with_tensor_parallelism_says_torchtitan_gathers_in_bf16():
    """torchtitan @ 238fa99 enables torchao's Float8 TP only when `"float8" in job_config.model.converters`
    (torchtitan/models/llama3/infra/parallelize.py:77), but the converter is registered as "quantize.linear.float8"
    (components/quantization/float8.py:238; an unregistered name fails the registry lookup in
    protocols/model_converter.py), so its TP all-gathers stay bf16 where the plan charged 1-byte float8 ones: the
    export says so (it did not before) and still writes the registered name."""
    cfg = ParallelConfig(2, 1, 8, 1, 4, "1f1b", 1, "none", 3, True)
    text = torchtitan_toml(_sol(cfg, precision="fp8"))
    assert tomllib.loads(text)["model"]["converters"] == ["quantize.linear.float8"]
    assert "TP all-gathers stay bf16" in text
    no_tp = torchtitan_toml(_sol(ParallelConfig(1, 1, 8, 1, 4, "1f1b", 1, "none", 3, False), precision="fp8"))
    assert "TP all-gathers stay bf16" not in no_tp
    assert "TP all-gathers stay bf16" not in torchtitan_toml(_sol(cfg))          # bf16: nothing to say


def test_torchtitan_refuses_fewer_microbatches_than_1f1b_stages():
    """PyTorch's Schedule1F1B, which torchtitan builds with n_microbatches = local_batch_size / microbatch size, raises
    'Number of microbatches (m) must be greater than or equal to the number of stages' (torch 2.13.0
    torch/distributed/pipelining/schedules.py Schedule1F1B.__init__); ScheduleInterleaved1F1B needs a multiple of
    max(1, m // pp) rounds. Before, a ZeRO-3 1f1b plan with m < pp was searched and exported (Megatron's own 1F1B
    runs it; torchtitan's does not)."""
    from planner.config import torchtitan_problem
    few = ParallelConfig(1, 4, 8, 1, 2, "1f1b", 1, "full", 3, False)
    assert torchtitan_problem(few)[0] == "num_microbatches"
    with pytest.raises(SpecError) as e:
        torchtitan_toml(_sol(few), "s.yaml")
    assert "config.num_microbatches" in str(e.value) and "stages (4)" in str(e.value)
    assert torchtitan_problem(ParallelConfig(1, 4, 8, 1, 4, "1f1b", 1, "full", 3, False)) is None     # m = pp
    assert torchtitan_problem(ParallelConfig(1, 4, 8, 1, 2, "gpipe", 1, "full", 3, False)) is None    # GPipe: no rule
    # interleaved: 9 micro-batches over pp 4 are 2 rounds, 9 % 2 != 0; 8 are fine (the search asks m % pp == 0)
    assert torchtitan_problem(ParallelConfig(1, 4, 8, 1, 9, "interleaved", 2, "full", 3, False))[0] == \
        "num_microbatches"
    assert torchtitan_problem(ParallelConfig(1, 4, 8, 1, 8, "interleaved", 2, "full", 3, False)) is None
