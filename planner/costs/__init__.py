"""Cost models: memory, compute and communication. Every solver and the simulator use these."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from planner.costs.comm import CommModel
from planner.costs.compute import ComputeModel, StageTimes, load_profile
from planner.costs.memory import AnalyticalMemory, MemoryBreakdown

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
# shipped compute profiles by GPU generation (A100: fitted on vTrain's measured iterations; H100: a layer fit on one
# H100, its fp8 speed-up measured on an H200, its steady-state slowdown on two H100 leases; H200: the H100's with the
# HBM ratio and the H200's own steady-state slowdown; B200: the H100's with the HBM ratio 8000/3350, the rest carried
# over, an assumption (benchmarks/make_b200_profile.py; a GB200, the same die at 1,200 W, matches it too);
# V100: documented defaults). Each file's "fit" record says which values were measured.
SHIPPED_COMPUTE = {"A100": "a100_compute_profile.json", "H100": "h100_compute_profile.json",
                   "V100": "v100_compute_profile.json",
                   "H200": "h200_compute_profile.json", "B200": "b200_compute_profile.json"}


@dataclass(frozen=True)
class Costs:
    compute: object = field(default_factory=ComputeModel)     # .stage_times(model, cluster, training, cfg)
    memory: object = field(default_factory=AnalyticalMemory)  # .stage_memory(model, cluster, training, cfg, stage)
    comm: CommModel = field(default_factory=CommModel)


def costs_with_compute(compute: ComputeModel, memory=None) -> Costs:
    """Costs whose communication model is the compute model's own (one set of links for both)."""
    return Costs(compute=compute, memory=memory or AnalyticalMemory(), comm=compute.comm)


def shipped_compute_profile(gpu_type: str) -> str | None:
    for key, fname in SHIPPED_COMPUTE.items():
        if key.lower() in gpu_type.lower():
            path = os.path.join(DATA, fname)
            return path if os.path.exists(path) else None
    return None


@functools.lru_cache(maxsize=16)
def _load(path: str) -> ComputeModel:
    return load_profile(path)


@functools.lru_cache(maxsize=64)
def _fitted_on_cpu(path: str) -> bool:
    """Whether a compute profile's fit record says it was measured on a CPU (`planner fit compute` writes
    fit.device from the profiled samples since Nov 27)."""
    import json
    try:
        with open(path) as fh:
            dev = (json.load(fh).get("fit") or {}).get("device") or []
        return "cpu" in ([dev] if isinstance(dev, str) else list(dev))
    except (OSError, ValueError, AttributeError, TypeError):     # unreadable or odd: no warning; _load judges the file
        return False


_WARNED: set = set()
_QUIET = False      # batch workers: the parent warned for their clusters up front (warn_cpu_profiles)


def quiet_profile_warnings() -> None:
    """In a batch worker process: no CPU-profile warnings (each worker would print its own copy)."""
    global _QUIET
    _QUIET = True


def warn_cpu_profiles(clusters) -> None:
    """The CPU-profile warning for each of a run's clusters, once, before its workers start (planner batch)."""
    for cl in clusters:
        named = (getattr(cl, "profiles", None) or {}).get("compute")
        if named:
            _warn_cpu_profile(cl, named)


def _warn_cpu_profile(cluster, path: str) -> None:
    """Once per (cluster, profile): a GPU cluster planning with CPU timings plans at the CPU's speed (tryout 8)."""
    key = (getattr(cluster, "name", ""), path)
    # a cluster that describes the CPU itself (gpu.type naming a cpu) is the one a CPU fit is right for
    on_cpu = "cpu" in str(getattr(cluster.gpu, "type", "") or "").lower()
    if _QUIET or key in _WARNED or on_cpu or not _fitted_on_cpu(path):
        return
    _WARNED.add(key)
    import sys
    src = getattr(cluster, "source", None)
    where = f"cluster {key[0]}" + (f" ({src}, gpu.type {cluster.gpu.type})" if src else f" ({cluster.gpu.type})")
    print(f"planner: warning: {where} uses the compute profile {path}, fitted on CPU "
          "timings: its plans run at that CPU's speed (profile the GPU: benchmarks/profile_gpu.sh)", file=sys.stderr)


def default_costs(cluster=None) -> Costs:
    """The cost models for a cluster: its own fitted profiles where it names them, shipped ones otherwise."""
    from planner.costs.learned import default_memory_estimator  # late: learned imports this package's modules
    memory = default_memory_estimator(cluster)
    if cluster is None:
        return Costs(memory=memory)
    named = (getattr(cluster, "profiles", None) or {}).get("compute")
    path = named or shipped_compute_profile(cluster.gpu.type)
    if not path:
        return Costs(memory=memory)
    if named:
        _warn_cpu_profile(cluster, named)
    return costs_with_compute(_load(path), memory)


__all__ = ["Costs", "CommModel", "ComputeModel", "StageTimes", "AnalyticalMemory", "MemoryBreakdown", "default_costs",
           "costs_with_compute", "shipped_compute_profile"]
