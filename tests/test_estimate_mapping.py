"""`estimate --mapping SOLUTION` of a plan that leaves nodes idle (a re-plan without a node, a solve whose
configurations do not use every node): the plan's GPU count follows the mapping, the other nodes idle, as `simulate
SOLUTION` takes it (tryout 4, #10: it failed with "tp*cp*pp*dp = 24 but the cluster has 32 GPUs")."""
from __future__ import annotations

import json

import numpy as np
import yaml
from plan_fixtures import mini_spec_dict, run_cli


def test_estimate_with_the_mapping_of_a_replan_reproduces_its_estimate(tmp_path):
    d = mini_spec_dict(search={"schedules": ["1f1b"], "recompute": ["none"], "zero": [1], "micro_batch_sizes": [1],
                               "tensor_parallel": [1], "sequence_parallel": [False], "uneven_stages": "none"},
                       solver={"time_limit_s": 2, "seed": 0})
    d["cluster"]["nodes"] = 3                                  # 12 GPUs; the re-plan keeps nodes 0 and 2
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(d))
    sol, rep = tmp_path / "sol.yaml", tmp_path / "rep.yaml"
    assert run_cli(["solve", str(spec), "--out", str(sol), "--no-simulate"])[0] == 0
    rc, _, err = run_cli(["replan", str(sol), "--exclude-nodes", "1", "--out", str(rep)])
    assert rc == 0, err
    r = yaml.safe_load(rep.read_text())
    c = r["config"]
    assert c["tp"] * c["pp"] * c["dp"] == 8 and {w["node"] for w in r["mapping"]} == {0, 2}
    flags = ["estimate", str(spec), "--tp", str(c["tp"]), "--pp", str(c["pp"]), "--dp", str(c["dp"]), "--mbs", "1",
             "--zero", "1"]
    # without the mapping: the GPU count is refused, and the message says what reproduces such a plan
    rc, _, err = run_cli(flags)
    assert rc == 2 and "8 but the cluster has 12 GPUs" in err and "--mapping SOLUTION" in err
    assert "simulate SOLUTION" in err and "Traceback" not in err
    rc, out, err = run_cli([*flags, "--mapping", str(rep), "--json"])
    assert rc == 0, err
    est = json.loads(out)
    assert est["estimate"]["iteration_s"] == r["estimate"]["iteration_s"]
    assert sorted(n for row in est["layout"]["node_grid"] for n in row) == [0, 2]
    rc, _, err = run_cli([*flags, "--mapping", str(rep)])
    assert rc == 0 and "on 8 of 12 GPUs" in err and "idle nodes [1]" in err
    # more GPUs than the cluster stays refused, mapping or not
    rc, _, err = run_cli(["estimate", str(spec), "--tp", "1", "--pp", "1", "--dp", "16", "--mbs", "1", "--mapping",
                       str(rep)])
    assert rc == 2 and "16 but the cluster has 12 GPUs" in err


def test_estimate_with_the_mapping_of_a_plan_whose_tensor_groups_span_nodes():
    """A tp x cp group wider than a node (layout.nodes_per_block 2): `estimate --mapping` of the shipped solution
    reproduces its estimate. mapping_to_assign read each block's nodes with gpus_per_node / span GPUs of the group per
    node, worker_table writes gpus_per_node (the group fills its span nodes), so the shipped file was refused as 'not
    node-blocked' (audit of Nov 27)."""
    import os

    from planner.config import ParallelConfig
    from planner.mapping.problem import Layout, worker_table
    from planner.solution import mapping_to_assign
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "solutions", "llama3-8b-128k-h100-64.yaml")
    with open(path) as f:
        sol = yaml.safe_load(f)
    c = sol["config"]
    assert sol["layout"]["nodes_per_block"] == 2 and c["tp"] * c["cp"] == 16
    rc, out, err = run_cli(["estimate", os.path.join(root, sol["spec"]), "--tp", str(c["tp"]), "--pp", str(c["pp"]),
                            "--dp", str(c["dp"]), "--cp", str(c["cp"]), "--mbs", str(c["micro_batch_size"]),
                            "--zero", str(c["zero"]), "--sp", "--mapping", path, "--json"])
    assert rc == 0, err
    est = json.loads(out)
    assert est["estimate"]["iteration_s"] == sol["estimate"]["iteration_s"]
    assert est["layout"] == {k: sol["layout"][k] for k in est["layout"]} and "nodes_per_block" in est["layout"]
    # the round trip of the writer on a spanning layout with a permuted grid
    cfg = ParallelConfig(4, 2, 2, 1, 8, "1f1b", 1, "none", 1, True, cp=4)
    lay = Layout(1, 1, 2, 2, span=2)
    grid = np.array([[3, 0], [1, 2]])
    workers = worker_table(lay, grid, cfg.tp, np.arange(4) * 2, cfg.cp)
    lay2, grid2 = mapping_to_assign(workers, cfg, 8, 8)
    assert lay2.span == 2 and (grid2 == grid).all()


def test_estimate_without_a_mapping_says_it_is_the_rank_order_on_unequal_links():
    """On a cluster whose node links differ the rank-order time can be far from a solved placement's: the output
    says which placement it scored (and the JSON records it); on equal links it says nothing."""
    flags = ["--tp", "2", "--pp", "4", "--dp", "16", "--mbs", "1"]
    rc, _, err = run_cli(["estimate", "specs/gpt3-13b-a100-het-128.yaml", *flags])    # the report goes to stderr
    assert rc == 0 and "placement: rank order" in " ".join(err.split())
    rc, _, err = run_cli(["estimate", "specs/gpt3-13b-a100-128.yaml", *flags])
    assert rc == 0 and "iteration" in err and "placement" not in err
    rc, out, _ = run_cli(["estimate", "specs/gpt3-13b-a100-het-128.yaml", *flags, "--json"])
    assert rc == 0 and json.loads(out)["placement"] == "rank order"
