"""Tables users feed the planner (vTrain measurements, memory samples, layer profiles) and the numbers beside them:
NaN, infinity, truncated rows, a byte-order mark, too few samples, a negative margin or price -- exit 2 naming file,
line and column, never a traceback or a silent NaN (README: 'NaN and infinity are refused everywhere')."""
import contextlib
import csv
import io

import pytest

from planner.cli.main import main

VTRAIN = "planner/data/vtrain/measured_single_node.csv"
SAMPLES = "planner/data/memory_samples_fake.csv"
CLUSTER = "clusters/vtrain-a100-64x8-hdr.yaml"


def _run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, err.getvalue()


def _rows(path, n):
    with open(path, newline="") as fh:
        r = csv.DictReader(fh)
        return r.fieldnames, [row for _, row in zip(range(n), r)]


def _write(path, fields, rows, bom=False):
    with open(path, "w", newline="", encoding="utf-8-sig" if bom else "utf-8") as fh:
        w = csv.DictWriter(fh, fields)
        w.writeheader()
        w.writerows(rows)
    return str(path)


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", ""])
def test_validate_refuses_a_non_finite_time(tmp_path, bad):
    fields, rows = _rows(VTRAIN, 3)
    rows[1]["iteration time (ms)"] = bad
    rc, err = _run("validate", _write(tmp_path / "m.csv", fields, rows), "--cluster", CLUSTER)
    assert rc == 2 and "m.csv: line 3, iteration time (ms)" in err and "Traceback" not in err


def test_validate_reads_a_byte_order_mark_and_refuses_a_file_nothing_fits(tmp_path):
    fields, rows = _rows(VTRAIN, 3)
    assert _run("validate", _write(tmp_path / "bom.csv", fields, rows, bom=True), "--cluster", CLUSTER)[0] == 0
    for r in rows:            # 1024 GPUs on the 512 of the cluster: every row skipped
        tp, pp = int(r["tensor parallelism"]), int(r["pipeline parallelism"])
        r["# GPUs"], r["data parallelism"], r["global batch"] = "1024", str(1024 // (tp * pp)), str(
            1024 // (tp * pp) * int(r["micro batch"]))
    rc, err = _run("validate", _write(tmp_path / "big.csv", fields, rows), "--cluster", CLUSTER)
    assert rc == 2 and "no row could be predicted" in err and "more than" in err


def test_memory_samples_refuse_nan_and_too_few(tmp_path):
    fields, rows = _rows(SAMPLES, 12)
    rows[3]["peak_allocated"] = "nan"
    for cmd in (["validate-memory"], ["fit", "memory"]):
        extra = ["-o", str(tmp_path / "e.json")] if cmd[0] == "fit" else []
        rc, err = _run(*cmd, _write(tmp_path / "s.csv", fields, rows), *extra)
        assert rc == 2 and "line 5, peak_allocated: is not a finite number" in err
    few = _write(tmp_path / "two.csv", fields, rows[:2])
    rc, err = _run("fit", "memory", few, "-o", str(tmp_path / "e.json"))
    assert rc == 2 and "has 2 samples" in err and not (tmp_path / "e.json").exists()


def test_fit_memory_refuses_a_negative_margin(tmp_path):
    rc, err = _run("fit", "memory", SAMPLES, "--margin", "-0.5", "-o", str(tmp_path / "e.json"))
    assert rc == 2 and "--margin" in err and not (tmp_path / "e.json").exists()


def test_profile_and_size_refuse_impossible_numbers(tmp_path):
    rc, err = _run("profile", "memory", "--device", "fake", "-n", "1", "--max-gpus", "0", "-o", str(tmp_path / "x"))
    assert rc == 2 and "--max-gpus" in err                     # drew configurations forever
    rc, err = _run("size", "--cluster", CLUSTER, "--price", "-2", "--budget-gpu-days", "10")
    assert rc == 2 and "--price" in err
    rc, err = _run("size", "--cluster", CLUSTER, "--gpus", "0", "--budget-gpu-days", "10")
    assert rc == 2 and "--gpus" in err                         # 0 silently meant the whole cluster


def test_compare_robust_plan_without_snapshots_is_refused():
    """`compare --robust-plan` on a cluster without bandwidth snapshots exits 2 naming the field, as `solve --robust`
    does (it printed the comparison and silently no robust section)."""
    rc, err = _run("compare", "specs/gpt3-13b-a100-128.yaml", "--robust-plan",
                   "--time-limit", "1")
    assert rc == 2 and "network.bandwidth_snapshots" in err
