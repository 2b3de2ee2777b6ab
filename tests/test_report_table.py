"""The solve / replan plan table shows what the plan is: an HSDP plan's shard group and replicas (tryout 4, #15: the
table said "tp=1 pp=1 dp=128" and ZeRO "3" for the label's "z3 hsdp8", indistinguishable from plain FSDP)."""
from __future__ import annotations

import contextlib
import io
import re

import pytest
import yaml
from plan_fixtures import mini_spec_dict

from planner.cli.main import main


def _solve_table(tmp_path, dp_shard):
    d = mini_spec_dict(search={"zero": [3], "dp_shard": [dp_shard], "schedules": ["1f1b"], "tensor_parallel": [1],
                               "micro_batch_sizes": [1]}, solver={"time_limit_s": 2, "seed": 0})
    spec = tmp_path / f"s{dp_shard}.yaml"
    spec.write_text(yaml.safe_dump(d))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["solve", str(spec), "--out", str(tmp_path / f"sol{dp_shard}.yaml"), "--no-simulate"])
    assert rc == 0, err.getvalue()
    return yaml.safe_load((tmp_path / f"sol{dp_shard}.yaml").read_text()), " ".join(err.getvalue().split())


def test_plan_table_shows_the_hsdp_shard_group(tmp_path):
    sol, table = _solve_table(tmp_path, 2)
    assert sol["config"]["dp_shard"] == 2 and sol["config"]["dp"] == 8
    assert "none / 3 (HSDP 2 x 4: shard groups of 2, 4 replicas) / off" in table
    sol, table = _solve_table(tmp_path, 0)                 # plain FSDP: over all of dp, as before
    assert "dp_shard" not in sol["config"] and "none / 3 / off" in table and "HSDP" not in table


def test_solver_row_says_what_stopped_the_search(tmp_path):
    """Tryout 6, #9: the row shows stopped_by, and `proof` with FEASIBLE (the simulator re-ranked) in words."""
    from types import SimpleNamespace

    from planner.report import stopped_by_text
    sol, table = _solve_table(tmp_path, 0)
    by = sol["solver"]["stopped_by"]
    assert f"{sol['solver']['method']} {sol['solver']['status']}, stopped by {by} (" in table
    assert stopped_by_text(SimpleNamespace(stopped_by="proof", status="FEASIBLE")) == (
        "proof (of the estimate's optimum; the simulator re-ranked to this plan)")
    assert stopped_by_text(SimpleNamespace(stopped_by="proof", status="OPTIMAL")).startswith("proof (the plan is")
    assert "safety stop" in stopped_by_text(SimpleNamespace(stopped_by="wall", status="TIME_LIMIT"))


def test_training_tokens_are_reported_as_time_and_cost_to_train(tmp_path):
    """Tryout 8: `training.tokens` ("for time and cost to train", SPEC.md) and the cluster's price were read and never
    shown by solve / estimate. The table and estimate's text now give days, GPU-hours and dollars, from the plan's
    tokens/s (batch.sizing.train_cost, the one home of that arithmetic)."""
    from plan_fixtures import run_cli

    from planner.batch.sizing import train_cost
    d = mini_spec_dict(solver={"time_limit_s": 2, "seed": 0})
    d["training"]["tokens"] = 1.0e9
    d["cluster"]["price_per_gpu_hour_usd"] = 2.5
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(d))
    rc, _, err = run_cli(["solve", str(spec), "--out", str(tmp_path / "sol.yaml"), "--no-simulate"])
    assert rc == 0, err
    sol = yaml.safe_load((tmp_path / "sol.yaml").read_text())
    cost = train_cost(1.0e9, sol["estimate"]["tokens_per_s"], 8, 2.5)
    m = re.search(r"to train[ │]+1B tokens: ([\d.,e+-]+) days, ([\d.,e+-]+) GPU-hours, \$([\d.,e+-]+) at \$2.5/GPU-h",
                  " ".join(err.split()))
    assert m, err
    got = [float(g.replace(",", "")) for g in m.groups()]
    assert got == pytest.approx([cost.days, cost.gpu_hours, cost.dollars], rel=0.01)
    c = sol["config"]
    rc, _, err = run_cli(["estimate", str(spec), "--tp", str(c["tp"]), "--pp", str(c["pp"]), "--dp", str(c["dp"]),
                          "--mbs", str(c["micro_batch_size"])])
    assert re.search(r"^to train 1B tokens: ", err, re.M), err
    del d["training"]["tokens"]                          # no budget: no line
    spec.write_text(yaml.safe_dump(d))
    rc, _, err = run_cli(["solve", str(spec), "--out", str(tmp_path / "sol2.yaml"), "--no-simulate"])
    assert rc == 0 and "to train" not in err
