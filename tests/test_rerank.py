"""A returned plan fits by the estimate and by the simulation: the simulator's veto moves to the next
candidate, and with none left the solve is infeasible with both judges' figures."""
import pytest

import planner.search.rerank as rerank
from planner.errors import InfeasibleError
from planner.search.solve import solve


def _spec(make_spec):
    return make_spec(nodes=2, schedules=["1f1b"], recompute=["selective", "full"], zero=[0, 1])


def test_simulator_veto_on_the_best_moves_to_a_plan_that_fits(make_spec, monkeypatch):
    spec = _spec(make_spec)
    first = solve(spec, time_limit_s=5)
    real = rerank._sim_pair

    def veto_first(spec_, c, *a, **k):
        t, mem = real(spec_, c, *a, **k)
        return (t, 1e9) if c.cfg == first.config else (t, mem)

    monkeypatch.setattr(rerank, "_sim_pair", veto_first)
    sol = solve(spec, time_limit_s=5)
    assert sol.config != first.config
    assert sol.simulated["fits"] and "over memory in simulation" in sol.solver.note


def test_simulator_veto_on_every_plan_is_infeasible(make_spec, monkeypatch):
    monkeypatch.setattr(rerank, "_sim_pair", lambda *a, **k: (1.0, 1e9))
    spec = make_spec(nodes=2, schedules=["1f1b"], recompute=["full"], zero=[0], micro_batch_sizes=[1],
                     tensor_parallel=[8])
    with pytest.raises(InfeasibleError, match=r"estimate .* GiB, simulated 1000000000.0 GiB"):
        solve(spec, time_limit_s=5)
