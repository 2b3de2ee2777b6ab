import json

import pytest
from batch_fixtures import CLUSTER

from planner.batch.sizing import (
    cheapest_vs_fastest,
    chinchilla_gpu_days,
    optimal_from_rows,
    optimal_size,
    size_grid,
    train_cost,
)
from planner.batch.sweep import ShapeRule
from planner.cli.main import main
from planner.spec.cluster import parse_cluster
from planner.spec.plan import SearchSpec, SolverSpec, Spec, TrainingSpec


def test_train_cost_by_hand():
    # 1e12 tokens at 1e6 tokens/s: 1e6 s = 11.574 days; on 64 GPUs 17,778 GPU-hours; $2 each
    c = train_cost(1e12, 1e6, 64, 2.0)
    assert c.days == pytest.approx(1e6 / 86400)
    assert c.gpu_hours == pytest.approx(64 * 1e6 / 3600)
    assert c.dollars == pytest.approx(2.0 * 64 * 1e6 / 3600)
    assert train_cost(1e12, 1e6, 64, None).dollars is None
    # Chinchilla: 20 tokens per parameter
    assert chinchilla_gpu_days(1e9, 1e5, 8) == pytest.approx(8 * 2e10 / 1e5 / 86400)


def _row(cid, gpus, days, usd, status="OPTIMAL"):
    return {"case_id": cid, "model": "m", "params": 1e9, "global_batch_size": 64, "seq_length": 1024,
            "tokens": 1e10, "cluster": "c", "gpus": gpus, "tp": 1, "pp": 1, "dp": gpus, "tokens_per_s": 1.0,
            "mfu": 0.5, "train_days": days, "gpu_hours": gpus * days * 24, "cost_usd": usd, "status": status}


def test_cheapest_vs_fastest():
    rows = [_row("a", 8, 10.0, 100.0), _row("b", 16, 6.0, 120.0), _row("c", 32, 4.0, 160.0),
            _row("d", 64, 1.0, 10.0, status="INFEASIBLE")]
    (g,) = cheapest_vs_fastest(rows)
    assert g["options"] == 3 and g["fastest"]["case_id"] == "c" and g["cheapest"]["case_id"] == "a"
    assert g["cheapest_by"] == "cost_usd"
    rows[0]["cost_usd"] = None             # unpriced: cheapest by GPU-hours
    (g,) = cheapest_vs_fastest(rows)
    assert g["cheapest_by"] == "gpu_hours" and g["cheapest"]["case_id"] == "a"


def test_optimal_from_rows_picks_largest_within_budget():
    rows = []
    for k, (p, tps) in enumerate([(1e9, 1e6), (2e9, 4e5), (4e9, 1.5e5)]):
        r = _row(f"r{k}", 8, 1.0, 1.0)
        r.update(params=p, tokens_per_s=tps)
        rows.append(r)
    budget = chinchilla_gpu_days(2e9, 4e5, 8) * 1.01   # the 2B model just fits, the 4B one does not
    (best,) = optimal_from_rows(rows, budget)
    assert best["params"] == 2e9 and best["case_id"] == "r1"


def test_size_grid_is_increasing_and_distinct():
    g = size_grid("gpt", 50257, ShapeRule(), 2048, 1e8, 1e11)
    p = [m.num_params() for m in g]
    assert p == sorted(p) and len(set(p)) == len(p)
    # resolution: shapes are coarse below 1B (hidden in steps of 128), within 10% above
    assert all(b / a < 1.1 for a, b in zip(p, p[1:]) if a >= 1e9)


def test_optimal_size_is_the_largest_within_budget():
    cl = parse_cluster(CLUSTER, "mini.yaml").subset([0, 1])
    training = TrainingSpec(global_batch_size=64, seq_length=1024)
    search = SearchSpec(schedules=("1f1b",), recompute=("selective",), zero=(0, 1))
    solver = SolverSpec(time_limit_s=1.0)
    budget = 20.0
    res = optimal_size(cl, 16, budget, training, search, solver, time_limit_s=1.0)
    b = res.best
    assert b is not None and b.within_budget and b.gpu_days <= budget
    assert b.gpu_days == pytest.approx(chinchilla_gpu_days(b.params, b.tokens_per_s, 16))
    # the next larger sizes of the grid (solved independently here) do not fit the budget
    from planner.search.solve import solve
    grid = size_grid("gpt", 50257, ShapeRule(), 1024)
    k = [m.num_params() for m in grid].index(b.params)
    for m in grid[k + 1:k + 3]:
        sol = solve(Spec(name="x", model=m, cluster=cl, training=training, search=search, solver=solver),
                    time_limit_s=1.0, simulate=False)
        assert chinchilla_gpu_days(m.num_params(), sol.estimate.tokens_per_s, 16) > budget
    # bisection, not a scan: far fewer solves than grid sizes below the answer
    assert len(res.points) < 15 < k


def test_size_cli_json(capsys, tmp_path):
    png = str(tmp_path / "s.png")
    # one node of 8 GPUs: fewer configurations per bisection solve than on two nodes
    rc = main(["size", "--cluster", "clusters/a100-16x8-hdr.yaml", "--gpus", "8", "--budget-gpu-days", "50",
               "--global-batch-size", "128", "--time-limit", "1", "--schedules", "1f1b", "--json", "--plot", png])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    b = d["best"]
    assert d["gpus"] == 8 and b["gpu_days"] <= 50
    assert b["tokens"] == pytest.approx(20 * b["params"])
    assert b["cost_usd"] == pytest.approx(b["gpu_hours"] * 2.0)
    over = [p for p in d["points"] if p["params"] > b["params"]]
    assert over and all(not p["within_budget"] for p in over)
    with open(png, "rb") as fh:
        assert fh.read(4) == b"\x89PNG"


@pytest.mark.parametrize("argv", [["--gpus", "12"], ["--budget-gpu-days", "-1"], ["--schedules", "warp"]])
def test_size_cli_bad_input(argv, capsys):
    base = {"--gpus": "16", "--budget-gpu-days": "50", "--schedules": "1f1b"}
    base.update(dict(zip(argv[::2], argv[1::2])))
    args = ["size", "--cluster", "clusters/a100-16x8-hdr.yaml"] + [x for kv in base.items() for x in kv]
    assert main(args) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow
def test_sizing_within_a_sweep_and_resume(tmp_path, monkeypatch):
    from batch_fixtures import sweep_dict, write_sweep

    import planner.batch.run as batch
    from planner.batch.sweep import load_sweep
    d = sweep_dict(clusters=[{"path": "mini-cluster.yaml", "gpus": [16]}], models=[sweep_dict()["models"][0]],
                   search={"schedules": ["1f1b"], "recompute": ["selective"], "zero": [0, 1]},
                   sizing={"budget_gpu_days": [20]})
    sw = load_sweep(write_sweep(tmp_path, d))
    res = batch.run_batch(sw, str(tmp_path / "out"), workers=1, progress=False)
    (row,) = res.sizing
    assert row["status"] == "OK" and row["gpu_days"] <= 20 and row["gpus"] == 16
    # the same answer as the stand-alone search
    t = sw.sizing[0]
    direct = optimal_size(t.cluster, 16, 20, t.training, t.search, t.solver)
    assert row["params"] == direct.best.params
    monkeypatch.setattr(batch, "run_sizing", lambda *a: pytest.fail("resumed sizing must not re-solve"))
    again = batch.run_batch(sw, str(tmp_path / "out"), workers=1, progress=False)
    assert again.sizing[0]["params"] == row["params"]


def test_size_says_when_memory_not_the_budget_caps_the_model(capsys, tmp_path):
    """Tryout 8: with a budget far above what the GPUs can hold, `size` printed "largest compute-optimal model: ...
    66,082 GPU-days" for a budget of 1e9 GPU-days and did not say that the next size does not fit in memory. The
    result now says what capped it (`limited_by`: budget, memory or the grid's end) and the text says so."""
    import copy

    import yaml
    cl = copy.deepcopy(CLUSTER)                    # the fixture's dict is shared: not edited in place
    cl.update(nodes=1, gpu={"type": "A100", "memory_GiB": 16, "peak_tflops": {"bf16": 312}})
    del cl["network"]["bandwidth_matrix"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cl))
    argv = ["size", "--cluster", str(tmp_path / "c.yaml"), "--global-batch-size", "64", "--seq-length", "1024",
            "--time-limit", "1", "--schedules", "1f1b"]
    assert main(argv + ["--budget-gpu-days", "1e9", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    b = d["best"]
    assert d["limited_by"] == "memory" and b["gpu_days"] < 1e9
    above = [p for p in d["points"] if p["params"] > b["params"]]
    assert above and above[0]["status"] == "INFEASIBLE"
    assert main(argv + ["--budget-gpu-days", "1e9"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "memory caps the size, not the budget" in err
    small = b["gpu_days"] / 4                              # a budget below the memory cap: the budget binds
    assert main(argv + ["--budget-gpu-days", str(small), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["limited_by"] == "budget"
    # the same answer with a budget only 1% above it: the next size would be over the budget even if it fitted
    # (GPU-days ~ params^2), so memory is not what caps it
    assert main(argv + ["--budget-gpu-days", str(b["gpu_days"] * 1.01), "--json"]) == 0
    d2 = json.loads(capsys.readouterr().out)
    assert d2["best"]["model"] == b["model"] and d2["limited_by"] == "budget"
