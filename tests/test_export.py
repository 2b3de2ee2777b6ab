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
