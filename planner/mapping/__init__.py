"""Worker-to-GPU mapping: the problem (shared objective), exact CP-SAT and annealing solvers, and the public
entry point solve (portfolio.py: the annealer and CP-SAT on one deterministic budget)."""
from planner.mapping.portfolio import PortfolioResult, solve, work_budget
from planner.mapping.problem import Layout, MappingProblem, layouts, worker_table

__all__ = ["Layout", "MappingProblem", "PortfolioResult", "layouts", "solve", "work_budget", "worker_table"]
