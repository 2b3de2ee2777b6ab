"""export: what it prints goes into a shell, so hostile solution files must not get through."""
from __future__ import annotations

import shlex
import subprocess

import pytest

from planner.errors import SpecError
from planner.export import hostfile, megatron_args, rank_layout, split_megatron_args, torchrun_commands
from planner.solution import load_solution
from planner.spec import load_spec
from planner.spec.hosts import is_hostname


def _solution(hosts=("alpha", "beta"), **config):
    cfg = {"tp": 2, "pp": 2, "dp": 1, "micro_batch_size": 1, "num_microbatches": 4, "schedule": "1f1b",
           "vpp": 1, "recompute": "none", "zero": 0, "sequence_parallel": False, **config}
    mapping = [{"stage": s, "tp_rank": t, "dp_rank": 0, "node": s, "gpu": t, "host": hosts[s]}
               for s in range(2) for t in range(2)]
    return {"config": cfg, "mapping": mapping}


@pytest.mark.parametrize("name", ["n1", "node-01.cluster.local", "a" * 63, "x.y.z"])
def test_rfc1123_names_pass(name):
    assert is_hostname(name)


@pytest.mark.parametrize("name", ["", "n$(touch x)x", "a b", "-lead", "trail-", "a..b", "a;b", "a" * 64,
                                  "n`id`", "x\ny", "ÿ", 7, None])
def test_other_names_are_refused(name):
    assert not is_hostname(name)


def test_valid_solution_prints_plain_lines():
    lines = torchrun_commands(_solution())
    assert len(lines) == 2
    assert "--master-addr alpha " in lines[0] and "--tensor-model-parallel-size 2" in lines[0]
    assert hostfile(_solution()) == "alpha slots=2\nbeta slots=2\n"
    assert [r["rank"] for r in rank_layout(_solution())] == [0, 1, 2, 3]


def test_injection_payload_in_a_host_is_refused_with_the_field(tmp_path):
    payload = f"n$(touch {tmp_path}/pwned)x"
    with pytest.raises(SpecError, match=r"mapping\[2\]\.host"):
        torchrun_commands(_solution(hosts=("alpha", payload)), file="s.yaml")
    with pytest.raises(SpecError):
        hostfile(_solution(hosts=(payload, "beta")))


def test_injection_payload_in_the_config_is_refused():
    with pytest.raises(SpecError, match="config"):
        megatron_args(_solution(tp="2; touch pwned"))
    with pytest.raises(SpecError, match="config.schedule"):
        megatron_args(_solution(schedule="1f1b$(id)"))


def test_every_printed_word_survives_a_shell_unchanged(tmp_path):
    # the quoting is real: bash parses each printed line back into exactly the words we meant,
    # and runs nothing (the line is echoed, never executed)
    line = torchrun_commands(_solution(hosts=("alpha", "beta")))[0].splitlines()[1]
    out = subprocess.run(["bash", "-c", f"printf '%s\\n' {line}"], capture_output=True, text=True,
                         cwd=tmp_path, check=True).stdout.split("\n")[:-1]
    assert out == shlex.split(line)
    assert list(tmp_path.iterdir()) == []


def test_megatron_export_is_one_shell_command_with_its_comments_after(tmp_path, capsys):
    """`planner export --format megatron` pasted into bash: every flag reaches the command (a '#' line inside a
    backslash-continued command would end it and drop the flags after it)."""
    from planner.cli.main import main
    assert main(["export", "solutions/llama3-70b-h100-256.yaml", "--format", "megatron"]) == 0
    text = capsys.readouterr().out
    spec = load_spec("specs/llama3-70b-h100-256.yaml")
    flags, _ = split_megatron_args(megatron_args(load_solution("solutions/llama3-70b-h100-256.yaml"), None, None,
                                                 spec.model, spec.training.seq_length))
    out = subprocess.run(["bash", "-c", "printf '%s\\n' " + text], capture_output=True, text=True, cwd=tmp_path,
                         check=True).stdout.split()
    assert out == " ".join(flags).split()
    assert "--overlap-grad-reduce" in out and "--bf16" in out and out[:2] == ["--num-layers", "80"]
    assert any(line.startswith("# NeMo") for line in text.splitlines())


@pytest.mark.parametrize("precision, want, not_want", [
    ("bf16", ["--bf16", "--grad-reduce-in-bf16"], ["--fp16"]),
    ("fp16", ["--fp16"], ["--bf16", "--grad-reduce-in-bf16"]),
    ("fp32", [], ["--bf16", "--fp16", "--grad-reduce-in-bf16"]),
    (None, ["--bf16", "--grad-reduce-in-bf16"], ["--fp16"]),
])
def test_megatron_export_names_the_plans_precision(precision, want, not_want):
    sol = {**_solution(), **({"precision": precision} if precision else {})}
    args = megatron_args(sol)
    assert all(w in args for w in want) and not any(w in args for w in not_want)
    # a solution written before precisions were recorded says what it assumed
    assert any(a.startswith("# precision") for a in args) == (precision is None)


# --- tryout 4: ZeRO-2 has no Megatron-LM form (#1), the NeMo line's overlap_param_gather (#13), DeepSpeed hints (#14)

def _plan(tp=1, pp=1, dp=16, zero=2, cp=1, m=4, shard=0, precision="bf16", **extra):
    from planner.config import ParallelConfig
    cfg = ParallelConfig(tp, pp, dp, 1, m, "1f1b", 1, "full", zero, tp > 1, cp=cp, dp_shard=shard)
    mapping = [{"stage": s, "tp_rank": t, "dp_rank": d, "node": (s * dp + d) * tp * cp // 8,
                "gpu": (t + tp * (c + cp * d)) % 8, "cp_rank": c}
               for s in range(pp) for d in range(dp) for c in range(cp) for t in range(tp)]
    return {"config": cfg.as_dict(), "mapping": mapping, "precision": precision,
            "overlap": {"grad_reduce": True, "param_gather": True, "p2p": True, "tp_comm": True, "bucket_size": None},
            **({"cp_comm": "ring"} if cp > 1 else {}), **extra}


def test_zero2_is_refused_by_megatron_export_and_written_as_deepspeed_stage_2():
    """Megatron-Core's distributed optimizer keeps the whole gradient buffer (Megatron-LM dist_optimizer.md: 6 + 12/d
    bytes per parameter), so --use-distributed-optimizer runs a ZeRO-2 plan as ZeRO-1, with the gradient memory the
    plan did not charge (tryout 4: 62.8 GiB planned, 78.3 GiB as ZeRO-1 over 76 usable). Megatron export and its
    torchrun lines refuse it, naming config.zero and DeepSpeed's stage 2 where DeepSpeed runs the plan (dp alone),
    which writes it."""
    from planner.export import deepspeed_config, deepspeed_zero2_note, megatron_args, torchrun_commands
    z2 = _plan()
    for export in (megatron_args, torchrun_commands):
        with pytest.raises(SpecError) as e:
            export(z2, file="z2.yaml")
        msg = str(e.value)
        assert msg.startswith("z2.yaml: config.zero: 2") and "gradient buffer" in msg
        assert "export it with --format deepspeed" in msg
    ds = deepspeed_config(z2)
    zo = ds["zero_optimization"]
    assert zo["stage"] == 2 and zo["reduce_scatter"] and zo["contiguous_gradients"]
    assert zo["reduce_bucket_size"] == zo["allgather_bucket_size"] == 40_000_000      # the plan's bucket, not 5e8
    assert deepspeed_config(_plan(overlap={"bucket_size": 10_000_000}))["zero_optimization"]["reduce_bucket_size"] \
        == 10_000_000
    assert ds["train_batch_size"] == 64 and ds["gradient_accumulation_steps"] == 4 and ds["bf16"] == {"enabled": True}
    # DeepSpeed reduce-scatters after every micro-batch, the plan once per iteration: said on stderr
    assert "4 micro-batches" in deepspeed_zero2_note(z2) and deepspeed_zero2_note(_plan(m=1)) is None
    assert deepspeed_zero2_note(_plan(zero=3)) is None
    # with pipeline or tensor parallelism DeepSpeed cannot run it either: the refusals say so and send to ZeRO-1
    for plan, field in ((_plan(pp=2, dp=8), "config.pp"), (_plan(tp=2, dp=8), "config.tp"),
                        (_plan(cp=2, dp=8), "config.cp"), (_plan(precision="fp8"), "precision")):
        with pytest.raises(SpecError) as e:
            megatron_args(plan, "z2.yaml")
        assert "config.zero" in str(e.value) and "--format deepspeed" not in str(e.value)
        assert f"({field}:" in str(e.value) and "search.zero [1]" in str(e.value)
        with pytest.raises(SpecError) as e:
            deepspeed_config(plan, "z2.yaml")
        assert e.value.field == field and "search.zero [1]" in str(e.value)
    for zero in (0, 1):
        with pytest.raises(SpecError, match="ZeRO-2 and ZeRO-3 configs.*--format megatron"):
            deepspeed_config(_plan(zero=zero))


def test_export_cli_refuses_a_zero2_plan_for_megatron_and_writes_it_for_deepspeed(tmp_path, capsys):
    import json

    import yaml

    from planner.cli.main import main
    path = tmp_path / "z2.yaml"
    path.write_text(yaml.safe_dump(_plan()))
    assert main(["export", str(path), "--format", "megatron"]) == 2
    out = capsys.readouterr()
    assert "config.zero: 2" in out.err and "Traceback" not in out.err and out.out == ""
    assert main(["export", str(path), "--format", "deepspeed"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["zero_optimization"]["stage"] == 2 and "after each of the 4 micro-batches" in out.err


def test_nemo_line_sets_overlap_param_gather_only_with_the_distributed_optimizer():
    """overlap_param_gather follows --overlap-param-gather's condition (zero >= 1 and grad_reduce): Megatron-LM asserts
    it needs the distributed optimizer, and the ZeRO-0 NeMo line said True beside use_distributed_optimizer = False."""
    from planner.export import megatron_args, nemo_overlap, overlap_args
    on = {"grad_reduce": True, "param_gather": True}
    for zero, want in ((0, False), (1, True)):
        c = {"tp": 1, "pp": 1, "dp": 8, "zero": zero, "sequence_parallel": False}
        line = nemo_overlap(on, c)
        assert (f"overlap_param_gather={want}" in line or f"ddp.overlap_param_gather = {want}" in line)
        assert ("--overlap-param-gather" in overlap_args(on, c, "megatron")) == want
    assert "overlap_param_gather=False" in nemo_overlap({"grad_reduce": False, "param_gather": True},
                                                       {"tp": 1, "pp": 1, "dp": 8, "zero": 1})
    z0 = " ".join(megatron_args(_plan(zero=0, dp=16)))
    assert "overlap_param_gather = False" in z0 and "use_distributed_optimizer = False" in z0
    assert "--overlap-param-gather" not in z0


@pytest.mark.parametrize("plan, deepspeed", [
    ({}, True),                                  # tp = pp = cp = 1, no HSDP, bf16: DeepSpeed's ZeRO-3 runs it
    ({"tp": 2, "dp": 8}, False), ({"cp": 2, "dp": 8}, False), ({"pp": 2, "dp": 8}, False),
    ({"shard": 8}, False), ({"precision": "fp8"}, False)])
def test_megatron_zero3_refusal_names_deepspeed_only_where_it_applies(plan, deepspeed):
    from planner.export import deepspeed_config, megatron_args
    sol = _plan(zero=3, **plan)
    with pytest.raises(SpecError) as e:
        megatron_args(sol, "z3.yaml")
    assert "config.zero" in str(e.value) and "--format torchtitan" in str(e.value)
    assert ("--format deepspeed" in str(e.value)) == deepspeed
    if deepspeed:
        assert deepspeed_config(sol)["zero_optimization"]["stage"] == 3
    else:
        with pytest.raises(SpecError):
            deepspeed_config(sol)


def test_deepspeed_zero3_buffers_sized_by_the_plans_largest_unit(tmp_path):
    """DeepSpeed's ZeRO-3 defaults (a 5e8-element gradient bucket, up to 1e9 parameters live: deepspeedai/DeepSpeed
    @ edaa7221 zero/config.py) are not what the plan's memory counts (FSDP2's units); the export sets them from the
    largest unit of the model the solution's spec names: Llama 3 8B's [norm, output], 128256 x 4096 + 4096."""
    import yaml

    from planner.export import deepspeed_config, deepspeed_zero3_note
    from planner.solution import load_solution
    sol = load_solution("solutions/llama3-8b-h100-fsdp-128.yaml")
    sol["config"] = dict(sol["config"], tp=1, dp=128, zero=3, micro_batch_size=2, num_microbatches=1,
                         sequence_parallel=False)
    zo = deepspeed_config(sol, "solutions/llama3-8b-h100-fsdp-128.yaml")["zero_optimization"]
    unit = 128256 * 4096 + 4096
    assert (zo["reduce_bucket_size"], zo["stage3_prefetch_bucket_size"], zo["stage3_max_live_parameters"],
            zo["stage3_max_reuse_distance"]) == (unit, unit, 2 * unit, unit)
    assert deepspeed_zero3_note(sol, "solutions/llama3-8b-h100-fsdp-128.yaml") is None
    # the spec the solution names is gone: DeepSpeed's defaults stay, and the note says so
    sol["spec"] = str(tmp_path / "gone.yaml")
    moved = tmp_path / "z3.yaml"
    moved.write_text(yaml.safe_dump(sol))
    zo = deepspeed_config(sol, str(moved))["zero_optimization"]
    assert "reduce_bucket_size" not in zo and "stage3_max_live_parameters" not in zo
    assert "defaults" in deepspeed_zero3_note(sol, str(moved))


# --- tryout 5: Megatron-LM's CUDA_DEVICE_MAX_CONNECTIONS assert (#2), the NeMo 2.0 lines (#1, #4, #5) -----------------

def _env_note(args):
    (note,) = [a for a in args if a.startswith("# environment:")]
    return note


@pytest.mark.parametrize("plan, gpu, needed", [
    ({"tp": 2, "dp": 8}, "H100-SXM5-80GB", True), ({"tp": 2, "dp": 8}, "A100-SXM4-80GB", True),
    ({"tp": 2, "dp": 8}, "V100-SXM2-32GB", True),
    ({"cp": 2, "dp": 8}, "H100-SXM5-80GB", True),                 # cp alone, too
    ({"tp": 2, "dp": 8}, None, True),                             # unknown GPU: set (only a hint from Blackwell on)
    ({"tp": 2, "dp": 8}, "B200-SXM-180GB", False), ({"tp": 2, "dp": 8}, "GB300", False),
    ({"dp": 16}, "H100-SXM5-80GB", False),                        # tp = cp = 1: no assert
    ({"tp": 2, "dp": 8, "pipeline_engine": "deepspeed"}, "H100-SXM5-80GB", False)])
def test_megatron_launch_sets_cuda_device_max_connections_where_megatron_asserts_it(plan, gpu, needed):
    """Megatron-LM @ d98e8a64 validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS == "1" with tp > 1 or cp > 1 when the
    device's compute capability is below 10 (Blackwell), so every H100 / A100 / V100 launch with tp or cp died there."""
    engine = plan.pop("pipeline_engine", "megatron")
    sol = {**_plan(zero=1, **plan), "pipeline_engine": engine}
    note = _env_note(megatron_args(sol, gpu_type=gpu))
    assert ("CUDA_DEVICE_MAX_CONNECTIONS=1" in note) == needed and "expandable_segments:True" in note
    assert ("unknown" in note) == (needed and gpu is None)
    for line in torchrun_commands(sol, gpu_type=gpu):
        cmd = line.splitlines()[1]
        assert cmd.startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ")
        assert ("CUDA_DEVICE_MAX_CONNECTIONS=1 " in cmd.split("torchrun")[0]) == needed


def test_torchtitan_launch_of_a_tp_plan_leaves_cuda_device_max_connections_alone():
    sol = {**_plan(zero=3, tp=2, dp=8), "seq_length": 4096, "num_layers": 32}
    assert all("CUDA_DEVICE_MAX_CONNECTIONS" not in x for x in torchrun_commands(sol, gpu_type="H100-SXM5-80GB"))


def test_export_cli_reads_the_gpu_type_from_the_solutions_spec(capsys):
    from planner.cli.main import main
    assert main(["export", "solutions/llama3-70b-h100-256.yaml"]) == 0
    assert "expandable_segments:True CUDA_DEVICE_MAX_CONNECTIONS=1 CUDA_VISIBLE_DEVICES" in capsys.readouterr().out
    assert main(["export", "solutions/llama3-70b-h100-256.yaml", "--format", "megatron"]) == 0
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM asserts it with tp > 1 or cp > 1 on GPUs before Blackwell: " \
           "H100-SXM5-80GB)" in capsys.readouterr().out


NEMO = "# NeMo 2.0 recipe: "


def _nemo(sol, gpu="H100-SXM5-80GB"):
    """The NeMo lines of a Megatron export, without their prefix; each must be Python a recipe script can run."""
    out = [a[len(NEMO):] for a in megatron_args(sol, gpu_type=gpu) if a.startswith(NEMO)]
    for line in out:
        compile(line, "nemo", "exec")
    return out


def _nemo_setting(lines, name):
    """The value a NeMo line assigns to `name` (the last one, as Python would run them)."""
    import re
    found = [m.group(1) for line in lines for m in re.finditer(rf"{re.escape(name)} = ([^;]+?)(?:;|$|  #)", line)]
    assert found, name
    return found[-1]


@pytest.mark.parametrize("extra, plugin, fp32", [
    ({"precision": "bf16"}, "bf16_mixed()", False),
    ({"precision": "fp16"}, "fp16_mixed()", False),
    ({"precision": "fp8"}, "bf16_with_fp8_mixed()", False),
    ({"precision": "fp8", "fp8_recipe": "tensorwise"}, "bf16_with_fp8_current_scaling_mixed()", False),
    ({"precision": "bf16", "grad_reduce_in_fp32": True}, "bf16_mixed()", True),
    ({"precision": "fp32"}, 'run.Config(MegatronMixedPrecision, precision="32")', True)])
def test_nemo_lines_set_the_plans_gradient_dtype_on_the_precision_plugin(extra, plugin, fp32):
    """Tryout 5 #1: NeMo's bf16_mixed() (and the fp8 plugins built on it) reduce gradients in fp32, and the strategy
    copies the plugin's dtype config over the DDP config (NVIDIA/NeMo @ 8cfedd72 mixed_precision.py,
    megatron_strategy.py), so a plan charged 16-bit gradient buffers (--grad-reduce-in-bf16) ran with 2 bytes more
    per parameter. The plugin is assigned, then its grad_reduce_in_fp32 set as planned."""
    lines = _nemo({**_plan(zero=1, tp=2, dp=8), **extra})
    (line,) = [x for x in lines if x.startswith("recipe.trainer.plugins = ")]
    assert line.startswith(f"recipe.trainer.plugins = {plugin}; recipe.trainer.plugins.grad_reduce_in_fp32 = {fp32}")
    if extra["precision"] == "fp8":
        assert _nemo_setting(lines, "recipe.trainer.plugins.fp8_param_gather") == "False"


def test_shipped_70b_nemo_lines_keep_16_bit_gradients(capsys):
    from planner.cli.main import main
    assert main(["export", "solutions/llama3-70b-h100-256.yaml", "--format", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--grad-reduce-in-bf16" in out
    assert "recipe.trainer.plugins = bf16_mixed(); recipe.trainer.plugins.grad_reduce_in_fp32 = False" in out


@pytest.mark.parametrize("zero, overlap, dp, want", [
    (1, {"grad_reduce": True, "param_gather": False, "bucket_size": 50_000_000}, 16,
     {"overlap_grad_reduce": "True", "overlap_param_gather": "False", "bucket_size": "50000000"}),
    (1, {"grad_reduce": True, "param_gather": True, "bucket_size": None}, 16,        # Megatron-Core's default bucket
     {"overlap_grad_reduce": "True", "overlap_param_gather": "True", "bucket_size": "40000000"}),
    (1, {"grad_reduce": True, "param_gather": True, "bucket_size": None}, 64,
     {"overlap_grad_reduce": "True", "overlap_param_gather": "True", "bucket_size": "64000000"}),
    (1, {"grad_reduce": False, "param_gather": True}, 16, {"overlap_grad_reduce": "False",
                                                            "overlap_param_gather": "False"})])
def test_nemo_overlap_settings_are_the_callbacks_arguments_with_the_distributed_optimizer(zero, overlap, dp, want):
    """Tryout 5 #4: with the distributed optimizer, MegatronCommOverlapCallback.setup overwrites the DDP config's
    overlap_grad_reduce / overlap_param_gather / bucket_size with its defaults (all on, 128M buckets for dp > 1)
    unless they are its constructor arguments (NVIDIA/NeMo @ 8cfedd72 megatron_comm_overlap.py
    _get_optimizer_overlap_cfgs, _override_user_cfgs), so the plan's went to recipe.trainer.strategy.ddp for nothing."""
    import re
    lines = _nemo(_plan(zero=zero, tp=2, dp=dp, overlap={"tp_comm": True, "p2p": True, **overlap}))
    (cb,) = [x for x in lines if "MegatronCommOverlapCallback," in x]
    args = dict(re.findall(r"(\w+)=(\w+)", cb.split("MegatronCommOverlapCallback,")[1].split("))")[0]))
    assert args == {"tp_comm_overlap": "True", **want}
    assert not any("recipe.trainer.strategy.ddp." in x for x in lines)


def test_nemo_overlap_settings_stay_on_the_ddp_config_without_the_distributed_optimizer():
    """ZeRO-0: the callback leaves the DDP config alone (it applies its data-parallel part only with
    use_distributed_optimizer), so the plan's settings go on recipe.trainer.strategy.ddp and not to the callback."""
    lines = _nemo(_plan(zero=0, tp=2, dp=8, overlap={"grad_reduce": True, "param_gather": True, "tp_comm": True,
                                                       "bucket_size": None}))
    assert _nemo_setting(lines, "recipe.trainer.strategy.ddp.overlap_grad_reduce") == "True"
    assert _nemo_setting(lines, "recipe.trainer.strategy.ddp.overlap_param_gather") == "False"
    assert _nemo_setting(lines, "recipe.trainer.strategy.ddp.bucket_size") == "40000000"
    (cb,) = [x for x in lines if "MegatronCommOverlapCallback," in x]
    assert "run.Config(MegatronCommOverlapCallback, tp_comm_overlap=True))" in cb


def test_nemo_lines_give_the_plans_layout_batch_and_precision(capsys):
    """Tryout 5 #5: the NeMo lines left out tp, pp, vpp, the batch sizes, the 16-bit plugin and the uneven split's
    values, so a recipe ran its own layout (llama3_70b.py: tp 4, pp 4, vpp 5, cp 2, mbs 1, gbs 512)."""
    from planner.cli.main import main
    path = "solutions/llama3-70b-h100-256.yaml"          # at writing: tp8 pp2 v10 mbs2 gbs1024, seq 8192, no recompute
    sol = load_solution(path)
    c = sol["config"]
    assert main(["export", path, "--format", "megatron"]) == 0
    lines = [x[len(NEMO):] for x in capsys.readouterr().out.splitlines() if x.startswith(NEMO)]
    s = "recipe.trainer.strategy."
    vpp = str(c["vpp"]) if c["schedule"] == "interleaved" and c["vpp"] > 1 else "None"
    for name, value in (("tensor_model_parallel_size", str(c["tp"])), ("pipeline_model_parallel_size", str(c["pp"])),
                        ("virtual_pipeline_model_parallel_size", vpp), ("context_parallel_size", str(c.get("cp", 1))),
                        ("sequence_parallel", str(c["sequence_parallel"]))):
        assert _nemo_setting(lines, s + name) == value
    assert _nemo_setting(lines, "recipe.data.micro_batch_size") == str(c["micro_batch_size"])
    assert _nemo_setting(lines, "recipe.data.global_batch_size") == str(c["micro_batch_size"] * c["num_microbatches"]
                                                                        * c["dp"])
    assert _nemo_setting(lines, "recipe.model.config.seq_length") == str(sol["seq_length"])
    rc = c["recompute"]
    assert _nemo_setting(lines, "recipe.model.config.recompute_granularity") == ("None" if rc == "none" else
                                                                                 '"selective"' if rc == "mlp" else
                                                                                 f'"{rc}"')
    if rc in ("selective", "mlp"):
        assert _nemo_setting(lines, "recipe.model.config.recompute_modules") == (
            '["mlp"]' if rc == "mlp" else '["core_attn"]')
    # V100: fp16, the fp16 plugin
    assert main(["export", "solutions/llama2-7b-v100-het-128.yaml", "--format", "megatron"]) == 0
    assert "# NeMo 2.0 recipe: recipe.trainer.plugins = fp16_mixed()" in capsys.readouterr().out
    # an uneven 1F1B split: its values, and no virtual stages
    from planner.config import ParallelConfig
    cfg = ParallelConfig(4, 4, 8, 1, 64, "1f1b", 1, "selective", 1, True, 19, 19)
    lines = _nemo({"config": cfg.as_dict(), "precision": "bf16"})
    for name, value in (("num_layers_in_first_pipeline_stage", "19"), ("num_layers_in_last_pipeline_stage", "19"),
                        ("account_for_loss_in_pipeline_split", "False"),
                        ("virtual_pipeline_model_parallel_size", "None")):
        assert _nemo_setting(lines, s + name) == value
    acc = ParallelConfig(4, 4, 8, 1, 64, "1f1b", 1, "selective", 1, True, account_embedding=True, account_loss=True)
    lines = _nemo({"config": acc.as_dict(), "precision": "bf16"})
    for name, value in (("account_for_embedding_in_pipeline_split", "True"),
                        ("account_for_loss_in_pipeline_split", "True"), ("num_layers_in_first_pipeline_stage", "None")):
        assert _nemo_setting(lines, s + name) == value
    assert _nemo_setting(lines, "recipe.model.config.recompute_granularity") == '"selective"'
    assert _nemo_setting(lines, "recipe.model.config.recompute_modules") == '["core_attn"]'
    assert _nemo_setting(lines, "recipe.data.global_batch_size") == str(1 * 64 * 8)


@pytest.mark.parametrize("gpu, flag", [("V100-SXM2-32GB", "--transformer-impl local"),
                                       ("Tesla-P100", "--transformer-impl local"),
                                       ("A100-SXM4-80GB", "--attention-backend unfused"),
                                       ("H100-SXM5-80GB", "--attention-backend unfused"),
                                       (None, "--attention-backend unfused")])
def test_unfused_plans_export_the_unfused_path_they_were_costed_as(gpu, flag):
    """An unfused plan runs Megatron-Core's unfused attention: Transformer Engine's UnfusedDotProductAttention
    (--attention-backend unfused) where TE runs, Megatron-Core's own (--transformer-impl local) before Ampere, where it
    does not (tryout 5 #3: a V100 plan exported with TE's default impl). A fused plan gets neither."""
    args = megatron_args(_plan(zero=1, tp=2, dp=8) | {"attention": "unfused"}, gpu_type=gpu)
    assert flag in args
    assert not any(a.startswith(("--transformer-impl", "--attention-backend")) for a in args if a != flag)
    fused = megatron_args(_plan(zero=1, tp=2, dp=8), gpu_type=gpu)
    assert not any(a.startswith(("--transformer-impl", "--attention-backend")) for a in fused)


def test_shipped_v100_plan_exports_megatrons_local_impl():
    import os
    sol = load_solution(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "solutions",
                                     "llama2-7b-v100-het-128.yaml"))
    args = megatron_args(sol, gpu_type="V100-SXM2-32GB")
    assert "--transformer-impl local" in args
    assert any("AttnBackend.unfused" in a for a in args)


# --- export checked against the tools' own parsers (benchmarks/export_against_parsers.py, docs/notes/hardening.md) ---

@pytest.mark.parametrize("zero, precision, fp32_grads, want", [
    (3, "bf16", False, "fp32"), (3, "fp16", False, "fp32"),      # ZeRO-3: FSDP2's fp32 reduce-scatter, as costed
    (2, "bf16", False, None), (2, "fp16", False, None),          # ZeRO-2: the 16-bit gradients the plan charged
    (2, "bf16", True, "fp32"),                                   # training.grad_reduce_in_fp32
    (3, "fp32", False, None), (2, "fp32", True, None)])          # fp32 training: DeepSpeed's default is fp32
def test_deepspeed_config_reduces_gradients_in_the_planned_dtype(zero, precision, fp32_grads, want):
    """DeepSpeed reduces gradients in the 16-bit model dtype unless the top-level communication_data_type says
    otherwise (deepspeedai/DeepSpeed @ edaa7221267243c7be7fb49c5d5f5c4fb97b4641 deepspeed/runtime/engine.py
    communication_data_type; the same at 38327e07): before, a ZeRO-3 plan costed with fp32 reduce-scatters
    (costs/fsdp.py REDUCE_BYTES) was written without it and ran them in bf16."""
    from planner.export import deepspeed_config
    extra = {"grad_reduce_in_fp32": True} if fp32_grads else {}
    ds = deepspeed_config(_plan(zero=zero, precision=precision, **extra))
    assert ds.get("communication_data_type") == want
