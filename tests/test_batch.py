import csv
import json

import pytest
from batch_fixtures import write_sweep

from planner.batch.run import COLUMNS, read_rows, rows_csv, run_batch
from planner.batch.sweep import load_sweep
from planner.cli.main import main

CONFIG = ("tp", "pp", "dp", "micro_batch_size", "num_microbatches", "schedule", "recompute", "zero")


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batch")
    sw = load_sweep(write_sweep(tmp))
    res = run_batch(sw, str(tmp / "out"), workers=2, progress=False)
    return tmp, sw, res


def test_rows_in_sweep_order_with_failures_recorded(solved):
    tmp, sw, res = solved
    assert [r["case_id"] for r in res.rows] == [c.id for c in sw.cases]
    by = {(r["model"], r["gpus"]): r for r in res.rows}
    for g in (8, 16):
        huge = by[("m-huge", g)]
        assert huge["status"] == "INFEASIBLE" and "memory" in huge["error"] and huge["tp"] is None
        for m in ("m-small", "m-mid"):
            r = by[(m, g)]
            assert r["status"] in ("OPTIMAL", "FEASIBLE"), r
            assert r["tp"] * r["pp"] * r["dp"] == g
            assert 0 < r["mfu"] < 1 and r["peak_memory_GiB"] < 80
            # time and cost to train the 1e10-token budget follow from the achieved throughput
            days = 1e10 / r["tokens_per_s"] / 86400
            assert r["train_days"] == pytest.approx(days)
            assert r["gpu_hours"] == pytest.approx(g * days * 24)
            assert r["cost_usd"] == pytest.approx(2.0 * g * days * 24)


def test_csv_is_complete_and_matches(solved):
    tmp, sw, res = solved
    with open(res.csv_path, newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == COLUMNS
        rows = list(reader)
    assert [r["case_id"] for r in rows] == [r["case_id"] for r in res.rows]
    assert float(rows[0]["tokens_per_s"]) == res.rows[0]["tokens_per_s"]


def test_resume_skips_done_cases_and_retries_errors(solved):
    tmp, sw, res = solved
    out = str(tmp / "out")
    again = run_batch(sw, out, workers=1, progress=False)
    assert again.solved == 0 and again.reused == len(sw.cases)
    assert [r["tokens_per_s"] for r in again.rows] == [r["tokens_per_s"] for r in res.rows]
    rows = read_rows(res.csv_path)
    rows[1]["status"] = "ERROR"             # an internal failure is retried
    del rows[3]                             # a missing case is solved
    with open(res.csv_path, "w") as fh:
        fh.write(rows_csv(rows, COLUMNS))
    third = run_batch(sw, out, workers=1, progress=False)
    assert third.solved == 2 and third.reused == len(sw.cases) - 2
    assert [r["case_id"] for r in third.rows] == [c.id for c in sw.cases]
    assert third.rows[1]["status"] in ("OPTIMAL", "FEASIBLE")


@pytest.fixture(scope="module")
def cli_one(tmp_path_factory):
    """`planner batch --workers 1 --json --plots` on the same sweep, once: the CLI test's run, and the in-process
    (one worker) rows that the worker pool's must agree with."""
    import contextlib
    import io
    tmp = tmp_path_factory.mktemp("batch-cli")
    path = write_sweep(tmp)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["batch", path, "--out", str(tmp / "res"), "--workers", "1", "--json", "--plots"])
    return rc, buf.getvalue()


def test_workers_agree_with_in_process(solved, cli_one):
    _, _, res = solved
    rc, out = cli_one
    assert rc == 0
    one = json.loads(out)
    for a, b in zip(one["rows"], res.rows, strict=True):
        assert a["status"] == b["status"]
        if a["status"] == "OPTIMAL" and b["status"] == "OPTIMAL":
            assert a["iteration_s"] == pytest.approx(b["iteration_s"], rel=1e-9)


def test_unexpected_error_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    import importlib
    solve_mod = importlib.import_module("planner.search.solve")   # the module; `planner.solve` is the API function
    real = solve_mod.solve

    def flaky(spec, **kw):
        if spec.model.name == "m-mid":
            raise RuntimeError("boom")
        return real(spec, **kw)

    monkeypatch.setattr(solve_mod, "solve", flaky)
    sw = load_sweep(write_sweep(tmp_path))
    res = run_batch(sw, str(tmp_path / "out"), workers=1, progress=False)
    mids = [r for r in res.rows if r["model"] == "m-mid"]
    assert mids and all(r["status"] == "ERROR" and "boom" in r["error"] for r in mids)
    assert all(r["status"] in ("OPTIMAL", "FEASIBLE") for r in res.rows if r["model"] == "m-small")


def test_cli_json_and_plots(cli_one):
    rc, out = cli_one
    assert rc == 0
    d = json.loads(out)
    assert d["cases"] == 6 and d["solved"] == 6
    assert len(d["rows"]) == 6 and d["csv"].endswith("mini.csv")
    # two GPU counts per model: cheapest and fastest are reported, fastest is never slower
    cvf = {g["model"]: g for g in d["cheapest_vs_fastest"]}
    assert set(cvf) == {"m-small", "m-mid"}
    for g in cvf.values():
        assert g["options"] == 2
        assert g["fastest"]["train_days"] <= g["cheapest"]["train_days"]
        assert g["cheapest"]["cost_usd"] <= g["fastest"]["cost_usd"]
    assert len(d["plots"]) == 3
    for p in d["plots"]:
        with open(p, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv,code", [
    (["--workers", "0"], 2),
    (["--address", "127.0.0.1:6379"], 2),
    (["--time-limit", "-1"], 2),
])
def test_cli_bad_flags(tmp_path, argv, code, capsys):
    path = write_sweep(tmp_path)
    assert main(["batch", path, "--out", str(tmp_path)] + argv) == code
    assert "Traceback" not in capsys.readouterr().err


def test_cli_bad_sweep_names_field(tmp_path, capsys):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nclusters: []\ntraining: {global_batch_size: 8}\nmodels: []\n")
    assert main(["batch", str(p), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "models" in err


def test_workers_run_single_threaded():
    from batch_fixtures import worker_threads

    from planner.batch.run import _local
    got = {}
    _local(worker_threads, list(range(4)), 2, None, lambda k, r: got.__setitem__(k, r))
    assert sorted(got) == [0, 1, 2, 3]
    assert all(r["omp"] == "1" and r["torch"] == 1 for r in got.values())


def test_edited_sweep_moves_stale_rows_aside(tmp_path):
    from batch_fixtures import sweep_dict
    out = str(tmp_path / "out")
    sw = load_sweep(write_sweep(tmp_path, sweep_dict(models=sweep_dict()["models"][:1])))
    run_batch(sw, out, workers=1, progress=False)
    sw2 = load_sweep(write_sweep(tmp_path, sweep_dict(models=sweep_dict()["models"][:1],
                                                      solver={"time_limit_s": 2})))
    res = run_batch(sw2, out, workers=1, progress=False)
    assert res.solved == 2 and [r["case_id"] for r in read_rows(res.csv_path)] == [c.id for c in sw2.cases]
    stale = read_rows(str(tmp_path / "out" / "mini.stale.csv"))
    assert [r["case_id"] for r in stale] == [c.id for c in sw.cases]


def test_a_dying_worker_fails_only_its_cases(tmp_path, monkeypatch):
    import batch_fixtures

    import planner.batch.run as batch
    monkeypatch.setattr(batch, "run_case", batch_fixtures.die_on_mid)
    sw = load_sweep(write_sweep(tmp_path, __import__("batch_fixtures").sweep_dict(
        clusters=[{"path": "mini-cluster.yaml", "gpus": [8]}])))
    res = batch.run_batch(sw, str(tmp_path / "out"), workers=2, progress=False)
    by = {r["model"]: r for r in res.rows}
    assert by["m-mid"]["status"] == "ERROR" and "worker failed" in by["m-mid"]["error"]
    assert len(res.rows) == 3 and by["m-huge"]["status"] in ("INFEASIBLE", "ERROR")


def _one_model_sweep(tmp_path):
    from batch_fixtures import sweep_dict
    return write_sweep(tmp_path, sweep_dict(models=sweep_dict()["models"][:1]))


def test_cli_no_resume_solves_again_and_keeps_the_old_rows(tmp_path, capsys, monkeypatch):
    import planner.batch.run as batch
    path, out = _one_model_sweep(tmp_path), str(tmp_path / "out")
    assert main(["batch", path, "--out", out, "--workers", "1", "--json"]) == 0
    first = read_rows(str(tmp_path / "out" / "mini.csv"))
    capsys.readouterr()
    assert main(["batch", path, "--out", out, "--workers", "1", "--json", "--no-resume"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["solved"] == 2 and d["reused"] == 0
    # the replaced rows are kept aside, in full
    assert read_rows(str(tmp_path / "out" / "mini.previous.csv")) == first

    # a --no-resume run stopped at its first case: the rows it was replacing are all still on disk
    def stop(case, time_limit_s):
        raise KeyboardInterrupt
    monkeypatch.setattr(batch, "run_case", stop)
    second = read_rows(str(tmp_path / "out" / "mini.csv"))
    assert main(["batch", path, "--out", out, "--workers", "1", "--json", "--no-resume"]) == 130
    assert read_rows(str(tmp_path / "out" / "mini.previous.csv")) == first + second


def test_resume_is_still_the_default(tmp_path, capsys):
    path, out = _one_model_sweep(tmp_path), str(tmp_path / "out")
    assert main(["batch", path, "--out", out, "--workers", "1", "--json"]) == 0
    capsys.readouterr()
    assert main(["batch", path, "--out", out, "--workers", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["solved"] == 0 and d["reused"] == 2
    assert not (tmp_path / "out" / "mini.previous.csv").exists()


def test_no_resume_keeps_the_old_sizing_rows(tmp_path, monkeypatch):
    from batch_fixtures import sweep_dict

    import planner.batch.run as batch
    d = sweep_dict(models=sweep_dict()["models"][:1], clusters=[{"path": "mini-cluster.yaml", "gpus": [8]}],
                   sizing={"budget_gpu_days": [20]})
    sw = load_sweep(write_sweep(tmp_path, d))
    calls = []

    def fake_sizing(task, time_limit_s):     # stands in for the (slow) sizing search
        calls.append(task.id)
        return {**batch._sizing_base(task), "status": "OK", "model": f"run{len(calls)}", "error": ""}
    monkeypatch.setattr(batch, "run_sizing", fake_sizing)
    monkeypatch.setattr(batch, "run_case", lambda case, t: {**batch._base_row(case), "status": "INFEASIBLE"})
    out = str(tmp_path / "out")
    batch.run_batch(sw, out, workers=1, progress=False)
    batch.run_batch(sw, out, workers=1, progress=False)
    assert len(calls) == 1                               # resumed
    res = batch.run_batch(sw, out, workers=1, progress=False, resume=False)
    assert len(calls) == 2 and res.sizing[0]["model"] == "run2"
    assert [r["model"] for r in read_rows(str(tmp_path / "out" / "mini.sizing.previous.csv"))] == ["run1"]


def test_cli_sweep_name_with_a_path_is_refused(tmp_path, capsys):
    from batch_fixtures import sweep_dict
    (tmp_path / "a" / "b").mkdir(parents=True)
    path = write_sweep(tmp_path / "a" / "b", sweep_dict(name="../../escape"))
    for out in ("missing", "a/b"):                 # a missing --out gave exit 3, an existing one a CSV outside it
        assert main(["batch", path, "--out", str(tmp_path / out), "--workers", "1"]) == 2
        err = capsys.readouterr().err
        assert "sweep.yaml: name: must be a plain file name" in err and "Traceback" not in err
    assert not list(tmp_path.rglob("*.csv"))


def test_cli_out_folder_is_created_or_refused(tmp_path, capsys, monkeypatch):
    import planner.batch.run as batch
    monkeypatch.setattr(batch, "run_case", lambda case, t: {**batch._base_row(case), "status": "INFEASIBLE"})
    path = _one_model_sweep(tmp_path)
    deep = tmp_path / "new" / "deeper"          # the folder above a named --out must exist, as for every output flag
    assert main(["batch", path, "--out", str(deep), "--workers", "1"]) == 2
    assert "--out:" in capsys.readouterr().err and not (tmp_path / "new").exists()
    (tmp_path / "new").mkdir()
    assert main(["batch", path, "--out", str(deep), "--workers", "1", "--json"]) == 1    # every case INFEASIBLE
    assert len(read_rows(str(deep / "mini.csv"))) == 2
    (tmp_path / "afile").write_text("keep me")
    for out in ("afile", "afile/sub"):
        assert main(["batch", path, "--out", str(tmp_path / out), "--workers", "1"]) == 2
        err = capsys.readouterr().err
        assert "--out:" in err and "Traceback" not in err
    assert (tmp_path / "afile").read_text() == "keep me"


def test_a_resumed_run_says_its_time_limit_did_not_apply_to_reused_rows(tmp_path, capsys, monkeypatch):
    """Tryout 8: `batch --time-limit 30` over an existing CSV reused every row solved at the old limit and printed
    only "0 solved now, 8 from the existing CSV". It now says the reused rows kept their own limit and how to
    re-solve them; `--executor ray` without ray is refused before the progress bar starts."""
    import importlib.util
    path, out = _one_model_sweep(tmp_path), str(tmp_path / "out")
    assert main(["batch", path, "--out", out, "--workers", "1", "--json"]) == 0
    assert "--time-limit" not in capsys.readouterr().err
    assert main(["batch", path, "--out", out, "--workers", "1", "--json", "--time-limit", "3"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "2 case(s) came from the existing CSV as solved before: --time-limit 3 did not apply to them" in err
    assert "--no-resume" in err
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    assert main(["batch", path, "--out", out, "--executor", "ray"]) == 2
    err = capsys.readouterr().err
    assert "--executor: ray is not installed" in err and "cases," not in err


def test_progress_off_a_terminal_is_plain_full_lines(tmp_path, capsys, monkeypatch):
    """Tryout 8: with stderr a file, rich drew its bar once at the end, cut at 80 columns ("8 cases, 0 already…
    sizing a100-16x8-hdr 128g 500 GPU-day…"). Off a terminal each finished case is now one plain, whole line."""
    import planner.batch.run as batch
    monkeypatch.setattr(batch, "run_case", lambda case, t: {**batch._base_row(case), "status": "INFEASIBLE"})
    monkeypatch.setenv("COLUMNS", "40")          # a narrow "terminal" must not cut the lines either
    sw = load_sweep(_one_model_sweep(tmp_path))
    batch.run_batch(sw, str(tmp_path / "out"), workers=1, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"{sw.name}: 2 cases, 0 already done, 2 to run"
    assert [ln.split(" (")[0] for ln in lines[1:]] == [f"[{k}/2] {c.model_label} {c.gpus}g: INFEASIBLE"
                                                      for k, c in enumerate(sw.cases, 1)]
    assert not any("…" in ln or "━" in ln for ln in lines)


def test_a_cpu_fitted_profile_warns_once_per_batch_not_once_per_worker(tmp_path, capfd, monkeypatch):
    """A cluster naming a CPU-fitted compute profile: the warning came from every worker process that planned on it
    (two lines with --workers 2); the parent now gives it once, before the workers start, and they stay quiet."""
    import json
    import os

    import yaml

    import planner.costs
    monkeypatch.setattr(planner.costs, "_WARNED", set())
    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "planner", "data", "h100_compute_profile.json")) as fh:
        prof = json.load(fh)
    (tmp_path / "cpu-fit.json").write_text(json.dumps({**prof, "fit": {**prof["fit"], "device": ["cpu"]}}))
    with open(os.path.join(root, "clusters", "dgx-h100-32.yaml")) as fh:
        cl = yaml.safe_load(fh)
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({**cl, "profiles": {"compute": "cpu-fit.json"}}))
    (tmp_path / "sw.yaml").write_text(
        "name: cpuwarn\ngrid: {family: llama, vocab_size: 32000, parameters_B: [1, 2]}\nclusters: [mine.yaml]\n"
        "training: {global_batch_size: [256], seq_length: [2048], precision: bf16}\nsolver: {time_limit_s: 1}\n")
    sw = load_sweep(str(tmp_path / "sw.yaml"))
    run_batch(sw, str(tmp_path / "out"), workers=2, progress=False)
    err = capfd.readouterr().err
    assert err.count("fitted on CPU timings") == 1 and "cpu-fit.json" in err
