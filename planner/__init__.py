"""planner: choose how to train an LLM (tp/pp/dp, micro-batch, schedule, recompute, ZeRO) and where.

Public API (each name is imported on first use, so `import planner` and `planner --help` stay fast):
    spec = planner.load_spec(path)
    sol = planner.solve(spec, method="auto", time_limit_s=None, seed=None)
    est = planner.estimate(spec, config, mapping=None)
    sim = planner.simulate(spec, config, mapping=None)
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> (module, attribute); no subpackage shares a name with a function here, so the
# import system never rebinds one of these names to a module.
_API = {
    "ParallelConfig": ("planner.config", "ParallelConfig"),
    "InfeasibleError": ("planner.errors", "InfeasibleError"),
    "PlannerError": ("planner.errors", "PlannerError"),
    "SpecError": ("planner.errors", "SpecError"),
    "Spec": ("planner.spec", "Spec"),
    "load_cluster": ("planner.spec", "load_cluster"),
    "load_model": ("planner.spec", "load_model"),
    "load_spec": ("planner.spec", "load_spec"),
    "parse_spec": ("planner.spec", "parse_spec"),
    "solve": ("planner.search.solve", "solve"),
    "estimate": ("planner.search.solve", "estimate_plan"),
    "simulate": ("planner.simulator", "simulate"),
}

__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    try:
        module, attr = _API[name]
    except KeyError:
        raise AttributeError(f"module 'planner' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
