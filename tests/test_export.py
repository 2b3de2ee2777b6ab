"""export: what it prints goes into a shell, so hostile solution files must not get through."""
from __future__ import annotations

import shlex
import subprocess

import pytest

from planner.errors import SpecError
from planner.export import hostfile, megatron_args, rank_layout, split_megatron_args, torchrun_commands
from planner.solution import load_solution
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
    flags, _ = split_megatron_args(megatron_args(load_solution("solutions/llama3-70b-h100-256.yaml")))
    out = subprocess.run(["bash", "-c", "printf '%s\\n' " + text], capture_output=True, text=True, cwd=tmp_path,
                         check=True).stdout.split()
    assert out == " ".join(flags).split()
    assert "--overlap-grad-reduce" in out and "--bf16" in out
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
    from planner.export import megatron_args, nemo_overrides, overlap_args
    on = {"grad_reduce": True, "param_gather": True}
    for zero, want in ((0, False), (1, True)):
        c = {"tp": 1, "pp": 1, "zero": zero, "sequence_parallel": False}
        line = nemo_overrides(on, c, "megatron")[0]
        assert f"overlap_param_gather={want}" in line and f"use_distributed_optimizer = {want}" in line
        assert ("--overlap-param-gather" in overlap_args(on, c, "megatron")) == want
    assert "overlap_param_gather=False" in nemo_overrides({"grad_reduce": False, "param_gather": True},
                                                         {"tp": 1, "pp": 1, "zero": 1}, "megatron")[0]
    z0 = " ".join(megatron_args(_plan(zero=0, dp=16)))
    assert "overlap_param_gather=False" in z0 and "--overlap-param-gather" not in z0


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
