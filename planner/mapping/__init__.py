"""Worker-to-GPU mapping: the problem (shared objective), exact CP-SAT and annealing solvers."""
from planner.mapping.problem import Layout, MappingProblem, layouts, worker_table

__all__ = ["Layout", "MappingProblem", "layouts", "worker_table"]
