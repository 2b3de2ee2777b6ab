"""`planner profile memory`, `planner fit memory`, `planner validate-memory`: outputs and exit codes."""
import csv
import json

import pytest

from planner.cli.main import main
from planner.costs.learned import LearnedMemory
from planner.profile.memory import COLUMNS


def test_profile_fit_validate_roundtrip(tmp_path, capsys):
    # 10: the fewest samples a fit takes (costs.learned.MIN_SAMPLES); seed 291 draws cases with few held
    # micro-batches (quick to replay on fake tensors), 6 on <= 16 GPUs and 4 on >= 32: both splits are scored
    samples = tmp_path / "s.csv"
    assert main(["profile", "memory", "-n", "10", "--seed", "291", "--max-gpus", "64", "-o", str(samples),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 10 and out["backend"] == "fake-cpu"
    rows = list(csv.DictReader(samples.open()))
    assert len(rows) == 10 and tuple(rows[0]) == COLUMNS
    assert all(float(r["peak_allocated"]) >= float(r["static"]) > 0 for r in rows)
    est = tmp_path / "e.json"
    assert main(["fit", "memory", str(samples), "-o", str(est), "--json"]) == 0
    assert LearnedMemory.load(str(est)).safety_ >= 1.0
    capsys.readouterr()
    assert main(["validate-memory", str(samples), "--json", "--small-gpus", "16", "--large-gpus", "32"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["samples"] == 10 and "heldout" in rep and rep["extrapolation"]["n"] == rep["large_configs"] == 4


@pytest.mark.slow
def test_replay_measures_the_same_cases_again(tmp_path, capsys):
    samples, again = tmp_path / "s.csv", tmp_path / "r.csv"
    assert main(["profile", "memory", "-n", "3", "--seed", "5", "--max-gpus", "64", "-o", str(samples), "--json"]) == 0
    assert main(["profile", "memory", "--replay", str(samples), "-o", str(again), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["samples"] == 3
    a, b = (list(csv.DictReader(p.open())) for p in (samples, again))
    keys = ("hidden_size", "tp", "pp", "schedule", "stage", "peak_allocated", "static", "after_forward")
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]
    assert all(r["peak_requested"] == r["peak_allocated"] for r in b)


def test_validate_memory_scores_the_shipped_estimator_on_real_cuda_samples(capsys):
    # 317 fresh CUDA samples from an H100 (benchmarks/data/h100): no measured allocated peak exceeds what the shipped
    # estimator allots a stage (safe prediction + fragmentation + constant overhead)
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "data", "h100", "memory_cuda_seed8.csv")
    assert main(["validate-memory", path, "--estimator", "shipped", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["n"] == rep["cuda"]["n"] == 317
    assert rep["cuda"]["allocated_above_all_allotted"] == 0
    assert rep["mape_learned"] < 5.0
    # and 171 of a third seed, drawn on another lease (Nov 27) after the estimator was last fitted
    assert main(["validate-memory", path.replace("seed8", "seed9"), "--estimator", "shipped", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["n"] == rep["cuda"]["n"] == 171
    assert rep["cuda"]["allocated_above_all_allotted"] == 0
    assert rep["mape_learned"] < 5.0
    # and 98 large stages (30-67 GiB, --min-GiB 30, seed 10, a second lease): where plans run, the estimate is tight
    assert main(["validate-memory", path.replace("seed8", "seed10_large"), "--estimator", "shipped", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["n"] == 98 and rep["cuda"]["allocated_above_all_allotted"] == 0 and rep["oom_called_feasible"] == 0
    assert rep["mape_learned"] < 1.0


def test_no_shipped_memory_sample_holds_a_count_the_schedules_no_longer_hold():
    # a sample measured the stage with the held forwards of its day's schedule code; when that code changes (Nov 27:
    # interleaved at m == pp), the rows it moves must be measured again (benchmarks/memory_stale_rows.py)
    import glob
    import os

    from benchmarks.memory_stale_rows import _read, stale_rows
    root = os.path.join(os.path.dirname(__file__), "..")
    files = glob.glob(os.path.join(root, "planner", "data", "memory_samples*.csv")) + glob.glob(
        os.path.join(root, "benchmarks", "data", "h100", "memory_cuda*.csv")) + glob.glob(
        os.path.join(root, "benchmarks", "data", "h100", "replay_*.csv"))
    assert len(files) >= 7
    for f in files:
        assert stale_rows(_read(f)[1]) == [], f


def test_stale_rows_splice_keeps_the_other_rows_and_refuses_a_foreign_column(tmp_path, capsys):
    import csv

    from benchmarks.memory_stale_rows import main as stale
    samples = tmp_path / "s.csv"
    assert main(["profile", "memory", "-n", "2", "--seed", "5", "--max-gpus", "64", "-o", str(samples)]) == 0
    rows = list(csv.DictReader(samples.open()))
    # pretend the second row was measured holding one forward more than the code holds now
    rows[1]["held_forwards"] = str(int(rows[1]["held_forwards"]) + 1)
    with samples.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    before = samples.read_text().splitlines()
    sub = tmp_path / "sub.csv"
    assert stale(["extract", str(samples), "-o", str(sub)]) == 0
    assert (tmp_path / "sub.csv.rows").read_text().split() == ["1"]
    again = tmp_path / "again.csv"
    assert main(["profile", "memory", "--replay", str(sub), "-o", str(again)]) == 0
    assert stale(["splice", str(samples), str(again), "--rows", str(sub) + ".rows"]) == 0
    after = samples.read_text().splitlines()
    assert after[:2] == before[:2] and after[2] != before[2]
    capsys.readouterr()
    assert stale(["list", str(samples)]) == 0 and "0 of 2 rows stale" in capsys.readouterr().out
    # a replayed column the target lacks, with a value that changes the row's meaning, is refused
    odd = tmp_path / "odd.csv"
    r = list(csv.DictReader(again.open()))
    with odd.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(r[0]) + ["cp"])
        w.writeheader()
        w.writerows([{**x, "cp": "2"} for x in r])
    assert stale(["splice", str(samples), str(odd), "--rows", str(sub) + ".rows"]) == 2


def test_bad_input_exits_2(tmp_path):
    assert main(["fit", "memory", str(tmp_path / "nope.csv"), "-o", str(tmp_path / "e.json")]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["validate-memory", str(bad)]) == 2
    assert main(["profile", "memory", "-n", "0", "-o", str(tmp_path / "x.csv")]) == 2
    assert main(["profile", "memory", "--fill", "0", "-o", str(tmp_path / "x.csv")]) == 2
    assert main(["profile", "memory", "--time-budget", "-1", "-o", str(tmp_path / "x.csv")]) == 2
    assert main(["profile"]) == 2
    assert main(["profile", "memory", "--replay", str(tmp_path / "nope.csv"), "-o", str(tmp_path / "x.csv")]) == 2
    assert main(["fit", "memory", str(bad), "-o", str(tmp_path / "e.json"), "--fragmentation", "2"]) == 2
    assert main(["validate-memory", str(bad), "--estimator", str(tmp_path / "none.json")]) == 2
    # a sample file with a non-numeric configuration value: the line is named, exit 2 (replay too)
    good = (tmp_path / "good.csv")
    assert main(["profile", "memory", "-n", "1", "--seed", "1", "--max-gpus", "8", "-o", str(good)]) == 0
    head, line = good.read_text().splitlines()[:2]
    cols = head.split(",")
    vals = line.split(",")
    vals[cols.index("seq_length")] = "abc"
    broken = tmp_path / "broken.csv"
    broken.write_text(head + "\n" + ",".join(vals) + "\n")
    assert main(["validate-memory", str(broken), "--estimator", "shipped"]) == 2
    assert main(["profile", "memory", "--replay", str(broken), "-o", str(tmp_path / "r.csv")]) == 2


def test_cuda_profiling_draws_again_what_does_not_fit_and_survives_out_of_memory(tmp_path, monkeypatch, capsys):
    # no GPU here: the CUDA calls are stood in for, to check the loop's bookkeeping (on a GPU, the same loop
    # measured 400 + 317 real samples: benchmarks/data/h100)
    import torch

    import planner.profile.memory as pm
    GiB = 1024 ** 3
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (4 * GiB, 80 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "stand-in")
    calls = []
    real = pm.sample_row

    def row(*case, device):
        calls.append(case)
        if len(calls) % 3 == 0:
            raise torch.cuda.OutOfMemoryError("stand-in")
        return real(*case, device="fake")

    monkeypatch.setattr(pm, "sample_row", row)
    out = tmp_path / "c.csv"
    # seed 90: 10 cases drawn too large, then 5 that fit (the 3rd stands in for an OOM), each few micro-batches deep
    assert main(["profile", "memory", "--device", "cuda", "-n", "4", "--seed", "90", "--max-gpus", "64",
                 "-o", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["samples"] == 4 and rep["skipped"]["oom"] == len(calls) // 3 >= 1
    assert rep["skipped"]["too_large"] >= 1            # 4 GiB free x 0.85: most random cases do not fit
    assert all(pm.stage_peak_estimate(*c) <= 0.85 * 4 * GiB for c in calls)
    # nothing fits: a clear message and exit 2, no traceback, nothing written
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (1, 80 * GiB))
    assert main(["profile", "memory", "--device", "cuda", "--replay", str(out), "-o", str(tmp_path / "n.csv")]) == 2
    assert not (tmp_path / "n.csv").exists()


def test_profile_memory_min_gib_draws_large_stages_only(tmp_path, capsys):
    # --min-GiB: the large stages plans run at (the capped runs' 30-80 GiB band); draws under it are drawn again
    import csv

    from planner.costs.learned import row_case
    from planner.profile.memory import stage_peak_estimate
    out = tmp_path / "big.csv"
    assert main(["profile", "memory", "--device", "fake", "-n", "2", "--seed", "3", "--min-GiB", "30", "-o", str(out),
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert d["samples"] == 2 and d["skipped"]["too_small"] > 0
    for r in csv.DictReader(out.open()):
        model, training, cfg, stage = row_case(r)
        assert stage_peak_estimate(model, training, cfg, stage, int(r["layers_per_chunk"])) >= 30 * 1024 ** 3
    assert main(["profile", "memory", "--device", "fake", "--min-GiB", "0", "-o", str(tmp_path / "x.csv")]) == 2
    assert main(["profile", "memory", "--device", "fake", "--min-GiB", "5", "--replay", str(out),
                 "-o", str(tmp_path / "y.csv")]) == 2
    assert "--min-GiB" in capsys.readouterr().err
