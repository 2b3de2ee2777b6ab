"""Output flags never overwrite a file the command reads (tryout 4, #7): `solve --out SPEC` replaced the spec with its
solution (which then named itself as its spec), `replan --out`, `simulate --trace / --plot` and `size --plot` the same.
Each is refused with exit 2 naming the flag, before any work, and the input is left as it was."""
from __future__ import annotations

import os

import pytest
import yaml
from plan_fixtures import mini_spec_dict, run_cli


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """specs/s.yaml naming ../models/m.yaml and ../clusters/c.yaml (with a measured matrix c.csv), and a solution
    solutions/s.yaml naming the spec; no command may get as far as working on them."""
    import planner.batch.sizing as sizing
    import planner.search.replan as replan
    import planner.search.solve as solve
    import planner.simulator as simulator

    def never(*a, **k):
        raise AssertionError("the command worked before checking its output path")

    for mod, name in ((solve, "solve"), (replan, "replan"), (simulator, "simulate"), (sizing, "optimal_size")):
        monkeypatch.setattr(mod, name, never)
    d = mini_spec_dict()
    for sub in ("specs", "models", "clusters", "solutions"):
        (tmp_path / sub).mkdir()
    (tmp_path / "models" / "m.yaml").write_text(yaml.safe_dump(d["model"]))
    (tmp_path / "clusters" / "c.csv").write_text("0,12.5\n12.5,0\n")
    cluster = {**d["cluster"], "network": {**d["cluster"]["network"], "bandwidth_matrix": "c.csv"}}
    (tmp_path / "clusters" / "c.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "specs" / "s.yaml").write_text(yaml.safe_dump(
        {"model": "../models/m.yaml", "cluster": "../clusters/c.yaml", "training": d["training"]}))
    (tmp_path / "solutions" / "s.yaml").write_text(yaml.safe_dump(
        {"spec": "specs/s.yaml", "config": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "num_microbatches": 2,
                                           "schedule": "1f1b", "vpp": 1, "recompute": "none", "zero": 0,
                                           "sequence_parallel": False}}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


INPUTS = [("specs/s.yaml", "the spec"), ("models/m.yaml", "model file"), ("clusters/c.yaml", "cluster file"),
          ("clusters/c.csv", "bandwidth matrix")]


def _refused(tree, argv, flag, target, what):
    before = {p: p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    rc, out, err = run_cli(argv)
    assert rc == 2 and f"{flag}:" in err and what in err and "overwrite" in err, err
    assert "Traceback" not in err and out == ""
    assert {p: p.read_bytes() for p in tree.rglob("*") if p.is_file()} == before      # nothing written, nothing lost


@pytest.mark.parametrize("target, what", INPUTS)
def test_solve_out_may_not_be_an_input(tree, target, what):
    _refused(tree, ["solve", "specs/s.yaml", "--out", target], "--out", target, what)
    # the same file by another name: a path through '..', and a hard link
    _refused(tree, ["solve", "specs/s.yaml", "--out", f"specs/../{target}"], "--out", target, what)
    os.link(tree / target, tree / "alias")
    _refused(tree, ["solve", "specs/s.yaml", "--out", "alias"], "--out", target, what)


@pytest.mark.parametrize("target, what", [*INPUTS, ("solutions/s.yaml", "the solution")])
def test_replan_out_may_not_be_an_input(tree, target, what):
    _refused(tree, ["replan", "solutions/s.yaml", "--exclude-nodes", "1", "--out", target], "--out", target, what)


@pytest.mark.parametrize("flag", ["--plot", "--trace"])
@pytest.mark.parametrize("target, what", INPUTS)
def test_simulate_outputs_may_not_be_inputs(tree, flag, target, what):
    flags = ["--tp", "1", "--pp", "1", "--dp", "8", "--mbs", "1"]
    _refused(tree, ["simulate", "specs/s.yaml", *flags, flag, target], flag, target, what)
    _refused(tree, ["simulate", "solutions/s.yaml", flag, target], flag, target, what)
    _refused(tree, ["simulate", "solutions/s.yaml", flag, "solutions/s.yaml"], flag, target, "the solution")


def test_simulate_plot_and_trace_may_not_share_a_file(tree):
    rc, _, err = run_cli(["simulate", "solutions/s.yaml", "--plot", "t.out", "--trace", "./t.out"])
    assert rc == 2 and "--trace" in err and "--plot" in err and not (tree / "t.out").exists()


@pytest.mark.parametrize("target, what", [("clusters/c.yaml", "the cluster file"), ("clusters/c.csv", "matrix")])
def test_size_plot_may_not_be_an_input(tree, target, what):
    _refused(tree, ["size", "--cluster", "clusters/c.yaml", "--budget-gpu-days", "1", "--plot", target], "--plot",
             target, what)


def test_fit_and_import_outputs_may_not_be_their_inputs(tree):
    (tree / "x.csv").write_text("a\n")
    for argv in (["fit", "memory", "x.csv", "-o", "x.csv"], ["import", "nccl-tests", "x.csv", "-o", "x.csv"],
                 ["import", "mpigraph", "x.csv", "-o", "m.csv", "--sidecar", "x.csv"],
                 ["fit", "compute", "--profile", "x.csv", "--peak-tflops", "1", "-o", "x.csv"]):
        before = (tree / "x.csv").read_text()
        rc, _, err = run_cli(argv)
        assert rc == 2 and ("--output:" in err or "--sidecar:" in err), (argv, err)
        assert (tree / "x.csv").read_text() == before and "overwrite" in err


MISSING = "nowhere/deeper"


@pytest.mark.parametrize("argv, flag", [
    (["solve", "specs/s.yaml", "--out", f"{MISSING}/s.yaml"], "--out"),
    (["replan", "solutions/s.yaml", "--exclude-nodes", "1", "--out", f"{MISSING}/r.yaml"], "--out"),
    (["simulate", "solutions/s.yaml", "--plot", f"{MISSING}/p.png"], "--plot"),
    (["simulate", "solutions/s.yaml", "--trace", f"{MISSING}/t.json"], "--trace"),
    (["size", "--cluster", "clusters/c.yaml", "--budget-gpu-days", "1", "--plot", f"{MISSING}/p.png"], "--plot"),
    (["fit", "memory", "clusters/c.csv", "-o", f"{MISSING}/e.json"], "--output"),
    (["fit", "compute", "--profile", "clusters/c.csv", "--peak-tflops", "1", "-o", f"{MISSING}/c.json"], "--output"),
    (["import", "nccl-tests", "clusters/c.csv", "-o", f"{MISSING}/n.csv"], "--output"),
    (["import", "mpigraph", "clusters/c.csv", "-o", f"{MISSING}/m.csv"], "--output"),
    (["import", "mpigraph", "clusters/c.csv", "-o", "m.csv", "--sidecar", f"{MISSING}/m.yaml"], "--sidecar"),
    (["import", "mpigraph", "clusters/c.csv", "-o", "m.csv", "--rank-matrix", f"{MISSING}/r.csv"], "--rank-matrix"),
    (["profile", "compute", "--device", "cpu", "-o", f"{MISSING}/c.csv"], "--output"),
    (["profile", "memory", "-o", f"{MISSING}/m.csv"], "--output"),
    (["profile", "network", "-o", f"{MISSING}/b.csv"], "--output"),
    (["batch", "sweep.yaml", "--out", MISSING], "--out"),
])
def test_no_output_flag_creates_a_folder_the_user_named(tree, argv, flag):
    """replan --out, simulate --plot / --trace, size --plot, fit / import / profile outputs and batch --out created a
    missing folder where solve --out refused one. One rule now (planner.io.check_out): a named output goes into a
    folder that exists, refused with exit 2 naming the flag before any work, nothing created; only a default path
    (solve's solutions/, batch's results/) gets its folder made."""
    if argv[0] == "batch":
        (tree / "sweep.yaml").write_text(yaml.safe_dump({"name": "b", "models": ["models/m.yaml"],
                                                         "clusters": ["clusters/c.yaml"],
                                                         "training": {"global_batch_size": [16],
                                                                      "seq_length": [128]}}))
    rc, _, err = run_cli(argv)
    assert rc == 2 and f"{flag}:" in err and "does not exist" in err and "Traceback" not in err, err
    assert not (tree / "nowhere").exists()


def test_default_output_folders_are_still_created(tree):
    """solve's default solutions/ folder (and the folders above it) are the tool's own: created, as batch's results/."""
    from planner.io import check_out, check_out_folder
    assert check_out("fresh/solutions/s.yaml", "--out", given=False) == str(tree / "fresh" / "solutions" / "s.yaml")
    assert check_out_folder("results", "--out", given=False) == str(tree / "results") and (tree / "results").is_dir()
    assert check_out_folder("results/run1", "--out") == str(tree / "results" / "run1")    # the named folder itself
    with pytest.raises(Exception, match="does not exist"):
        check_out_folder("nowhere/run1", "--out")


def test_a_fresh_output_path_is_accepted(tree):
    from planner.inputs import spec_inputs
    from planner.io import check_out
    inputs = spec_inputs("specs/s.yaml")
    assert {os.path.realpath(p) for p in inputs} == {str(tree / p) for p, _ in INPUTS}
    assert check_out("solutions/new.yaml", "--out", inputs) == str(tree / "solutions" / "new.yaml")
