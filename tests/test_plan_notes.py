"""What the solve table and the solution's note tell a practitioner about a plan beyond its numbers (tryout 7, F6):
a schedule stock Megatron-LM / NeMo do not ship, and context parallelism when memory is tight and it was not searched.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from planner.config import FORK_NEEDED, FORK_SCHEDULES, ParallelConfig, fork_note
from planner.costs import default_costs
from planner.search import summary


def _cfg(schedule="1f1b", zero=1, **kw):
    return ParallelConfig(1, 2, 4, 1, 8, schedule, 1, "none", zero, False, **kw)


def test_the_fork_list_has_one_home():
    import planner.export as export
    assert FORK_SCHEDULES == ("zb-h1", "v-min", "v-half", "v-zb")
    assert export.FORK_SCHEDULES is FORK_SCHEDULES and export.FORK_NEEDED is FORK_NEEDED
    for s in FORK_SCHEDULES:
        assert FORK_NEEDED in fork_note(_cfg(s)) and "NeMo" in fork_note(_cfg(s))
    for s in ("1f1b", "interleaved", "gpipe"):
        assert fork_note(_cfg(s)) == ""
    assert fork_note(_cfg("v-zb", zero=3)) == ""      # torchtitan runs it (ZBVZeroBubble)


def test_a_zb_h1_plan_says_so_in_the_table_and_the_note(make_spec):
    from planner.report import console, plan_table
    from planner.search.solve import solve
    kw = {"nodes": 2, "layers": 32, "hidden": 4096, "heads": 32, "memory": 24, "recompute": ["full"], "zero": [1],
          "tensor_parallel": [1], "micro_batch_sizes": [1]}      # does not fit without a pipeline
    sol = solve(make_spec(schedules=["zb-h1"], **kw), time_limit_s=5, simulate=False)
    assert sol.config.schedule == "zb-h1" and sol.config.pp > 1
    assert FORK_NEEDED in sol.solver.note and FORK_NEEDED in sol.as_dict()["solver"]["note"]
    con = console(width=300)
    with con.capture() as cap:
        con.print(plan_table(sol))
    row = next(ln for ln in cap.get().splitlines() if "schedule" in ln)
    assert "zb-h1" in row and FORK_NEEDED in row
    plain = solve(make_spec(schedules=["1f1b"], **kw), time_limit_s=5, simulate=False)
    assert plain.config.pp > 1 and FORK_NEEDED not in plain.solver.note


@pytest.fixture
def tight(make_spec):
    """An 8-GPU spec at seq 8192 whose usable memory is 1% above the plan's peak."""
    spec = make_spec(nodes=1)
    spec = replace(spec, training=replace(spec.training, seq_length=8192))
    cfg = ParallelConfig(2, 1, 4, 1, 16, "1f1b", 1, "selective", 0, False)
    costs = default_costs(spec.cluster)
    peak = summary._peak(spec, cfg, costs)
    gib = peak / 0.99 / (1 - spec.search.memory_margin)
    spec = replace(spec, cluster=replace(spec.cluster, gpu=replace(spec.cluster.gpu, memory_GiB=gib)))
    return spec, cfg, costs


def test_tight_memory_suggests_context_parallel_auto(tight):
    spec, cfg, costs = tight
    hint = summary.context_parallel_hint(spec, cfg, costs)
    assert "within 1.0% of the" in hint and "`context_parallel: auto`" in hint
    # not with room to spare, nor when the spec named the list, nor for short sequences
    roomy = replace(spec, cluster=replace(spec.cluster, gpu=replace(spec.cluster.gpu,
                                                                   memory_GiB=spec.cluster.gpu.memory_GiB * 1.1)))
    assert summary.context_parallel_hint(roomy, cfg, costs) == ""
    named = replace(spec, raw={**spec.raw, "search": {**(spec.raw["search"] or {}), "context_parallel": [1]}})
    assert summary.context_parallel_hint(named, cfg, costs) == ""
    short = replace(spec, training=replace(spec.training, seq_length=4096))
    assert summary.context_parallel_hint(short, cfg, costs) == ""


def test_the_hint_prints_the_usable_memory_as_the_table_does(tight, monkeypatch):
    """139 GiB less 5% is 132.05 GiB: the plan table prints the solution's limit (rounded to 3 decimals, 132.05) as
    132.1; the note printed the unrounded 132.0499... as 132.0 (trial, Llama 3 70B on 64 H200)."""
    spec, cfg, costs = tight
    spec = replace(spec, cluster=replace(spec.cluster, gpu=replace(spec.cluster.gpu, memory_GiB=139)),
                   search=replace(spec.search, memory_margin=0.05))
    monkeypatch.setattr(summary, "_peak", lambda *a: 131.7)
    from planner.costs.iteration import memory_limit_GiB
    table = f"{round(memory_limit_GiB(spec), 3):.1f}"          # report.plan_table's figure (Estimate.memory_dict)
    assert table == "132.1"
    assert f"of the {table} GiB usable" in summary.context_parallel_hint(spec, cfg, costs)
