"""Sweeps plan what `solve` plans (tryout 4, #16): the training keys of a plan spec (fp8_recipe, fp8_param_gather,
overlap, ...) are read by the plan spec's own reader, the plan spec's rules across training, search and cluster apply,
the CSV says each row's precision (a last column: older readers and CSVs keep working), and an fp8 MFU says it is of
the bf16 peak; `size --precision fp8` where the GPU has FP8 tensor cores."""
from __future__ import annotations

import contextlib
import copy
import csv
import io

import pytest
from batch_fixtures import CLUSTER, sweep_dict, write_sweep

from planner.batch.run import COLUMNS, read_rows, rows_csv, run_batch
from planner.batch.sweep import load_sweep
from planner.errors import SpecError

H100 = {**copy.deepcopy(CLUSTER), "name": "h100", "gpu": {"type": "H100", "memory_GiB": 80,
                                                          "peak_tflops": {"bf16": 989, "fp8": 1979}}}
FP8 = {"global_batch_size": [64], "seq_length": [1024], "precision": "fp8", "fp8_recipe": "tensorwise",
       "fp8_param_gather": True}


def _fp8_sweep(tmp_path, **training):
    small = sweep_dict(training={**FP8, **training}, search={"schedules": ["1f1b"], "recompute": ["full"], "zero": [1]},
                       clusters=[{"path": "mini-cluster.yaml", "gpus": [8]}])
    small["models"] = small["models"][:1]
    return write_sweep(tmp_path, small, H100)


def test_a_sweep_takes_the_plan_specs_training_keys(tmp_path):
    sw = load_sweep(_fp8_sweep(tmp_path, overlap={"grad_reduce": False, "param_gather": False}))
    t = sw.cases[0].spec.training
    assert (t.precision, t.fp8_recipe, t.fp8_param_gather, t.overlap.grad_reduce) == ("fp8", "tensorwise", True, False)
    assert (t.global_batch_size, t.seq_length) == (64, 1024)
    (tmp_path / "d").mkdir()
    delayed = load_sweep(_fp8_sweep(tmp_path / "d", fp8_recipe="delayed", overlap={"grad_reduce": False,
                                                                                  "param_gather": False}))
    assert delayed.cases[0].id != sw.cases[0].id                # the keys are part of the case (its id, resume)


@pytest.mark.parametrize("training, search, field", [
    ({"bogus": 1}, None, "training.bogus"),
    ({"precision": "bf16", "fp8_param_gather": False}, None, "training.fp8_recipe"),      # a recipe without fp8
    ({"fp8_recipe": "mxfp8"}, None, "training.fp8_recipe"),
    # the plan spec's rules across its parts, as `solve` checks them
    ({"fp8_recipe": "delayed", "fp8_param_gather": False}, {"zero": [3]}, "training.fp8_recipe"),
    ({}, {"zero": [1], "dp_shard": [8]}, "search.dp_shard"),
])
def test_a_sweep_refuses_what_a_plan_spec_refuses(tmp_path, training, search, field):
    d = sweep_dict(training={**FP8, **training}, clusters=[{"path": "mini-cluster.yaml", "gpus": [8]}])
    if search:
        d["search"] = {**d["search"], **search}
    with pytest.raises(SpecError) as e:
        load_sweep(write_sweep(tmp_path, d, H100))
    assert e.value.file.endswith("sweep.yaml") and e.value.field == field, str(e.value)


def test_the_csv_says_the_precision_and_the_table_which_peak_the_mfu_is_of(tmp_path):
    from planner.cli.batch import results_table
    from planner.report import console
    sw = load_sweep(_fp8_sweep(tmp_path))
    out = str(tmp_path / "out")
    res = run_batch(sw, out, workers=1, progress=False)
    with open(res.csv_path, newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == COLUMNS and COLUMNS[-2:] == ["precision", "recompute_layers"]   # appended last
        rows = list(reader)
    assert [r["precision"] for r in rows] == ["fp8"] and res.rows[0]["status"] in ("OPTIMAL", "FEASIBLE")
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        con = console(width=250)
        con.print(results_table(res.rows, "x"))
    text = buf.getvalue()
    assert "fp8" in text and f"{res.rows[0]['mfu']:.1%}*" in text and "of the bf16 peak" in text
    # a CSV written before the column: resumed as it was, the precision filled in from the case
    old = [{k: v for k, v in r.items() if k != "precision"} for r in read_rows(res.csv_path)]
    with open(res.csv_path, "w") as fh:
        fh.write(rows_csv(old, [c for c in COLUMNS if c not in ("precision", "recompute_layers")]))
    again = run_batch(sw, out, workers=1, progress=False)
    assert again.solved == 0 and again.rows[0]["precision"] == "fp8"
    assert read_rows(res.csv_path)[0]["precision"] == "fp8"


def test_size_offers_fp8_where_the_gpu_has_it(tmp_path, monkeypatch):
    import yaml

    import planner.batch.sizing as sizing
    from planner.cli.main import main
    seen = {}

    def fake(cluster, gpus, budget, training, *a, **k):
        seen["precision"] = training.precision
        raise SystemExit(0)

    monkeypatch.setattr(sizing, "optimal_size", fake)
    (tmp_path / "h100.yaml").write_text(yaml.safe_dump(H100))
    (tmp_path / "a100.yaml").write_text(yaml.safe_dump(CLUSTER))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["size", "--cluster", str(tmp_path / "a100.yaml"), "--budget-gpu-days", "1", "--precision", "fp8"])
    assert rc == 2 and "--precision: fp8" in err.getvalue() and "A100" in err.getvalue()
    with pytest.raises(SystemExit):
        main(["size", "--cluster", str(tmp_path / "h100.yaml"), "--budget-gpu-days", "1", "--precision", "fp8"])
    assert seen == {"precision": "fp8"}
