"""What a mapping solver returns."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MappingResult:
    assign: np.ndarray       # rows x cols -> index into problem.nodes
    objective: float         # seconds, MappingProblem.objective (worst case over scenarios when robust)
    bound: float             # proven lower bound on the objective (seconds)
    status: str              # OPTIMAL | FEASIBLE | TIME_LIMIT | HEURISTIC
    wall_s: float
    method: str
    work_s: float = 0.0      # work seconds spent (mapping/work.py), where the solver counts them

    @property
    def gap(self) -> float:
        return max(0.0, (self.objective - self.bound) / self.objective) if self.objective > 0 else 0.0
