"""CP-SAT solver settings shared by the exact model (cpsat.py) and the pre-solve bounds (bounds.py), and a
debug hook to look at a model without editing code.

Debug hook: solve_exact(..., debug=Debug(export="m.pb", params="log_search_progress:true")), or the
environment variables PLANNER_CPSAT_EXPORT (where to write the model before solving; a name ending in "txt"
gives the text format, "{n}" in it numbers the models of one process) and PLANNER_CPSAT_PARAMS (extra
SatParameters in text format, applied after the planner's own, so they override them).
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from planner import interrupt
from planner.mapping import work

EXPORT_ENV = "PLANNER_CPSAT_EXPORT"
PARAMS_ENV = "PLANNER_CPSAT_PARAMS"

_exported = itertools.count()
WALL_NEAR = 0.05      # seconds: a call that ran to within this of its wall limit was stopped by it


@dataclass(frozen=True)
class Debug:
    export: str | None = None   # write the model here before solving (model.export_to_file)
    params: str = ""            # extra SatParameters, text format ("num_workers:8 log_search_progress:true")

    @classmethod
    def from_env(cls) -> Debug | None:
        export = os.environ.get(EXPORT_ENV) or None
        params = os.environ.get(PARAMS_ENV, "")
        return cls(export, params) if (export or params) else None


def new_solver(time_limit_s: float, workers: int, seed: int, wall_s: float | None = None,
               ignore: tuple[str, ...] = ()) -> cp_model.CpSolver:
    """The planner's settings: a deterministic portfolio (interleave_search with a fixed number of workers:
    OR-Tools' DeterministicLoop, whose batch size is 3 x workers), so the same seed and the same
    deterministic-time limit give the same answer on any load; the wall clock (wall_s, default the same
    number of seconds) is a safety stop. ignore: subsolvers left out of the portfolio (SatParameters'
    ignore_subsolvers; see cpsat.PACED_IGNORE)."""
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = float(time_limit_s if wall_s is None else wall_s)
    prm.num_workers = max(1, workers)
    prm.random_seed = int(seed)
    prm.interleave_search = True
    # one task per worker per batch: a batch runs to its end past the deterministic limit, and with the default
    # 3 x workers a 1.0 limit was overrun to 2.4 (16 nodes); with 2 the overrun is ~0.5
    prm.interleave_batch_size = max(1, workers)
    prm.max_deterministic_time = float(time_limit_s)
    prm.catch_sigint_signal = False     # Ctrl-C belongs to the command line (planner.interrupt)
    prm.ignore_subsolvers.extend(ignore)
    return solver


def run(solver: cp_model.CpSolver, model: cp_model.CpModel) -> int:
    """solver.solve(model), stoppable by planner.interrupt.request(); once a stop is requested, no new
    solve starts (UNKNOWN, as a time limit with no solution). Its deterministic time is charged to the open
    work meters (work.py)."""
    solver.parameters.catch_sigint_signal = False
    left = work.wall_left()
    if left is not None:
        # inside a work-limited search the one wall-clock stop is its safety stop (work.py), never a clock
        # limit of this call's own: those fire earlier on a loaded machine and would change the answer
        solver.parameters.max_time_in_seconds = max(0.01, left)
    t0 = time.perf_counter()
    with interrupt.running(solver):
        if interrupt.requested():
            return cp_model.UNKNOWN
        st = solver.solve(model)
    if left is not None and st not in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and \
            time.perf_counter() - t0 >= solver.parameters.max_time_in_seconds - WALL_NEAR:
        work.note_wall()
    # the work the caller's budget pays (work.py): CP-SAT's deterministic time and the call's fixed cost
    work.charge(solver.response_proto.deterministic_time + work.CPSAT_CALL_WORK_S)
    return st


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel, debug: Debug | None = None) -> int:
    """solver.solve(model), after the debug hook (the argument, else the environment) if any."""
    debug = debug or Debug.from_env()
    if debug is not None:
        if debug.params and not solver.parameters.merge_text_format(debug.params):
            raise ValueError(f"not CP-SAT parameters in text format: {debug.params!r}")
        if debug.export:
            model.export_to_file(debug.export.replace("{n}", str(next(_exported))))
    return run(solver, model)
