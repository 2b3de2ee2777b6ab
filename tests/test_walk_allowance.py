"""The walks' allowance (iteration.build_problems, work.ceiling): a configuration's walked hops are given up, for the
typical hop's traversals, once their builds pass the work a search allows them; screening's bounds stay under
either model, and the solution says which one its plan was scored on."""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from planner.config import ParallelConfig
from planner.costs import default_costs
from planner.costs.iteration import build_problem, build_problems
from planner.mapping import work
from planner.mapping.bruteforce import all_placements
from planner.mapping.problem import Layout
from planner.search import screen as screen_mod
from planner.search.screen import fitting_configs, layout_bound, scenarios, screen
from planner.search.solve import solve

# one configuration, tp 4 pp 4 dp 2 m 32 v 2, on two layouts: a column of 4 node rows and 2 x 2
SEARCH = {"schedules": ["interleaved"], "recompute": ["selective"], "zero": [0], "tensor_parallel": [4],
          "pipeline_parallel": [4], "micro_batch_sizes": [1], "virtual_stages": [2], "sequence_parallel": [True],
          "uneven_stages": [0]}


def _slow_spec(make_spec, nodes=7, factor=0.02, **search):
    spec = make_spec(nodes=nodes, gbs=64, layers=24, **(search or SEARCH))
    bw = spec.cluster.bandwidth * factor
    return dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, bandwidth=bw))


def _case(spec):
    fits, _ = fitting_configs(spec, default_costs(spec.cluster))
    assert [cfg for _, cfg in fits] == [ParallelConfig(4, 4, 2, 1, 32, "interleaved", 2, "selective", 0, True)]
    return fits[0][1], Layout(1, 2, 4, 1)


def _objectives(probs, n=12, seed=0):
    rng = np.random.default_rng(seed)
    lay = probs[0].layout
    out = []
    for _ in range(n):
        assign = rng.permutation(probs[0].n)[:lay.blocks].reshape(lay.rows, lay.cols)
        out.append([p.objective(assign) for p in probs])
    return np.array(out)


def test_a_ceiling_raises_past_its_limit_and_leaves_the_charge_counted():
    with work.metered() as m:
        with pytest.raises(work.OverCeiling):
            with work.ceiling(1.0):
                work.charge(0.6)
                work.charge(0.3)
                work.charge(0.2)
        with work.ceiling(None):
            work.charge(100.0)
    assert m.used_s == pytest.approx(101.1)
    # a cached build (charge_once) counts once in a ceiling, whether or not the solve paid it before: where the
    # block stops does not depend on what ran earlier
    key = ("test_walk_allowance", "dag")
    with work.once_scope(), work.metered() as m:
        work.charge_once(key, 0.5)
        with work.ceiling(0.8):
            work.charge_once(key, 0.5)          # paid already: not in the meter, in the ceiling
            work.charge_once(key, 0.5)          # the ceiling has it: not again
            with pytest.raises(work.OverCeiling):
                work.charge(0.4)
    assert m.used_s == pytest.approx(0.9)
    with work.ceiling(1.0):      # nested: the inner one trips on its own charges
        work.charge(0.5)
        with pytest.raises(work.OverCeiling), work.ceiling(0.1):
            work.charge(0.2)


def test_build_problems_falls_back_to_the_typical_hop_past_its_allowance(make_spec):
    spec = _slow_spec(make_spec)
    cfg, lay = _case(spec)
    costs = default_costs(spec.cluster)
    mats = [spec.cluster.bandwidth, spec.cluster.bandwidth * 0.5]
    walked = build_problems(spec, cfg, lay, costs, mats)
    assert not any(p.walk_dropped for p in walked) and walked[0].pace is not None
    with work.metered() as m:
        build_problems(spec, cfg, lay, costs, mats)
    # an allowance the walks fit in changes nothing; one they do not: every snapshot on the typical hop's model
    same = build_problems(spec, cfg, lay, costs, mats, walk_work_s=2 * m.used_s)
    np.testing.assert_array_equal(_objectives(same), _objectives(walked))
    dropped = build_problems(spec, cfg, lay, costs, mats, walk_work_s=0.3 * m.used_s)
    assert all(p.walk_dropped and p.pace is None for p in dropped)
    typical = [build_problem(spec, cfg, lay, costs, bandwidth=b, walk=False) for b in mats]
    np.testing.assert_array_equal(_objectives(dropped), _objectives(typical))
    assert not np.array_equal(_objectives(dropped), _objectives(walked))
    # a plan the walks never cover (one node row) is not marked, whatever the allowance
    one_row = build_problems(spec, cfg, Layout(4, 2, 1, 1), costs, None, walk_work_s=0.0)
    assert not one_row[0].walk_dropped


def test_a_relaxations_typical_sibling_is_the_fallback_problem(make_spec):
    """MappingProblem.typical of a bound_only build (its pipeline terms rebuilt, the rest shared) scores every
    mapping exactly as build_problem(walk=False), on each snapshot; problems without walked hops carry none."""
    spec = _slow_spec(make_spec, factor=0.05)
    cfg, lay = _case(spec)
    costs = default_costs(spec.cluster)
    for bw in (spec.cluster.bandwidth, spec.cluster.bandwidth * 0.3):
        relaxed = build_problem(spec, cfg, lay, costs, bandwidth=bw, bound_only=True)
        fresh = build_problem(spec, cfg, lay, costs, bandwidth=bw, walk=False)
        assert relaxed.typical.walk_dropped and relaxed.typical.typical is None
        np.testing.assert_array_equal(_objectives([relaxed.typical]), _objectives([fresh]))
    assert build_problem(spec, cfg, lay, costs).typical is None
    assert build_problem(spec, cfg, Layout(4, 2, 1, 1), costs, bound_only=True).typical is None


def test_a_relaxation_of_walked_hops_is_queued_under_both_models(make_spec):
    """A layout bounded on its walked relaxation may be mapped on the typical hop's model (its full build over the
    allowance), whose optimum can lie under that relaxation: screening queues it at the lesser (layout_bound)."""
    spec = _slow_spec(make_spec, factor=0.005)
    cfg, lay = _case(spec)
    costs = default_costs(spec.cluster)
    mats = scenarios(spec, None)
    relaxed = [build_problem(spec, cfg, lay, costs, bound_only=True)]
    typical = build_problem(spec, cfg, lay, costs, walk=False)
    walked = build_problem(spec, cfg, lay, costs)
    optimum = {name: min(p.objective(a) for a in all_placements(p)) for name, p in (("typical", typical),
                                                                                      ("walked", walked))}
    assert relaxed[0].lower_bound() > optimum["typical"]       # the relaxation alone would be over it
    plb = layout_bound(relaxed, "worst", full=False)
    assert plb <= min(optimum.values()) + 1e-12
    # full problems, or a relaxation already on the typical hop's model: their own bound
    assert layout_bound([walked], "worst", full=True) == walked.lower_bound()
    dropped = build_problems(spec, cfg, lay, costs, mats, bound_only=True, walk_work_s=0.0)
    assert dropped[0].walk_dropped
    assert layout_bound(dropped, "worst", full=False) == typical.lower_bound()


def test_screening_maps_a_configuration_on_the_typical_hop_past_the_allowance(make_spec, monkeypatch):
    """An allowance between a relaxation's work and its full build's: the layouts are bounded on their walked
    relaxations and mapped on the typical hop's model; every bound left is under both models' rank orders."""
    spec = _slow_spec(make_spec)
    cfg, lay = _case(spec)
    costs = default_costs(spec.cluster)
    relaxed, full = [], []
    for lay_ in (lay, Layout(2, 1, 2, 2)):
        for out, only in ((relaxed, True), (full, False)):
            with work.metered() as m:
                build_problem(spec, cfg, lay_, costs, bound_only=only)
            out.append(m.used_s)
    assert max(relaxed) < min(full) / 1.5
    budget = work.WORK_PER_S * 20
    monkeypatch.setattr(screen_mod, "WALK_SHARE", (max(relaxed) + min(full)) / 2 / budget)
    mats = scenarios(spec, None)
    fits, _ = fitting_configs(spec, costs)
    bounds: dict = {}
    with work.metered() as spent:
        sc = screen(spec, fits, mats, costs, seed=0, robust="worst", budget=budget, spent=spent,
                    deadline=time.perf_counter() + 120, bounds=bounds)
    assert sc.cands and all(c.probs[0].walk_dropped for c in sc.cands)
    for c, entries in bounds.items():
        for plb, _, lay_, _ in entries:
            for walk in (True, False):
                prob = build_problem(spec, c, lay_, costs, walk=walk)
                assert plb <= prob.objective(prob.rank_order()) + 1e-12, (c.label(), lay_, walk)


def test_a_solve_says_when_its_plan_is_scored_without_the_walks(make_spec, monkeypatch):
    spec = _slow_spec(make_spec)
    base = solve(spec, time_limit_s=4, simulate=False)
    assert "typical hop" not in (base.solver.note or "") and not base.solver.walks_dropped
    assert "walks_dropped" not in base.solver.as_dict()
    monkeypatch.setattr(screen_mod, "WALK_SHARE", 1e-9)
    sol = solve(spec, time_limit_s=4, simulate=False)
    assert "charged at the typical hop, not walked" in sol.solver.note
    cfg, lay = sol.config, sol.layout
    prob = build_problem(spec, cfg, lay, walk=False)
    assert sol.estimate.iteration_s == pytest.approx(prob.objective(sol.assign), rel=1e-12)
    again = solve(spec, time_limit_s=4, simulate=False)
    assert again.solver.note == sol.solver.note and np.array_equal(again.assign, sol.assign)


def test_compare_scores_its_baselines_on_the_plans_model(make_spec, monkeypatch):
    """Where the solves gave their walks up, compare's baseline rows are on the typical hop's model too: one
    objective for every row (a walked rank order against a typical-hop plan read as the planner's gain)."""
    from planner.search.compare import compare
    spec = _slow_spec(make_spec)
    monkeypatch.setattr(screen_mod, "WALK_SHARE", 1e-9)
    out = compare(spec, time_limit_s=1, seed=0)
    sol = solve(spec, time_limit_s=1, simulate=False)
    assert sol.solver.walks_dropped and sol.solver.as_dict()["walks_dropped"] is True
    prob = build_problem(spec, sol.config, sol.layout, walk=False)
    rank = next(r for r in out["rows"] if r["method"] == "best config, rank-order mapping")
    assert rank["iteration_s"] == pytest.approx(prob.objective(prob.rank_order()), rel=1e-12)
    walked = build_problem(spec, sol.config, sol.layout)
    assert rank["iteration_s"] != pytest.approx(walked.objective(walked.rank_order()), rel=1e-9)


def test_a_ceiling_stops_the_lock_steps_walk_before_building_its_dag():
    """The DAG a 1F1B walk builds first is charged before it is built (a pp 64, m 1536 DAG takes ~1 s): a ceiling
    under its charge stops the walk with nothing built."""
    from planner.costs import lockstep
    p, m = 7, 53        # a shape no other test walks
    f, b = (1.0,) * p, (2.0,) * p
    built = lockstep._lock_step_dag.cache_info().currsize
    with work.metered() as meter, pytest.raises(work.OverCeiling), work.ceiling(1e-9):
        lockstep.lock_step_time(f, b, m, 0.1)
    assert lockstep._lock_step_dag.cache_info().currsize == built
    assert meter.used_s == 0.0          # nothing built, nothing charged
    assert lockstep.lock_step_time(f, b, m, 0.1) > lockstep.lock_step_time(f, b, m)


def test_the_alternatives_say_which_rows_were_scored_without_the_walks(make_spec, monkeypatch):
    search = dict(SEARCH, micro_batch_sizes=[1, 2])
    spec = _slow_spec(make_spec, **search)
    monkeypatch.setattr(screen_mod, "WALK_SHARE", 1e-9)
    sol = solve(spec, time_limit_s=4, simulate=False)
    assert sol.alternatives and all(a.get("walks_dropped") for a in sol.alternatives)
    monkeypatch.undo()
    sol = solve(spec, time_limit_s=4, simulate=False)
    assert sol.alternatives and not any("walks_dropped" in a for a in sol.alternatives)


def test_estimate_of_a_solution_without_the_walks_says_it_walks_them(tmp_path, monkeypatch):
    """`estimate --mapping SOLUTION` walks the hops the solution's search charged at the typical hop, and says so."""
    import json

    import yaml
    from plan_fixtures import run_cli
    rng = np.random.default_rng(0)
    bw = 0.5 * rng.uniform(0.3, 1.0, size=(7, 7))
    np.fill_diagonal(bw, 0)
    d = {"model": {"name": "m", "num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "vocab_size": 50257},
         "cluster": {"name": "c", "gpu": {"type": "A100", "memory_GiB": 80,
                                          "peak_tflops": {"bf16": 312, "fp16": 312, "fp32": 19.5}},
                     "nodes": 7, "gpus_per_node": 8,
                     "network": {"intra_node": {"bandwidth_GBps": 300}, "inter_node": {"bandwidth_Gbps": 200},
                                 "bandwidth_matrix": bw.tolist()}},
         "training": {"global_batch_size": 64, "seq_length": 2048}, "search": SEARCH,
         "solver": {"time_limit_s": 4}}
    spec, sol = tmp_path / "s.yaml", tmp_path / "sol.yaml"
    spec.write_text(yaml.safe_dump(d))
    monkeypatch.setattr(screen_mod, "WALK_SHARE", 1e-9)
    assert run_cli(["solve", str(spec), "--out", str(sol), "--no-simulate"])[0] == 0
    monkeypatch.undo()
    s = yaml.safe_load(sol.read_text())
    assert s["solver"]["walks_dropped"] is True
    c = s["config"]
    flags = ["estimate", str(spec), "--tp", "4", "--pp", "4", "--dp", "2", "--mbs", "1", "--vpp", str(c["vpp"]),
             "--recompute", "selective", "--zero", "0", "--sp", "--mapping", str(sol)]
    rc, out, err = run_cli([*flags, "--json"])
    assert rc == 0, err
    est = json.loads(out)
    assert est["solution_walks_dropped"] is True
    assert est["estimate"]["iteration_s"] != pytest.approx(s["estimate"]["iteration_s"], rel=1e-6)
    rc, _, err = run_cli(flags)
    assert rc == 0 and "walks them per boundary" in err
    # a solution that walked them: the same figure, nothing said
    sol2 = tmp_path / "sol2.yaml"
    assert run_cli(["solve", str(spec), "--out", str(sol2), "--no-simulate"])[0] == 0
    s2 = yaml.safe_load(sol2.read_text())
    assert "walks_dropped" not in s2["solver"] and s2["config"] == c
    rc, out, err = run_cli([*flags[:-1], str(sol2), "--json"])
    est = json.loads(out)
    assert rc == 0 and "solution_walks_dropped" not in est
    assert est["estimate"]["iteration_s"] == pytest.approx(s2["estimate"]["iteration_s"], rel=1e-9)
