"""planner: choose how to train an LLM (tp/pp/dp, micro-batch, schedule, recompute, ZeRO) and where.

Public API:
    spec = planner.load_spec(path)
    sol = planner.solve(spec, method="auto", time_limit_s=None, seed=None)
    est = planner.estimate(spec, config, mapping=None)
    sim = planner.simulate(spec, config, mapping=None)
"""
from __future__ import annotations

__version__ = "0.1.0"

from planner.config import ParallelConfig
from planner.errors import InfeasibleError, PlannerError, SpecError
from planner.spec import Spec, load_cluster, load_model, load_spec, parse_spec


# The modules planner.solve and planner.simulate are loaded before the functions of the same name
# are defined: importing a submodule binds its name on the package, so a lazy import inside the
# wrapper would replace `planner.solve` by the module after the first call.
from planner.simulate import simulate as _simulate  # noqa: E402
from planner.solve import estimate_plan as _estimate_plan  # noqa: E402
from planner.solve import solve as _solve  # noqa: E402


def solve(spec, **kwargs):
    return _solve(spec, **kwargs)


def estimate(spec, config, mapping=None, **kwargs):
    return _estimate_plan(spec, config, mapping, **kwargs)


def simulate(spec, config, mapping=None, **kwargs):
    return _simulate(spec, config, mapping, **kwargs)


__all__ = ["ParallelConfig", "InfeasibleError", "PlannerError", "SpecError", "Spec", "load_cluster", "load_model",
           "load_spec", "parse_spec", "solve", "estimate", "simulate", "__version__"]
