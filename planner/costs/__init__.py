"""Cost models: memory, compute and communication. Every solver and the simulator use these."""
from __future__ import annotations

from dataclasses import dataclass, field

from planner.costs.comm import CommModel
from planner.costs.compute import ComputeModel, StageTimes
from planner.costs.memory import AnalyticalMemory, MemoryBreakdown


@dataclass(frozen=True)
class Costs:
    compute: object = field(default_factory=ComputeModel)     # .stage_times(model, cluster, training, cfg)
    memory: object = field(default_factory=AnalyticalMemory)  # .stage_memory(model, cluster, training, cfg, stage)
    comm: CommModel = field(default_factory=CommModel)


def default_costs(cluster=None) -> Costs:
    """The cost models for a cluster: its own fitted profiles where it names them, shipped ones otherwise."""
    from planner.costs.learned import default_memory_estimator   # late: learned imports this package's modules
    return Costs(memory=default_memory_estimator(cluster))


__all__ = ["Costs", "CommModel", "ComputeModel", "StageTimes", "AnalyticalMemory", "MemoryBreakdown", "default_costs"]
