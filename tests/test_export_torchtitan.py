"""export --format torchtitan against what torchtitan @ 238fa99 runs: seq_len and the layer count for every plan."""
from __future__ import annotations

import tomllib
import yaml
from plan_fixtures import mini_spec_dict

from planner.cli.main import main


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
